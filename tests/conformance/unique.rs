//! Unique jobs: one queued job per key while it waits, runs or waits for a retry;
//! duplicates kept, moved or replaced by policy; the key freed when the job
//! leaves the queue or its ttl runs out.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redjob::backend::{Backend, DeadLetterEntry, Reschedule, Settle};
use redjob::client::EnqueueOptions;
use redjob::queue::{
    MAX_UNIQUE_KEY, OnDuplicate, QueueOptions, Queues, SendMessage, SendOutcome, Sent, Unique,
    UniqueUntil,
};
use redjob::{Error, Job, JobContext, JobError, RetryPolicy, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{start_serving, wait_until};

const LONG: Duration = Duration::from_secs(60);
const Q: &str = "uniq";

async fn send(env: &Env, msgs: &[SendMessage]) -> Vec<Sent> {
    Backend::send(&env.client.backend(), Q, msgs, &QueueOptions::default())
        .await
        .unwrap()
}

fn keyed(body: &str, key: &str, policy: OnDuplicate) -> SendMessage {
    SendMessage::new(body).unique(Unique::new(key).on_duplicate(policy))
}

fn outcomes(sent: &[Sent]) -> Vec<SendOutcome> {
    sent.iter().map(|s| s.outcome).collect()
}

/// The bodies of every message of the queue, due or not, in due order.
async fn bodies(env: &Env) -> Vec<String> {
    env.all_messages(Q)
        .await
        .into_iter()
        .map(|(_, body, _)| body)
        .collect()
}

pub async fn keep_returns_the_queued_job_and_changes_nothing(env: &Env) {
    let first = send(env, &[keyed("a", "k1", OnDuplicate::Keep)]).await;
    let again = send(
        env,
        &[keyed("b", "k1", OnDuplicate::Keep).delay(Duration::from_secs(5))],
    )
    .await;
    assert_eq!(outcomes(&first), [SendOutcome::Added]);
    assert_eq!(outcomes(&again), [SendOutcome::Duplicate]);
    assert_eq!(first[0].id, again[0].id);
    // another key, and a plain message, are sent beside it
    let other = send(
        env,
        &[keyed("c", "k2", OnDuplicate::Keep), SendMessage::new("d")],
    )
    .await;
    assert_eq!(outcomes(&other), [SendOutcome::Added, SendOutcome::Added]);
    let got = env.queues().pop_due(Q, 10).await.unwrap();
    let got: Vec<_> = got.iter().map(|m| (m.id, m.body.as_str())).collect();
    assert_eq!(
        got,
        [(first[0].id, "a"), (other[0].id, "c"), (other[1].id, "d")]
    );
    assert_eq!(env.queues().attributes(Q).await.unwrap().totalsent, 3);
}

pub async fn a_duplicate_in_one_batch_meets_the_first(env: &Env) {
    let sent = send(
        env,
        &[
            keyed("a", "same", OnDuplicate::Keep),
            keyed("b", "same", OnDuplicate::Keep),
            keyed("c", "same", OnDuplicate::Replace),
        ],
    )
    .await;
    assert_eq!(
        outcomes(&sent),
        [
            SendOutcome::Added,
            SendOutcome::Duplicate,
            SendOutcome::Replaced
        ]
    );
    assert!(sent.iter().all(|s| s.id == sent[0].id));
    assert_eq!(bodies(env).await, ["c"]);
    // held at priority 2; one send of two calls (priorities 5, then 2): applied
    // in order, the last wins
    let held = send(
        env,
        &[keyed("h", "two", OnDuplicate::Keep).priority(2).delay(LONG)],
    )
    .await;
    let both = send(
        env,
        &[
            keyed("a", "two", OnDuplicate::Replace).priority(5),
            keyed("b", "two", OnDuplicate::Replace).priority(2),
        ],
    )
    .await;
    assert_eq!(outcomes(&both), [SendOutcome::Replaced; 2]);
    assert!(both.iter().all(|s| s.id == held[0].id));
    let got = env.client.backend().fetch(Q, 10, LONG).await.unwrap().jobs;
    let got: Vec<_> = got
        .iter()
        .map(|d| (d.id, d.body.clone(), d.token.priority()))
        .collect();
    assert!(got.contains(&(held[0].id, b"b".to_vec(), 2)), "{got:?}");
}

pub async fn replace_delay_moves_a_waiting_job_earlier_and_later(env: &Env) {
    let backend = env.client.backend();
    let later = |d| keyed("x", "move", OnDuplicate::ReplaceDelay).delay(d);
    let first = send(env, &[later(LONG)]).await;
    assert!(backend.fetch(Q, 10, LONG).await.unwrap().jobs.is_empty());
    // moved to now: due at once
    let now = send(env, &[later(Duration::ZERO)]).await;
    assert_eq!(outcomes(&now), [SendOutcome::Moved]);
    assert_eq!(now[0].id, first[0].id);
    assert_eq!(env.visible_now(Q).await, 1);
    // moved back to later: not due
    let back = send(
        env,
        &[keyed("y", "move", OnDuplicate::ReplaceDelay).delay(LONG)],
    )
    .await;
    assert_eq!(outcomes(&back), [SendOutcome::Moved]);
    assert_eq!(env.visible_now(Q).await, 0);
    assert!(backend.fetch(Q, 10, LONG).await.unwrap().jobs.is_empty());
    // one job, its body the first one's, due a minute from the last send
    let all = env.all_messages(Q).await;
    assert_eq!(all.len(), 1);
    assert_eq!((all[0].0, all[0].1.as_str()), (first[0].id, "x"));
    let ahead = all[0].2 as i64 - unix_ms(env.now().await) as i64;
    assert!((55_000..=60_001).contains(&ahead), "due in {ahead} ms");
}

pub async fn replace_swaps_body_due_time_and_priority_keeping_the_id(env: &Env) {
    let backend = env.client.backend();
    let first = send(
        env,
        &[keyed("old", "deb", OnDuplicate::Replace).delay(LONG)],
    )
    .await;
    send(env, &[SendMessage::new("plain").priority(3)]).await;
    let new = send(
        env,
        &[keyed("new", "deb", OnDuplicate::Replace).priority(5)],
    )
    .await;
    assert_eq!(outcomes(&new), [SendOutcome::Replaced]);
    assert_eq!(new[0].id, first[0].id);
    let got = backend.fetch(Q, 10, LONG).await.unwrap();
    let got: Vec<_> = got
        .jobs
        .iter()
        .map(|d| {
            (
                d.id,
                String::from_utf8_lossy(&d.body).into_owned(),
                d.token.priority(),
            )
        })
        .collect();
    assert_eq!(got[0], (first[0].id, "new".to_string(), 5));
    assert_eq!(got.len(), 2, "one job for the key: {got:?}");
    // held at priority 5, met by sends at others: kept, moved, replaced there
    let second = send(
        env,
        &[keyed("a", "deb2", OnDuplicate::Keep)
            .priority(5)
            .delay(LONG)],
    )
    .await;
    let kept = send(env, &[keyed("b", "deb2", OnDuplicate::Keep).priority(-2)]).await;
    let moved = send(
        env,
        &[keyed("c", "deb2", OnDuplicate::ReplaceDelay).priority(1)],
    )
    .await;
    let replaced = send(
        env,
        &[keyed("d", "deb2", OnDuplicate::Replace).priority(-2)],
    )
    .await;
    assert_eq!(
        [kept[0], moved[0], replaced[0]].map(|s| (s.id, s.outcome)),
        [
            (second[0].id, SendOutcome::Duplicate),
            (second[0].id, SendOutcome::Moved),
            (second[0].id, SendOutcome::Replaced)
        ]
    );
    let got = backend.fetch(Q, 10, LONG).await.unwrap().jobs;
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].id, &got[0].body[..], got[0].token.priority()),
        (second[0].id, &b"d"[..], -2)
    );
}

pub async fn a_delivered_job_blocks_duplicates_until_it_succeeds(env: &Env) {
    let backend = env.client.backend();
    let msg = |p| keyed("job", "run", p);
    let id = send(env, &[msg(OnDuplicate::Keep)]).await[0].id;
    let leased = backend.fetch(Q, 10, LONG).await.unwrap().jobs;
    assert_eq!(leased.len(), 1);
    // running: every policy keeps it as it is
    for p in [
        OnDuplicate::Keep,
        OnDuplicate::ReplaceDelay,
        OnDuplicate::Replace,
    ] {
        let sent = send(env, &[msg(p)]).await;
        assert_eq!(
            (sent[0].id, sent[0].outcome),
            (id, SendOutcome::Duplicate),
            "{p:?}"
        );
    }
    // waiting for a retry: still held, still not replaced
    let retry = Settle {
        reschedules: vec![Reschedule {
            id,
            token: leased[0].token,
            delay: Duration::from_secs(1),
            deliveries: 1,
            release: false,
            error: None,
        }],
        ..Settle::default()
    };
    assert_eq!(backend.settle(Q, &retry).await.unwrap().rescheduled, 1);
    let sent = send(env, &[msg(OnDuplicate::Replace).delay(Duration::ZERO)]).await;
    assert_eq!((sent[0].id, sent[0].outcome), (id, SendOutcome::Duplicate));
    assert_eq!(env.visible_now(Q).await, 0, "the retry's backoff was kept");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let again = backend.fetch(Q, 10, LONG).await.unwrap().jobs;
    assert_eq!((again[0].id, again[0].token.attempt()), (id, 2));
    // a stale token cannot free the key
    let stale = Settle {
        acks: vec![(id, leased[0].token)],
        ..Settle::default()
    };
    assert_eq!(backend.settle(Q, &stale).await.unwrap().acked, 0);
    assert_eq!(send(env, &[msg(OnDuplicate::Keep)]).await[0].id, id);
    // success frees it
    let ack = Settle {
        acks: vec![(id, again[0].token)],
        ..Settle::default()
    };
    assert_eq!(backend.settle(Q, &ack).await.unwrap().acked, 1);
    assert_eq!(env.unique_entries(Q).await, 0, "success freed the key");
    let fresh = send(env, &[msg(OnDuplicate::Keep)]).await;
    assert_eq!(fresh[0].outcome, SendOutcome::Added);
    assert_ne!(fresh[0].id, id);
    // received RSMQ-style: delivered too
    let other = send(env, &[keyed("r", "recv", OnDuplicate::Keep)]).await[0].id;
    let got = env.queues().receive_batch(Q, 10, Some(LONG)).await.unwrap();
    assert!(got.iter().any(|m| m.id == other));
    let sent = send(env, &[keyed("r2", "recv", OnDuplicate::Replace)]).await;
    assert_eq!(
        (sent[0].id, sent[0].outcome),
        (other, SendOutcome::Duplicate)
    );
}

pub async fn dead_letters_deletes_pops_and_queue_deletes_free_keys(env: &Env) {
    let backend = env.client.backend();
    let q = env.queues();
    let ids: Vec<_> = send(
        env,
        &[
            keyed("a", "dead", OnDuplicate::Keep),
            keyed("b", "deleted", OnDuplicate::Keep),
            keyed("c", "popped", OnDuplicate::Keep).priority(4),
        ],
    )
    .await
    .iter()
    .map(|s| s.id)
    .collect();
    assert!(q.delete(Q, &ids[1]).await.unwrap());
    let popped = q.pop_due(Q, 1).await.unwrap();
    assert_eq!(popped[0].id, ids[2]);
    let leased = backend.fetch(Q, 10, LONG).await.unwrap().jobs;
    let dead = Settle {
        dead: vec![DeadLetterEntry {
            id: ids[0],
            token: leased[0].token,
            error: "gave up".into(),
        }],
        ..Settle::default()
    };
    assert_eq!(backend.settle(Q, &dead).await.unwrap().dead, 1);
    assert_eq!(env.unique_entries(Q).await, 0, "every key freed");
    let again = send(
        env,
        &[
            keyed("a", "dead", OnDuplicate::Keep),
            keyed("b", "deleted", OnDuplicate::Keep),
            keyed("c", "popped", OnDuplicate::Keep),
        ],
    )
    .await;
    assert_eq!(outcomes(&again), [SendOutcome::Added; 3]);
    // a queue deleted and created again starts with no keys held
    q.delete_queue(Q).await.unwrap();
    q.create_queue(Q, QueueOptions::default()).await.unwrap();
    let after = send(env, &[keyed("a", "dead", OnDuplicate::Keep)]).await;
    assert_eq!(outcomes(&after), [SendOutcome::Added]);
}

/// A dead letter's job gave its unique key up; requeued, it waits in the
/// queue again and holds the key again (a duplicate meets it), unless
/// another job holds the key by then: such a letter stays dead, as does the
/// second of two letters of one key requeued together.
pub async fn a_dead_letter_requeued_takes_its_key_again_unless_another_job_holds_it(env: &Env) {
    use redjob::ops::{Admin, Spread};
    let keep = OnDuplicate::Keep;
    let a = send(env, &[keyed("a", "ka", keep)]).await[0].id;
    let b = send(env, &[keyed("b", "kb", keep)]).await[0].id;
    let c1 = send(env, &[keyed("c1", "kc", keep)]).await[0].id;
    assert_eq!(env.kill_due(Q, 10).await.len(), 3);
    // kc is free once c1 died: c2 takes it, and dies too
    let c2 = send(env, &[keyed("c2", "kc", keep)]).await[0];
    assert_eq!(c2.outcome, SendOutcome::Added);
    assert_eq!(env.kill_due(Q, 10).await, [c2.id]);
    // kb is held by a new job when b is requeued
    let b2 = send(env, &[keyed("b2", "kb", keep)]).await[0];
    assert_eq!(b2.outcome, SendOutcome::Added);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let n = env
        .client
        .requeue_dead(Q, &[a, b, c1, c2.id], Spread::NOW)
        .await
        .unwrap();
    assert_eq!(n, 2, "a and c1 requeued; b and c2 left dead");
    let dead: Vec<_> = env
        .client
        .dead_letters(Q, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(dead.len(), 2);
    assert!(dead.contains(&b) && dead.contains(&c2.id), "{dead:?}");
    // the requeued letters hold their keys: a duplicate meets them
    let again = send(env, &[keyed("a'", "ka", keep), keyed("c'", "kc", keep)]).await;
    assert_eq!(
        again.iter().map(|s| (s.id, s.outcome)).collect::<Vec<_>>(),
        [(a, SendOutcome::Duplicate), (c1, SendOutcome::Duplicate)]
    );
    // once kb is free, b is requeued with it
    assert!(env.queues().delete(Q, &b2.id).await.unwrap());
    let n = env.client.requeue_dead(Q, &[b], Spread::NOW).await.unwrap();
    assert_eq!(n, 1);
    let dup = send(env, &[keyed("b'", "kb", keep)]).await[0];
    assert_eq!((dup.id, dup.outcome), (b, SendOutcome::Duplicate));
    // three keys, each with its holder's back link
    assert_eq!(env.unique_entries(Q).await, 6);
}

pub async fn a_key_with_a_ttl_is_free_after_it(env: &Env) {
    let backend = env.client.backend();
    let msg = || {
        SendMessage::new("t")
            .delay(LONG)
            .unique(Unique::new("ttl").ttl(Duration::from_secs(1)))
    };
    let first = send(env, &[msg()]).await[0];
    assert_eq!(send(env, &[msg()]).await[0].outcome, SendOutcome::Duplicate);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = send(env, &[msg()]).await[0];
    assert_eq!(second.outcome, SendOutcome::Added);
    assert_ne!(second.id, first.id);
    // the first job leaving does not free the key its successor holds now
    assert!(env.queues().delete(Q, &first.id).await.unwrap());
    let third = send(env, &[msg()]).await[0];
    assert_eq!(
        (third.id, third.outcome),
        (second.id, SendOutcome::Duplicate)
    );
    assert!(backend.fetch(Q, 10, LONG).await.unwrap().jobs.is_empty());
}

pub async fn bad_unique_input_is_refused_and_sends_nothing(env: &Env) {
    let backend = env.client.backend();
    let good = keyed("ok", "fine", OnDuplicate::Keep);
    for bad in [
        Unique::new(""),
        Unique::new("k".repeat(MAX_UNIQUE_KEY + 1)),
        Unique::new("k").ttl(Duration::ZERO),
        Unique::new("k").ttl(Duration::from_secs(u64::MAX)),
    ] {
        let err = Backend::send(
            &backend,
            Q,
            &[good.clone(), SendMessage::new("x").unique(bad.clone())],
            &QueueOptions::default(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, Error::InvalidValue { .. }), "{bad:?}: {err}");
    }
    // keys of any bytes up to the limit are fine
    let edge = send(
        env,
        &[
            keyed("a", &"k".repeat(MAX_UNIQUE_KEY), OnDuplicate::Keep),
            keyed("b", "spaces and : colons \u{e9}", OnDuplicate::Keep),
        ],
    )
    .await;
    assert_eq!(outcomes(&edge), [SendOutcome::Added; 2]);
    assert_eq!(env.queues().pop_due(Q, 10).await.unwrap().len(), 2);
    // a typed enqueue with an oversized explicit key
    let err = env
        .client
        .enqueue_with(
            &Once { n: 1 },
            EnqueueOptions::new().unique_key("k".repeat(513)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidValue {
                what: "unique key",
                ..
            }
        ),
        "{err}"
    );
}

pub async fn eight_producers_racing_on_one_key_make_one_job(env: &Env) {
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = env.another_client().await;
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..20 {
                got.push(
                    client
                        .enqueue_outcome(&Once { n: 7 }, EnqueueOptions::new())
                        .await
                        .unwrap(),
                );
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let added: Vec<_> = all.iter().filter(|s| s.outcome.is_added()).collect();
    assert_eq!(added.len(), 1, "{all:?}");
    assert!(all.iter().all(|s| s.id == added[0].id));
    assert_eq!(env.queues().pop_due(Q, 100).await.unwrap().len(), 1);
}

pub async fn typed_unique_jobs_hold_their_key_through_a_retry_until_success(env: &Env) {
    let client = env.client.clone();
    // derived keys: equal arguments are one job, other arguments another
    let a = client.enqueue(&Flaky { n: 1 }).await.unwrap();
    assert_eq!(client.enqueue(&Flaky { n: 1 }).await.unwrap(), a);
    let b = client.enqueue(&Flaky { n: 2 }).await.unwrap();
    assert_ne!(a, b);
    // an explicit key joins different arguments
    let opts = EnqueueOptions::new().unique_key("flaky-3");
    let c = client
        .enqueue_with(&Flaky { n: 3 }, opts.clone())
        .await
        .unwrap();
    assert_eq!(client.enqueue_with(&Flaky { n: 4 }, opts).await.unwrap(), c);
    let runs = Arc::new(AtomicU32::new(0));
    let worker = Worker::builder(client.backend())
        .queue(Q)
        .handle_signals(false)
        .data(runs.clone())
        .retry(RetryPolicy::default().jitter(false))
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    // each failed its first run and waits for its retry (2 s backoff at least)
    assert!(wait_until(Duration::from_secs(10), || runs.load(Ordering::SeqCst) >= 3).await);
    assert_eq!(
        client.enqueue(&Flaky { n: 1 }).await.unwrap(),
        a,
        "held while retrying"
    );
    assert!(
        wait_until(Duration::from_secs(30), || runs.load(Ordering::SeqCst) == 6).await,
        "ran {}",
        runs.load(Ordering::SeqCst)
    );
    assert!(
        crate::common::wait_for(Duration::from_secs(10), || async {
            client.stats(Q).await.unwrap().processed == 3
        })
        .await
    );
    running.stop().await;
    let fresh = client.enqueue(&Flaky { n: 1 }).await.unwrap();
    assert_ne!(fresh, a, "free after success");
}

fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "unique_once", queue = "uniq", unique)]
struct Once {
    n: u32,
}

impl Job for Once {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Fails its first run.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "unique_flaky",
    queue = "uniq",
    unique = "replace",
    backoff = "2s"
)]
struct Flaky {
    n: u32,
}

impl Job for Flaky {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<AtomicU32>>()?.fetch_add(1, Ordering::SeqCst);
        if ctx.attempt() == 1 {
            return Err(JobError::retry("first run fails"));
        }
        Ok(())
    }
}

/// What the chains below log, and the client their handlers enqueue with.
struct Steps {
    client: redjob::Client,
    /// (job name, run, what its handler's enqueue of its next run did, and
    /// whether that was a job other than the running one)
    log: std::sync::Mutex<Vec<(&'static str, u32, SendOutcome, bool)>>,
}

impl Steps {
    fn of(&self, name: &str) -> Vec<(u32, SendOutcome, bool)> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|(n, ..)| *n == name)
            .map(|(_, run, outcome, other)| (*run, *outcome, *other))
            .collect()
    }
}

/// A chain's run: enqueues its next run (the same arguments, so the same
/// unique key) from its handler until its third run.
async fn chain_step<J: Job>(ctx: &JobContext, job: &J) -> Result<(), JobError> {
    let steps = ctx.data::<Steps>()?;
    let run = {
        let log = steps.log.lock().unwrap();
        log.iter().filter(|(n, ..)| *n == J::NAME).count() as u32 + 1
    };
    if run >= 3 {
        steps
            .log
            .lock()
            .unwrap()
            .push((J::NAME, run, SendOutcome::Added, false));
        return Ok(());
    }
    let next = steps
        .client
        .enqueue_outcome(job, EnqueueOptions::new().delay(Duration::from_millis(50)))
        .await
        .map_err(JobError::fatal)?;
    steps
        .log
        .lock()
        .unwrap()
        .push((J::NAME, run, next.outcome, next.id != ctx.id()));
    Ok(())
}

/// A self-rescheduling chain of a type unique until it starts: the key is
/// freed as a run starts, so the run's enqueue of the next makes a new job,
/// and the chain goes on; a type unique until done (the default) meets its
/// own running job, a duplicate, and its chain stops there. Before either
/// starts, a second enqueue is a duplicate as ever.
pub async fn a_job_unique_until_start_enqueues_its_next_run_from_its_handler(env: &Env) {
    let client = env.client.clone();
    let later = EnqueueOptions::new().delay(Duration::from_millis(300));
    let first = client
        .enqueue_outcome(&StartChain { feed: 7 }, later.clone())
        .await
        .unwrap();
    let dup = client
        .enqueue_outcome(&StartChain { feed: 7 }, EnqueueOptions::new())
        .await
        .unwrap();
    assert_eq!(
        (dup.id, dup.outcome),
        (first.id, SendOutcome::Duplicate),
        "held while it waits"
    );
    client
        .enqueue_outcome(&DoneChain { feed: 7 }, later)
        .await
        .unwrap();
    let steps = Arc::new(Steps {
        client: client.clone(),
        log: Default::default(),
    });
    let worker = Worker::builder(client.backend())
        .queue(Q)
        .handle_signals(false)
        .data(steps.clone())
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    let done = wait_until(Duration::from_secs(20), || {
        steps.of("unique_start_chain").len() == 3 && steps.of("unique_done_chain").len() == 1
    })
    .await;
    // a little longer: a duplicate's chain would have run again by now
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    assert!(done, "{:?}", steps.log.lock().unwrap());
    assert_eq!(
        steps.of("unique_start_chain"),
        [
            (1, SendOutcome::Added, true),
            (2, SendOutcome::Added, true),
            (3, SendOutcome::Added, false)
        ],
        "each run's enqueue of the next made a new job, which ran"
    );
    assert_eq!(
        steps.of("unique_done_chain"),
        [(1, SendOutcome::Duplicate, false)],
        "the default holds the key while the job runs"
    );
}

/// A job unique until it starts gave its key up when its first run
/// started: waiting for its retry, it holds none, and an enqueue of the key
/// makes a new job (which holds the key while it waits); a job unique until
/// done (the default) holds its key through the retry, as before.
pub async fn a_retry_of_a_job_unique_until_start_lets_a_new_job_of_its_key_in(env: &Env) {
    let client = env.client.clone();
    let start = EnqueueOptions::new().unique_until(UniqueUntil::Start);
    let a = client
        .enqueue_with(&Stubborn { n: 1 }, start.clone())
        .await
        .unwrap();
    let b = client.enqueue(&Stubborn { n: 2 }).await.unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let worker = Worker::builder(client.backend())
        .queue(Q)
        .handle_signals(false)
        .data(runs.clone())
        .retry(RetryPolicy::default().jitter(false))
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    // each failed its first run, and waits an hour for its retry
    assert!(wait_until(Duration::from_secs(10), || runs.load(Ordering::SeqCst) == 2).await);
    let fresh = client
        .enqueue_outcome(&Stubborn { n: 1 }, start.clone().delay(LONG))
        .await
        .unwrap();
    assert_eq!(
        fresh.outcome,
        SendOutcome::Added,
        "a's key was freed as it started"
    );
    assert_ne!(fresh.id, a);
    let again = client
        .enqueue_outcome(&Stubborn { n: 1 }, start.clone())
        .await
        .unwrap();
    assert_eq!(
        (again.id, again.outcome),
        (fresh.id, SendOutcome::Duplicate),
        "the new job holds the key while it waits"
    );
    let dup = client
        .enqueue_outcome(&Stubborn { n: 2 }, EnqueueOptions::new())
        .await
        .unwrap();
    assert_eq!(
        (dup.id, dup.outcome),
        (b, SendOutcome::Duplicate),
        "the default holds the key through the retry"
    );
    running.stop().await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        env.all_messages(Q).await.len(),
        3,
        "a and b wait for their retry, beside the new job"
    );
}

/// A job unique until it starts, leased by a worker that died before it
/// started the job, still holds its key (a duplicate meets it); the next
/// delivery's start frees it. And its lifetime (`unique_for`) bounds the
/// key while no delivery starts.
pub async fn a_job_unique_until_start_whose_worker_died_before_it_started_frees_its_key_at_the_next_start(
    env: &Env,
) {
    let client = env.client.clone();
    let backend = client.backend();
    let start = EnqueueOptions::new().unique_until(UniqueUntil::Start);
    let a = client
        .enqueue_with(&Stubborn { n: 1 }, start.clone())
        .await
        .unwrap();
    let leased = backend
        .fetch(Q, 10, Duration::from_secs(1))
        .await
        .unwrap()
        .jobs;
    assert_eq!(leased.len(), 1);
    let dup = client
        .enqueue_outcome(&Stubborn { n: 1 }, start.clone())
        .await
        .unwrap();
    assert_eq!(
        (dup.id, dup.outcome),
        (a, SendOutcome::Duplicate),
        "held until a run starts"
    );
    // a lifetime bounds the key of a job that no run starts
    let bounded = start.clone().unique_for(Duration::from_secs(1));
    let c = client
        .enqueue_outcome(&Stubborn { n: 3 }, bounded.clone().delay(LONG))
        .await
        .unwrap();
    assert_eq!(c.outcome, SendOutcome::Added);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let c2 = client
        .enqueue_outcome(&Stubborn { n: 3 }, bounded.delay(LONG))
        .await
        .unwrap();
    assert_eq!(c2.outcome, SendOutcome::Added, "the lifetime ran out");
    assert_ne!(c2.id, c.id);
    // the lease ran out: the next worker's start of it frees the key
    let runs = Arc::new(AtomicU32::new(0));
    let worker = Worker::builder(client.backend())
        .queue(Q)
        .handle_signals(false)
        .data(runs.clone())
        .retry(RetryPolicy::default().jitter(false))
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    assert!(wait_until(Duration::from_secs(10), || runs.load(Ordering::SeqCst) == 1).await);
    running.stop().await;
    let fresh = client
        .enqueue_outcome(&Stubborn { n: 1 }, start.delay(LONG))
        .await
        .unwrap();
    assert_eq!(
        fresh.outcome,
        SendOutcome::Added,
        "freed by the second delivery's start"
    );
    assert_ne!(fresh.id, a);
}

/// A job sent by another language with `"unique_until": "start"` as its
/// envelope's last member, spaced as Python's `json.dumps` writes it, frees
/// its key as its run starts, as one the app enqueued (redjob read the
/// member only as it writes it, without spaces: such a job held its key
/// until done).
pub async fn a_job_whose_envelope_spaces_its_unique_until_member_frees_its_key_at_start(env: &Env) {
    let client = env.client.clone();
    let key = redjob::job::unique_key(&Stubborn { n: 5 }).unwrap();
    let body = r#"{"type": "unique_stubborn", "args": {"n": 5}, "unique_until": "start"}"#;
    env.queues()
        .create_queue(Q, QueueOptions::default())
        .await
        .unwrap();
    let sent = Queues::send_outcomes(
        env.queues(),
        Q,
        &[SendMessage::new(body).unique(Unique::new(key))],
    )
    .await
    .unwrap();
    assert_eq!(sent[0].outcome, SendOutcome::Added);
    let start = EnqueueOptions::new().unique_until(UniqueUntil::Start);
    let dup = client
        .enqueue_outcome(&Stubborn { n: 5 }, start.clone())
        .await
        .unwrap();
    assert_eq!(
        (dup.id, dup.outcome),
        (sent[0].id, SendOutcome::Duplicate),
        "the sent job holds the key while it waits"
    );
    let runs = Arc::new(AtomicU32::new(0));
    let worker = Worker::builder(client.backend())
        .queue(Q)
        .handle_signals(false)
        .data(runs.clone())
        .retry(RetryPolicy::default().jitter(false))
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    // its first run failed, and it waits an hour for its retry
    assert!(wait_until(Duration::from_secs(10), || runs.load(Ordering::SeqCst) == 1).await);
    running.stop().await;
    let fresh = client
        .enqueue_outcome(&Stubborn { n: 5 }, start.delay(LONG))
        .await
        .unwrap();
    assert_eq!(
        fresh.outcome,
        SendOutcome::Added,
        "the key was freed as its run started"
    );
    assert_ne!(fresh.id, sent[0].id);
}

/// Enqueues its next run from its handler; its key is held until a run starts.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "unique_start_chain", queue = "uniq", unique_until = "start")]
struct StartChain {
    feed: u32,
}

impl Job for StartChain {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        chain_step(ctx, self).await
    }
}

/// Enqueues its next run from its handler; its key is held until it is done
/// (the default).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "unique_done_chain", queue = "uniq", unique)]
struct DoneChain {
    feed: u32,
}

impl Job for DoneChain {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        chain_step(ctx, self).await
    }
}

/// Fails every run, retried after an hour.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "unique_stubborn", queue = "uniq", unique, backoff = "1h")]
struct Stubborn {
    n: u32,
}

impl Job for Stubborn {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<AtomicU32>>()?.fetch_add(1, Ordering::SeqCst);
        Err(JobError::retry("fails every run"))
    }
}
