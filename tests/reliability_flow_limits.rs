//! Flows and callbacks against what used to abort the process: a chain
//! deeper than `Flow::MAX_DEPTH` is refused before anything is sent (it
//! overflowed the stack from 92 steps), however deep, and a very deep chain
//! built and dropped does not recurse; a chain at the limit runs, and fails,
//! whole. A body that claims to be a callback with a huge `"batch_done"`
//! total (any RSMQ client can send one) reads its children from the batch
//! as stored: the real results, or a clear error when there is no such
//! batch, where the worker allocated the claimed total and aborted.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{RedisServer, start_serving};
use redjob::backend::memory::MemoryBackend;
use redjob::client::Flow;
use redjob::queue::{QueueOptions, Queues, SendMessage};
use redjob::{Client, Error, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

/// Each test's time limit.
const LIMIT: Duration = Duration::from_secs(60);

/// What ran: steps in order, and what forged callbacks read.
#[derive(Default)]
struct Seen {
    steps: Mutex<Vec<u32>>,
    read: Mutex<Vec<Result<Vec<Option<u64>>, String>>>,
}

/// A chain's step: returns its number plus what the step before returned;
/// step `die` dies.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "deep_step", queue = "deep", output = "u64", max_attempts = 1)]
struct Step {
    n: u32,
    die: bool,
}

impl Job for Step {
    async fn perform(&self, ctx: &JobContext) -> Result<u64, JobError> {
        ctx.data::<Arc<Seen>>()?.steps.lock().unwrap().push(self.n);
        if self.die {
            return Err(JobError::fatal("this step dies"));
        }
        // a flow's parent reads the step before; a child alone has none
        let before: u64 = match ctx.batch_status() {
            Some(_) => ctx
                .child_results::<u64>()
                .await?
                .into_iter()
                .flatten()
                .sum(),
            None => 0,
        };
        Ok(before + u64::from(self.n))
    }
}

fn step(n: u32) -> Step {
    Step { n, die: false }
}

/// A chain of `steps` steps: step 1 runs first, step `steps` last.
fn chain(steps: u32) -> Flow {
    (2..=steps).fold(Flow::new(&step(1)), |f, n| f.then(&step(n)))
}

/// A job that reads its children's results and records what it read.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "forged_parent", queue = "forged", max_attempts = 1)]
struct Reader;

impl Job for Reader {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let read = ctx.child_results::<u64>().await;
        ctx.data::<Arc<Seen>>()?
            .read
            .lock()
            .unwrap()
            .push(read.map_err(|e| e.to_string()));
        Ok(())
    }
}

fn worker(client: &Client, seen: &Arc<Seen>) -> Worker {
    Worker::builder(client.backend())
        .register::<Step>()
        .register::<Reader>()
        .data(seen.clone())
        .handle_signals(false)
        .build()
        .unwrap()
}

/// The limit's message, as the error says it.
fn at_most() -> String {
    format!("a flow nests at most {}", Flow::MAX_DEPTH)
}

/// Chains one step over the limit, of 100 steps (which overflowed the stack
/// before the limit) and of 100,000 steps are refused, and nothing is sent.
async fn refuses_chains_too_deep(client: &Client) {
    for steps in [Flow::MAX_DEPTH as u32 + 1, 100, 100_000] {
        let err = client.enqueue_flow(chain(steps)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidValue { .. }), "{err}");
        assert!(err.to_string().contains(&at_most()), "{steps}: {err}");
    }
    // a chain under a flow of jobs is as deep
    let wide = Flow::new(&step(0))
        .child(&step(1))
        .subflow(chain(Flow::MAX_DEPTH as u32));
    let err = client.enqueue_flow(wide).await.unwrap_err();
    assert!(err.to_string().contains(&at_most()), "{err}");
    // nothing was sent: no batch opened, no queue made
    assert!(client.batches(None, 10).await.unwrap().is_empty());
    assert!(client.backend().list_queues().await.unwrap().is_empty());
}

/// A chain at the limit runs, each step once, in order; one whose first
/// step dies fails its last.
async fn runs_a_chain_at_the_limit(client: &Client) {
    let steps = Flow::MAX_DEPTH as u32;
    let seen = Arc::new(Seen::default());
    let running = start_serving(worker(client, &seen)).await;
    let last = client.enqueue_flow(chain(steps)).await.unwrap();
    let got = client
        .wait_result::<Step>(&last, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(got, Some(u64::from(steps * (steps + 1) / 2)));
    assert_eq!(*seen.steps.lock().unwrap(), (1..=steps).collect::<Vec<_>>());
    running.stop().await;
    fails_a_chain_at_the_limit(client).await;
}

/// A chain at the limit whose first step dies fails its last, each step
/// above the first failed unrun.
async fn fails_a_chain_at_the_limit(client: &Client) {
    let seen = Arc::new(Seen::default());
    let running = start_serving(worker(client, &seen)).await;
    fail_a_chain_at_the_limit(client, &seen).await;
    running.stop().await;
}

/// Enqueues a chain at the limit whose first step dies, for a worker that
/// records what ran in `seen`: its last step fails, no step above the
/// first runs.
async fn fail_a_chain_at_the_limit(client: &Client, seen: &Seen) {
    let steps = Flow::MAX_DEPTH as u32;
    // the first step dies: every step above it fails, the last too
    let broken = (2..=steps).fold(Flow::new(&Step { n: 1, die: true }), |f, n| {
        f.then(&step(n))
    });
    let last = client.enqueue_flow(broken).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let err = loop {
        match client.result::<Step>(&last).await {
            Err(e @ Error::JobFailed { .. }) => break e,
            _ => {
                assert!(tokio::time::Instant::now() < deadline, "the chain failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert!(
        err.to_string().contains("a job it waits for failed"),
        "{err}"
    );
    assert_eq!(*seen.steps.lock().unwrap(), [1]);
}

#[tokio::test]
async fn a_chain_too_deep_is_refused_before_anything_is_sent_on_memory() {
    let client = Client::memory(MemoryBackend::new());
    tokio::time::timeout(LIMIT, refuses_chains_too_deep(&client))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_chain_too_deep_is_refused_before_anything_is_sent_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    tokio::time::timeout(LIMIT, refuses_chains_too_deep(&client))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_chain_at_the_limit_runs_and_fails_whole_on_memory() {
    let client = Client::memory(MemoryBackend::new());
    tokio::time::timeout(LIMIT, runs_a_chain_at_the_limit(&client))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_chain_at_the_limit_runs_and_fails_whole_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    tokio::time::timeout(LIMIT, runs_a_chain_at_the_limit(&client))
        .await
        .unwrap();
}

/// A chain at the limit failing whole, its worker on a thread of a small
/// stack (a runtime of its own, every task of the worker on it): a failed
/// step's flow fails its parent, whose flow fails its parent, and so on up.
/// Each step was one more nested call of the batch's fire (with the
/// parent's dead letter and count inside it), 31 deep: about 1 MB of stack
/// in a debug build, near a test thread's 2 MB beside the rest (CI
/// overflowed it once); a stack overflow aborts the test binary. The
/// steps are now turns of a loop.
#[test]
fn a_chain_at_the_limit_fails_whole_with_its_worker_on_a_small_stack_on_redis() {
    let server = RedisServer::start();
    let url = server.url();
    let seen = Arc::new(Seen::default());
    let (ready, serving) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker_seen = seen.clone();
    let worker_url = url.clone();
    let thread = std::thread::Builder::new()
        .stack_size(SMALL_STACK)
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let client = Client::connect(&worker_url).await.unwrap();
                let running = start_serving(worker(&client, &worker_seen)).await;
                ready.send(()).unwrap();
                let _ = stopped.await;
                running.stop().await;
            })
        })
        .unwrap();
    serving.recv_timeout(LIMIT).expect("the worker serving");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::connect(&url).await.unwrap();
        tokio::time::timeout(LIMIT, fail_a_chain_at_the_limit(&client, &seen))
            .await
            .unwrap();
    });
    stop.send(()).unwrap();
    thread.join().unwrap();
}

/// A chain at the limit enqueued on a thread of a small stack: the enqueue
/// went down a nested call a level (about 34 KB of stack a level in a debug
/// build, 1.1 MB for the chain, beside the worker's on a test thread of
/// 2 MB) and overflowed it. It goes a level at a time with a stack of its
/// own now.
#[test]
fn a_chain_at_the_limit_is_enqueued_on_a_small_stack() {
    let enqueued = std::thread::Builder::new()
        .stack_size(SMALL_STACK)
        .spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let client = Client::memory(MemoryBackend::new());
                client
                    .enqueue_flow(chain(Flow::MAX_DEPTH as u32))
                    .await
                    .unwrap();
                // a flow a step, the first step sent
                let flows = client.batches(None, 100).await.unwrap().len();
                let sent = redjob::inspect::Inspect::peek(&client.backend(), "deep", 10)
                    .await
                    .unwrap()
                    .len();
                (flows, sent)
            })
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(enqueued, (Flow::MAX_DEPTH, 1));
}

/// The small stack of those tests: the old nested fire, and the old nested
/// enqueue, overflowed it.
const SMALL_STACK: usize = 512 * 1024;

/// Built and dropped, a chain of 200,000 steps does not recurse (dropping
/// it overflowed the stack from about 10,000 steps).
#[test]
fn a_very_deep_chain_is_dropped_without_recursion() {
    let start = std::time::Instant::now();
    drop(chain(200_000));
    // and one under a flow of jobs, dropped as its parent's child
    drop(Flow::new(&step(0)).child(&step(1)).subflow(chain(200_000)));
    assert!(start.elapsed() < LIMIT);
}

/// A body claiming to be the callback of batch `batch` of `total` jobs.
fn forged(batch: &str, total: u64) -> Vec<u8> {
    format!(
        r#"{{"type":"forged_parent","args":null,"batch_done":{{"id":"{batch}","total":{total},"succeeded":{total},"dead":0,"sealed":true}}}}"#
    )
    .into_bytes()
}

/// Sends `body` to the forged parents' queue and waits until it was run:
/// what it read.
async fn read_by(client: &Client, seen: &Seen, body: Vec<u8>) -> Result<Vec<Option<u64>>, String> {
    let before = seen.read.lock().unwrap().len();
    Queues::send(&client.backend(), "forged", SendMessage::new(body))
        .await
        .unwrap();
    wait_read(seen, before + 1).await
}

/// Waits until `n` reads were recorded: the last.
async fn wait_read(seen: &Seen, n: usize) -> Result<Vec<Option<u64>>, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(last) = seen.read.lock().unwrap().get(n - 1) {
            return last.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "read {n} recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A flow's parent reads its children; bodies claiming to be callbacks,
/// of its batch or of none, read the batch as stored or fail clearly.
async fn forged_totals(client: &Client) {
    client
        .backend()
        .create_queue("forged", QueueOptions::default())
        .await
        .unwrap();
    let seen = Arc::new(Seen::default());
    let running = start_serving(worker(client, &seen)).await;
    // a real flow: its parent reads its two children
    let parent = Flow::new(&Reader).child(&step(5)).child(&step(7));
    let parent = client.enqueue_flow(parent).await.unwrap();
    assert_eq!(wait_read(&seen, 1).await, Ok(vec![Some(5), Some(7)]));
    let batch = client
        .batches(None, 10)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.parent_job().is_some_and(|(_, id)| id == parent))
        .expect("the flow's batch")
        .id;
    // a forged total, too large or too small, for that batch: its own total
    for total in [100_000_000_000, 1] {
        let read = read_by(client, &seen, forged(&batch, total)).await;
        assert_eq!(read, Ok(vec![Some(5), Some(7)]), "total {total}");
    }
    // no batch of that id (the parent job's): a clear error
    let err = read_by(client, &seen, forged(parent.as_str(), 100_000_000_000))
        .await
        .unwrap_err();
    assert!(err.contains(&format!("no batch {parent}")), "{err}");
    running.stop().await;
}

#[tokio::test]
async fn a_forged_callback_total_is_not_trusted_on_memory() {
    let client = Client::memory(MemoryBackend::new());
    tokio::time::timeout(LIMIT, forged_totals(&client))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_forged_callback_total_is_not_trusted_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    tokio::time::timeout(LIMIT, forged_totals(&client))
        .await
        .unwrap();
}

/// A body claiming to be job `index` of batch `batch` (any RSMQ client can
/// send one): a chain step, in its queue.
fn forged_member(batch: &str, index: u64) -> Vec<u8> {
    format!(r#"{{"type":"deep_step","args":{{"n":0,"die":false}},"batch":"{batch}:{index}"}}"#)
        .into_bytes()
}

/// A flow whose one child waits in a queue no worker serves, and a forged
/// job of its batch at an index the batch never gave out (past its total
/// and its next index), run by a worker: its finish is not counted, so the
/// batch does not complete and its parent does not run before its child.
/// Returns the batch's status after the forged job ran, and its id.
async fn forged_index(client: &Client) -> (redjob::ops::BatchStatus, String) {
    let _ = client
        .backend()
        .create_queue("deep", QueueOptions::default())
        .await;
    let parent = Flow::new(&Reader).child_in("idle", &step(5));
    let parent = client.enqueue_flow(parent).await.unwrap();
    let batch = client
        .batches(None, 10)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.parent_job().is_some_and(|(_, id)| id == parent))
        .expect("the flow's batch")
        .id;
    let seen = Arc::new(Seen::default());
    let running = start_serving(worker(client, &seen)).await;
    Queues::send(
        &client.backend(),
        "deep",
        SendMessage::new(forged_member(&batch, 1_000_000)),
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.steps.lock().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the forged job ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // its settle, and the count after it
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = client
        .batch_status(&batch.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    let read = seen.read.lock().unwrap().len();
    running.stop().await;
    assert_eq!(read, 0, "the parent ran before its only child did");
    (status, batch)
}

#[tokio::test]
async fn a_forged_batch_index_is_not_counted_on_memory() {
    let client = Client::memory(MemoryBackend::new());
    let (s, _) = tokio::time::timeout(LIMIT, forged_index(&client))
        .await
        .unwrap();
    assert_eq!(
        (s.total, s.succeeded, s.completed_ms),
        (1, 0, None),
        "an index the batch never gave out is not counted: {s:?}"
    );
}

#[tokio::test]
async fn a_forged_batch_index_is_not_counted_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let (s, batch) = tokio::time::timeout(LIMIT, forged_index(&client))
        .await
        .unwrap();
    // the bitmap of jobs counted grows to the index claimed (up to 512 MB
    // for an index of 2^32 - 1)
    let bitmap: u64 = redis::cmd("STRLEN")
        .arg(format!("rsmq:@batch:{batch}:done"))
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    assert_eq!(
        (s.total, s.succeeded, s.completed_ms),
        (1, 0, None),
        "an index the batch never gave out is not counted: {s:?} (its bitmap: {bitmap} bytes)"
    );
    assert!(bitmap < 1000, "its bitmap: {bitmap} bytes");
}
