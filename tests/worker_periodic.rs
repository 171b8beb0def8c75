//! Periodic jobs across processes: 3 worker processes tick a 1-second cron
//! schedule for 30 s while one of them is SIGKILLed and restarted mid-way.
//! Every tick is enqueued once: none missed, none doubled. The killed worker
//! leaves the live-worker registry within a few heartbeats; the others leave
//! it when they stop.
//!
//! The worker processes are this test binary again, running the ignored test
//! `periodic_worker_process` with the Redis URL in its environment.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::RedisServer;
use redjob::backend::Backend;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, Schedule};
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "every_second", queue = "p_ticks")]
struct EverySecond;

impl Job for EverySecond {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// The worker process: ticks the schedule (and serves another queue, so the
/// ticks' jobs stay queued for the test to read) until killed or SIGTERMed.
#[test]
#[ignore = "a worker process for three_processes_enqueue_every_tick_once, not a test on its own"]
fn periodic_worker_process() {
    let Ok(url) = std::env::var("REDJOB_PERIODIC_REDIS") else {
        eprintln!("run by three_processes_enqueue_every_tick_once with REDJOB_PERIODIC_REDIS");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = Client::connect(&url).await.unwrap();
        Worker::builder(client.backend())
            .queue("p_other")
            .lease(Duration::from_secs(3))
            .periodic(Schedule::cron("* * * * * *").unwrap(), EverySecond)
            .build()
            .unwrap()
            .run()
            .await
            .unwrap();
    });
}

fn spawn_worker(url: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "periodic_worker_process",
            "--nocapture",
        ])
        .env("REDJOB_PERIODIC_REDIS", url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits (up to `limit`) until the registry lists `n` workers; how long it took.
async fn until_workers(client: &Client, n: usize, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let live = client.workers().await.unwrap().len();
        if live == n {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "{live} workers listed, not {n}, after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_enqueue_every_tick_once() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let backend = client.backend();
    let mut procs: Vec<Child> = (0..3).map(|_| spawn_worker(&url)).collect();
    until_workers(&client, 3, Duration::from_secs(30)).await;
    let from_ms = backend.now_ms().await.unwrap();
    let run = Instant::now();

    tokio::time::sleep(Duration::from_secs(5)).await;
    let listed = client.schedules().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let s = &listed[0];
    assert_eq!(
        (&s.name[..], &s.queue[..], &s.schedule[..], s.workers),
        ("every_second", "p_ticks", "cron * * * * * *", 3)
    );
    let (last, next) = (s.last_ms.unwrap(), s.next_ms.unwrap());
    assert_eq!(next, last + 1000, "{s:?}");

    // SIGKILL one mid-way: it leaves no goodbye, its entry runs out (3 beats of 1 s)
    procs[0].kill().unwrap();
    procs[0].wait().unwrap();
    let gone = until_workers(&client, 2, Duration::from_secs(6)).await;
    eprintln!("killed worker left the registry after {gone:?}");
    procs[0] = spawn_worker(&url);
    until_workers(&client, 3, Duration::from_secs(30)).await;

    let left = Duration::from_secs(16).saturating_sub(run.elapsed());
    tokio::time::sleep(left).await;
    let to_ms = backend.now_ms().await.unwrap();
    for p in &mut procs {
        Command::new("kill")
            .args(["-TERM", &p.id().to_string()])
            .status()
            .unwrap();
    }
    for p in &mut procs {
        p.wait().unwrap();
    }
    assert!(
        client.workers().await.unwrap().is_empty(),
        "stopped workers leave the registry"
    );

    let mut ticks: Vec<u64> = client
        .queues()
        .list("p_ticks", redjob::inspect::JobState::Ready, None, 1000)
        .await
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.id.sent_ms())
        .collect();
    ticks.sort_unstable();
    let n = ticks.len();
    ticks.dedup();
    assert_eq!(ticks.len(), n, "a tick enqueued twice");
    for w in ticks.windows(2) {
        assert_eq!(
            w[1] - w[0],
            1000,
            "a tick missed between {} and {}",
            w[0],
            w[1]
        );
    }
    let (first, last) = (ticks[0], ticks[n - 1]);
    assert!(
        first <= from_ms + 1000 && last + 1000 >= to_ms,
        "ticks {first}..{last} cover {from_ms}..{to_ms}"
    );
    assert!(n >= 15, "{n} ticks in 16 s");
    // the same tick sent twice would make the same id, so count the sends too
    let sent = redjob::queue::Queues::attributes(client.queues(), "p_ticks")
        .await
        .unwrap()
        .totalsent;
    assert_eq!(sent, n as u64, "sends of {n} ticks");
}

/// The ready jobs of "p_ticks": one a tick enqueued.
async fn ticked(client: &Client) -> usize {
    match client
        .queues()
        .list("p_ticks", redjob::inspect::JobState::Ready, None, 1000)
        .await
    {
        Ok(page) => page.jobs.len(),
        // before the first tick made the queue
        Err(redjob::Error::QueueNotFound { .. }) => 0,
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_skip_a_paused_schedule_until_it_is_resumed() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let mut procs: Vec<Child> = (0..2).map(|_| spawn_worker(&url)).collect();
    until_workers(&client, 2, Duration::from_secs(30)).await;
    // ticking: a job a second
    let start = Instant::now();
    while ticked(&client).await < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the schedule ticks"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // paused from the library, acting as someone: both processes skip it
    let ops = client.clone().acting_as("ops alice");
    assert!(ops.pause_schedule("p_ticks", "every_second").await.unwrap());
    // a tick already under way when it was paused may land
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let paused_at = ticked(&client).await;
    let listed = client.schedules().await.unwrap();
    let p = listed[0].paused.as_ref().expect("listed as paused");
    assert_eq!((p.by.as_str(), listed[0].workers), ("ops alice", 2));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        ticked(&client).await,
        paused_at,
        "no tick enqueued while paused"
    );
    // its ticks pass meanwhile: the last one is recent
    let last = client.schedules().await.unwrap()[0].last_ms.unwrap();
    let now = client.backend().now_ms().await.unwrap();
    assert!(
        now - last < 2000,
        "ticks recorded while paused: {last} at {now}"
    );

    // a run now enqueues one, paused or not
    client
        .run_schedule_now("p_ticks", "every_second")
        .await
        .unwrap();
    assert_eq!(ticked(&client).await, paused_at + 1);

    // resumed: ticks come again
    assert!(
        ops.resume_schedule("p_ticks", "every_second")
            .await
            .unwrap()
    );
    assert!(
        !ops.resume_schedule("p_ticks", "every_second")
            .await
            .unwrap()
    );
    let resumed = Instant::now();
    while ticked(&client).await < paused_at + 3 {
        assert!(resumed.elapsed() < Duration::from_secs(10), "ticks again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(client.schedules().await.unwrap()[0].paused.is_none());

    for p in &mut procs {
        Command::new("kill")
            .args(["-TERM", &p.id().to_string()])
            .status()
            .unwrap();
    }
    for p in &mut procs {
        p.wait().unwrap();
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "many_schedules", queue = "p_many")]
struct ManySchedules {
    n: u32,
}

impl Job for ManySchedules {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A worker serving "p_other" with `n` schedules of `ManySchedules` on
/// `every`, named s0, s1, ...
async fn with_schedules(client: &Client, every: Schedule, n: u32) -> common::Running {
    let mut builder = Worker::builder(client.backend())
        .queue("p_other")
        .handle_signals(false);
    for n in 0..n {
        builder = builder.periodic_job(
            redjob::worker::Periodic::new(every.clone(), ManySchedules { n }).name(format!("s{n}")),
        );
    }
    common::start_serving(builder.build().unwrap()).await
}

/// A worker's heartbeat does not carry its schedules once each has ticked:
/// what they are (name, queue, job, schedule, body) is stored once with what
/// the worker serves, shared by every worker of the build, and their next
/// ticks are in the queue's periodic hash. Audit W2 measured 83 KB a full
/// beat at 500 schedules, written again whenever the running jobs changed.
/// The schedules are listed all the same, with their last and next ticks.
#[tokio::test]
async fn a_beat_does_not_carry_schedules_that_have_ticked() {
    const SCHEDULES: u32 = 200;
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let w = with_schedules(
        &client,
        Schedule::every(Duration::from_secs(1)).unwrap(),
        SCHEDULES,
    )
    .await;
    let mut con = server.raw().await;
    // every schedule ticked (its tick and the next in the periodic hash),
    // and a full beat since: the worker's entry is written whole again when
    // what it lists changes
    let ticked = common::wait_for(Duration::from_secs(10), || {
        let mut con = con.clone();
        async move {
            let n: usize = redis::cmd("HLEN")
                .arg("rsmq:p_many:periodic")
                .query_async(&mut con)
                .await
                .unwrap();
            n >= 2 * SCHEDULES as usize
        }
    })
    .await;
    assert!(ticked, "every schedule ticked within 10 s");
    let listed = client.schedules().await.unwrap();
    assert_eq!(listed.len(), SCHEDULES as usize);
    assert!(
        listed
            .iter()
            .all(|s| s.workers == 1 && s.last_ms.is_some() && s.next_ms > s.last_ms),
        "{:?}",
        listed.first()
    );
    let beat_size = || {
        let mut con = con.clone();
        async move {
            let beats: Vec<String> = redis::cmd("HVALS")
                .arg("rsmq:{@workers}:info")
                .query_async(&mut con)
                .await
                .unwrap();
            assert_eq!(beats.len(), 1);
            beats[0].len()
        }
    };
    let small = common::wait_for(Duration::from_secs(10), || async {
        beat_size().await < 2_000
    })
    .await;
    assert!(
        small,
        "a beat of {} bytes for {SCHEDULES} schedules",
        beat_size().await
    );
    // the same schedules listed for the worker, from what it serves
    let workers = client.workers().await.unwrap();
    assert_eq!(workers[0].schedules.len(), SCHEDULES as usize);
    assert!(
        workers[0]
            .schedules
            .iter()
            .any(|s| s.name == "s7" && s.queue == "p_many")
    );
    let _ = &mut con;
    w.stop().await;
}

/// A worker's schedules due together are ticked in one call a queue (up to
/// 100 ticks a call), not one call each: with 50 schedules ticking every
/// second, a call a second rather than 50 (audit W2: 20 workers with 100
/// schedules each made 2,000 calls a second, 51 ms of Redis).
#[tokio::test]
async fn schedules_due_together_are_ticked_in_one_call() {
    const SCHEDULES: u32 = 50;
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let w = with_schedules(&client, Schedule::cron("* * * * * *").unwrap(), SCHEDULES).await;
    // past the first ticks (each schedule's task starts on its own)
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut con = server.raw().await;
    common::log_every_command(&mut con).await;
    let before: usize = redis::cmd("ZCARD")
        .arg("rsmq:p_many")
        .query_async(&mut con)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let log = common::slow_script_calls(&mut con).await;
    let after: usize = redis::cmd("ZCARD")
        .arg("rsmq:p_many")
        .query_async(&mut con)
        .await
        .unwrap();
    w.stop().await;
    // the tick calls: script calls on the periodic hash of p_many
    let calls = log
        .iter()
        .filter(|args| args.iter().any(|a| a.as_slice() == b"rsmq:p_many:periodic"))
        .count();
    // three seconds of ticks, each second's 50 enqueued
    assert!(
        after - before >= 2 * SCHEDULES as usize,
        "{} ticks enqueued in 3 s",
        after - before
    );
    assert!(
        calls <= 8,
        "{calls} tick calls in 3 s for {SCHEDULES} schedules ticking every second"
    );
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "slow_call_tick", queue = "p_slow")]
struct SlowCallTick;

impl Job for SlowCallTick {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A tick call that Redis answers late (here a `CLIENT PAUSE` of 1.3 s from
/// 200 ms before a tick) does not skip the tick after it: that one came due
/// while the call waited, and is enqueued late, at once, as its next tick is
/// not due yet. The old code went on from the clock the late answer gave, one
/// past that tick: a running worker lost it (and a `Missed::RunLast`
/// worker's start, whose catch-up call straddled a tick, the same way).
#[tokio::test]
async fn a_tick_call_answered_late_does_not_skip_the_next_tick() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let w = common::start_serving(
        Worker::builder(client.backend())
            .queue("p_other")
            .periodic(
                Schedule::every(Duration::from_secs(1)).unwrap(),
                SlowCallTick,
            )
            .handle_signals(false)
            .build()
            .unwrap(),
    )
    .await;
    let ticks = || async {
        let mut at: Vec<u64> = client
            .queues()
            .list("p_slow", redjob::inspect::JobState::Ready, None, 1000)
            .await
            .map(|page| page.jobs)
            .unwrap_or_default()
            .iter()
            .map(|j| j.id.sent_ms())
            .collect();
        at.sort_unstable();
        at
    };
    // ticking: then the pause starts 200 ms before a tick
    assert!(
        common::wait_for(Duration::from_secs(10), || async {
            !ticks().await.is_empty()
        })
        .await,
        "a tick within 10 s"
    );
    let now = client.backend().now_ms().await.unwrap();
    let tick = (now + 1_500) / 1000 * 1000;
    tokio::time::sleep(Duration::from_millis(tick - 200 - now)).await;
    let mut con = server.raw().await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_300)
        .arg("ALL")
        .query_async(&mut con)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let at = ticks().await;
    w.stop().await;
    for t in [tick, tick + 1000, tick + 2000] {
        assert!(at.contains(&t), "tick {t} not enqueued: {at:?}");
    }
}
