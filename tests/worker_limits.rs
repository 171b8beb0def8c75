//! A queue's limits across worker processes on Redis: a global concurrency
//! held by three processes, with one SIGKILLed while it holds every place
//! (its places free when its leases end), and a rate limit held by three
//! processes in every sliding window.
//!
//! Concurrency keys across three processes, one SIGKILLed with jobs in hand:
//! never two jobs of a key at once.
//!
//! The worker processes are this test binary again, running the ignored test
//! `limits_worker_process` with the Redis URL and a log file in their
//! environment; they log each run's start and end by the system clock, which
//! they share with this process.

mod common;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::RedisServer;
use redjob::ops::{Admin, Concurrency, QueueSettings, RateLimit};
use redjob::queue::{QueueOptions, Queues};
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

const QUEUE: &str = "limited";

/// Runs `first_ms` on its first attempt, `ms` on later ones.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "limits_logged", queue = "limited")]
struct Logged {
    first_ms: u64,
    ms: u64,
}

/// One at a time per `key`, each run `ms` long.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "limits_keyed", queue = "limited", concurrency_key = "key")]
struct Keyed {
    key: u32,
    ms: u64,
}

impl Job for Keyed {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let log = ctx.data::<Log>()?;
        log.keyed('S', self.key);
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        log.keyed('E', self.key);
        Ok(())
    }
}

/// Where a worker process logs its runs: `S|E pid unix_ms [key]`.
struct Log(std::fs::File);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

impl Log {
    fn keyed(&self, tag: char, key: u32) {
        let line = format!("{tag} {} {} {key}\n", std::process::id(), now_ms());
        let _ = (&self.0).write_all(line.as_bytes());
    }

    fn line(&self, tag: char) {
        let line = format!("{tag} {} {}\n", std::process::id(), now_ms());
        // one write of a short line to an O_APPEND file: whole or not at all
        let _ = (&self.0).write_all(line.as_bytes());
    }
}

impl Job for Logged {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let log = ctx.data::<Log>()?;
        log.line('S');
        let ms = if ctx.attempt() == 1 {
            self.first_ms
        } else {
            self.ms
        };
        tokio::time::sleep(Duration::from_millis(ms)).await;
        log.line('E');
        Ok(())
    }
}

/// The worker process: serves the queue until killed.
#[test]
#[ignore = "a worker process for the tests below, not a test on its own"]
fn limits_worker_process() {
    let (Ok(url), Ok(path)) = (
        std::env::var("REDJOB_LIMITS_REDIS"),
        std::env::var("REDJOB_LIMITS_LOG"),
    ) else {
        eprintln!("run by this file's tests with REDJOB_LIMITS_REDIS and REDJOB_LIMITS_LOG");
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
        Worker::builder(client.backend())
            .register::<Logged>()
            .register::<Keyed>()
            .concurrency(10)
            .lease(Duration::from_secs(2))
            .grace_period(Duration::from_secs(1))
            .data(Log(file))
            .build()
            .unwrap()
            .run()
            .await
            .unwrap();
    });
}

/// A worker process and its log; killed when dropped.
struct Proc {
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_worker(url: &str, dir: &std::path::Path, n: usize) -> Proc {
    let log = dir.join(format!("worker-{n}.log"));
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "limits_worker_process",
            "--nocapture",
        ])
        .env("REDJOB_LIMITS_REDIS", url)
        .env("REDJOB_LIMITS_LOG", &log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Proc { child, log }
}

/// Each run of a log: its start, and its end if it logged one.
fn runs(p: &Proc) -> Vec<(u64, Option<u64>)> {
    let text = std::fs::read_to_string(&p.log).unwrap_or_default();
    let mut open: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let (Some(tag), Some(at)) = (f.first(), f.get(2).and_then(|t| t.parse::<u64>().ok()))
        else {
            continue;
        };
        if *tag == "S" {
            open.push(at);
        } else if let Some(start) = open.pop() {
            // runs of one process may interleave: pair an end with the
            // latest start before it, which only matters for the overlap's
            // edges and not for its count
            out.push((start, Some(at)));
        }
    }
    out.extend(open.into_iter().map(|s| (s, None)));
    out
}

/// The most runs at once among `runs` (an unended run lasts until `cut`).
fn most_at_once(runs: &[(u64, Option<u64>)], cut: u64) -> usize {
    let mut edges: Vec<(u64, i32)> = Vec::new();
    for (s, e) in runs {
        edges.push((*s, 1));
        edges.push((e.unwrap_or(cut), -1));
    }
    // an end before a start at the same ms
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + limit;
    while std::time::Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

fn setup(
    name: &str,
    settings: QueueSettings,
) -> (
    RedisServer,
    Client,
    tokio::runtime::Runtime,
    std::path::PathBuf,
) {
    let server = RedisServer::start();
    let dir = std::env::temp_dir().join(format!("redjob-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(Client::connect(&server.url())).unwrap();
    rt.block_on(async {
        client
            .backend()
            .create_queue(QUEUE, QueueOptions::default())
            .await
            .unwrap();
        client.set_settings(QUEUE, &settings).await.unwrap();
    });
    (server, client, rt, dir)
}

fn processed(rt: &tokio::runtime::Runtime, client: &Client) -> u64 {
    rt.block_on(client.stats(QUEUE)).unwrap().processed
}

#[test]
fn a_global_concurrency_holds_across_processes_and_a_killed_ones_places_free_at_lease_end() {
    let (server, client, rt, dir) = setup(
        "limits-global",
        QueueSettings::concurrency(Concurrency::global(3)),
    );
    let url = server.url();
    // the first process takes every place with jobs that run 60 s at first
    let first = spawn_worker(&url, &dir, 0);
    let long: Vec<Logged> = (0..3)
        .map(|_| Logged {
            first_ms: 60_000,
            ms: 100,
        })
        .collect();
    rt.block_on(client.enqueue_batch(&long)).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || runs(&first).len() == 3),
        "the first process started the 3 long jobs"
    );
    // two more processes, and a backlog 10x the limit: they wait
    let others = [spawn_worker(&url, &dir, 1), spawn_worker(&url, &dir, 2)];
    let short: Vec<Logged> = (0..30)
        .map(|_| Logged {
            first_ms: 100,
            ms: 100,
        })
        .collect();
    rt.block_on(client.enqueue_batch(&short)).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        others.iter().all(|p| runs(p).is_empty()),
        "no place was free while the first process held them all"
    );
    // the first dies holding every place: they free when its leases end
    // (renewed every 2/3 s for 2 s, so at least 1.3 s on; Redis counts a
    // lease until the second it ends in has passed)
    let mut first = first;
    let killed = now_ms();
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || processed(&rt, &client) >= 33),
        "every job ran, the killed process's again: {}",
        processed(&rt, &client)
    );
    let mut all: Vec<(u64, Option<u64>)> = runs(&first)
        .into_iter()
        .map(|(s, e)| (s, e.or(Some(killed))))
        .collect();
    let mut later: Vec<u64> = Vec::new();
    for p in &others {
        let r = runs(p);
        later.extend(r.iter().map(|(s, _)| *s));
        all.extend(r);
    }
    later.sort();
    let waited = later[0] - killed;
    assert!(
        (1000..=4500).contains(&waited),
        "the first place freed {waited} ms after the kill"
    );
    assert_eq!(
        most_at_once(&all, now_ms()),
        3,
        "the limit was reached across the processes and never exceeded"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rate_limit_holds_across_processes_in_every_sliding_window() {
    let period = Duration::from_secs(1);
    let (server, client, rt, dir) = setup(
        "limits-rate",
        QueueSettings::rate_limit(RateLimit::new(10, period)),
    );
    let url = server.url();
    let jobs: Vec<Logged> = (0..100)
        .map(|_| Logged {
            first_ms: 50,
            ms: 50,
        })
        .collect();
    rt.block_on(client.enqueue_batch(&jobs)).unwrap();
    let procs: Vec<Proc> = (0..3).map(|n| spawn_worker(&url, &dir, n)).collect();
    assert!(
        wait_until(Duration::from_secs(60), || processed(&rt, &client) >= 100),
        "every job ran: {}",
        processed(&rt, &client)
    );
    let mut starts: Vec<u64> = procs
        .iter()
        .flat_map(|p| runs(p).into_iter().map(|(s, _)| s))
        .collect();
    starts.sort();
    assert_eq!(starts.len(), 100);
    assert!(
        procs.iter().filter(|p| !runs(p).is_empty()).count() >= 2,
        "the processes shared the work"
    );
    // Redis counts starts by its clock as it leases; a handler logs its start
    // a few ms later
    let window = period.as_millis() as u64 - 100;
    let mut most = 0;
    let mut j = 0;
    for i in 0..starts.len() {
        while j < starts.len() && starts[j] < starts[i] + window {
            j += 1;
        }
        most = most.max(j - i);
    }
    assert_eq!(
        most, 10,
        "the limit was reached and never exceeded in any window"
    );
    assert!(starts[99] - starts[0] >= 9 * period.as_millis() as u64 - 100);
    drop(procs);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each key's runs over every log: start, and end (a run a SIGKILL cut short
/// ends at `killed_at`, when its process died).
fn keyed_runs(procs: &[Proc], killed_at: u64) -> std::collections::HashMap<u32, Vec<(u64, u64)>> {
    let mut out: std::collections::HashMap<u32, Vec<(u64, u64)>> = Default::default();
    for p in procs {
        let text = std::fs::read_to_string(&p.log).unwrap_or_default();
        let mut open: std::collections::HashMap<u32, u64> = Default::default();
        for l in text.lines() {
            let f: Vec<&str> = l.split(' ').collect();
            let (Some(tag), Some(at), Some(key)) = (
                f.first(),
                f.get(2).and_then(|t| t.parse::<u64>().ok()),
                f.get(3).and_then(|k| k.parse::<u32>().ok()),
            ) else {
                continue;
            };
            if *tag == "S" {
                open.insert(key, at);
            } else if let Some(start) = open.remove(&key) {
                out.entry(key).or_default().push((start, at));
            }
        }
        for (key, start) in open {
            out.entry(key)
                .or_default()
                .push((start, killed_at.max(start)));
        }
    }
    out
}

#[test]
fn one_job_per_key_across_processes_and_a_killed_ones_keys_run_again_after_its_leases() {
    let (server, client, rt, dir) = setup("limits-keyed", QueueSettings::default());
    let url = server.url();
    // 30 keys of 4 jobs of 100 ms each
    let jobs: Vec<Keyed> = (0..120)
        .map(|i| Keyed {
            key: i % 30,
            ms: 100,
        })
        .collect();
    rt.block_on(client.enqueue_batch(&jobs)).unwrap();
    let mut procs: Vec<Proc> = (0..3).map(|n| spawn_worker(&url, &dir, n)).collect();
    // once some ran, one process dies with jobs in hand: its keys' places
    // stay taken until its leases (2 s) end, then those jobs run again
    assert!(wait_until(Duration::from_secs(30), || processed(
        &rt, &client
    ) >= 20));
    let victim = procs
        .iter()
        .position(|p| !runs(p).is_empty())
        .expect("a process ran jobs");
    procs[victim].child.kill().unwrap();
    procs[victim].child.wait().unwrap();
    let killed_at = now_ms();
    assert!(
        wait_until(Duration::from_secs(60), || processed(&rt, &client) >= 120),
        "every job ran: {}",
        processed(&rt, &client)
    );
    let by_key = keyed_runs(&procs, killed_at);
    assert_eq!(by_key.len(), 30);
    for (key, runs) in &by_key {
        let runs: Vec<(u64, Option<u64>)> = runs.iter().map(|(s, e)| (*s, Some(*e))).collect();
        assert_eq!(
            most_at_once(&runs, killed_at),
            1,
            "key {key} ran two at once: {runs:?}"
        );
    }
    assert!(
        procs.iter().filter(|p| !runs(p).is_empty()).count() >= 2,
        "the processes shared the work"
    );
    drop(procs);
    let _ = std::fs::remove_dir_all(&dir);
}
