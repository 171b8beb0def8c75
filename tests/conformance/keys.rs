//! Concurrency keys: at most `per_key` jobs of one key run at once across the
//! fleet, in order of due time within the key, while other keys run; a key's
//! waiting jobs stay apart from the queue's sorted set, so a hot key costs a
//! fetch nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::client::EnqueueOptions;
use redjob::inspect::{Cancelled, Inspect, JobState};
use redjob::ops::Admin;
use redjob::queue::{QueueOptions, Queues};
use redjob::{Job, JobContext, JobError, JobId, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{start_serving, wait_for};

const QUEUE: &str = "keyed";

/// Runs for its `ms` under its account's key, recording what ran when.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "keys_charge",
    queue = "keyed",
    concurrency_key = "account",
    backoff = "1s"
)]
struct Charge {
    account: String,
    seq: u32,
    ms: u64,
    /// Fails this many first attempts.
    #[serde(default)]
    fail: u32,
    /// Its first run says its key is throttled for this long (ms).
    #[serde(default)]
    throttle_ms: u64,
}

/// What the handlers saw.
#[derive(Default)]
struct Seen {
    /// Running now, per key and in all.
    running: Mutex<(HashMap<String, usize>, usize)>,
    /// The most of one key at once, and in all.
    most_per_key: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    /// (account, seq) in the order they started, and when.
    order: Mutex<Vec<(String, u32)>>,
    at: Mutex<Vec<tokio::time::Instant>>,
    /// The jobs that threw their throttle already.
    throttled: Mutex<std::collections::HashSet<(String, u32)>>,
}

impl Job for Charge {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        use std::sync::atomic::Ordering::SeqCst;
        let s = ctx.data::<Arc<Seen>>()?;
        {
            let mut r = s.running.lock().unwrap();
            let n = r.0.entry(self.account.clone()).or_default();
            *n += 1;
            let n = *n;
            r.1 += 1;
            s.most_per_key.fetch_max(n, SeqCst);
            s.most.fetch_max(r.1, SeqCst);
            s.order
                .lock()
                .unwrap()
                .push((self.account.clone(), self.seq));
            s.at.lock().unwrap().push(tokio::time::Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        {
            let mut r = s.running.lock().unwrap();
            *r.0.get_mut(&self.account).unwrap() -= 1;
            r.1 -= 1;
        }
        if self.throttle_ms > 0
            && s.throttled
                .lock()
                .unwrap()
                .insert((self.account.clone(), self.seq))
        {
            return Err(JobError::rate_limited_key(Duration::from_millis(
                self.throttle_ms,
            )));
        }
        if ctx.attempt() <= self.fail {
            return Err(JobError::retry_after(
                "not yet",
                Duration::from_millis(1500),
            ));
        }
        Ok(())
    }
}

impl Seen {
    fn most_per_key(&self) -> usize {
        self.most_per_key.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn order(&self) -> Vec<(String, u32)> {
        self.order.lock().unwrap().clone()
    }
}

fn charge(account: &str, seq: u32, ms: u64) -> Charge {
    Charge {
        account: account.into(),
        seq,
        ms,
        fail: 0,
        throttle_ms: 0,
    }
}

fn worker(env: &Env, concurrency: usize, seen: &Arc<Seen>) -> Worker {
    Worker::builder(env.client.backend())
        .register::<Charge>()
        .concurrency(concurrency)
        .lease(Duration::from_secs(5))
        .data(seen.clone())
        .handle_signals(false)
        .build()
        .unwrap()
}

async fn create(env: &Env) {
    env.client
        .backend()
        .create_queue(QUEUE, QueueOptions::default())
        .await
        .unwrap();
}

async fn processed(env: &Env, n: u64, limit: Duration) -> bool {
    wait_for(limit, || async {
        env.client.stats(QUEUE).await.unwrap().processed >= n
    })
    .await
}

/// Messages in the queue's sorted set (RSMQ's `msgs`): what a fetch reads.
async fn visible(env: &Env) -> u64 {
    env.client.backend().attributes(QUEUE).await.unwrap().msgs
}

pub async fn one_job_per_key_runs_at_once_across_workers_in_order(env: &Env) {
    create(env).await;
    // 100 keys of 5 jobs each, sent key after key, before any worker looks
    let jobs: Vec<Charge> = (0..100)
        .flat_map(|k| (0..5).map(move |seq| charge(&format!("acct{k}"), seq, 50)))
        .collect();
    env.client.enqueue_batch(&jobs).await.unwrap();
    // the sorted set holds one job per key: the others wait apart
    assert_eq!(visible(env).await, 100);
    let seen = Arc::new(Seen::default());
    let mut running = Vec::new();
    for _ in 0..3 {
        running.push(start_serving(worker(env, 10, &seen)).await);
    }
    assert!(
        processed(env, 500, Duration::from_secs(60)).await,
        "all ran"
    );
    for w in running {
        w.stop().await;
    }
    assert_eq!(seen.most_per_key(), 1, "never two of one key at once");
    // 100 keys with due jobs and 30 places: no worker idled while a key had some
    assert_eq!(seen.most(), 30, "every place was used");
    let order = seen.order();
    assert_eq!(order.len(), 500);
    for k in 0..100 {
        let key = format!("acct{k}");
        let seqs: Vec<u32> = order
            .iter()
            .filter(|(a, _)| *a == key)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(seqs, vec![0, 1, 2, 3, 4], "{key} ran in order");
    }
    assert_eq!(visible(env).await, 0);
}

pub async fn per_key_two_runs_two_of_a_key_at_once(env: &Env) {
    create(env).await;
    let jobs: Vec<Charge> = (0..20).map(|seq| charge("shared", seq, 100)).collect();
    let opts = EnqueueOptions::new().per_key(2);
    env.client.enqueue_batch_with(&jobs, opts).await.unwrap();
    assert_eq!(visible(env).await, 2);
    let seen = Arc::new(Seen::default());
    let mut running = Vec::new();
    for _ in 0..3 {
        running.push(start_serving(worker(env, 5, &seen)).await);
    }
    assert!(processed(env, 20, Duration::from_secs(30)).await, "all ran");
    for w in running {
        w.stop().await;
    }
    assert_eq!(seen.most_per_key(), 2, "two at once, never three");
}

pub async fn a_hot_key_holds_back_no_other_key(env: &Env) {
    create(env).await;
    // 100,000 due jobs of one key ahead of one job each of 100 other keys
    let hot: Vec<Charge> = (0..100_000).map(|seq| charge("hot", seq, 10)).collect();
    env.client.enqueue_batch(&hot).await.unwrap();
    let others: Vec<Charge> = (0..100).map(|k| charge(&format!("k{k}"), 0, 0)).collect();
    env.client.enqueue_batch(&others).await.unwrap();
    // a fetch sees the hot key's one holder and the others
    assert_eq!(visible(env).await, 101);
    let counts = env.client.backend().counts(QUEUE).await.unwrap();
    assert_eq!((counts.ready, counts.blocked), (101, 99_999), "{counts:?}");
    let seen = Arc::new(Seen::default());
    let w = start_serving(worker(env, 10, &seen)).await;
    // the other keys all ran while the hot key ran one at a time
    assert!(
        wait_for(Duration::from_secs(10), || async {
            seen.order().iter().filter(|(a, _)| a != "hot").count() == 100
        })
        .await,
        "the other keys ran"
    );
    w.stop().await;
    // the hot key's jobs that started before the last of the others
    let order = seen.order();
    let last = order.iter().rposition(|(a, _)| a != "hot").unwrap();
    let hot_ran = order[..last].iter().filter(|(a, _)| a == "hot").count();
    assert!(
        hot_ran < 50,
        "the others waited for {hot_ran} of the hot key's"
    );
    assert_eq!(seen.most_per_key(), 1);
}

pub async fn within_a_key_an_earlier_due_job_goes_first(env: &Env) {
    create(env).await;
    // the key's first job is due in 2 s; one sent after it is due now: it
    // takes the place, and the delayed one waits for it
    let later = env
        .client
        .enqueue_in(&charge("a", 1, 10), Duration::from_secs(2))
        .await
        .unwrap();
    let now = env.client.enqueue(&charge("a", 2, 10)).await.unwrap();
    let seen = Arc::new(Seen::default());
    let w = start_serving(worker(env, 4, &seen)).await;
    assert!(processed(env, 1, Duration::from_secs(5)).await);
    assert_eq!(seen.order(), vec![("a".to_string(), 2)], "{now} first");
    // a job that fails goes back for its retry (1.5 s): the key's next due
    // job runs meanwhile
    let mut failing = charge("b", 1, 10);
    failing.fail = 1;
    env.client.enqueue(&failing).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.client.enqueue(&charge("b", 2, 10)).await.unwrap();
    assert!(
        processed(env, 4, Duration::from_secs(10)).await,
        "{later} ran"
    );
    w.stop().await;
    let b: Vec<u32> = seen
        .order()
        .iter()
        .filter(|(a, _)| a == "b")
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(b, vec![1, 2, 1], "b2 ran during b1's backoff");
    assert_eq!(seen.most_per_key(), 1);
}

pub async fn deletes_cancels_dead_letters_and_purges_free_a_keys_place(env: &Env) {
    create(env).await;
    let b = env.client.backend();
    let mut ids: Vec<JobId> = Vec::new();
    for seq in 0..5 {
        ids.push(env.client.enqueue(&charge("k", seq, 10)).await.unwrap());
    }
    let held_ids = |env: &Env| {
        let b = env.client.backend();
        async move {
            b.peek(QUEUE, 10)
                .await
                .unwrap()
                .into_iter()
                .map(|j| j.id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(held_ids(env).await, vec![ids[0]]);
    // the others are blocked: counted, and found by id as such
    let counts = b.counts(QUEUE).await.unwrap();
    assert_eq!((counts.ready, counts.blocked, counts.total()), (1, 4, 5));
    let blocked = b.job(QUEUE, &ids[2]).await.unwrap().unwrap();
    assert_eq!((blocked.state, blocked.attempts), (JobState::Blocked, 0));
    assert_eq!(
        b.job(QUEUE, &ids[0]).await.unwrap().unwrap().state,
        JobState::Ready
    );
    // a delete of the holder promotes the next
    assert_eq!(b.delete_batch(QUEUE, &[ids[0]]).await.unwrap(), 1);
    assert_eq!(held_ids(env).await, vec![ids[1]]);
    // a waiting job is deleted and cancelled where it waits
    assert_eq!(b.delete_batch(QUEUE, &[ids[2]]).await.unwrap(), 1);
    assert_eq!(b.cancel(QUEUE, &ids[3]).await.unwrap(), Cancelled::Removed);
    assert!(
        b.job(QUEUE, &ids[3])
            .await
            .unwrap()
            .is_none_or(|j| j.finished.is_some())
    );
    // a cancel of the holder promotes the last
    assert_eq!(b.cancel(QUEUE, &ids[1]).await.unwrap(), Cancelled::Removed);
    assert_eq!(held_ids(env).await, vec![ids[4]]);
    // a pop of the holder (RSMQ's popMessage) gives its place on
    let popped = env.client.enqueue(&charge("k", 6, 10)).await.unwrap();
    assert_eq!(b.pop(QUEUE).await.unwrap().unwrap().id, ids[4]);
    assert_eq!(held_ids(env).await, vec![popped]);
    let ids: Vec<JobId> = ids.iter().take(4).copied().chain([popped]).collect();
    // a dead letter frees the place too: the key's next job takes it
    let next = env.client.enqueue(&charge("k", 5, 10)).await.unwrap();
    let fetched = b.fetch(QUEUE, 10, Duration::from_secs(5)).await.unwrap();
    let ours = fetched
        .jobs
        .iter()
        .find(|j| j.id == ids[4])
        .expect("k's holder leased");
    assert!(fetched.jobs.iter().all(|j| j.id != next), "k's next waits");
    let settle = Settle {
        dead: vec![DeadLetterEntry {
            id: ours.id,
            token: ours.token,
            error: "gave up".into(),
        }],
        ..Settle::default()
    };
    b.settle(QUEUE, &settle).await.unwrap();
    assert_eq!(
        held_ids(env).await.iter().filter(|i| **i == next).count(),
        1
    );
    // a purge deletes the waiting jobs with the rest
    for seq in 10..13 {
        env.client.enqueue(&charge("p", seq, 10)).await.unwrap();
    }
    assert_eq!(visible(env).await, 2, "k's holder and p's");
    b.purge_queue(QUEUE).await.unwrap();
    assert_eq!(visible(env).await, 0);
    env.client.enqueue(&charge("p", 20, 10)).await.unwrap();
    assert_eq!(visible(env).await, 1, "p's place is free again");
}

pub async fn a_periodic_jobs_ticks_and_a_run_now_wait_for_its_key(env: &Env) {
    use redjob::ops::Schedule;
    use redjob::queue::Keyed;
    create(env).await;
    let b = env.client.backend();
    // the key's place is taken: a tick's job waits for it
    let holder = env.client.enqueue(&charge("pk", 0, 10)).await.unwrap();
    let w = Worker::builder(env.client.backend())
        .queue("keys_other")
        .periodic(
            Schedule::every(Duration::from_secs(1)).unwrap(),
            charge("pk", 1, 10),
        )
        .handle_signals(false)
        .build()
        .unwrap();
    let running = start_serving(w).await;
    assert!(
        wait_for(Duration::from_secs(10), || async {
            b.counts(QUEUE).await.unwrap().blocked >= 1
        })
        .await,
        "a tick's job waits for its key"
    );
    let counts = b.counts(QUEUE).await.unwrap();
    assert_eq!(counts.ready, 1, "the holder alone is ready");
    let listed = env.client.schedules().await.unwrap();
    let s = listed.iter().find(|s| s.queue == QUEUE).expect("listed");
    assert_eq!(s.key, Some(Keyed::new("pk")));
    let now = env.client.run_schedule_now(QUEUE, &s.name).await.unwrap();
    let job = b.job(QUEUE, &now).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.key),
        (JobState::Blocked, Some(Keyed::new("pk")))
    );
    running.stop().await;
    assert_eq!(
        b.job(QUEUE, &holder).await.unwrap().unwrap().state,
        JobState::Ready
    );
}

pub async fn a_running_job_deleted_or_cancelled_keeps_its_place_until_its_lease_ends(env: &Env) {
    create(env).await;
    let b = env.client.backend();
    let lease = Duration::from_secs(2);
    let first = env.client.enqueue(&charge("g", 1, 10)).await.unwrap();
    let second = env.client.enqueue(&charge("g", 2, 10)).await.unwrap();
    let third = env.client.enqueue(&charge("g", 3, 10)).await.unwrap();
    // a worker runs the first; an operator deletes it: its handler runs on
    // until its next lease renewal, so the key's next job may not start
    let taken = tokio::time::Instant::now();
    let f = b.fetch(QUEUE, 10, lease).await.unwrap();
    assert_eq!(f.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![first]);
    assert_eq!(b.delete_batch(QUEUE, &[first]).await.unwrap(), 1);
    assert!(b.fetch(QUEUE, 10, lease).await.unwrap().jobs.is_empty());
    assert_eq!(b.counts(QUEUE).await.unwrap().blocked, 2);
    // once its lease has ended, the key's next job takes the place (on Redis
    // at a fetch's sweep of the keys, within about 10 s)
    let next = loop {
        let f = b.fetch(QUEUE, 10, lease).await.unwrap();
        if let Some(j) = f.jobs.first() {
            break (j.id, j.token, taken.elapsed());
        }
        assert!(
            taken.elapsed() < Duration::from_secs(20),
            "the place stayed taken"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(next.0, second);
    assert!(next.2 >= lease - Duration::from_millis(50), "{:?}", next.2);
    // a cancel of the running second keeps its place the same way
    assert_eq!(
        b.cancel(QUEUE, &second).await.unwrap(),
        Cancelled::Cancelling
    );
    assert!(b.fetch(QUEUE, 10, lease).await.unwrap().jobs.is_empty());
    assert_eq!(
        b.job(QUEUE, &third).await.unwrap().unwrap().state,
        JobState::Blocked
    );
}

pub async fn operators_read_each_keys_places_running_and_blocked_jobs(env: &Env) {
    create(env).await;
    let b = env.client.backend();
    for seq in 0..4 {
        env.client.enqueue(&charge("x", seq, 10)).await.unwrap();
    }
    let two = EnqueueOptions::new().per_key(2);
    for seq in 0..3 {
        env.client
            .enqueue_with(&charge("y", seq, 10), two.clone())
            .await
            .unwrap();
    }
    let f = b.fetch(QUEUE, 1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(f.jobs.len(), 1);
    let x = b.key_usage(QUEUE, "x").await.unwrap();
    assert_eq!(
        (x.per_key, x.running, x.holding, x.blocked),
        (1, 1, 0, 3),
        "{x:?}"
    );
    let y = b.key_usage(QUEUE, "y").await.unwrap();
    assert_eq!((y.per_key, y.running, y.holding, y.blocked), (2, 0, 2, 1));
    let none = b.key_usage(QUEUE, "z").await.unwrap();
    assert_eq!((none.per_key, none.blocked), (0, 0));
    // every key, page by page
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10 {
        let page = b.keys(QUEUE, after.as_deref(), 1).await.unwrap();
        seen.extend(page.keys.into_iter().map(|k| k.key));
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen, vec!["x".to_string(), "y".to_string()]);
    assert!(
        b.key_usage(QUEUE, "").await.is_err(),
        "an empty key is refused"
    );
    assert!(b.keys("no-such-queue", None, 10).await.is_err());
}

pub async fn a_keys_throttle_holds_its_key_alone(env: &Env) {
    create(env).await;
    let b = env.client.backend();
    let start = tokio::time::Instant::now();
    let mut first = charge("t", 1, 10);
    first.throttle_ms = 1500;
    env.client.enqueue(&first).await.unwrap();
    for seq in 2..4 {
        env.client.enqueue(&charge("t", seq, 10)).await.unwrap();
    }
    for seq in 0..5 {
        env.client.enqueue(&charge("u", seq, 10)).await.unwrap();
    }
    let seen = Arc::new(Seen::default());
    let w = start_serving(worker(env, 4, &seen)).await;
    // while t is throttled, u runs on (its queue is not held)
    assert!(
        wait_for(Duration::from_secs(5), || async {
            seen.order().iter().filter(|(a, _)| a == "u").count() == 5
        })
        .await,
        "u ran"
    );
    let t = b.key_usage(QUEUE, "t").await.unwrap();
    assert!(t.throttled_until_ms.is_some(), "{t:?}");
    assert_eq!(t.blocked, 2, "{t:?}");
    assert!(processed(env, 8, Duration::from_secs(15)).await, "all ran");
    w.stop().await;
    let order = seen.order();
    let at = seen.at.lock().unwrap().clone();
    let t_runs: Vec<(u32, Duration)> = order
        .iter()
        .zip(&at)
        .filter(|((a, _), _)| a == "t")
        .map(|((_, s), at)| (*s, *at - start))
        .collect();
    // the throttled job first when its throttle ends, then the key's others
    let seqs: Vec<u32> = t_runs.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, vec![1, 1, 2, 3], "{t_runs:?}");
    assert!(t_runs[1].1 >= Duration::from_millis(1450), "{t_runs:?}");
    let last_u = order
        .iter()
        .zip(&at)
        .filter(|((a, _), _)| a == "u")
        .map(|(_, at)| *at - start)
        .max()
        .unwrap();
    assert!(last_u < Duration::from_millis(1400), "u waited: {last_u:?}");
    // the throttle counted no attempt
    let stats = env.client.stats(QUEUE).await.unwrap();
    assert_eq!((stats.processed, stats.retried, stats.failed), (8, 0, 0));
}

pub async fn throttled_jobs_keep_their_keys_places_and_a_send_waits_out_the_throttle(env: &Env) {
    create(env).await;
    let b = env.client.backend();
    let two = EnqueueOptions::new().per_key(2);
    for seq in 0..3 {
        env.client
            .enqueue_with(&charge("d", seq, 10), two.clone())
            .await
            .unwrap();
    }
    // both holders run and are throttled in one settle: both keep their places
    let lease = Duration::from_secs(30);
    let f = b.fetch(QUEUE, 10, lease).await.unwrap();
    assert_eq!(f.jobs.len(), 2);
    let throttle = Settle {
        throttles: f
            .jobs
            .iter()
            .map(|j| redjob::backend::Throttle {
                id: j.id,
                token: j.token,
                deliveries: j.token.attempt().saturating_sub(1),
                delay: Duration::from_secs(1),
                error: "429".into(),
                key: true,
            })
            .collect(),
        ..Settle::default()
    };
    b.settle(QUEUE, &throttle).await.unwrap();
    let d = b.key_usage(QUEUE, "d").await.unwrap();
    assert_eq!((d.holding, d.blocked), (2, 1), "{d:?}");
    assert!(d.throttled_until_ms.is_some());
    // a job sent during the throttle waits; the throttled ones keep their places
    env.client
        .enqueue_with(&charge("d", 9, 10), two)
        .await
        .unwrap();
    let d = b.key_usage(QUEUE, "d").await.unwrap();
    assert_eq!((d.holding, d.blocked), (2, 2), "{d:?}");
    assert!(b.fetch(QUEUE, 10, lease).await.unwrap().jobs.is_empty());
    // once it ends, the throttled jobs run first
    let mut got = Vec::new();
    let start = tokio::time::Instant::now();
    while got.len() < 2 {
        got.extend(
            b.fetch(QUEUE, 10, lease)
                .await
                .unwrap()
                .jobs
                .into_iter()
                .map(|j| j.id),
        );
        assert!(start.elapsed() < Duration::from_secs(5), "{got:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut throttled: Vec<JobId> = f.jobs.iter().map(|j| j.id).collect();
    throttled.sort();
    got.sort();
    assert_eq!(got, throttled);
}

pub async fn a_waiting_worker_wakes_when_a_deleted_running_jobs_place_frees(env: &Env) {
    create(env).await;
    let b = env.client.backend();
    let first = env.client.enqueue(&charge("w", 1, 10)).await.unwrap();
    env.client.enqueue(&charge("w", 2, 10)).await.unwrap();
    // a stalled worker holds the first for 2 s; an operator deletes it
    let start = tokio::time::Instant::now();
    let f = b.fetch(QUEUE, 1, Duration::from_secs(2)).await.unwrap();
    assert_eq!(f.jobs[0].id, first);
    assert_eq!(b.delete_batch(QUEUE, &[first]).await.unwrap(), 1);
    // a worker that finds nothing to do sleeps until the place frees, not
    // until its next poll (a minute)
    let seen = Arc::new(Seen::default());
    let w = start_serving(worker(env, 2, &seen)).await;
    assert!(
        processed(env, 1, Duration::from_secs(10)).await,
        "the key's next job ran"
    );
    w.stop().await;
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(1950), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(seen.order(), vec![("w".to_string(), 2)]);
}

/// Fetches job `id` (the only due one) and settles it: dead when `dead`,
/// else acked.
async fn run_out(env: &Env, id: JobId, dead: bool) {
    let b = env.client.backend();
    let fetched = b.fetch(QUEUE, 10, Duration::from_secs(5)).await.unwrap();
    let job = fetched.jobs.iter().find(|j| j.id == id).expect("leased");
    let settle = if dead {
        Settle {
            dead: vec![DeadLetterEntry {
                id,
                token: job.token,
                error: "gave up".into(),
            }],
            ..Settle::default()
        }
    } else {
        Settle {
            acks: vec![(id, job.token)],
            ..Settle::default()
        }
    };
    b.settle(QUEUE, &settle).await.unwrap();
}

pub async fn a_requeued_dead_letter_and_a_rerun_wait_for_their_keys_again(env: &Env) {
    use redjob::ops::Spread;
    use redjob::queue::Keyed;
    create(env).await;
    let b = env.client.backend();
    let two = EnqueueOptions::new().per_key(2);
    // a job of a key of two places dies: its letter keeps its key
    let d = env
        .client
        .enqueue_with(&charge("dk", 0, 10), two.clone())
        .await
        .unwrap();
    assert_eq!(
        b.job(QUEUE, &d).await.unwrap().unwrap().key,
        Some(Keyed::new("dk").per_key(2)),
        "a queued job shows its key"
    );
    run_out(env, d, true).await;
    let dead = b.job(QUEUE, &d).await.unwrap().unwrap();
    assert_eq!(dead.state, JobState::Dead);
    assert_eq!(dead.key, Some(Keyed::new("dk").per_key(2)));
    // two more take the key's places: the letter requeued waits for one
    let mut h: Vec<JobId> = Vec::new();
    for seq in 1..3 {
        let job = charge("dk", seq, 10);
        h.push(env.client.enqueue_with(&job, two.clone()).await.unwrap());
    }
    assert_eq!(visible(env).await, 2);
    assert_eq!(b.requeue_dead(QUEUE, &[d], Spread::NOW).await.unwrap(), 1);
    let again = b.job(QUEUE, &d).await.unwrap().unwrap();
    assert_eq!(
        again.state,
        JobState::Blocked,
        "the requeued letter waits for its key"
    );
    assert_eq!(again.key, Some(Keyed::new("dk").per_key(2)));
    assert_eq!(visible(env).await, 2);
    // a place frees: the letter takes it
    assert_eq!(b.delete_batch(QUEUE, &[h[0]]).await.unwrap(), 1);
    assert_eq!(
        b.job(QUEUE, &d).await.unwrap().unwrap().state,
        JobState::Ready
    );
    b.purge_queue(QUEUE).await.unwrap();

    // a finished job keeps its key in the history; a rerun waits for it
    let f = env.client.enqueue(&charge("fk", 0, 10)).await.unwrap();
    run_out(env, f, false).await;
    let done = b.job(QUEUE, &f).await.unwrap().unwrap();
    assert_eq!(done.state, JobState::Finished);
    assert_eq!(done.key, Some(Keyed::new("fk")));
    let g = env.client.enqueue(&charge("fk", 1, 10)).await.unwrap();
    let copy = b.retry_finished(QUEUE, &f).await.unwrap();
    let copy = b.job(QUEUE, &copy).await.unwrap().unwrap();
    assert_eq!(copy.state, JobState::Blocked, "the rerun waits for its key");
    assert_eq!(copy.key, Some(Keyed::new("fk")));
    assert_eq!(
        b.job(QUEUE, &g).await.unwrap().unwrap().state,
        JobState::Ready
    );
    // a rerun keeps the places in force of a key that has jobs
    let h = env.client.enqueue(&charge("hk", 0, 10)).await.unwrap();
    run_out(env, h, false).await;
    let three = EnqueueOptions::new().per_key(3);
    env.client
        .enqueue_with(&charge("hk", 1, 10), three)
        .await
        .unwrap();
    let copy = b.retry_finished(QUEUE, &h).await.unwrap();
    let copy = b.job(QUEUE, &copy).await.unwrap().unwrap();
    assert_eq!(copy.state, JobState::Ready, "a second of three places");
    assert_eq!(b.key_usage(QUEUE, "hk").await.unwrap().per_key, 3);
    // a cancelled one, waiting or holding, and a deleted one keep theirs too
    let c = env.client.enqueue(&charge("ck", 0, 10)).await.unwrap();
    let w = env.client.enqueue(&charge("ck", 1, 10)).await.unwrap();
    assert_eq!(b.cancel(QUEUE, &w).await.unwrap(), Cancelled::Removed);
    assert_eq!(b.cancel(QUEUE, &c).await.unwrap(), Cancelled::Removed);
    let x = env.client.enqueue(&charge("xk", 0, 10)).await.unwrap();
    assert!(b.delete(QUEUE, &x).await.unwrap());
    for (id, key) in [(c, "ck"), (w, "ck"), (x, "xk")] {
        let j = b.job(QUEUE, &id).await.unwrap().unwrap();
        assert_eq!(
            (j.state, j.key),
            (JobState::Finished, Some(Keyed::new(key))),
            "{key}"
        );
    }
}

pub async fn blocked_jobs_are_listed_by_key_then_due_a_page_at_a_time(env: &Env) {
    use redjob::queue::Keyed;
    create(env).await;
    let b = env.client.backend();
    // keys sent interleaved; "b" (two places) and "a" (one): their first
    // places hold, the rest wait
    let mut sent: Vec<(&str, JobId)> = Vec::new();
    for seq in 0..4 {
        for (key, opts) in [
            ("b", EnqueueOptions::new().per_key(2)),
            ("a", EnqueueOptions::new()),
        ] {
            let id = env
                .client
                .enqueue_with(&charge(key, seq, 10), opts)
                .await
                .unwrap();
            sent.push((key, id));
        }
    }
    let of = |key: &str, skip: usize| -> Vec<JobId> {
        sent.iter()
            .filter(|(k, _)| *k == key)
            .skip(skip)
            .map(|(_, id)| *id)
            .collect()
    };
    let want: Vec<JobId> = of("a", 1).into_iter().chain(of("b", 2)).collect();
    assert_eq!(b.counts(QUEUE).await.unwrap().blocked, 5);
    // pages of two, each resuming after the last
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = b
            .list(QUEUE, JobState::Blocked, after.as_ref(), 2)
            .await
            .unwrap();
        for j in &page.jobs {
            assert_eq!(j.state, JobState::Blocked);
            let key = j.key.clone().expect("a blocked job's key");
            let per = if key.key == "b" { 2 } else { 1 };
            assert_eq!(key, Keyed::new(key.key.clone()).per_key(per));
        }
        seen.extend(page.jobs.iter().map(|j| j.id));
        // the cursor's text form goes and comes back
        after = page.next.map(|c| c.to_string().parse().unwrap());
        if after.is_none() {
            break;
        }
        assert!(seen.len() <= 6, "pages end");
    }
    assert_eq!(seen, want);
    // a page resumes after its cursor's job even when that job was promoted
    let first = b.list(QUEUE, JobState::Blocked, None, 1).await.unwrap();
    assert_eq!(first.jobs[0].id, want[0]);
    assert_eq!(b.delete_batch(QUEUE, &of("a", 0)[..1]).await.unwrap(), 1);
    let next = b
        .list(QUEUE, JobState::Blocked, first.next.as_ref(), 10)
        .await
        .unwrap();
    assert_eq!(
        next.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        want[1..]
    );
    assert!(next.next.is_none());
    assert!(b.list("no-such", JobState::Blocked, None, 5).await.is_err());
}

pub async fn a_running_job_whose_lease_ends_during_its_keys_throttle_waits_it_out(env: &Env) {
    let b = env.client.backend();
    // one throttles the key for 4 s; the other runs on, and its worker dies
    let leased = two_leased_one_throttling(env, "lt", Duration::from_secs(4)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // its lease ran out, but the key is throttled: it waits
    let fetched = b
        .fetch(QUEUE, 10, Duration::from_secs(5))
        .await
        .unwrap()
        .jobs;
    assert!(
        fetched.is_empty(),
        "leased during the key's throttle: {fetched:?}"
    );
    // its lease left the lease counts
    assert_eq!(b.limit_usage(QUEUE).await.unwrap().in_flight, 0);
    let dead_worker = b.job(QUEUE, &leased[1].id).await.unwrap().unwrap();
    assert_eq!(dead_worker.state, JobState::Blocked);
    assert_eq!(dead_worker.attempts, 1, "the lost delivery counts");
    // after the throttle both run again
    let mut got = Vec::new();
    for _ in 0..100 {
        let jobs = b
            .fetch(QUEUE, 10, Duration::from_secs(5))
            .await
            .unwrap()
            .jobs;
        got.extend(jobs.into_iter().map(|j| j.id));
        if got.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    got.sort();
    let mut want = vec![leased[0].id, leased[1].id];
    want.sort();
    assert_eq!(got, want, "both run after the throttle");
}

pub async fn a_send_that_lowers_a_keys_places_takes_none_beyond_them(env: &Env) {
    use redjob::queue::{Keyed, SendMessage};
    create(env).await;
    let b = env.client.backend();
    let send = |per: u32, delay: Option<Duration>| {
        let b = b.clone();
        async move {
            let mut m = SendMessage::new("{}").keyed(Keyed::new("pl").per_key(per));
            if let Some(d) = delay {
                m = m.delay(d);
            }
            Queues::send(&b, QUEUE, m).await.unwrap()
        }
    };
    send(1, None).await;
    // two places: a later job holds the second
    send(2, Some(Duration::from_secs(60))).await;
    assert_eq!(visible(env).await, 2);
    // one place again: a job due now takes the later one's place only if
    // that leaves no more holders than places (here none is left)
    send(1, None).await;
    let counts = b.counts(QUEUE).await.unwrap();
    assert_eq!(
        (counts.ready + counts.scheduled, counts.blocked),
        (1, 2),
        "{counts:?}"
    );
    let fetched = b
        .fetch(QUEUE, 10, Duration::from_secs(5))
        .await
        .unwrap()
        .jobs;
    assert_eq!(fetched.len(), 1, "one place, one running");
}

/// Fetches what is due and returns the ids leased.
async fn fetch_ids(env: &Env, lease: Duration) -> Vec<JobId> {
    let b = env.client.backend();
    let mut ids: Vec<JobId> = b
        .fetch(QUEUE, 10, lease)
        .await
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.id)
        .collect();
    ids.sort();
    ids
}

pub async fn a_key_throttle_settled_beside_a_dead_letter_sends_the_keys_retry_back_to_wait(
    env: &Env,
) {
    use redjob::backend::{Reschedule, Throttle};
    create(env).await;
    let b = env.client.backend();
    let three = EnqueueOptions::new().per_key(3);
    for seq in 0..3 {
        let job = charge("st", seq, 10);
        env.client.enqueue_with(&job, three.clone()).await.unwrap();
    }
    let leased = b
        .fetch(QUEUE, 10, Duration::from_secs(30))
        .await
        .unwrap()
        .jobs;
    assert_eq!(leased.len(), 3);
    let (a, r, t) = (&leased[0], &leased[1], &leased[2]);
    // one call: a dead letter, a retry, and a throttle of the key
    let settle = Settle {
        dead: vec![DeadLetterEntry {
            id: a.id,
            token: a.token,
            error: "gave up".into(),
        }],
        reschedules: vec![Reschedule {
            id: r.id,
            token: r.token,
            delay: Duration::from_millis(100),
            deliveries: r.token.attempt(),
            release: false,
            error: Some("not yet".into()),
        }],
        throttles: vec![Throttle {
            id: t.id,
            token: t.token,
            deliveries: t.token.attempt().saturating_sub(1),
            delay: Duration::from_secs(60),
            error: "429".into(),
            key: true,
        }],
        ..Settle::default()
    };
    b.settle(QUEUE, &settle).await.unwrap();
    // the retry does not run while its key is throttled: it waits
    let retried = b.job(QUEUE, &r.id).await.unwrap().unwrap();
    assert_eq!(retried.state, JobState::Blocked);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(fetch_ids(env, Duration::from_secs(5)).await.is_empty());
}

pub async fn dead_letters_of_one_key_requeued_together_take_the_first_ones_places(env: &Env) {
    use redjob::ops::Spread;
    create(env).await;
    let b = env.client.backend();
    // two jobs of a key, of one and three places, die
    let mut letters = Vec::new();
    for (seq, per) in [(0, 1), (1, 3)] {
        let job = charge("rq", seq, 10);
        let opts = EnqueueOptions::new().per_key(per);
        let id = env.client.enqueue_with(&job, opts).await.unwrap();
        run_out(env, id, true).await;
        letters.push(id);
    }
    // requeued in one call, the key has no jobs: the first letter's places
    assert_eq!(
        b.requeue_dead(QUEUE, &letters, Spread::NOW).await.unwrap(),
        2
    );
    let counts = b.counts(QUEUE).await.unwrap();
    assert_eq!((counts.ready, counts.blocked), (1, 1), "{counts:?}");
    assert_eq!(b.key_usage(QUEUE, "rq").await.unwrap().per_key, 1);
}

pub async fn a_keys_throttle_end_wakes_it_though_a_ghosts_lease_ended_first(env: &Env) {
    let b = env.client.backend();
    let two = EnqueueOptions::new().per_key(2);
    // one throttles the key for 3 s, the other is cancelled while it runs
    // (its place is kept until its lease ends, in 1 s)
    let leased = two_leased_one_throttling(env, "gw", Duration::from_secs(3)).await;
    assert_eq!(
        b.cancel(QUEUE, &leased[1].id).await.unwrap(),
        Cancelled::Cancelling
    );
    let next = env
        .client
        .enqueue_with(&charge("gw", 2, 10), two.clone())
        .await
        .unwrap();
    assert_eq!(
        b.job(QUEUE, &next).await.unwrap().unwrap().state,
        JobState::Blocked
    );
    // the cancelled job's lease ends, the key still throttled: nothing
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(fetch_ids(env, Duration::from_secs(5)).await.is_empty());
    // the throttle ends: the throttled job and the waiting one both run
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let mut want = vec![leased[0].id, next];
    want.sort();
    assert_eq!(fetch_ids(env, Duration::from_secs(5)).await, want);
}

/// Two jobs of `key` (two places) leased for 1 s, the first settled as a
/// throttle of the key for `throttle`: both deliveries.
async fn two_leased_one_throttling(
    env: &Env,
    key: &str,
    throttle: Duration,
) -> Vec<redjob::backend::Delivery> {
    create(env).await;
    let b = env.client.backend();
    let two = EnqueueOptions::new().per_key(2);
    for seq in 0..2 {
        let job = charge(key, seq, 10);
        env.client.enqueue_with(&job, two.clone()).await.unwrap();
    }
    let leased = b
        .fetch(QUEUE, 10, Duration::from_secs(1))
        .await
        .unwrap()
        .jobs;
    assert_eq!(leased.len(), 2);
    let settle = Settle {
        throttles: vec![redjob::backend::Throttle {
            id: leased[0].id,
            token: leased[0].token,
            deliveries: leased[0].token.attempt().saturating_sub(1),
            delay: throttle,
            error: "429".into(),
            key: true,
        }],
        ..Settle::default()
    };
    b.settle(QUEUE, &settle).await.unwrap();
    leased
}

/// The reads of concurrency keys check the queue's name first, as every
/// admin call does (Redis's `key_usage` named a bad key first), and a page
/// asked after what no page gave is refused clearly or read, never a raw
/// server error (Redis handed it to `HSCAN`, which failed the script).
pub async fn key_reads_refuse_a_bad_name_first_and_a_cursor_no_page_gave_clearly(env: &Env) {
    use redjob::Error;
    use redjob::queue::{Keyed, SendMessage};
    let q = env.queues();
    let r = q.key_usage("no such name!", "").await;
    assert!(
        matches!(r, Err(Error::InvalidQueueName { .. })),
        "a bad queue name is named first: {r:?}"
    );
    let r = q.keys("no such name!", Some("not a cursor"), 10).await;
    assert!(
        matches!(r, Err(Error::InvalidQueueName { .. })),
        "a bad queue name is named first: {r:?}"
    );
    q.create_queue("key_pages", QueueOptions::default())
        .await
        .unwrap();
    q.send_outcomes(
        "key_pages",
        &[SendMessage::new("x").keyed(Keyed::new("k1"))],
    )
    .await
    .unwrap();
    for after in ["not a cursor", "-1", "1.5", ""] {
        let r = q.keys("key_pages", Some(after), 10).await;
        assert!(
            matches!(r, Ok(_) | Err(Error::InvalidValue { .. })),
            "after {after:?}: a page or a clear refusal: {r:?}"
        );
    }
    // the first page and its `next` still read every key
    let first = q.keys("key_pages", None, 10).await.unwrap();
    assert_eq!(first.keys.len(), 1, "{first:?}");
    assert_eq!(first.next, None);
}

/// `Admin::run_now` of a delayed job waiting for its key's place
/// (`Blocked`) makes it due now within the key's wait: it says `Blocked`,
/// runs as soon as the key's place frees, and takes at once the place of a
/// job of its key due later that does not run yet (which waits again). The
/// old code looked only in the queue's sorted sets: it said `None` ("no such
/// job") and the job kept its delay, however long after its key freed.
pub async fn a_run_now_makes_a_job_waiting_for_its_key_due_within_the_keys_wait(env: &Env) {
    create(env).await;
    let b = env.client.backend();
    let lease = Duration::from_secs(60);
    let hour = Duration::from_secs(3600);
    let holder = env.client.enqueue(&charge("r", 1, 10)).await.unwrap();
    let later = env
        .client
        .enqueue_in(&charge("r", 2, 10), hour)
        .await
        .unwrap();
    let state = |id: JobId| {
        let b = env.client.backend();
        async move { b.job(QUEUE, &id).await.unwrap().map(|j| j.state) }
    };
    assert_eq!(state(later).await, Some(JobState::Blocked));
    assert_eq!(
        b.run_now(QUEUE, &later).await.unwrap(),
        Some(JobState::Blocked)
    );
    // due now, it still waits for the holder's place
    assert_eq!(state(later).await, Some(JobState::Blocked));
    assert_eq!(
        b.run_now(QUEUE, &later).await.unwrap(),
        Some(JobState::Blocked)
    );
    let running = b.fetch(QUEUE, 10, lease).await.unwrap().jobs;
    assert_eq!(running.iter().map(|d| d.id).collect::<Vec<_>>(), [holder]);
    let ack = Settle {
        acks: vec![(holder, running[0].token)],
        ..Settle::default()
    };
    assert_eq!(b.settle(QUEUE, &ack).await.unwrap().acked, 1);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        fetch_ids(env, lease).await,
        [later],
        "due once its key freed"
    );
    // a holder due in an hour that does not run yet gives its place to a
    // job of its key made due now
    let first = env
        .client
        .enqueue_in(&charge("s", 1, 10), hour)
        .await
        .unwrap();
    let second = env
        .client
        .enqueue_in(&charge("s", 2, 10), 2 * hour)
        .await
        .unwrap();
    assert_eq!(state(first).await, Some(JobState::Scheduled));
    assert_eq!(state(second).await, Some(JobState::Blocked));
    assert_eq!(
        b.run_now(QUEUE, &second).await.unwrap(),
        Some(JobState::Blocked)
    );
    assert_eq!(state(second).await, Some(JobState::Ready));
    assert_eq!(state(first).await, Some(JobState::Blocked));
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(fetch_ids(env, lease).await, [second]);
}
