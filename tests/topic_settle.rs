//! How a subscriber's finished events are settled: a consumer retries and
//! dead-letters only the events it still holds, an acknowledgement deletes an
//! event's attempt records however it was delivered, a requeued dead letter
//! that is no event is dead-lettered again, and a subscription's concurrency
//! bounds its events running and read ahead together; a run cut short at
//! shutdown is no attempt. Each case runs on the
//! memory backend and on a private redis-server where both apply.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::RedisServer;
use redjob::Client;
use redjob::backend::memory::MemoryBackend;
use redjob::topic::{Event, EventId, EventOptions, EventSettle, Start, Subscription, Topics};
use serde::{Deserialize, Serialize};

/// A note whose handler fails its first run and asks to be retried a few
/// seconds later.
#[derive(Serialize, Deserialize, Event)]
#[event(name = "note", topic = "notes", max_attempts = 5)]
struct Note {
    n: u64,
}

/// "While an event waits for a retry, its records so far are in the hash
/// `ns:t:{T}:attempts:<subscriber>` (field: the event id), which its
/// acknowledgement deletes." An event that failed once (its record in the
/// hash) and is replayed by a rewind before its retry is read again by
/// `XREADGROUP`, which sets its delivery count back to 1; once handled, its
/// records are gone. The old code deleted them only for events the worker saw
/// "delivered before" (a count over 1), so the hash kept the record of a
/// handled event until the subscriber was deleted (and a later dead letter of
/// it showed that stale run).
#[tokio::test]
async fn an_event_replayed_before_its_retry_leaves_no_records_once_handled() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("notes", "s", Start::Beginning)
        .await
        .unwrap();
    let mut con = server.raw().await;
    let records = "rsmq:t:{notes}:attempts:s";
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let worker = redjob::Worker::builder(client.backend())
        .handle_signals(false)
        .lease(Duration::from_secs(5))
        .subscribe("s", move |_: Note, _ctx| {
            let seen = seen.clone();
            async move {
                if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(redjob::JobError::retry_after(
                        "down",
                        Duration::from_secs(5),
                    ));
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let running = common::start_serving(worker).await;
    client.publish(&Note { n: 1 }).await.unwrap();
    // its first run failed: its record waits with it for the retry
    let recorded = common::wait_for(Duration::from_secs(5), || {
        let mut con = con.clone();
        async move {
            let n: u64 = redis::cmd("HLEN")
                .arg(records)
                .query_async(&mut con)
                .await
                .unwrap();
            n == 1
        }
    })
    .await;
    assert!(recorded, "the failed run is recorded");
    // replayed before the retry is due: read again, handled
    client.rewind("notes", "s", Start::Beginning).await.unwrap();
    let handled = common::wait_for(Duration::from_secs(4), || {
        let client = client.clone();
        let calls = calls.clone();
        async move {
            let t = client.topic("notes").await.unwrap().unwrap();
            calls.load(Ordering::SeqCst) >= 2 && t.subscribers[0].pending == 0
        }
    })
    .await;
    running.stop().await;
    assert!(handled, "handled and acknowledged once replayed");
    let left: Vec<String> = redis::cmd("HKEYS")
        .arg(records)
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(
        left.is_empty(),
        "the acknowledged event's attempt records are still kept: {left:?}"
    );
}

/// A consumer whose hold on an event ran out (another consumer claimed it
/// and runs it now) then reports it given up: the settle leaves it to its new
/// holder, as a retry in the same case is. The old code dead-lettered it and
/// acknowledged it under the new holder: the subscriber got a dead letter of
/// an event its new holder then handled (a requeue ran it once more), and the
/// new holder's own retry of it found nothing pending and was dropped.
async fn a_settle_leaves_an_event_another_consumer_claimed_to_it(client: &Client) {
    let b = client.backend();
    client
        .subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    b.publish("orders", &[("placed", "{}")], &EventOptions::DEFAULT)
        .await
        .unwrap();
    let first = b
        .read("orders", "billing", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.len(), 1);
    // c1's hold ran out: c2 claims the event and runs it
    let claimed = b
        .claim("orders", "billing", "c2", Duration::ZERO, 10, EventId::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.events.len(), 1);
    // c1's run ends: it gives the event up
    let dead = EventSettle {
        dead: vec![(first[0].delivery(), first[0].clone(), "gave up".into())],
        ..EventSettle::default()
    };
    b.settle_events("orders", "billing", "c1", &dead, None)
        .await
        .unwrap();
    let s = client.topic("orders").await.unwrap().unwrap().subscribers[0].clone();
    assert_eq!(
        (s.pending, s.dead),
        (1, 0),
        "the event c2 holds was dead-lettered and acknowledged by c1, which no longer held it"
    );
}

#[tokio::test]
async fn a_settle_leaves_an_event_another_consumer_claimed_to_it_on_memory() {
    let client = Client::memory(MemoryBackend::new());
    a_settle_leaves_an_event_another_consumer_claimed_to_it(&client).await;
}

#[tokio::test]
async fn a_settle_leaves_an_event_another_consumer_claimed_to_it_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    a_settle_leaves_an_event_another_consumer_claimed_to_it(&client).await;
}

/// `Subscription::concurrency(n)`: "The most of its events running or read
/// ahead at once in this worker". With `concurrency(1)` and an event running,
/// the worker reads none ahead. The old code read the next one ahead as well
/// and held it (pending, renewed, so no other worker of the subscriber could
/// take it) while the first ran: two events running or read ahead where the
/// limit says one.
async fn a_subscriptions_concurrency_bounds_what_it_runs_and_reads_ahead(client: &Client) {
    client
        .subscribe("notes", "slow", Start::Beginning)
        .await
        .unwrap();
    client
        .publish_all(&[Note { n: 1 }, Note { n: 2 }, Note { n: 3 }])
        .await
        .unwrap();
    let started = Arc::new(AtomicU32::new(0));
    let seen = started.clone();
    let gate = tokio_util::sync::CancellationToken::new();
    let open = gate.clone();
    let worker = redjob::Worker::builder(client.backend())
        .handle_signals(false)
        .lease(Duration::from_secs(30))
        .subscribe(
            Subscription::new("slow").concurrency(1),
            move |_: Note, _ctx| {
                let (seen, open) = (seen.clone(), open.clone());
                async move {
                    seen.fetch_add(1, Ordering::SeqCst);
                    open.cancelled().await;
                    Ok(())
                }
            },
        )
        .build()
        .unwrap();
    let running = common::start(worker);
    assert!(
        common::wait_for(Duration::from_secs(5), || async {
            started.load(Ordering::SeqCst) == 1
        })
        .await
    );
    // time for a read ahead
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let s = client.topic("notes").await.unwrap().unwrap().subscribers[0].clone();
    gate.cancel();
    running.stop().await;
    assert!(
        s.pending <= 1,
        "concurrency(1) with one event running holds {} events (running or read ahead): {s:?}",
        s.pending
    );
}

#[tokio::test]
async fn a_subscriptions_concurrency_bounds_what_it_runs_and_reads_ahead_on_memory() {
    let client = Client::memory(MemoryBackend::new());
    a_subscriptions_concurrency_bounds_what_it_runs_and_reads_ahead(&client).await;
}

#[tokio::test]
async fn a_subscriptions_concurrency_bounds_what_it_runs_and_reads_ahead_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    a_subscriptions_concurrency_bounds_what_it_runs_and_reads_ahead(&client).await;
}

/// A worker serving subscriber `s` of `notes` with a handler that succeeds.
async fn serve_notes(client: &Client) -> common::Running {
    let worker = redjob::Worker::builder(client.backend())
        .handle_signals(false)
        .lease(Duration::from_secs(5))
        .subscribe("s", |_: Note, _ctx| async move { Ok(()) })
        .build()
        .unwrap();
    common::start_serving(worker).await
}

/// An entry with no `type` field (written by another program) is
/// dead-lettered as "not an event" with its type stored empty. Requeued, it
/// goes back with a `type` field that is empty, and is dead-lettered again as
/// what it is. The old code's worker took the empty type for an event type it
/// had no handler for: skipped and acknowledged, so the letter the operator
/// requeued was gone without a trace (no run, no dead letter, only the
/// skipped-events counter).
#[tokio::test]
async fn a_requeued_letter_that_is_no_event_is_dead_lettered_again_not_skipped() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("notes", "s", Start::Beginning)
        .await
        .unwrap();
    let mut con = server.raw().await;
    let _: String = redis::cmd("XADD")
        .arg("rsmq:t:{notes}")
        .arg("*")
        .arg("data")
        .arg(r#"{"n":1}"#)
        .query_async(&mut con)
        .await
        .unwrap();
    let running = serve_notes(&client).await;
    let sub = async || client.topic("notes").await.unwrap().unwrap().subscribers[0].clone();
    assert!(
        common::wait_for(Duration::from_secs(5), || async { sub().await.dead == 1 }).await,
        "dead-lettered as not an event"
    );
    let letter = client.dead_events("notes", "s", 10).await.unwrap();
    assert!(letter[0].error.contains("not an event"), "{letter:?}");
    assert_eq!(
        client.requeue_all_dead_events("notes", "s").await.unwrap(),
        1
    );
    let settled = common::wait_for(Duration::from_secs(5), || async {
        let s = sub().await;
        s.lag == 0 && s.pending == 0 && s.dead == 1
    })
    .await;
    let s = sub().await;
    running.stop().await;
    assert!(
        settled,
        "the requeued letter is neither dead again nor handled (skipped as an event type without a handler): {s:?}"
    );
}

/// Entries another program wrote with a `type` or `data` that is not UTF-8
/// are dead-lettered as "not an event", and their letters keep those bytes as
/// the topic held them (a requeue puts them back as they were). The old code
/// stored the letter's type or data empty: the event's content was lost once
/// the topic trimmed it.
#[tokio::test]
async fn a_dead_letter_keeps_the_bytes_of_an_entry_that_is_not_utf8() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("notes", "s", Start::Beginning)
        .await
        .unwrap();
    let mut con = server.raw().await;
    let bad_data: &[u8] = b"\xff\xfe{\"n\":1}";
    let bad_type: &[u8] = b"no\xffte";
    for (ty, data) in [(&b"note"[..], bad_data), (bad_type, &b"{\"n\":2}"[..])] {
        let _: String = redis::cmd("XADD")
            .arg("rsmq:t:{notes}")
            .arg("*")
            .arg("type")
            .arg(ty)
            .arg("data")
            .arg(data)
            .query_async(&mut con)
            .await
            .unwrap();
    }
    let running = serve_notes(&client).await;
    let dead = common::wait_for(Duration::from_secs(5), || async {
        client.topic("notes").await.unwrap().unwrap().subscribers[0].dead == 2
    })
    .await;
    running.stop().await;
    assert!(dead, "both dead-lettered");
    let letters: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
        .arg("rsmq:t:{notes}:dead:s")
        .arg("-")
        .arg("+")
        .query_async(&mut con)
        .await
        .unwrap();
    let field = |fields: &[Vec<u8>], name: &[u8]| -> Vec<u8> {
        fields
            .chunks(2)
            .find(|kv| kv[0] == name)
            .map(|kv| kv[1].clone())
            .unwrap_or_default()
    };
    assert_eq!(letters.len(), 2);
    assert_eq!(
        field(&letters[0].1, b"data"),
        bad_data,
        "the first letter's data"
    );
    assert_eq!(field(&letters[0].1, b"type"), b"note");
    assert_eq!(
        field(&letters[1].1, b"type"),
        bad_type,
        "the second letter's type"
    );
    assert_eq!(field(&letters[1].1, b"data"), b"{\"n\":2}");
}

/// An event of a single attempt.
#[derive(Serialize, Deserialize, Event)]
#[event(name = "once_note", topic = "once_notes", max_attempts = 1)]
struct OnceNote {
    n: u64,
}

/// "The same graceful shutdown as jobs" (the topics chapter): a run the
/// worker cuts short at shutdown, past its grace period, is no attempt, as a
/// job's released run is not (it is recorded `released`). The old code counted
/// it: an event of one attempt came back delivered twice and was
/// dead-lettered without ever running to its end.
async fn an_event_cut_short_at_shutdown_runs_again_though_it_has_one_attempt(client: &Client) {
    client
        .subscribe("once_notes", "s", Start::Beginning)
        .await
        .unwrap();
    client.publish(&OnceNote { n: 1 }).await.unwrap();
    let started = Arc::new(AtomicU32::new(0));
    let seen = started.clone();
    let worker = redjob::Worker::builder(client.backend())
        .handle_signals(false)
        .grace_period(Duration::from_millis(100))
        .subscribe("s", move |_: OnceNote, _ctx| {
            seen.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(())
            }
        })
        .build()
        .unwrap();
    let running = common::start(worker);
    assert!(
        common::wait_for(Duration::from_secs(5), || async {
            started.load(Ordering::SeqCst) == 1
        })
        .await
    );
    // past the grace period: the run is cut short
    running.stop().await;
    let handled = Arc::new(AtomicU32::new(0));
    let done = handled.clone();
    let worker = redjob::Worker::builder(client.backend())
        .handle_signals(false)
        .subscribe("s", move |_: OnceNote, _ctx| {
            done.fetch_add(1, Ordering::SeqCst);
            async move { Ok(()) }
        })
        .build()
        .unwrap();
    let running = common::start(worker);
    let ran = common::wait_for(Duration::from_secs(10), || async {
        handled.load(Ordering::SeqCst) == 1
    })
    .await;
    running.stop().await;
    let dead = client.dead_events("once_notes", "s", 10).await.unwrap();
    assert!(
        ran && dead.is_empty(),
        "the event cut short at shutdown did not run again; dead letters: {dead:?}"
    );
}

#[tokio::test]
async fn an_event_cut_short_at_shutdown_runs_again_though_it_has_one_attempt_on_memory() {
    let client = Client::memory(MemoryBackend::new());
    an_event_cut_short_at_shutdown_runs_again_though_it_has_one_attempt(&client).await;
}

#[tokio::test]
async fn an_event_cut_short_at_shutdown_runs_again_though_it_has_one_attempt_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    an_event_cut_short_at_shutdown_runs_again_though_it_has_one_attempt(&client).await;
}
