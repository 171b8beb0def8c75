//! What an operator and an app see of a worker, checked at its edges: the
//! live-worker registry's running jobs, the hooks and metrics of runs that
//! end in unusual ways.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{start_serving, wait_for};
use redjob::backend::memory::MemoryBackend;
use redjob::inspect::Inspect;
use redjob::ops::Admin;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "ob_quick", queue = "ob_busy")]
struct Quick;

impl Job for Quick {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Waits for a permit of the worker's semaphore.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "ob_gated", queue = "ob_busy")]
struct Gated;

impl Job for Gated {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gate = ctx.data::<Arc<Semaphore>>()?;
        gate.acquire().await.map_err(JobError::fatal)?.forget();
        Ok(())
    }
}

/// `redjob workers` prints BUSY as `running.len()/concurrency`, and the
/// dashboard "Busy: n of concurrency": `WorkerInfo::running` is "the jobs it
/// was running at its last heartbeat". A worker of concurrency 1 runs one job
/// at a time; the jobs it prefetched (leased, waiting in the worker for its
/// one running slot) are not running, and must not make it look 6/1 busy.
#[tokio::test]
async fn the_registry_lists_running_jobs_not_prefetched_ones() {
    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    let gate = Arc::new(Semaphore::new(0));
    let worker = Worker::builder(client.backend())
        .queue("ob_busy")
        .concurrency(1)
        .handle_signals(false)
        .data(gate.clone())
        .build()
        .unwrap();
    let w = start_serving(worker).await;
    // quick runs first: the queue's jobs are short, so it is prefetched
    for _ in 0..3 {
        client.enqueue(&Quick).await.unwrap();
    }
    assert!(
        wait_for(Duration::from_secs(10), || async {
            client.stats("ob_busy").await.unwrap().processed == 3
        })
        .await
    );
    // one job that holds the only running slot, then five behind it
    client.enqueue(&Gated).await.unwrap();
    let mut jobs = Vec::new();
    for _ in 0..5 {
        jobs.push(Quick);
    }
    client.enqueue_batch(&jobs).await.unwrap();
    // the worker leases the one it runs and prefetches some behind it: how
    // many is its own call, from the quick runs' measured time (all five when
    // they ran quickly enough; under load they measured longer, and it took
    // two, one prefetched, where the test waited for six)
    let in_flight = || async {
        Inspect::counts(&backend, "ob_busy")
            .await
            .unwrap()
            .in_flight
    };
    assert!(
        wait_for(Duration::from_secs(10), || async { in_flight().await >= 2 }).await,
        "no job prefetched behind the running one: {} leased",
        in_flight().await
    );
    // a beat after that (at most a second after a run starts or ends)
    let mut most = 0;
    let start = tokio::time::Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        let ws = client.workers().await.unwrap();
        assert_eq!(ws.len(), 1);
        most = most.max(ws[0].running.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // the leases taken by now (nothing runs or ends: no more are taken),
    // and a beat that lists them
    let leased = in_flight().await;
    let beat = || async {
        let ws = client.workers().await.unwrap();
        let listed = serde_json::to_value(&ws[0]).unwrap();
        (ws, listed)
    };
    let listed_all = wait_for(Duration::from_secs(5), || async {
        beat().await.1["prefetched"] == leased - 1
    })
    .await;
    let (ws, listed) = beat().await;
    let running: Vec<_> = ws[0]
        .running
        .iter()
        .map(|r| r.job.clone().unwrap_or_default())
        .collect();
    gate.add_permits(1);
    w.stop().await;
    assert!(
        most <= 1,
        "BUSY {most}/1: the registry lists {running:?} as running on a worker of concurrency 1"
    );
    assert_eq!(running, ["ob_gated"], "the job holding the slot runs");
    assert!(
        listed_all,
        "the {} waiting for the slot are counted as prefetched: {listed}",
        leased - 1
    );
}

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "ob_gated_event", topic = "ob_events")]
struct GatedEvent;

/// A worker's concurrency is shared by its jobs and its subscribers' events
/// (one running slot each). A worker of concurrency 1 running an event can
/// start no job, yet the registry says it runs nothing: `redjob workers`
/// shows BUSY 0/1 and the dashboard "Busy: 0 of 1" for a worker that is
/// full.
#[tokio::test]
async fn a_worker_busy_with_an_event_is_not_listed_as_idle() {
    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    client
        .subscribe("ob_events", "ob_sub", redjob::topic::Start::Beginning)
        .await
        .unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(Semaphore::new(0));
    let (event_gate, event_entered) = (gate.clone(), entered.clone());
    let worker = Worker::builder(client.backend())
        .queue("ob_busy")
        .concurrency(1)
        .subscribe("ob_sub", move |_: GatedEvent, _| {
            let (gate, entered) = (event_gate.clone(), event_entered.clone());
            async move {
                entered.add_permits(1);
                gate.acquire().await.map_err(JobError::fatal)?.forget();
                Ok(())
            }
        })
        .handle_signals(false)
        .build()
        .unwrap();
    let w = start_serving(worker).await;
    client.publish(&GatedEvent).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), entered.acquire())
        .await
        .expect("the event runs")
        .unwrap()
        .forget();
    // the worker's one slot is taken: a job waits
    client.enqueue(&Quick).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let waiting = Inspect::counts(&backend, "ob_busy").await.unwrap();
    let ws = client.workers().await.unwrap();
    // the events it runs, as `redjob workers --json` prints them: BUSY counts
    // them beside the jobs
    let listed = serde_json::to_value(&ws[0]).unwrap();
    let events = listed["events"].as_array().cloned().unwrap_or_default();
    gate.add_permits(1);
    w.stop().await;
    assert_eq!(
        waiting.ready + waiting.in_flight,
        1,
        "the job could not start"
    );
    assert_eq!(
        ws[0].running.len() + events.len(),
        1,
        "BUSY {}/{} while the worker's only slot runs an event: {listed}",
        ws[0].running.len() + events.len(),
        ws[0].concurrency
    );
    let e = &events[0];
    assert_eq!(
        (&e["topic"], &e["subscriber"], &e["event"]),
        (
            &serde_json::json!("ob_events"),
            &serde_json::json!("ob_sub"),
            &serde_json::json!("ob_gated_event")
        ),
        "{e}"
    );
    let started = e["started_at_ms"].as_u64().unwrap();
    assert!(
        started <= listed["last_beat_ms"].as_u64().unwrap(),
        "started before the beat that listed it: {listed}"
    );
}
