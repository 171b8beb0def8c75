//! Chaos for batches: a batch of 20,000 jobs over three queues, served by 3
//! worker processes while one of them is SIGKILLed and restarted every 1–2 s,
//! on one Redis and on a 3-master Cluster with the queues on different
//! masters. The batch completes with exactly one `on_complete`, none more
//! within two lease lengths after it, and its counts exact: every job
//! counted once as succeeded, however often a killed worker's jobs ran.
//! Beside it, 30 flows (chains of three steps over the three queues, the
//! first waiting for a job enqueued earlier) each enqueue every step once:
//! one id per step, whatever the kills; and a batch of 200 jobs that each
//! add five jobs to it (one call each) completes once, every job it counted
//! succeeded, every added job ran (a killed adder adds again when retried).
//!
//! The worker processes are this test binary again, running the ignored test
//! `batch_worker_process` with the Redis URL, the queues and a log file in
//! their environment.

mod common;

use std::collections::HashSet;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::RedisServer;
use common::cluster::RedisCluster;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

const JOBS: u32 = 20_000;
/// The workers' lease.
const LEASE: Duration = Duration::from_secs(2);

/// A member job on queue `q` (its index among the three): sleeps a little.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "chaos_batch_member", queue = "unused")]
struct Member {
    key: u32,
    ms: u64,
}

impl Job for Member {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        ctx.data::<Log>()?.line(&format!("E {}", self.key));
        Ok(())
    }
}

/// The batch's callback: logs the status it carries.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "chaos_batch_done", queue = "unused")]
struct Done;

impl Job for Done {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let s = ctx.batch_status().expect("a callback");
        ctx.data::<Log>()?.line(&format!(
            "C {} {} {} {}",
            s.total, s.succeeded, s.dead, s.cancelled
        ));
        Ok(())
    }
}

/// A step of a chain of flows: logs its chain, step and id.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "chaos_flow_step", queue = "unused")]
struct Step {
    chain: u32,
    step: u32,
}

impl Job for Step {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        ctx.data::<Log>()?
            .line(&format!("F {} {} {}", self.chain, self.step, ctx.id()));
        Ok(())
    }
}

/// A job that adds five leaves to its batch, in its own queue, one call each.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "chaos_batch_splitter", queue = "unused")]
struct Splitter {
    key: u32,
}

impl Job for Splitter {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        for i in 0..ADDED {
            ctx.add_to_batch_in(ctx.queue(), &Leaf { key: self.key, i })
                .await?;
        }
        Ok(())
    }
}

/// A job added by a splitter: logs its place.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "chaos_batch_leaf", queue = "unused")]
struct Leaf {
    key: u32,
    i: u32,
}

impl Job for Leaf {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(3)).await;
        ctx.data::<Log>()?
            .line(&format!("L {} {}", self.key, self.i));
        Ok(())
    }
}

/// The splitters' batch's callback: logs the status it carries.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "chaos_batch_added", queue = "unused")]
struct Added;

impl Job for Added {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let s = ctx.batch_status().expect("a callback");
        ctx.data::<Log>()?.line(&format!(
            "D {} {} {} {}",
            s.total, s.succeeded, s.dead, s.cancelled
        ));
        Ok(())
    }
}

/// Splitters, and the jobs each adds.
const SPLITTERS: u32 = 200;
const ADDED: u32 = 5;

/// Chains of flows started beside the batch.
const CHAINS: u32 = 30;

/// A process's log: one short line per write (O_APPEND: whole or not at all).
struct Log(std::fs::File);

impl Log {
    fn line(&self, text: &str) {
        let _ = (&self.0).write_all(format!("{text}\n").as_bytes());
    }
}

#[test]
#[ignore = "a worker process for the batch chaos tests, not a test on its own"]
fn batch_worker_process() {
    let (Ok(url), Ok(path), Ok(queues)) = (
        std::env::var("REDJOB_CHAOS_REDIS"),
        std::env::var("REDJOB_CHAOS_LOG"),
        std::env::var("REDJOB_CHAOS_QUEUES"),
    ) else {
        eprintln!("run by the batch chaos tests");
        return;
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = Client::connect(&url).await.unwrap();
        let mut b = Worker::builder(client.backend())
            .concurrency(8)
            .lease(LEASE)
            .poll_interval(Duration::from_millis(500))
            .grace_period(Duration::from_secs(5))
            .data(Log(file));
        for q in queues.split(',') {
            b = b.queue(q);
        }
        b.build().unwrap().run().await.unwrap();
    });
}

fn spawn(url: &str, queues: &str, log: &std::path::Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "batch_worker_process",
            "--nocapture",
        ])
        .env("REDJOB_CHAOS_REDIS", url)
        .env("REDJOB_CHAOS_LOG", log)
        .env("REDJOB_CHAOS_QUEUES", queues)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Every log's lines.
fn lines(logs: &[std::path::PathBuf]) -> Vec<String> {
    logs.iter()
        .flat_map(|l| {
            std::fs::read_to_string(l)
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn chaos(url: &str, queues: [&str; 3], name: &str) {
    let dir = std::env::temp_dir().join(format!("redjob-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(Client::connect(url)).unwrap();
    // the jobs spread over the three queues, the callback on the first
    let mut batch = client.batch().on_complete_in(queues[0], &Done);
    for key in 0..JOBS {
        let q = queues[(key % 3) as usize];
        batch = batch.job_in(
            q,
            &Member {
                key,
                ms: 2 + u64::from(key * 7919 % 19),
            },
        );
    }
    let id = rt.block_on(batch.enqueue()).unwrap();
    // splitters, whose jobs add jobs to their batch
    let mut split = client.batch().on_complete_in(queues[1], &Added);
    for key in 0..SPLITTERS {
        split = split.job_in(queues[(key % 3) as usize], &Splitter { key });
    }
    let split = rt.block_on(split.enqueue()).unwrap();
    // chains: step 0 waits for a job enqueued earlier, each next step for
    // the one before, over the three queues
    for chain in 0..CHAINS {
        let step = |s: u32| Step { chain, step: s };
        let earlier = rt
            .block_on(client.enqueue_with(
                &step(100),
                redjob::client::EnqueueOptions::new().queue(queues[2]),
            ))
            .unwrap();
        let first = redjob::client::Flow::new_in(queues[0], &step(0)).after(queues[2], &earlier);
        let second = redjob::client::Flow::new_in(queues[1], &step(1)).subflow(first);
        let third = redjob::client::Flow::new_in(queues[2], &step(2)).subflow(second);
        rt.block_on(client.enqueue_flow(third)).unwrap();
    }
    let chains_done = |logs: &[std::path::PathBuf]| -> usize {
        lines(logs)
            .iter()
            .filter_map(|l| {
                let mut w = l.strip_prefix("F ")?.split(' ');
                let chain = w.next()?;
                (w.next()? == "2").then(|| chain.to_string())
            })
            .collect::<HashSet<_>>()
            .len()
    };

    let joined = queues.join(",");
    let started = Instant::now();
    let mut spawned = 0;
    let mut logs = Vec::new();
    let mut procs: Vec<Child> = (0..3)
        .map(|_| {
            spawned += 1;
            let log = dir.join(format!("worker-{spawned}.log"));
            logs.push(log.clone());
            spawn(url, &joined, &log)
        })
        .collect();
    let called = |logs: &[std::path::PathBuf]| -> Vec<String> {
        lines(logs)
            .into_iter()
            .filter(|l| l.starts_with("C "))
            .collect()
    };
    let mut kills = 0;
    let mut next_kill = Instant::now() + Duration::from_millis(1000);
    let mut done_at = None;
    while done_at.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "the batch did not complete: {:?}",
            rt.block_on(client.batch_status(&id))
        );
        std::thread::sleep(Duration::from_millis(50));
        let added = lines(&logs).iter().any(|l| l.starts_with("D "));
        if !called(&logs).is_empty() && chains_done(&logs) == CHAINS as usize && added {
            done_at = Some(Instant::now());
            break;
        }
        if Instant::now() < next_kill || kills >= 10 {
            continue;
        }
        let victim = kills % procs.len();
        procs[victim].kill().unwrap();
        procs[victim].wait().unwrap();
        kills += 1;
        spawned += 1;
        let log = dir.join(format!("worker-{spawned}.log"));
        logs.push(log.clone());
        procs[victim] = spawn(url, &joined, &log);
        next_kill = Instant::now() + Duration::from_millis(1000 + (kills as u64 * 337) % 1000);
    }
    // none more within two lease lengths after it
    std::thread::sleep(LEASE * 2);
    for p in &mut procs {
        let pid = p.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        p.wait().unwrap();
    }
    let calls = called(&logs);
    assert_eq!(calls.len(), 1, "one on_complete: {calls:?}");
    assert_eq!(
        calls[0],
        format!("C {JOBS} {JOBS} 0 0"),
        "the callback's status"
    );
    let s = rt.block_on(client.batch_status(&id)).unwrap().unwrap();
    assert!(s.is_complete(), "{s:?}");
    assert_eq!(
        (s.total, s.succeeded, s.dead),
        (u64::from(JOBS), u64::from(JOBS), 0)
    );
    // every job ran (some twice: cut short by a kill)
    let ran: HashSet<u32> = lines(&logs)
        .iter()
        .filter_map(|l| l.strip_prefix("E ")?.parse().ok())
        .collect();
    assert_eq!(ran.len() as u32, JOBS, "every job ran");
    assert!(kills >= 3, "kills happened: {kills}");
    // the splitters' batch: one callback, every job it counted succeeded,
    // at least every splitter and the jobs each added once
    let all = lines(&logs);
    let added: Vec<&String> = all.iter().filter(|l| l.starts_with("D ")).collect();
    assert_eq!(added.len(), 1, "one on_complete: {added:?}");
    let s = rt.block_on(client.batch_status(&split)).unwrap().unwrap();
    assert!(s.is_complete(), "{s:?}");
    assert_eq!((s.succeeded, s.dead, s.cancelled), (s.total, 0, 0), "{s:?}");
    assert!(s.total >= u64::from(SPLITTERS * (1 + ADDED)), "{s:?}");
    assert_eq!(
        *added[0],
        format!("D {} {} 0 0", s.total, s.total),
        "the callback's status"
    );
    let leaves: HashSet<&str> = all.iter().filter_map(|l| l.strip_prefix("L ")).collect();
    assert_eq!(
        leaves.len() as u32,
        SPLITTERS * ADDED,
        "every added job ran"
    );
    // each step of each chain was enqueued once: one id, however often it ran
    let mut ids: std::collections::HashMap<(String, String), HashSet<String>> = Default::default();
    for l in lines(&logs) {
        let Some(rest) = l.strip_prefix("F ") else {
            continue;
        };
        let w: Vec<&str> = rest.split(' ').collect();
        ids.entry((w[0].to_string(), w[1].to_string()))
            .or_default()
            .insert(w[2].to_string());
    }
    assert_eq!(ids.len() as u32, CHAINS * 4, "every step ran");
    let twice: Vec<_> = ids.iter().filter(|(_, v)| v.len() != 1).collect();
    assert!(
        twice.is_empty(),
        "a step enqueued more than once: {twice:?}"
    );
    println!(
        "batch chaos ({name}): {JOBS} jobs over 3 queues, {CHAINS} chains of flows and {SPLITTERS} jobs adding {ADDED} each ({} counted) in {:?} with {kills} SIGKILLs; one callback each, each step enqueued once",
        s.total,
        done_at.unwrap() - started
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_batch_completes_once_through_sigkills_on_one_redis() {
    let server = RedisServer::start();
    chaos(&server.url(), ["cb_a", "cb_b", "cb_c"], "batch-chaos");
}

#[test]
fn a_batch_over_three_masters_completes_once_through_sigkills() {
    let cluster = RedisCluster::start();
    // three queues whose slots are on three different masters
    let mut picked: Vec<(u16, String)> = Vec::new();
    for i in 0..200 {
        let q = format!("cbq{i}");
        let m = cluster.master_of(&format!("rsmq:{{{q}}}"));
        if picked.iter().all(|(p, _)| *p != m) {
            picked.push((m, q));
        }
        if picked.len() == 3 {
            break;
        }
    }
    assert_eq!(picked.len(), 3, "queues on three masters");
    let q: Vec<&str> = picked.iter().map(|(_, q)| q.as_str()).collect();
    chaos(&cluster.url(), [q[0], q[1], q[2]], "batch-chaos-cluster");
}
