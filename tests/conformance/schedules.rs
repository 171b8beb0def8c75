//! Periodic schedules as operators see and act on them: the listing's next
//! tick after a downtime or a schedule changed between deploys, a run now due
//! at once, a pause that goes with its queue's delete, and a tick under a
//! name no schedule may have refused.

use std::time::Duration;

use redjob::backend::Backend;
use redjob::inspect::{Inspect, JobState};
use redjob::ops::{Admin, Schedule, ScheduleInfo, Tick, Ticked};
use redjob::queue::{QueueOptions, Queues, SendMessage};
use redjob::worker::Periodic;
use redjob::{Error, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{Running, start_serving, wait_for};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "sched_tick", queue = "sched_ticks")]
struct SchedTick;

impl Job for SchedTick {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// The backend's clock, Unix ms.
async fn now_ms(env: &Env) -> u64 {
    env.client.backend().now_ms().await.unwrap()
}

/// A worker that ticks `schedule` (serving another queue, so that the ticks'
/// jobs stay queued), serving.
async fn ticking(env: &Env, schedule: Schedule) -> Running {
    let worker = Worker::builder(env.client.backend())
        .queue("sched_other")
        .periodic_job(Periodic::new(schedule, SchedTick))
        .handle_signals(false)
        .build()
        .unwrap();
    start_serving(worker).await
}

/// The listing once it shows `sched_tick` as `schedule` prints.
async fn listed_as(env: &Env, schedule: &Schedule) -> ScheduleInfo {
    let printed = schedule.to_string();
    let found = || async {
        let all = env.queues().schedules().await.unwrap();
        all.into_iter().find(|s| s.schedule == printed)
    };
    assert!(
        wait_for(Duration::from_secs(10), || async {
            found().await.is_some()
        })
        .await,
        "{printed} listed within 10 s"
    );
    found().await.unwrap()
}

/// After a schedule changed between deploys (the same name, another
/// schedule), the listing gives the new schedule's next tick, which the new
/// worker's beat carries. The old code let the next tick the old schedule
/// recorded with its last tick (in the past) override the beat's.
pub async fn a_schedule_changed_between_deploys_lists_the_next_tick_of_its_new_schedule(env: &Env) {
    let q = env.queues();
    // deploy 1: every second, until a tick is recorded
    let running = ticking(env, Schedule::every(Duration::from_secs(1)).unwrap()).await;
    assert!(
        wait_for(Duration::from_secs(10), || async {
            q.ticks("sched_ticks", &["sched_tick"]).await.unwrap()[0]
                .last_ms
                .is_some()
        })
        .await,
        "a tick within 10 s"
    );
    running.stop().await;
    // deploy 2: the same name, daily at 03:00 UTC
    let daily = Schedule::cron("0 3 * * *").unwrap();
    let running = ticking(env, daily.clone()).await;
    let s = listed_as(env, &daily).await;
    let want = daily.next_after(now_ms(env).await);
    running.stop().await;
    assert!(s.last_ms.is_some(), "{s:?}");
    assert_eq!(s.next_ms, want, "{s:?}");
}

/// After every worker was down over a schedule's tick (skipped when they come
/// back), the listing gives the next tick to come, not the missed one
/// recorded as "next" before the downtime. The old code listed the recorded
/// one (an hourly job showed "next: an hour ago" until its next tick).
pub async fn after_a_downtime_the_listing_shows_the_next_tick_to_come(env: &Env) {
    let hourly = Schedule::every(Duration::from_secs(3600)).unwrap();
    let missed = hourly.last_before(now_ms(env).await).unwrap();
    // the tick before the missed one, recorded with the missed one as next
    let before = Tick {
        name: "sched_tick",
        at_ms: missed - 3_600_000,
        catch_up: false,
        next_ms: Some(missed),
    };
    let msg = SendMessage::new(r#"{"type":"sched_tick","args":null}"#);
    env.client
        .backend()
        .tick("sched_ticks", &before, &msg, &QueueOptions::default())
        .await
        .unwrap();
    let running = ticking(env, hourly.clone()).await;
    let s = listed_as(env, &hourly).await;
    let want = hourly.next_after(now_ms(env).await);
    running.stop().await;
    assert_eq!(s.last_ms, Some(before.at_ms), "{s:?}");
    assert_eq!(s.next_ms, want, "{s:?} (missed: {missed})");
}

/// A run now of a schedule is due at once, as its ticks are, on a queue
/// with an RSMQ delay attribute. The old code sent it with the queue's
/// delay: it waited an hour here.
pub async fn a_run_now_is_due_at_once_on_a_queue_with_a_delay(env: &Env) {
    let q = env.queues();
    let delayed = QueueOptions {
        delay: 3600,
        ..Default::default()
    };
    q.create_queue("sched_ticks", delayed).await.unwrap();
    let hourly = Schedule::every(Duration::from_secs(3600)).unwrap();
    let running = ticking(env, hourly.clone()).await;
    listed_as(env, &hourly).await;
    let id = env
        .client
        .run_schedule_now("sched_ticks", "sched_tick")
        .await
        .unwrap();
    running.stop().await;
    let job = q.job("sched_ticks", &id).await.unwrap().expect("the run");
    assert_eq!(job.state, JobState::Ready, "{job:?}");
}

/// A schedule paused before its queue exists ("for workers to come"), then
/// the queue deleted (not found: it never existed): the pause goes with the
/// delete, as Redis drops the queue's keys even then. The old memory backend
/// returned before it dropped the pause, and kept it.
pub async fn a_pause_of_a_queue_never_created_goes_with_its_delete(env: &Env) {
    let q = env.queues();
    assert!(q.pause_schedule("never_made", "nightly").await.unwrap());
    let deleted = q.delete_queue("never_made").await;
    assert!(
        matches!(deleted, Err(Error::QueueNotFound { .. })),
        "{deleted:?}"
    );
    let t = q.ticks("never_made", &["nightly"]).await.unwrap();
    assert_eq!(t[0].paused, None);
}

/// A tick under a name no schedule may have ("nightly:paused", refused at a
/// worker's build and at pause) is refused, before anything is written (its
/// queue is not made), alone or among good ticks, and "nightly" ticks on.
/// The old code took it: on Redis its tick landed in the field that pauses
/// "nightly" (whose next tick then enqueued nothing), in memory not.
pub async fn a_tick_under_a_name_no_schedule_may_have_is_refused(env: &Env) {
    let b = env.client.backend();
    let msg = SendMessage::new(r#"{"type":"sched_tick","args":null}"#);
    let opts = QueueOptions::default();
    let now = now_ms(env).await;
    let at = now - now % 1000 - 2000;
    let tick = |name, at_ms| Tick {
        name,
        at_ms,
        catch_up: false,
        next_ms: None,
    };
    for bad in ["nightly:paused", "nightly:next", ""] {
        let refused = b.tick("sched_bad", &tick(bad, at), &msg, &opts).await;
        assert!(
            matches!(refused, Err(Error::InvalidValue { .. })),
            "{bad:?}: {refused:?}"
        );
    }
    assert!(!b.list_queues().await.unwrap().contains(&"sched_bad".into()));
    let both = [
        (tick("nightly:paused", at), &msg),
        (tick("nightly", at + 1000), &msg),
    ];
    let outcomes = b.tick_many("sched_bad", &both, &opts).await.unwrap();
    assert!(
        matches!(
            outcomes[..],
            [Err(Error::InvalidValue { .. }), Ok(Ticked::Enqueued { .. })]
        ),
        "{outcomes:?}"
    );
    let t = env.queues().ticks("sched_bad", &["nightly"]).await.unwrap();
    assert_eq!((t[0].last_ms, &t[0].paused), (Some(at + 1000), &None));
}
