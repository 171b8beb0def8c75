//! Periodic schedules in the test kit: ticks under the kit's clock, in order,
//! each run at its time; `Missed` only after a downtime.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redjob::backend::memory::Clock;
use redjob::ops::{Admin, Missed, Schedule};
use redjob::testing::TestKit;
use redjob::worker::Periodic;
use redjob::{Error, Job, JobContext, JobError, RetryPolicy};
use serde::{Deserialize, Serialize};

/// When each run started, by the kit's clock (Unix ms), and what it was.
#[derive(Default)]
struct Log(Mutex<Vec<(u64, String)>>);

impl Log {
    fn push(&self, ctx: &JobContext, what: &str) -> Result<(), JobError> {
        let now = ctx.data::<Clock>()?.now_ms();
        self.0.lock().unwrap().push((now, what.to_string()));
        Ok(())
    }

    fn take(&self) -> Vec<(u64, String)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "kit-minutely", queue = "ticks")]
struct Minutely;

impl Job for Minutely {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Log>>()?.push(ctx, "minutely")
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "kit-quarterly", queue = "ticks")]
struct Quarterly;

impl Job for Quarterly {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Log>>()?.push(ctx, "quarterly")
    }
}

/// Fails its first run, then succeeds: its retry lands between two ticks.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "kit-flaky-tick", queue = "ticks", backoff = "90s")]
struct FlakyTick;

impl Job for FlakyTick {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Log>>()?.push(ctx, "flaky")?;
        if ctx.attempt() == 1 {
            return Err(JobError::retry("first run fails"));
        }
        Ok(())
    }
}

fn kit() -> (TestKit, Arc<Log>) {
    let log = Arc::new(Log::default());
    // no jitter: a retry comes exactly its backoff later
    let retry = RetryPolicy::exponential(Duration::from_secs(3600))
        .unwrap()
        .jitter(false);
    let kit = TestKit::new().retry(retry);
    let clock = kit.clock().clone();
    (kit.data(log.clone()).data(clock), log)
}

/// The next whole minute after `ms`.
fn next_minute(ms: u64) -> u64 {
    (ms / 60_000 + 1) * 60_000
}

/// Whether a run at `ran` ran at `due` (the clock runs in real time between
/// the kit's steps: allow a second of it).
fn at(ran: u64, due: u64) -> bool {
    (due..due + 1000).contains(&ran)
}

#[tokio::test]
async fn an_hour_of_an_every_minute_schedule_runs_60_ticks_in_order_each_at_its_time() {
    let (kit, log) = kit();
    let kit = kit.periodic(Schedule::cron("* * * * *").unwrap(), Minutely);
    let start = kit.clock().now_ms();
    let real = Instant::now();
    let run = kit.advance(Duration::from_secs(3600)).await.unwrap();
    assert_eq!((run.ticks, run.processed, run.retried), (60, 60, 0));
    let runs = log.take();
    let first = next_minute(start);
    assert_eq!(runs.len(), 60);
    // each tick's job ran at the tick, before the next tick was enqueued
    for (i, (ran, what)) in runs.iter().enumerate() {
        assert_eq!(what, "minutely");
        assert!(
            at(*ran, first + i as u64 * 60_000),
            "run {i} at {ran}: {runs:?}"
        );
    }
    assert!(
        real.elapsed() < Duration::from_secs(1),
        "took {:?}",
        real.elapsed()
    );
    // nothing is left over, and nothing more ticks without time passing
    assert_eq!(kit.run_until_idle().await.unwrap().ticks, 0);
}

#[tokio::test(start_paused = true)]
async fn two_schedules_and_a_retry_interleave_by_time() {
    let (kit, log) = kit();
    let kit = kit
        .periodic(Schedule::cron("*/15 * * * *").unwrap(), Quarterly)
        .periodic_job(
            Periodic::new(Schedule::cron("*/30 * * * *").unwrap(), FlakyTick).name("flaky"),
        );
    let start = kit.clock().now_ms();
    let run = kit.advance(Duration::from_secs(3600)).await.unwrap();
    assert_eq!(run.ticks, 4 + 2);
    let runs = log.take();
    let times: Vec<u64> = runs.iter().map(|r| r.0).collect();
    let mut sorted = times.clone();
    sorted.sort_unstable();
    assert_eq!(times, sorted, "runs out of time order: {runs:?}");
    assert!(times.iter().all(|t| *t > start && *t <= start + 3_600_000));
    assert_eq!(runs.iter().filter(|r| r.1 == "quarterly").count(), 4);
    // each quarter-hour tick ran at its quarter hour
    assert!(
        runs.iter()
            .filter(|r| r.1 == "quarterly")
            .all(|r| at(r.0, r.0 / 900_000 * 900_000)),
        "{runs:?}"
    );
    // every flaky tick's first run failed; its retry (90 s) ran 90 s later,
    // unless the hour ended first
    let flaky: Vec<u64> = runs
        .iter()
        .filter(|r| r.1 == "flaky")
        .map(|r| r.0)
        .collect();
    assert!(flaky.len() >= 3, "{runs:?}");
    assert!(at(flaky[0], flaky[0] / 1_800_000 * 1_800_000), "{flaky:?}");
    assert!(at(flaky[1], flaky[0] + 90_000), "{flaky:?}");
    assert_eq!(run.retried, 2);
}

#[tokio::test(start_paused = true)]
async fn missed_applies_only_to_downtime() {
    let (kit, log) = kit();
    let kit = kit
        .periodic_job(
            Periodic::new(Schedule::every(Duration::from_secs(60)).unwrap(), Minutely)
                .name("last")
                .missed(Missed::RunLast),
        )
        .periodic_job(
            Periodic::new(Schedule::every(Duration::from_secs(60)).unwrap(), Quarterly)
                .name("skip"),
        );
    // a downtime before any tick was recorded: RunLast has nothing to catch up
    assert_eq!(kit.downtime(Duration::from_secs(600)).await.unwrap(), 0);
    assert_eq!(kit.run_until_idle().await.unwrap().processed, 0);
    // running through 10 minutes: 10 ticks each, no catch-up
    let run = kit.advance(Duration::from_secs(600)).await.unwrap();
    assert_eq!((run.ticks, run.processed), (20, 20));
    log.take();
    // down for an hour: RunLast enqueues its last missed tick once, Skip none
    assert_eq!(kit.downtime(Duration::from_secs(3600)).await.unwrap(), 1);
    let run = kit.run_until_idle().await.unwrap();
    assert_eq!((run.ticks, run.processed), (0, 1));
    assert_eq!(
        log.take().iter().map(|r| r.1.as_str()).collect::<Vec<_>>(),
        ["minutely"]
    );
    // and the schedules go on from now
    let run = kit.advance(Duration::from_secs(120)).await.unwrap();
    assert_eq!((run.ticks, run.processed), (4, 4));
}

#[tokio::test(start_paused = true)]
async fn a_paused_schedule_skips_its_ticks_until_resumed() {
    let (kit, log) = kit();
    let kit = kit.periodic(Schedule::every(Duration::from_secs(60)).unwrap(), Minutely);
    assert_eq!(
        kit.advance(Duration::from_secs(120)).await.unwrap().ticks,
        2
    );
    assert!(
        kit.backend()
            .pause_schedule("ticks", "kit-minutely")
            .await
            .unwrap()
    );
    let run = kit.advance(Duration::from_secs(600)).await.unwrap();
    assert_eq!((run.ticks, run.processed), (0, 0));
    kit.backend()
        .resume_schedule("ticks", "kit-minutely")
        .await
        .unwrap();
    let run = kit.advance(Duration::from_secs(180)).await.unwrap();
    assert_eq!((run.ticks, run.processed), (3, 3));
    assert_eq!(log.take().len(), 5);
}

/// A pause of the schedule's queue does not stop its ticks (a tick is an
/// enqueue, and a paused queue takes enqueues in): they wait, one a tick,
/// and run after the resume, each once (docs/operating.md, periodic jobs).
#[tokio::test(start_paused = true)]
async fn a_paused_queue_keeps_its_ticks_for_the_resume() {
    let (kit, log) = kit();
    let kit = kit.periodic(Schedule::every(Duration::from_secs(60)).unwrap(), Minutely);
    redjob::queue::Queues::create_queue(kit.backend(), "ticks", Default::default())
        .await
        .unwrap();
    kit.backend().pause("ticks").await.unwrap();
    let run = kit.advance(Duration::from_secs(300)).await.unwrap();
    assert_eq!((run.ticks, run.processed), (5, 0), "ticked, nothing ran");
    assert!(log.take().is_empty());
    kit.backend().resume("ticks").await.unwrap();
    let run = kit.run_until_idle().await.unwrap();
    assert_eq!((run.ticks, run.processed), (0, 5), "the waiting ticks ran");
    assert_eq!(log.take().len(), 5);
}

#[tokio::test]
async fn a_periodic_job_a_worker_would_refuse_is_refused() {
    let every = || Schedule::every(Duration::from_secs(60)).unwrap();
    let kit = TestKit::new()
        .periodic(every(), Minutely)
        .periodic(every(), Minutely);
    match kit.run_until_idle().await {
        Err(Error::InvalidValue { what, reason }) => {
            assert_eq!(what, "periodic");
            assert!(reason.contains("kit-minutely"), "{reason}");
        }
        other => panic!("expected InvalidValue, got {other:?}"),
    }
    let kit = TestKit::new().periodic_job(Periodic::new(every(), Minutely).queue("bad queue!"));
    assert!(matches!(
        kit.advance(Duration::from_secs(60)).await,
        Err(Error::InvalidValue { .. })
    ));
}

/// A tick's job that sleeps longer than the schedule's interval (under the
/// paused clock, its sleep moves the kit's clock).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "kit-slow-tick", queue = "slow-ticks")]
struct SlowTick;

impl Job for SlowTick {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Log>>()?.push(ctx, "slow")?;
        tokio::time::sleep(Duration::from_secs(61)).await;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn ticks_that_came_due_while_a_handler_slept_run_one_by_one_not_at_the_end() {
    let (kit, log) = kit();
    let kit = kit.periodic(Schedule::every(Duration::from_secs(60)).unwrap(), SlowTick);
    kit.advance(Duration::from_secs(600)).await.unwrap();
    let runs: Vec<u64> = log.take().iter().map(|r| r.0).collect();
    // each run starts when the one before ended (61 s later), not all at
    // once when the 600 s are over
    assert!(runs.len() >= 9, "{runs:?}");
    for pair in runs.windows(2) {
        assert!(pair[1] >= pair[0] + 61_000, "{runs:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_clock_moved_past_many_ticks_enqueues_the_first_and_goes_on_from_now() {
    let (kit, _log) = kit();
    let kit = kit.periodic(Schedule::every(Duration::from_secs(1)).unwrap(), Minutely);
    assert_eq!(kit.advance(Duration::from_secs(3)).await.unwrap().ticks, 3);
    // moved by hand, past 3600 ticks: as a worker that finds itself late
    kit.clock().advance(Duration::from_secs(3600));
    let run = kit.run_until_idle().await.unwrap();
    assert_eq!((run.ticks, run.processed), (1, 1));
    assert_eq!(kit.advance(Duration::from_secs(2)).await.unwrap().ticks, 2);
}

/// Enqueues itself again 1 ms later, for ever.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "kit-forever", queue = "forever")]
struct Forever;

impl Job for Forever {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let client = ctx.data::<redjob::Client>()?;
        client
            .enqueue_in(&Forever, Duration::from_millis(1))
            .await?;
        Ok(())
    }
}

#[tokio::test]
async fn an_advance_that_never_gets_through_fails_after_the_wait_limit() {
    let kit = TestKit::new().wait_limit(Duration::from_millis(300));
    let client = kit.client();
    let kit = kit.data(client);
    kit.client().enqueue(&Forever).await.unwrap();
    let real = Instant::now();
    match kit.advance(Duration::from_secs(3600)).await {
        Err(Error::NotIdle { pending, .. }) => {
            assert!(
                pending[0].starts_with("advance went through"),
                "{pending:?}"
            );
        }
        other => panic!("expected NotIdle, got {other:?}"),
    }
    assert!(
        real.elapsed() < Duration::from_secs(5),
        "{:?}",
        real.elapsed()
    );
}

/// An advance that is merely long (a week of an every-minute schedule:
/// 10,080 ticks) says it ran out of its wait_limit going through the
/// schedule's ticks and what to do about it; it blamed a handler "that
/// keeps enqueueing work due soon". One that a handler keeps going still
/// names the handler.
#[tokio::test(start_paused = true)]
async fn a_long_advance_through_ticks_suggests_a_wait_limit_or_downtime() {
    let (kit, _) = kit();
    let kit = kit
        .wait_limit(Duration::from_millis(200))
        .periodic(Schedule::cron("* * * * *").unwrap(), Minutely);
    let err = kit
        .advance(Duration::from_secs(7 * 86_400))
        .await
        .unwrap_err();
    let Error::NotIdle { pending, .. } = &err else {
        panic!("expected NotIdle, got {err:?}");
    };
    let text = &pending[0];
    assert!(text.starts_with("advance went through "), "{text}");
    assert!(text.contains("periodic ticks"), "{text}");
    assert!(text.contains("wait_limit"), "{text}");
    assert!(text.contains("downtime"), "{text}");
    assert!(!text.contains("keeps enqueueing"), "{text}");

    let kit = TestKit::new().wait_limit(Duration::from_millis(200));
    let client = kit.client();
    let kit = kit.data(client);
    kit.client().enqueue(&Forever).await.unwrap();
    let err = kit.advance(Duration::from_secs(3600)).await.unwrap_err();
    let Error::NotIdle { pending, .. } = &err else {
        panic!("expected NotIdle, got {err:?}");
    };
    assert!(pending[0].contains("keeps enqueueing"), "{}", pending[0]);
    assert!(pending[0].contains("wait_limit"), "{}", pending[0]);
}

#[tokio::test]
async fn a_kit_starting_at_a_time_ticks_where_that_time_says() {
    // half a second before a whole minute: a 61 s advance holds two ticks
    let start = std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_579_599_500);
    let log = Arc::new(Log::default());
    let kit = TestKit::starting_at(start);
    let clock = kit.clock().clone();
    let kit = kit
        .data(log.clone())
        .data(clock)
        .periodic(Schedule::cron("* * * * *").unwrap(), Minutely);
    let run = kit.advance(Duration::from_secs(61)).await.unwrap();
    assert_eq!(run.ticks, 2);
    let runs = log.take();
    assert!(at(runs[0].0, 1_764_579_600_000), "{runs:?}");
    assert!(at(runs[1].0, 1_764_579_660_000), "{runs:?}");
}

#[tokio::test]
async fn downtime_refuses_what_a_worker_would_refuse() {
    let every = || Schedule::every(Duration::from_secs(60)).unwrap();
    let kit = TestKit::new()
        .periodic(every(), Minutely)
        .periodic(every(), Minutely);
    assert!(matches!(
        kit.downtime(Duration::from_secs(60)).await,
        Err(Error::InvalidValue { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_cron_tick_missed_is_run_last_when_the_downtime_ends_within_its_second() {
    // day 1, 05:59:59.500 UTC: a daily 06:00 schedule ticks once in a second
    let start = std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_655_199_500);
    let log = Arc::new(Log::default());
    let kit = TestKit::starting_at(start);
    let clock = kit.clock().clone();
    let kit = kit.data(log.clone()).data(clock).periodic_job(
        Periodic::new(Schedule::cron("0 6 * * *").unwrap(), Minutely)
            .name("daily")
            .missed(Missed::RunLast),
    );
    let run = kit.advance(Duration::from_secs(1)).await.unwrap();
    assert_eq!((run.ticks, run.processed), (1, 1));
    log.take();
    // down until day 2, 06:00:00.300: that day's tick was missed
    let down = Duration::from_secs(86_400) - Duration::from_millis(200);
    assert_eq!(kit.downtime(down).await.unwrap(), 1);
    let run = kit.run_until_idle().await.unwrap();
    assert_eq!(run.processed, 1);
    assert_eq!(log.take().len(), 1);
}

/// `scheduled` lists jobs "oldest first: in the order they were enqueued"
/// (docs/testing.md). A tick the kit enqueues late (the clock was moved past
/// it by hand, so the next run enqueues it, as a worker that finds itself
/// late does) is enqueued after a job sent before that run, and is listed
/// after it. The old code sorted by id, and a tick's id carries the tick's
/// time, not its enqueue's: the tick was listed first.
#[tokio::test(start_paused = true)]
async fn a_tick_enqueued_late_is_listed_after_a_job_enqueued_before_it() {
    use redjob::queue::Queues;
    let (kit, _log) = kit();
    let kit = kit.periodic(Schedule::every(Duration::from_secs(60)).unwrap(), Minutely);
    kit.backend()
        .create_queue("ticks", Default::default())
        .await
        .unwrap();
    // paused: what is enqueued stays to be listed
    Admin::pause(kit.backend(), "ticks").await.unwrap();
    kit.clock().advance(Duration::from_secs(90));
    let first = kit.client().enqueue(&Minutely).await.unwrap();
    let run = kit.run_until_idle().await.unwrap();
    assert_eq!(run.ticks, 1, "{run:?}");
    let listed = kit.scheduled::<Minutely>();
    assert_eq!(listed.len(), 2);
    assert_eq!(
        listed[0].id,
        first,
        "the job enqueued first is listed first: {:?}",
        listed.iter().map(|e| (e.id, e.due)).collect::<Vec<_>>()
    );
}

/// A tick whose job is over its queue's maxsize (a 2,000-byte body, a queue
/// of 1,024).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "kit-big-tick", queue = "small-ticks")]
struct BigTick {
    pad: String,
}

impl Job for BigTick {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Log>>()?.push(ctx, "big")
    }
}

/// A worker that cannot enqueue a tick's job (over its queue's maxsize) logs
/// it and skips the tick, and its other schedules tick on (worker/periodic.rs:
/// "cannot enqueue the periodic job; tick skipped"); the kit is to tick "as a
/// worker running all along would". Its `advance` stopped at the first such
/// tick with `MessageTooLarge`, and no schedule ticked past it.
#[tokio::test(start_paused = true)]
async fn a_tick_too_large_for_its_queue_is_skipped_as_a_worker_skips_it() {
    use redjob::queue::{QueueOptions, Queues};
    let (kit, log) = kit();
    let small = QueueOptions {
        maxsize: 1024,
        ..QueueOptions::default()
    };
    kit.backend()
        .create_queue("small-ticks", small)
        .await
        .unwrap();
    let every = || Schedule::every(Duration::from_secs(60)).unwrap();
    let big = BigTick {
        pad: "x".repeat(2000),
    };
    let kit = kit.periodic(every(), big).periodic(every(), Minutely);
    let run = kit.advance(Duration::from_secs(180)).await.unwrap();
    assert_eq!((run.ticks, run.processed), (3, 3));
    let ran: Vec<String> = log.take().into_iter().map(|(_, what)| what).collect();
    assert_eq!(ran, ["minutely"; 3]);
}
