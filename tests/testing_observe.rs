//! What a test sees of the kit's runs: hooks, metrics, and a readable `Debug`
//! for every kit type.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redjob::ops::Schedule;
use redjob::testing::TestKit;
use redjob::topic::{Event, EventContext};
use redjob::worker::{CancelReason, Hooks, JobRun};
use redjob::{Job, JobContext, JobError, RetryPolicy};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(
    name = "kit-observed",
    queue = "observed",
    max_attempts = 2,
    backoff = "5s"
)]
struct Observed {
    fail: u32,
}

impl Job for Observed {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.attempt() <= self.fail {
            return Err(JobError::retry(format!("attempt {} fails", ctx.attempt())));
        }
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Event, Debug)]
#[event(name = "kit-pinged", topic = "kit-pings", max_attempts = 1)]
struct Pinged {
    ok: bool,
}

/// Every hook call, as a line.
#[derive(Default)]
struct Calls(Mutex<Vec<String>>);

impl Hooks for Calls {
    fn started(&self, run: &JobRun<'_>) {
        self.push(format!("started {} #{}", run.job, run.attempt));
    }
    fn succeeded(&self, run: &JobRun<'_>, _: Duration) {
        self.push(format!("succeeded {} #{}", run.job, run.attempt));
    }
    fn retried(&self, run: &JobRun<'_>, _: Duration, error: &str, retry_in: Duration) {
        self.push(format!(
            "retried {} #{}: {error} in {retry_in:?}",
            run.job, run.attempt
        ));
    }
    fn dead_lettered(&self, run: &JobRun<'_>, _: Duration, error: &str) {
        self.push(format!("dead {} #{}: {error}", run.job, run.attempt));
    }
    fn cancelled(&self, run: &JobRun<'_>, _: Duration, why: CancelReason) {
        self.push(format!(
            "cancelled {} #{}: {}",
            run.job,
            run.attempt,
            why.as_str()
        ));
    }
    fn throttled(&self, run: &JobRun<'_>, _: Duration, retry_in: Duration) {
        self.push(format!(
            "throttled {} #{} for {retry_in:?}",
            run.job, run.attempt
        ));
    }
}

/// Throttled by its dependency for 30 s on its first run (`ctx.attempt()`
/// stays 1: a throttle counts no attempt, so the kit's data keeps the count).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "kit-throttled", queue = "throttled-kit")]
struct Throttled;

impl Job for Throttled {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let runs = ctx.data::<Arc<std::sync::atomic::AtomicU32>>()?;
        if runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Err(JobError::rate_limited(Duration::from_secs(30)));
        }
        Ok(())
    }
}

impl Calls {
    fn push(&self, s: String) {
        self.0.lock().unwrap().push(s);
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn kit() -> TestKit {
    TestKit::new().retry(
        RetryPolicy::exponential(Duration::from_secs(60))
            .unwrap()
            .jitter(false),
    )
}

#[tokio::test]
async fn hooks_hear_every_run_of_the_kits_workers() {
    let calls = Arc::new(Calls::default());
    let kit = kit().hooks(calls.clone());
    kit.client().enqueue(&Observed { fail: 0 }).await.unwrap();
    kit.client().enqueue(&Observed { fail: 1 }).await.unwrap();
    kit.run_until_idle().await.unwrap();
    let mut got = calls.take();
    got.sort();
    assert_eq!(
        got,
        [
            "retried kit-observed #1: attempt 1 fails in 5s",
            "started kit-observed #1",
            "started kit-observed #1",
            "succeeded kit-observed #1",
        ]
    );
    kit.advance(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        calls.take(),
        ["started kit-observed #2", "succeeded kit-observed #2"]
    );
    kit.client().enqueue(&Observed { fail: 2 }).await.unwrap();
    // its first attempt runs inside the advance, a little after it began by
    // the kit's clock (which moves with real time): its retry, 5 s after that
    // attempt, is due within 6 s
    kit.advance(Duration::from_secs(6)).await.unwrap();
    assert_eq!(
        calls.take().last().unwrap(),
        "dead kit-observed #2: failed 2 of 2 attempts: attempt 2 fails"
    );
}

#[tokio::test]
async fn metrics_of_jobs_events_and_queues_are_recorded_by_the_kit() {
    let kit = kit()
        .periodic(
            Schedule::every(Duration::from_secs(60)).unwrap(),
            Observed { fail: 0 },
        )
        .subscribe("pong", |e: Pinged, _: EventContext| async move {
            if e.ok {
                Ok(())
            } else {
                Err(JobError::retry("not ok"))
            }
        });
    let finished = |outcome: &str| {
        kit.counter(
            "redjob_jobs_finished_total",
            &[
                ("queue", "observed"),
                ("job", "kit-observed"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(finished("succeeded"), 0);
    kit.client().enqueue(&Observed { fail: 1 }).await.unwrap();
    let run = kit.advance(Duration::from_secs(180)).await.unwrap();
    // three ticks and one job that succeeded on its retry
    assert_eq!((run.ticks, run.processed, run.retried), (3, 4, 1));
    assert_eq!(finished("succeeded"), 4);
    assert_eq!(finished("retried"), 1);
    assert_eq!(finished("dead"), 0);
    assert_eq!(
        kit.counter("redjob_jobs_started_total", &[("job", "kit-observed")]),
        5
    );
    assert_eq!(
        kit.histogram("redjob_job_run_seconds", &[("job", "kit-observed")])
            .len(),
        5
    );
    let waits = kit.histogram("redjob_job_wait_seconds", &[("queue", "observed")]);
    assert_eq!(waits.len(), 5);
    // each ran when it came due: the kit stops at every due time
    assert!(waits.iter().all(|w| *w < 1.0), "{waits:?}");
    assert_eq!(
        kit.gauge("redjob_queue_paused", &[("queue", "observed")]),
        Some(0.0)
    );
    assert_eq!(
        kit.gauge("redjob_queue_paused", &[("queue", "nowhere")]),
        None
    );

    kit.publish(&Pinged { ok: true }).await.unwrap();
    kit.publish(&Pinged { ok: false }).await.unwrap();
    let run = kit.run_until_idle().await.unwrap();
    assert_eq!((run.events, run.events_dead), (1, 1));
    let events = |outcome: &str| {
        kit.counter(
            "redjob_events_finished_total",
            &[
                ("topic", "kit-pings"),
                ("subscriber", "pong"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!((events("succeeded"), events("dead")), (1, 1));
    assert_eq!(kit.counter("redjob_events_started_total", &[]), 2);
    // a name nothing emitted
    assert_eq!(kit.counter("redjob_nothing_total", &[]), 0);
}

#[tokio::test]
async fn jobs_held_back_by_a_limit_are_counted_by_limit() {
    use redjob::ops::{Admin, Concurrency, QueueSettings};
    use redjob::queue::Queues;
    let kit = kit();
    kit.backend()
        .create_queue("observed", Default::default())
        .await
        .unwrap();
    kit.backend()
        .set_settings(
            "observed",
            &QueueSettings::concurrency(Concurrency::global(1)),
        )
        .await
        .unwrap();
    for _ in 0..3 {
        kit.client().enqueue(&Observed { fail: 0 }).await.unwrap();
    }
    let run = kit.run_until_idle().await.unwrap();
    assert_eq!(run.processed, 3);
    let held = |limit: &str| {
        kit.counter(
            "redjob_jobs_held_total",
            &[("queue", "observed"), ("limit", limit)],
        )
    };
    // the first fetch leased one and held back the two others due
    assert!(held("concurrency") >= 2, "{}", held("concurrency"));
    assert_eq!(held("rate"), 0);
}

#[tokio::test]
async fn a_throttle_is_heard_by_hooks_and_counted_by_metrics() {
    let calls = Arc::new(Calls::default());
    let kit = kit()
        .hooks(calls.clone())
        .data(Arc::new(std::sync::atomic::AtomicU32::new(0)));
    kit.client().enqueue(&Throttled).await.unwrap();
    kit.run_until_idle().await.unwrap();
    assert_eq!(
        calls.take(),
        [
            "started kit-throttled #1",
            "throttled kit-throttled #1 for 30s"
        ]
    );
    // a job sent now is due, but its queue is throttled: the kit is idle
    kit.client().enqueue(&Throttled).await.unwrap();
    let run = kit.run_until_idle().await.unwrap();
    assert_eq!(run.processed, 0);
    assert!(calls.take().is_empty());
    // the queue waits out the throttle, then both run, each at attempt 1
    kit.advance(Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        calls.take(),
        [
            "started kit-throttled #1",
            "succeeded kit-throttled #1",
            "started kit-throttled #1",
            "succeeded kit-throttled #1"
        ]
    );
    let finished = |outcome: &str| {
        kit.counter(
            "redjob_jobs_finished_total",
            &[("job", "kit-throttled"), ("outcome", outcome)],
        )
    };
    assert_eq!(
        (
            finished("throttled"),
            finished("succeeded"),
            finished("retried")
        ),
        (1, 2, 0)
    );
}

#[tokio::test]
async fn every_kit_type_prints_readably() {
    let kit = kit()
        .periodic(
            Schedule::every(Duration::from_secs(60)).unwrap(),
            Observed { fail: 0 },
        )
        .subscribe("pong", |_: Pinged, _: EventContext| async { Ok(()) });
    kit.client()
        .enqueue_in(&Observed { fail: 9 }, Duration::from_secs(30))
        .await
        .unwrap();
    let debug = format!("{kit:?}");
    for part in [
        "TestKit { now: 20",
        "Z, jobs_waiting: {\"observed\": 1}",
        "subscribers: [\"kit-pings/pong\"]",
        "periodic: [\"kit-observed (every 60s) on \\\"observed\\\"\"]",
        "hooks: 0",
        "wait_limit: 10s",
    ] {
        assert!(debug.contains(part), "{part:?} not in {debug}");
    }

    let clock = format!("{:?}", kit.clock());
    assert!(
        clock.starts_with("Clock { now: 20") && clock.ends_with("Z, frozen: false }"),
        "{clock}"
    );

    let waiting = kit.scheduled::<Observed>();
    let debug = format!("{:?}", waiting[0]);
    assert!(
        debug.starts_with("Enqueued { job: Observed { fail: 9 }, id: ")
            && debug.contains(", queue: \"observed\", due: 20")
            && debug.ends_with("Z }"),
        "{debug}"
    );

    // one tick in any 60 s; the delayed job at 30 s and its retry at 35 s
    let run = kit.advance(Duration::from_secs(60)).await.unwrap();
    let debug = format!("{run:?}");
    // the tick's job ran; the delayed one failed, was retried and died
    assert_eq!(
        debug,
        "RunReport { processed: 1, retried: 1, dead: 1, throttled: 0, ticks: 1, events: 0, events_retried: 0, events_dead: 0 }"
    );

    // the dead letter's body is text, not a list of bytes
    let dead = kit.dead_letters("observed").await.unwrap();
    assert_eq!(dead.len(), 1);
    let debug = format!("{:?}", dead[0]);
    assert!(
        debug.contains(r#"body: "{\"type\":\"kit-observed\",\"args\":{\"fail\":9}}""#),
        "{debug}"
    );
    assert!(
        debug.contains("error: \"failed 2 of 2 attempts: attempt 2 fails\""),
        "{debug}"
    );
    assert!(
        debug.contains(", died_at: 20") && debug.ends_with("Z }"),
        "{debug}"
    );
    assert!(!debug.contains("[123, 34"), "{debug}");
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "obs_charge")]
struct Charge {
    plan: String,
}

impl Job for Charge {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        metrics::histogram!("app_charge_ms").record(12.0);
        tokio::task::yield_now().await;
        // after an await too: each poll of the handler records to the kit
        metrics::counter!("app_charges_total", "plan" => self.plan.clone()).increment(1);
        Ok(())
    }
}

#[tokio::test]
async fn a_handlers_own_metrics_are_recorded_by_the_kit() {
    let kit = kit().subscribe("pong", |_: Pinged, _: EventContext| async {
        metrics::counter!("app_pings_total").increment(1);
        Ok(())
    });
    kit.publish(&Pinged { ok: true }).await.unwrap();
    for plan in ["pro", "pro", "free"] {
        kit.client()
            .enqueue(&Charge { plan: plan.into() })
            .await
            .unwrap();
    }
    assert_eq!(kit.run_until_idle().await.unwrap().processed, 3);
    assert_eq!(kit.counter("app_charges_total", &[("plan", "pro")]), 2);
    assert_eq!(kit.counter("app_charges_total", &[]), 3);
    assert_eq!(kit.histogram("app_charge_ms", &[]), [12.0, 12.0, 12.0]);
    assert_eq!(
        kit.counter("app_pings_total", &[]),
        1,
        "an event handler's too"
    );
}
