//! `redjob::testing::TestKit` as a user meets it: handlers and schedules tested
//! without Redis and without real sleeps.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redjob::queue::Queues;
use redjob::testing::TestKit;
use redjob::{Client, Error, Job, JobContext, JobError, RetryPolicy};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job, Debug, PartialEq, Clone)]
#[job(name = "invoice", queue = "billing")]
struct Invoice {
    order: u64,
}

#[derive(Serialize, Deserialize, Job, Debug, PartialEq, Clone)]
#[job(name = "reminder", queue = "mail")]
struct Reminder {
    order: u64,
}

#[derive(Serialize, Deserialize, Job, Debug)]
#[job(name = "charge", queue = "billing", max_attempts = 3, backoff = "10s")]
struct Charge {
    cents: u64,
}

/// Counts runs of every job type.
#[derive(Default)]
struct Runs(AtomicU32);

impl Job for Invoice {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Runs>>()?.0.fetch_add(1, Ordering::SeqCst);
        let client = ctx.data::<Client>()?;
        client
            .enqueue_in(
                &Reminder { order: self.order },
                Duration::from_secs(24 * 3600),
            )
            .await?;
        Ok(())
    }
}

impl Job for Reminder {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Runs>>()?.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

impl Job for Charge {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Runs>>()?.0.fetch_add(1, Ordering::SeqCst);
        if self.cents == 0 {
            return Err(JobError::fatal("nothing to charge"));
        }
        Err(JobError::retry(std::io::Error::other("card declined")))
    }
}

fn kit() -> (TestKit, Arc<Runs>) {
    let runs = Arc::new(Runs::default());
    let kit = TestKit::new();
    let client = kit.client();
    let kit = kit
        .data(client)
        .data(runs.clone())
        .retry(RetryPolicy::default().jitter(false));
    (kit, runs)
}

#[tokio::test]
async fn follow_up_scheduled_a_day_later_runs_when_the_clock_gets_there() {
    let (kit, runs) = kit();
    let start = kit.clock().now();
    kit.client().enqueue(&Invoice { order: 1 }).await.unwrap();
    kit.assert_enqueued(&Invoice { order: 1 });

    let run = kit.run_until_idle().await.unwrap();
    assert_eq!((run.processed, run.retried, run.dead), (1, 0, 0));
    assert!(kit.enqueued::<Invoice>().is_empty());
    let scheduled = kit.scheduled::<Reminder>();
    assert_eq!(scheduled.len(), 1);
    assert_eq!(scheduled[0].job, Reminder { order: 1 });
    assert_eq!(scheduled[0].queue, "mail");
    let due_in = scheduled[0].due.duration_since(start).unwrap();
    assert!(
        due_in >= Duration::from_secs(24 * 3600) && due_in < Duration::from_secs(24 * 3600 + 5),
        "{due_in:?}"
    );

    assert_eq!(
        kit.advance(Duration::from_secs(23 * 3600))
            .await
            .unwrap()
            .processed,
        0
    );
    kit.assert_enqueued(&Reminder { order: 1 });
    assert_eq!(
        kit.advance(Duration::from_secs(3600))
            .await
            .unwrap()
            .processed,
        1
    );
    assert!(kit.enqueued::<Reminder>().is_empty());
    assert_eq!(runs.0.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn works_on_tokios_paused_clock_too() {
    let (kit, runs) = kit();
    kit.client().enqueue(&Invoice { order: 2 }).await.unwrap();
    kit.run_until_idle().await.unwrap();
    // tokio's clock moves the kit's clock as well
    tokio::time::advance(Duration::from_secs(24 * 3600 + 1)).await;
    assert_eq!(kit.run_until_idle().await.unwrap().processed, 1);
    assert_eq!(runs.0.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn retries_follow_the_backoff_then_dead_letter() {
    let (kit, runs) = kit();
    kit.client().enqueue(&Charge { cents: 500 }).await.unwrap();
    assert_eq!(kit.run_until_idle().await.unwrap().retried, 1);
    // backoff 10 s, doubled: the second attempt is due 10 s later, not before
    assert_eq!(
        kit.advance(Duration::from_secs(9)).await.unwrap().retried,
        0
    );
    assert_eq!(
        kit.advance(Duration::from_secs(1)).await.unwrap().retried,
        1
    );
    let last = kit.advance(Duration::from_secs(20)).await.unwrap();
    assert_eq!((last.retried, last.dead), (0, 1));
    assert_eq!(runs.0.load(Ordering::SeqCst), 3);
    let dead = kit.dead_letters("billing").await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].attempts, 3);
    assert!(dead[0].error.contains("card declined"), "{}", dead[0].error);
}

#[tokio::test]
async fn assert_enqueued_names_what_it_found_instead() {
    let (kit, _) = kit();
    kit.client().enqueue(&Reminder { order: 3 }).await.unwrap();
    let kit2 = kit.clone();
    let panic = tokio::spawn(async move { kit2.assert_enqueued(&Reminder { order: 4 }) })
        .await
        .unwrap_err()
        .into_panic();
    let msg = panic.downcast_ref::<String>().unwrap();
    assert!(msg.contains("reminder"), "{msg}");
    assert!(msg.contains(r#"{"order":4}"#), "{msg}");
    assert!(msg.contains(r#"{"order":3}"#), "{msg}");
}

#[tokio::test]
async fn assert_not_enqueued_names_the_job_it_found() {
    let (kit, _) = kit();
    let id = kit.client().enqueue(&Reminder { order: 7 }).await.unwrap();
    kit.assert_not_enqueued(&Reminder { order: 8 });
    kit.assert_not_enqueued(&Invoice { order: 7 });
    let kit2 = kit.clone();
    let panic = tokio::spawn(async move { kit2.assert_not_enqueued(&Reminder { order: 7 }) })
        .await
        .unwrap_err()
        .into_panic();
    let msg = panic.downcast_ref::<String>().unwrap();
    assert!(msg.contains(r#"{"order":7}"#), "{msg}");
    assert!(msg.contains(id.as_str()) && msg.contains("mail"), "{msg}");
}

#[tokio::test]
async fn inline_client_runs_the_job_at_once_and_reports_its_failure() {
    let (kit, runs) = kit();
    let inline = kit.inline_client();
    inline.enqueue(&Reminder { order: 5 }).await.unwrap();
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);
    assert!(kit.enqueued::<Reminder>().is_empty(), "nothing stored");
    match inline.enqueue(&Charge { cents: 0 }).await {
        Err(Error::JobFailed { name, error }) => {
            assert_eq!(name, "charge");
            assert!(error.contains("nothing to charge"), "{error}");
        }
        other => panic!("expected JobFailed, got {other:?}"),
    }
    assert_eq!(runs.0.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_value_the_worker_was_not_given_dead_letters_at_once_naming_its_type() {
    // the kit has no `Arc<Runs>`: Reminder's handler asks for one
    let kit = TestKit::new();
    kit.client().enqueue(&Reminder { order: 6 }).await.unwrap();
    let report = kit.run_until_idle().await.unwrap();
    assert_eq!((report.retried, report.dead), (0, 1), "{report:?}");
    let dead = kit.dead_letters("mail").await.unwrap();
    assert_eq!(dead[0].attempts, 1);
    assert!(dead[0].error.starts_with("fatal: "), "{}", dead[0].error);
    assert!(dead[0].error.contains("Runs"), "{}", dead[0].error);
    assert!(dead[0].error.contains(".data(value)"), "{}", dead[0].error);
}

/// A job that enqueues its own type (a countdown, a poll until done) did not
/// compile: the inline client's path made its handler's future contain itself.
#[tokio::test]
async fn a_job_may_enqueue_its_own_type() {
    #[derive(Serialize, Deserialize, Job, Debug)]
    #[job(name = "countdown", queue = "mail")]
    struct Countdown {
        left: u32,
    }
    impl Job for Countdown {
        async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
            ctx.data::<Arc<Runs>>()?.0.fetch_add(1, Ordering::SeqCst);
            if self.left > 0 {
                let next = Countdown {
                    left: self.left - 1,
                };
                ctx.data::<Client>()?.enqueue(&next).await?;
            }
            Ok(())
        }
    }
    let (kit, runs) = kit();
    kit.client().enqueue(&Countdown { left: 3 }).await.unwrap();
    assert_eq!(kit.run_until_idle().await.unwrap().processed, 4);
    assert_eq!(runs.0.load(Ordering::SeqCst), 4);
}

#[derive(Serialize, Deserialize, Job, Debug)]
#[job(
    name = "flaky_once",
    queue = "billing",
    max_attempts = 3,
    backoff = "1s"
)]
struct FlakyOnce;

impl Job for FlakyOnce {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Runs>>()?.0.fetch_add(1, Ordering::SeqCst);
        if ctx.attempt() == 1 {
            return Err(JobError::retry(std::io::Error::other("try again")));
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_runs_at_the_due_time_the_kit_reports_after_advancing_its_backoff() {
    let (kit, runs) = kit();
    kit.client().enqueue(&FlakyOnce).await.unwrap();
    let failed_at = kit.clock().now();
    assert_eq!(kit.run_until_idle().await.unwrap().retried, 1);
    let scheduled = kit.scheduled::<FlakyOnce>();
    assert_eq!(scheduled.len(), 1);
    // due one backoff (in whole ms of the backend's clock) after the failure
    let wait = scheduled[0].due.duration_since(failed_at).unwrap();
    assert!(
        wait <= Duration::from_secs(1) && wait > Duration::from_millis(998),
        "{wait:?}"
    );
    assert_eq!(
        kit.advance(wait - Duration::from_millis(1))
            .await
            .unwrap()
            .processed,
        0,
        "not before its due time"
    );
    let run = kit.advance(Duration::from_millis(1)).await.unwrap();
    assert_eq!(
        (run.processed, run.retried, run.dead),
        (1, 0, 0),
        "the retry runs at the due time the kit reported"
    );
    assert_eq!(runs.0.load(Ordering::SeqCst), 2);
}

/// A job whose arguments nest arrays or objects deeply.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "deep", queue = "deep", max_attempts = 1)]
struct Deep {
    v: serde_json::Value,
}

impl Job for Deep {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// `levels` arrays, one in another.
fn nested(levels: usize) -> serde_json::Value {
    (1..levels).fold(serde_json::json!([]), |v, _| serde_json::json!([v]))
}

/// A worker reads a body at most 127 levels deep (serde_json's recursion
/// limit): every job the client takes runs, and the first one deeper is
/// refused at the enqueue, where it was stored and then dead-lettered by every
/// worker as undecodable. Events alike.
#[tokio::test]
async fn a_job_or_event_nested_deeper_than_a_worker_reads_is_refused_when_sent() {
    let kit = TestKit::new().subscribe("deep_sub", |_: DeepEvent, _| async { Ok(()) });
    let client = kit.client();
    let (mut taken, mut refused) = (Vec::new(), Vec::new());
    for levels in 120..135 {
        match client.enqueue(&Deep { v: nested(levels) }).await {
            Ok(_) => taken.push(levels),
            Err(Error::Decode(e)) => {
                assert!(e.to_string().contains("levels deep"), "{e}");
                refused.push(levels);
            }
            Err(e) => panic!("{e}"),
        }
    }
    let report = kit.run_until_idle().await.unwrap();
    assert_eq!(
        report.dead,
        0,
        "{:?}",
        kit.dead_letters("deep").await.unwrap()
    );
    assert_eq!(report.processed, taken.len() as u64);
    // the envelope and the args' object take two levels
    assert_eq!(taken.last(), Some(&125));
    assert_eq!(refused.first(), Some(&126));

    let (mut published, mut deeper) = (Vec::new(), Vec::new());
    for levels in 120..135 {
        match client.publish(&DeepEvent { v: nested(levels) }).await {
            Ok(_) => published.push(levels),
            Err(Error::Decode(_)) => deeper.push(levels),
            Err(e) => panic!("{e}"),
        }
    }
    let report = kit.run_until_idle().await.unwrap();
    assert_eq!(
        (report.events, report.events_dead),
        (published.len() as u64, 0)
    );
    // an event's data is its own object: one level
    assert_eq!(published.last(), Some(&126));
    assert_eq!(deeper.first(), Some(&127));
}

/// An event whose data nests deeply.
#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "deep_event", topic = "deep_topic")]
struct DeepEvent {
    v: serde_json::Value,
}

/// A job of a type no worker knows, sent with a delay past
/// `unknown_jobs_retry_for`, meets its first worker after the window, which
/// counts from the send: its dead letter says so, where it said it had waited
/// the window for a worker.
#[tokio::test]
async fn a_delayed_job_of_an_unknown_type_says_when_it_was_sent() {
    let kit = TestKit::new();
    let client = kit.client();
    client
        .queues()
        .create_queue("later", Default::default())
        .await
        .unwrap();
    let body = r#"{"type":"not_deployed_yet","args":{}}"#;
    let two_hours = Duration::from_secs(2 * 3600);
    client
        .queues()
        .send(
            "later",
            redjob::queue::SendMessage::new(body).delay(two_hours),
        )
        .await
        .unwrap();
    let report = kit.advance(two_hours).await.unwrap();
    assert_eq!(report.dead, 1);
    let dead = kit.dead_letters("later").await.unwrap();
    assert!(
        dead[0]
            .error
            .contains("it was sent 7200s ago, over unknown_jobs_retry_for (3600s"),
        "{}",
        dead[0].error
    );
}

#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(
    name = "kit_sync",
    queue = "sync",
    concurrency_key = "account",
    per_key = 1
)]
struct Sync {
    account: u64,
    n: u64,
}

impl Job for Sync {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Runs>>()?.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Keyed jobs waiting for their key's place are still in their queue:
/// `enqueued` and `assert_enqueued` left them out.
#[tokio::test(start_paused = true)]
async fn keyed_jobs_waiting_for_their_key_are_enqueued_too() {
    let (kit, runs) = kit();
    let client = kit.client();
    for (account, n) in [(1, 1), (1, 2), (2, 3)] {
        client.enqueue(&Sync { account, n }).await.unwrap();
    }
    let mut seen: Vec<u64> = kit.enqueued::<Sync>().iter().map(|s| s.n).collect();
    seen.sort_unstable();
    assert_eq!(seen, [1, 2, 3]);
    kit.assert_enqueued(&Sync { account: 1, n: 2 });
    assert_eq!(kit.scheduled::<Sync>().len(), 3);
    let report = kit.run_until_idle().await.unwrap();
    assert_eq!(report.processed, 3, "{report:?}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 3);
    assert!(kit.enqueued::<Sync>().is_empty());
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "kit_stamp", queue = "stamps")]
struct Stamp;

/// What runs' contexts said: their ids and enqueue times.
type Seen = std::sync::Mutex<Vec<(redjob::JobId, std::time::SystemTime)>>;

impl Job for Stamp {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Seen>>()?
            .lock()
            .unwrap()
            .push((ctx.id(), ctx.enqueued_at()));
        Ok(())
    }
}

/// The inline client's context and id take their time from the kit's clock,
/// as a stored job's do: it used the wall clock.
#[tokio::test(start_paused = true)]
async fn the_inline_client_stamps_its_runs_with_the_kits_clock() {
    let at = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let seen = Arc::new(Seen::default());
    let kit = TestKit::starting_at(at).data(seen.clone());
    kit.client().enqueue(&Stamp).await.unwrap();
    kit.run_until_idle().await.unwrap();
    let id = kit.inline_client().enqueue(&Stamp).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    // the stored run and the inline one, a paused clock apart: the same time
    assert_eq!(seen[0].1, at);
    assert_eq!(seen[1], (id, at), "inline run saw {:?}", seen[1]);
    assert_eq!(id.sent_at(), Some(at));
}
/// The last run's cancellation token.
type Token = std::sync::Mutex<Option<tokio_util::sync::CancellationToken>>;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "kit_slow", queue = "slow", timeout = "1s", max_attempts = 1)]
struct Slow;

impl Job for Slow {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let token = ctx.cancellation().clone();
        ctx.data::<Arc<Token>>()?.lock().unwrap().replace(token);
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(())
    }
}

/// The inline client applies the job's timeout as a worker does: the run
/// fails with the worker's text and its token is cancelled. It ran on.
#[tokio::test(start_paused = true)]
async fn the_inline_client_applies_the_jobs_timeout() {
    let token = Arc::new(Token::default());
    let kit = TestKit::new().data(token.clone());
    kit.client().enqueue(&Slow).await.unwrap();
    let report = kit.run_until_idle().await.unwrap();
    assert_eq!(report.dead, 1, "{report:?}");
    let worker = kit.dead_letters("slow").await.unwrap()[0].error.clone();
    let stored = token.lock().unwrap().take().unwrap();
    assert!(stored.is_cancelled());
    let started = tokio::time::Instant::now();
    match kit.inline_client().enqueue(&Slow).await {
        Err(Error::JobFailed { name, error }) => {
            assert_eq!(name, "kit_slow");
            assert_eq!(error, "timed out after 1s");
            assert!(worker.ends_with(&error), "worker: {worker}");
        }
        other => panic!("expected JobFailed, got {other:?}"),
    }
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    let inline = token.lock().unwrap().take().unwrap();
    assert!(inline.is_cancelled(), "the inline run's token");
}

/// `enqueued` and `scheduled` list the jobs oldest first, as documented:
/// in the order they were enqueued, whatever their queue, due time or
/// priority. They came grouped by queue name, then by due time.
#[tokio::test(start_paused = true)]
async fn enqueued_lists_jobs_in_the_order_they_were_enqueued() {
    use redjob::client::EnqueueOptions;
    let (kit, _) = kit();
    let client = kit.client();
    let step = || tokio::time::advance(Duration::from_millis(5));
    client
        .enqueue_in(&Reminder { order: 1 }, Duration::from_secs(60))
        .await
        .unwrap();
    step().await;
    let to = |q: &str| EnqueueOptions::new().queue(q);
    client
        .enqueue_with(&Reminder { order: 2 }, to("zz-last"))
        .await
        .unwrap();
    step().await;
    client.enqueue(&Reminder { order: 3 }).await.unwrap();
    step().await;
    client
        .enqueue_with(&Reminder { order: 4 }, to("aa-first"))
        .await
        .unwrap();
    // the same microsecond, at a higher priority
    let urgent = EnqueueOptions::new().priority(5);
    client
        .enqueue_with(&Reminder { order: 5 }, urgent)
        .await
        .unwrap();
    let order: Vec<u64> = kit.enqueued::<Reminder>().iter().map(|r| r.order).collect();
    assert_eq!(order, [1, 2, 3, 4, 5]);
    let queues: Vec<String> = kit
        .scheduled::<Reminder>()
        .into_iter()
        .map(|e| e.queue)
        .collect();
    assert_eq!(queues, ["mail", "zz-last", "mail", "aa-first", "mail"]);
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "kit_rate_limited", queue = "limited")]
struct RateLimited;

impl Job for RateLimited {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.data::<Arc<Runs>>()?.0.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(JobError::rate_limited(Duration::from_secs(60)));
        }
        Ok(())
    }
}

/// A run a handler's rate limit sent back to wait is counted in the run's
/// report: it was in none of its counts (no job processed, retried or dead).
#[tokio::test(start_paused = true)]
async fn a_rate_limited_run_is_counted_in_the_report() {
    let (kit, runs) = kit();
    kit.client().enqueue(&RateLimited).await.unwrap();
    let report = kit.run_until_idle().await.unwrap();
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);
    assert_eq!(report.throttled, 1, "{report:?}");
    assert_eq!((report.processed, report.retried, report.dead), (0, 0, 0));
    let report = kit.advance(Duration::from_secs(60)).await.unwrap();
    assert_eq!((report.processed, report.throttled), (1, 0), "{report:?}");
}

#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(name = "kit_order_child", queue = "kit_order_c")]
struct OrderChild;

impl Job for OrderChild {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(name = "kit_order_step", queue = "kit_order_p")]
struct OrderStep {
    n: u64,
}

impl Job for OrderStep {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A flow's parent (and its batch) take their ids from the kit's clock, as
/// every other job does: listed in the order they were enqueued, sent when
/// the kit's clock says.
#[tokio::test]
async fn a_flows_parent_is_stamped_with_the_kits_clock_and_listed_in_order() {
    let y2001 = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(978_307_200);
    let kit = TestKit::starting_at(y2001);
    kit.backend()
        .create_queue("kit_order_p", Default::default())
        .await
        .unwrap();
    redjob::ops::Admin::pause(kit.backend(), "kit_order_p")
        .await
        .unwrap();
    kit.client().enqueue(&OrderStep { n: 1 }).await.unwrap();
    kit.client()
        .enqueue_flow(redjob::client::Flow::new(&OrderStep { n: 2 }).child(&OrderChild))
        .await
        .unwrap();
    kit.run_until_idle().await.unwrap();
    kit.client().enqueue(&OrderStep { n: 3 }).await.unwrap();
    let listed = kit.scheduled::<OrderStep>();
    let order: Vec<u64> = listed.iter().map(|e| e.job.n).collect();
    assert_eq!(order, [1, 2, 3], "oldest first");
    for e in &listed {
        let sent = e.id.sent_at().unwrap();
        assert!(
            sent.duration_since(y2001).unwrap() < Duration::from_secs(3600),
            "{} sent at {sent:?}",
            e.job.n
        );
    }
}

/// A job with a float argument.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "scale", queue = "floats")]
struct Scale {
    factor: f64,
}

impl Job for Scale {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// An event with a float.
#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "reading", topic = "readings")]
struct Reading {
    celsius: f32,
}

/// A job, an event or an envelope holding a NaN or infinite float is refused
/// at the send with the reason, and a finite one goes through. The old code
/// took it: serde_json writes such a float as `null`, so the enqueue
/// succeeded and every worker then dead-lettered the job ("invalid type:
/// null, expected f64"), and `encode` wrote an envelope `decode` refuses.
#[tokio::test]
async fn a_job_with_a_nan_float_is_refused_at_enqueue_not_dead_lettered_later() {
    let kit = TestKit::new().subscribe("readings_sub", |_: Reading, _| async { Ok(()) });
    let client = kit.client();
    for factor in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        match client.enqueue(&Scale { factor }).await {
            Err(Error::Decode(e)) => assert!(e.to_string().contains("JSON has no such number")),
            other => panic!("enqueue of {factor}: {other:?}"),
        }
        assert!(redjob::job::encode(&Scale { factor }).is_err());
    }
    assert!(matches!(
        client.publish(&Reading { celsius: f32::NAN }).await,
        Err(Error::Decode(_))
    ));
    client.enqueue(&Scale { factor: 1.5 }).await.unwrap();
    client.publish(&Reading { celsius: -4.0 }).await.unwrap();
    let report = kit.run_until_idle().await.unwrap();
    assert_eq!(
        (report.processed, report.dead, report.events),
        (1, 0, 1),
        "{:?}",
        kit.dead_letters("floats").await.unwrap()
    );
}

/// A job returning a float.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "ratio", queue = "floats", output = "f64", max_attempts = 3)]
struct Ratio {
    a: f64,
    b: f64,
}

impl Job for Ratio {
    async fn perform(&self, _: &JobContext) -> Result<f64, JobError> {
        Ok(self.a / self.b)
    }
}

/// A handler's NaN result does not encode, so the job is dead-lettered with
/// the reason at once (as a result too large is; reading its result says it
/// failed), and a finite one is read back. The old code stored the NaN as `null`: the job counted as succeeded
/// and reading its result failed with a decode error on every read.
#[tokio::test]
async fn a_nan_result_is_refused_when_stored_not_unreadable_later() {
    let kit = TestKit::new();
    let client = kit.client();
    let nan = client.enqueue(&Ratio { a: 0.0, b: 0.0 }).await.unwrap();
    let half = client.enqueue(&Ratio { a: 1.0, b: 2.0 }).await.unwrap();
    let report = kit.run_until_idle().await.unwrap();
    assert_eq!((report.processed, report.dead), (1, 1), "{report:?}");
    let dead = kit.dead_letters("floats").await.unwrap();
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].error.contains("its result could not be encoded") && dead[0].error.contains("NaN"),
        "{}",
        dead[0].error
    );
    assert!(matches!(
        client.result::<Ratio>(&nan).await,
        Err(Error::JobFailed { .. })
    ));
    assert_eq!(client.result::<Ratio>(&half).await.unwrap(), Some(0.5));
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "kit_boom", queue = "boom", max_attempts = 1)]
struct Boom;

impl Job for Boom {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        panic!("the ledger is gone")
    }
}

/// The inline client returns a handler's panic as its failure, with the text
/// a worker records for it. The panic reached the caller instead.
#[tokio::test]
async fn the_inline_client_returns_a_handlers_panic_as_its_failure() {
    let kit = TestKit::new();
    kit.client().enqueue(&Boom).await.unwrap();
    let report = kit.run_until_idle().await.unwrap();
    assert_eq!(report.dead, 1, "{report:?}");
    let worker = kit.dead_letters("boom").await.unwrap()[0].error.clone();
    let inline = kit.inline_client();
    let called = tokio::spawn(async move { inline.enqueue(&Boom).await }).await;
    match called {
        Ok(Err(Error::JobFailed { name, error })) => {
            assert_eq!(name, "kit_boom");
            assert_eq!(error, "handler panicked: the ledger is gone");
            assert!(worker.ends_with(&error), "worker: {worker}");
        }
        Ok(other) => panic!("expected JobFailed, got {other:?}"),
        Err(e) => panic!("the handler's panic reached the caller: {e}"),
    }
}
