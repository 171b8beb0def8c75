//! Lifecycle hooks: every run starts once and ends with one outcome, with its run
//! time and queue wait; cancelled runs say why; a panicking hook changes nothing.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{start, start_serving, wait_until};
use redjob::backend::Backend;
use redjob::backend::memory::MemoryBackend;
use redjob::inspect::Inspect;
use redjob::queue::{Queues, SendMessage};
use redjob::worker::{CancelReason, Hooks, JobRun, UNDECODABLE};
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "hk_ok", queue = "hooks")]
struct Ok20;

impl Job for Ok20 {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "hk_flaky", queue = "hooks")]
struct Flaky;

impl Job for Flaky {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.attempt() == 1 {
            return Err(JobError::retry_after("flaky", Duration::from_millis(10)));
        }
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "hk_fatal", queue = "hooks")]
struct Fatal;

impl Job for Fatal {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Err(JobError::fatal("no such account"))
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "hk_panics", queue = "hooks", max_attempts = 1)]
struct Panics;

impl Job for Panics {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        panic!("kaboom")
    }
}

/// Runs until its run is dropped.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "hk_long", queue = "long")]
struct Long;

impl Job for Long {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        std::future::pending().await
    }
}

/// Gives up with an error when told to stop (the usual `select!` on the token).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "hk_quitter", queue = "quitters")]
struct Quitter;

impl Job for Quitter {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        tokio::select! {
            _ = std::future::pending::<()>() => Ok(()),
            _ = ctx.cancellation().cancelled() => Err(JobError::retry("interrupted")),
        }
    }
}

/// Blocks its thread for 6 s, deaf to cancellation.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "hk_blocker", queue = "blockers")]
struct Blocker;

impl Job for Blocker {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        std::thread::sleep(Duration::from_secs(6));
        Ok(())
    }
}

/// Finishes its work, successfully, when told to stop.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "hk_polite", queue = "polite")]
struct Polite;

impl Job for Polite {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.cancellation().cancelled().await;
        Ok(())
    }
}

#[derive(Debug, Clone)]
struct Ev {
    what: String,
    job: String,
    attempt: u32,
    took: Duration,
    waited: Duration,
    detail: String,
}

#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<Ev>>>);

impl Heard {
    fn push(&self, what: &str, run: &JobRun<'_>, took: Duration, detail: String) {
        self.0.lock().unwrap().push(Ev {
            what: what.into(),
            job: run.job.into(),
            attempt: run.attempt,
            took,
            waited: run.waited,
            detail,
        });
    }
    fn events(&self) -> Vec<Ev> {
        self.0.lock().unwrap().clone()
    }
    /// `(what, attempt)` of one job type's events, in order.
    fn of(&self, job: &str) -> Vec<(String, u32)> {
        self.events()
            .into_iter()
            .filter(|e| e.job == job)
            .map(|e| (e.what, e.attempt))
            .collect()
    }
    fn ended(&self) -> usize {
        self.events().iter().filter(|e| e.what != "started").count()
    }
}

impl Hooks for Heard {
    fn started(&self, run: &JobRun<'_>) {
        self.push("started", run, Duration::ZERO, String::new());
    }
    fn succeeded(&self, run: &JobRun<'_>, took: Duration) {
        self.push("succeeded", run, took, String::new());
    }
    fn retried(&self, run: &JobRun<'_>, took: Duration, error: &str, retry_in: Duration) {
        self.push("retried", run, took, format!("{error} in {retry_in:?}"));
    }
    fn dead_lettered(&self, run: &JobRun<'_>, took: Duration, error: &str) {
        self.push("dead", run, took, error.into());
    }
    fn cancelled(&self, run: &JobRun<'_>, took: Duration, why: CancelReason) {
        self.push("cancelled", run, took, why.as_str().into());
    }
}

/// A hook that panics at every event.
struct Explodes;

impl Hooks for Explodes {
    fn started(&self, _: &JobRun<'_>) {
        panic!("hook exploded")
    }
    fn succeeded(&self, _: &JobRun<'_>, _: Duration) {
        panic!("hook exploded")
    }
}

fn s(what: &str, attempt: u32) -> (String, u32) {
    (what.to_string(), attempt)
}

#[tokio::test]
async fn every_outcome_reaches_the_hooks_once_with_run_time_and_wait() {
    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    client.enqueue(&Ok20).await.unwrap();
    client.enqueue(&Flaky).await.unwrap();
    client.enqueue(&Fatal).await.unwrap();
    client.enqueue(&Panics).await.unwrap();
    Queues::send(&backend, "hooks", SendMessage::new("not an envelope"))
        .await
        .unwrap();
    // every job has been due for 5 s on the backend's clock when the worker starts
    backend.clock().advance(Duration::from_secs(5));
    let heard = Heard::default();
    let worker = Worker::builder(client.backend())
        .queue("hooks")
        .handle_signals(false)
        .hooks(heard.clone())
        .hooks(Explodes)
        .build()
        .unwrap();
    let w = start(worker);
    assert!(
        wait_until(Duration::from_secs(10), || heard.ended() >= 6).await,
        "{:?}",
        heard.events()
    );
    w.stop().await;

    assert_eq!(heard.of("hk_ok"), [s("started", 1), s("succeeded", 1)]);
    assert_eq!(
        heard.of("hk_flaky"),
        [
            s("started", 1),
            s("retried", 1),
            s("started", 2),
            s("succeeded", 2)
        ]
    );
    assert_eq!(heard.of("hk_fatal"), [s("started", 1), s("dead", 1)]);
    assert_eq!(heard.of("hk_panics"), [s("started", 1), s("dead", 1)]);
    // never ran: dead-lettered alone
    assert_eq!(heard.of(UNDECODABLE), [s("dead", 1)]);
    assert_eq!(heard.events().len(), 11, "{:?}", heard.events());

    let ev = heard.events();
    let find = |what: &str, job: &str| {
        ev.iter()
            .find(|e| e.what == what && e.job == job)
            .unwrap()
            .clone()
    };
    let ok = find("succeeded", "hk_ok");
    assert!(ok.took >= Duration::from_millis(20), "{ok:?}");
    assert!(ok.waited >= Duration::from_secs(5), "{ok:?}");
    assert!(
        find("retried", "hk_flaky")
            .detail
            .starts_with("flaky in 10ms")
    );
    assert_eq!(
        find("dead", "hk_fatal").detail,
        "fatal: no such account",
        "the reason written to the dead letter"
    );
    assert!(find("dead", "hk_panics").detail.contains("kaboom"));
    let garbage = find("dead", UNDECODABLE);
    assert_eq!(garbage.took, Duration::ZERO);
    assert!(garbage.detail.starts_with("cannot run this body"));

    // the outcomes the hooks heard are the ones recorded
    let stats = backend.stats("hooks").await.unwrap();
    assert_eq!((stats.processed, stats.retried, stats.dead), (2, 1, 3));
}

/// Runs 150 ms of its 400 ms timeout.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "hk_timed",
    queue = "hooks",
    timeout = "400ms",
    max_attempts = 1
)]
struct Timed;

impl Job for Timed {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(150)).await;
        Ok(())
    }
}

/// Takes 350 ms of the app's time before each run.
struct SlowStart(Heard);

impl Hooks for SlowStart {
    fn started(&self, run: &JobRun<'_>) {
        std::thread::sleep(Duration::from_millis(350));
        self.0.started(run);
    }
    fn succeeded(&self, run: &JobRun<'_>, took: Duration) {
        self.0.succeeded(run, took);
    }
    fn dead_lettered(&self, run: &JobRun<'_>, took: Duration, error: &str) {
        self.0.dead_lettered(run, took, error);
    }
}

/// A `started` hook's time is the app's, not the handler's: the handler's
/// timeout and run time count from when it starts (a slow hook ate the
/// timeout, and the job died "timed out after 400ms" having run 50 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_started_hook_takes_nothing_of_the_handlers_timeout() {
    let client = Client::memory(MemoryBackend::new());
    client.enqueue(&Timed).await.unwrap();
    let heard = Heard::default();
    let worker = Worker::builder(client.backend())
        .queue("hooks")
        .handle_signals(false)
        .hooks(SlowStart(heard.clone()))
        .build()
        .unwrap();
    let w = start(worker);
    assert!(wait_until(Duration::from_secs(10), || heard.ended() >= 1).await);
    w.stop().await;
    let events = heard.events();
    assert_eq!(
        heard.of("hk_timed"),
        [s("started", 1), s("succeeded", 1)],
        "{events:?}"
    );
    let took = events[1].took;
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_millis(350),
        "the run took {took:?}"
    );
}

#[tokio::test]
async fn cancelled_runs_say_why_deleted_lease_lost_or_shutdown() {
    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    let heard = Heard::default();
    let worker = Worker::builder(client.backend())
        .queue("long")
        .handle_signals(false)
        .lease(Duration::from_secs(1))
        .grace_period(Duration::from_millis(200))
        .hooks(heard.clone())
        .build()
        .unwrap();
    let w = start_serving(worker).await;
    let started = |n: usize| {
        let heard = heard.clone();
        move || {
            heard
                .events()
                .iter()
                .filter(|e| e.what == "started")
                .count()
                >= n
        }
    };
    let why = |n: usize| {
        heard
            .events()
            .iter()
            .filter(|e| e.what == "cancelled")
            .map(|e| e.detail.clone())
            .nth(n)
    };

    // deleted by an operator while it runs
    let id = client.enqueue(&Long).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), started(1)).await);
    backend.cancel("long", &id).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), || why(0).is_some()).await);
    assert_eq!(why(0).unwrap(), "deleted");

    // its lease ran out and another consumer took it
    client.enqueue(&Long).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), started(2)).await);
    backend.clock().advance(Duration::from_secs(2));
    let stolen = Backend::fetch(&backend, "long", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(stolen.jobs.len(), 1);
    assert!(wait_until(Duration::from_secs(10), || why(1).is_some()).await);
    assert_eq!(why(1).unwrap(), "lease_lost");

    // still running when the grace period ends
    client.enqueue(&Long).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), started(3)).await);
    w.stop().await;
    assert_eq!(why(2).as_deref(), Some("shutdown"), "{:?}", heard.events());
    let cancelled: Vec<Ev> = heard
        .events()
        .into_iter()
        .filter(|e| e.what == "cancelled")
        .collect();
    assert_eq!(cancelled.len(), 3);
    // the shutdown one ran until the grace period was over
    assert!(
        cancelled[2].took >= Duration::from_millis(200),
        "{cancelled:?}"
    );
    // released at shutdown: it runs again
    assert_eq!(Inspect::counts(&backend, "long").await.unwrap().ready, 1);
}

/// Enqueues `n` copies of `job` (of queue `queue`) in memory, runs a worker
/// with the hooks and a 100 ms grace period until all `n` started, then shuts
/// it down.
async fn start_all_then_shut_down<J: Job>(job: J, queue: &str, n: usize) -> (MemoryBackend, Heard) {
    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    for _ in 0..n {
        client.enqueue(&job).await.unwrap();
    }
    let heard = Heard::default();
    let worker = Worker::builder(client.backend())
        .queue(queue)
        .concurrency(n)
        .handle_signals(false)
        .grace_period(Duration::from_millis(100))
        .hooks(heard.clone())
        .build()
        .unwrap();
    let w = start(worker);
    let all_started = || heard.events().len() >= n;
    assert!(wait_until(Duration::from_secs(10), all_started).await);
    w.stop().await;
    (backend, heard)
}

/// The end events heard after the first `skip`, as `what:detail`.
fn ends(heard: &Heard, skip: usize) -> Vec<String> {
    let ev = heard.events().into_iter().skip(skip);
    ev.map(|e| e.what + ":" + &e.detail).collect()
}

/// A handler that returns `Ok` when cancelled at shutdown did its work: the job
/// is acked, not released to run again (the outcome used to be a coin toss).
#[tokio::test]
async fn a_handler_that_finishes_when_cancelled_is_acked_not_run_again() {
    let (backend, heard) = start_all_then_shut_down(Polite, "polite", 20).await;
    assert_eq!(ends(&heard, 20), vec!["succeeded:"; 20]);
    assert_eq!(backend.stats("polite").await.unwrap().processed, 20);
    let left = Inspect::counts(&backend, "polite").await.unwrap();
    assert_eq!(left.total(), 0);
}

/// A handler that returns an error because it was cancelled at shutdown failed
/// no attempt: it is released to run again at once, not retried after a backoff
/// (nor dead-lettered on its last attempt).
#[tokio::test]
async fn a_handler_that_gives_up_when_cancelled_at_shutdown_is_released() {
    let (backend, heard) = start_all_then_shut_down(Quitter, "quitters", 10).await;
    assert_eq!(ends(&heard, 10), vec!["cancelled:shutdown"; 10]);
    let stats = backend.stats("quitters").await.unwrap();
    assert_eq!((stats.retried, stats.dead), (0, 0));
    let left = Inspect::counts(&backend, "quitters").await.unwrap();
    assert_eq!(left.ready, 10);
}

/// A run deaf to its cancellation (blocking its thread) is given up at
/// shutdown and left leased; when it ends, its hooks hear it was stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_deaf_to_cancellation_is_given_up_at_shutdown() {
    let (backend, heard) = start_all_then_shut_down(Blocker, "blockers", 1).await;
    let ended = || heard.events().len() >= 2;
    assert!(wait_until(Duration::from_secs(10), ended).await);
    assert_eq!(ends(&heard, 1), ["cancelled:shutdown"]);
    // left leased (not settled): it runs again once its lease ends
    assert_eq!(backend.stats("blockers").await.unwrap().processed, 0);
    let left = Inspect::counts(&backend, "blockers").await.unwrap();
    assert_eq!(left.in_flight, 1);
}

/// On Redis, a job deleted while it runs is told apart from a lost lease by a
/// read of its score before the run is cancelled.
#[tokio::test]
async fn on_redis_a_job_cancelled_while_it_runs_is_reported_deleted() {
    let server = common::RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let heard = Heard::default();
    let worker = Worker::builder(client.backend())
        .queue("long")
        .handle_signals(false)
        .lease(Duration::from_secs(1))
        .hooks(heard.clone())
        .build()
        .unwrap();
    let w = start_serving(worker).await;
    let id = client.enqueue(&Long).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), || !heard.events().is_empty()).await);
    client.cancel("long", &id).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), || heard.events().len() >= 2).await);
    w.stop().await;
    let ev = heard.events();
    assert_eq!(
        (ev[1].what.as_str(), ev[1].detail.as_str()),
        ("cancelled", "deleted"),
        "{ev:?}"
    );
}

static TOLD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[derive(Serialize, Deserialize, Job)]
#[job(name = "hk_told", queue = "told")]
struct Told;

impl Job for Told {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.cancellation().cancelled().await;
        TOLD.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// A worker whose `run` future is dropped (its task aborted, its program
/// tearing it down) cancels the tokens of the runs it started, as the grace
/// period's end does: their tasks outlive the worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_running_worker_cancels_its_runs() {
    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    for _ in 0..5 {
        client.enqueue(&Told).await.unwrap();
    }
    let heard = Heard::default();
    let worker = Worker::builder(client.backend())
        .queue("told")
        .concurrency(5)
        .handle_signals(false)
        .hooks(heard.clone())
        .build()
        .unwrap();
    let task = tokio::spawn(worker.run());
    assert!(wait_until(Duration::from_secs(10), || heard.events().len() >= 5).await);
    assert_eq!(TOLD.load(std::sync::atomic::Ordering::SeqCst), 0);
    task.abort();
    let told = || TOLD.load(std::sync::atomic::Ordering::SeqCst) == 5;
    assert!(
        wait_until(Duration::from_secs(10), told).await,
        "{} of 5 runs told",
        TOLD.load(std::sync::atomic::Ordering::SeqCst)
    );
}

/// A hook's name and the name of the span it was called in.
type Noted = (&'static str, Option<&'static str>);

/// Hooks that note the span they are called in.
#[derive(Clone, Default)]
struct InSpan(Arc<Mutex<Vec<Noted>>>);

impl InSpan {
    fn note(&self, hook: &'static str) {
        let span = tracing::Span::current().metadata().map(|m| m.name());
        self.0.lock().unwrap().push((hook, span));
    }
}

impl Hooks for InSpan {
    fn started(&self, _: &JobRun<'_>) {
        self.note("started");
    }
    fn succeeded(&self, _: &JobRun<'_>, _: Duration) {
        self.note("succeeded");
    }
    fn retried(&self, _: &JobRun<'_>, _: Duration, _: &str, _: Duration) {
        self.note("retried");
    }
    fn dead_lettered(&self, _: &JobRun<'_>, _: Duration, _: &str) {
        self.note("dead_lettered");
    }
}

/// Every hook of a run is called inside the run's `job` span (one span per
/// job execution), so what a hook logs carries the job's id, queue and
/// attempt; the end hooks were called after the span had closed.
#[tokio::test]
async fn every_hook_runs_inside_the_jobs_span() {
    traced();
    let client = Client::memory(MemoryBackend::new());
    client.enqueue(&Ok20).await.unwrap();
    client.enqueue(&Flaky).await.unwrap();
    client.enqueue(&Fatal).await.unwrap();
    let heard = InSpan::default();
    let worker = Worker::builder(client.backend())
        .queue("hooks")
        .handle_signals(false)
        .hooks(heard.clone())
        .build()
        .unwrap();
    let w = start(worker);
    let ended = || {
        let noted = heard.0.lock().unwrap();
        noted.iter().filter(|(h, _)| *h != "started").count()
    };
    assert!(wait_until(Duration::from_secs(10), || ended() >= 4).await);
    w.stop().await;
    let noted = heard.0.lock().unwrap().clone();
    assert_eq!(noted.len(), 8, "{noted:?}");
    assert!(
        noted.iter().all(|(_, span)| *span == Some("job")),
        "{noted:?}"
    );
}

/// A field's name and value, as logged.
type Field = (String, String);

/// An event logged during the tests: its fields, and the name and fields of
/// the span it was logged in.
type Logged = (Vec<Field>, Option<(String, Vec<Field>)>);

/// A span's or an event's fields, kept in the span's extensions.
#[derive(Default, Clone)]
struct Fields(Vec<Field>);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
        self.0.push((f.name().to_string(), v.to_string()));
    }
    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
        self.0.push((f.name().to_string(), format!("{v:?}")));
    }
}

/// Keeps every event with the span it was logged in.
struct Capture(Arc<Mutex<Vec<Logged>>>);

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(f);
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some(span) = ctx.span(id)
            && let Some(f) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(f);
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let span = ctx.event_span(event).map(|s| {
            let fields = s.extensions().get::<Fields>().cloned().unwrap_or_default();
            (s.name().to_string(), fields.0)
        });
        self.0.lock().unwrap().push((f.0, span));
    }
}

/// The process's default subscriber, set once for every test of this file
/// (a thread's own default meets callsites whose interest other tests'
/// threads cached without it): spans on, output dropped, events kept.
fn traced() -> Arc<Mutex<Vec<Logged>>> {
    use tracing_subscriber::prelude::*;
    static LOGGED: std::sync::OnceLock<Arc<Mutex<Vec<Logged>>>> = std::sync::OnceLock::new();
    LOGGED
        .get_or_init(|| {
            let logged = Arc::default();
            tracing::subscriber::set_global_default(
                tracing_subscriber::registry()
                    .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink))
                    .with(Capture(Arc::clone(&logged))),
            )
            .expect("no other global subscriber in this test binary");
            logged
        })
        .clone()
}

/// A field of `fields`.
fn field<'f>(fields: &'f [Field], name: &str) -> Option<&'f str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Logs each end hook, so that the span it runs in is kept with it.
struct LogsHooks;

impl Hooks for LogsHooks {
    fn dead_lettered(&self, run: &JobRun<'_>, _: Duration, _: &str) {
        tracing::info!(hook = "dead_lettered", queue = run.queue, "hook");
    }
}

/// The `job` span around the events logged with `queue`, for the event that
/// `pick` chooses: its fields (failing when it was logged in another span).
fn job_span_of(queue: &str, pick: impl Fn(&[Field]) -> bool) -> Vec<Vec<Field>> {
    let logged = traced().lock().unwrap().clone();
    logged
        .into_iter()
        .filter(|(fields, span)| {
            let in_queue = span
                .as_ref()
                .and_then(|(_, f)| field(f, "queue"))
                .or(field(fields, "queue"))
                == Some(queue);
            in_queue && pick(fields)
        })
        .map(|(fields, span)| match span {
            Some((name, f)) if name == "job" => f,
            other => panic!("logged outside the job's span ({other:?}): {fields:?}"),
        })
        .collect()
}

/// A job dead-lettered because its body is over the queue's maxsize gets its
/// `job` span as any run does, with the same fields: its end hook and the
/// "dead-lettered" line are inside it. On the old code both were logged
/// outside any span.
#[tokio::test]
async fn an_oversized_job_ends_inside_its_span() {
    traced();
    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    let queue = "hk_oversized";
    Queues::create_queue(&backend, queue, Default::default())
        .await
        .unwrap();
    let body = format!(
        r#"{{"type":"hk_ok","args":null,"pad":"{}"}}"#,
        "x".repeat(3000)
    );
    Queues::send(&backend, queue, SendMessage::new(body))
        .await
        .unwrap();
    let smaller = redjob::queue::QueueUpdate {
        maxsize: Some(1024),
        ..Default::default()
    };
    Queues::set_attributes(&backend, queue, smaller)
        .await
        .unwrap();
    let worker = Worker::builder(client.backend())
        .queue(queue)
        .handle_signals(false)
        .hooks(LogsHooks)
        .build()
        .unwrap();
    let w = start(worker);
    let dead = || async { client.stats(queue).await.unwrap().dead == 1 };
    assert!(common::wait_for(Duration::from_secs(10), dead).await);
    w.stop().await;
    let hook = job_span_of(queue, |f| field(f, "hook") == Some("dead_lettered"));
    let line = job_span_of(queue, |f| field(f, "message") == Some("dead-lettered"));
    assert_eq!((hook.len(), line.len()), (1, 1), "{hook:?} {line:?}");
    for span in [&hook[0], &line[0]] {
        let id = field(span, "job.id").expect("job.id");
        assert_eq!(id.len(), 32, "{span:?}");
        assert_eq!(field(span, "queue"), Some(queue), "{span:?}");
        assert_eq!(field(span, "attempt"), Some("1"), "{span:?}");
        assert_eq!(field(span, "job.name"), Some("hk_ok"), "{span:?}");
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "hk_typed")]
struct Typed {
    n: u64,
}

impl Job for Typed {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// The span field `job.name` names the envelope's type when the run never
/// decodes it: an unknown type, arguments that do not decode; a garbage
/// name is cut to 200 bytes. On the old code it was never set on these paths.
#[tokio::test]
async fn job_name_is_set_on_runs_that_never_decode() {
    traced();
    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    let queue = "hk_undecoded";
    Queues::create_queue(&backend, queue, Default::default())
        .await
        .unwrap();
    let huge = "h".repeat(1000);
    for body in [
        r#"{"type":"hk_nobody_knows","args":null}"#.to_string(),
        r#"{"type":"hk_typed","args":{"n":"nope"}}"#.to_string(),
        format!(r#"{{"type":"{huge}","args":null}}"#),
    ] {
        Queues::send(&backend, queue, SendMessage::new(body))
            .await
            .unwrap();
    }
    let worker = Worker::builder(client.backend())
        .queue(queue)
        .handle_signals(false)
        .unknown_jobs_retry_for(Duration::ZERO)
        .build()
        .unwrap();
    let w = start(worker);
    let dead = || async { client.stats(queue).await.unwrap().dead == 3 };
    assert!(common::wait_for(Duration::from_secs(10), dead).await);
    w.stop().await;
    let lines = job_span_of(queue, |f| field(f, "message") == Some("dead-lettered"));
    let mut names: Vec<&str> = lines
        .iter()
        .map(|span| field(span, "job.name").unwrap_or("(not set)"))
        .collect();
    names.sort_unstable();
    assert_eq!(names, [&huge[..200], "hk_nobody_knows", "hk_typed"]);
}

/// Waits for the test to open its gate, then fails: the test makes it
/// visible again meanwhile, so its worker fetches it again into the run.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "hk_merged", queue = "hk_merged", max_attempts = 2)]
struct MergedFailure;

impl Job for MergedFailure {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let (entered, gate) =
            &**ctx.data::<Arc<(tokio::sync::Semaphore, tokio::sync::Notify)>>()?;
        entered.add_permits(1);
        gate.notified().await;
        Err(JobError::retry("boom"))
    }
}

/// A run into which a re-delivery was merged is settled as that delivery (2
/// of 2: dead-lettered), which the end hooks hear; docs/history.md says every
/// event of a run is inside its `job` span. The worker's "a re-delivery
/// merged into the run" line was logged outside the span, and the span said
/// attempt 1 while the hook inside it heard 2: it now records the attempt
/// the run is settled as.
#[tokio::test]
async fn a_run_merged_with_a_redelivery_logs_inside_its_span_with_the_settled_attempt() {
    traced();
    let client = Client::memory(MemoryBackend::new());
    let queue = "hk_merged";
    let gates = Arc::new((tokio::sync::Semaphore::new(0), tokio::sync::Notify::new()));
    let id = client.enqueue(&MergedFailure).await.unwrap();
    let worker = Worker::builder(client.backend())
        .queue(queue)
        .handle_signals(false)
        .hooks(LogsHooks)
        .data(gates.clone())
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    let w = start(worker);
    tokio::time::timeout(Duration::from_secs(10), gates.0.acquire())
        .await
        .expect("the job runs")
        .unwrap()
        .forget();
    // visible again while it runs: fetched again here, merged into the run
    let queues = client.queues();
    assert!(
        queues
            .change_visibility(queue, &id, Duration::ZERO)
            .await
            .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    gates.1.notify_one();
    let dead = || async { client.stats(queue).await.unwrap().dead == 1 };
    assert!(common::wait_for(Duration::from_secs(10), dead).await);
    w.stop().await;
    let merged = |f: &[Field]| field(f, "message").is_some_and(|m| m.contains("merged"));
    let line = job_span_of(queue, merged);
    let hook = job_span_of(queue, |f| field(f, "hook") == Some("dead_lettered"));
    assert_eq!((line.len(), hook.len()), (1, 1), "{line:?} {hook:?}");
    for span in [&line[0], &hook[0]] {
        let attempts: Vec<&str> = span
            .iter()
            .filter(|(n, _)| n == "attempt")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(
            attempts.last(),
            Some(&"2"),
            "the span says the attempt it is settled as: {span:?}"
        );
    }
}
