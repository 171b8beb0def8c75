//! Controls an operator sets on a live worker through the backend: quiet (no
//! new work, what runs finishes), resume, stop (`Worker::run` returns who
//! stopped it); stored with who and when, gone with the worker.

use std::sync::Arc;
use std::time::Duration;

use redjob::inspect::{Inspect, JobState};
use redjob::ops::{Admin, WorkerControl};
use redjob::worker::Stopped;
use redjob::{Error, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::Env;
use crate::common::{start_serving, wait_for};

/// Blocks until the `Notify` in the worker's data is notified.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "control_block", queue = "control_block")]
struct ControlBlock;

impl Job for ControlBlock {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Notify>>()?.notified().await;
        Ok(())
    }
}

pub async fn a_worker_is_quieted_resumed_and_stopped_through_the_backend(env: &Env) {
    let q = env.queues();
    let ops = env.client.clone().acting_as("ops alice");
    // bad ids, and no such worker
    assert!(matches!(
        ops.quiet_worker("").await,
        Err(Error::InvalidValue { .. })
    ));
    assert!(matches!(
        ops.quiet_worker(&"x".repeat(300)).await,
        Err(Error::InvalidValue { .. })
    ));
    assert!(!ops.stop_worker("no-such-worker").await.unwrap());

    let release = Arc::new(Notify::new());
    let worker = Worker::builder(env.client.backend())
        .register::<ControlBlock>()
        .concurrency(2)
        // a beat every 10 s: a control is read when it is set, not at a beat
        .lease(Duration::from_secs(30))
        .data(release.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let id = worker.id().to_string();
    let running = start_serving(worker).await;
    let listed = || async {
        q.workers()
            .await
            .unwrap()
            .into_iter()
            .find(|w| w.id == id)
            .expect("listed")
    };
    let first = env.client.enqueue(&ControlBlock).await.unwrap();
    let state = |job| async move { q.job("control_block", &job).await.unwrap().unwrap().state };
    assert!(
        wait_for(Duration::from_secs(5), || async {
            state(first).await == JobState::InFlight
        })
        .await
    );

    // quiet: stored with who and when, followed within a second
    assert!(ops.quiet_worker(&id).await.unwrap());
    let c = listed().await.control.expect("the control is listed");
    assert_eq!((c.what, c.by.as_str()), (WorkerControl::Quiet, "ops alice"));
    assert!(
        wait_for(Duration::from_secs(2), || async { listed().await.quiet }).await,
        "the worker says it is quiet"
    );
    // it takes no new job; the one it runs finishes
    let second = env.client.enqueue(&ControlBlock).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        state(second).await,
        JobState::Ready,
        "a quiet worker fetches nothing"
    );
    release.notify_one();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            state(first).await == JobState::Finished
        })
        .await,
        "what it ran finished"
    );
    assert_eq!(state(second).await, JobState::Ready);

    // resumed: the control is gone, and it takes work again
    assert!(ops.resume_worker(&id).await.unwrap());
    assert_eq!(listed().await.control, None);
    assert!(
        wait_for(Duration::from_secs(5), || async {
            state(second).await == JobState::InFlight
        })
        .await,
        "a resumed worker fetches again"
    );
    assert!(!listed().await.quiet);

    // quiet again, then stopped: no new job starts meanwhile, a stop is
    // final (a resume leaves it), run returns who stopped it once what it
    // runs finished; the worker leaves, with its control
    assert!(ops.quiet_worker(&id).await.unwrap());
    assert!(wait_for(Duration::from_secs(2), || async { listed().await.quiet }).await);
    let third = env.client.enqueue(&ControlBlock).await.unwrap();
    let bob = env.client.clone().acting_as("ops bob");
    assert!(bob.stop_worker(&id).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ops.resume_worker(&id).await.unwrap());
    let c = listed().await.control.expect("still listed, stopping");
    assert_eq!((c.what, c.by.as_str()), (WorkerControl::Stop, "ops bob"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        state(third).await,
        JobState::Ready,
        "a stopping worker takes nothing"
    );
    release.notify_one();
    match running.stopped().await {
        Stopped::Requested { by, at_ms } => {
            assert_eq!(by, "ops bob");
            assert!(at_ms > 0);
        }
        other => panic!("stopped for another reason: {other:?}"),
    }
    assert_eq!(state(second).await, JobState::Finished, "its run finished");
    assert_eq!(state(third).await, JobState::Ready);
    assert!(q.workers().await.unwrap().is_empty());
    assert!(
        !ops.resume_worker(&id).await.unwrap(),
        "gone with the worker"
    );
}

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "control_ping", topic = "control_pings")]
struct ControlPing {
    n: u64,
}

pub async fn a_quiet_worker_reads_no_topic_event_until_resumed(env: &Env) {
    let q = env.queues();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let to = seen.clone();
    let worker = Worker::builder(env.client.backend())
        .handle_signals(false)
        .lease(Duration::from_secs(30))
        .subscribe(
            redjob::topic::Subscription::new("audit").start(redjob::topic::Start::Beginning),
            move |e: ControlPing, _ctx| {
                let to = to.clone();
                async move {
                    to.lock().unwrap().push(e.n);
                    Ok(())
                }
            },
        )
        .build()
        .unwrap();
    let id = worker.id().to_string();
    let running = start_serving(worker).await;
    env.client.publish(&ControlPing { n: 1 }).await.unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            seen.lock().unwrap().len() == 1
        })
        .await
    );
    assert!(q.quiet_worker(&id).await.unwrap());
    assert!(
        wait_for(Duration::from_secs(2), || async {
            q.workers()
                .await
                .unwrap()
                .iter()
                .any(|w| w.id == id && w.quiet)
        })
        .await
    );
    env.client.publish(&ControlPing { n: 2 }).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(*seen.lock().unwrap(), [1], "a quiet worker reads nothing");
    assert!(q.resume_worker(&id).await.unwrap());
    assert!(
        wait_for(Duration::from_secs(5), || async {
            seen.lock().unwrap().len() == 2
        })
        .await,
        "read again once resumed"
    );
    running.stop().await;
}

/// Returns at once.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "control_quick", queue = "control_block")]
struct ControlQuick;

impl Job for ControlQuick {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

pub async fn a_quiet_worker_puts_back_what_it_prefetched_unstarted(env: &Env) {
    let q = env.queues();
    let release = Arc::new(Notify::new());
    let worker = Worker::builder(env.client.backend())
        .register::<ControlBlock>()
        .register::<ControlQuick>()
        .concurrency(1)
        .prefetch(1)
        .lease(Duration::from_secs(30))
        .data(release.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let id = worker.id().to_string();
    let running = start_serving(worker).await;
    let state = |job| async move { q.job("control_block", &job).await.unwrap().unwrap() };
    // quick jobs: the queue's run time is short, so the worker prefetches
    for _ in 0..5 {
        let j = env.client.enqueue(&ControlQuick).await.unwrap();
        assert!(
            wait_for(Duration::from_secs(5), || async {
                state(j).await.state == JobState::Finished
            })
            .await
        );
    }
    // one that blocks its only slot, and one prefetched behind it
    let block = env.client.enqueue(&ControlBlock).await.unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            state(block).await.state == JobState::InFlight
        })
        .await
    );
    let behind = env.client.enqueue(&ControlQuick).await.unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            state(behind).await.state == JobState::InFlight
        })
        .await,
        "the job behind is prefetched (leased, waiting for the slot)"
    );
    assert!(q.quiet_worker(&id).await.unwrap());
    assert!(
        wait_for(Duration::from_secs(5), || async {
            state(behind).await.state == JobState::Ready
        })
        .await,
        "quiet puts the prefetched job back"
    );
    release.notify_one();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            state(block).await.state == JobState::Finished
        })
        .await,
        "what it ran finished"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = state(behind).await;
    assert_eq!(
        b.state,
        JobState::Ready,
        "nothing started once its slot freed"
    );
    assert_eq!(b.attempts, 0, "put back without counting an attempt");
    assert!(q.resume_worker(&id).await.unwrap());
    assert!(
        wait_for(Duration::from_secs(5), || async {
            state(behind).await.state == JobState::Finished
        })
        .await
    );
    running.stop().await;
}
