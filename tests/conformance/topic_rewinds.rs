//! A rewind over events a subscriber holds: one running when it is rewound
//! runs again once it ended (a replay, as Kafka's seek back gives), with a
//! fresh delivery count; one waiting for a retry is delivered again with a
//! fresh count, and its records start over with the replay's first run: the
//! same on every backend.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redjob::inspect::AttemptOutcome;
use redjob::topic::{Event, EventId, EventRun, EventSettle, Renewed, Start, Topics};
use redjob::{JobError, Worker};
use serde::{Deserialize, Serialize};

use crate::Env;
use crate::common::{start, wait_for};

#[derive(Serialize, Deserialize, Event)]
#[event(name = "reel", topic = "reels", max_attempts = 3)]
struct Reel {
    n: u64,
}

/// An event running when its subscriber is rewound past it is delivered
/// again by the worker's next read; it runs again, once, after the run under
/// way ended, with a fresh delivery count (attempt 1), as every event the
/// rewind passes does. The old code took the delivery for the one it ran
/// (its run "held it here"), and that run's acknowledgement settled the
/// replay: the event was not replayed at all.
pub async fn an_event_running_when_rewound_runs_again_once_it_ended(env: &Env) {
    let c = &env.client;
    c.subscribe("reels", "s", Start::Beginning).await.unwrap();
    let runs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (to, open) = (runs.clone(), gate.clone());
    let w = Worker::builder(c.backend())
        .handle_signals(false)
        .lease(Duration::from_secs(1))
        .subscribe("s", move |e: Reel, ctx| {
            let (to, open) = (to.clone(), open.clone());
            async move {
                let first = {
                    let mut r = to.lock().unwrap();
                    r.push((e.n, ctx.attempt()));
                    r.len() == 1
                };
                if first {
                    // the first run waits (held, renewed) for the rewind
                    open.acquire().await.unwrap().forget();
                }
                Ok::<(), JobError>(())
            }
        })
        .build()
        .unwrap();
    let running = start(w);
    c.publish(&Reel { n: 1 }).await.unwrap();
    let ran = wait_for(Duration::from_secs(5), || async {
        runs.lock().unwrap().len() == 1
    })
    .await;
    assert!(ran, "the event runs");
    c.rewind("reels", "s", Start::Beginning).await.unwrap();
    // the worker reads the event again while it runs
    let read = wait_for(Duration::from_secs(5), || async {
        c.topic("reels").await.unwrap().unwrap().subscribers[0].lag == 0
    })
    .await;
    assert!(read, "read again after the rewind");
    gate.add_permits(1);
    let settled = wait_for(Duration::from_secs(10), || async {
        let s = &c.topic("reels").await.unwrap().unwrap().subscribers[0];
        runs.lock().unwrap().len() >= 2 && s.pending == 0
    })
    .await;
    // no third run comes later
    tokio::time::sleep(Duration::from_secs(2)).await;
    running.stop().await;
    let s = c.topic("reels").await.unwrap().unwrap().subscribers[0].clone();
    assert!(settled, "runs {:?}, {s:?}", runs.lock().unwrap());
    assert_eq!(
        *runs.lock().unwrap(),
        [(1, 1), (1, 1)],
        "the running event replayed once, as a fresh delivery"
    );
    assert_eq!((s.pending, s.dead), (0, 0));
}

/// The records of run `n` of event `id`, failed with `error` just now.
fn failed(id: EventId, n: u32, error: &str) -> EventRun {
    let now = Instant::now();
    EventRun::new(id, n, now, now, AttemptOutcome::Error, Some(error.into()))
}

/// An event waiting for its retry (two runs recorded) is delivered again by a
/// read after a rewind: its delivery count starts over (all its attempts
/// again), on Redis (`XREADGROUP` sets it to 1) as in memory, and its records
/// start over with the replay's first run, which a dead letter then lists
/// alone. The old code kept the records on Redis and skipped the replay's
/// runs numbered at or below them (a dead letter listed the old runs), and
/// dropped them in memory.
pub async fn an_event_replayed_while_it_waits_for_a_retry_starts_its_count_and_records_over(
    env: &Env,
) {
    let (c, b) = (&env.client, env.queues());
    c.subscribe("reels", "s", Start::Beginning).await.unwrap();
    let id = c.publish(&Reel { n: 1 }).await.unwrap();
    let read = |b: redjob::backend::any::AnyBackend| async move {
        b.read("reels", "s", "c1", 10, Duration::ZERO)
            .await
            .unwrap()
            .unwrap()
    };
    let got = read(b.clone()).await;
    assert_eq!((got[0].id, got[0].deliveries), (id, 1));
    let retry = |d, n: u32| EventSettle {
        retries: vec![(d, Duration::from_secs(600), None)],
        runs: vec![failed(id, n, &format!("down {n}"))],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c1", &retry(got[0].delivery(), 1), None)
        .await
        .unwrap();
    let claimed = b
        .claim("reels", "s", "c1", Duration::ZERO, 10, EventId::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.events[0].deliveries, 2);
    b.settle_events(
        "reels",
        "s",
        "c1",
        &retry(claimed.events[0].delivery(), 2),
        None,
    )
    .await
    .unwrap();
    // replayed: a read delivers it again, a fresh delivery
    c.rewind("reels", "s", Start::Beginning).await.unwrap();
    let again = read(b.clone()).await;
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].id, again[0].deliveries),
        (id, 1),
        "a replay's delivery count starts over"
    );
    // its first run fails for good: the dead letter lists the replay's run
    let dead = EventSettle {
        dead: vec![(
            again[0].delivery(),
            again[0].clone(),
            "gone for good".into(),
        )],
        runs: vec![failed(id, 1, "gone for good")],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c1", &dead, None)
        .await
        .unwrap();
    let letters = c.dead_events("reels", "s", 10).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!((letters[0].id, letters[0].deliveries), (id, 1));
    let records: Vec<(u32, Option<&str>)> = letters[0]
        .runs
        .iter()
        .map(|a| (a.number, a.error.as_deref()))
        .collect();
    assert_eq!(records, [(1, Some("gone for good"))]);
}

/// A late outcome of a delivery that a rewind's read replaced (the settle
/// call of the old run lands after the read that delivered the event anew)
/// is not applied to the replay: its acknowledgement leaves the replay
/// pending, its retry does not make it claimable, its dead letter is not
/// written; the replay's own outcomes are. The old code applied them to the
/// replay (an ack removed its pending entry: its failure was not retried, and
/// it was lost if its consumer died), as both counts are 1.
pub async fn a_late_outcome_of_a_delivery_a_rewind_replaced_is_not_applied_to_the_replay(
    env: &Env,
) {
    let (c, b) = (&env.client, env.queues());
    c.subscribe("reels", "s", Start::Beginning).await.unwrap();
    let id = c.publish(&Reel { n: 1 }).await.unwrap();
    let read = || async {
        b.read("reels", "s", "c1", 10, Duration::ZERO)
            .await
            .unwrap()
            .unwrap()
    };
    let old = read().await;
    c.rewind("reels", "s", Start::Beginning).await.unwrap();
    let new = read().await;
    assert_eq!((new[0].id, new[0].deliveries), (id, 1));
    let pending = || async { c.topic("reels").await.unwrap().unwrap().subscribers[0].pending };
    let idle = Duration::from_secs(600);
    let late = EventSettle {
        acks: vec![old[0].delivery()],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c1", &late, None)
        .await
        .unwrap();
    assert_eq!(pending().await, 1, "the old run's ack took the replay");
    let late = EventSettle {
        retries: vec![(old[0].delivery(), idle, None)],
        runs: vec![failed(id, 1, "old")],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c1", &late, None)
        .await
        .unwrap();
    let late = EventSettle {
        dead: vec![(old[0].delivery(), old[0].clone(), "old".into())],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c1", &late, None)
        .await
        .unwrap();
    let claim = || async {
        b.claim("reels", "s", "c2", idle, 10, EventId::ZERO)
            .await
            .unwrap()
            .unwrap()
            .events
    };
    assert!(claim().await.is_empty(), "the old run's retry was set");
    assert!(c.dead_events("reels", "s", 10).await.unwrap().is_empty());
    // the replay's own retry is applied: claimed with its count
    let own = EventSettle {
        retries: vec![(new[0].delivery(), idle, None)],
        runs: vec![failed(id, 1, "replay")],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c1", &own, None)
        .await
        .unwrap();
    let claimed = claim().await;
    assert_eq!((claimed.len(), claimed[0].deliveries), (1, 2));
    let own = EventSettle {
        acks: vec![claimed[0].delivery()],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c2", &own, None)
        .await
        .unwrap();
    assert_eq!(pending().await, 0);
}

/// A late retry or dead letter of a consumer whose delivery another consumer
/// claimed since (its hold ran out) is left to the claimer; a late
/// acknowledgement of it is applied (the event was handled: the claimer's run
/// is a second one, and finds it gone), as an acknowledgement checks only the
/// subscriber's epoch (an `XPENDING` an acknowledged event would cost Redis
/// more than the `XACK`).
pub async fn a_late_outcome_of_a_delivery_another_consumer_claimed_is_left_to_it_but_an_ack(
    env: &Env,
) {
    let (c, b) = (&env.client, env.queues());
    c.subscribe("reels", "s", Start::Beginning).await.unwrap();
    let id = c.publish(&Reel { n: 1 }).await.unwrap();
    let old = b
        .read("reels", "s", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let claimed = b
        .claim("reels", "s", "c2", Duration::ZERO, 10, EventId::ZERO)
        .await
        .unwrap()
        .unwrap()
        .events;
    assert_eq!((claimed[0].id, claimed[0].deliveries), (id, 2));
    let late = EventSettle {
        retries: vec![(old[0].delivery(), Duration::from_secs(600), None)],
        runs: vec![failed(id, 1, "old")],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c1", &late, None)
        .await
        .unwrap();
    let late = EventSettle {
        dead: vec![(old[0].delivery(), old[0].clone(), "old".into())],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c1", &late, None)
        .await
        .unwrap();
    assert!(c.dead_events("reels", "s", 10).await.unwrap().is_empty());
    let found = b.renew("reels", "s", "c2", &[id]).await.unwrap();
    assert_eq!(found, [Renewed::Held], "the old consumer's retry took it");
    let late = EventSettle {
        acks: vec![old[0].delivery()],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c1", &late, None)
        .await
        .unwrap();
    let s = c.topic("reels").await.unwrap().unwrap().subscribers[0].clone();
    assert_eq!(s.pending, 0, "{s:?}");
    let found = b.renew("reels", "s", "c2", &[id]).await.unwrap();
    assert_eq!(found, [Renewed::Gone]);
}

/// A claim may carry an event across a rewind into the new epoch (its
/// consumer died holding it; the claim after the rewind returns the epoch of
/// now), where a read then delivers it anew (count 1). The claimer's late
/// acknowledgement is not applied to that delivery: the read's run settles
/// it (found by a review: the ack checked only the epoch, and took the
/// replay's entry, whose failure was then not retried).
pub async fn a_claimed_deliverys_late_ack_is_not_applied_to_a_read_that_delivered_it_anew(
    env: &Env,
) {
    let (c, b) = (&env.client, env.queues());
    c.subscribe("reels", "s", Start::Beginning).await.unwrap();
    let id = c.publish(&Reel { n: 1 }).await.unwrap();
    let first = b
        .read("reels", "s", "gone", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.len(), 1);
    c.rewind("reels", "s", Start::Beginning).await.unwrap();
    let claimed = b
        .claim("reels", "s", "c2", Duration::ZERO, 10, EventId::ZERO)
        .await
        .unwrap()
        .unwrap()
        .events;
    assert_eq!((claimed[0].id, claimed[0].deliveries), (id, 2));
    let anew = b
        .read("reels", "s", "c3", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((anew[0].id, anew[0].deliveries), (id, 1));
    let late = EventSettle {
        acks: vec![claimed[0].delivery()],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c2", &late, None)
        .await
        .unwrap();
    let found = b.renew("reels", "s", "c3", &[id]).await.unwrap();
    assert_eq!(
        found,
        [Renewed::Held],
        "the claimer's ack took the read's delivery"
    );
    let own = EventSettle {
        acks: vec![anew[0].delivery()],
        ..EventSettle::default()
    };
    b.settle_events("reels", "s", "c3", &own, None)
        .await
        .unwrap();
    let s = c.topic("reels").await.unwrap().unwrap().subscribers[0].clone();
    assert_eq!(s.pending, 0, "{s:?}");
}
