//! The worker's own ways to run a job twice, leave it stuck, loop or panic, each
//! reproduced against a real redis-server (or the memory backend where the fault
//! is the worker's alone): outages during a settle, slow Redis, re-delivery to the
//! same worker, timeouts, shutdown during a fetch, absurd durations, orphans,
//! missing queues and a panicking settler.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use common::{Recorder, RedisServer, Running, start, wait_for, wait_until};
use redjob::backend::memory::MemoryBackend;
use redjob::backend::{
    Backend, DeadLetter, Fetched, MinuteStats, QueueStats, Settle, Settled, Token,
};
use redjob::client::ClientConfig;
use redjob::ops::Admin;
use redjob::queue::{QueueOptions, Queues, SendMessage};
use redjob::{Client, Job, JobContext, JobError, JobId, RetryPolicy, Worker};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Sleeps `ms` (or until cancelled), recording its start, how many runs of it
/// overlap, and whether its cancellation token fired.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "hold", queue = "hw")]
struct Hold {
    key: u64,
    ms: u64,
}

#[derive(Default, Clone)]
struct Probe {
    now: Arc<AtomicU32>,
    max: Arc<AtomicU32>,
    cancelled: Arc<AtomicBool>,
    spawned_saw_cancel: Arc<AtomicBool>,
    /// When each run ended (finished or dropped), in order.
    ends: Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>,
}

/// Counts a run as going while alive; a run dropped before it finished (its
/// worker cancelled it) is recorded as cancelled.
struct Going {
    probe: Probe,
    finished: bool,
}

impl Drop for Going {
    fn drop(&mut self) {
        self.probe.now.fetch_sub(1, Ordering::SeqCst);
        self.probe
            .ends
            .lock()
            .unwrap()
            .push(tokio::time::Instant::now());
        if !self.finished {
            self.probe.cancelled.store(true, Ordering::SeqCst);
        }
    }
}

impl Job for Hold {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        let probe = ctx.data::<Probe>()?.clone();
        let n = probe.now.fetch_add(1, Ordering::SeqCst) + 1;
        probe.max.fetch_max(n, Ordering::SeqCst);
        let mut going = Going {
            probe,
            finished: false,
        };
        // the worker either drops this future or fires the token: both count
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(self.ms)) => {}
            _ = ctx.cancellation().cancelled() => return Err(JobError::retry("cancelled")),
        }
        going.finished = true;
        Ok(())
    }
}

/// Never ends by itself; a task it spawns records the job's cancellation.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "spawner", queue = "hw")]
struct Spawner;

impl Job for Spawner {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let p = ctx.data::<Probe>()?.clone();
        let token = ctx.cancellation().clone();
        tokio::spawn(async move {
            token.cancelled().await;
            p.spawned_saw_cancel.store(true, Ordering::SeqCst);
        });
        std::future::pending::<()>().await;
        Ok(())
    }
}

/// Blocks its thread (ignores cancellation) until the test lets it go.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "blocker", queue = "hw")]
struct Blocker;

/// Where a [`Blocker`] waits, its thread blocked, until the gate opens.
#[derive(Clone, Default)]
struct Gate(Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    fn wait(&self) {
        let (open, cv) = &*self.0;
        let mut open = open.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.0.0.lock().unwrap() = true;
        self.0.1.notify_all();
    }
}

/// Opens the gate when dropped, also when the test fails first: a handler left
/// blocked would keep the runtime from shutting down, and the test would hang
/// instead of failing.
struct OpenOnDrop(Gate);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

impl Job for Blocker {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, 0);
        let gate = ctx.data::<Gate>()?.clone();
        // blocks its thread and ignores its token; block_in_place first hands the
        // thread's other tasks (and tokio's timer and I/O driver) to another
        // thread, or they could starve with it and the test hang
        tokio::task::block_in_place(|| gate.wait());
        Ok(())
    }
}

/// Asks to be retried after `Duration::MAX`.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "forever_later", queue = "hw", max_attempts = 3)]
struct ForeverLater;

impl Job for ForeverLater {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, 0);
        Err(JobError::retry_after("later", Duration::MAX))
    }
}

async fn client_with(url: &str, response_timeout: Duration) -> Client {
    let mut cfg = ClientConfig::from_url(url);
    cfg.redis.connection_timeout = Duration::from_secs(1);
    cfg.redis.response_timeout = response_timeout;
    Client::from_config(cfg).await.unwrap()
}

fn builder(client: &Client, rec: &Recorder, probe: &Probe) -> redjob::worker::WorkerBuilder {
    Worker::builder(client.backend())
        .queue("hw")
        .handle_signals(false)
        .data(rec.clone())
        .data(probe.clone())
        .retry(RetryPolicy::default().jitter(false))
}

/// Enqueues a [`Hold`] of `ms` and starts a worker with `lease`; returns once the
/// job runs.
async fn hold_running(client: &Client, ms: u64, lease: Duration) -> (Recorder, Probe, Running) {
    let (rec, probe) = (Recorder::default(), Probe::default());
    client.enqueue(&Hold { key: 1, ms }).await.unwrap();
    let w = start(builder(client, &rec, &probe).lease(lease).build().unwrap());
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    (rec, probe, w)
}

async fn msgs(client: &Client) -> u64 {
    // a failed call (Redis down or stalled) counts as not drained
    client
        .queues()
        .attributes("hw")
        .await
        .map_or(u64::MAX, |a| a.msgs)
}

/// Score of `id` in the `hw` queue, and Redis's time now, in ms.
async fn score_and_now(server: &RedisServer, id: &JobId) -> (Option<f64>, u64) {
    let mut con = server.raw().await;
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg("rsmq:hw")
        .arg(id.to_string())
        .query_async(&mut con)
        .await
        .unwrap();
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await.unwrap();
    (score, s * 1000 + us / 1000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_held_back_by_an_outage_is_resent_and_the_job_runs_once() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = client_with(&server.url(), Duration::from_millis(500)).await;
    let (rec, _probe, w) = hold_running(&client, 1000, Duration::from_secs(5)).await;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill(); // the job finishes (t0 + 1 s) while Redis is down
    tokio::time::sleep(Duration::from_millis(2500)).await;
    server.restart(); // at t0 + 2.8 s, its lease still valid until about t0 + 5 s
    // the held-back ack lands by itself: the queue empties before the lease would end
    assert!(
        wait_for(Duration::from_secs(4), || async {
            msgs(&client).await == 0
        })
        .await,
        "the ack was never re-sent"
    );
    assert!(t0.elapsed() < Duration::from_secs(7));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rec.len(), 1, "the job ran again: {:?}", rec.runs());
    assert_eq!(client.stats("hw").await.unwrap().processed, 1);
    w.stop().await;
}

/// Where [`Faulty::renewal_after_read`]'s renewal is.
#[derive(Default)]
enum RaceStep {
    /// The first renewal is still to come.
    #[default]
    First,
    /// Its call failed; it runs after the next score read.
    Pending(String, Vec<(JobId, Token)>, Duration),
    /// It ran.
    Done,
}

/// A backend with injected faults: the first lease renewal's reply lost after the
/// renewal ran (a reply timeout during a Redis stall), or a settle that panics.
#[derive(Clone)]
struct Faulty<B> {
    inner: B,
    /// Set once the first renewal's reply was lost; `None`: no renewal is lost.
    renewal_lost: Option<Arc<AtomicBool>>,
    /// Set once the first renewal was held in a stall of this long: its call
    /// fails at once, the renewal runs when the stall ends, and every renewal
    /// and score read fails until it ran (a Redis stopped past the response
    /// timeout, which runs the renewal written to it when it resumes, before
    /// the calls written after it).
    renewal_stalled: Option<(Arc<std::sync::Mutex<Option<Instant>>>, Duration)>,
    /// The first renewal's call fails at once, and the renewal runs just
    /// after the next score read has read the scores (a Redis resuming from
    /// a stall that runs a call on another lane before the renewal written
    /// to it earlier).
    renewal_after_read: Option<Arc<std::sync::Mutex<RaceStep>>>,
    settle_panics: bool,
    /// While set, every fetch fails.
    fetch_fails: Option<Arc<AtomicBool>>,
    /// Set once the first settle's reply was lost after the settle ran.
    settle_reply_lost: Option<Arc<AtomicBool>>,
    /// While set, every settle fails without running.
    settle_fails: Option<Arc<AtomicBool>>,
    /// While set, every beat (not a leave) runs 300 ms late, in a task of its
    /// own: as a command already written runs though its caller gave up.
    beats_late: Option<Arc<AtomicBool>>,
    /// While set, every renewal fails without running.
    renewals_fail: Option<Arc<AtomicBool>>,
    /// While set, every renewal and every score read fails (the backend out of
    /// reach for the settler).
    outage: Option<Arc<AtomicBool>>,
    /// Each job handed to the worker reaches it this much later (a slow
    /// notification connection).
    handoffs_late: Option<Duration>,
    /// Every read of the queues' settings fails, and is counted here.
    settings_fail: Option<Arc<AtomicU32>>,
    /// With `settings_fail`: the reads after this many pass.
    settings_pass_after: Option<u32>,
    /// While set, every read of the queues' settings fails.
    settings_failing: Option<Arc<AtomicBool>>,
    /// Every freeing of a unique key as a run starts fails, and is counted
    /// here.
    unique_start_fails: Option<Arc<AtomicU32>>,
}

impl<B: Backend> Faulty<B> {
    fn new(inner: B) -> Self {
        Faulty {
            inner,
            renewal_lost: None,
            renewal_stalled: None,
            renewal_after_read: None,
            settle_panics: false,
            fetch_fails: None,
            settle_reply_lost: None,
            settle_fails: None,
            beats_late: None,
            renewals_fail: None,
            outage: None,
            handoffs_late: None,
            settings_fail: None,
            settings_pass_after: None,
            settings_failing: None,
            unique_start_fails: None,
        }
    }
}

impl<B: Backend> Backend for Faulty<B> {
    async fn send(
        &self,
        q: &str,
        m: &[SendMessage],
        c: &QueueOptions,
    ) -> redjob::Result<Vec<redjob::queue::Sent>> {
        Backend::send(&self.inner, q, m, c).await
    }
    async fn fetch(&self, q: &str, max: usize, lease: Duration) -> redjob::Result<Fetched> {
        if self
            .fetch_fails
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
        {
            return Err(redjob::Error::Protocol(
                "backend unreachable (simulated)".into(),
            ));
        }
        self.inner.fetch(q, max, lease).await
    }
    async fn fetch_waiting(
        &self,
        q: &str,
        max: usize,
        lease: Duration,
        worker: &str,
        hands: usize,
    ) -> redjob::Result<Fetched> {
        if self
            .fetch_fails
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
        {
            return Err(redjob::Error::Protocol(
                "backend unreachable (simulated)".into(),
            ));
        }
        self.inner.fetch_waiting(q, max, lease, worker, hands).await
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
        if [&self.renewals_fail, &self.outage]
            .iter()
            .any(|f| f.as_ref().is_some_and(|f| f.load(Ordering::SeqCst)))
        {
            return Err(redjob::Error::Protocol("renewal failed (simulated)".into()));
        }
        if let Some(race) = &self.renewal_after_read {
            let mut step = race.lock().unwrap();
            if matches!(*step, RaceStep::First) {
                *step = RaceStep::Pending(q.to_string(), l.to_vec(), lease);
                return Err(redjob::Error::Protocol(
                    "timed out (simulated stall)".into(),
                ));
            }
        }
        if let Some((until, stall)) = &self.renewal_stalled {
            let mut u = until.lock().unwrap();
            match *u {
                None => {
                    // until the renewal ran, which then ends the stall
                    *u = Some(Instant::now() + *stall + Duration::from_secs(3600));
                    let (inner, q, l, stall) =
                        (self.inner.clone(), q.to_string(), l.to_vec(), *stall);
                    let until = until.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(stall).await;
                        inner.extend(&q, &l, lease).await.unwrap();
                        *until.lock().unwrap() = Some(Instant::now());
                    });
                    return Err(redjob::Error::Protocol(
                        "timed out (simulated stall)".into(),
                    ));
                }
                Some(end) if Instant::now() < end => {
                    return Err(redjob::Error::Protocol(
                        "timed out (simulated stall)".into(),
                    ));
                }
                Some(_) => {}
            }
        }
        let r = self.inner.extend(q, l, lease).await;
        if self
            .renewal_lost
            .as_ref()
            .is_some_and(|lost| !lost.swap(true, Ordering::SeqCst))
        {
            assert!(r.is_ok());
            return Err(redjob::Error::Protocol(
                "reply timed out (simulated)".into(),
            ));
        }
        r
    }
    async fn sizes(&self, q: &str) -> redjob::Result<redjob::inspect::StateCounts> {
        self.inner.sizes(q).await
    }
    async fn settle(&self, q: &str, b: &Settle) -> redjob::Result<Settled> {
        assert!(!self.settle_panics, "settle exploded");
        if self
            .settle_fails
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
        {
            return Err(redjob::Error::Protocol("settle failed (simulated)".into()));
        }
        let r = self.inner.settle(q, b).await;
        if self
            .settle_reply_lost
            .as_ref()
            .is_some_and(|lost| !lost.swap(true, Ordering::SeqCst))
        {
            assert!(r.is_ok());
            return Err(redjob::Error::Protocol(
                "reply timed out (simulated)".into(),
            ));
        }
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
        if let Some((until, _)) = &self.renewal_stalled
            && until
                .lock()
                .unwrap()
                .is_some_and(|end| Instant::now() < end)
        {
            return Err(redjob::Error::Protocol(
                "timed out (simulated stall)".into(),
            ));
        }
        if self
            .outage
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
        {
            return Err(redjob::Error::Protocol("unreachable (simulated)".into()));
        }
        let read = self.inner.scores(q, held).await;
        let pending = self.renewal_after_read.as_ref().and_then(|race| {
            let mut step = race.lock().unwrap();
            match std::mem::replace(&mut *step, RaceStep::Done) {
                RaceStep::Pending(q, l, lease) => Some((q, l, lease)),
                other => {
                    *step = other;
                    None
                }
            }
        });
        if let Some((q, l, lease)) = pending {
            // the renewal runs after the read, which saw the old lease
            self.inner.extend(&q, &l, lease).await.unwrap();
        }
        read
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
        if let Some(n) = &self.unique_start_fails {
            n.fetch_add(1, Ordering::SeqCst);
            return Err(redjob::Error::Protocol(
                "backend unreachable (simulated)".into(),
            ));
        }
        self.inner.unique_started(q, id).await
    }
    async fn init_settings(
        &self,
        q: &str,
        s: &redjob::ops::QueueSettings,
        by: &str,
    ) -> redjob::Result<redjob::ops::QueueSettings> {
        if self
            .settings_failing
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
        {
            return Err(redjob::Error::Protocol(
                "OOM command not allowed (simulated)".into(),
            ));
        }
        if let Some(reads) = &self.settings_fail
            && self
                .settings_pass_after
                .is_none_or(|after| reads.fetch_add(1, Ordering::SeqCst) < after)
        {
            return Err(redjob::Error::Protocol(
                "OOM command not allowed (simulated)".into(),
            ));
        }
        self.inner.init_settings(q, s, by).await
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
        if !beat.is_empty()
            && self
                .beats_late
                .as_ref()
                .is_some_and(|f| f.load(Ordering::SeqCst))
        {
            let (inner, id, beat) = (self.inner.clone(), id.to_string(), beat.to_vec());
            return tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                inner.beat(&id, &beat, ttl).await
            })
            .await
            .expect("the late beat");
        }
        self.inner.beat(id, beat, ttl).await
    }

    async fn touch(&self, id: &str, ttl: Duration, since: Duration) -> redjob::Result<bool> {
        self.inner.touch(id, ttl, since).await
    }
    // (the worker's channel brings operators' controls at once)
    async fn listen_handoff(
        &self,
        qs: &[String],
        worker: &str,
        wake: &(dyn Fn(&str) + Send + Sync),
        handed: &(dyn Fn(redjob::backend::Handed) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
        stop: &tokio_util::sync::CancellationToken,
    ) -> redjob::Result<()> {
        let Some(late) = self.handoffs_late else {
            return self
                .inner
                .listen_handoff(qs, worker, wake, handed, subscribed, stop)
                .await;
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let hold = move |h: redjob::backend::Handed| {
            let _ = tx.send((tokio::time::Instant::now() + late, h));
        };
        let pass = async {
            while let Some((at, h)) = rx.recv().await {
                tokio::time::sleep_until(at).await;
                handed(h);
            }
        };
        tokio::select! {
            r = self.inner.listen_handoff(qs, worker, wake, &hold, subscribed, stop) => r,
            _ = pass => Ok(()),
        }
    }
}

/// A worker an operator stops stays gone from the live-worker registry: the
/// full beat it starts once it follows the stop (its state changed) is under
/// way while it shuts down, and must end before the worker leaves. Aborted
/// instead, its command may run after the leave (on a connection's lanes,
/// calls under way at once are not ordered) and put the stopped worker back
/// until its entry runs out: here every beat runs 300 ms late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_by_an_operator_stays_gone_from_the_registry() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let late = Arc::new(AtomicBool::new(false));
    let backend = Faulty {
        beats_late: Some(late.clone()),
        ..Faulty::new(client.backend())
    };
    let w = Worker::builder(backend)
        .queue("hw")
        .handle_signals(false)
        .build()
        .unwrap();
    let h = tokio::spawn(w.run());
    assert!(
        wait_for(Duration::from_secs(5), || async {
            client.workers().await.unwrap().len() == 1
        })
        .await,
        "the worker registered"
    );
    let id = client.workers().await.unwrap()[0].id.clone();
    late.store(true, Ordering::SeqCst);
    assert!(client.stop_worker(&id).await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), h)
        .await
        .expect("the worker stopped")
        .unwrap()
        .unwrap();
    // a beat under way at the leave has landed by now
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        client
            .workers()
            .await
            .unwrap()
            .iter()
            .map(|w| w.id.clone())
            .collect::<Vec<_>>(),
        Vec::<String>::new()
    );
}

/// Runs one `Hold` of `ms` under a worker with `lease` on the backend
/// `fault` makes, and checks that a renewal fault cost nothing: the run was
/// not cancelled, it finished within `within`, and the job ran once.
async fn a_renewal_fault_costs_nothing(
    fault: impl FnOnce(
        Faulty<redjob::backend::any::AnyBackend>,
    ) -> Faulty<redjob::backend::any::AnyBackend>,
    ms: u64,
    lease: Duration,
    within: Duration,
) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let (rec, probe) = (Recorder::default(), Probe::default());
    client.enqueue(&Hold { key: 1, ms }).await.unwrap();
    let w = Worker::builder(fault(Faulty::new(client.backend())))
        .queue("hw")
        .handle_signals(false)
        .data(rec.clone())
        .data(probe.clone())
        .lease(lease)
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(5), || rec.len() >= 1).await);
    let finished = wait_for(within, || async { msgs(&client).await == 0 }).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !probe.cancelled.load(Ordering::SeqCst),
        "the valid run was cancelled"
    );
    assert!(finished, "the job never finished");
    assert_eq!(rec.len(), 1, "the job ran again: {:?}", rec.runs());
    assert_eq!(client.stats("hw").await.unwrap().processed, 1);
    stop.cancel();
    h.await.unwrap().unwrap();
}

/// A job handed to a worker whose message reaches it 2.5 s after the send
/// (its lease, 3 s, began at the send) must not run past that lease there
/// while its renewals fail: the worker took its lease to have begun at most a
/// second before the message came, so its run went on 1.5 s after Redis
/// delivered the job again, to a second worker, which ran it beside it.
/// (Each worker runs one job at a time: with a slot free, the first worker's
/// own fetch could lease the job again at its lease's end just before its
/// watchdog cancelled the run, which then went on under the new lease and
/// finished, and no second run came: 2 of 28 runs under load.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_that_arrives_late_never_runs_past_its_lease() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("hw", redjob::queue::QueueOptions::default())
        .await
        .unwrap();
    let (rec, probe) = (Recorder::default(), Probe::default());
    let late = Faulty {
        renewals_fail: Some(Arc::new(AtomicBool::new(true))),
        handoffs_late: Some(Duration::from_millis(2500)),
        ..Faulty::new(client.backend())
    };
    macro_rules! worker {
        ($backend:expr) => {
            Worker::builder($backend)
                .queue("hw")
                .handle_signals(false)
                .data(rec.clone())
                .data(probe.clone())
                .concurrency(1)
                .lease(Duration::from_secs(3))
                .build()
                .unwrap()
        };
    }
    let a = worker!(late);
    let stop_a = a.shutdown_token();
    let ha = tokio::spawn(a.run());
    // the send hands the job to the first worker once it waits for one
    let mut con = server.raw().await;
    assert!(
        wait_for(Duration::from_secs(5), || {
            let mut con = con.clone();
            async move {
                let reg: Option<String> = redis::cmd("HGET")
                    .arg("rsmq:hw:Q")
                    .arg("redjob:handoff")
                    .query_async(&mut con)
                    .await
                    .unwrap();
                reg.is_some()
            }
        })
        .await,
        "the first worker registered for hand-offs"
    );
    let _ = &mut con;
    client.enqueue(&Hold { key: 1, ms: 5000 }).await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || rec.len() >= 1).await);
    // a second worker, whose renewals work, takes the job once Redis lets it
    let b = worker!(client.backend());
    let stop_b = b.shutdown_token();
    let hb = tokio::spawn(b.run());
    assert!(
        wait_until(Duration::from_secs(15), || rec.len() >= 2).await,
        "the job ran again once the first worker's lease ended"
    );
    let runs = rec.runs();
    assert!(
        wait_until(Duration::from_secs(5), || !probe
            .ends
            .lock()
            .unwrap()
            .is_empty())
        .await,
        "the first run ended"
    );
    let ends = probe.ends.lock().unwrap().clone();
    // (a run cancelled at its lease's end may end a few ms after another
    // worker took the job: the two clocks are read a round trip apart)
    assert!(
        runs[1].at + Duration::from_millis(100) >= ends[0],
        "the first run went on {:?} after the job ran again",
        ends[0].saturating_duration_since(runs[1].at)
    );
    stop_a.cancel();
    stop_b.cancel();
    ha.await.unwrap().unwrap();
    hb.await.unwrap().unwrap();
}

/// An outage that takes a renewal and the read of its scores after it, and
/// ends before the lease does: the settler keeps trying every half second
/// while its leases' state is unknown, renews once the backend is back, and
/// the run goes on. It took the failed read for a renewal done, waited a whole
/// third of the lease, and the watchdog cancelled the run at the lease's end
/// (the job then ran again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_over_a_renewal_and_its_read_that_ends_within_the_lease_costs_nothing() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let (rec, probe) = (Recorder::default(), Probe::default());
    client.enqueue(&Hold { key: 1, ms: 7500 }).await.unwrap();
    let down = Arc::new(AtomicBool::new(false));
    let faulty = Faulty {
        outage: Some(down.clone()),
        ..Faulty::new(client.backend())
    };
    // renewals every 2 s: the one at 2 s fails, and the read at 2.5 s; the
    // backend is back at 4.7 s, 1.3 s before the lease (6 s) ends
    let w = Worker::builder(faulty)
        .queue("hw")
        .handle_signals(false)
        .data(rec.clone())
        .data(probe.clone())
        .concurrency(1)
        .lease(Duration::from_secs(6))
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(5), || rec.len() >= 1).await);
    let t0 = tokio::time::Instant::now();
    tokio::time::sleep_until(t0 + Duration::from_millis(1000)).await;
    down.store(true, Ordering::SeqCst);
    tokio::time::sleep_until(t0 + Duration::from_millis(4700)).await;
    down.store(false, Ordering::SeqCst);
    let finished = wait_for(Duration::from_secs(8), || async {
        msgs(&client).await == 0
    })
    .await;
    assert!(
        !probe.cancelled.load(Ordering::SeqCst),
        "the valid run was cancelled"
    );
    assert!(finished, "the job never finished");
    assert_eq!(rec.len(), 1, "the job ran again: {:?}", rec.runs());
    stop.cancel();
    h.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_whose_reply_was_lost_does_not_cost_the_delivery() {
    // renewals every 0.4 s; the first one's reply is lost after it ran
    let lost = |f| Faulty {
        renewal_lost: Some(Arc::default()),
        ..f
    };
    let (lease, within) = (Duration::from_millis(1200), Duration::from_secs(6));
    a_renewal_fault_costs_nothing(lost, 2500, lease, within).await;
}

/// A renewal written to a Redis that then stalls past the response timeout
/// runs when Redis resumes, well within the lease: the worker adopts the
/// lease it set once it reads the job's score, rather than keep the old
/// token, whose next renewal the fence refuses (which cancelled the run, and
/// the job ran again once that lease ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_ran_late_in_a_stall_within_the_lease_is_adopted() {
    // renewals every 2 s: the first (at 2 s) runs at 3.5 s, its lease then
    // ending at 9.5 s; the score is read again at 4.5 s
    let stalled = |f| Faulty {
        renewal_stalled: Some((Arc::default(), Duration::from_millis(1500))),
        ..f
    };
    let (lease, within) = (Duration::from_secs(6), Duration::from_secs(12));
    a_renewal_fault_costs_nothing(stalled, 7000, lease, within).await;
}

/// A renewal whose reply was lost in a stall, which Redis runs only after
/// the worker's read of the job's score (the read went on another lane, and
/// Redis, resuming, served it first): the read saw the old lease, and the
/// late renewal then replaced it. The worker adopts the late renewal's lease
/// when its next renewal finds the old one gone, rather than cancel the run
/// (it did: the job ran again once that lease ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_ran_after_the_score_read_is_adopted() {
    let raced = |f| Faulty {
        renewal_after_read: Some(Arc::default()),
        ..f
    };
    let (lease, within) = (Duration::from_secs(6), Duration::from_secs(12));
    a_renewal_fault_costs_nothing(raced, 7000, lease, within).await;
}

/// The same late renewal, when the run ends before the next renewal: the
/// settle's read of the score (the renewal's reply was lost) sees the old
/// lease, the renewal then lands, and the ack, fenced on the old lease, is
/// refused. The worker reads the score once more and settles with the late
/// renewal's lease (the ack was dropped as a lost lease's, and the job ran
/// again once that lease ended, though its run succeeded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_after_a_renewal_that_ran_after_the_score_read_lands() {
    // renewals every 2 s: the first (at 2 s) fails, the run ends at about
    // 2.25 s, and the settle reads the score before the renewal is tried again
    let raced = |f| Faulty {
        renewal_after_read: Some(Arc::default()),
        ..f
    };
    let (lease, within) = (Duration::from_secs(6), Duration::from_secs(12));
    a_renewal_fault_costs_nothing(raced, 2250, lease, within).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_made_visible_while_running_here_never_runs_twice_at_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let (rec, probe) = (Recorder::default(), Probe::default());
    let id = client.enqueue(&Hold { key: 1, ms: 1500 }).await.unwrap();
    let w = start(
        builder(&client, &rec, &probe)
            .concurrency(4)
            .poll_interval(Duration::from_millis(100))
            .build()
            .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    // anyone makes it visible again: this worker fetches it once more
    assert!(
        client
            .queues()
            .change_visibility("hw", &id, Duration::ZERO)
            .await
            .unwrap()
    );
    assert!(
        wait_for(Duration::from_secs(5), || async {
            msgs(&client).await == 0
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(probe.max.load(Ordering::SeqCst), 1, "two runs at once");
    assert_eq!(rec.len(), 1, "runs: {:?}", rec.runs());
    assert_eq!(client.stats("hw").await.unwrap().processed, 1);
    w.stop().await;
}

#[tokio::test]
async fn timeout_cancels_the_job_token() {
    let client = Client::memory(MemoryBackend::new());
    let (rec, probe) = (Recorder::default(), Probe::default());
    client.enqueue(&Spawner).await.unwrap();
    let w = start(
        builder(&client, &rec, &probe)
            .job_timeout(Duration::from_millis(100))
            .build()
            .unwrap(),
    );
    assert!(
        wait_until(Duration::from_secs(3), || probe
            .spawned_saw_cancel
            .load(Ordering::SeqCst))
        .await,
        "work spawned by a timed-out job was never told"
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn job_still_running_after_the_grace_period_is_not_released() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let (rec, probe) = (Recorder::default(), Probe::default());
    let id = client.enqueue(&Blocker).await.unwrap();
    let gate = Gate::default();
    let opener = OpenOnDrop(gate.clone());
    let w = builder(&client, &rec, &probe)
        .data(gate.clone())
        .lease(Duration::from_secs(30))
        .grace_period(Duration::from_millis(100))
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(20), h)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // run() has returned, the handler's thread is still blocked: the job must not be visible
    let (score, now) = score_and_now(&server, &id).await;
    drop(opener); // let the handler go
    let score = score.expect("the job is still in the queue");
    assert!(
        score > now as f64,
        "released while its run still goes (score {score}, now {now})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_past_its_lease_without_renewal_is_cancelled() {
    let mut server = RedisServer::start();
    let client = client_with(&server.url(), Duration::from_millis(300)).await;
    let (_rec, probe, w) = hold_running(&client, 20_000, Duration::from_millis(1500)).await;
    let t0 = Instant::now();
    server.kill(); // cut off: no renewal can land
    assert!(
        wait_until(Duration::from_secs(4), || probe
            .cancelled
            .load(Ordering::SeqCst))
        .await,
        "the run went on past its lease"
    );
    assert!(
        t0.elapsed() <= Duration::from_millis(1600),
        "cancelled late: {:?}",
        t0.elapsed()
    );
    w.stop().await;
}

/// Stalls the Redis at `url` for a second (`DEBUG SLEEP`), then ends: its
/// settle goes to a Redis that does not answer.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "stall_on_end", queue = "hw")]
struct StallOnEnd {
    url: String,
}

impl Job for StallOnEnd {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, 1);
        common::stall(&self.url, 1).await.map_err(JobError::retry)?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(())
    }
}

/// A settle sent while Redis stalls gives up at the response timeout (the
/// worker sends it again later): the job is settled, never runs again after
/// its lease, and is not dead-lettered (the first settle lands when Redis
/// wakes; a second, fenced by the delivery's token, changes nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_that_times_out_while_redis_stalls_leaves_the_job_run_once() {
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let client = client_with(&server.url(), Duration::from_millis(300)).await;
    let (rec, probe) = (Recorder::default(), Probe::default());
    let w = start(
        builder(&client, &rec, &probe)
            .lease(Duration::from_secs(2))
            .build()
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    client
        .enqueue(&StallOnEnd { url: server.url() })
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    // settled, and not delivered again after its lease (2 s)
    assert!(
        wait_for(Duration::from_secs(10), || async {
            msgs(&client).await == 0
        })
        .await
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rec.len(), 1, "ran again: {:?}", rec.runs());
    assert_eq!(msgs(&client).await, 0);
    let dead = client.dead_letters("hw", 10).await.unwrap();
    assert!(dead.is_empty(), "{dead:?}");
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_a_fetch_leaves_no_job_leased() {
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let client = client_with(&server.url(), Duration::from_secs(3)).await;
    let (rec, probe) = (Recorder::default(), Probe::default());
    let w = builder(&client, &rec, &probe)
        .lease(Duration::from_secs(60))
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    tokio::time::sleep(Duration::from_millis(300)).await; // idle, waiting
    // due 150 ms from now, while Redis stalls: the fetch waits behind the stall
    let id = client
        .enqueue_in(&Hold { key: 1, ms: 10 }, Duration::from_millis(150))
        .await
        .unwrap();
    common::stall(&server.url(), 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel(); // while the fetch is in flight
    tokio::time::timeout(Duration::from_secs(10), h)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let (score, now) = score_and_now(&server, &id).await;
    let score = score.expect("the job is still in the queue");
    assert!(
        score <= now as f64,
        "leased to nobody until {score} (now {now})"
    );
    assert_eq!(rec.len(), 0);
    // and the next worker runs it as its first attempt
    let w = start(builder(&client, &rec, &probe).build().unwrap());
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    assert_eq!(rec.runs()[0].attempt, 1);
    w.stop().await;
}

#[test]
fn retry_policy_at_duration_max_never_panics() {
    let limit = redjob::worker::MAX_DELAY;
    for jitter in [false, true] {
        let p = RetryPolicy::exponential(Duration::MAX)
            .unwrap()
            .jitter(jitter);
        for base in [
            Duration::from_millis(1),
            Duration::from_secs(1),
            Duration::MAX,
        ] {
            for attempt in [0, 1, 2, 32, 33, 64, 998, u32::MAX] {
                assert!(p.delay(base, attempt) <= limit);
            }
        }
    }
    assert_eq!(
        RetryPolicy::exponential(Duration::MAX)
            .unwrap()
            .jitter(false)
            .delay(Duration::from_secs(1), 40),
        limit
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_duration_max_waits_the_longest_delay_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let (rec, probe) = (Recorder::default(), Probe::default());
    let id = client.enqueue(&ForeverLater).await.unwrap();
    let w = start(builder(&client, &rec, &probe).build().unwrap());
    assert!(wait_until(Duration::from_secs(5), || rec.len() >= 1).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(rec.len(), 1, "ran again at once");
    let (score, now) = score_and_now(&server, &id).await;
    let due = score.unwrap() as u64;
    let limit = redjob::worker::MAX_DELAY.as_millis() as u64;
    assert!(
        due >= now + limit - 5_000 && due <= now + limit,
        "due {due}, now {now}"
    );
    w.stop().await;
}

#[tokio::test]
async fn retry_after_duration_max_waits_the_longest_delay_in_memory() {
    let kit = redjob::testing::TestKit::new()
        .data(Recorder::default())
        .data(Probe::default());
    kit.client().enqueue(&ForeverLater).await.unwrap();
    let report = tokio::time::timeout(Duration::from_secs(10), kit.run_until_idle())
        .await
        .expect("run_until_idle hung")
        .unwrap();
    let _ = report;
    let scheduled = kit.scheduled::<ForeverLater>();
    assert_eq!(scheduled.len(), 1);
    let wait = scheduled[0].due.duration_since(kit.clock().now()).unwrap();
    assert!(wait > redjob::worker::MAX_DELAY - Duration::from_secs(5));
    assert!(wait <= redjob::worker::MAX_DELAY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_batch_of_orphans_still_waits_for_the_next_job() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("hw", QueueOptions::default())
        .await
        .unwrap();
    let (rec, probe) = (Recorder::default(), Probe::default());
    let w = start(
        builder(&client, &rec, &probe)
            .concurrency(2)
            .prefetch(0)
            .build()
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await; // idle, waiting
    let mut con = server.raw().await;
    // two ids without bodies (evicted, or written by a broken client) ahead of a job:
    // the fetch that the send wakes takes a full batch of orphans only
    for id in [
        "aaaaaaaaaaorphan1xxxxxxxxxxxxxxx",
        "aaaaaaaaaaorphan2xxxxxxxxxxxxxxx",
    ] {
        let _: () = redis::cmd("ZADD")
            .arg("rsmq:hw")
            .arg(0)
            .arg(id)
            .query_async(&mut con)
            .await
            .unwrap();
    }
    client.enqueue(&Hold { key: 1, ms: 0 }).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || rec.len() == 1).await,
        "the worker slept with a due job behind the orphans"
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_created_by_an_rsmq_client_while_waiting_is_served_promptly() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let (rec, probe) = (Recorder::default(), Probe::default());
    let w = start(builder(&client, &rec, &probe).build().unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // an RSMQ client creates the queue and sends, without publishing
    let mut con = server.raw().await;
    let (secs, _): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await.unwrap();
    let _: () = redis::pipe()
        .cmd("SADD")
        .arg("rsmq:QUEUES")
        .arg("hw")
        .cmd("HSET")
        .arg("rsmq:hw:Q")
        .arg(&[("vt", "30"), ("delay", "0"), ("maxsize", "65536")])
        .arg("created")
        .arg(secs)
        .arg("modified")
        .arg(secs)
        .cmd("ZADD")
        .arg("rsmq:hw")
        .arg(secs * 1000)
        .arg("aaaaaaaaaarsmqclientxxxxxxxxxxxx")
        .cmd("HSET")
        .arg("rsmq:hw:Q")
        .arg("aaaaaaaaaarsmqclientxxxxxxxxxxxx")
        .arg(r#"{"type":"hold","args":{"key":1,"ms":0}}"#)
        .query_async(&mut con)
        .await
        .unwrap();
    // a missing queue is checked every 5 s, not at the 30 s fallback poll
    assert!(
        wait_until(Duration::from_secs(7), || rec.len() == 1).await,
        "a queue created after the worker started waited for the fallback poll"
    );
    w.stop().await;
}

#[tokio::test]
async fn fetch_backoff_ends_when_the_backend_is_back_and_a_job_arrives() {
    let mem = MemoryBackend::new();
    let client = Client::memory(mem.clone());
    client
        .queues()
        .create_queue("hw", QueueOptions::default())
        .await
        .unwrap();
    let failing = Arc::new(AtomicBool::new(true));
    let backend = Faulty {
        fetch_fails: Some(failing.clone()),
        ..Faulty::new(mem)
    };
    let (rec, probe) = (Recorder::default(), Probe::default());
    let w = Worker::builder(backend)
        .queue("hw")
        .handle_signals(false)
        .data(rec.clone())
        .data(probe)
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    // failing fetches back off (100 ms doubling: tries at 0, 0.2, 0.6, 1.4, 3.0 s, ...)
    tokio::time::sleep(Duration::from_millis(3500)).await;
    failing.store(false, Ordering::SeqCst);
    let t0 = Instant::now();
    client.enqueue(&Hold { key: 1, ms: 0 }).await.unwrap();
    assert!(wait_until(Duration::from_secs(8), || rec.len() == 1).await);
    assert!(
        t0.elapsed() < Duration::from_millis(1500),
        "served {:?} after the backend came back",
        t0.elapsed()
    );
    stop.cancel();
    h.await.unwrap().unwrap();
}

/// A worker whose reads of its queue's settings fail (a Redis out of memory
/// refuses their store, say) serves the queue under its own values, as the
/// warning of a worker that could not read them at its start says, and reads
/// them again now and then, not before every fetch. The old dispatcher
/// released every job it fetched until a read passed, fetch after fetch:
/// nothing ran.
#[tokio::test]
async fn a_queue_whose_settings_cannot_be_read_is_served_under_the_workers_own() {
    let mem = MemoryBackend::new();
    let client = Client::memory(mem.clone());
    client
        .queues()
        .create_queue("hw", QueueOptions::default())
        .await
        .unwrap();
    let reads = Arc::new(AtomicU32::new(0));
    let backend = Faulty {
        settings_fail: Some(reads.clone()),
        ..Faulty::new(mem)
    };
    let (rec, probe) = (Recorder::default(), Probe::default());
    let w = Worker::builder(backend)
        .queue("hw")
        .handle_signals(false)
        .data(rec.clone())
        .data(probe)
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    for key in 0..20 {
        client.enqueue(&Hold { key, ms: 0 }).await.unwrap();
    }
    assert!(
        wait_until(Duration::from_secs(8), || rec.len() == 20).await,
        "ran {} of 20 jobs ({} reads of the settings)",
        rec.len(),
        reads.load(Ordering::SeqCst)
    );
    let tried = reads.load(Ordering::SeqCst);
    stop.cancel();
    h.await.unwrap().unwrap();
    assert!(tried < 40, "{tried} reads of the settings");
}

/// A queue limited across the fleet is not leased from while its settings
/// cannot be read: its global concurrency holds only once stored (a Redis
/// that restarted empty has none), so the worker waits for a read that
/// passes. Served under the worker's own values, it ran its jobs at once.
#[tokio::test]
async fn a_queue_limited_across_the_fleet_waits_for_its_settings_to_be_read() {
    let mem = MemoryBackend::new();
    let client = Client::memory(mem.clone());
    client
        .queues()
        .create_queue("hw", QueueOptions::default())
        .await
        .unwrap();
    let reads = Arc::new(AtomicU32::new(0));
    let backend = Faulty {
        settings_fail: Some(reads.clone()),
        settings_pass_after: Some(3),
        ..Faulty::new(mem)
    };
    let (rec, probe) = (Recorder::default(), Probe::default());
    let w = Worker::builder(backend)
        .queue("hw")
        .queue_global_concurrency("hw", 1)
        .handle_signals(false)
        .data(rec.clone())
        .data(probe.clone())
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    for key in 0..4 {
        client.enqueue(&Hold { key, ms: 100 }).await.unwrap();
    }
    assert!(
        wait_until(Duration::from_secs(10), || rec.len() == 4).await,
        "ran {} of 4 jobs ({} reads of the settings)",
        rec.len(),
        reads.load(Ordering::SeqCst)
    );
    stop.cancel();
    h.await.unwrap().unwrap();
    assert_eq!(
        probe.max.load(Ordering::SeqCst),
        1,
        "runs at once under a global concurrency of 1"
    );
    assert!(reads.load(Ordering::SeqCst) > 3, "the reads never passed");
}

/// The wait for a read holds whatever the worker last read: a queue whose
/// own global concurrency an operator lifted, then deleted and created again
/// (its settings gone with it), is not leased from until a read stores the
/// worker's limit again. It was leased from under no limit, as the operator's
/// lift had left it.
#[tokio::test]
async fn a_queue_limited_by_the_workers_own_values_waits_for_its_settings_after_a_lift() {
    use redjob::ops::{ConcurrencyPart, QueueSettings};
    let mem = MemoryBackend::new();
    let client = Client::memory(mem.clone());
    let create = || async {
        client
            .queues()
            .create_queue("hw", QueueOptions::default())
            .await
            .unwrap()
    };
    create().await;
    let failing = Arc::new(AtomicBool::new(false));
    let backend = Faulty {
        settings_failing: Some(failing.clone()),
        ..Faulty::new(mem)
    };
    let (rec, probe) = (Recorder::default(), Probe::default());
    let w = Worker::builder(backend)
        .queue("hw")
        .queue_global_concurrency("hw", 1)
        // a poll soon finds the queue deleted
        .poll_interval(Duration::from_millis(100))
        .handle_signals(false)
        .data(rec.clone())
        .data(probe.clone())
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    let global = || async {
        let s = client.settings("hw").await.unwrap();
        s.concurrency.and_then(|c| c.global)
    };
    let stored = wait_for(Duration::from_secs(5), || async {
        global().await == Some(1)
    })
    .await;
    assert!(stored, "the worker's global concurrency was not stored");
    // an operator lifts it: two jobs run at once
    let lift = QueueSettings::concurrency_part(ConcurrencyPart::Global, None);
    client.set_settings("hw", &lift).await.unwrap();
    let mut lifted = false;
    for round in 0..20 {
        for key in 0..2 {
            client
                .enqueue(&Hold {
                    key: round * 2 + key,
                    ms: 150,
                })
                .await
                .unwrap();
        }
        let n = 2 * (round as usize + 1);
        assert!(wait_until(Duration::from_secs(5), || rec.len() == n).await);
        if probe.max.load(Ordering::SeqCst) == 2 {
            lifted = true;
            break;
        }
    }
    assert!(lifted, "the worker never followed the lift");
    let before = rec.len();
    // the queue goes, settings and all, and comes again; reads fail a while
    failing.store(true, Ordering::SeqCst);
    client.queues().delete_queue("hw").await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    create().await;
    probe.max.store(0, Ordering::SeqCst);
    for key in 0..4 {
        client
            .enqueue(&Hold {
                key: 100 + key,
                ms: 100,
            })
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ran_unread = rec.len() - before;
    failing.store(false, Ordering::SeqCst);
    assert!(
        wait_until(Duration::from_secs(10), || rec.len() == before + 4).await,
        "ran {} of 4 after the queue came again",
        rec.len() - before
    );
    stop.cancel();
    h.await.unwrap().unwrap();
    assert_eq!(
        (ran_unread, probe.max.load(Ordering::SeqCst)),
        (0, 1),
        "(runs before a read passed, runs at once under the worker's global concurrency of 1)"
    );
}

#[tokio::test]
async fn settler_panic_is_an_error_from_run_not_a_panic() {
    let mem = MemoryBackend::new();
    let client = Client::memory(mem.clone());
    let (rec, probe) = (Recorder::default(), Probe::default());
    client.enqueue(&Hold { key: 1, ms: 0 }).await.unwrap();
    let backend = Faulty {
        settle_panics: true,
        ..Faulty::new(mem)
    };
    let w = Worker::builder(backend)
        .queue("hw")
        .handle_signals(false)
        .data(rec.clone())
        .data(probe)
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(3), || rec.len() == 1).await);
    // no shutdown asked: a crashed settler stops the worker by itself
    let r = tokio::time::timeout(Duration::from_secs(10), h)
        .await
        .unwrap();
    drop(stop);
    let r = r.expect("Worker::run panicked");
    assert!(r.is_err(), "a crashed settler must be reported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_job_type_waits_for_a_worker_that_knows_it() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("hw", QueueOptions::default())
        .await
        .unwrap();
    let body = br#"{"type":"added_in_the_next_release","args":{}}"#.to_vec();
    let ids = client
        .queues()
        .send_batch("hw", &[SendMessage::new(body)])
        .await
        .unwrap();
    let (rec, probe) = (Recorder::default(), Probe::default());
    let w = start(builder(&client, &rec, &probe).build().unwrap());
    // fetched at once and put back for at least 1 s
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        client.dead_letters("hw", 10).await.unwrap().is_empty(),
        "dead-lettered during a rolling deploy"
    );
    let (score, now) = score_and_now(&server, &ids[0]).await;
    assert!(score.unwrap() > now as f64, "put back for later");
    w.stop().await;
    // past the window it is dead-lettered, saying why
    let w = start(
        builder(&client, &rec, &probe)
            .unknown_jobs_retry_for(Duration::ZERO)
            .build()
            .unwrap(),
    );
    let _ = client
        .queues()
        .change_visibility("hw", &ids[0], Duration::ZERO)
        .await;
    assert!(
        wait_for(Duration::from_secs(5), || async {
            !client.dead_letters("hw", 10).await.unwrap().is_empty()
        })
        .await
    );
    let dead = client.dead_letters("hw", 10).await.unwrap();
    assert!(
        dead[0].error.contains("added_in_the_next_release"),
        "{}",
        dead[0].error
    );
    assert!(
        dead[0].error.contains("no worker knows"),
        "{}",
        dead[0].error
    );
    w.stop().await;
}

/// Asks to be retried in an hour, three attempts at most.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "retry_later", queue = "hw", max_attempts = 3)]
struct RetryLater;

impl Job for RetryLater {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, 0);
        Err(JobError::retry_after("later", Duration::from_secs(3600)))
    }
}

/// Making a job visible again (redjob's `change_visibility`) keeps its delivery
/// count: the attempts go on 1, 2, 3 and the job is dead-lettered, instead of
/// starting over at 1 each time.
async fn change_visibility_keeps_the_attempt_count(client: Client) {
    let (rec, probe) = (Recorder::default(), Probe::default());
    let id = client.enqueue(&RetryLater).await.unwrap();
    // polled: a change of visibility sends no wake-up
    let w = start(
        builder(&client, &rec, &probe)
            .poll_interval(Duration::from_millis(100))
            .build()
            .unwrap(),
    );
    for n in 1..=3 {
        assert!(
            wait_until(Duration::from_secs(5), || rec.len() == n).await,
            "run {n}"
        );
        if n < 3 {
            // the retry is scheduled once the run is settled
            assert!(
                wait_for(Duration::from_secs(5), || async {
                    client.stats("hw").await.unwrap().retried == n as u64
                })
                .await
            );
            assert!(
                client
                    .queues()
                    .change_visibility("hw", &id, Duration::ZERO)
                    .await
                    .unwrap()
            );
        }
    }
    let attempts: Vec<u32> = rec.runs().iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert!(
        wait_for(Duration::from_secs(5), || async {
            client.dead_letters("hw", 10).await.unwrap().len() == 1
        })
        .await
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_visibility_keeps_the_attempt_count_on_redis() {
    let server = RedisServer::start();
    change_visibility_keeps_the_attempt_count(Client::connect(&server.url()).await.unwrap()).await;
}

#[tokio::test]
async fn change_visibility_keeps_the_attempt_count_in_memory() {
    change_visibility_keeps_the_attempt_count(Client::memory(MemoryBackend::new())).await;
}

#[test]
fn absurd_settings_are_refused_or_clamped_never_a_panic() {
    let b = || {
        Worker::builder(MemoryBackend::new())
            .queue("hw")
            .handle_signals(false)
    };
    assert!(b().queue_concurrency("hw", usize::MAX).build().is_err());
    assert!(b().concurrency(usize::MAX).build().is_err());
    assert!(b().prefetch(usize::MAX).build().is_err());
    assert!(b().lease(Duration::MAX).build().is_err());
    // far-off settings are fine: they are waits, never arithmetic on the clock
    assert!(
        b().grace_period(Duration::MAX)
            .poll_interval(Duration::MAX)
            .job_timeout(Duration::MAX)
            .unknown_jobs_retry_for(Duration::MAX)
            .build()
            .is_ok()
    );
    let clock = redjob::backend::memory::Clock::new();
    let before = clock.now_us();
    clock.advance(Duration::MAX);
    clock.advance(Duration::MAX);
    // the clock stops at its end instead of wrapping
    let end = clock.now_us();
    assert!(end > before);
    clock.advance(Duration::from_secs(1));
    assert_eq!(clock.now_us(), end);
}

#[tokio::test]
async fn backend_calls_with_duration_max_never_panic() {
    let mem = MemoryBackend::new();
    let client = Client::memory(mem.clone());
    client.enqueue(&Hold { key: 1, ms: 0 }).await.unwrap();
    let f = mem.fetch("hw", 1, Duration::MAX).await.unwrap();
    let d = &f.jobs[0];
    let t = mem
        .extend("hw", &[(d.id, d.token)], Duration::MAX)
        .await
        .unwrap()[0]
        .unwrap();
    let s = Settle {
        reschedules: vec![redjob::backend::Reschedule {
            id: d.id,
            token: t,
            delay: Duration::MAX,
            deliveries: 1,
            release: false,
            error: None,
        }],
        ..Settle::default()
    };
    assert_eq!(mem.settle("hw", &s).await.unwrap().rescheduled, 1);
    let due = mem.messages("hw")[0].2;
    let limit = redjob::worker::MAX_DELAY.as_millis() as u64;
    assert!(due <= mem.clock().now_ms() + limit);
}

/// Fails its first attempt asking to be retried at once, then succeeds.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "again_now", queue = "hw", max_attempts = 5)]
struct AgainNow;

impl Job for AgainNow {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, 0);
        if ctx.attempt() == 1 {
            return Err(JobError::retry_after("at once", Duration::ZERO));
        }
        Ok(())
    }
}

#[tokio::test]
async fn retry_whose_settle_reply_was_lost_is_not_applied_to_the_next_delivery() {
    let mem = MemoryBackend::new();
    let client = Client::memory(mem.clone());
    client.enqueue(&AgainNow).await.unwrap();
    let backend = Faulty {
        settle_reply_lost: Some(Arc::default()),
        ..Faulty::new(mem)
    };
    let rec = Recorder::default();
    // polled often, so the job is fetched again before the settle is retried
    let w = Worker::builder(backend)
        .queue("hw")
        .handle_signals(false)
        .poll_interval(Duration::from_millis(20))
        .data(rec.clone())
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    // the retry lands (its reply is lost) and the job is fetched again at once: a
    // new delivery, run as attempt 2, not the old retry applied to it
    assert!(
        wait_for(Duration::from_secs(5), || async {
            client.queues().attributes("hw").await.unwrap().msgs == 0
        })
        .await,
        "the job never finished"
    );
    let attempts: Vec<u32> = rec.runs().iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, [1, 2]);
    stop.cancel();
    h.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_with_a_malformed_id_does_not_stop_the_jobs_fetched_with_it() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("hw", QueueOptions::default())
        .await
        .unwrap();
    let mut con = server.raw().await;
    // a raw ZADD with an id no RSMQ client writes, and a body, ahead of a good job
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg("rsmq:hw")
        .arg(0)
        .arg("NOT-AN-ID")
        .cmd("HSET")
        .arg("rsmq:hw:Q")
        .arg("NOT-AN-ID")
        .arg("{}")
        .query_async(&mut con)
        .await
        .unwrap();
    client.enqueue(&Hold { key: 1, ms: 0 }).await.unwrap();
    let (rec, probe) = (Recorder::default(), Probe::default());
    let w = start(builder(&client, &rec, &probe).build().unwrap());
    assert!(
        wait_until(Duration::from_secs(3), || rec.len() == 1).await,
        "the good job never ran"
    );
    w.stop().await;
}

/// Throttled for 3 s on its first run (the test's flag), else done.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "throttled_once", queue = "tq")]
struct ThrottledOnce {
    key: u64,
}

impl Job for ThrottledOnce {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let (first, rec) = (ctx.data::<Arc<AtomicBool>>()?, ctx.data::<Recorder>()?);
        rec.record(ctx, self.key);
        if self.key == 0 && !first.swap(true, Ordering::SeqCst) {
            return Err(JobError::rate_limited(Duration::from_secs(3)));
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_throttle_whose_settle_fails_is_held_by_its_worker_until_it_ends() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client.enqueue(&ThrottledOnce { key: 0 }).await.unwrap();
    client.enqueue(&ThrottledOnce { key: 1 }).await.unwrap();
    // the throttle's settle cannot land: the backend does not hold the queue
    let fails = Arc::new(AtomicBool::new(true));
    let backend = Faulty {
        settle_fails: Some(fails.clone()),
        ..Faulty::new(client.backend())
    };
    let rec = Recorder::default();
    let w = Worker::builder(backend)
        .queue("tq")
        .concurrency(1)
        .handle_signals(false)
        .data(Arc::new(AtomicBool::new(false)))
        .data(rec.clone())
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(5), || rec.len() >= 1).await);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        rec.len(),
        1,
        "nothing started while throttled: {:?}",
        rec.runs()
    );
    fails.store(false, Ordering::SeqCst);
    assert!(
        wait_until(Duration::from_secs(10), || rec.len() >= 3).await,
        "both ran once the throttle ended: {:?}",
        rec.runs()
    );
    stop.cancel();
    h.await.unwrap().unwrap();
}

/// Counts its runs; the one with `block_ms` blocks its thread that long (a
/// handler that calls blocking code on the runtime).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "mixed", queue = "mixed")]
struct Mixed {
    block_ms: u64,
}

impl Job for Mixed {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if self.block_ms > 0 {
            std::thread::sleep(Duration::from_millis(self.block_ms));
        }
        ctx.data::<Arc<AtomicU32>>()?.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A handler that blocks its thread holds back only itself: the queue's other
/// jobs go on on the runtime's other thread (the dispatcher never waits in a
/// place only that thread would wake it from).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_blocking_its_thread_holds_back_no_other_job() {
    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    let done = Arc::new(AtomicU32::new(0));
    let w = Worker::builder(client.backend())
        .register::<Mixed>()
        .concurrency(8)
        .handle_signals(false)
        .data(done.clone())
        .build()
        .unwrap();
    let w = start(w);
    // the queue's jobs are timed short (so they are prefetched)
    let quick: Vec<Mixed> = (0..400).map(|_| Mixed { block_ms: 0 }).collect();
    client.enqueue_batch(&quick).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || done.load(Ordering::SeqCst)
            >= 400)
        .await
    );
    for round in 0..3 {
        let before = done.load(Ordering::SeqCst);
        let mut jobs = vec![Mixed { block_ms: 2000 }];
        jobs.extend((0..400).map(|_| Mixed { block_ms: 0 }));
        let at = Instant::now();
        client.enqueue_batch(&jobs).await.unwrap();
        // all but the blocker, well before it ends
        let quick_done = wait_until(Duration::from_millis(1500), || {
            done.load(Ordering::SeqCst) >= before + 400
        })
        .await;
        assert!(
            quick_done,
            "round {round}: {} of 400 ran in {:?} beside the blocker",
            done.load(Ordering::SeqCst) - before,
            at.elapsed()
        );
        assert!(
            wait_until(Duration::from_secs(5), || done.load(Ordering::SeqCst)
                >= before + 401)
            .await
        );
    }
    w.stop().await;
}

/// Its first run hands over its cancellation token, then blocks its thread
/// until the gate opens (so it is still going when its lost lease cancels
/// it), then gives up as its cancellation asks; a later run succeeds at once.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "blocked_past_its_lease", queue = "hw", max_attempts = 1)]
struct BlockedPastItsLease;

/// The first run's cancellation token, for the test to watch.
#[derive(Clone, Default)]
struct FirstRun(Arc<std::sync::Mutex<Option<tokio_util::sync::CancellationToken>>>);

impl Job for BlockedPastItsLease {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let rec = ctx.data::<Recorder>()?;
        rec.record(ctx, 0);
        if rec.len() == 1 {
            *ctx.data::<FirstRun>()?.0.lock().unwrap() = Some(ctx.cancellation().clone());
            let gate = ctx.data::<Gate>()?.clone();
            tokio::task::block_in_place(|| gate.wait());
            ctx.cancellation().cancelled().await;
            return Err(JobError::retry("cancelled"));
        }
        Ok(())
    }
}

/// A run cancelled for its lost lease that has not ended when this worker
/// fetches its job again: the new delivery is merged into it, and the run
/// ends released. The lost delivery ran its handler and counts, as any
/// delivery whose lease ran out does: only the merged one goes back. The
/// old release gave both back, so the job's attempt was never counted (a
/// worker losing Redis for longer than the lease, again and again, kept a
/// poison job from its dead letter): here its next delivery ran as attempt
/// 1 again, though `max_attempts` is 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_for_its_lost_lease_and_fetched_again_here_still_counts() {
    use redjob::inspect::Inspect;
    let mem = MemoryBackend::new();
    let client = Client::memory(mem.clone());
    let id = client.enqueue(&BlockedPastItsLease).await.unwrap();
    let (renewals_fail, fetch_fails) = (Arc::new(AtomicBool::new(true)), Arc::default());
    let backend = Faulty {
        renewals_fail: Some(renewals_fail.clone()),
        fetch_fails: Some(Arc::clone(&fetch_fails)),
        ..Faulty::new(mem.clone())
    };
    let (rec, first) = (Recorder::default(), FirstRun::default());
    let gate = Gate::default();
    let opener = OpenOnDrop(gate.clone());
    let w = Worker::builder(backend)
        .register::<BlockedPastItsLease>()
        .handle_signals(false)
        .lease(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(50))
        .data(rec.clone())
        .data(first.clone())
        .data(gate.clone())
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    // no renewal lands: the lease runs out here and the run is cancelled
    // (its thread still blocked); no fetch before, which would take the
    // job again first
    fetch_fails.store(true, Ordering::SeqCst);
    let cancelled = || {
        first
            .0
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|t| t.is_cancelled())
    };
    assert!(wait_until(Duration::from_secs(5), cancelled).await);
    // then the job is fetched here again, merged into the run
    fetch_fails.store(false, Ordering::SeqCst);
    let fetched_again = wait_for(Duration::from_secs(5), || async {
        mem.job("hw", &id)
            .await
            .unwrap()
            .is_some_and(|j| j.attempts >= 2)
    })
    .await;
    assert!(fetched_again, "the job was not fetched again");
    renewals_fail.store(false, Ordering::SeqCst);
    drop(opener);
    // the first delivery counted: the second is over max_attempts
    let dead = wait_for(Duration::from_secs(10), || async {
        !client.dead_letters("hw", 10).await.unwrap().is_empty()
    })
    .await;
    let runs = rec.runs();
    stop.cancel();
    h.await.unwrap().unwrap();
    assert!(dead, "never dead-lettered; runs: {runs:?}");
    assert_eq!(runs.len(), 1, "ran again: {runs:?}");
}

/// Unique until its run starts; fails every run, retried an hour on.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "until_start_fails",
    queue = "us",
    unique_until = "start",
    backoff = "1h"
)]
struct UntilStartFails {
    n: u32,
}

impl Job for UntilStartFails {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<AtomicU32>>()?.fetch_add(1, Ordering::SeqCst);
        Err(JobError::retry("fails every run"))
    }
}

/// A job unique until its run starts whose key cannot be freed as the run
/// starts (the backend out of reach for that call) runs all the same, and
/// its key is held until it is done or the next run's start: an enqueue of
/// the key while it waits for its retry is a duplicate, and once its retry's
/// run started (the backend answering again) a new job.
#[tokio::test(start_paused = true)]
async fn a_run_whose_unique_key_cannot_be_freed_as_it_starts_runs_and_keeps_the_key() {
    let mem = MemoryBackend::new();
    let client = Client::memory(mem.clone());
    let calls = Arc::new(AtomicU32::new(0));
    let backend = Faulty {
        unique_start_fails: Some(calls.clone()),
        ..Faulty::new(mem.clone())
    };
    let runs = Arc::new(AtomicU32::new(0));
    let w = Worker::builder(backend)
        .queue("us")
        .handle_signals(false)
        .data(runs.clone())
        .retry(RetryPolicy::default().jitter(false))
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    let id = client.enqueue(&UntilStartFails { n: 1 }).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), || runs.load(Ordering::SeqCst) == 1).await);
    stop.cancel();
    h.await.unwrap().unwrap();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "asked once, as the run started"
    );
    let again = client
        .enqueue_outcome(
            &UntilStartFails { n: 1 },
            redjob::client::EnqueueOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        (again.id, again.outcome),
        (id, redjob::queue::SendOutcome::Duplicate)
    );
    // its retry, an hour on, on a backend that answers: that run's start
    // frees the key
    mem.clock().advance(Duration::from_secs(3601));
    let w = Worker::builder(mem.clone())
        .queue("us")
        .handle_signals(false)
        .data(runs.clone())
        .retry(RetryPolicy::default().jitter(false))
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(10), || runs.load(Ordering::SeqCst) == 2).await);
    stop.cancel();
    h.await.unwrap().unwrap();
    let fresh = client
        .enqueue_outcome(
            &UntilStartFails { n: 1 },
            redjob::client::EnqueueOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        fresh.outcome,
        redjob::queue::SendOutcome::Added,
        "freed by the second run's start"
    );
    assert_ne!(fresh.id, id);
}
