//! Bulk actions while workers run: requeue-all and delete-matching of dead
//! letters, a queue's purge and a subscriber's requeue-all each act only on
//! what was there when they started, each item at most once, and end, however
//! fast a failing worker or a producer adds matching items meanwhile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redjob::backend::Backend;
use redjob::backend::any::AnyBackend;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, DeadQuery, Retention};
use redjob::queue::{QueueOptions, SendMessage};
use redjob::topic::Start;
use redjob::{Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use super::ops::kill;
use crate::common::{Recorder, start, start_serving, wait_for};

/// How long a bulk action may take here: far more than it needs.
const LIMIT: Duration = Duration::from_secs(20);

/// Keys of jobs a producer adds while a bulk action runs start here.
const LATE: u64 = 1_000_000;

/// Dies at its first run, recording it.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bulk_doomed", queue = "bulk")]
struct Doomed {
    i: u64,
}

impl Job for Doomed {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.i);
        Err(JobError::fatal("account closed"))
    }
}

/// A body of `Doomed` with key `i`.
fn doomed(i: u64) -> SendMessage {
    SendMessage::new(format!(r#"{{"type":"bulk_doomed","args":{{"i":{i}}}}}"#))
}

/// `n` dead letters of `Doomed` on "bulk" (keys 0..n), made without a worker.
async fn letters(env: &Env, n: usize) {
    let rows = vec![("bulk_doomed", "account closed"); n];
    kill(env, "bulk", &rows, 0, Retention::UNBOUNDED).await;
}

/// A worker on "bulk" of 64 slots that kills every job at its first run.
async fn killer(env: &Env, rec: &Recorder) -> crate::common::Running {
    let w = Worker::builder(env.client.backend())
        .queue("bulk")
        .concurrency(64)
        .handle_signals(false)
        .dead_letter_retention(Retention::UNBOUNDED)
        .data(rec.clone())
        .build()
        .unwrap();
    start_serving(w).await
}

/// Waits until "bulk" holds no job waiting or running (every job died).
async fn drained(q: &AnyBackend) {
    let idle = wait_for(LIMIT, || async {
        let c = q.counts("bulk").await.unwrap();
        c.ready + c.scheduled + c.in_flight == 0
    })
    .await;
    assert!(idle, "the worker killed every job");
}

/// Sends `Doomed` jobs with keys from `LATE` on, 20 at a time, until `done`
/// holds (at least one batch); returns how many.
async fn produce(q: &AnyBackend, queue: &str, done: impl Fn() -> bool) -> u64 {
    let mut sent = 0;
    loop {
        let batch: Vec<SendMessage> = (0..20).map(|k| doomed(LATE + sent + k)).collect();
        q.send(queue, &batch, &QueueOptions::default())
            .await
            .unwrap();
        sent += 20;
        if done() {
            return sent;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Polls `cond` every ms (at most `LIMIT`), or until `done` holds.
async fn until(mut cond: impl AsyncFnMut() -> bool, done: impl Fn() -> bool) {
    let start = tokio::time::Instant::now();
    while !done() && !cond().await {
        assert!(start.elapsed() < LIMIT, "no progress seen");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

pub async fn requeue_all_takes_each_letter_once_while_a_worker_kills_them_again(env: &Env) {
    const N: usize = 3000;
    let q = env.client.backend();
    letters(env, N).await;
    let rec = Recorder::default();
    let w = killer(env, &rec).await;
    for (round, query) in [DeadQuery::default(), DeadQuery::default().newest_first()]
        .into_iter()
        .enumerate()
    {
        let requeued = tokio::time::timeout(LIMIT, q.requeue_dead_matching("bulk", &query, None))
            .await
            .expect("requeue-all ends")
            .unwrap();
        assert_eq!(
            requeued, N as u64,
            "round {round}: each of the {N} letters there at the start requeued once"
        );
        drained(&q).await;
        assert_eq!(q.counts("bulk").await.unwrap().dead, N as u64);
        let runs = rec.counts();
        assert_eq!(runs.len(), N);
        let over: Vec<_> = runs.iter().filter(|(_, r)| **r != round + 1).collect();
        assert!(over.is_empty(), "round {round}: runs by key {over:?}");
    }
    w.stop().await;
}

pub async fn delete_matching_leaves_the_letters_that_die_after_it_starts(env: &Env) {
    let n: u64 = if env.is_redis() { 20_000 } else { 3000 };
    let q = env.client.backend();
    letters(env, n as usize).await;
    let rec = Recorder::default();
    let w = killer(env, &rec).await;
    let query = DeadQuery::default().error_contains("closed");
    let call = {
        let (q, query) = (q.clone(), query.clone());
        tokio::spawn(async move { q.delete_dead_matching("bulk", &query).await })
    };
    // once it has deleted some, new jobs die: all after it started
    until(
        async || q.counts("bulk").await.unwrap().dead < n,
        || call.is_finished(),
    )
    .await;
    let late = produce(&q, "bulk", || call.is_finished()).await;
    let deleted = call.await.unwrap().unwrap();
    drained(&q).await;
    w.stop().await;
    assert_eq!(rec.len() as u64, late, "every late job ran once");
    assert_eq!(deleted, n, "the {n} letters there at the start, no more");
    assert_eq!(
        q.counts("bulk").await.unwrap().dead,
        late,
        "every letter that died after the start is left"
    );
}

pub async fn purge_leaves_the_jobs_sent_after_it_starts(env: &Env) {
    let n: u64 = if env.is_redis() { 30_000 } else { 3000 };
    let q = env.client.backend();
    let opts = QueueOptions::default();
    for from in (0..n).step_by(1000) {
        let batch: Vec<SendMessage> = (from..(from + 1000).min(n))
            .map(|i| match i % 10 {
                0 => doomed(i).delay(Duration::from_secs(3600)),
                1 => doomed(i).priority(5),
                _ => doomed(i),
            })
            .collect();
        q.send("pq", &batch, &opts).await.unwrap();
    }
    let leased = q.fetch("pq", 100, Duration::from_secs(60)).await.unwrap();
    assert_eq!(leased.jobs.len(), 100);
    let size = async || {
        let c = q.counts("pq").await.unwrap();
        c.ready + c.scheduled + c.in_flight
    };
    assert_eq!(size().await, n);
    let call = {
        let q = q.clone();
        tokio::spawn(async move { q.purge_queue("pq").await })
    };
    until(async || size().await < n, || call.is_finished()).await;
    let late = produce(&q, "pq", || call.is_finished()).await;
    let purged = call.await.unwrap().unwrap();
    assert_eq!(purged, n, "the {n} jobs there at the start, no more");
    assert_eq!(size().await, late, "every job sent after the start is left");
}

/// Handler runs by event key.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<u64, usize>>>);

impl Runs {
    fn add(&self, n: u64) {
        *self.0.lock().unwrap().entry(n).or_default() += 1;
    }
    fn get(&self) -> HashMap<u64, usize> {
        self.0.lock().unwrap().clone()
    }
}

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "bulk_event", topic = "bulkt", max_attempts = 1)]
struct Doom {
    n: u64,
}

pub async fn topic_requeue_all_takes_each_letter_once_while_the_subscriber_fails_them(env: &Env) {
    const N: u64 = 5000;
    let c = &env.client;
    c.subscribe("bulkt", "s", Start::Beginning).await.unwrap();
    let runs = Runs::default();
    let r = runs.clone();
    let w = Worker::builder(c.backend())
        .handle_signals(false)
        .concurrency(64)
        .dead_letter_retention(Retention {
            max_count: Some(N),
            max_age: None,
        })
        .subscribe("s", move |e: Doom, _| {
            let r = r.clone();
            async move {
                r.add(e.n);
                Err(JobError::fatal("no"))
            }
        })
        .build()
        .unwrap();
    let w = start(w);
    let events: Vec<Doom> = (0..N).map(|n| Doom { n }).collect();
    for chunk in events.chunks(500) {
        c.publish_all(chunk).await.unwrap();
    }
    let dead = async || {
        let info = c.topic("bulkt").await.unwrap().unwrap();
        let s = &info.subscribers[0];
        (s.lag + s.pending == 0).then_some(s.dead)
    };
    assert!(wait_for(LIMIT, || async { dead().await == Some(N) }).await);
    let call = {
        let c = c.clone();
        tokio::spawn(async move { c.requeue_all_dead_events("bulkt", "s").await })
    };
    // once it has requeued some, new events die too: all after it started
    until(
        async || runs.get().values().sum::<usize>() as u64 > N,
        || call.is_finished(),
    )
    .await;
    let mut late = 0;
    while !call.is_finished() || late == 0 {
        let batch: Vec<Doom> = (0..20).map(|k| Doom { n: LATE + late + k }).collect();
        c.publish_all(&batch).await.unwrap();
        late += 20;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let requeued = call.await.unwrap().unwrap();
    assert!(wait_for(LIMIT, || async { dead().await.is_some() }).await);
    w.stop().await;
    assert!(requeued <= N, "requeued {requeued} of {N}");
    let twice: Vec<_> = runs
        .get()
        .into_iter()
        .filter(|(n, r)| *r > if *n < LATE { 2 } else { 1 })
        .collect();
    assert!(
        twice.is_empty(),
        "requeued more than once, or late: {twice:?}"
    );
}

/// Lets the backend's clock pass the millisecond a count read.
async fn after_the_count() {
    tokio::time::sleep(Duration::from_millis(5)).await;
}

pub async fn a_confirmed_dead_letter_action_takes_only_the_letters_counted(env: &Env) {
    let q = env.client.backend();
    let die = async |n: usize| {
        let rows = vec![("bulk_doomed", "account closed"); n];
        kill(env, "bc", &rows, 0, Retention::UNBOUNDED).await;
    };
    die(3).await;
    let all = DeadQuery::default();
    let counted = q.count_dead("bc", &all).await.unwrap();
    assert_eq!(counted.count, 3);
    let b = DeadQuery::default().job_type("other");
    assert_eq!(q.count_dead("bc", &b).await.unwrap().count, 0);
    // two die after the count, while someone reads it
    after_the_count().await;
    die(2).await;
    assert_eq!(q.counts("bc").await.unwrap().dead, 5);
    let confirmed = all.clone().died_by(counted.upto_ms);
    let listed = q.dead_matching("bc", &confirmed, None, 100).await.unwrap();
    assert_eq!(listed.jobs.len(), 3, "the query lists the letters counted");
    assert_eq!(
        q.requeue_dead_matching("bc", &confirmed, None)
            .await
            .unwrap(),
        3
    );
    assert_eq!(q.counts("bc").await.unwrap().dead, 2, "the later two stay");
    q.purge_queue("bc").await.unwrap();
    // a delete likewise, with a count taken now
    let counted = q.count_dead("bc", &all).await.unwrap();
    assert_eq!(counted.count, 2);
    after_the_count().await;
    die(1).await;
    let confirmed = all.died_by(counted.upto_ms);
    assert_eq!(q.delete_dead_matching("bc", &confirmed).await.unwrap(), 2);
    assert_eq!(q.counts("bc").await.unwrap().dead, 1);
}

pub async fn a_confirmed_purge_takes_only_the_jobs_counted(env: &Env) {
    let q = env.client.backend();
    let opts = QueueOptions::default();
    let first = [doomed(0), doomed(1).delay(Duration::from_secs(60))];
    q.send("pc", &first, &opts).await.unwrap();
    let counted = q.count_purge("pc").await.unwrap();
    assert_eq!(counted.count, 2);
    after_the_count().await;
    q.send("pc", &[doomed(2)], &opts).await.unwrap();
    assert_eq!(q.purge_queue_upto("pc", counted.upto_ms).await.unwrap(), 2);
    let left = q.peek("pc", 10).await.unwrap();
    assert_eq!(left.len(), 1, "the job sent after the count stays");
    assert!(left[0].body.ends_with(br#""i":2}}"#), "{left:?}");
}

pub async fn a_confirmed_topic_requeue_takes_only_the_letters_counted(env: &Env) {
    let c = &env.client;
    c.subscribe("bulkc", "s", Start::Beginning).await.unwrap();
    let q = c.backend();
    crate::common::dead_events(&q, "bulkc", "s", 2).await;
    let counted = c.count_dead_events("bulkc", "s").await.unwrap();
    assert_eq!(counted.count, 2);
    let upto = counted.upto.expect("the newest letter's id");
    crate::common::dead_events(&q, "bulkc", "s", 1).await;
    assert_eq!(c.dead_events("bulkc", "s", 10).await.unwrap().len(), 3);
    assert_eq!(
        c.requeue_dead_events_upto("bulkc", "s", upto)
            .await
            .unwrap(),
        2
    );
    let left = c.dead_events("bulkc", "s", 10).await.unwrap();
    assert_eq!(left.len(), 1, "the letter that died after the count stays");
    assert!(left[0].dead_id > upto);
    assert_eq!(
        c.delete_dead_events_upto("bulkc", "s", upto).await.unwrap(),
        0
    );
    let none = c.count_dead_events("nope", "s").await;
    assert!(none.is_err(), "{none:?}");
}

pub async fn a_purge_cutoff_is_exact_to_the_millisecond_and_never_past_now(env: &Env) {
    let q = env.client.backend();
    let opts = QueueOptions::default();
    let sent = q.send("pm", &[doomed(0)], &opts).await.unwrap();
    let at = sent[0].id.sent_ms();
    assert_eq!(q.purge_queue_upto("pm", at - 1).await.unwrap(), 0);
    assert_eq!(q.purge_queue_upto("pm", at).await.unwrap(), 1);
    // a cutoff past what an id holds (the year 2085) or any u64: now
    for upto in [3_656_158_440_063, u64::MAX] {
        q.send("pm", &[doomed(1), doomed(2)], &opts).await.unwrap();
        assert_eq!(q.purge_queue_upto("pm", upto).await.unwrap(), 2, "{upto}");
    }
}

pub async fn a_dead_count_keeps_the_querys_own_cutoff(env: &Env) {
    let q = env.client.backend();
    let die = async |n: usize| {
        let rows = vec![("bulk_doomed", "account closed"); n];
        kill(env, "bk", &rows, 0, Retention::UNBOUNDED).await;
    };
    die(2).await;
    let first = q.count_dead("bk", &DeadQuery::default()).await.unwrap();
    after_the_count().await;
    die(1).await;
    let earlier = DeadQuery::default().died_by(first.upto_ms);
    let again = q.count_dead("bk", &earlier).await.unwrap();
    assert_eq!((again.count, again.upto_ms), (2, first.upto_ms));
    let filtered = earlier.clone().job_type("bulk_doomed");
    let f = q.count_dead("bk", &filtered).await.unwrap();
    assert_eq!((f.count, f.upto_ms), (2, first.upto_ms));
    let q2 = DeadQuery::default().died_by(again.upto_ms);
    assert_eq!(q.delete_dead_matching("bk", &q2).await.unwrap(), 2);
    assert_eq!(q.counts("bk").await.unwrap().dead, 1);
}

pub async fn a_purge_takes_a_keyed_job_that_goes_back_to_wait_while_it_runs(env: &Env) {
    use redjob::queue::Keyed;
    let n: u64 = if env.is_redis() { 30_000 } else { 3000 };
    const KEYS: u64 = 300;
    let q = env.client.backend();
    let opts = QueueOptions::default();
    for from in (0..n).step_by(1000) {
        let batch: Vec<SendMessage> = (from..(from + 1000).min(n)).map(doomed).collect();
        q.send("pk", &batch, &opts).await.unwrap();
    }
    // each key's one place is held by a job due in an hour
    let later: Vec<SendMessage> = (0..KEYS)
        .map(|k| {
            doomed(n + k)
                .keyed(Keyed::new(format!("acct{k}")))
                .delay(Duration::from_secs(3600))
        })
        .collect();
    let holders: Vec<redjob::JobId> = q
        .send("pk", &later, &opts)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    let size = async || {
        let c = q.counts("pk").await.unwrap();
        c.ready + c.scheduled + c.in_flight + c.blocked
    };
    assert_eq!(size().await, n + KEYS);
    let call = {
        let q = q.clone();
        tokio::spawn(async move { q.purge_queue("pk").await })
    };
    until(async || size().await < n + KEYS, || call.is_finished()).await;
    // while it runs, a job due now comes for each key: it takes its key's
    // place, and the holder, due later, goes back to wait for it
    let now: Vec<SendMessage> = (0..KEYS)
        .map(|k| doomed(LATE + k).keyed(Keyed::new(format!("acct{k}"))))
        .collect();
    q.send("pk", &now, &opts).await.unwrap();
    let purged = call.await.unwrap().unwrap();
    let mut left = Vec::new();
    for h in &holders {
        if let Some(j) = q.job("pk", h).await.unwrap()
            && j.finished.is_none()
        {
            left.push((*h, j.state));
        }
    }
    assert!(
        left.is_empty(),
        "{} of the {KEYS} keyed jobs sent before the purge are left: {:?}",
        left.len(),
        &left[..left.len().min(3)]
    );
    assert_eq!(purged, n + KEYS, "every job there at the start, no more");
}
