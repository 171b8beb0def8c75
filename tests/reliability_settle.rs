//! Leases and holds a worker keeps when the backend is slow or out of reach:
//! a lease renewed after it ran out holds its place under a global limit on
//! every backend; a run given up for a lost lease is fetched again at once,
//! whether it was fetched or handed to the worker; a slow settle call holds
//! back no renewal of a running job; a throttle is held until its own settle
//! lands, not an earlier one's, and a key's throttle asked by a job without
//! a key holds its queue as one; a throttle that landed beside an ack the
//! fence refused ends when an operator ends it; a deleted job's run that ends while its lost
//! lease is classified is reported deleted.

mod common;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{RedisServer, wait_for};
use redjob::backend::any::AnyBackend;
use redjob::backend::memory::MemoryBackend;
use redjob::backend::{
    Backend, DeadLetter, Fetched, MinuteStats, QueueStats, Settle, Settled, Token,
};
use redjob::inspect::Inspect;
use redjob::ops::{Admin, Concurrency, QueueSettings};
use redjob::queue::{QueueOptions, Queues, SendMessage};
use redjob::{Client, Job, JobContext, JobError, JobId, Worker};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

// ---------------------------------------------------------------------------
// A backend whose first settles are slow (each waits `settle_delay`, then runs).
// ---------------------------------------------------------------------------

#[derive(Clone)]
struct Slow<B> {
    inner: B,
    /// How long each of the first `slow_settles` settle calls waits before
    /// it runs.
    settle_delay: Duration,
    /// How many settle calls are still to wait `settle_delay` (counted down).
    slow_settles: Arc<std::sync::atomic::AtomicU32>,
    /// While set, every lease renewal fails (the backend out of reach).
    renewals_fail: Arc<std::sync::atomic::AtomicBool>,
    /// When set, each read of scores (a lost lease's classification)
    /// notifies it as it begins, then waits 50 ms before it runs.
    scores_begin: Option<Arc<tokio::sync::Notify>>,
    /// When set, fetches wait while it holds them (see [`HoldFetches`]).
    holds: Option<Arc<HoldFetches>>,
}

/// Holds a worker's fetches back until its next read of scores (a lost
/// lease's classification), which lets them go and waits (80 ms at most)
/// for one to deliver the held job again.
#[derive(Default)]
struct HoldFetches {
    gate: Arc<tokio::sync::RwLock<()>>,
    held: Mutex<Option<tokio::sync::OwnedRwLockWriteGuard<()>>>,
    job: Mutex<Option<JobId>>,
    /// A fetch delivered `job` again.
    refetched: tokio::sync::Notify,
    refetched_flag: std::sync::atomic::AtomicBool,
}

impl HoldFetches {
    /// Holds fetches from now (one under way finishes first), watching for `job`.
    async fn hold(&self, job: JobId) {
        *self.job.lock().unwrap() = Some(job);
        let guard = self.gate.clone().write_owned().await;
        *self.held.lock().unwrap() = Some(guard);
    }

    /// A fetch, held while the gate is.
    async fn fetch<F: std::future::Future<Output = redjob::Result<Fetched>>>(
        &self,
        f: F,
    ) -> redjob::Result<Fetched> {
        let _open = self.gate.read().await;
        let r = f.await;
        let job = *self.job.lock().unwrap();
        if let (Ok(fetched), Some(job)) = (&r, job)
            && fetched.jobs.iter().any(|d| d.id == job)
        {
            self.refetched_flag.store(true, Ordering::SeqCst);
            self.refetched.notify_one();
        }
        r
    }

    /// Before a read of scores: lets held fetches go and waits for one to
    /// deliver the job again.
    async fn release(&self) {
        let held = self.held.lock().unwrap().take();
        if let Some(guard) = held {
            drop(guard);
            let _ =
                tokio::time::timeout(Duration::from_millis(80), self.refetched.notified()).await;
        }
    }
}

impl<B: Backend> Backend for Slow<B> {
    async fn send(
        &self,
        q: &str,
        m: &[SendMessage],
        c: &QueueOptions,
    ) -> redjob::Result<Vec<redjob::queue::Sent>> {
        Backend::send(&self.inner, q, m, c).await
    }
    async fn fetch(&self, q: &str, max: usize, lease: Duration) -> redjob::Result<Fetched> {
        let r = match &self.holds {
            Some(h) => h.fetch(self.inner.fetch(q, max, lease)).await,
            None => self.inner.fetch(q, max, lease).await,
        };
        tracing::debug!(
            max,
            got = r.as_ref().map(|f| f.jobs.len()).unwrap_or(0),
            "fetch"
        );
        r
    }
    async fn fetch_waiting(
        &self,
        q: &str,
        max: usize,
        lease: Duration,
        worker: &str,
        hands: usize,
    ) -> redjob::Result<Fetched> {
        let fetch = self.inner.fetch_waiting(q, max, lease, worker, hands);
        let r = match &self.holds {
            Some(h) => h.fetch(fetch).await,
            None => fetch.await,
        };
        tracing::debug!(
            max,
            got = r.as_ref().map(|f| f.jobs.len()).unwrap_or(0),
            "fetch_waiting"
        );
        r
    }
    async fn withdraw_handoffs(
        &self,
        qs: &[String],
        worker: &str,
        lease: Duration,
    ) -> redjob::Result<()> {
        self.inner.withdraw_handoffs(qs, worker, lease).await
    }
    async fn extend(
        &self,
        q: &str,
        l: &[(JobId, Token)],
        lease: Duration,
    ) -> redjob::Result<Vec<Option<Token>>> {
        tracing::debug!(n = l.len(), "renewal");
        if self.renewals_fail.load(Ordering::SeqCst) {
            return Err(redjob::Error::Protocol("renewal failed (simulated)".into()));
        }
        self.inner.extend(q, l, lease).await
    }
    async fn sizes(&self, q: &str) -> redjob::Result<redjob::inspect::StateCounts> {
        self.inner.sizes(q).await
    }
    async fn settle(&self, q: &str, b: &Settle) -> redjob::Result<Settled> {
        tracing::debug!(
            acks = b.acks.len(),
            throttles = b.throttles.len(),
            "settle sent"
        );
        // a slow but successful call (a busy Redis, a large batch)
        if self
            .slow_settles
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            tokio::time::sleep(self.settle_delay).await;
        }
        let r = self.inner.settle(q, b).await;
        tracing::debug!("settle landed");
        r
    }
    async fn stats(&self, q: &str) -> redjob::Result<QueueStats> {
        self.inner.stats(q).await
    }
    async fn minutes(&self, q: &str) -> redjob::Result<Vec<MinuteStats>> {
        self.inner.minutes(q).await
    }
    async fn hours(&self, q: &str) -> redjob::Result<Vec<MinuteStats>> {
        self.inner.hours(q).await
    }
    async fn dead_letters(&self, q: &str, limit: usize) -> redjob::Result<Vec<DeadLetter>> {
        self.inner.dead_letters(q, limit).await
    }
    async fn scores(&self, q: &str, held: &[(JobId, Token)]) -> redjob::Result<Vec<Option<Token>>> {
        if let Some(h) = &self.holds {
            h.release().await;
        }
        if let Some(begin) = &self.scores_begin {
            begin.notify_one();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.inner.scores(q, held).await
    }
    async fn warnings(&self) -> redjob::Result<Vec<String>> {
        self.inner.warnings().await
    }
    async fn listen(
        &self,
        qs: &[String],
        wake: &(dyn Fn(&str) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
    ) -> redjob::Result<()> {
        self.inner.listen(qs, wake, subscribed).await
    }
    async fn now_ms(&self) -> redjob::Result<u64> {
        self.inner.now_ms().await
    }
    async fn watch_finish(
        &self,
        queue: &str,
        id: &JobId,
        within: Duration,
    ) -> redjob::Result<redjob::backend::FinishWatch> {
        self.inner.watch_finish(queue, id, within).await
    }
    async fn batch_open(&self, spec: &redjob::backend::BatchSpec) -> redjob::Result<()> {
        self.inner.batch_open(spec).await
    }
    async fn batch_seal(&self, id: &redjob::ops::BatchId, total: u64) -> redjob::Result<()> {
        self.inner.batch_seal(id, total).await
    }
    async fn batch_status(
        &self,
        id: &redjob::ops::BatchId,
    ) -> redjob::Result<Option<redjob::ops::BatchStatus>> {
        self.inner.batch_status(id).await
    }
    async fn batch_settled(&self, queue: &str, members: &[String]) -> redjob::Result<()> {
        self.inner.batch_settled(queue, members).await
    }
    async fn batch_recover(&self, queue: &str) -> redjob::Result<()> {
        self.inner.batch_recover(queue).await
    }
    async fn batch_mark(&self, queue: &str, until: Duration) -> redjob::Result<()> {
        self.inner.batch_mark(queue, until).await
    }
    async fn batches(
        &self,
        before_ms: Option<u64>,
        limit: usize,
    ) -> redjob::Result<Vec<redjob::ops::BatchStatus>> {
        self.inner.batches(before_ms, limit).await
    }
    async fn batch_dead(
        &self,
        id: &redjob::ops::BatchId,
        limit: usize,
    ) -> redjob::Result<Vec<(String, JobId)>> {
        self.inner.batch_dead(id, limit).await
    }
    async fn flow_wait(
        &self,
        queue: &str,
        id: &JobId,
        batch: &redjob::ops::BatchId,
        body: &[u8],
    ) -> redjob::Result<()> {
        self.inner.flow_wait(queue, id, batch, body).await
    }
    async fn flow_after(
        &self,
        queue: &str,
        id: &JobId,
        r: &redjob::backend::BatchRef,
    ) -> redjob::Result<()> {
        self.inner.flow_after(queue, id, r).await
    }
    async fn batch_results(
        &self,
        id: &redjob::ops::BatchId,
        from: u64,
        limit: usize,
    ) -> redjob::Result<Vec<(u64, Vec<u8>)>> {
        self.inner.batch_results(id, from, limit).await
    }
    async fn batch_sweep(&self) -> redjob::Result<()> {
        self.inner.batch_sweep().await
    }
    async fn batch_add(
        &self,
        id: &redjob::ops::BatchId,
        jobs: &[(String, SendMessage)],
    ) -> redjob::Result<()> {
        self.inner.batch_add(id, jobs).await
    }
    async fn batch_cancel(&self, id: &redjob::ops::BatchId) -> redjob::Result<bool> {
        self.inner.batch_cancel(id).await
    }
    async fn cancelled_batches(
        &self,
        after: u64,
    ) -> redjob::Result<Vec<(redjob::ops::BatchId, u64)>> {
        self.inner.cancelled_batches(after).await
    }
    async fn cancel_job(&self, q: &str, id: &JobId, by: &str) -> redjob::Result<bool> {
        self.inner.cancel_job(q, id, by).await
    }
    async fn unique_started(&self, q: &str, id: &JobId) -> redjob::Result<()> {
        self.inner.unique_started(q, id).await
    }
    async fn tick(
        &self,
        q: &str,
        t: &redjob::ops::Tick<'_>,
        m: &SendMessage,
        c: &QueueOptions,
    ) -> redjob::Result<redjob::ops::Ticked> {
        self.inner.tick(q, t, m, c).await
    }
    async fn beat(
        &self,
        id: &str,
        beat: &[u8],
        ttl: Duration,
    ) -> redjob::Result<redjob::ops::BeatReply> {
        self.inner.beat(id, beat, ttl).await
    }
    async fn touch(&self, id: &str, ttl: Duration, since: Duration) -> redjob::Result<bool> {
        self.inner.touch(id, ttl, since).await
    }
    async fn listen_handoff(
        &self,
        qs: &[String],
        worker: &str,
        wake: &(dyn Fn(&str) + Send + Sync),
        handed: &(dyn Fn(redjob::backend::Handed) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
        stop: &tokio_util::sync::CancellationToken,
    ) -> redjob::Result<()> {
        self.inner
            .listen_handoff(qs, worker, wake, handed, subscribed, stop)
            .await
    }
}

// ---------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------

/// What the handlers saw: when each tag started.
#[derive(Default)]
struct Seen {
    starts: Mutex<Vec<(String, Instant)>>,
}

impl Seen {
    fn starts_of(&self, tag: &str) -> Vec<Instant> {
        self.starts
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t == tag)
            .map(|(_, at)| *at)
            .collect()
    }
}

/// Sleeps `ms`, recording its start under `tag`.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "audit_nap", queue = "audit_q")]
struct Nap {
    tag: String,
    ms: u64,
}

impl Job for Nap {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let seen = ctx.data::<Arc<Seen>>()?;
        seen.starts
            .lock()
            .unwrap()
            .push((self.tag.clone(), Instant::now()));
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        Ok(())
    }
}

/// Sleeps `pre_ms`, then on its first run says its dependency throttles it
/// for `ms` (the queue waits; with `key`, its concurrency key's throttle,
/// `rate_limited_key`, which for this type without a key is its queue's
/// too); later runs succeed.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "audit_throttler", queue = "audit_q")]
struct Throttler {
    tag: String,
    pre_ms: u64,
    ms: u64,
    #[serde(default)]
    key: bool,
}

impl Job for Throttler {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let seen = ctx.data::<Arc<Seen>>()?;
        let first = {
            let mut s = seen.starts.lock().unwrap();
            let first = !s.iter().any(|(t, _)| *t == self.tag);
            s.push((self.tag.clone(), Instant::now()));
            first
        };
        tokio::time::sleep(Duration::from_millis(self.pre_ms)).await;
        let wait = Duration::from_millis(self.ms);
        match (first, self.key) {
            (true, false) => Err(JobError::rate_limited(wait)),
            (true, true) => Err(JobError::rate_limited_key(wait)),
            _ => Ok(()),
        }
    }
}

const Q: &str = "audit_q";

/// A worker on any backend, running in a task once it serves.
struct Serving {
    stop: tokio_util::sync::CancellationToken,
    handle: tokio::task::JoinHandle<redjob::Result<redjob::worker::Stopped>>,
}

impl Serving {
    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(60), self.handle)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

async fn serve<B: Backend>(w: Worker<B>) -> Serving {
    let ready = w.ready();
    let stop = w.shutdown_token();
    let handle = tokio::spawn(w.run_until_stopped());
    tokio::time::timeout(Duration::from_secs(10), ready.wait())
        .await
        .expect("worker serving within 10 s")
        .expect("worker serving");
    Serving { stop, handle }
}

// ---------------------------------------------------------------------------
// A lease renewed after it ran out holds its place on every backend.
// ---------------------------------------------------------------------------

/// A lease that ran out (its second passed) and is then renewed by its worker
/// (no fetch took the job meanwhile) runs again: Redis counts it under the
/// global concurrency again (extend.lua moves its count to the new second);
/// the memory backend forgot it when a count found it run out, and its
/// renewal did not count it again, so a second job started under a global
/// concurrency of 1 (memory now counts it, as Redis does).
async fn renewed_after_running_out_is_counted(client: &Client) {
    client
        .queues()
        .create_queue(Q, QueueOptions::default())
        .await
        .unwrap();
    client
        .set_settings(Q, &QueueSettings::concurrency(Concurrency::global(1)))
        .await
        .unwrap();
    let b = client.backend();
    Backend::send(
        &b,
        Q,
        &[SendMessage::new("{\"a\":1}")],
        &QueueOptions::default(),
    )
    .await
    .unwrap();
    let first = b.fetch(Q, 1, Duration::from_secs(1)).await.unwrap();
    assert_eq!(first.jobs.len(), 1);
    let a = &first.jobs[0];
    // the lease's second passes (the worker's renewal is late)
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let usage = client.limit_usage(Q).await.unwrap();
    assert_eq!(usage.in_flight, 0, "the lease ran out");
    let renewed = b
        .extend(Q, &[(a.id, a.token)], Duration::from_secs(30))
        .await
        .unwrap();
    assert!(renewed[0].is_some(), "renewed: no fetch took the job");
    let usage = client.limit_usage(Q).await.unwrap();
    Backend::send(
        &b,
        Q,
        &[SendMessage::new("{\"b\":2}")],
        &QueueOptions::default(),
    )
    .await
    .unwrap();
    let second = b.fetch(Q, 1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        (usage.in_flight, second.jobs.len()),
        (1, 0),
        "the renewed lease runs again and holds the one place: (in flight, leased beside it)"
    );
}

#[tokio::test]
async fn a_lease_renewed_after_it_ran_out_holds_its_place_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    renewed_after_running_out_is_counted(&client).await;
}

#[tokio::test]
async fn a_lease_renewed_after_it_ran_out_holds_its_place_on_memory() {
    let client = Client::memory(MemoryBackend::new());
    renewed_after_running_out_is_counted(&client).await;
}

// ---------------------------------------------------------------------------
// A job whose lease this worker lost, handed to it, runs again at once.
// ---------------------------------------------------------------------------

/// An idle worker on Redis is handed job "long" (8 s, 3 s lease) by its
/// send. Its renewals fail for 4 s (Redis out of reach): at 3 s its
/// watchdog gives the run up, and the job is due again from its lease end.
/// Redis is back at 4 s, the worker idle with every slot free, but nothing
/// fetches the job: the dispatcher's last fetch found nothing (the job came
/// by a hand-off), so it sleeps for a send or the 60 s poll. A job fetched
/// rather than handed would have been taken again at its lease end. (The
/// watchdog now wakes the dispatcher when it gives a run up.)
#[tokio::test]
async fn a_job_whose_handed_lease_this_worker_lost_runs_again_without_waiting_for_the_poll() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue(Q, QueueOptions::default())
        .await
        .unwrap();
    let seen = Arc::new(Seen::default());
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let backend = Slow {
        inner: client.backend(),
        settle_delay: Duration::ZERO,
        slow_settles: Arc::new(1.into()),
        renewals_fail: fail.clone(),
        scores_begin: None,
        holds: None,
    };
    let w = Worker::builder(backend)
        .register::<Nap>()
        .concurrency(2)
        .lease(Duration::from_secs(3))
        .data(seen.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let w = serve(w).await;
    let t0 = Instant::now();
    client
        .enqueue(&Nap {
            tag: "long".into(),
            ms: 8000,
        })
        .await
        .unwrap();
    fail.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(4)).await;
    fail.store(false, Ordering::SeqCst);
    // due again since about 3 s; the worker is idle
    let again = common::wait_until(Duration::from_secs(11), || {
        seen.starts_of("long").len() >= 2
    })
    .await;
    let starts: Vec<_> = seen.starts_of("long").iter().map(|t| *t - t0).collect();
    w.stop().await;
    assert!(
        again,
        "the job whose lease ran out at 3 s had not run again 15 s in (starts {starts:?}); it waits for the worker's 60 s poll"
    );
}
// ---------------------------------------------------------------------------
// A slow settle holds up no renewal of a running job.
// ---------------------------------------------------------------------------

/// A worker runs job "long" (6 s) under a 3 s lease, renewed every second,
/// beside job "quick" (0.9 s) whose settle takes 2.5 s (a slow Redis call
/// that succeeds). The renewal due 1 s in waited in the settler behind that
/// call until 3.4 s, after long's lease ended at 3 s: long was leased again
/// (here by the same worker, which merged the deliveries; another worker
/// would have started it a second time) and its delivery counted as a lost
/// attempt. The settler now renews running jobs while a settle is under way.
/// (quick's own lease is left to its settle, which outlasts it here.)
#[tokio::test(start_paused = true)]
async fn a_slow_settle_does_not_hold_up_the_lease_renewals_of_running_jobs() {
    slow_settle_holds_up_no_renewal(&Client::memory(MemoryBackend::new())).await;
}

/// The same on Redis (real time: about 10 s).
#[tokio::test]
async fn a_slow_settle_does_not_hold_up_the_lease_renewals_of_running_jobs_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    slow_settle_holds_up_no_renewal(&client).await;
}

async fn slow_settle_holds_up_no_renewal(client: &Client) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    client
        .queues()
        .create_queue(Q, QueueOptions::default())
        .await
        .unwrap();
    let seen = Arc::new(Seen::default());
    let slow = Slow {
        inner: client.backend(),
        settle_delay: Duration::from_millis(2500),
        slow_settles: Arc::new(1.into()),
        renewals_fail: Default::default(),
        scores_begin: None,
        holds: None,
    };
    let a = Worker::builder(slow)
        .register::<Nap>()
        .concurrency(4)
        .poll_interval(Duration::from_secs(2))
        .lease(Duration::from_secs(3))
        .data(seen.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let a = serve(a).await;
    client
        .enqueue(&Nap {
            tag: "quick".into(),
            ms: 900,
        })
        .await
        .unwrap();
    let long = client
        .enqueue(&Nap {
            tag: "long".into(),
            ms: 6000,
        })
        .await
        .unwrap();
    let done = wait_for(Duration::from_secs(60), || async {
        client.stats(Q).await.unwrap().processed >= 2
    })
    .await;
    a.stop().await;
    assert!(done, "both jobs finished");
    assert_eq!(
        seen.starts_of("long").len(),
        1,
        "the long job started more than once: its lease ran out while its renewal waited behind another job's settle"
    );
    let info = client.job(Q, &long).await.unwrap().expect("in the history");
    let outcomes: Vec<_> = info.runs.iter().map(|r| r.outcome).collect();
    assert_eq!(
        info.attempts, 1,
        "the long job ran once, its lease renewed all along; its deliveries: {outcomes:?} (its lease ran out while its renewal waited behind another job's settle)"
    );
}

// ---------------------------------------------------------------------------
// A worker holds a throttle of its queue until that throttle's settle lands.
// ---------------------------------------------------------------------------

/// "t1" throttles the queue for 50 ms at once; "t2" throttles it for 60 s
/// 20 ms later, while t1's settle (300 ms, as is each settle here) is under
/// way. The worker that heard t2 starts nothing for 60 s (docs/scale-out.md:
/// "the worker that heard it holds the queue at once, until its settle
/// lands"): not "late", due 200 ms in. The old code ended the worker's whole
/// hold when t1's settle landed, t2's with it, though t2's settle had not
/// been sent: the backend held only t1's 50 ms, over by then, and "late"
/// started at about 360 ms. The hold now numbers its throttles and ends each
/// once its own settle landed (past the fence).
#[tokio::test(start_paused = true)]
async fn a_throttle_is_held_until_its_own_settle_lands_not_an_earlier_one() {
    throttle_held_until_its_own_settle_lands(&Client::memory(MemoryBackend::new())).await;
}

/// The same on Redis (real time: about 6 s).
#[tokio::test]
async fn a_throttle_is_held_until_its_own_settle_lands_not_an_earlier_one_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    throttle_held_until_its_own_settle_lands(&client).await;
}

/// The queue `Q`, and a worker of 4 slots for `Nap` and `Throttler` whose
/// every settle takes 300 ms, recording its starts.
async fn throttling_worker(client: &Client) -> (Worker<Slow<AnyBackend>>, Arc<Seen>) {
    client
        .queues()
        .create_queue(Q, QueueOptions::default())
        .await
        .unwrap();
    let seen = Arc::new(Seen::default());
    let backend = Slow {
        inner: client.backend(),
        settle_delay: Duration::from_millis(300),
        slow_settles: Arc::new(u32::MAX.into()),
        renewals_fail: Default::default(),
        scores_begin: None,
        holds: None,
    };
    let w = Worker::builder(backend)
        .register::<Nap>()
        .register::<Throttler>()
        .concurrency(4)
        .lease(Duration::from_secs(30))
        .data(seen.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    (w, seen)
}

async fn throttle_held_until_its_own_settle_lands(client: &Client) {
    let (w, seen) = throttling_worker(client).await;
    let t0 = Instant::now();
    client
        .enqueue(&Throttler {
            tag: "t1".into(),
            pre_ms: 10,
            ms: 50,
            key: false,
        })
        .await
        .unwrap();
    client
        .enqueue(&Throttler {
            tag: "t2".into(),
            pre_ms: 20,
            ms: 60_000,
            key: false,
        })
        .await
        .unwrap();
    client
        .enqueue_in(
            &Nap {
                tag: "late".into(),
                ms: 1,
            },
            Duration::from_millis(200),
        )
        .await
        .unwrap();
    let w = serve(w).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t2 = seen.starts_of("t2");
    let late = seen.starts_of("late");
    w.stop().await;
    assert_eq!(t2.len(), 1, "t2 ran once");
    let throttle_end = t2[0] + Duration::from_secs(60);
    assert!(
        late.iter().all(|at| *at >= throttle_end),
        "a job started {:?} after the start, during t2's 60 s throttle (t2 began {:?} in)",
        late.first().map(|at| *at - t0),
        t2[0] - t0
    );
}

// ---------------------------------------------------------------------------
// A key's throttle asked by a job without a key holds the whole queue here too.
// ---------------------------------------------------------------------------

/// A job without a concurrency key asks its key's throttle for 60 s: the
/// backend throttles the queue once the settle lands (300 ms here), and the
/// worker that heard it holds the queue until then, as for a queue's
/// throttle. The old code held nothing in the worker for a key's throttle
/// (the backend holds a key's jobs back), so "late", due 200 ms in, started
/// while the settle was under way.
#[tokio::test(start_paused = true)]
async fn a_key_throttle_of_a_job_without_a_key_holds_its_queue_until_the_settle_lands() {
    keyless_key_throttle_held(&Client::memory(MemoryBackend::new())).await;
}

/// The same on Redis (real time: about 5 s).
#[tokio::test]
async fn a_key_throttle_of_a_job_without_a_key_holds_its_queue_until_the_settle_lands_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    keyless_key_throttle_held(&client).await;
}

async fn keyless_key_throttle_held(client: &Client) {
    let (w, seen) = throttling_worker(client).await;
    client
        .enqueue(&Throttler {
            tag: "k".into(),
            pre_ms: 20,
            ms: 60_000,
            key: true,
        })
        .await
        .unwrap();
    client
        .enqueue_in(
            &Nap {
                tag: "late".into(),
                ms: 1,
            },
            Duration::from_millis(200),
        )
        .await
        .unwrap();
    let w = serve(w).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let k = seen.starts_of("k");
    let late = seen.starts_of("late");
    w.stop().await;
    assert_eq!(k.len(), 1, "the throttler ran once");
    let throttle_end = k[0] + Duration::from_secs(60);
    assert!(
        late.iter().all(|at| *at >= throttle_end),
        "a job started {:?} after the throttler, during its 60 s throttle of the queue",
        late.first().map(|at| *at - k[0]),
    );
}

// ---------------------------------------------------------------------------
// A throttle that landed beside a refused ack is no longer held by its worker.
// ---------------------------------------------------------------------------

/// One settle call carries "a"'s ack, refused by the fence (its job was made
/// visible again an hour on while it ran, as a lease that ran out and a
/// delivery elsewhere would), and "t"'s 60 s throttle of the queue, which
/// passes it; an operator then ends the throttle (docs/scale-out.md: "an
/// operator ends a throttle at once"). The worker starts "late" at once.
/// The old code kept every throttle of a call held by its worker while any
/// of the call's entries failed the fence, here for the whole 60 s: "late"
/// started a minute after the throttle's end was asked.
#[tokio::test(start_paused = true)]
async fn a_throttle_that_landed_beside_a_refused_ack_ends_when_an_operator_ends_it() {
    landed_throttle_beside_refused_ack(&Client::memory(MemoryBackend::new())).await;
}

/// The same on Redis (real time: about 6 s).
#[tokio::test]
async fn a_throttle_that_landed_beside_a_refused_ack_ends_when_an_operator_ends_it_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    landed_throttle_beside_refused_ack(&client).await;
}

async fn landed_throttle_beside_refused_ack(client: &Client) {
    let (w, seen) = throttling_worker(client).await;
    // "first"'s settle (300 ms) is under way while "a" and "t" finish at
    // 100 ms: both go in the next call
    let first = Nap {
        tag: "first".into(),
        ms: 1,
    };
    client.enqueue(&first).await.unwrap();
    let a = client
        .enqueue(&Nap {
            tag: "a".into(),
            ms: 100,
        })
        .await
        .unwrap();
    client
        .enqueue(&Throttler {
            tag: "t".into(),
            pre_ms: 100,
            ms: 60_000,
            key: false,
        })
        .await
        .unwrap();
    let w = serve(w).await;
    assert!(common::wait_until(Duration::from_secs(5), || !seen.starts_of("a").is_empty()).await);
    assert!(
        client
            .queues()
            .change_visibility(Q, &a, Duration::from_secs(3600))
            .await
            .unwrap()
    );
    // both settles landed (300 ms each) by then
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        client.end_throttle(Q).await.unwrap(),
        "the throttle's settle landed, so the queue was throttled"
    );
    let ended = Instant::now();
    client
        .enqueue(&Nap {
            tag: "late".into(),
            ms: 1,
        })
        .await
        .unwrap();
    common::wait_until(Duration::from_secs(5), || {
        !seen.starts_of("late").is_empty()
    })
    .await;
    let late = seen.starts_of("late");
    w.stop().await;
    assert!(
        late.first()
            .is_some_and(|at| *at < ended + Duration::from_secs(2)),
        "a job enqueued after the throttle was ended started {:?} later (none within 5 s: the worker still held the queue)",
        late.first().map(|at| *at - ended)
    );
}

// ---------------------------------------------------------------------------
// A deleted job's run that ends while its lost lease is classified.
// ---------------------------------------------------------------------------

/// Waits for its gate, then succeeds.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "audit_gated", queue = "audit_q")]
struct Gated;

impl Job for Gated {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Seen>>()?
            .starts
            .lock()
            .unwrap()
            .push(("gated".into(), Instant::now()));
        ctx.data::<Arc<tokio::sync::Notify>>()?.notified().await;
        Ok(())
    }
}

/// The end hooks heard: "succeeded", or "cancelled:<reason>".
#[derive(Clone, Default)]
struct Ends(Arc<Mutex<Vec<String>>>);

impl redjob::worker::Hooks for Ends {
    fn succeeded(&self, _: &redjob::worker::JobRun<'_>, _: Duration) {
        self.0.lock().unwrap().push("succeeded".into());
    }

    fn cancelled(
        &self,
        _: &redjob::worker::JobRun<'_>,
        _: Duration,
        why: redjob::worker::CancelReason,
    ) {
        self.0
            .lock()
            .unwrap()
            .push(format!("cancelled:{}", why.as_str()));
    }
}

/// A job deleted while it runs is reported `cancelled` as `deleted` ("it does
/// not run again", `CancelReason::Deleted`) once the worker learns of it: its
/// lease renewal finds it gone, and one read of its score tells a deleted job
/// from one delivered again. A handler that returned during that read was
/// reported `lease_lost` ("it runs again"), which the job never did: the
/// reason was set only if the run still went when the read came back. The
/// read here takes 50 ms, and the handler returns as it begins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_jobs_run_ending_while_its_lost_lease_is_classified_is_reported_deleted() {
    let client = Client::memory(MemoryBackend::new());
    client
        .queues()
        .create_queue(Q, QueueOptions::default())
        .await
        .unwrap();
    let seen = Arc::new(Seen::default());
    let gate = Arc::new(tokio::sync::Notify::new());
    let ends = Ends::default();
    let backend = Slow {
        inner: client.backend(),
        settle_delay: Duration::ZERO,
        slow_settles: Arc::new(0.into()),
        renewals_fail: Default::default(),
        scores_begin: Some(gate.clone()),
        holds: None,
    };
    let w = Worker::builder(backend)
        .register::<Gated>()
        .lease(Duration::from_secs(1))
        .data(seen.clone())
        .data(gate)
        .hooks(ends.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let w = serve(w).await;
    let id = client.enqueue(&Gated).await.unwrap();
    assert!(
        common::wait_until(Duration::from_secs(5), || {
            !seen.starts_of("gated").is_empty()
        })
        .await
    );
    assert_eq!(
        client.cancel(Q, &id).await.unwrap(),
        redjob::inspect::Cancelled::Cancelling
    );
    let heard = common::wait_until(Duration::from_secs(5), || {
        !ends.0.lock().unwrap().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ends = ends.0.lock().unwrap().clone();
    w.stop().await;
    assert!(heard, "no end hook heard");
    assert_eq!(ends, ["cancelled:deleted"]);
}

// ---------------------------------------------------------------------------
// A run delivered here again while its lost lease is classified goes on.
// ---------------------------------------------------------------------------

/// A job made visible again while it runs here loses its lease: the next
/// renewal finds it gone and reads its score to tell why (report_lost). A
/// fetch of this worker that delivers the job again during that read is
/// merged into the run, which then holds the new lease (RELIABILITY.md: "One
/// run per job per worker"). The read's end cancelled the run all the same:
/// it was released unfinished (hooks heard `cancelled:lease_lost`) and ran a
/// second time, although its lease was held. Fetches are held here from the
/// visibility change until that read begins, which lets them go and waits
/// for the job's delivery before it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_delivered_here_again_while_its_lost_lease_is_classified_goes_on() {
    let client = Client::memory(MemoryBackend::new());
    client
        .queues()
        .create_queue(Q, QueueOptions::default())
        .await
        .unwrap();
    let seen = Arc::new(Seen::default());
    let gate = Arc::new(tokio::sync::Notify::new());
    let ends = Ends::default();
    let holds = Arc::new(HoldFetches::default());
    let backend = Slow {
        inner: client.backend(),
        settle_delay: Duration::ZERO,
        slow_settles: Arc::new(0.into()),
        renewals_fail: Default::default(),
        scores_begin: None,
        holds: Some(holds.clone()),
    };
    let w = Worker::builder(backend)
        .register::<Gated>()
        .lease(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(50))
        .data(seen.clone())
        .data(gate.clone())
        .hooks(ends.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let w = serve(w).await;
    let id = client.enqueue(&Gated).await.unwrap();
    assert!(
        common::wait_until(Duration::from_secs(5), || {
            !seen.starts_of("gated").is_empty()
        })
        .await
    );
    holds.hold(id).await;
    assert!(
        client
            .queues()
            .change_visibility(Q, &id, Duration::ZERO)
            .await
            .unwrap()
    );
    // the next renewal (a third of the lease) finds the lease gone; its read
    // lets the held fetch deliver the job again
    let merged = common::wait_until(Duration::from_secs(5), || {
        holds.refetched_flag.load(Ordering::SeqCst)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    gate.notify_one();
    let heard = common::wait_until(Duration::from_secs(5), || {
        !ends.0.lock().unwrap().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    gate.notify_one();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ends = ends.0.lock().unwrap().clone();
    let starts = seen.starts_of("gated").len();
    w.stop().await;
    assert!(merged, "the job was never delivered here again");
    assert!(heard, "no end hook heard");
    assert_eq!(
        (ends.as_slice(), starts),
        (&["succeeded".to_string()][..], 1),
        "the merged run goes on under its new lease and succeeds, once: (ends heard, starts)"
    );
}
