//! Priorities: higher first among due jobs, FIFO within one, one fetch for all
//! levels, delays still honoured, leases and settles at any level, RSMQ's view.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redjob::backend::{Backend, DeadLetterEntry, Reschedule, Settle};
use redjob::client::EnqueueOptions;
use redjob::queue::{QueueOptions, Queues, SendMessage};
use redjob::{Error, Job, JobContext, JobError, JobId, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{start_serving, wait_until};

const LONG: Duration = Duration::from_secs(30);

/// Sends one message per `(body, priority)`, each in its own call, in order.
async fn send_each(env: &Env, queue: &str, msgs: &[(&str, i8)]) -> Vec<JobId> {
    let backend = env.client.backend();
    let mut ids = Vec::new();
    for (body, p) in msgs {
        let msg = SendMessage::new(*body).priority(*p);
        let sent = Backend::send(&backend, queue, &[msg], &QueueOptions::default())
            .await
            .unwrap();
        ids.extend(sent.into_iter().map(|s| s.id));
    }
    ids
}

fn bodies(jobs: &[redjob::backend::Delivery]) -> Vec<String> {
    jobs.iter()
        .map(|d| String::from_utf8_lossy(&d.body).into_owned())
        .collect()
}

pub async fn fetch_takes_higher_priorities_first_and_fifo_within_one(env: &Env) {
    let msgs = [
        ("a0", 0),
        ("b5", 5),
        ("c-3", -3),
        ("d5", 5),
        ("e0", 0),
        ("f10", 10),
        ("g-10", -10),
        ("h-3", -3),
    ];
    send_each(env, "prio", &msgs).await;
    let backend = env.client.backend();
    let got = backend.fetch("prio", 100, LONG).await.unwrap();
    assert_eq!(
        bodies(&got.jobs),
        ["f10", "b5", "d5", "a0", "e0", "c-3", "h-3", "g-10"]
    );
    let levels: Vec<i8> = got.jobs.iter().map(|d| d.token.priority()).collect();
    assert_eq!(levels, [10, 5, 5, 0, 0, -3, -3, -10]);
    // every one acked through its token, wherever it lives
    let settle = Settle {
        acks: got.jobs.iter().map(|d| (d.id, d.token)).collect(),
        ..Settle::default()
    };
    let done = backend.settle("prio", &settle).await.unwrap();
    assert_eq!((done.acked, done.gone.len()), (8, 0));
    let again = backend.fetch("prio", 100, LONG).await.unwrap();
    assert!(again.jobs.is_empty());
    assert_eq!(again.next_due_us, None, "nothing left at any level");
    assert_eq!(backend.stats("prio").await.unwrap().processed, 8);
}

pub async fn one_fetch_takes_the_highest_up_to_its_limit(env: &Env) {
    let mut msgs = Vec::new();
    for p in [-1i8, 0, 1] {
        for i in 0..3 {
            msgs.push((format!("p{p}-{i}"), p));
        }
    }
    let refs: Vec<(&str, i8)> = msgs.iter().map(|(b, p)| (b.as_str(), *p)).collect();
    send_each(env, "prio", &refs).await;
    let backend = env.client.backend();
    let first = backend.fetch("prio", 4, LONG).await.unwrap();
    assert_eq!(bodies(&first.jobs), ["p1-0", "p1-1", "p1-2", "p0-0"]);
    let rest = backend.fetch("prio", 100, LONG).await.unwrap();
    assert_eq!(
        bodies(&rest.jobs),
        ["p0-1", "p0-2", "p-1-0", "p-1-1", "p-1-2"]
    );
}

pub async fn a_delayed_high_priority_job_never_starts_early(env: &Env) {
    let backend = env.client.backend();
    let delay = Duration::from_millis(400);
    let high = SendMessage::new("high").priority(9).delay(delay);
    Backend::send(&backend, "prio", &[high], &QueueOptions::default())
        .await
        .unwrap();
    send_each(env, "prio", &[("low", -9)]).await;
    let sent_at = env.now().await;
    let got = backend.fetch("prio", 10, LONG).await.unwrap();
    assert_eq!(bodies(&got.jobs), ["low"]);
    // the worker learns when to look again: the delayed job's due time
    let next = got.next_due_us.expect("the delayed job is reported") / 1000;
    let due = (sent_at + delay)
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // (the send rounds the delay up to a whole ms)
    assert!(
        next <= due + 1 && next + 1000 > due,
        "next due {next}, job due {due}"
    );
    tokio::time::sleep(delay + Duration::from_millis(50)).await;
    let got = backend.fetch("prio", 10, LONG).await.unwrap();
    assert_eq!(bodies(&got.jobs), ["high"]);
    assert_eq!(got.jobs[0].token.priority(), 9);
}

pub async fn leases_retries_and_dead_letters_keep_a_job_at_its_priority(env: &Env) {
    let backend = env.client.backend();
    let ids = send_each(env, "prio", &[("x", 7), ("y", 0), ("z", -2)]).await;
    let got = backend
        .fetch("prio", 10, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(bodies(&got.jobs), ["x", "y", "z"]);
    let held: Vec<_> = got.jobs.iter().map(|d| (d.id, d.token)).collect();
    // one renewal for all levels
    let renewed = backend.extend("prio", &held, LONG).await.unwrap();
    let renewed: Vec<_> = renewed.into_iter().map(Option::unwrap).collect();
    for (t, d) in renewed.iter().zip(&got.jobs) {
        assert_eq!(t.priority(), d.token.priority());
        assert!(t.lease_until_ms() > d.token.lease_until_ms());
    }
    let now_held: Vec<_> = got
        .jobs
        .iter()
        .map(|d| d.id)
        .zip(renewed.iter().copied())
        .collect();
    let scores = backend.scores("prio", &now_held).await.unwrap();
    let scores: Vec<_> = scores.into_iter().map(Option::unwrap).collect();
    assert_eq!(scores, renewed, "read back at their levels as renewed");
    // the old tokens are fenced off at every level
    let stale = Settle {
        acks: held.clone(),
        ..Settle::default()
    };
    assert_eq!(backend.settle("prio", &stale).await.unwrap().acked, 0);
    // x retried at once, y acked, z dead-lettered: one call
    let settle = Settle {
        acks: vec![(ids[1], renewed[1])],
        reschedules: vec![Reschedule {
            id: ids[0],
            token: renewed[0],
            delay: Duration::ZERO,
            deliveries: 1,
            release: false,
            error: None,
        }],
        dead: vec![DeadLetterEntry {
            id: ids[2],
            token: renewed[2],
            error: "gave up".into(),
        }],
        retention: Default::default(),
        ..Settle::default()
    };
    let done = backend.settle("prio", &settle).await.unwrap();
    assert_eq!((done.acked, done.rescheduled, done.dead), (1, 1, 1));
    // due within the next millisecond
    tokio::time::sleep(Duration::from_millis(5)).await;
    let again = backend.fetch("prio", 10, LONG).await.unwrap();
    assert_eq!(bodies(&again.jobs), ["x"]);
    assert_eq!(
        (
            again.jobs[0].token.priority(),
            again.jobs[0].token.attempt()
        ),
        (7, 2)
    );
    let dead = env.client.dead_letters("prio", 10).await.unwrap();
    assert_eq!((dead.len(), &dead[0].error[..]), (1, "gave up"));
}

pub async fn rsmq_receive_sees_priority_zero_only_delete_sees_all(env: &Env) {
    let ids = send_each(env, "prio", &[("plain", 0), ("urgent", 3)]).await;
    let q = env.queues();
    assert_eq!(q.attributes("prio").await.unwrap().msgs, 1);
    let got = q.receive_batch("prio", 10, None).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body, "plain");
    assert!(q.pop("prio").await.unwrap().is_none());
    // a worker still gets the urgent one
    let backend = env.client.backend();
    let fetched = backend.fetch("prio", 10, LONG).await.unwrap();
    assert_eq!(bodies(&fetched.jobs), ["urgent"]);
    // change visibility and delete find a message at any priority
    assert!(
        q.change_visibility("prio", &ids[1], Duration::ZERO)
            .await
            .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    let again = backend.fetch("prio", 10, LONG).await.unwrap();
    assert_eq!(bodies(&again.jobs), ["urgent"]);
    assert!(q.delete("prio", &ids[1]).await.unwrap());
    assert!(!q.delete("prio", &ids[1]).await.unwrap());
    let settle = Settle {
        acks: vec![(ids[1], again.jobs[0].token)],
        ..Settle::default()
    };
    assert_eq!(
        backend.settle("prio", &settle).await.unwrap().gone,
        [ids[1]]
    );
}

pub async fn a_priority_out_of_range_is_refused_and_sends_nothing(env: &Env) {
    let backend = env.client.backend();
    for p in [11i8, -11, i8::MAX, i8::MIN] {
        let msgs = [SendMessage::new("ok"), SendMessage::new("bad").priority(p)];
        let err = Backend::send(&backend, "prio", &msgs, &QueueOptions::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidValue { what: "priority", reason } if reason.contains(&p.to_string())),
            "{err}"
        );
        let err = env
            .client
            .enqueue_with(&Urgent { n: 0 }, EnqueueOptions::new().priority(p))
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidValue {
                what: "priority",
                ..
            }
        ));
    }
    let got = backend.fetch("prio", 10, LONG).await.unwrap();
    assert!(got.jobs.is_empty(), "nothing of a refused batch was sent");
}

/// Counts job starts; the urgent one records how many had started before it.
#[derive(Default)]
struct Starts {
    started: AtomicUsize,
    urgent_after: std::sync::Mutex<Vec<usize>>,
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "prio_bulk", queue = "prio", priority = -5)]
struct Bulk;

impl Job for Bulk {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Starts>>()?
            .started
            .fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "prio_urgent", queue = "prio", priority = 5)]
struct Urgent {
    n: u32,
}

impl Job for Urgent {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let s = ctx.data::<Arc<Starts>>()?;
        let before = s.started.fetch_add(1, Ordering::SeqCst);
        s.urgent_after.lock().unwrap().push(before);
        Ok(())
    }
}

/// A backlog of 10,000 low-priority jobs delays a high-priority one by at most
/// one fetch batch (the worker's free slots plus its prefetch), whether the high
/// one was there before the worker started or arrives while it works through the
/// backlog.
pub async fn a_backlog_of_10k_low_jobs_delays_a_high_one_by_one_batch_at_most(env: &Env) {
    const CONCURRENCY: usize = 8;
    const PREFETCH: usize = 8;
    const BATCH: usize = CONCURRENCY + PREFETCH;
    let client = env.client.clone();
    let bulk: Vec<Bulk> = (0..10_000).map(|_| Bulk).collect();
    client.enqueue_batch(&bulk).await.unwrap();
    client.enqueue(&Urgent { n: 1 }).await.unwrap();
    let starts = Arc::new(Starts::default());
    let worker = Worker::builder(client.backend())
        .queue("prio")
        .concurrency(CONCURRENCY)
        .prefetch(PREFETCH)
        .handle_signals(false)
        .data(starts.clone())
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    assert!(
        wait_until(Duration::from_secs(20), || starts
            .started
            .load(Ordering::SeqCst)
            > 500)
        .await
    );
    // while the worker works through the backlog
    let before = starts.started.load(Ordering::SeqCst);
    client.enqueue(&Urgent { n: 2 }).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || starts
            .urgent_after
            .lock()
            .unwrap()
            .len()
            == 2)
        .await
    );
    let after = starts.urgent_after.lock().unwrap().clone();
    running.stop().await;
    assert!(
        after[0] < BATCH,
        "the urgent job waiting from the start ran after {} others",
        after[0]
    );
    assert!(
        after[1] - before <= BATCH,
        "the urgent job sent while the backlog ran waited for {} others",
        after[1] - before
    );
    assert!(
        after[1] < 10_000,
        "the backlog was not yet done when the urgent job came: the test measured something"
    );
}

pub async fn pop_due_takes_every_due_message_at_once_highest_first(env: &Env) {
    let q = env.queues();
    let ids = send_each(env, "prio", &[("a", 0), ("b", -4), ("c", 6), ("d", 0)]).await;
    let backend = env.client.backend();
    let later = SendMessage::new("later").priority(6).delay(LONG);
    Backend::send(&backend, "prio", &[later], &QueueOptions::default())
        .await
        .unwrap();
    assert!(q.pop_due("prio", 0).await.unwrap().is_empty());
    let first = q.pop_due("prio", 2).await.unwrap();
    let rest = q.pop_due("prio", usize::MAX).await.unwrap();
    let got: Vec<_> = first
        .iter()
        .chain(&rest)
        .map(|m| (m.id, m.body.clone()))
        .collect();
    let want: Vec<_> = [(2, "c"), (0, "a"), (3, "d"), (1, "b")]
        .iter()
        .map(|(i, b)| (ids[*i], b.to_string()))
        .collect();
    assert_eq!(got, want, "highest priority first, oldest first within one");
    assert!(rest.iter().all(|m| m.rc == 1));
    // taken means deleted: the delayed one is all that is left
    assert!(q.pop_due("prio", usize::MAX).await.unwrap().is_empty());
    let left = backend.fetch("prio", 10, LONG).await.unwrap();
    assert!(left.jobs.is_empty());
    assert!(left.next_due_us.is_some(), "the delayed message stays");
    assert!(matches!(
        q.pop_due("nope", 10).await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(
        q.pop_due("nope", 0).await.unwrap().is_empty(),
        "limit 0: no call"
    );
    assert!(matches!(
        q.pop_due("bad name", 10).await,
        Err(Error::InvalidQueueName { .. })
    ));
}

/// Four consumers take due messages while a producer sends: each message is
/// taken exactly once.
pub async fn concurrent_pop_due_consumers_never_share_or_lose_a_message(env: &Env) {
    const N: usize = 2000;
    let q = env.queues().clone();
    q.create_queue("race", QueueOptions::default())
        .await
        .unwrap();
    let taken = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut consumers = Vec::new();
    for _ in 0..4 {
        // each on a connection of its own
        let q = env.another_client().await.queues().clone();
        let taken = taken.clone();
        consumers.push(tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while taken.lock().unwrap().len() < N && tokio::time::Instant::now() < deadline {
                let got = q.pop_due("race", 64).await.unwrap();
                if got.is_empty() {
                    tokio::task::yield_now().await;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                taken.lock().unwrap().extend(got.into_iter().map(|m| m.id));
            }
        }));
    }
    let mut sent = Vec::new();
    for chunk in 0..N / 50 {
        let msgs: Vec<_> = (0..50)
            .map(|i| SendMessage::new(format!("m{}", chunk * 50 + i)).priority((i % 3) as i8))
            .collect();
        sent.extend(q.send_batch("race", &msgs).await.unwrap());
    }
    for c in consumers {
        c.await.unwrap();
    }
    let mut taken = taken.lock().unwrap().clone();
    assert_eq!(taken.len(), N, "no message taken twice, none left");
    taken.sort();
    taken.dedup();
    sent.sort();
    assert_eq!(taken, sent);
}

/// Bulk of a foreign type, for [`typed_pop_due_decodes_and_keeps_what_is_not_its_type`].
#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(name = "prio_reminder", queue = "prio")]
struct Reminder {
    user: u64,
}

impl Job for Reminder {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

pub async fn typed_pop_due_decodes_and_keeps_what_is_not_its_type(env: &Env) {
    let client = &env.client;
    client.enqueue(&Reminder { user: 1 }).await.unwrap();
    client.enqueue(&Urgent { n: 9 }).await.unwrap();
    client
        .enqueue_in(&Reminder { user: 2 }, LONG)
        .await
        .unwrap();
    send_each(env, "prio", &[("not json", 0)]).await;
    let popped = client.pop_due::<Reminder>(100).await.unwrap();
    assert_eq!(popped.len(), 3, "every due message, whatever its type");
    // the urgent one first (priority 5), then oldest first
    assert!(
        matches!(&popped[0].job, Err(Error::InvalidValue { what: "job type", reason }) if reason.contains("prio_urgent"))
    );
    assert_eq!(popped[1].job.as_ref().unwrap(), &Reminder { user: 1 });
    assert!(matches!(popped[2].job, Err(Error::Decode(_))));
    assert_eq!(popped[2].body, b"not json");
    assert!(client.pop_due::<Reminder>(100).await.unwrap().is_empty());
}

/// A delivery whose job a unique send moved to another priority (a replace,
/// once the job was back in its queue after a throttle) fails the fence as
/// a later delivery does: the job still exists, so it is not reported gone.
/// (The model test found Redis calling it gone.)
pub async fn a_delivery_whose_job_moved_to_another_priority_is_not_gone(env: &Env) {
    use redjob::backend::Throttle;
    use redjob::queue::{OnDuplicate, Unique};
    let b = env.client.backend();
    let opts = QueueOptions::default();
    let first = SendMessage::new("m0")
        .priority(3)
        .unique(Unique::new("k").on_duplicate(OnDuplicate::Keep));
    let id = Backend::send(&b, "moved", &[first], &opts).await.unwrap()[0].id;
    let f = b.fetch("moved", 10, Duration::from_secs(30)).await.unwrap();
    let token = f.jobs[0].token;
    let throttle = Settle {
        throttles: vec![Throttle {
            id,
            token,
            deliveries: token.attempt().saturating_sub(1),
            delay: Duration::ZERO,
            error: "throttled".into(),
            key: false,
        }],
        ..Settle::default()
    };
    b.settle("moved", &throttle).await.unwrap();
    let replace = SendMessage::new("m1")
        .priority(0)
        .unique(Unique::new("k").on_duplicate(OnDuplicate::Replace));
    let sent = b.send_outcomes("moved", &[replace]).await.unwrap();
    assert_eq!(sent[0].id, id, "the queued job was met");
    let dead = Settle {
        dead: vec![DeadLetterEntry {
            id,
            token,
            error: "late".into(),
        }],
        ..Settle::default()
    };
    let done = b.settle("moved", &dead).await.unwrap();
    assert_eq!((done.dead, done.gone.len()), (0, 0), "{done:?}");
}
