//! Topics: publish, subscribers from each start, replay, competing consumers,
//! claims after a consumer dies, retries and dead letters, retention, ordering,
//! bad input and a topic deleted under a worker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redjob::inspect::AttemptOutcome;
use redjob::topic::{Event, EventId, EventRun, EventSettle, Start, Subscription, Topics};
use redjob::{Error, JobError, RetryPolicy, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{start, wait_for};

#[derive(Serialize, Deserialize, Event, Clone)]
#[event(name = "order_placed", topic = "orders")]
struct OrderPlaced {
    n: u64,
}

#[derive(Serialize, Deserialize, Event)]
#[event(name = "order_shipped", topic = "orders")]
struct OrderShipped {
    n: u64,
}

#[derive(Serialize, Deserialize, Event)]
#[event(name = "tick", topic = "ticks", max_len = 100)]
struct Tick {
    n: u64,
}

#[derive(Serialize, Deserialize, Event)]
#[event(name = "slot", topic = "slots", max_len = 5, when_full = "refuse")]
struct Slot {
    n: u64,
}

#[derive(Serialize, Deserialize, Event)]
#[event(name = "reading", topic = "readings", max_age = "1s")]
struct Reading {
    n: u64,
}

#[derive(Serialize, Deserialize, Event)]
#[event(name = "flaky", topic = "flaky", max_attempts = 3, backoff = "100ms")]
struct Flaky {
    n: u64,
}

/// Handler runs by subscriber: (event n, attempt).
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Runs>>);

type Runs = HashMap<String, Vec<(u64, u32)>>;

impl Seen {
    fn add(&self, who: &str, n: u64, attempt: u32) {
        self.0
            .lock()
            .unwrap()
            .entry(who.into())
            .or_default()
            .push((n, attempt));
    }
    fn of(&self, who: &str) -> Vec<(u64, u32)> {
        self.0.lock().unwrap().get(who).cloned().unwrap_or_default()
    }
    fn count(&self, who: &str) -> usize {
        self.of(who).len()
    }
}

fn worker(env_backend: redjob::backend::any::AnyBackend) -> redjob::worker::WorkerBuilder {
    Worker::builder(env_backend)
        .handle_signals(false)
        .lease(Duration::from_secs(1))
        .retry(
            RetryPolicy::exponential(Duration::from_secs(60))
                .unwrap()
                .jitter(false),
        )
}

/// A worker whose subscriber records each `OrderPlaced` it handles as "b".
fn recording(env: &Env, sub: impl Into<Subscription>, seen: &Seen) -> Worker {
    let seen = seen.clone();
    worker(env.client.backend())
        .subscribe(sub, move |e: OrderPlaced, ctx| {
            let seen = seen.clone();
            async move {
                seen.add("b", e.n, ctx.attempt());
                Ok(())
            }
        })
        .build()
        .unwrap()
}

async fn ids_read(env: &Env, sub: &str) -> Vec<EventId> {
    let got = env
        .queues()
        .read("orders", sub, "c", 100, Duration::ZERO)
        .await
        .unwrap()
        .expect("the subscriber exists");
    got.iter().map(|e| e.id).collect()
}

/// The ids whose attempt records subscriber `sub` of `topic` keeps on Redis
/// (none on another backend, which keeps them with its pending events).
async fn attempt_records(env: &Env, topic: &str, sub: &str) -> Vec<String> {
    if !env.is_redis() {
        return Vec::new();
    }
    redis::cmd("HKEYS")
        .arg(env.topic_key(topic, &format!(":attempts:{sub}")))
        .query_async(&mut env.raw().await)
        .await
        .unwrap()
}

/// The record of run `n` of event `id`, failed just now.
fn failed_run(id: EventId, n: u32) -> EventRun {
    let now = std::time::Instant::now();
    EventRun::new(id, n, now, now, AttemptOutcome::Error, Some("down".into()))
}

pub async fn subscribers_start_at_the_beginning_the_end_an_id_or_a_time(env: &Env) {
    let c = &env.client;
    let a = c.publish(&OrderPlaced { n: 1 }).await.unwrap();
    let b = c.publish(&OrderPlaced { n: 2 }).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let d = c.publish(&OrderShipped { n: 3 }).await.unwrap();
    assert!(a < b && b < d && d.ms() > b.ms());
    for (name, start) in [
        ("begin", Start::Beginning),
        ("end", Start::End),
        ("at", Start::At(b)),
        ("time", Start::Time(d.time())),
    ] {
        assert!(c.subscribe("orders", name, start).await.unwrap(), "{name}");
    }
    // an existing subscriber keeps its offset
    assert!(
        !c.subscribe("orders", "end", Start::Beginning)
            .await
            .unwrap()
    );
    let info = c.topic("orders").await.unwrap().unwrap();
    assert_eq!((info.length, info.published), (3, 3));
    assert_eq!((info.first, info.last), (Some(a), Some(d)));
    assert!(info.memory > 0);
    let lag: Vec<(String, u64)> = info
        .subscribers
        .iter()
        .map(|s| (s.name.clone(), s.lag))
        .collect();
    assert_eq!(
        lag,
        [
            ("at".into(), 2),
            ("begin".into(), 3),
            ("end".into(), 0),
            ("time".into(), 1)
        ]
    );
    assert_eq!(ids_read(env, "begin").await, [a, b, d]);
    assert_eq!(ids_read(env, "end").await, []);
    assert_eq!(ids_read(env, "at").await, [b, d]);
    assert_eq!(ids_read(env, "time").await, [d]);
    let e = c.publish(&OrderPlaced { n: 4 }).await.unwrap();
    assert_eq!(ids_read(env, "end").await, [e]);
    let info = c.topic("orders").await.unwrap().unwrap();
    let begin = info.subscribers.iter().find(|s| s.name == "begin").unwrap();
    assert_eq!(
        (begin.offset, begin.pending, begin.lag, begin.consumers),
        (d, 3, 1, 1)
    );
    assert!(c.topic("nothing").await.unwrap().is_none());
    assert_eq!(c.topics().await.unwrap(), ["orders"]);
    c.subscribe("a-new-one", "s", Start::End).await.unwrap();
    assert_eq!(c.topics().await.unwrap(), ["a-new-one", "orders"]);
    assert!(c.delete_topic("orders").await.unwrap());
    assert_eq!(c.topics().await.unwrap(), ["a-new-one"]);
}

pub async fn a_rewind_replays_from_the_beginning_an_id_or_skips_to_the_end(env: &Env) {
    let c = &env.client;
    c.subscribe("orders", "audit", Start::Beginning)
        .await
        .unwrap();
    let ids = c
        .publish_all(&[
            OrderPlaced { n: 1 },
            OrderPlaced { n: 2 },
            OrderPlaced { n: 3 },
        ])
        .await
        .unwrap();
    let q = env.queues();
    let got = q
        .read("orders", "audit", "c", 100, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    let acks = redjob::topic::EventSettle {
        acks: got.iter().map(|e| e.delivery()).collect(),
        ..Default::default()
    };
    q.settle_events("orders", "audit", "c", &acks, None)
        .await
        .unwrap();
    let sub = |info: redjob::topic::TopicInfo| info.subscribers[0].clone();
    let s = sub(c.topic("orders").await.unwrap().unwrap());
    assert_eq!((s.pending, s.lag), (0, 0));

    c.rewind("orders", "audit", Start::Beginning).await.unwrap();
    assert_eq!(sub(c.topic("orders").await.unwrap().unwrap()).lag, 3);
    assert_eq!(ids_read(env, "audit").await, ids);
    c.rewind("orders", "audit", Start::At(ids[1]))
        .await
        .unwrap();
    assert_eq!(sub(c.topic("orders").await.unwrap().unwrap()).lag, 2);
    assert_eq!(ids_read(env, "audit").await, ids[1..]);
    c.rewind("orders", "audit", Start::Beginning).await.unwrap();
    c.rewind("orders", "audit", Start::End).await.unwrap();
    assert_eq!(sub(c.topic("orders").await.unwrap().unwrap()).lag, 0);
    assert_eq!(ids_read(env, "audit").await, []);
    // a point later than the newest event and than now would skip every
    // event published until then: refused, the subscriber left where it was
    let century = Duration::from_secs(100 * 365 * 86_400);
    let later = std::time::SystemTime::now() + century;
    let later_ms = later
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for to in [Start::Time(later), Start::At(EventId::new(later_ms, 0))] {
        match c.rewind("orders", "audit", to).await {
            Err(Error::InvalidValue { what, .. }) => assert_eq!(what, "rewind"),
            other => panic!("{to:?}: {other:?}"),
        }
    }
    let next = c.publish(&OrderPlaced { n: 4 }).await.unwrap();
    assert_eq!(ids_read(env, "audit").await, [next]);
    // "now" by a clock a little ahead of the backend's: taken, a skip to the
    // end as of then
    let ahead = std::time::SystemTime::now() + Duration::from_secs(5);
    c.rewind("orders", "audit", Start::Time(ahead))
        .await
        .unwrap();

    match c.rewind("orders", "nobody", Start::Beginning).await {
        Err(Error::SubscriberNotFound { topic, subscriber }) => {
            assert_eq!((topic.as_str(), subscriber.as_str()), ("orders", "nobody"))
        }
        other => panic!("{other:?}"),
    }
    assert!(c.unsubscribe("orders", "audit").await.unwrap());
    assert!(!c.unsubscribe("orders", "audit").await.unwrap());
    assert!(
        c.topic("orders")
            .await
            .unwrap()
            .unwrap()
            .subscribers
            .is_empty()
    );
}

pub async fn consumers_of_one_subscriber_share_its_events_and_each_subscriber_gets_all(env: &Env) {
    let c = &env.client;
    for s in ["billing", "audit"] {
        c.subscribe("orders", s, Start::Beginning).await.unwrap();
    }
    let seen = Seen::default();
    let mut running = Vec::new();
    for (who, sub) in [
        ("billing-1", "billing"),
        ("billing-2", "billing"),
        ("audit", "audit"),
    ] {
        let seen = seen.clone();
        let client = env.another_client().await;
        let w = worker(client.backend())
            .concurrency(4)
            .subscribe(sub, move |e: OrderPlaced, ctx| {
                let seen = seen.clone();
                async move {
                    seen.add(who, e.n, ctx.attempt());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    Ok(())
                }
            })
            .build()
            .unwrap();
        running.push(start(w));
    }
    let events: Vec<OrderPlaced> = (0..300).map(|n| OrderPlaced { n }).collect();
    for chunk in events.chunks(50) {
        c.publish_all(chunk).await.unwrap();
    }
    let done = wait_for(Duration::from_secs(20), || async {
        seen.count("billing-1") + seen.count("billing-2") >= 300 && seen.count("audit") >= 300
    })
    .await;
    assert!(
        done,
        "handled: {} {} {}",
        seen.count("billing-1"),
        seen.count("billing-2"),
        seen.count("audit")
    );
    let mut billing: Vec<u64> = seen
        .of("billing-1")
        .iter()
        .chain(seen.of("billing-2").iter())
        .map(|(n, _)| *n)
        .collect();
    billing.sort_unstable();
    assert_eq!(
        billing,
        (0..300).collect::<Vec<_>>(),
        "each event once in billing"
    );
    let mut audit: Vec<u64> = seen.of("audit").iter().map(|(n, _)| *n).collect();
    audit.sort_unstable();
    assert_eq!(
        audit,
        (0..300).collect::<Vec<_>>(),
        "each event once in audit"
    );
    let ok = wait_for(Duration::from_secs(5), || async {
        c.topic("orders")
            .await
            .unwrap()
            .unwrap()
            .subscribers
            .iter()
            .all(|s| s.pending == 0 && s.lag == 0)
    })
    .await;
    assert!(ok, "{:?}", c.topic("orders").await.unwrap());
    for r in running {
        r.stop().await;
    }
    // a clean stop leaves no consumer behind
    let info = c.topic("orders").await.unwrap().unwrap();
    assert!(
        info.subscribers.iter().all(|s| s.consumers == 0),
        "{info:?}"
    );
}

pub async fn events_of_a_dead_consumer_are_claimed_after_the_lease(env: &Env) {
    let c = &env.client;
    c.subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    c.publish_all(&[OrderPlaced { n: 1 }, OrderPlaced { n: 2 }])
        .await
        .unwrap();
    // a consumer takes both and dies without acknowledging
    let taken = env
        .queues()
        .read("orders", "billing", "dead-one", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.len(), 2);
    c.publish(&OrderPlaced { n: 3 }).await.unwrap();
    let seen = Seen::default();
    let running = start(recording(env, "billing", &seen));
    let done = wait_for(Duration::from_secs(10), || async { seen.count("b") >= 3 }).await;
    assert!(done, "{:?}", seen.of("b"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut runs = seen.of("b");
    runs.sort_unstable();
    // the claimed ones are their second delivery
    assert_eq!(runs, [(1, 2), (2, 2), (3, 1)]);
    running.stop().await;
    let s = c.topic("orders").await.unwrap().unwrap().subscribers[0].clone();
    assert_eq!((s.pending, s.lag), (0, 0));
}

/// An event handler that cancels its own token (to stop tasks it shares it
/// with) is not cancelled by that: it runs on and its outcome stands (the
/// worker took it for a shutdown, dropped the run and retried the event at
/// once, a fatal error lost).
pub async fn an_event_handler_that_cancels_its_own_token_keeps_its_outcome(env: &Env) {
    let c = &env.client;
    c.subscribe("flaky", "s", Start::Beginning).await.unwrap();
    let seen = Seen::default();
    let s2 = seen.clone();
    let w = worker(c.backend())
        .subscribe("s", move |e: Flaky, ctx| {
            let seen = s2.clone();
            async move {
                seen.add("s", e.n, ctx.attempt());
                ctx.cancellation().cancel();
                tokio::time::sleep(Duration::from_millis(20)).await;
                if e.n == 2 {
                    return Err(JobError::fatal("no such account"));
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let running = start(w);
    let id2 = c.publish(&Flaky { n: 2 }).await.unwrap();
    c.publish(&Flaky { n: 3 }).await.unwrap();
    let done = wait_for(Duration::from_secs(15), || async {
        let s = &c.topic("flaky").await.unwrap().unwrap().subscribers[0];
        s.dead == 1 && s.pending == 0 && s.lag == 0
    })
    .await;
    running.stop().await;
    assert!(
        done,
        "{:?} {:?}",
        seen.of("s"),
        c.topic("flaky").await.unwrap()
    );
    let mut runs = seen.of("s");
    runs.sort_unstable();
    assert_eq!(runs, [(2, 1), (3, 1)], "each ran once");
    let dead = c.dead_events("flaky", "s", 10).await.unwrap();
    assert_eq!(
        (dead[0].id, dead[0].error.as_str()),
        (id2, "no such account")
    );
}

pub async fn a_failing_event_is_retried_with_backoff_then_dead_lettered_with_its_error(env: &Env) {
    let c = &env.client;
    c.subscribe("flaky", "s", Start::Beginning).await.unwrap();
    let seen = Seen::default();
    let s2 = seen.clone();
    let w = worker(c.backend())
        .subscribe("s", move |e: Flaky, ctx| {
            let seen = s2.clone();
            async move {
                seen.add("s", e.n, ctx.attempt());
                if e.n == 1 {
                    return Err(JobError::retry(std::io::Error::other("upstream down")));
                }
                if e.n == 2 {
                    return Err(JobError::fatal("no such account"));
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let running = start(w);
    let id1 = c.publish(&Flaky { n: 1 }).await.unwrap();
    let id2 = c.publish(&Flaky { n: 2 }).await.unwrap();
    c.publish(&Flaky { n: 3 }).await.unwrap();
    let done = wait_for(Duration::from_secs(15), || async {
        c.topic("flaky").await.unwrap().unwrap().subscribers[0].dead == 2
    })
    .await;
    assert!(
        done,
        "{:?} {:?}",
        seen.of("s"),
        c.topic("flaky").await.unwrap()
    );
    let mut runs = seen.of("s");
    runs.sort_unstable();
    assert_eq!(runs, [(1, 1), (1, 2), (1, 3), (2, 1), (3, 1)]);
    let dead = c.dead_events("flaky", "s", 10).await.unwrap();
    assert_eq!(dead.len(), 2);
    // newest first: the fatal one died at once, the other after its attempts
    assert_eq!((dead[0].id, dead[0].deliveries), (id1, 3));
    assert_eq!(dead[0].error, "upstream down");
    assert_eq!(dead[0].event_type, "flaky");
    assert_eq!(dead[0].data, r#"{"n":1}"#);
    assert_eq!(
        (dead[1].id, dead[1].error.as_str()),
        (id2, "no such account")
    );
    let s = c.topic("flaky").await.unwrap().unwrap().subscribers[0].clone();
    assert_eq!((s.pending, s.lag), (0, 0));
    running.stop().await;
}

pub async fn a_dead_event_keeps_its_attempts_with_a_dead_consumers_as_lease_lost(env: &Env) {
    let c = &env.client;
    c.subscribe("flaky", "s", Start::Beginning).await.unwrap();
    let id = c.publish(&Flaky { n: 1 }).await.unwrap();
    // a consumer takes it and dies: that delivery leaves no record
    let taken = env
        .queues()
        .read("flaky", "s", "dead-one", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.len(), 1);
    let t0 = env.clock_ms().await;
    // one more, which fails once and then succeeds
    c.publish(&Flaky { n: 2 }).await.unwrap();
    let w = worker(c.backend())
        .subscribe("s", move |e: Flaky, ctx| async move {
            if e.n == 2 && ctx.attempt() > 1 {
                return Ok(());
            }
            Err(JobError::retry(std::io::Error::other(format!(
                "upstream down (attempt {})",
                ctx.attempt()
            ))))
        })
        .build()
        .unwrap();
    let me = w.id().to_string();
    let running = start(w);
    let done = wait_for(Duration::from_secs(15), || async {
        let s = c.topic("flaky").await.unwrap().unwrap().subscribers[0].clone();
        s.dead == 1 && s.pending == 0
    })
    .await;
    assert!(done, "{:?}", c.topic("flaky").await.unwrap());
    let t1 = env.clock_ms().await;
    running.stop().await;
    let dead = c.dead_events("flaky", "s", 10).await.unwrap();
    assert_eq!((dead[0].id, dead[0].deliveries), (id, 3));
    let runs = &dead[0].runs;
    let how: Vec<(u32, AttemptOutcome)> = runs.iter().map(|a| (a.number, a.outcome)).collect();
    assert_eq!(
        how,
        [
            (1, AttemptOutcome::LeaseLost),
            (2, AttemptOutcome::Error),
            (3, AttemptOutcome::Error)
        ],
        "{runs:?}"
    );
    // what is unknown of the lost one stays unknown
    assert_eq!(
        (
            runs[0].started_ms,
            runs[0].worker.as_deref(),
            &runs[0].error
        ),
        (None, None, &None)
    );
    for a in &runs[1..] {
        let (start, end) = (a.started_ms.unwrap(), a.ended_ms.unwrap());
        assert!(t0 <= start && start <= end && end <= t1, "{a:?} {t0} {t1}");
        assert_eq!(a.worker.as_deref(), Some(me.as_str()));
        assert!(a.host.as_deref().is_some_and(|h| !h.is_empty()));
        assert_eq!(
            a.error.as_deref(),
            Some(format!("upstream down (attempt {})", a.number).as_str())
        );
    }
    // an acknowledgement deleted the records of the one that succeeded
    let records = attempt_records(env, "flaky", "s").await;
    assert!(records.is_empty(), "{records:?}");
    // a requeued letter starts afresh
    assert_eq!(c.requeue_all_dead_events("flaky", "s").await.unwrap(), 1);
    let w = worker(c.backend())
        .subscribe("s", |_: Flaky, _| async { Ok(()) })
        .build()
        .unwrap();
    let running = start(w);
    let done = wait_for(Duration::from_secs(10), || async {
        let s = c.topic("flaky").await.unwrap().unwrap().subscribers[0].clone();
        s.lag == 0 && s.pending == 0
    })
    .await;
    assert!(done);
    running.stop().await;
    assert!(c.dead_events("flaky", "s", 10).await.unwrap().is_empty());
}

pub async fn dead_letters_are_requeued_for_their_subscriber_alone_or_deleted(env: &Env) {
    let c = &env.client;
    c.subscribe("flaky", "s", Start::Beginning).await.unwrap();
    c.subscribe("flaky", "other", Start::Beginning)
        .await
        .unwrap();
    let seen = Seen::default();
    let broken = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (s1, s2, b) = (seen.clone(), seen.clone(), broken.clone());
    let w = worker(c.backend())
        .subscribe("s", move |e: Flaky, ctx| {
            let (seen, broken) = (s1.clone(), b.clone());
            async move {
                seen.add("s", e.n, ctx.attempt());
                if e.n != 3 && broken.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(JobError::fatal(format!("cannot take {}", e.n)));
                }
                Ok(())
            }
        })
        .subscribe("other", move |e: Flaky, ctx| {
            let seen = s2.clone();
            async move {
                seen.add("other", e.n, ctx.attempt());
                Ok(())
            }
        })
        .build()
        .unwrap();
    let running = start(w);
    for n in 1..=4 {
        c.publish(&Flaky { n }).await.unwrap();
    }
    let sub = |name: &str, info: Option<redjob::topic::TopicInfo>| {
        let s = info.unwrap().subscribers;
        s.into_iter().find(|s| s.name == name).unwrap()
    };
    let settled = || async {
        let info = c.topic("flaky").await.unwrap();
        let (s, o) = (sub("s", info.clone()), sub("other", info));
        (s.lag + s.pending + o.lag + o.pending == 0).then_some(s.dead)
    };
    assert!(
        wait_for(Duration::from_secs(15), || async {
            settled().await == Some(3)
        })
        .await
    );
    let dead = c.dead_events("flaky", "s", 10).await.unwrap();
    let by_n = |n: u64| {
        dead.iter()
            .find(|d| d.data == format!(r#"{{"n":{n}}}"#))
            .unwrap()
            .dead_id
    };
    assert_eq!(dead[0].error, "cannot take 4");
    // the dead letters' stream is not a topic
    assert_eq!(c.topics().await.unwrap(), ["flaky"]);

    // deleted, once
    assert_eq!(
        c.delete_dead_events("flaky", "s", &[by_n(4)])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        c.delete_dead_events("flaky", "s", &[by_n(4)])
            .await
            .unwrap(),
        0
    );
    broken.store(false, std::sync::atomic::Ordering::SeqCst);
    // requeued by id: run again by "s" alone, as a first attempt
    assert_eq!(
        c.requeue_dead_events("flaky", "s", &[by_n(1), by_n(4), by_n(1)])
            .await
            .unwrap(),
        1
    );
    assert!(
        wait_for(Duration::from_secs(15), || async {
            settled().await == Some(1)
        })
        .await
    );
    assert_eq!(seen.of("s").iter().filter(|r| **r == (1, 1)).count(), 2);
    // all of them
    assert_eq!(c.requeue_all_dead_events("flaky", "s").await.unwrap(), 1);
    assert!(
        wait_for(Duration::from_secs(15), || async {
            settled().await == Some(0)
        })
        .await
    );
    let mut runs = seen.of("s");
    runs.sort_unstable();
    assert_eq!(runs, [(1, 1), (1, 1), (2, 1), (2, 1), (3, 1), (4, 1)]);
    let mut other = seen.of("other");
    other.sort_unstable();
    assert_eq!(
        other,
        [(1, 1), (2, 1), (3, 1), (4, 1)],
        "requeues are for s alone"
    );
    let info = c.topic("flaky").await.unwrap().unwrap();
    assert_eq!((info.length, info.published), (6, 6));
    assert_eq!(c.purge_dead_events("flaky", "s").await.unwrap(), 0);
    assert!(matches!(
        c.requeue_all_dead_events("flaky", "nobody").await,
        Err(Error::SubscriberNotFound { .. })
    ));
    running.stop().await;

    // a purge deletes them all
    c.subscribe("flaky", "bad", Start::End).await.unwrap();
    let q = env.queues();
    let ids = c
        .publish_all(&[Flaky { n: 5 }, Flaky { n: 6 }])
        .await
        .unwrap();
    let got = q
        .read("flaky", "bad", "c", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    let batch = redjob::topic::EventSettle {
        dead: got
            .into_iter()
            .map(|e| (e.delivery(), e, "bad".to_string()))
            .collect(),
        ..Default::default()
    };
    q.settle_events("flaky", "bad", "c", &batch, None)
        .await
        .unwrap();
    assert_eq!(c.dead_events("flaky", "bad", 10).await.unwrap().len(), 2);
    assert_eq!(c.purge_dead_events("flaky", "bad").await.unwrap(), 2);
    assert!(c.dead_events("flaky", "bad", 10).await.unwrap().is_empty());
}

pub async fn retention_trims_by_length_and_age_or_refuses_when_full(env: &Env) {
    let c = &env.client;
    let q = env.queues();
    // a subscriber that read the first event, then lags while the topic is
    // trimmed past it
    c.subscribe("ticks", "lagging", Start::Beginning)
        .await
        .unwrap();
    c.publish(&Tick { n: 0 }).await.unwrap();
    let read = |n| q.read("ticks", "lagging", "c", n, Duration::ZERO);
    assert_eq!(read(10).await.unwrap().unwrap().len(), 1);
    for n in 1..1000 {
        c.publish(&Tick { n }).await.unwrap();
    }
    let t = c.topic("ticks").await.unwrap().unwrap();
    // trimming is by whole nodes, as Redis's MAXLEN ~: at least 100, not much more
    assert!((100..=200).contains(&t.length), "{t:?}");
    assert_eq!(t.published, 1000);
    // it reads what is left and has no lag (Redis before the fix of
    // redis#13958, 7.0 here, counted the events trimmed ahead of it as lag
    // still, and said so exactly)
    let left = read(1000).await.unwrap().unwrap();
    assert_eq!(left.len() as u64, t.length);
    let s = c.topic("ticks").await.unwrap().unwrap().subscribers[0].clone();
    assert_eq!((s.name.as_str(), s.lag, s.lag_exact), ("lagging", 0, true));

    // refused whole, a first publish leaves no topic behind
    assert!(matches!(
        c.publish_all(&(0..6).map(|n| Slot { n }).collect::<Vec<_>>())
            .await,
        Err(Error::TopicFull { .. })
    ));
    assert!(c.topic("slots").await.unwrap().is_none());
    c.publish_all(&(0..5).map(|n| Slot { n }).collect::<Vec<_>>())
        .await
        .unwrap();
    match c.publish(&Slot { n: 5 }).await {
        Err(Error::TopicFull { topic, max_len }) => {
            assert_eq!((topic.as_str(), max_len), ("slots", 5))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        c.publish_all(&[Slot { n: 6 }, Slot { n: 7 }]).await,
        Err(Error::TopicFull { .. })
    ));
    assert_eq!(c.topic("slots").await.unwrap().unwrap().length, 5);

    c.publish(&Reading { n: 1 }).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let kept = c.publish(&Reading { n: 2 }).await.unwrap();
    let r = c.topic("readings").await.unwrap().unwrap();
    assert_eq!((r.length, r.first), (1, Some(kept)));
}

pub async fn entries_that_are_not_events_are_dead_lettered_and_other_types_skipped(env: &Env) {
    let c = &env.client;
    c.subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    let q = env.queues();
    let opts = OrderPlaced::OPTIONS;
    q.publish("orders", &[("order_placed", "{not json")], &opts)
        .await
        .unwrap();
    q.publish("orders", &[("order_placed", r#"{"n":"x"}"#)], &opts)
        .await
        .unwrap();
    c.publish(&OrderShipped { n: 9 }).await.unwrap();
    q.publish("orders", &[("someone_elses", "{}")], &opts)
        .await
        .unwrap();
    c.publish(&OrderPlaced { n: 7 }).await.unwrap();
    let seen = Seen::default();
    let running = start(recording(env, "billing", &seen));
    let done = wait_for(Duration::from_secs(10), || async {
        let s = c.topic("orders").await.unwrap().unwrap().subscribers[0].clone();
        s.dead == 2 && s.pending == 0 && s.lag == 0
    })
    .await;
    assert!(done, "{:?}", c.topic("orders").await.unwrap());
    assert_eq!(seen.of("b"), [(7, 1)]);
    let dead = c.dead_events("orders", "billing", 10).await.unwrap();
    assert!(
        dead.iter()
            .all(|d| d.error.contains("cannot decode event \"order_placed\"")),
        "{dead:?}"
    );
    assert_eq!(dead[1].data, "{not json");
    // a page of none is none
    assert!(
        q.dead_events("orders", "billing", 0)
            .await
            .unwrap()
            .is_empty()
    );
    running.stop().await;

    for bad in ["", "a b", "a:b", "{x}"] {
        assert!(
            matches!(
                c.subscribe(bad, "s", Start::End).await,
                Err(Error::InvalidValue { .. })
            ),
            "{bad:?}"
        );
        assert!(matches!(
            c.subscribe("orders", bad, Start::End).await,
            Err(Error::InvalidValue { .. })
        ));
        assert!(matches!(
            c.topic(bad).await,
            Err(Error::InvalidValue { .. })
        ));
    }
    let built = worker(c.backend())
        .subscribe("no spaces", |_: OrderPlaced, _| async { Ok(()) })
        .build();
    assert!(matches!(built, Err(Error::InvalidValue { .. })));
    let built = worker(c.backend())
        .subscribe("s", |_: OrderPlaced, _| async { Ok(()) })
        .subscribe("s", |_: OrderPlaced, _| async { Ok(()) })
        .build();
    assert!(matches!(built, Err(Error::InvalidValue { .. })));
}

pub async fn an_ordered_subscriber_retries_in_place_before_the_next_event(env: &Env) {
    let c = &env.client;
    c.subscribe("flaky", "ordered", Start::Beginning)
        .await
        .unwrap();
    c.publish_all(&(1..=5).map(|n| Flaky { n }).collect::<Vec<_>>())
        .await
        .unwrap();
    let seen = Seen::default();
    let s2 = seen.clone();
    let w = worker(c.backend())
        .subscribe(
            Subscription::new("ordered").ordered(),
            move |e: Flaky, ctx| {
                let seen = s2.clone();
                async move {
                    seen.add("o", e.n, ctx.attempt());
                    if e.n == 2 && ctx.attempt() < 3 {
                        return Err(JobError::retry("not yet"));
                    }
                    Ok(())
                }
            },
        )
        .build()
        .unwrap();
    let running = start(w);
    let done = wait_for(Duration::from_secs(10), || async { seen.count("o") >= 7 }).await;
    assert!(done, "{:?}", seen.of("o"));
    assert_eq!(
        seen.of("o"),
        [(1, 1), (2, 1), (2, 2), (2, 3), (3, 1), (4, 1), (5, 1)]
    );
    running.stop().await;
}

pub async fn an_ordered_subscriber_stopped_between_retries_in_place_counts_them(env: &Env) {
    let c = &env.client;
    c.subscribe("flaky", "ordered", Start::Beginning)
        .await
        .unwrap();
    let id = c.publish(&Flaky { n: 1 }).await.unwrap();
    let seen = Seen::default();
    let failing = |seen: Seen, who: &'static str| {
        worker(c.backend())
            .subscribe(
                Subscription::new("ordered").ordered(),
                move |e: Flaky, ctx| {
                    let seen = seen.clone();
                    async move {
                        seen.add(who, e.n, ctx.attempt());
                        Err(JobError::retry(format!("down {}", ctx.attempt())))
                    }
                },
            )
            .build()
            .unwrap()
    };
    // two attempts in place, then a stop during the backoff before the third
    let running = start(failing(seen.clone(), "first"));
    let two = wait_for(Duration::from_secs(10), || async {
        seen.count("first") >= 2
    })
    .await;
    assert!(two, "{:?}", seen.of("first"));
    running.stop().await;
    assert_eq!(seen.of("first"), [(1, 1), (1, 2)]);
    // the next worker goes on from the third attempt, the last (max_attempts 3)
    let running = start(failing(seen.clone(), "next"));
    let done = wait_for(Duration::from_secs(10), || async {
        c.topic("flaky").await.unwrap().unwrap().subscribers[0].dead == 1
    })
    .await;
    assert!(done, "{:?}", seen.of("next"));
    running.stop().await;
    assert_eq!(seen.of("next"), [(1, 3)]);
    let dead = c.dead_events("flaky", "ordered", 10).await.unwrap();
    assert_eq!((dead[0].id, dead[0].deliveries), (id, 3));
    let runs: Vec<(u32, Option<&str>)> = dead[0]
        .runs
        .iter()
        .map(|a| (a.number, a.error.as_deref()))
        .collect();
    assert_eq!(
        runs,
        [
            (1, Some("down 1")),
            (2, Some("down 2")),
            (3, Some("down 3"))
        ]
    );
}

pub async fn a_settle_sent_twice_records_its_runs_once(env: &Env) {
    let c = &env.client;
    let b = env.queues();
    c.subscribe("flaky", "s", Start::Beginning).await.unwrap();
    c.publish(&Flaky { n: 1 }).await.unwrap();
    let got = b
        .read("flaky", "s", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let now = std::time::Instant::now();
    let run = |n: u32, error: &str| {
        EventRun::new(
            got[0].id,
            n,
            now,
            now,
            AttemptOutcome::Error,
            Some(error.into()),
        )
    };
    let retry = EventSettle {
        retries: vec![(got[0].delivery(), Duration::from_secs(1), None)],
        runs: vec![run(1, "first")],
        ..Default::default()
    };
    // its reply lost, the settle is sent again
    for _ in 0..2 {
        b.settle_events("flaky", "s", "c1", &retry, None)
            .await
            .unwrap();
    }
    let dead = EventSettle {
        dead: vec![(got[0].delivery(), got[0].clone(), "second".into())],
        runs: vec![run(1, "first"), run(2, "second")],
        ..Default::default()
    };
    b.settle_events("flaky", "s", "c1", &dead, None)
        .await
        .unwrap();
    let letter = &c.dead_events("flaky", "s", 10).await.unwrap()[0];
    let runs: Vec<(u32, Option<&str>)> = letter
        .runs
        .iter()
        .map(|a| (a.number, a.error.as_deref()))
        .collect();
    assert_eq!(runs, [(1, Some("first")), (2, Some("second"))]);
}

pub async fn an_event_trimmed_while_it_waits_for_a_retry_leaves_no_records(env: &Env) {
    let c = &env.client;
    let b = env.queues();
    c.subscribe("ticks", "s", Start::Beginning).await.unwrap();
    c.publish(&Tick { n: 0 }).await.unwrap();
    let got = b
        .read("ticks", "s", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let retry = EventSettle {
        retries: vec![(got[0].delivery(), Duration::from_secs(1), None)],
        runs: vec![failed_run(got[0].id, 1)],
        ..Default::default()
    };
    b.settle_events("ticks", "s", "c1", &retry, None)
        .await
        .unwrap();
    if env.is_redis() {
        assert_eq!(attempt_records(env, "ticks", "s").await.len(), 1);
    }
    // the topic keeps 100: the event is trimmed while it waits
    let more: Vec<Tick> = (1..=1000).map(|n| Tick { n }).collect();
    c.publish_all(&more).await.unwrap();
    let claimed = b
        .claim("ticks", "s", "c2", Duration::ZERO, 10, EventId::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert!(
        claimed.events.iter().all(|e| e.id != got[0].id),
        "{claimed:?}"
    );
    assert_eq!(
        attempt_records(env, "ticks", "s").await,
        Vec::<String>::new()
    );
    let s = &c.topic("ticks").await.unwrap().unwrap().subscribers[0];
    assert_eq!(s.pending, 0);
}

pub async fn a_topic_deleted_under_a_worker_is_recreated_and_served(env: &Env) {
    let c = &env.client;
    let seen = Seen::default();
    let sub = Subscription::new("billing").start(Start::Beginning);
    let running = start(recording(env, sub, &seen));
    let subscribed = wait_for(Duration::from_secs(5), || async {
        c.topic("orders")
            .await
            .unwrap()
            .is_some_and(|t| t.subscribers.len() == 1)
    })
    .await;
    assert!(subscribed);
    c.publish(&OrderPlaced { n: 1 }).await.unwrap();
    assert!(wait_for(Duration::from_secs(5), || async { seen.count("b") == 1 }).await);
    assert!(c.delete_topic("orders").await.unwrap());
    assert!(!c.delete_topic("never-was").await.unwrap());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    c.publish(&OrderPlaced { n: 2 }).await.unwrap();
    let done = wait_for(Duration::from_secs(10), || async { seen.count("b") == 2 }).await;
    assert!(done, "{:?}", seen.of("b"));
    assert!(!running.is_finished());
    running.stop().await;
    // each once: the recreated subscriber replays nothing from before
    assert_eq!(seen.of("b"), [(1, 1), (2, 1)]);
}

pub async fn a_subscriber_at_the_end_takes_the_events_of_its_topic_made_anew(env: &Env) {
    let c = &env.client;
    let seen = Seen::default();
    // at the end (the default): it takes what is published once it is made
    let running = start(recording(env, "billing", &seen));
    let subscribed = wait_for(Duration::from_secs(5), || async {
        c.topic("orders")
            .await
            .unwrap()
            .is_some_and(|t| t.subscribers.len() == 1)
    })
    .await;
    assert!(subscribed);
    c.publish(&OrderPlaced { n: 1 }).await.unwrap();
    assert!(wait_for(Duration::from_secs(5), || async { seen.count("b") == 1 }).await);
    // the topic deleted, and made anew by a publish before the worker found
    // its subscriber gone (as after a Redis that restarted empty)
    assert!(c.delete_topic("orders").await.unwrap());
    c.publish_all(&[OrderPlaced { n: 2 }, OrderPlaced { n: 3 }])
        .await
        .unwrap();
    let done = wait_for(Duration::from_secs(10), || async { seen.count("b") == 3 }).await;
    running.stop().await;
    assert!(done, "handled (n, attempt): {:?}", seen.of("b"));
    assert_eq!(seen.of("b"), [(1, 1), (2, 1), (3, 1)]);
}

#[derive(Serialize, Deserialize, Event)]
#[event(name = "huge", topic = "huge", max_len = 18446744073709551615)]
struct Huge {
    n: u64,
}

#[derive(Serialize, Deserialize, Event)]
#[event(
    name = "huge_aged",
    topic = "huge",
    max_len = 100000000000000000,
    max_age = "7d"
)]
struct HugeAged {
    n: u64,
}

#[derive(Serialize, Deserialize, Event)]
#[event(
    name = "huge_refused",
    topic = "huge",
    max_len = 18446744073709551615,
    when_full = "refuse"
)]
struct HugeRefused {
    n: u64,
}

pub async fn a_max_len_beyond_any_topic_keeps_every_event(env: &Env) {
    let c = &env.client;
    // a limit no topic reaches (the derive takes any u64 above 0) keeps every
    // event, in every path of a publish
    c.publish(&Huge { n: 1 }).await.unwrap();
    c.publish_all(&[Huge { n: 2 }, Huge { n: 3 }])
        .await
        .unwrap();
    c.publish(&HugeAged { n: 4 }).await.unwrap();
    c.publish_all(&[HugeAged { n: 5 }, HugeAged { n: 6 }])
        .await
        .unwrap();
    c.publish(&HugeRefused { n: 7 }).await.unwrap();
    let t = c.topic("huge").await.unwrap().unwrap();
    assert_eq!((t.length, t.published), (7, 7));
}

#[derive(Serialize, Deserialize, Event)]
#[event(name = "once", topic = "once", max_attempts = 1)]
struct Once {
    n: u64,
}

pub async fn a_shutdown_releases_events_read_ahead_without_counting_an_attempt(env: &Env) {
    let c = &env.client;
    c.subscribe("once", "s", Start::Beginning).await.unwrap();
    c.publish_all(&(0..40).map(|n| Once { n }).collect::<Vec<_>>())
        .await
        .unwrap();
    let seen = Seen::default();
    let make = |who: &'static str| {
        let s2 = seen.clone();
        worker(c.backend())
            .concurrency(1)
            .subscribe("s", move |e: Once, ctx| {
                let seen = s2.clone();
                async move {
                    seen.add(who, e.n, ctx.attempt());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok(())
                }
            })
            .build()
            .unwrap()
    };
    // the first worker reads all 40 ahead, runs a few, and is stopped
    let first = start(make("first"));
    assert!(
        wait_for(Duration::from_secs(10), || async {
            seen.count("first") >= 3
        })
        .await
    );
    first.stop().await;
    let ran_first = seen.count("first");
    assert!(ran_first < 40, "the first worker ran them all");
    // the second one runs the rest: none of them counts as tried (max_attempts 1)
    let second = start(make("second"));
    let done = wait_for(Duration::from_secs(20), || async {
        let s = c.topic("once").await.unwrap().unwrap().subscribers[0].clone();
        s.pending == 0 && s.lag == 0
    })
    .await;
    assert!(done, "{:?}", c.topic("once").await.unwrap());
    second.stop().await;
    let dead = c.dead_events("once", "s", 100).await.unwrap();
    assert!(
        dead.is_empty(),
        "released events were dead-lettered: {dead:?}"
    );
    let mut all: Vec<u64> = seen
        .of("first")
        .iter()
        .chain(seen.of("second").iter())
        .map(|(n, _)| *n)
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..40).collect::<Vec<_>>());
    assert!(
        seen.of("second").iter().all(|(_, attempt)| *attempt == 1),
        "{:?}",
        seen.of("second")
    );
}

pub async fn an_ordered_subscriber_runs_one_event_at_a_time_across_workers(env: &Env) {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let c = &env.client;
    c.subscribe("orders", "seq", Start::Beginning)
        .await
        .unwrap();
    let seen = Seen::default();
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let ordered_worker = |who: &'static str| {
        let (seen, running, most) = (seen.clone(), running.clone(), most.clone());
        worker(c.backend())
            .concurrency(8)
            .subscribe(
                Subscription::new("seq").ordered(),
                move |e: OrderPlaced, _| {
                    let (seen, running, most) = (seen.clone(), running.clone(), most.clone());
                    async move {
                        let now = running.fetch_add(1, SeqCst) + 1;
                        most.fetch_max(now, SeqCst);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        seen.add(who, e.n, 1);
                        running.fetch_sub(1, SeqCst);
                        Ok(())
                    }
                },
            )
            .build()
            .unwrap()
    };
    let a = start(ordered_worker("a"));
    c.publish(&OrderPlaced { n: 0 }).await.unwrap();
    assert!(wait_for(Duration::from_secs(10), || async { seen.count("a") == 1 }).await);
    // b stands by while a owns the subscriber
    let b = start(ordered_worker("b"));
    c.publish_all(&(1..=30).map(|n| OrderPlaced { n }).collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(wait_for(Duration::from_secs(15), || async { seen.count("a") == 31 }).await);
    let in_order: Vec<u64> = seen.of("a").iter().map(|r| r.0).collect();
    assert_eq!(in_order, (0..=30).collect::<Vec<_>>());
    assert_eq!(seen.count("b"), 0, "b read while a owned the subscriber");
    // a stops: b takes over where a left off
    a.stop().await;
    c.publish_all(&(31..=40).map(|n| OrderPlaced { n }).collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(wait_for(Duration::from_secs(15), || async { seen.count("b") == 10 }).await);
    let in_order: Vec<u64> = seen.of("b").iter().map(|r| r.0).collect();
    assert_eq!(in_order, (31..=40).collect::<Vec<_>>());
    assert_eq!(
        most.load(SeqCst),
        1,
        "two events of the subscriber ran at once"
    );
    b.stop().await;
}

/// A subscriber made at a start past its topic's newest event and over a
/// minute past now would skip every event published until then: refused, as
/// a rewind there is, on an empty topic and on one with events (it was made,
/// and silently skipped a year of events); "now" by a clock a little ahead is
/// taken, and an existing subscriber stays where it is.
pub async fn a_subscriber_made_past_its_topic_and_over_a_minute_on_is_refused(env: &Env) {
    let c = &env.client;
    let year = Duration::from_secs(365 * 86_400);
    let later = std::time::SystemTime::now() + year;
    let later_ms = later
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for to in [Start::Time(later), Start::At(EventId::new(later_ms, 0))] {
        // an empty topic, then one with an event
        for topic in ["orders", "ticks"] {
            match c.subscribe(topic, "late", to).await {
                Err(Error::InvalidValue { what, .. }) => assert_eq!(what, "subscriber start"),
                other => panic!("{topic} at {to:?}: {other:?}"),
            }
            if topic == "orders" {
                c.publish(&OrderPlaced { n: 1 }).await.unwrap();
            }
        }
    }
    let info = c.topic("orders").await.unwrap().unwrap();
    assert!(info.subscribers.is_empty(), "{info:?}");
    // "now" by a clock a little ahead: taken (an event published before
    // that time is not its)
    let ahead = std::time::SystemTime::now() + Duration::from_secs(5);
    assert!(
        c.subscribe("orders", "soon", Start::Time(ahead))
            .await
            .unwrap()
    );
    c.publish(&OrderPlaced { n: 2 }).await.unwrap();
    assert_eq!(ids_read(env, "soon").await, []);
    // an existing subscriber is left where it is, whatever the start asked
    assert!(
        !c.subscribe("orders", "soon", Start::Time(later))
            .await
            .unwrap()
    );
}

/// A read or a claim asked for more events than a call takes, and a page of
/// dead letters asked for more than a page holds, read what there is on
/// every backend (Redis was sent `COUNT 18446744073709551615` and failed with
/// its raw "value is not an integer or out of range"); a read asked to block
/// for ever returns the events there (the wait's end overflowed an `Instant`).
pub async fn topic_reads_of_any_size_read_what_there_is(env: &Env) {
    let c = &env.client;
    let q = env.queues();
    c.subscribe("orders", "big", Start::Beginning)
        .await
        .unwrap();
    let ids = c
        .publish_all(&[OrderPlaced { n: 1 }, OrderPlaced { n: 2 }])
        .await
        .unwrap();
    let read = q
        .read("orders", "big", "c1", usize::MAX, Duration::MAX)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    let claimed = q
        .claim(
            "orders",
            "big",
            "c2",
            Duration::ZERO,
            usize::MAX,
            EventId::ZERO,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.events.len(), 2, "{claimed:?}");
    let dead = c.dead_events("orders", "big", usize::MAX).await.unwrap();
    assert!(dead.is_empty(), "{dead:?}");
}

/// An event trimmed from the topic while its handler ran, then settled as a
/// retry (with its run's record), leaves no attempt records once a claim
/// has met it: docs/topics.md says one trimmed while it waits for a retry
/// "is gone from the subscriber's pending events ... (its attempt records
/// so far are dropped with it)".
pub async fn an_event_trimmed_while_it_runs_then_retried_leaves_no_records(env: &Env) {
    let c = &env.client;
    let b = env.queues();
    c.subscribe("ticks", "s", Start::Beginning).await.unwrap();
    c.publish(&Tick { n: 0 }).await.unwrap();
    let got = b
        .read("ticks", "s", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    // while it runs, the topic keeps 100: the event is trimmed
    let more: Vec<Tick> = (1..=1000).map(|n| Tick { n }).collect();
    c.publish_all(&more).await.unwrap();
    let retry = EventSettle {
        retries: vec![(got[0].delivery(), Duration::from_secs(1), None)],
        runs: vec![failed_run(got[0].id, 1)],
        ..Default::default()
    };
    b.settle_events("ticks", "s", "c1", &retry, None)
        .await
        .unwrap();
    let claimed = b
        .claim("ticks", "s", "c2", Duration::ZERO, 10, EventId::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert!(
        claimed.events.iter().all(|e| e.id != got[0].id),
        "{claimed:?}"
    );
    let s = &c.topic("ticks").await.unwrap().unwrap().subscribers[0];
    assert_eq!(s.pending, 0);
    let keys = attempt_records(env, "ticks", "s").await;
    assert!(keys.is_empty(), "attempt records left behind: {keys:?}");
}

/// A settle's `keep_dead` bounds the subscriber's dead letters: with 2 kept,
/// 5 dead-lettered leave 2.
pub async fn a_settles_keep_dead_bounds_the_subscribers_dead_letters(env: &Env) {
    let c = &env.client;
    let b = env.queues();
    c.subscribe("orders", "s", Start::Beginning).await.unwrap();
    for n in 1..=5 {
        c.publish(&OrderPlaced { n }).await.unwrap();
    }
    let got = b
        .read("orders", "s", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 5);
    for e in &got {
        let dead = EventSettle {
            dead: vec![(e.delivery(), e.clone(), "gave up".into())],
            ..Default::default()
        };
        b.settle_events("orders", "s", "c1", &dead, Some(2))
            .await
            .unwrap();
    }
    let s = &c.topic("orders").await.unwrap().unwrap().subscribers[0];
    assert_eq!((s.pending, s.dead), (0, 2), "dead letters kept");
}

/// A requeue of dead letters for a subscriber that does not exist fails
/// with SubscriberNotFound (the Topics contract), whatever ids it names,
/// none included.
pub async fn a_dead_event_requeue_for_a_missing_subscriber_fails_even_with_no_ids(env: &Env) {
    let c = &env.client;
    let b = env.queues();
    c.subscribe("orders", "s", Start::Beginning).await.unwrap();
    let some = [EventId::new(1, 0)];
    let r = b
        .requeue_dead_events("orders", "nobody", redjob::topic::DeadEvents::Ids(&some))
        .await;
    assert!(matches!(r, Err(Error::SubscriberNotFound { .. })), "{r:?}");
    let r = b
        .requeue_dead_events("orders", "nobody", redjob::topic::DeadEvents::Ids(&[]))
        .await;
    assert!(matches!(r, Err(Error::SubscriberNotFound { .. })), "{r:?}");
}

/// An event retried once (so it has records), delivered again, then trimmed
/// from the topic while it runs and renewed (a renewal's `XCLAIM` drops a
/// trimmed event from the pending list on Redis), then settled as a retry
/// or a dead letter: its records go with it (they stayed on Redis, read by
/// no delivery again).
pub async fn an_event_trimmed_while_it_runs_after_a_renewal_leaves_no_records(env: &Env) {
    let c = &env.client;
    let b = env.queues();
    c.subscribe("ticks", "s", Start::Beginning).await.unwrap();
    c.publish_all(&[Tick { n: 0 }, Tick { n: 1 }])
        .await
        .unwrap();
    let got = b
        .read("ticks", "s", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 2);
    // both retried once, at once: their records are kept
    let first = EventSettle {
        retries: got
            .iter()
            .map(|e| (e.delivery(), Duration::ZERO, None))
            .collect(),
        runs: got.iter().map(|e| failed_run(e.id, 1)).collect(),
        ..Default::default()
    };
    b.settle_events("ticks", "s", "c1", &first, None)
        .await
        .unwrap();
    let again = b
        .claim("ticks", "s", "c2", Duration::ZERO, 10, EventId::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.events.len(), 2, "{again:?}");
    // while they run again, the topic keeps 100: both are trimmed
    let more: Vec<Tick> = (2..=1001).map(|n| Tick { n }).collect();
    c.publish_all(&more).await.unwrap();
    let ids: Vec<EventId> = got.iter().map(|e| e.id).collect();
    b.renew("ticks", "s", "c2", &ids).await.unwrap();
    let second = EventSettle {
        retries: vec![(again.events[0].delivery(), Duration::ZERO, None)],
        dead: vec![(
            again.events[1].delivery(),
            again.events[1].clone(),
            "gave up".into(),
        )],
        runs: ids.iter().map(|id| failed_run(*id, 2)).collect(),
        ..Default::default()
    };
    b.settle_events("ticks", "s", "c2", &second, None)
        .await
        .unwrap();
    b.claim("ticks", "s", "c3", Duration::ZERO, 10, EventId::ZERO)
        .await
        .unwrap()
        .unwrap();
    let s = &c.topic("ticks").await.unwrap().unwrap().subscribers[0];
    assert_eq!(s.pending, 0, "{s:?}");
    let keys = attempt_records(env, "ticks", "s").await;
    assert!(keys.is_empty(), "attempt records left behind: {keys:?}");
}

/// A skip to an event moves a subscriber forward to just after it, and
/// never back: one that read past it stays where it is.
pub async fn a_skip_moves_a_subscriber_forward_and_never_back(env: &Env) {
    let c = &env.client;
    c.subscribe("orders", "skip", Start::Beginning)
        .await
        .unwrap();
    let ids = c
        .publish_all(&[
            OrderPlaced { n: 1 },
            OrderPlaced { n: 2 },
            OrderPlaced { n: 3 },
        ])
        .await
        .unwrap();
    assert!(c.skip_to("orders", "skip", ids[0]).await.unwrap());
    assert_eq!(ids_read(env, "skip").await, ids[1..]);
    // it read all three: a skip to the first is no move
    assert!(!c.skip_to("orders", "skip", ids[0]).await.unwrap());
    assert!(!c.skip_to("orders", "skip", ids[2]).await.unwrap());
    let next = c.publish(&OrderPlaced { n: 4 }).await.unwrap();
    assert_eq!(ids_read(env, "skip").await, [next]);
    match c.skip_to("orders", "nobody", ids[0]).await {
        Err(Error::SubscriberNotFound { .. }) => {}
        other => panic!("{other:?}"),
    }
    let far = EventId::new(u64::MAX / 2, 0);
    match c.skip_to("orders", "skip", far).await {
        Err(Error::InvalidValue { .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// Consumers that left their subscriber without a word (a worker killed, or
/// one stopped while it held events that others then claimed) are removed
/// by a claim once they hold nothing and have been idle for 100 times the
/// claim's idle time, 10 s at least: a subscriber's consumers do not pile up
/// over crashes and deploys. A consumer that holds an event stays. The old
/// code kept every consumer for ever.
pub async fn consumers_gone_for_long_are_removed_by_a_claim(env: &Env) {
    let c = &env.client;
    c.subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    c.publish_all(&[OrderPlaced { n: 1 }, OrderPlaced { n: 2 }])
        .await
        .unwrap();
    let q = env.queues();
    // two consumers take an event each and die with it
    for dead in ["killed", "stopped"] {
        let taken = q
            .read("orders", "billing", dead, 1, Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(taken.len(), 1);
    }
    let consumers = || async {
        let info = c.topic("orders").await.unwrap().unwrap();
        info.subscribers[0].consumers
    };
    assert_eq!(consumers().await, 2);
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    // one that has just read an event, and holds it
    c.publish(&OrderPlaced { n: 3 }).await.unwrap();
    let recent = q
        .read("orders", "billing", "recent", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recent.len(), 1);
    // a live consumer's claim takes the dead ones' events, then removes them
    let claimed = q
        .claim(
            "orders",
            "billing",
            "live",
            Duration::from_millis(100),
            10,
            EventId::ZERO,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.events.len(), 2, "the dead consumers' events");
    assert_eq!(
        consumers().await,
        2,
        "the live and the recent consumer are left, not the two dead ones"
    );
}

/// `topic_infos` reads a page of topics, each as its own `topic_info` reads
/// it (its subscribers, lag and dead letters), in the order asked, across
/// the calls' boundary (50 topics a call on one Redis server), with `None`
/// for a topic that does not exist; nothing asked, nothing read.
/// `topic_for` reads a topic with one subscriber alone, as `topic_info`
/// has it.
pub async fn topic_infos_and_topic_for_read_as_the_topics_own_read(env: &Env) {
    let c = &env.client;
    let q = env.queues();
    let mut names = Vec::new();
    for i in 0..60 {
        let name = format!("pg-{i:02}");
        c.subscribe(&name, "s", Start::Beginning).await.unwrap();
        if i % 7 == 0 {
            c.subscribe(&name, "t", Start::End).await.unwrap();
        }
        names.push(name);
    }
    // events in one, and one given up on by a subscriber past the boundary
    q.publish(
        "pg-03",
        &[("x", "{}"), ("y", "{}")],
        &redjob::topic::EventOptions::DEFAULT,
    )
    .await
    .unwrap();
    q.publish(
        "pg-56",
        &[("x", "{}")],
        &redjob::topic::EventOptions::DEFAULT,
    )
    .await
    .unwrap();
    let got = q
        .read("pg-56", "s", "c", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let batch = EventSettle {
        dead: vec![(got[0].delivery(), got[0].clone(), "down".into())],
        ..Default::default()
    };
    q.settle_events("pg-56", "s", "c", &batch, None)
        .await
        .unwrap();
    names.insert(30, "pg-none".into());
    let infos = c.topic_infos(&names).await.unwrap();
    assert_eq!(infos.len(), names.len());
    for (name, info) in names.iter().zip(&infos) {
        assert_eq!(info, &c.topic(name).await.unwrap(), "{name}");
    }
    assert!(infos[30].is_none());
    let at = |name: &str| {
        infos[names.iter().position(|n| n == name).unwrap()]
            .clone()
            .unwrap()
    };
    assert_eq!((at("pg-03").length, at("pg-03").subscribers[0].lag), (2, 2));
    assert_eq!(at("pg-56").subscribers[0].dead, 1);
    assert_eq!(at("pg-49").subscribers.len(), 2);
    assert!(c.topic_infos(&[]).await.unwrap().is_empty());
    // one subscriber's read: the topic's facts and that subscriber alone
    let whole = at("pg-56");
    let one = c.topic_for("pg-56", "s").await.unwrap().unwrap();
    assert_eq!(one.subscribers, whole.subscribers[..1]);
    assert_eq!((one.length, one.last), (whole.length, whole.last));
    let both = at("pg-49");
    let t = c.topic_for("pg-49", "t").await.unwrap().unwrap();
    assert_eq!(t.subscribers, both.subscribers[1..]);
    let nobody = c.topic_for("pg-49", "nobody").await.unwrap().unwrap();
    assert!(nobody.subscribers.is_empty());
    assert!(c.topic_for("pg-none", "s").await.unwrap().is_none());
}
