//! The attempt records of a replayed event: a rewind's read delivers an
//! event anew (count 1), and its history starts over even when the replay's
//! first run leaves no record (its consumer died); a claim that carries an
//! event across a rewind (no read delivered it anew) keeps its records. The
//! same on every backend.

use std::time::{Duration, Instant};

use redjob::backend::any::AnyBackend;
use redjob::inspect::AttemptOutcome;
use redjob::topic::{Event, EventId, EventRun, EventSettle, Received, Start, Topics};
use serde::{Deserialize, Serialize};

use crate::Env;

#[derive(Serialize, Deserialize, Event)]
#[event(name = "rerun", topic = "reruns")]
struct Rerun {
    n: u64,
}

/// The records of run `n` of event `id`, failed with `error` just now.
fn failed(id: EventId, n: u32, error: &str) -> EventRun {
    let now = Instant::now();
    EventRun::new(id, n, now, now, AttemptOutcome::Error, Some(error.into()))
}

/// One event read by `consumer` (count 1 unless a replay says otherwise).
async fn read(b: &AnyBackend, consumer: &str) -> Received {
    let got = b
        .read("reruns", "s", consumer, 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    got[0].clone()
}

/// Event `id` as a claim by `consumer` takes it (with every other idle one).
async fn claim(b: &AnyBackend, consumer: &str, id: EventId) -> Received {
    let got = b
        .claim("reruns", "s", consumer, Duration::ZERO, 10, EventId::ZERO)
        .await
        .unwrap()
        .unwrap()
        .events;
    got.into_iter().find(|e| e.id == id).expect("claimed")
}

/// `consumer` settles event `e` as a retry, recording its run failed.
async fn retry(b: &AnyBackend, consumer: &str, e: &Received, error: &str) {
    let s = EventSettle {
        retries: vec![(e.delivery(), Duration::from_secs(600), None)],
        runs: vec![failed(e.id, e.deliveries, error)],
        ..EventSettle::default()
    };
    b.settle_events("reruns", "s", consumer, &s, None)
        .await
        .unwrap();
}

/// `consumer` dead-letters event `e`, then the records its letter lists.
async fn bury(b: &AnyBackend, c: &redjob::Client, consumer: &str, e: &Received) -> Vec<String> {
    let s = EventSettle {
        dead: vec![(e.delivery(), e.clone(), "gone for good".into())],
        runs: vec![failed(e.id, e.deliveries, "gone for good")],
        ..EventSettle::default()
    };
    b.settle_events("reruns", "s", consumer, &s, None)
        .await
        .unwrap();
    let letters = c.dead_events("reruns", "s", 10).await.unwrap();
    assert_eq!(letters.len(), 1);
    letters[0]
        .runs
        .iter()
        .map(|a| match a.outcome {
            AttemptOutcome::LeaseLost => format!("{} lease_lost", a.number),
            _ => format!("{} {}", a.number, a.error.as_deref().unwrap_or("?")),
        })
        .collect()
}

/// An event failed twice (records 1 and 2), then replayed by a rewind: the
/// replay's first run dies with its consumer (no record), a claim takes it
/// (count 2) and its runs 2 and 3 fail. Its dead letter lists the replay's
/// history alone: the lost first run, then runs 2 and 3. The old code kept
/// the first delivery's records (the replay's first run never replaced
/// them), recorded no lost run (the claim took the old record 2 for it) and
/// skipped the replay's run 2 (numbered at or below the old records): the
/// letter listed the old runs 1 and 2, then the replay's 3.
pub async fn a_replay_whose_first_run_died_starts_its_records_over(env: &Env) {
    let (c, b) = (&env.client, &env.queues());
    c.subscribe("reruns", "s", Start::Beginning).await.unwrap();
    let id = c.publish(&Rerun { n: 1 }).await.unwrap();
    let first = read(b, "c1").await;
    retry(b, "c1", &first, "old 1").await;
    let second = claim(b, "c1", id).await;
    assert_eq!(second.deliveries, 2);
    retry(b, "c1", &second, "old 2").await;
    c.rewind("reruns", "s", Start::Beginning).await.unwrap();
    // the replay's first delivery: its consumer dies with it
    let replay = read(b, "gone").await;
    assert_eq!((replay.id, replay.deliveries), (id, 1));
    let taken = claim(b, "c2", id).await;
    assert_eq!(taken.deliveries, 2);
    retry(b, "c2", &taken, "new 2").await;
    let last = claim(b, "c2", id).await;
    assert_eq!(last.deliveries, 3);
    assert_eq!(
        bury(b, c, "c2", &last).await,
        ["1 lease_lost", "2 new 2", "3 gone for good"],
        "the replay's records alone"
    );
}

/// A rewind that moves a subscriber back but not past an event waiting for
/// its retry leaves that event's delivery going on: the claim that takes it
/// in the new epoch continues its count, and its records (of the epoch
/// before) stay with it.
pub async fn a_claim_across_a_rewind_keeps_the_records_of_the_count_it_continues(env: &Env) {
    let (c, b) = (&env.client, &env.queues());
    c.subscribe("reruns", "s", Start::Beginning).await.unwrap();
    let id = c.publish(&Rerun { n: 1 }).await.unwrap();
    let first = read(b, "c1").await;
    retry(b, "c1", &first, "old 1").await;
    let second = claim(b, "c1", id).await;
    retry(b, "c1", &second, "old 2").await;
    // the subscriber takes a second event; back to its id: a read would
    // deliver the second anew, not the first
    c.publish(&Rerun { n: 2 }).await.unwrap();
    let other = read(b, "c1").await;
    assert_ne!(other.id, id);
    c.rewind("reruns", "s", Start::At(other.id)).await.unwrap();
    let taken = claim(b, "c2", id).await;
    assert_eq!((taken.id, taken.deliveries), (id, 3));
    assert_eq!(
        bury(b, c, "c2", &taken).await,
        ["1 old 1", "2 old 2", "3 gone for good"],
        "the records of the count the claim continued"
    );
}

/// The case the records cannot tell (docs/topics.md): an event with one
/// recorded run, replayed, whose replay's first run dies with its consumer.
/// The claim (count 2) sees a record numbered just below its count, as a
/// claim continuing a delivery does, and keeps it: the letter lists the old
/// run 1 in place of the replay's lost one.
pub async fn a_replay_whose_lone_recorded_run_died_keeps_that_record(env: &Env) {
    let (c, b) = (&env.client, &env.queues());
    c.subscribe("reruns", "s", Start::Beginning).await.unwrap();
    let id = c.publish(&Rerun { n: 1 }).await.unwrap();
    let first = read(b, "c1").await;
    retry(b, "c1", &first, "old 1").await;
    c.rewind("reruns", "s", Start::Beginning).await.unwrap();
    let replay = read(b, "gone").await;
    assert_eq!((replay.id, replay.deliveries), (id, 1));
    let taken = claim(b, "c2", id).await;
    assert_eq!(taken.deliveries, 2);
    assert_eq!(
        bury(b, c, "c2", &taken).await,
        ["1 old 1", "2 gone for good"],
        "the old record stands for the lost run"
    );
}
