//! Chaos: 20,000 jobs served by 3 worker processes while one of them is SIGKILLed
//! (or once SIGTERMed) and restarted every 1–2 s. Every job completes at least
//! once, every duplicate belongs to a job that was running in a killed process,
//! and nothing is left in the queue, visible or not.
//!
//! The worker processes are this test binary again, running the ignored test
//! `chaos_worker_process` with the Redis URL and a log file in its environment.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::RedisServer;
use redjob::queue::Queues;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

const JOBS: u64 = 20_000;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "chaos", queue = "chaos")]
struct Chaos {
    key: u64,
    ms: u64,
}

/// Where a worker process logs its runs: `S|E key attempt pid unix_ms`.
struct Log(std::fs::File);

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

impl Log {
    fn line(&self, tag: char, key: u64, attempt: u32) {
        let line = format!(
            "{tag} {key} {attempt} {} {}\n",
            std::process::id(),
            now_ms()
        );
        // one write of a short line to an O_APPEND file: whole or not at all
        let _ = (&self.0).write_all(line.as_bytes());
    }
}

impl Job for Chaos {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let log = ctx.data::<Log>()?;
        log.line('S', self.key, ctx.attempt());
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        log.line('E', self.key, ctx.attempt());
        Ok(())
    }
}

/// The worker process: serves `chaos` until SIGTERM (graceful) or SIGKILL.
#[test]
#[ignore = "a worker process for chaos_kills_lose_no_job, not a test on its own"]
fn chaos_worker_process() {
    let (Ok(url), Ok(path)) = (
        std::env::var("REDJOB_CHAOS_REDIS"),
        std::env::var("REDJOB_CHAOS_LOG"),
    ) else {
        eprintln!("run by chaos_kills_lose_no_job with REDJOB_CHAOS_REDIS and REDJOB_CHAOS_LOG");
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
        let concurrency = std::env::var("REDJOB_CHAOS_CONCURRENCY")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(8);
        Worker::builder(client.backend())
            .queue("chaos")
            .concurrency(concurrency)
            .lease(Duration::from_secs(2))
            .poll_interval(Duration::from_secs(1))
            .grace_period(Duration::from_secs(5))
            .data(Log(file))
            .build()
            .unwrap()
            .run()
            .await
            .unwrap();
    });
}

struct Proc {
    child: Child,
    log: std::path::PathBuf,
}

fn spawn_worker(url: &str, dir: &std::path::Path, n: usize) -> Proc {
    spawn_worker_of(url, dir, n, 8)
}

/// A worker process running `concurrency` jobs at a time.
fn spawn_worker_of(url: &str, dir: &std::path::Path, n: usize, concurrency: usize) -> Proc {
    let log = dir.join(format!("worker-{n}.log"));
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "chaos_worker_process",
            "--nocapture",
        ])
        .env("REDJOB_CHAOS_REDIS", url)
        .env("REDJOB_CHAOS_LOG", &log)
        .env("REDJOB_CHAOS_CONCURRENCY", concurrency.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Proc { child, log }
}

/// One log line.
struct Entry {
    end: bool,
    key: u64,
    attempt: u32,
    at: u128,
}

fn read_log(path: &std::path::Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            // a SIGKILL may cut the last line short: skip what does not parse
            let f: Vec<&str> = l.split(' ').collect();
            if f.len() != 5 {
                return None;
            }
            Some(Entry {
                end: f[0] == "E",
                key: f[1].parse().ok()?,
                attempt: f[2].parse().ok()?,
                at: f[4].parse().ok()?,
            })
        })
        .collect()
}

#[test]
fn chaos_kills_lose_no_job() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = std::env::temp_dir().join(format!("redjob-chaos-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(Client::connect(&url)).unwrap();
    let jobs: Vec<Chaos> = (0..JOBS)
        .map(|key| Chaos {
            key,
            ms: 2 + (key * 7919) % 19,
        })
        .collect();
    rt.block_on(client.enqueue_batch(&jobs)).unwrap();

    let started = Instant::now();
    let mut spawned = 0;
    let mut procs: Vec<Proc> = (0..3)
        .map(|_| {
            spawned += 1;
            spawn_worker(&url, &dir, spawned)
        })
        .collect();
    // (log of the killed process, when, SIGKILL?)
    let mut kills: Vec<(std::path::PathBuf, u128, bool)> = Vec::new();
    let mut logs: Vec<std::path::PathBuf> = procs.iter().map(|p| p.log.clone()).collect();
    let completed = |logs: &[std::path::PathBuf]| -> usize {
        let mut done = HashSet::new();
        for l in logs {
            done.extend(read_log(l).into_iter().filter(|e| e.end).map(|e| e.key));
        }
        done.len()
    };
    let mut next_kill = Instant::now() + Duration::from_millis(1000);
    while completed(&logs) < JOBS as usize {
        assert!(
            started.elapsed() < Duration::from_secs(150),
            "chaos run timed out"
        );
        std::thread::sleep(Duration::from_millis(50));
        if Instant::now() < next_kill || kills.len() >= 12 {
            continue;
        }
        let victim = kills.len() % procs.len();
        let hard = kills.len() != 2; // the third one is graceful
        let p = &mut procs[victim];
        let at = now_ms();
        if hard {
            p.child.kill().unwrap();
        } else {
            let pid = p.child.id().to_string();
            Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        }
        p.child.wait().unwrap();
        kills.push((p.log.clone(), at, hard));
        spawned += 1;
        *p = spawn_worker(&url, &dir, spawned);
        logs.push(p.log.clone());
        next_kill =
            Instant::now() + Duration::from_millis(1000 + (kills.len() as u64 * 337) % 1000);
    }
    let took = started.elapsed();
    for p in &mut procs {
        let pid = p.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        p.child.wait().unwrap();
    }

    // nothing left in the queue, visible or invisible
    let attrs = rt.block_on(client.queues().attributes("chaos")).unwrap();
    assert_eq!((attrs.msgs, attrs.hiddenmsgs), (0, 0), "left in the queue");

    // runs per job, and which logs (processes) they were in
    let mut ends: HashMap<u64, Vec<(usize, u32)>> = HashMap::new();
    let mut starts: HashMap<u64, Vec<(usize, u128)>> = HashMap::new();
    let entries: Vec<Vec<Entry>> = logs.iter().map(|l| read_log(l)).collect();
    for (i, es) in entries.iter().enumerate() {
        for e in es {
            if e.end {
                ends.entry(e.key).or_default().push((i, e.attempt));
            } else {
                starts.entry(e.key).or_default().push((i, e.at));
            }
        }
    }
    assert_eq!(ends.len() as u64, JOBS, "every job completed at least once");
    let killed: HashSet<usize> = kills
        .iter()
        .filter(|k| k.2)
        .map(|k| logs.iter().position(|l| *l == k.0).unwrap())
        .collect();
    let mut duplicates = 0;
    for (key, runs) in &ends {
        if runs.len() > 1 {
            duplicates += runs.len() - 1;
            let in_killed = starts[key].iter().any(|(i, _)| killed.contains(i));
            assert!(
                in_killed,
                "job {key} ran {runs:?} without a SIGKILL to explain it"
            );
        }
    }
    // recovery: from a SIGKILL to the restart elsewhere of each job it cut short
    let mut recover_max = 0u128;
    let mut cut_short = 0;
    for (log, at, hard) in &kills {
        if !hard {
            continue;
        }
        let i = logs.iter().position(|l| l == log).unwrap();
        let ended_here: HashSet<u64> = entries[i].iter().filter(|e| e.end).map(|e| e.key).collect();
        for e in entries[i]
            .iter()
            .filter(|e| !e.end && !ended_here.contains(&e.key))
        {
            let again = starts[&e.key]
                .iter()
                .filter(|(j, t)| *j != i && t >= at)
                .map(|(_, t)| t - at)
                .min();
            if let Some(d) = again {
                recover_max = recover_max.max(d);
                cut_short += 1;
            }
        }
    }
    let hard = kills.iter().filter(|k| k.2).count();
    println!(
        "chaos: {JOBS} jobs in {took:?}; {} kills ({hard} SIGKILL, {} SIGTERM); {cut_short} runs cut short \
         by SIGKILL and run again; {duplicates} duplicate completions; max {recover_max} ms from a SIGKILL \
         to its cut-short jobs running again (lease 2 s, FIFO by visibility)",
        kills.len(),
        kills.len() - hard
    );
    assert!(
        hard >= 3 && kills.len() > hard,
        "kills happened: {}",
        kills.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Jobs sent one at a time to 3 worker processes of concurrency 2, no kills:
/// sends hand jobs to idle workers, often to one whose slots just filled (it
/// releases them) while another fetches in the same ms. No job runs twice.
#[test]
fn a_trickle_to_full_workers_runs_each_job_once() {
    const TRICKLE: u64 = 3_000;
    let server = RedisServer::start();
    let url = server.url();
    let dir = std::env::temp_dir().join(format!("redjob-trickle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(Client::connect(&url)).unwrap();
    rt.block_on(
        client
            .queues()
            .create_queue("chaos", redjob::queue::QueueOptions::default()),
    )
    .unwrap();
    let mut procs: Vec<Proc> = (1..=3).map(|n| spawn_worker_of(&url, &dir, n, 2)).collect();
    // every process listens before the first send
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    for key in 0..TRICKLE {
        rt.block_on(client.enqueue(&Chaos {
            key,
            ms: 2 + (key * 7919) % 19,
        }))
        .unwrap();
    }
    let logs: Vec<std::path::PathBuf> = procs.iter().map(|p| p.log.clone()).collect();
    let ended = |logs: &[std::path::PathBuf]| {
        logs.iter()
            .flat_map(|l| read_log(l))
            .filter(|e| e.end)
            .count()
    };
    while ended(&logs) < TRICKLE as usize {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "trickle timed out with {} of {TRICKLE} done",
            ended(&logs)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // a lease (2 s) and more: a run dropped by its worker would come back
    std::thread::sleep(Duration::from_secs(3));
    for p in &mut procs {
        let pid = p.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        p.child.wait().unwrap();
    }
    let mut runs: HashMap<u64, Vec<u32>> = HashMap::new();
    for e in logs.iter().flat_map(|l| read_log(l)).filter(|e| !e.end) {
        runs.entry(e.key).or_default().push(e.attempt);
    }
    let twice: Vec<_> = runs.iter().filter(|(_, r)| r.len() > 1).collect();
    println!(
        "trickle: {TRICKLE} jobs in {:?}, {} run more than once",
        started.elapsed(),
        twice.len()
    );
    assert_eq!(runs.len() as u64, TRICKLE, "every job ran");
    assert!(twice.is_empty(), "ran more than once: {twice:?}");
    assert!(runs.values().all(|r| r == &[1]), "every run was attempt 1");
    let attrs = rt.block_on(client.queues().attributes("chaos")).unwrap();
    assert_eq!((attrs.msgs, attrs.hiddenmsgs), (0, 0), "left in the queue");
    let _ = std::fs::remove_dir_all(&dir);
}
