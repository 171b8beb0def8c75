//! A handler's throttle (`JobError::rate_limited`): the job goes back without
//! counting an attempt, its queue starts nothing until the throttle ends, a
//! throttle and an operator's pause are apart, and a job throttled too many
//! times in a row has its next throttle counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redjob::backend::{Backend, Settle, Throttle};
use redjob::inspect::{AttemptOutcome, Inspect};
use redjob::ops::Admin;
use redjob::queue::{QueueOptions, Queues};
use redjob::{Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::Env;
use crate::common::{start_serving, wait_for};

const QUEUE: &str = "throttled";

/// Throttled by its dependency for `ms` on its first `times` runs.
#[derive(Serialize, Deserialize, Job, Clone)]
#[job(name = "throttles_api_call", queue = "throttled")]
struct ApiCall {
    key: u32,
    times: u32,
    ms: u64,
}

/// What the handlers saw: runs per key, and when each ran with its attempt.
#[derive(Default)]
struct Seen {
    runs: [AtomicU32; 4],
    log: std::sync::Mutex<Vec<(u32, u32, Instant)>>,
}

impl Job for ApiCall {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let seen = ctx.data::<Arc<Seen>>()?;
        let n = seen.runs[self.key as usize].fetch_add(1, Ordering::SeqCst);
        seen.log
            .lock()
            .unwrap()
            .push((self.key, ctx.attempt(), Instant::now()));
        if n < self.times {
            return Err(JobError::rate_limited(Duration::from_millis(self.ms)));
        }
        Ok(())
    }
}

/// Enqueues an [`ApiCall`] of `key`, throttled for `ms` on its first
/// `times` runs.
async fn call(env: &Env, key: u32, times: u32, ms: u64) -> redjob::JobId {
    env.client
        .enqueue(&ApiCall { key, times, ms })
        .await
        .unwrap()
}

async fn create(env: &Env) {
    env.client
        .backend()
        .create_queue(QUEUE, QueueOptions::default())
        .await
        .unwrap();
}

pub async fn rate_limited_counts_no_attempt_and_holds_the_queue(env: &Env) {
    create(env).await;
    let seen = Arc::new(Seen::default());
    // the first is throttled for 1 s on its first run; the second waits
    let a = call(env, 0, 1, 1000).await;
    call(env, 1, 0, 0).await;
    let w = start_serving(worker(env, 1, 0, &seen)).await;
    assert!(
        wait_for(Duration::from_secs(15), || async {
            env.client.stats(QUEUE).await.unwrap().processed == 2
        })
        .await,
        "both ran"
    );
    w.stop().await;
    let log = seen.log.lock().unwrap().clone();
    assert_eq!(log.len(), 3, "{log:?}");
    let (throttled, other, again) = (log[0], log[1], log[2]);
    assert_eq!((throttled.0, other.0, again.0), (0, 1, 0));
    assert!(
        other.2 - throttled.2 >= Duration::from_millis(990),
        "the queue started nothing while throttled: {:?}",
        other.2 - throttled.2
    );
    assert_eq!(again.1, 1, "the throttled run counted no attempt");
    let stats = env.client.stats(QUEUE).await.unwrap();
    assert_eq!((stats.retried, stats.failed), (0, 0));
    // the history keeps the throttled run's record before the one that
    // succeeded
    let info = env.client.job(QUEUE, &a).await.unwrap().expect("kept");
    let outcomes: Vec<_> = info.runs.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [AttemptOutcome::Throttled, AttemptOutcome::Ok],
        "{:?}",
        info.runs
    );
}

/// Leases the queue's job, and settles it as throttled for `ms`.
async fn throttle_once(env: &Env, ms: u64, limit: u32) -> u32 {
    let q = env.client.backend();
    let f = q.fetch(QUEUE, 1, Duration::from_secs(30)).await.unwrap();
    let d = &f.jobs[0];
    let settle = Settle {
        throttles: vec![Throttle {
            id: d.id,
            token: d.token,
            deliveries: d.token.attempt().saturating_sub(1),
            delay: Duration::from_millis(ms),
            error: "429".into(),
            key: false,
        }],
        throttle_limit: limit,
        ..Settle::default()
    };
    let s = q.settle(QUEUE, &settle).await.unwrap();
    assert_eq!(s.rescheduled, 1);
    d.token.attempt()
}

pub async fn a_throttle_and_a_pause_are_apart(env: &Env) {
    create(env).await;
    call(env, 0, 0, 0).await;
    let q = env.client.backend();
    throttle_once(env, 1500, 0).await;
    let usage = env.client.limit_usage(QUEUE).await.unwrap();
    assert!(usage.throttled_until_ms.is_some(), "{usage:?}");
    // paused and resumed while throttled: still throttled
    env.client.pause(QUEUE).await.unwrap();
    env.client.resume(QUEUE).await.unwrap();
    let f = q.fetch(QUEUE, 5, Duration::from_secs(30)).await.unwrap();
    assert!(f.jobs.is_empty() && f.held.throttle, "{f:?}");
    assert!(f.next_due_us.is_some());
    // paused while the throttle ends: still paused
    env.client.pause(QUEUE).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let f = q.fetch(QUEUE, 5, Duration::from_secs(30)).await.unwrap();
    assert!(f.jobs.is_empty() && f.paused, "{f:?}");
    assert_eq!(
        env.client
            .limit_usage(QUEUE)
            .await
            .unwrap()
            .throttled_until_ms,
        None
    );
    env.client.resume(QUEUE).await.unwrap();
    let f = q.fetch(QUEUE, 5, Duration::from_secs(30)).await.unwrap();
    assert_eq!(f.jobs.len(), 1, "the throttle ended and the queue resumed");
    assert_eq!(f.jobs[0].token.attempt(), 1, "the throttle counted nothing");
}

pub async fn throttles_in_a_row_past_the_limit_count_an_attempt(env: &Env) {
    create(env).await;
    call(env, 0, 0, 0).await;
    // a limit of 2: two throttles in a row go uncounted, the third counts,
    // and so does each after it while the throttles go on
    for expected in [1, 1, 1, 2] {
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(throttle_once(env, 1, 2).await, expected);
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let f = env
        .client
        .backend()
        .fetch(QUEUE, 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        f.jobs[0].token.attempt(),
        3,
        "each throttle past the limit in a row counts"
    );
    let info = env
        .client
        .job(QUEUE, &f.jobs[0].id)
        .await
        .unwrap()
        .expect("there");
    assert_eq!(info.runs.len(), 4);
    assert!(
        info.runs
            .iter()
            .all(|a| a.outcome == AttemptOutcome::Throttled && a.error.as_deref() == Some("429")),
        "{:?}",
        info.runs
    );
    // throttles, every one (as the hooks and metrics say): no failure counted
    let stats = env.client.stats(QUEUE).await.unwrap();
    assert_eq!((stats.retried, stats.failed), (0, 0));
}

/// A worker of [`ApiCall`] with `concurrency` slots and `prefetch` leased
/// ahead.
fn worker(env: &Env, concurrency: usize, prefetch: usize, seen: &Arc<Seen>) -> Worker {
    Worker::builder(env.client.backend())
        .register::<ApiCall>()
        .concurrency(concurrency)
        .prefetch(prefetch)
        .data(seen.clone())
        .handle_signals(false)
        .build()
        .unwrap()
}

async fn processed(env: &Env, n: u64) -> bool {
    wait_for(Duration::from_secs(20), || async {
        env.client.stats(QUEUE).await.unwrap().processed >= n
    })
    .await
}

pub async fn a_throttled_job_runs_again_when_its_throttle_ends(env: &Env) {
    create(env).await;
    let seen = Arc::new(Seen::default());
    // free slots: the worker sleeps until its next due time, which the
    // throttle's settle moves up
    let w = start_serving(worker(env, 4, 0, &seen)).await;
    call(env, 0, 1, 1000).await;
    assert!(processed(env, 1).await, "ran again");
    w.stop().await;
    let log = seen.log.lock().unwrap().clone();
    assert_eq!(log.len(), 2);
    let gap = log[1].2 - log[0].2;
    assert!(
        gap >= Duration::from_millis(990) && gap < Duration::from_millis(2500),
        "ran again {gap:?} after its throttle of 1 s"
    );
}

pub async fn prefetched_jobs_wait_out_a_throttle(env: &Env) {
    create(env).await;
    let seen = Arc::new(Seen::default());
    let quick = ApiCall {
        key: 1,
        times: 0,
        ms: 0,
    };
    // quick jobs (so that the worker prefetches), one throttled for 1 s,
    // then more quick ones, leased ahead of the one slot
    let mut jobs: Vec<ApiCall> = (0..6).map(|_| quick.clone()).collect();
    jobs.push(ApiCall {
        key: 0,
        times: 1,
        ms: 1000,
    });
    jobs.extend((0..12).map(|_| quick.clone()));
    env.client.enqueue_batch(&jobs).await.unwrap();
    let w = start_serving(worker(env, 1, 8, &seen)).await;
    assert!(processed(env, 19).await, "all ran");
    w.stop().await;
    let log = seen.log.lock().unwrap().clone();
    let throttled_at = log.iter().find(|(k, _, _)| *k == 0).unwrap().2;
    let during: Vec<_> = log
        .iter()
        .filter(|(_, _, at)| *at > throttled_at && *at - throttled_at < Duration::from_millis(990))
        .collect();
    assert!(during.is_empty(), "started while throttled: {during:?}");
}

pub async fn an_operator_ends_a_throttle_and_a_pause_stays(env: &Env) {
    create(env).await;
    assert!(
        !env.client.end_throttle(QUEUE).await.unwrap(),
        "nothing to end"
    );
    assert!(matches!(
        env.client.end_throttle("nope").await,
        Err(redjob::Error::QueueNotFound { .. })
    ));
    call(env, 0, 0, 0).await;
    // throttled for an hour, and paused
    throttle_once(env, 3_600_000, 0).await;
    env.client.pause(QUEUE).await.unwrap();
    assert!(env.client.end_throttle(QUEUE).await.unwrap());
    assert_eq!(
        env.client
            .limit_usage(QUEUE)
            .await
            .unwrap()
            .throttled_until_ms,
        None
    );
    let q = env.client.backend();
    let f = q.fetch(QUEUE, 5, Duration::from_secs(30)).await.unwrap();
    assert!(f.paused, "the pause stays");
    env.client.resume(QUEUE).await.unwrap();
    let f = q.fetch(QUEUE, 5, Duration::from_secs(30)).await.unwrap();
    // the queue starts jobs again; the throttled job stays due in an hour
    assert!(f.jobs.is_empty() && !f.held.any(), "{f:?}");
    call(env, 1, 0, 0).await;
    let f = q.fetch(QUEUE, 5, Duration::from_secs(30)).await.unwrap();
    assert_eq!(f.jobs.len(), 1, "a job sent since starts");
}

pub async fn ending_a_throttle_wakes_the_workers_it_held(env: &Env) {
    create(env).await;
    let seen = Arc::new(Seen::default());
    let w = start_serving(worker(env, 4, 0, &seen)).await;
    // throttled for an hour on its first run
    call(env, 0, 1, 3_600_000).await;
    assert!(
        wait_for(Duration::from_secs(10), || async {
            env.client
                .limit_usage(QUEUE)
                .await
                .unwrap()
                .throttled_until_ms
                .is_some()
        })
        .await
    );
    // past the worker's own hold, a job sent now waits for the hour
    tokio::time::sleep(Duration::from_secs(3)).await;
    call(env, 1, 0, 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(env.client.stats(QUEUE).await.unwrap().processed, 0);
    let ended = Instant::now();
    assert!(env.client.end_throttle(QUEUE).await.unwrap());
    assert!(processed(env, 1).await, "the job sent since ran");
    w.stop().await;
    let log = seen.log.lock().unwrap().clone();
    let ran = log.iter().find(|(k, _, _)| *k == 1).unwrap().2;
    assert!(
        ran - ended < Duration::from_secs(2),
        "ran {:?} after the throttle ended",
        ran - ended
    );
}
