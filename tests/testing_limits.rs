//! The test kit with a queue's limits across the fleet (a rate limit stored
//! with the queue, as `Admin::set_settings` or a worker's builder stores
//! it): a job the limit holds back is not due yet, as a job waiting out a
//! handler's throttle is not, and waits for `advance`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redjob::ops::{Admin, QueueSettings, RateLimit};
use redjob::queue::Queues;
use redjob::testing::TestKit;
use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Default)]
struct Calls(AtomicU32);

#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(name = "limits_call_api", queue = "limits_api")]
struct CallApi {
    n: u32,
}

impl Job for CallApi {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Calls>>()?.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A kit whose queue `limits_api` starts one job a minute.
async fn kit_one_a_minute() -> (TestKit, Arc<Calls>) {
    let calls = Arc::new(Calls::default());
    let kit = TestKit::new()
        .data(calls.clone())
        .wait_limit(Duration::from_secs(3));
    kit.backend()
        .create_queue("limits_api", Default::default())
        .await
        .unwrap();
    kit.backend()
        .set_settings(
            "limits_api",
            &QueueSettings::rate_limit(RateLimit::per_minute(1)),
        )
        .await
        .unwrap();
    (kit, calls)
}

/// Two jobs on a queue limited to one start a minute: `run_until_idle` runs
/// the first and leaves the second, which the limit holds back, for
/// `advance` (as it leaves a job waiting out a handler's throttle). The old
/// code counted the held job as due: `run_until_idle` never got idle and
/// failed with `NotIdle` after its wait limit (in real time), and so did
/// every `advance` after it, so a rate-limited queue could not be tested
/// with the kit at all.
#[tokio::test]
async fn a_job_held_back_by_the_queues_rate_limit_waits_for_advance() {
    let (kit, calls) = kit_one_a_minute().await;
    kit.client().enqueue(&CallApi { n: 1 }).await.unwrap();
    kit.client().enqueue(&CallApi { n: 2 }).await.unwrap();

    let run = kit
        .run_until_idle()
        .await
        .expect("idle once the limit holds");
    assert_eq!(run.processed, 1, "{run:?}");
    assert_eq!(calls.0.load(Ordering::SeqCst), 1);
    assert_eq!(kit.enqueued::<CallApi>(), [CallApi { n: 2 }]);

    let run = kit
        .advance(Duration::from_secs(60))
        .await
        .expect("the limit lets the next one start a minute on");
    assert_eq!(run.processed, 1, "{run:?}");
    assert!(kit.enqueued::<CallApi>().is_empty());
}

/// The same under tokio's paused clock: the worker waiting for the limit's
/// window sleeps on tokio's timer, which the paused clock would jump to when
/// nothing else runs, moving the kit's clock a minute on. `run_until_idle`
/// returns once the limit holds instead, and the held job waits for
/// `advance`: the run does not move the clock to run it.
#[tokio::test(start_paused = true)]
async fn under_the_paused_clock_a_held_job_waits_for_advance_too() {
    let (kit, calls) = kit_one_a_minute().await;
    kit.client().enqueue(&CallApi { n: 1 }).await.unwrap();
    kit.client().enqueue(&CallApi { n: 2 }).await.unwrap();
    let before = kit.clock().now_ms();

    let run = kit
        .run_until_idle()
        .await
        .expect("idle once the limit holds");
    assert_eq!(run.processed, 1, "{run:?}");
    assert_eq!(kit.enqueued::<CallApi>(), [CallApi { n: 2 }]);
    assert!(
        kit.clock().now_ms() - before < 60_000,
        "the run moved the clock"
    );

    let run = kit.advance(Duration::from_secs(60)).await.unwrap();
    assert_eq!(run.processed, 1, "{run:?}");
    assert_eq!(calls.0.load(Ordering::SeqCst), 2);
}
