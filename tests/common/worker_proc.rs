//! Worker processes for the controls' tests (included by path where needed:
//! its job type is not for every test binary). A test binary that includes
//! it has an ignored test `control_worker_process` calling [`serve`]; [`Proc`]
//! runs that binary again as a worker process, reading what it prints: its
//! worker id (`id …`), and what `Worker::run` returned (`stopped …`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redjob::inspect::{Inspect, JobState};
use redjob::{Client, Job, JobContext, JobError, JobId, Worker};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// The environment variable that gives a worker process its Redis URL.
const URL_VAR: &str = "REDJOB_CONTROL_REDIS";

/// Sleeps `ms`.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "nap", queue = "c_naps")]
pub struct Nap {
    pub ms: u64,
}

impl Job for Nap {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        // a leased job may not have started yet: a test that needs it
        // running waits for this line
        println!("nap started {}", self.ms);
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        Ok(())
    }
}

/// The worker process's body: serves `c_naps` until stopped, then says why
/// and goes on a little (the application's process is its own). Run by the
/// ignored test `control_worker_process` of the including test binary.
pub fn serve() {
    let Ok(url) = std::env::var(URL_VAR) else {
        eprintln!("run by a test with {URL_VAR}");
        return;
    };
    // what the worker logs goes to stderr, which the test keeps (see
    // `Proc::said`)
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .try_init();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = Client::connect(&url).await.unwrap();
        let worker = Worker::builder(client.backend())
            .register::<Nap>()
            .concurrency(2)
            .build()
            .unwrap();
        println!("id {}", worker.id());
        let stopped = worker.run_until_stopped().await.unwrap();
        println!("stopped {stopped:?}");
        // the process goes on after its worker stopped
        tokio::time::sleep(Duration::from_millis(200)).await;
        println!("still here");
    });
}

/// A worker process and the lines it printed.
pub struct Proc {
    pub child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// What it wrote to stderr: its logs, a panic.
    errs: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// Starts a worker process on the Redis at `url`.
    pub fn spawn(url: &str) -> Proc {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "control_worker_process",
                "--nocapture",
            ])
            .env(URL_VAR, url)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let errs = Arc::new(Mutex::new(Vec::new()));
        keep(child.stdout.take().unwrap(), lines.clone());
        keep(child.stderr.take().unwrap(), errs.clone());
        Proc { child, lines, errs }
    }

    /// Everything the process wrote so far, stdout then stderr: for a
    /// failed check's message.
    pub fn said(&self) -> String {
        let out = self.lines.lock().unwrap().join("\n");
        let err = self.errs.lock().unwrap().join("\n");
        format!("stdout:\n{out}\nstderr:\n{err}")
    }

    /// The first printed line that starts with `prefix`, without it
    /// (waiting up to 30 s for it).
    pub async fn line(&self, prefix: &str) -> String {
        let start = Instant::now();
        loop {
            if let Some(l) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find_map(|l| l.strip_prefix(prefix))
            {
                return l.to_string();
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no {prefix:?} line; {}",
                self.said()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Reads the lines of `from` into `to` until it closes.
fn keep(from: impl std::io::Read + Send + 'static, to: Arc<Mutex<Vec<String>>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            to.lock().unwrap().push(line);
        }
    });
}

/// Waits (up to 10 s) until `ok`.
pub async fn until<F: AsyncFn() -> bool>(what: &str, ok: F) {
    let start = Instant::now();
    while !ok().await {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The worker whose attempt ran job `id` last, once it finished.
pub async fn ran_by(client: &Client, id: JobId) -> Option<String> {
    last_run(client, id).await.map(|(w, _)| w)
}

/// The worker whose attempt ran job `id` last and when it started (Unix
/// ms), once it finished.
pub async fn last_run(client: &Client, id: JobId) -> Option<(String, u64)> {
    let j = client.queues().job("c_naps", &id).await.unwrap()?;
    if j.state != JobState::Finished {
        return None;
    }
    let r = j.runs.last()?;
    Some((r.worker.clone()?, r.started_ms?))
}

/// Two worker processes on the Redis at `url` (queue `c_naps` created first),
/// once both are listed: a client, the processes and their worker ids.
pub async fn two_workers(url: &str) -> (Client, [Proc; 2], String, String) {
    let client = Client::connect(url).await.unwrap();
    redjob::queue::Queues::create_queue(client.queues(), "c_naps", Default::default())
        .await
        .unwrap();
    let procs = [Proc::spawn(url), Proc::spawn(url)];
    let a = procs[0].line("id ").await;
    let b = procs[1].line("id ").await;
    until("both workers listed", async || {
        redjob::ops::Admin::workers(&client).await.unwrap().len() == 2
    })
    .await;
    (client, procs, a, b)
}

/// Runs `jobs` naps of 20 ms; the workers that ran each, in order.
pub async fn run_naps(client: &Client, jobs: usize) -> Vec<String> {
    let ids: Vec<JobId> = client
        .enqueue_batch(&(0..jobs).map(|_| Nap { ms: 20 }).collect::<Vec<_>>())
        .await
        .unwrap();
    let mut by = Vec::new();
    for id in ids {
        until("a nap ran", async || ran_by(client, id).await.is_some()).await;
        by.push(ran_by(client, id).await.unwrap());
    }
    by
}

/// SIGTERMs the processes still running and waits for each.
pub fn stop_all(procs: &mut [Proc]) {
    for p in procs.iter() {
        let _ = Command::new("kill")
            .args(["-TERM", &p.child.id().to_string()])
            .status();
    }
    for p in procs.iter_mut() {
        p.child.wait().unwrap();
    }
}
