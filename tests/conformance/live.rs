//! Periodic jobs and the live-worker registry: each tick enqueued once however
//! many workers try, missed ticks skipped or caught up, schedules listed with
//! their last and next tick; workers listed with what they run, gone when they
//! stop or die.

use std::sync::Arc;
use std::time::Duration;

use redjob::backend::Backend;
use redjob::ops::{Admin, Missed, Schedule, Tick, Ticked};
use redjob::queue::{QueueOptions, Queues, SendMessage};
use redjob::worker::Periodic;
use redjob::{Error, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::Env;
use crate::common::{start_serving, wait_for};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "live_tick", queue = "live_ticks")]
struct LiveTick {
    n: u32,
}

impl Job for LiveTick {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Blocks until the `Notify` in the worker's data is notified.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "live_block", queue = "live_block")]
struct LiveBlock;

impl Job for LiveBlock {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Notify>>()?.notified().await;
        Ok(())
    }
}

fn tick(name: &str, at_ms: u64, catch_up: bool) -> Tick<'_> {
    Tick {
        name,
        at_ms,
        catch_up,
        next_ms: Some(at_ms + 1000),
    }
}

/// The last tick recorded of each of `names`.
async fn last(env: &Env, queue: &str, names: &[&str]) -> Vec<Option<u64>> {
    let ticks = env.queues().ticks(queue, names).await.unwrap();
    ticks.iter().map(|t| t.last_ms).collect()
}

async fn now_ms(env: &Env) -> u64 {
    env.now()
        .await
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub async fn a_tick_is_enqueued_once_however_many_try(env: &Env) {
    let a = env.client.backend();
    let other = env.another_client().await;
    let b = other.backend();
    let msg = SendMessage::new(r#"{"type":"live_tick","args":{"n":1}}"#);
    let opts = QueueOptions::default();
    let now = now_ms(env).await;
    let at = now - now % 1000;
    // the first call creates the queue; the second, from another client, finds the tick done
    let first = a
        .tick("ticks", &tick("t", at, false), &msg, &opts)
        .await
        .unwrap();
    assert!(matches!(first, Ticked::Enqueued { .. }), "{first:?}");
    let again = b
        .tick("ticks", &tick("t", at, false), &msg, &opts)
        .await
        .unwrap();
    assert!(matches!(again, Ticked::Done { .. }), "{again:?}");
    // an earlier tick is done too; a later one is too early
    let before = b
        .tick("ticks", &tick("t", at - 1000, false), &msg, &opts)
        .await
        .unwrap();
    assert!(matches!(before, Ticked::Done { .. }), "{before:?}");
    match b
        .tick("ticks", &tick("t", now + 60_000, false), &msg, &opts)
        .await
        .unwrap()
    {
        Ticked::Early(wait) => assert!(
            wait > Duration::from_secs(55) && wait <= Duration::from_secs(60),
            "{wait:?}"
        ),
        other => panic!("a tick a minute ahead: {other:?}"),
    }
    let all = env.all_messages("ticks").await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].0, tick("t", at, false).id("ticks"));
    assert_eq!(all[0].0.sent_ms(), at);
    assert_eq!(all[0].1, r#"{"type":"live_tick","args":{"n":1}}"#);
    assert_eq!(last(env, "ticks", &["t", "never"]).await, [Some(at), None]);
    assert_eq!(last(env, "no_such_queue", &["t"]).await, [None]);

    // a catch-up runs only after an earlier tick of its schedule was recorded
    let fresh = a
        .tick("ticks", &tick("new", at, true), &msg, &opts)
        .await
        .unwrap();
    assert!(
        matches!(fresh, Ticked::Done { .. }),
        "nothing to catch up: {fresh:?}"
    );
    assert_eq!(last(env, "ticks", &["new"]).await, [None]);
    let first = a
        .tick("ticks", &tick("c", at - 2000, false), &msg, &opts)
        .await
        .unwrap();
    assert!(matches!(first, Ticked::Enqueued { .. }), "{first:?}");
    let caught = a
        .tick("ticks", &tick("c", at - 1000, true), &msg, &opts)
        .await
        .unwrap();
    assert!(matches!(caught, Ticked::Enqueued { .. }), "{caught:?}");
    let twice = b
        .tick("ticks", &tick("c", at - 1000, true), &msg, &opts)
        .await
        .unwrap();
    assert!(matches!(twice, Ticked::Done { .. }), "{twice:?}");
    assert_eq!(env.all_messages("ticks").await.len(), 3);

    // bad input: a body over the queue's maxsize, a bad name, a bad priority
    a.create_queue(
        "small",
        QueueOptions {
            maxsize: 1024,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let big = SendMessage::new(vec![b'x'; 2000]);
    let err = a
        .tick("small", &tick("t", at, false), &big, &opts)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::MessageTooLarge {
                size: 2000,
                max: 1024
            }
        ),
        "{err}"
    );
    assert_eq!(last(env, "small", &["t"]).await, [None]);
    let err = a
        .tick("bad:name", &tick("t", at, false), &msg, &opts)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidQueueName { .. }), "{err}");
    let err = a
        .tick(
            "ticks",
            &tick("t", at, false),
            &msg.clone().priority(11),
            &opts,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidValue { .. }), "{err}");
}

/// Ticks of several schedules in one call: each gets the outcome it would
/// alone, a body too large failing only its own tick.
pub async fn ticks_due_together_each_get_their_own_outcome(env: &Env) {
    let a = env.client.backend();
    let b = env.another_client().await.backend();
    let opts = QueueOptions::default();
    a.create_queue(
        "many_ticks",
        QueueOptions {
            maxsize: 1024,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let now = now_ms(env).await;
    let at = now - now % 1000;
    let msg = SendMessage::new(r#"{"type":"live_tick","args":{"n":1}}"#);
    let big = SendMessage::new(vec![b'x'; 2000]);
    let bad = msg.clone().priority(11);
    let ticks = [
        (tick("a", at, false), &msg),
        (tick("big", at, false), &big),
        (tick("b", at, false), &msg),
        (tick("later", now + 60_000, false), &msg),
        (tick("fresh", at, true), &msg),
        (tick("bad", at, false), &bad),
        (tick("big_later", now + 60_000, false), &big),
    ];
    let first = a.tick_many("many_ticks", &ticks, &opts).await.unwrap();
    let again = b.tick_many("many_ticks", &ticks, &opts).await.unwrap();
    for (outcomes, enqueued) in [(first, true), (again, false)] {
        assert_eq!(outcomes.len(), 7);
        // early and too large: early (nothing is tried before it is due)
        assert!(
            matches!(outcomes[6], Ok(Ticked::Early(w)) if w > Duration::from_secs(55)),
            "{outcomes:?}"
        );
        // a priority out of range fails its own tick, not the call
        assert!(
            matches!(outcomes[5], Err(Error::InvalidValue { .. })),
            "{outcomes:?}"
        );
        let done = |o: &redjob::Result<Ticked>| match o {
            Ok(Ticked::Enqueued { .. }) => Some(true),
            Ok(Ticked::Done { .. }) => Some(false),
            _ => None,
        };
        assert_eq!(done(&outcomes[0]), Some(enqueued), "{outcomes:?}");
        assert!(
            matches!(
                outcomes[1],
                Err(Error::MessageTooLarge {
                    size: 2000,
                    max: 1024
                })
            ),
            "{outcomes:?}"
        );
        assert_eq!(done(&outcomes[2]), Some(enqueued), "{outcomes:?}");
        assert!(
            matches!(outcomes[3], Ok(Ticked::Early(w)) if w > Duration::from_secs(55)),
            "{outcomes:?}"
        );
        // a catch-up with no earlier tick recorded: nothing to catch up
        assert_eq!(done(&outcomes[4]), Some(false), "{outcomes:?}");
    }
    let ids: Vec<redjob::JobId> = env
        .all_messages("many_ticks")
        .await
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.contains(&tick("a", at, false).id("many_ticks")));
    assert!(ids.contains(&tick("b", at, false).id("many_ticks")));
    assert_eq!(
        last(env, "many_ticks", &["a", "big", "b", "later", "fresh"]).await,
        [Some(at), None, Some(at), None, None]
    );
    // a tick done already and too large, or paused and too large: too large
    // (nothing is recorded either way)
    assert!(a.pause_schedule("many_ticks", "p").await.unwrap());
    for name in ["a", "p"] {
        let outcomes = a
            .tick_many("many_ticks", &[(tick(name, at, false), &big)], &opts)
            .await
            .unwrap();
        assert!(
            matches!(
                outcomes[..],
                [Err(Error::MessageTooLarge { size: 2000, .. })]
            ),
            "{name}: {outcomes:?}"
        );
    }
    // (the same tick of a body that fits: paused)
    let outcomes = a
        .tick_many("many_ticks", &[(tick("p", at, false), &msg)], &opts)
        .await
        .unwrap();
    assert!(
        matches!(outcomes[..], [Ok(Ticked::Paused { .. })]),
        "{outcomes:?}"
    );
    // one schedule twice in a call: its later tick, then an earlier one
    // (done), then the later one again (done)
    let twice = [
        (tick("x", at, false), &msg),
        (tick("x", at - 1000, false), &msg),
        (tick("x", at, false), &msg),
    ];
    let outcomes = a.tick_many("many_ticks", &twice, &opts).await.unwrap();
    assert!(
        matches!(
            outcomes[..],
            [
                Ok(Ticked::Enqueued { .. }),
                Ok(Ticked::Done { .. }),
                Ok(Ticked::Done { .. })
            ]
        ),
        "{outcomes:?}"
    );
    assert_eq!(env.all_messages("many_ticks").await.len(), 3);
    assert_eq!(last(env, "many_ticks", &["x"]).await, [Some(at)]);
    // a queue that does not exist is made, as for one tick
    let made = a.tick_many("many_made", &ticks[..1], &opts).await.unwrap();
    assert!(matches!(made[0], Ok(Ticked::Enqueued { .. })), "{made:?}");
}

pub async fn periodic_workers_enqueue_each_tick_once_and_list_the_schedule(env: &Env) {
    let every = Schedule::every(Duration::from_secs(1)).unwrap();
    let build = |n| {
        Worker::builder(env.client.backend())
            .queue("live_other")
            .periodic(every.clone(), LiveTick { n })
            .handle_signals(false)
            .build()
            .unwrap()
    };
    let (w1, w2) = (build(1), build(2));
    let start = now_ms(env).await;
    let r1 = start_serving(w1).await;
    let r2 = start_serving(w2).await;
    let q = env.queues();
    assert!(
        wait_for(Duration::from_secs(10), || async {
            env.all_messages("live_ticks").await.len() >= 3
        })
        .await,
        "three ticks within 10 s"
    );
    let listed = q.schedules().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let s = &listed[0];
    assert_eq!(
        (
            &s.name[..],
            &s.queue[..],
            &s.job[..],
            &s.schedule[..],
            s.workers
        ),
        ("live_tick", "live_ticks", "live_tick", "every 1s", 2)
    );
    // the job a tick sends, to send one now
    let body = s.body.as_deref().unwrap_or("");
    assert!(body.contains(r#""type":"live_tick""#), "{body}");
    assert_eq!(s.priority, 0);
    let last = s.last_ms.expect("a last tick");
    assert!(last.is_multiple_of(1000));
    assert!(
        s.next_ms
            .is_some_and(|n| n > last && n.is_multiple_of(1000)),
        "{s:?}"
    );
    r1.stop().await;
    r2.stop().await;
    let ticks: Vec<u64> = env
        .all_messages("live_ticks")
        .await
        .iter()
        .map(|(id, _, _)| id.sent_ms())
        .collect();
    let mut sorted = ticks.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        ticks.len(),
        "a tick enqueued twice: {ticks:?}"
    );
    for w in sorted.windows(2) {
        assert_eq!(w[1] - w[0], 1000, "a tick missed: {sorted:?}");
    }
    assert!(
        sorted[0] > start && sorted[0].is_multiple_of(1000),
        "{sorted:?} after {start}"
    );
    // the workers stopped: nothing ticks it any more, and it is not listed
    assert!(q.schedules().await.unwrap().is_empty());
}

pub async fn a_restarted_schedule_skips_missed_ticks_or_runs_the_last(env: &Env) {
    let q = env.client.backend();
    let msg = SendMessage::new(r#"{"type":"live_tick","args":{"n":9}}"#);
    let opts = QueueOptions::default();
    let now = now_ms(env).await;
    // hourly schedules whose last recorded tick is an hour before the last
    // one due: as if every worker had been down for that tick
    let hour = 3_600_000;
    let due = now - now % hour;
    let old = due - hour;
    for name in ["skips", "runs_last"] {
        q.tick("live_ticks", &tick(name, old, false), &msg, &opts)
            .await
            .unwrap();
    }
    let hourly = || Schedule::every(Duration::from_secs(3600)).unwrap();
    let worker = Worker::builder(env.client.backend())
        .queue("live_other")
        .periodic_job(Periodic::new(hourly(), LiveTick { n: 1 }).name("skips"))
        .periodic_job(
            Periodic::new(hourly(), LiveTick { n: 2 })
                .name("runs_last")
                .missed(Missed::RunLast),
        )
        .handle_signals(false)
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    let a = env.queues();
    assert!(
        wait_for(Duration::from_secs(10), || async {
            last(env, "live_ticks", &["runs_last"]).await[0] == Some(due)
        })
        .await,
        "the missed tick is caught up"
    );
    running.stop().await;
    // "skips" missed its tick and was not caught up
    assert_eq!(last(env, "live_ticks", &["skips"]).await, [Some(old)]);
    let schedules = a.schedules().await.unwrap();
    assert!(schedules.is_empty(), "{schedules:?}");
    let listed: Vec<(String, u64)> = env
        .all_messages("live_ticks")
        .await
        .into_iter()
        .map(|(id, body, _)| (body, id.sent_ms()))
        .collect();
    let at = |n: &str| -> Vec<u64> {
        let mut v: Vec<u64> = listed
            .iter()
            .filter(|(b, _)| b.contains(n))
            .map(|(_, t)| *t)
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(at(r#""n":1"#), Vec::<u64>::new(), "{listed:?}");
    assert_eq!(at(r#""n":2"#), [due], "{listed:?}");
    assert_eq!(at(r#""n":9"#), [old, old], "{listed:?}");
}

pub async fn a_schedule_name_none_could_have_is_refused_by_pause_and_resume(env: &Env) {
    let q = env.client.backend();
    let long = "x".repeat(201);
    // (a schedule's pause and next tick are stored beside its last tick, under
    // its name with these endings: a schedule so named would pause another)
    for name in ["", "\0", "a\nb", long.as_str(), "rep:paused", "rep:next"] {
        for pause in [true, false] {
            let r = if pause {
                q.pause_schedule("ticks", name).await
            } else {
                q.resume_schedule("ticks", name).await
            };
            match r {
                Err(Error::InvalidValue { what, .. }) => assert_eq!(what, "periodic job name"),
                other => panic!("{name:?} (pause {pause}): {other:?}"),
            }
        }
    }
    // a name one could have, ticked by no worker yet: paused for workers to come
    assert!(q.pause_schedule("ticks", "nightly").await.unwrap());
    assert!(q.resume_schedule("ticks", "nightly").await.unwrap());
}

pub async fn periodic_settings_are_checked_at_build(env: &Env) {
    assert!(Schedule::every(Duration::from_millis(999)).is_err());
    assert!(Schedule::every(Duration::from_secs(10_000_000)).is_err());
    for bad in ["", "* * *", "61 * * * *", "* * * * * * * *", "not cron"] {
        let err = Schedule::cron(bad).unwrap_err();
        assert!(matches!(err, Error::InvalidValue { .. }), "{bad:?}: {err}");
    }
    let s = || Schedule::every(Duration::from_secs(60)).unwrap();
    let build = |ps: Vec<Periodic>| {
        ps.into_iter()
            .fold(Worker::builder(env.client.backend()).queue("q"), |b, p| {
                b.periodic_job(p)
            })
            .build()
    };
    let twice = build(vec![
        Periodic::new(s(), LiveTick { n: 1 }),
        Periodic::new(s(), LiveTick { n: 2 }),
    ]);
    assert!(
        matches!(&twice, Err(Error::InvalidValue { what: "periodic", reason }) if reason.contains("live_tick")),
        "{twice:?}"
    );
    let named = build(vec![
        Periodic::new(s(), LiveTick { n: 1 }),
        Periodic::new(s(), LiveTick { n: 2 }).name("second"),
    ]);
    assert!(named.is_ok());
    for p in [
        Periodic::new(s(), LiveTick { n: 1 }).name(""),
        Periodic::new(s(), LiveTick { n: 1 }).name("a\nb"),
        Periodic::new(s(), LiveTick { n: 1 }).name("rep:paused"),
        Periodic::new(s(), LiveTick { n: 1 }).name("rep:next"),
        Periodic::new(s(), LiveTick { n: 1 }).queue("bad:queue"),
    ] {
        assert!(build(vec![p]).is_err());
    }
}

/// A run that starts or ends brings the worker's next beat forward: with a
/// lease of a minute (a heartbeat every 20 s), each of three jobs started one
/// after another, and then one's end, shows in the registry within seconds.
pub async fn each_run_starting_or_ending_shows_before_the_next_heartbeat(env: &Env) {
    let q = env.queues();
    let release = Arc::new(Notify::new());
    let worker = Worker::builder(env.client.backend())
        .register::<LiveBlock>()
        .concurrency(3)
        .lease(Duration::from_secs(60))
        .data(release.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    let listed = || async {
        let ws = q.workers().await.unwrap();
        ws.iter()
            .flat_map(|w| w.running.iter().map(|r| r.id.clone()))
            .collect::<Vec<_>>()
    };
    for n in 1..=3 {
        let job = env.client.enqueue(&LiveBlock).await.unwrap().to_string();
        assert!(
            wait_for(Duration::from_secs(5), || async {
                listed().await.contains(&job)
            })
            .await,
            "job {n} listed within 5 s: {:?}",
            listed().await
        );
    }
    release.notify_one();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            listed().await.len() == 2
        })
        .await,
        "an ended run gone from the list within 5 s: {:?}",
        listed().await
    );
    release.notify_one();
    release.notify_one();
    running.stop().await;
}

pub async fn workers_are_listed_with_their_jobs_and_gone_when_stopped_or_dead(env: &Env) {
    let q = env.queues();
    assert!(q.workers().await.unwrap().is_empty());
    let release = Arc::new(Notify::new());
    let worker = Worker::builder(env.client.backend())
        .register::<LiveBlock>()
        .concurrency(3)
        .lease(Duration::from_secs(3))
        .data(release.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let id = worker.id().to_string();
    assert_eq!(uuid_version(&id), Some('4'), "{id}");
    let before = now_ms(env).await;
    let running = start_serving(worker).await;
    let job = env.client.enqueue(&LiveBlock).await.unwrap();
    // the beat after the job started lists it (a beat each second)
    assert!(
        wait_for(Duration::from_secs(10), || async {
            q.workers()
                .await
                .unwrap()
                .iter()
                .any(|w| w.running.iter().any(|r| r.id == job.to_string()))
        })
        .await,
        "the running job listed"
    );
    let ws = q.workers().await.unwrap();
    assert_eq!(ws.len(), 1, "{ws:?}");
    let w = &ws[0];
    assert_eq!(w.id, id);
    assert_eq!(w.pid, std::process::id());
    assert_eq!(w.queues, ["live_block"]);
    assert_eq!(w.concurrency, 3);
    assert_eq!(w.version, env!("CARGO_PKG_VERSION"));
    assert!(!w.host.is_empty());
    assert!(w.started_at_ms >= before.saturating_sub(1000) && w.started_at_ms <= w.last_beat_ms);
    assert_eq!(w.expires_at_ms - w.last_beat_ms, 3000);
    let r = &w.running[0];
    assert_eq!(
        (&r.queue[..], r.job.as_deref()),
        ("live_block", Some("live_block"))
    );
    assert!(r.started_at_ms >= w.started_at_ms && r.started_at_ms <= w.last_beat_ms);
    release.notify_one();
    running.stop().await;
    assert!(
        q.workers().await.unwrap().is_empty(),
        "a stopped worker leaves"
    );

    // a worker that dies without leaving is gone once its ttl runs out
    let b = env.client.backend();
    let beat = br#"{"id":"dead","host":"h","pid":1,"version":"0","queues":[],"concurrency":1,"ttl_ms":1000,"up_ms":0}"#;
    b.beat("dead", beat, Duration::from_secs(1)).await.unwrap();
    b.beat("garbage", b"not json", Duration::from_secs(60))
        .await
        .unwrap();
    let listed = q.workers().await.unwrap();
    assert_eq!(
        listed.len(),
        1,
        "an unreadable entry is skipped: {listed:?}"
    );
    assert_eq!(listed[0].id, "dead");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(q.workers().await.unwrap().is_empty());
}

pub async fn an_idle_worker_stays_listed_as_it_was_and_comes_back_when_its_entry_is_lost(
    env: &Env,
) {
    let q = env.queues();
    let worker = Worker::builder(env.client.backend())
        .register::<LiveBlock>()
        // a beat every 500 ms; an idle worker's beats after the first only
        // move its entry on
        .lease(Duration::from_millis(1500))
        .handle_signals(false)
        .build()
        .unwrap();
    let id = worker.id().to_string();
    let running = start_serving(worker).await;
    let listed = || async { q.workers().await.unwrap().into_iter().find(|w| w.id == id) };
    assert!(
        wait_for(Duration::from_secs(5), || async {
            listed().await.is_some()
        })
        .await
    );
    let first = listed().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let later = listed().await.expect("still listed after three beats");
    assert!(
        later.last_beat_ms >= first.last_beat_ms + 1000,
        "its beats moved it on: {} then {}",
        first.last_beat_ms,
        later.last_beat_ms
    );
    // its start as first listed, not moved with the beats (which moved it on
    // by over a second)
    assert!(
        later.started_at_ms.abs_diff(first.started_at_ms) <= 50,
        "started {} then {}",
        first.started_at_ms,
        later.started_at_ms
    );
    // an entry lost (here: removed) is written again at the next beat
    let b = env.client.backend();
    b.beat(&id, b"", Duration::from_secs(1)).await.unwrap();
    assert!(listed().await.is_none());
    assert!(
        wait_for(Duration::from_secs(3), || async {
            listed().await.is_some()
        })
        .await,
        "listed again"
    );
    let back = listed().await.unwrap();
    assert!(back.started_at_ms.abs_diff(first.started_at_ms) <= 50);
    assert_eq!(back.queues, ["live_block"]);
    running.stop().await;
    assert!(listed().await.is_none(), "a stopped worker leaves");
}

/// The version digit of a UUID in text form.
fn uuid_version(id: &str) -> Option<char> {
    (id.len() == 36).then(|| id.chars().nth(14)).flatten()
}

/// `ticks_of` reads several queues' schedules together, each as `ticks` of
/// its queue reads it, in the order asked (a queue asked for no names gets
/// none, one that does not exist never-ticked schedules).
pub async fn ticks_of_reads_each_queue_as_its_own_ticks(env: &Env) {
    let a = env.client.backend();
    let msg = SendMessage::new(r#"{"type":"live_tick","args":{"n":1}}"#);
    let opts = QueueOptions::default();
    let now = now_ms(env).await;
    let at = now - now % 1000;
    for (queue, name) in [("tq-a", "x"), ("tq-b", "y"), ("tq-b", "z")] {
        a.tick(queue, &tick(name, at, false), &msg, &opts)
            .await
            .unwrap();
    }
    a.pause_schedule("tq-b", "z").await.unwrap();
    let q = env.queues();
    let asked = [
        ("tq-b", vec!["z", "never", "y"]),
        ("tq-none", vec!["x"]),
        ("tq-a", vec![]),
        ("tq-a", vec!["x"]),
    ];
    let together = q.ticks_of(&asked).await.unwrap();
    assert_eq!(together.len(), asked.len());
    for ((queue, names), got) in asked.iter().zip(&together) {
        assert_eq!(got, &q.ticks(queue, names).await.unwrap(), "{queue}");
    }
    assert_eq!(together[0][2].last_ms, Some(at));
    assert!(together[0][0].paused.is_some() && together[0][2].paused.is_none());
    assert_eq!(together[1][0].last_ms, None);
    assert!(together[2].is_empty());
    assert!(q.ticks_of(&[]).await.unwrap().is_empty());
}
