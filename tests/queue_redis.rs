//! The queue layer's Redis-only behaviour: realtime notifications, connection
//! errors, the send script's own arithmetic (ids, dues), and the counters
//! hash's encoding.

mod common;
#[path = "common/logs.rs"]
mod logs;

use std::time::Duration;

use common::{RedisServer, backend_with_queue};
use redjob::Error;
use redjob::queue::{QueueOptions, Rsmq, SendMessage};

#[tokio::test]
async fn realtime_publishes_queue_length() {
    use futures::StreamExt;
    let server = RedisServer::start();
    let cfg = redjob::queue::RsmqConfig {
        realtime: true,
        ..redjob::queue::RsmqConfig::from_url(server.url())
    };
    let rsmq = Rsmq::with_config(cfg).await.unwrap();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe("rsmq:rt:q").await.unwrap();
    rsmq.send("q", SendMessage::new("a")).await.unwrap();
    rsmq.send("q", SendMessage::new("b")).await.unwrap();
    let mut stream = pubsub.on_message();
    let mut got = Vec::new();
    for _ in 0..2 {
        let msg = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .unwrap()
            .unwrap();
        got.push(msg.get_payload::<i64>().unwrap());
    }
    assert_eq!(got, [1, 2]);
}

#[tokio::test]
async fn unreachable_redis_is_an_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = redjob::queue::RsmqConfig::from_url(format!("redis://127.0.0.1:{port}"));
    cfg.redis.connection_timeout = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let err = Rsmq::with_config(cfg).await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(matches!(
        Rsmq::connect("not a url").await,
        Err(Error::InvalidValue { .. })
    ));
}

/// PyRSMQ stores fractional `vt` and `delay` (`1.5`); `attributes()` reports them
/// as the npm rsmq client does (`parseInt`: whole seconds, truncated).
#[tokio::test]
async fn attributes_read_fractional_vt_and_delay_as_rsmq_does() {
    let server = RedisServer::start();
    let rsmq = Rsmq::connect(&server.url()).await.unwrap();
    rsmq.create_queue("py", QueueOptions::default())
        .await
        .unwrap();
    let mut con = server.raw().await;
    let _: () = redis::cmd("HSET")
        .arg("rsmq:py:Q")
        .arg(&["vt", "1.5", "delay", "2.5"])
        .query_async(&mut con)
        .await
        .unwrap();
    let a = rsmq.attributes("py").await.unwrap();
    assert_eq!((a.vt, a.delay, a.maxsize, a.msgs), (1, 2, 65536, 0));
    // redjob's own send still delays by the exact 2.5 s
    rsmq.send("py", SendMessage::new("later")).await.unwrap();
    let a = rsmq.attributes("py").await.unwrap();
    assert_eq!((a.msgs, a.hiddenmsgs, a.totalsent), (1, 1, 1));
}

/// An RSMQ client's `deleteQueue` removes only RSMQ's keys; redjob's
/// `delete_queue` then purges redjob's own keys of the queue, though the queue
/// itself is gone.
#[tokio::test]
async fn delete_queue_purges_redjob_keys_left_by_an_rsmq_delete() {
    let server = RedisServer::start();
    let rsmq = Rsmq::connect(&server.url()).await.unwrap();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let mut con = server.raw().await;
    let redjob_keys = ["rsmq:q:dead", "rsmq:q:dead:Q", "rsmq:q:stats"];
    let _: () = redis::pipe()
        .hset("rsmq:q:stats", "processed", 5)
        .zadd("rsmq:q:dead", "id", 1)
        .hset("rsmq:q:dead:Q", "id", "body")
        // what RSMQ's deleteQueue does
        .del(&["rsmq:q:Q", "rsmq:q"])
        .srem("rsmq:QUEUES", "q")
        .query_async(&mut con)
        .await
        .unwrap();
    let left: i64 = redis::cmd("EXISTS")
        .arg(&redjob_keys)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(left, 3);
    assert!(matches!(
        rsmq.delete_queue("q").await,
        Err(Error::QueueNotFound { name }) if name == "q"
    ));
    let left: i64 = redis::cmd("EXISTS")
        .arg(&redjob_keys)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(left, 0, "redjob's keys purged");
}

/// `pop_due` leaves no `rc` field behind, so on a queue no RSMQ-style receive
/// touched it keeps `totalrecv` and `redjob:leased` equal: the workers' fetches
/// and settles stay on the path that reads no per-message fields.
#[tokio::test]
async fn pop_due_keeps_the_fast_path_counters_agreeing() {
    let server = RedisServer::start();
    let rsmq = Rsmq::connect(&server.url()).await.unwrap();
    rsmq.create_queue("pd", QueueOptions::default())
        .await
        .unwrap();
    let msgs: Vec<_> = (0..3).map(|i| SendMessage::new(format!("m{i}"))).collect();
    rsmq.send_batch("pd", &msgs).await.unwrap();
    assert_eq!(rsmq.pop_due("pd", 10).await.unwrap().len(), 3);
    let mut con = server.raw().await;
    let mut counters = async || -> (Option<u64>, Option<u64>) {
        redis::cmd("HMGET")
            .arg("rsmq:pd:Q")
            .arg("totalrecv")
            .arg("redjob:leased")
            .query_async(&mut con)
            .await
            .unwrap()
    };
    assert_eq!(counters().await, (Some(3), Some(3)));
    // after an RSMQ-style receive they differ, and a pop keeps them apart
    rsmq.send_batch("pd", &msgs).await.unwrap();
    rsmq.receive("pd", None).await.unwrap().unwrap();
    assert_eq!(rsmq.pop_due("pd", 10).await.unwrap().len(), 2);
    assert_eq!(counters().await, (Some(6), Some(3)));
}

/// Every way a job leaves its queue removes both of its entries from
/// `ns:q:unique`; a key taken over after its ttl stays with the new holder.
#[tokio::test]
async fn unique_entries_leave_with_their_jobs() {
    use redjob::backend::{Backend, DeadLetterEntry, Settle};
    use redjob::queue::{SendOutcome, Unique};
    let server = RedisServer::start();
    let (backend, rsmq) = backend_with_queue(&server).await;
    let mut con = server.raw().await;
    let mut entries = async || -> usize {
        redis::cmd("HLEN")
            .arg("rsmq:q:unique")
            .query_async(&mut con)
            .await
            .unwrap()
    };
    let msgs: Vec<_> = ["acked", "dead", "deleted", "popped", "plain"]
        .iter()
        .map(|k| SendMessage::new(*k).unique(Unique::new(*k)))
        .collect();
    let ids = rsmq.send_batch("q", &msgs[..4]).await.unwrap();
    rsmq.send("q", SendMessage::new("plain")).await.unwrap();
    assert_eq!(entries().await, 8, "k: and i: per job");
    assert!(rsmq.delete("q", &ids[2]).await.unwrap());
    assert_eq!(entries().await, 6);
    let leased = backend
        .fetch("q", 2, Duration::from_secs(30))
        .await
        .unwrap()
        .jobs;
    assert_eq!((leased[0].id, leased[1].id), (ids[0], ids[1]));
    let settle = Settle {
        acks: vec![(ids[0], leased[0].token)],
        dead: vec![DeadLetterEntry {
            id: ids[1],
            token: leased[1].token,
            error: "no".into(),
        }],
        ..Settle::default()
    };
    let done = backend.settle("q", &settle).await.unwrap();
    assert_eq!((done.acked, done.dead), (1, 1));
    assert_eq!(entries().await, 2);
    let popped = rsmq.pop_due("q", 1).await.unwrap();
    assert_eq!(popped[0].id, ids[3]);
    assert_eq!(entries().await, 0);
    // a key whose ttl ran out is taken over; the old holder leaving keeps it
    let ttl = || SendMessage::new("t").unique(Unique::new("t").ttl(Duration::from_millis(50)));
    let old = rsmq.send_outcomes("q", &[ttl()]).await.unwrap()[0];
    tokio::time::sleep(Duration::from_millis(80)).await;
    let new = rsmq.send_outcomes("q", &[ttl()]).await.unwrap()[0];
    assert_eq!(new.outcome, SendOutcome::Added);
    assert_eq!(entries().await, 2, "the old holder's back link is gone");
    assert!(rsmq.delete("q", &old.id).await.unwrap());
    assert_eq!(entries().await, 2);
    rsmq.delete_queue("q").await.unwrap();
    assert_eq!(entries().await, 0);
}

/// At maxmemory, a unique send that takes over an expired key is refused whole,
/// as a plain send is: its first write is one that may grow memory.
#[tokio::test]
async fn a_unique_takeover_at_maxmemory_is_refused_and_writes_nothing() {
    use redjob::queue::Unique;
    let server = RedisServer::start();
    let rsmq = Rsmq::connect(&server.url()).await.unwrap();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let ttl = || SendMessage::new("t").unique(Unique::new("t").ttl(Duration::from_millis(50)));
    rsmq.send("q", ttl()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let mut con = server.raw().await;
    let dump = async |con: &mut redis::aio::MultiplexedConnection| -> (usize, usize, usize) {
        let mut pipe = redis::pipe();
        pipe.hlen("rsmq:q:unique").zcard("rsmq:q").hlen("rsmq:q:Q");
        pipe.query_async(con).await.unwrap()
    };
    let before = dump(&mut con).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query_async(&mut con)
        .await
        .unwrap();
    let err = rsmq.send("q", ttl()).await.unwrap_err();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(err.to_string().contains("OOM"), "{err}");
    assert_eq!(dump(&mut con).await, before, "nothing written");
}

/// Every job's kept error leaves with it: by ack, dead letter, pop or cancel.
#[tokio::test]
async fn last_errors_leave_with_their_jobs() {
    use redjob::backend::redis::RedisBackend;
    use redjob::backend::{Backend, DeadLetterEntry, Reschedule, Settle};
    use redjob::connection::RedisConfig;
    use redjob::inspect::Inspect;
    let server = RedisServer::start();
    let b = RedisBackend::connect(&RedisConfig::from_url(server.url()), "rsmq", false)
        .await
        .unwrap();
    let q = b.rsmq();
    q.create_queue("e", QueueOptions::default()).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(
            q.send("e", SendMessage::new(format!("m{i}")))
                .await
                .unwrap(),
        );
    }
    // each fails once and waits a moment for its retry, keeping its error
    let got = b
        .fetch("e", 10, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs;
    let retries = Settle {
        reschedules: got
            .iter()
            .map(|d| Reschedule {
                id: d.id,
                token: d.token,
                delay: Duration::from_millis(10),
                deliveries: 1,
                release: false,
                error: Some(format!("failed {}", d.id)),
            })
            .collect(),
        ..Settle::default()
    };
    assert_eq!(b.settle("e", &retries).await.unwrap().rescheduled, 4);
    let mut con = server.raw().await;
    let errs = |keys: Vec<String>| keys.iter().filter(|k| k.ends_with(":err")).count();
    let keys: Vec<String> = redis::cmd("HKEYS")
        .arg("rsmq:e:Q")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(errs(keys), 4);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let got = b.fetch("e", 2, Duration::from_secs(60)).await.unwrap().jobs;
    assert_eq!(
        b.job("e", &got[0].id).await.unwrap().unwrap().last_error,
        Some(format!("failed {}", got[0].id))
    );
    let done = Settle {
        acks: vec![(got[0].id, got[0].token)],
        dead: vec![DeadLetterEntry {
            id: got[1].id,
            token: got[1].token,
            error: "gave up".into(),
        }],
        ..Settle::default()
    };
    b.settle("e", &done).await.unwrap();
    let rest: Vec<_> = ids
        .iter()
        .filter(|id| !got.iter().any(|d| d.id == **id))
        .collect();
    assert_eq!(q.pop_due("e", 1).await.unwrap().len(), 1);
    let left = b.peek("e", 10).await.unwrap();
    assert_eq!(left.len(), 1);
    assert!(rest.contains(&&left[0].id));
    b.cancel("e", &left[0].id).await.unwrap();
    let keys: Vec<String> = redis::cmd("HKEYS")
        .arg("rsmq:e:Q")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(errs(keys.clone()), 0, "{keys:?}");
    assert!(
        keys.iter()
            .all(|k| ids.iter().all(|id| !k.contains(id.as_str()))),
        "{keys:?}"
    );
}

/// A retried job that an RSMQ client made visible again (a whole-ms score:
/// its count starts over) and that dies at that delivery 1 takes its last
/// error and records out of the queue's hash: a requeue under its id would
/// show them otherwise.
#[tokio::test]
async fn a_dead_letter_at_delivery_one_takes_its_last_error_along() {
    use redjob::backend::redis::RedisBackend;
    use redjob::backend::{Backend, DeadLetterEntry, Reschedule, Settle};
    use redjob::connection::RedisConfig;
    let server = RedisServer::start();
    let b = RedisBackend::connect(&RedisConfig::from_url(server.url()), "rsmq", false)
        .await
        .unwrap();
    let q = b.rsmq();
    q.create_queue("e1", QueueOptions::default()).await.unwrap();
    let id = q.send("e1", SendMessage::new("m")).await.unwrap();
    let got = b
        .fetch("e1", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs;
    let retry = Settle {
        reschedules: vec![Reschedule {
            id: got[0].id,
            token: got[0].token,
            delay: Duration::from_secs(60),
            deliveries: 1,
            release: false,
            error: Some("first".into()),
        }],
        ..Settle::default()
    };
    assert_eq!(b.settle("e1", &retry).await.unwrap().rescheduled, 1);
    let mut con = server.raw().await;
    let fields = |keys: Vec<String>| -> Vec<String> {
        keys.into_iter()
            .filter(|k| k.starts_with(id.as_str()) && k.len() > id.as_str().len())
            .collect()
    };
    let keys: Vec<String> = redis::cmd("HKEYS")
        .arg("rsmq:e1:Q")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(fields(keys).len(), 2, "its last error and its record");
    // as an RSMQ client's changeMessageVisibility(0) writes it: a whole ms
    let () = redis::cmd("ZADD")
        .arg("rsmq:e1")
        .arg(1_000_000_000_000u64)
        .arg(id.as_str())
        .query_async(&mut con)
        .await
        .unwrap();
    let got = b
        .fetch("e1", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs;
    assert_eq!(got[0].token.attempt(), 1);
    let dead = Settle {
        dead: vec![DeadLetterEntry {
            id: got[0].id,
            token: got[0].token,
            error: "gave up".into(),
        }],
        ..Settle::default()
    };
    assert_eq!(b.settle("e1", &dead).await.unwrap().dead, 1);
    let keys: Vec<String> = redis::cmd("HKEYS")
        .arg("rsmq:e1:Q")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(fields(keys.clone()).is_empty(), "{keys:?}");
}

/// A member no client should write (a raw ZADD: a bad id, an absurd score)
/// neither fails nor hides the rest of an inspection.
#[tokio::test]
async fn inspection_skips_members_no_client_writes() {
    use redjob::inspect::{Inspect, JobState};
    let server = RedisServer::start();
    let q = Rsmq::connect(&server.url()).await.unwrap();
    q.create_queue("g", QueueOptions::default()).await.unwrap();
    let good = q.send("g", SendMessage::new("good")).await.unwrap();
    let odd = q.send("g", SendMessage::new("odd")).await.unwrap();
    let mut con = server.raw().await;
    let _: () = redis::cmd("ZADD")
        .arg("rsmq:g")
        .arg(1)
        .arg("not-an-id")
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg("rsmq:g")
        .arg("XX")
        .arg(1e13)
        .arg(odd.as_str())
        .query_async(&mut con)
        .await
        .unwrap();
    let ready = q.list("g", JobState::Ready, None, 10).await.unwrap();
    assert_eq!(ready.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [good]);
    // a page that skipped a member still read all it was asked: not the last
    let page = q.list("g", JobState::Ready, None, 2).await.unwrap();
    assert_eq!(page.jobs.len(), 1);
    let rest = q
        .list("g", JobState::Ready, page.next.as_ref(), 2)
        .await
        .unwrap();
    assert!(rest.jobs.is_empty() && rest.next.is_none());
    assert_eq!(q.peek("g", 10).await.unwrap().len(), 1);
    let job = q.job("g", &odd).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.body.as_slice()),
        (JobState::InFlight, &b"odd"[..])
    );
    assert_eq!(
        q.list("g", JobState::InFlight, None, 10)
            .await
            .unwrap()
            .jobs
            .len(),
        1
    );
}

/// An entry of `ns:QUEUES` that is no valid queue name (another RSMQ port's
/// looser names, a stray SADD) is left out of the listing with a warning that
/// names it, and reported apart; the valid queues list and read as before.
#[tokio::test]
async fn an_invalid_name_in_the_set_of_queues_is_skipped_with_a_warning() {
    let lines = logs::Lines::default();
    let _log = tracing::subscriber::set_default(lines.subscriber());

    let server = RedisServer::start();
    let rsmq = Rsmq::connect(&server.url()).await.unwrap();
    rsmq.create_queue("mail", QueueOptions::default())
        .await
        .unwrap();
    let mut con = server.raw().await;
    let _: i64 = redis::cmd("SADD")
        .arg("rsmq:QUEUES")
        .arg(&["bad name", "a:b"])
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(rsmq.list_queues().await.unwrap(), ["mail"]);
    let logged = lines.text();
    assert!(
        logged.contains("WARN") && logged.contains("bad name") && logged.contains("a:b"),
        "{logged}"
    );
    // through a client (either backend) too, and the queue still reads
    let client = redjob::Client::connect(&server.url()).await.unwrap();
    use redjob::queue::Queues;
    assert_eq!(client.queues().list_queues().await.unwrap(), ["mail"]);
    let mut listing = client.queues().queue_listing().await.unwrap();
    listing.skipped.sort();
    assert_eq!(
        (listing.names, listing.skipped),
        (
            vec!["mail".to_string()],
            vec!["a:b".to_string(), "bad name".to_string()]
        )
    );
    assert_eq!(client.queues().attributes("mail").await.unwrap().msgs, 0);
}

/// An entry of `ns:QUEUES` that is not even UTF-8 (a stray `SADD` of bytes)
/// is skipped as an invalid name is, shown lossily (U+FFFD) among the
/// skipped: the listing and the overview read the other queues (they failed
/// whole with "Cannot convert from UTF-8").
#[tokio::test]
async fn a_name_in_the_set_of_queues_that_is_not_utf8_is_skipped_too() {
    use redjob::ops::{Admin, OverviewQuery};
    use redjob::queue::Queues;
    let server = RedisServer::start();
    let client = redjob::Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("mail", QueueOptions::default())
        .await
        .unwrap();
    let mut con = server.raw().await;
    let _: i64 = redis::cmd("SADD")
        .arg("rsmq:QUEUES")
        .arg(b"\xff\xfebad".as_slice())
        .arg("bad name")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(client.queues().list_queues().await.unwrap(), ["mail"]);
    let mut listing = client.queues().queue_listing().await.unwrap();
    listing.skipped.sort();
    assert_eq!(
        (listing.names, listing.skipped),
        (
            vec!["mail".to_string()],
            vec!["bad name".to_string(), "\u{fffd}\u{fffd}bad".to_string()]
        )
    );
    let o = client.overview(&OverviewQuery::default()).await.unwrap();
    let names: Vec<&str> = o.lines.iter().map(|l| l.name.as_str()).collect();
    assert_eq!((names, o.skipped.len()), (vec!["mail"], 2));
}

/// Leases written by an earlier redjob (scored 4e12 ms above their end), and a
/// release's kept lease end in that form, after an upgrade: a lease that ran
/// out is taken back by the next fetch, first in line, even behind a backlog
/// (not only when the queue runs dry); a kept lease end is read as the time it
/// is, so the next lease ends about a lease from now, not in the year 2153.
#[tokio::test]
async fn leases_of_an_earlier_redjob_are_taken_back_after_an_upgrade() {
    use redjob::backend::Backend;
    use redjob::inspect::Inspect;
    use redjob::queue::Queues;
    let server = RedisServer::start();
    let client = redjob::Client::connect(&server.url()).await.unwrap();
    let b = client.backend();
    b.create_queue("up", QueueOptions::default()).await.unwrap();
    let backlog: Vec<SendMessage> = (0..50).map(|_| SendMessage::new("{}")).collect();
    Backend::send(&b, "up", &backlog, &QueueOptions::default())
        .await
        .unwrap();
    let now = b.now_ms().await.unwrap();
    let mut con = server.raw().await;
    let (lost, released) = (
        "0000000000aaaaaaaaaaaaaaaaaaaaa1",
        "0000000000aaaaaaaaaaaaaaaaaaaaa2",
    );
    let legacy = 4_000_000_000_000u64;
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg("rsmq:up")
        .arg(format!("{}.003", legacy + now - 1_000))
        .arg(lost)
        .cmd("ZADD")
        .arg("rsmq:up")
        .arg(format!("{}.001", now - 500))
        .arg(released)
        .cmd("HSET")
        .arg("rsmq:up:Q")
        .arg(lost)
        .arg("{}")
        .arg(released)
        .arg("{}")
        .arg(format!("{released}:l"))
        .arg(legacy + now + 5_000)
        .arg("redjob:released")
        .arg(1)
        .query_async(&mut con)
        .await
        .unwrap();
    let c = b.counts("up").await.unwrap();
    assert_eq!((c.ready, c.scheduled, c.in_flight), (52, 0, 0));
    let got = b
        .fetch("up", 2, Duration::from_secs(30))
        .await
        .unwrap()
        .jobs;
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, [lost, released], "the oldest due first");
    assert_eq!(got[0].token.attempt(), 4, "its count kept");
    let ends = got[1].token.lease_until_ms();
    assert!(
        ends > now + 5_000 && ends < now + 60_000,
        "a lease from now, after the kept end: {ends} (now {now})"
    );
    let c = b.counts("up").await.unwrap();
    assert_eq!((c.ready, c.scheduled, c.in_flight), (50, 0, 2));
}

/// A queue no redjob worker has fetched from (its consumers are RSMQ clients,
/// whose receives drop nothing) keeps at most 1,000 exact dues of delayed sends.
#[tokio::test]
async fn exact_dues_of_a_queue_no_worker_fetches_stay_bounded() {
    let server = RedisServer::start();
    let q = Rsmq::connect(&server.url()).await.unwrap();
    q.create_queue("ex", QueueOptions::default()).await.unwrap();
    let msgs: Vec<SendMessage> = (0..1_500)
        .map(|_| SendMessage::new("x").delay(Duration::from_millis(50)))
        .collect();
    for chunk in msgs.chunks(100) {
        q.send_batch("ex", chunk).await.unwrap();
    }
    let mut con = server.raw().await;
    let n: u64 = redis::cmd("ZCARD")
        .arg("rsmq:ex:exact")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!((1_000..1_100).contains(&n), "{n} exact dues kept");
}

#[tokio::test]
async fn locate_finds_a_job_past_queues_that_fail_and_reports_them_when_none_has_it() {
    use redjob::queue::Queues;
    let server = RedisServer::start();
    let client = redjob::Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("good", QueueOptions::default())
        .await
        .unwrap();
    let id = Queues::send(client.queues(), "good", SendMessage::new("x"))
        .await
        .unwrap();
    // fifty queues whose hash is a string: each ask of them fails (WRONGTYPE)
    let raw = redis::Client::open(server.url()).unwrap();
    let mut con = raw.get_multiplexed_async_connection().await.unwrap();
    for i in 0..50 {
        let _: () = redis::pipe()
            .cmd("SADD")
            .arg("rsmq:QUEUES")
            .arg(format!("broken{i}"))
            .ignore()
            .cmd("SET")
            .arg(format!("rsmq:broken{i}:Q"))
            .arg("x")
            .ignore()
            .query_async(&mut con)
            .await
            .unwrap();
    }
    let found = client.locate(&id).await.unwrap().expect("found past them");
    assert_eq!(found.queue, "good");
    let nobody = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
    let err = client.locate(&nobody).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
}

/// Overwrites the stored body of each of `ids` (queue "q") with "stored
/// <id>": what a history entry keeps then tells which copy a settle used.
async fn rewrite_stored_bodies(server: &RedisServer, ids: &[redjob::JobId]) {
    let mut con = server.raw().await;
    for id in ids {
        let () = redis::cmd("HSET")
            .arg("rsmq:q:Q")
            .arg(id.to_string())
            .arg(format!("stored {id}"))
            .query_async(&mut con)
            .await
            .unwrap();
    }
}

/// A settle that sends an ack's body as delivered has the history keep that
/// body without reading the stored one; an ack whose body is not sent, or
/// sent out of the acks' order, has its stored body read as before.
#[tokio::test]
async fn an_ack_body_sent_with_its_settle_is_kept_and_one_not_sent_is_read() {
    use redjob::backend::{Backend, Settle};
    use redjob::inspect::Inspect;
    let server = RedisServer::start();
    let (backend, rsmq) = backend_with_queue(&server).await;
    let bodies = ["sent", "not sent", "out of order", "also sent"];
    let ids = rsmq
        .send_batch("q", &bodies.map(SendMessage::new))
        .await
        .unwrap();
    let leased = backend
        .fetch("q", 4, Duration::from_secs(30))
        .await
        .unwrap()
        .jobs;
    assert_eq!(leased.len(), 4);
    // the stored bodies change while the jobs run: what the history keeps
    // tells which copy the settle used
    rewrite_stored_bodies(&server, &ids).await;
    let delivered = |i: usize| (ids[i], leased[i].body.clone());
    let settle = Settle {
        acks: leased.iter().map(|d| (d.id, d.token)).collect(),
        // ids[2]'s comes after ids[3]'s: out of the acks' order, not used
        ack_bodies: vec![delivered(0), delivered(3), delivered(2)],
        ..Settle::default()
    };
    assert_eq!(backend.settle("q", &settle).await.unwrap().acked, 4);
    let mut kept = Vec::new();
    for id in &ids {
        let job = backend.job("q", id).await.unwrap().expect("in the history");
        kept.push(String::from_utf8(job.body).unwrap());
    }
    assert_eq!(
        kept,
        [
            "sent".to_string(),
            format!("stored {}", ids[1]),
            format!("stored {}", ids[2]),
            "also sent".to_string(),
        ]
    );
}

/// Acks' bodies sent beside a retry and a dead letter, across two priorities
/// (two calls), by a caller whose own history setting is off while the
/// queue's stored one keeps bodies: each body the caller sent is kept, the
/// others are read, and the retry and the dead letter land as ever.
#[tokio::test]
async fn ack_bodies_hold_beside_other_entries_and_across_priorities() {
    use redjob::backend::{Backend, DeadLetterEntry, Reschedule, Settle};
    use redjob::inspect::{Inspect, JobState};
    use redjob::ops::{Admin, History, QueueSettings};
    let server = RedisServer::start();
    let (backend, rsmq) = backend_with_queue(&server).await;
    Admin::set_settings(&backend, "q", &QueueSettings::history(History::default()))
        .await
        .unwrap();
    let msgs = [
        SendMessage::new("urgent").priority(3),
        SendMessage::new("sent"),
        SendMessage::new("not sent"),
        SendMessage::new("retried"),
        SendMessage::new("dead"),
    ];
    let ids = rsmq.send_batch("q", &msgs).await.unwrap();
    let leased = backend
        .fetch("q", 5, Duration::from_secs(30))
        .await
        .unwrap()
        .jobs;
    let got: Vec<_> = leased.iter().map(|d| d.id).collect();
    assert_eq!(got, ids, "highest priority first");
    rewrite_stored_bodies(&server, &ids).await;
    let settle = Settle {
        acks: leased[..3].iter().map(|d| (d.id, d.token)).collect(),
        ack_bodies: vec![
            (ids[0], leased[0].body.clone()),
            (ids[1], leased[1].body.clone()),
        ],
        reschedules: vec![Reschedule {
            id: ids[3],
            token: leased[3].token,
            delay: Duration::from_secs(60),
            deliveries: 1,
            release: false,
            error: Some("later".into()),
        }],
        dead: vec![DeadLetterEntry {
            id: ids[4],
            token: leased[4].token,
            error: "gave up".into(),
        }],
        history: History::OFF,
        ..Settle::default()
    };
    let done = backend.settle("q", &settle).await.unwrap();
    assert_eq!((done.acked, done.rescheduled, done.dead), (3, 1, 1));
    let mut seen = Vec::new();
    for id in &ids {
        let job = backend.job("q", id).await.unwrap().expect("found");
        seen.push((job.state, String::from_utf8(job.body).unwrap()));
    }
    let stored = |i: usize| format!("stored {}", ids[i]);
    assert_eq!(
        seen,
        [
            (JobState::Finished, "urgent".to_string()),
            (JobState::Finished, "sent".to_string()),
            (JobState::Finished, stored(2)),
            (JobState::Scheduled, stored(3)),
            (JobState::Dead, stored(4)),
        ]
    );
    let dead = backend.job("q", &ids[4]).await.unwrap().unwrap();
    assert_eq!(dead.last_error.as_deref(), Some("gave up"));
}

/// lib.lua's `id_prefix`, run by Redis's Lua on its own: ten base-36 digits
/// of a time in µs, as `JobId::sent_at` reads them, up to 2^53 µs (a time
/// past 2085 has eleven digits: the prefix keeps the last ten, as a plain
/// base-36 count wrapping at 36^10 would).
#[tokio::test]
async fn the_id_prefix_is_the_send_time_in_base_36_up_to_2_pow_53() {
    let lib = include_str!("../src/backend/redis/lua/lib.lua");
    let start = lib.find("local function id_prefix(us)").unwrap();
    let end = start + lib[start..].find("\nend\n").unwrap() + 5;
    let script = format!(
        "{}\nlocal out = {{}}\nfor i, v in ipairs(ARGV) do out[i] = id_prefix(tonumber(v)) end\nreturn out",
        &lib[start..end]
    );
    let wrap = 36u64.pow(10);
    let mut values = vec![
        0,
        1,
        35,
        36,
        36u64.pow(5) - 1,
        36u64.pow(5),
        1_764_729_600_123_456,
        wrap - 1,
        wrap,
        wrap + 36u64.pow(5) + 7,
        (1 << 53) - 1,
    ];
    let mut v = 1_700_000_000_000_000u64;
    while v < 1 << 53 {
        values.push(v);
        v += 12_345_678_901_234;
    }
    let server = RedisServer::start();
    let mut con = server.raw().await;
    let got: Vec<Vec<u8>> = redis::cmd("EVAL")
        .arg(&script)
        .arg(0)
        .arg(values.iter().map(|v| v.to_string()).collect::<Vec<_>>())
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(got.len(), values.len());
    for (v, p) in values.iter().zip(&got) {
        let p = String::from_utf8_lossy(p);
        assert_eq!(p.len(), 10, "{v}: {p}");
        assert!(
            p.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()),
            "{v}: {p}"
        );
        assert_eq!(u64::from_str_radix(&p, 36).unwrap(), v % wrap, "{v}: {p}");
    }
}

/// The send's maxsize check at its edges, as the send function keeps the last
/// maxsize it parsed between calls and skips parsing a body length of fewer
/// digits than maxsize: sends alternate between queues of other maxsizes, one
/// queue's maxsize changes between sends, and another client's fractional
/// maxsize ("1500.5", its whole part of four digits) still refuses 1,501
/// bytes. The sends go through the function (`FCALL` counted), which also
/// keeps TIME's seconds as last parsed: a send a second later is stamped so.
#[tokio::test]
async fn the_maxsize_check_holds_at_its_edges_across_queues_and_changes() {
    maxsize_edges(&RedisServer::start(), true).await;
}

/// The same on Redis 6.2, where the send is a script (its chunk, and so the
/// memos, run anew on every call).
#[tokio::test]
async fn the_maxsize_check_holds_at_its_edges_as_a_script() {
    let bin = common::server_binary("redis-server-6.2", "REDJOB_REDIS_6_2_SERVER");
    maxsize_edges(&RedisServer::start_binary(&bin), false).await;
}

async fn maxsize_edges(server: &RedisServer, function: bool) {
    use redjob::queue::QueueUpdate;
    let rsmq = Rsmq::connect(&server.url()).await.unwrap();
    for (name, maxsize) in [("a", 1024), ("b", 65536), ("c", -1), ("d", 1024)] {
        rsmq.create_queue(
            name,
            QueueOptions {
                maxsize,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
    let send = |q: &'static str, len: usize| {
        let rsmq = &rsmq;
        async move { rsmq.send(q, SendMessage::new("x".repeat(len))).await }
    };
    let refused = |r: redjob::Result<_>, size: usize, max: usize| match r {
        Err(Error::MessageTooLarge { size: s, max: m }) => s == size && m == max,
        _ => false,
    };
    // the first maxsize parsed has five digits: a digit count kept from it
    // would let four-digit bodies past a maxsize of four
    send("b", 10).await.unwrap();
    assert!(refused(send("a", 1025).await, 1025, 1024));
    // each round switches the queue (and so the maxsize) between sends
    for _ in 0..2 {
        send("a", 1024).await.unwrap();
        send("b", 1025).await.unwrap();
        assert!(refused(send("a", 1025).await, 1025, 1024));
        send("a", 999).await.unwrap();
        send("c", 70_000).await.unwrap();
        assert!(refused(send("b", 65537).await, 65537, 65536));
        assert!(refused(send("d", 10_000).await, 10_000, 1024));
        send("b", 65536).await.unwrap();
        assert!(refused(send("a", 1025).await, 1025, 1024));
    }
    // a's maxsize raised, then lowered
    rsmq.set_attributes(
        "a",
        QueueUpdate {
            maxsize: Some(2048),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    send("a", 1025).await.unwrap();
    assert!(refused(send("a", 2049).await, 2049, 2048));
    rsmq.set_attributes(
        "a",
        QueueUpdate {
            maxsize: Some(1024),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(refused(send("a", 1025).await, 1025, 1024));
    // another client's fractional maxsize
    let mut con = server.raw().await;
    let _: () = redis::cmd("HSET")
        .arg("rsmq:d:Q")
        .arg("maxsize")
        .arg("1500.5")
        .query_async(&mut con)
        .await
        .unwrap();
    send("d", 1500).await.unwrap();
    assert!(refused(send("d", 1501).await, 1501, 1500));
    send("d", 999).await.unwrap();
    let queued = |q: &'static str| {
        let rsmq = &rsmq;
        async move { rsmq.attributes(q).await.unwrap().msgs }
    };
    assert_eq!(
        (
            queued("a").await,
            queued("b").await,
            queued("c").await,
            queued("d").await
        ),
        (5, 5, 2, 2)
    );
    // the function keeps TIME's seconds as last parsed: a send a second
    // later is stamped a second later (its id prefix: base-36 µs), and a
    // send due at once is scored by the whole ms of its id, written as an
    // integer
    let us = |id: &str| i64::from_str_radix(&id[..10], 36).unwrap();
    let first = send("b", 10).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = send("b", 10).await.unwrap();
    let gap = us(second.as_ref()) - us(first.as_ref());
    assert!((1_100_000..5_000_000).contains(&gap), "{gap} µs");
    for id in [&first, &second] {
        let score: String = redis::cmd("ZSCORE")
            .arg("rsmq:b")
            .arg(id.as_ref())
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(score, (us(id.as_ref()) / 1000).to_string(), "{id}");
    }
    // every send above went through the function, where it is one: 28 of
    // them (a failed FCALL counts as a call too)
    if !function {
        return;
    }
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut con)
        .await
        .unwrap();
    let field = |name: &str| -> i64 {
        let line = stats
            .lines()
            .find(|l| l.starts_with("cmdstat_fcall:"))
            .unwrap_or_else(|| panic!("no FCALL in {stats}"));
        let at = line.find(&format!("{name}=")).unwrap() + name.len() + 1;
        line[at..].split(',').next().unwrap().parse().unwrap()
    };
    assert!(field("calls") - field("failed_calls") >= 28, "{stats}");
}

/// A queue whose `delay` field another client wrote as "nan" is no delay: a
/// send is refused with an error, and nothing is written (not a job scored
/// -2^63, due at once, which a C cast of NaN would make).
#[tokio::test]
async fn a_send_to_a_queue_whose_delay_is_not_a_number_is_refused() {
    let server = RedisServer::start();
    let (_, rsmq) = backend_with_queue(&server).await;
    let mut con = server.raw().await;
    let _: () = redis::cmd("HSET")
        .arg("rsmq:q:Q")
        .arg("delay")
        .arg("nan")
        .query_async(&mut con)
        .await
        .unwrap();
    let err = rsmq.send("q", SendMessage::new("a")).await.unwrap_err();
    assert!(err.to_string().contains("delay"), "{err}");
    let n: u64 = redis::cmd("ZCARD")
        .arg("rsmq:q")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(n, 0, "nothing queued");
}

/// The counters hash (`ns:q:stats`) is made a hash table once it holds more
/// than 128 fields, by the first settle of an hour: a listpack of a week's
/// hours is searched field by field on every settle and overview. A small
/// one stays a listpack, and the readers of the counters ignore the field
/// that converts it.
#[tokio::test]
async fn a_counters_hash_of_a_few_days_becomes_a_hash_table_and_a_small_one_stays_a_listpack() {
    use redjob::backend::{Backend, Settle};
    let server = RedisServer::start();
    let (backend, rsmq) = backend_with_queue(&server).await;
    let mut con = server.raw().await;
    let probe = con.clone();
    let encoding = |key: &'static str| {
        let mut con = probe.clone();
        async move {
            redis::cmd("OBJECT")
                .arg("ENCODING")
                .arg(key)
                .query_async::<String>(&mut con)
                .await
                .unwrap()
        }
    };
    let run_one = |queue: &'static str| {
        let (backend, rsmq) = (backend.clone(), rsmq.clone());
        async move {
            rsmq.send(queue, SendMessage::new("{}")).await.unwrap();
            let leased = backend
                .fetch(queue, 1, Duration::from_secs(30))
                .await
                .unwrap()
                .jobs;
            let settle = Settle {
                acks: leased.iter().map(|d| (d.id, d.token)).collect(),
                ..Settle::default()
            };
            assert_eq!(backend.settle(queue, &settle).await.unwrap().acked, 1);
        }
    };
    // a week of hours long past (hour 1 in every slot: this hour's is new)
    let mut old: Vec<(String, String)> = (0..169)
        .map(|i| (format!("h{i}"), "1 7 1".into()))
        .collect();
    old.push(("processed".into(), "1183".into()));
    let _: () = redis::cmd("HSET")
        .arg("rsmq:q:stats")
        .arg(&old)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(encoding("rsmq:q:stats").await, "listpack");
    run_one("q").await;
    assert_eq!(encoding("rsmq:q:stats").await, "hashtable");
    // the readers see the counters and the ring, not the field
    assert_eq!(backend.stats("q").await.unwrap().processed, 1184);
    let hours = backend.hours("q").await.unwrap();
    assert_eq!(
        hours.iter().map(|h| h.processed).sum::<u64>(),
        1,
        "{hours:?}"
    );
    assert!(backend.run_times("q").await.unwrap().is_empty());
    // a small hash stays a listpack, without the field
    rsmq.create_queue("small", QueueOptions::default())
        .await
        .unwrap();
    run_one("small").await;
    assert_eq!(encoding("rsmq:small:stats").await, "listpack");
    let field: Option<String> = redis::cmd("HGET")
        .arg("rsmq:small:stats")
        .arg("redjob:table")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(field, None);
}

/// Counts look for leases an earlier redjob wrote (two `ZCOUNT`s a level)
/// only until a fetch found none left ("redjob:current"): a queue workers
/// fetch from is counted with one `ZCOUNT` for its ready jobs and one for
/// the rest, a queue no fetch touched yet with all four.
#[tokio::test]
async fn counts_look_for_an_earlier_redjobs_leases_only_until_a_fetch_found_none() {
    use redjob::backend::Backend;
    use redjob::inspect::Inspect;
    let server = RedisServer::start();
    let (backend, rsmq) = backend_with_queue(&server).await;
    let mut con = server.raw().await;
    rsmq.send("q", SendMessage::new("{}")).await.unwrap();
    let zcounts = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        async move {
            common::command_calls(&mut con)
                .await
                .get("zcount")
                .copied()
                .unwrap_or(0)
        }
    };
    let before = zcounts(&mut con).await;
    assert_eq!(backend.counts("q").await.unwrap().ready, 1);
    assert_eq!(zcounts(&mut con).await - before, 4, "never fetched");
    backend
        .fetch("q", 1, Duration::from_secs(30))
        .await
        .unwrap();
    let before = zcounts(&mut con).await;
    assert_eq!(backend.counts("q").await.unwrap().in_flight, 1);
    assert_eq!(zcounts(&mut con).await - before, 2, "fetched");
}

/// What a send leaves in a queue: its outcome ("ok", "too large", or the
/// error's text), its score less the id's ms, and the hash's `totalsent`,
/// `redjob:waiting`, `redjob:paused`, `redjob:handoff`, `totalrecv`,
/// `redjob:leased`, what it handed the worker of `LIVE` (recorded in the
/// hash), `redjob:handoffs`, what it handed as its message, and its lease
/// counts' sum.
type Sent = (String, Option<f64>, Vec<Option<String>>);

/// A state of a queue's hash (its fields set) and the message sent to it.
type State = (&'static str, Vec<(&'static str, String)>, SendMessage);

/// The channel of a worker that listens, in `the_lone_calls_write_what_the_general_call_writes`.
const LIVE: &str = "rsmq:w:live";

/// The lone call (a lone message at priority 0, not delayed) writes what
/// the general call writes for one message, whatever the queue's hash holds.
/// Each state is set on three queues: one sent to by a fresh handle (its
/// first send is the lone call with the lease counts, which hands off), one
/// by a handle whose last send to it found no worker waiting (the lean call,
/// without them), and one by the general call (four keys and seven
/// arguments, as a batch or a delayed message is sent) made by hand; the
/// slow log shows which call each side made. The lean call hands nothing
/// off and leaves a registration as it found it; in all else the three
/// agree.
#[tokio::test]
async fn the_lone_calls_write_what_the_general_call_writes() {
    use futures::StreamExt;
    let server = RedisServer::start();
    let mut con = server.raw().await;
    let lean = Rsmq::connect(&server.url()).await.unwrap();
    // a worker that listens for its hand-offs
    let raw = redis::Client::open(server.url()).unwrap();
    let mut listener = raw.get_async_pubsub().await.unwrap();
    listener.subscribe(LIVE).await.unwrap();
    let ms_of = |id: &str| i64::from_str_radix(&id[..10], 36).unwrap() / 1000;
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let reg = |lease: &str, channel: &str| ("redjob:handoff", format!("v2 {lease} {channel} q"));
    // a registration good for as many jobs as "redjob:handoffs" says
    let counted = ("redjob:handoff", format!("v3 30000 {LIVE} q"));
    let count = |n: &str| ("redjob:handoffs", n.to_owned());
    let states: Vec<State> = vec![
        ("plain", vec![], SendMessage::new("x")),
        ("delay", vec![("delay", "2".into())], SendMessage::new("x")),
        ("nan", vec![("delay", "nan".into())], SendMessage::new("x")),
        (
            "garbage delay",
            vec![("delay", "abc".into())],
            SendMessage::new("x"),
        ),
        (
            "past",
            vec![],
            SendMessage::new("x").at_unix_ms(now_ms() - 60_000),
        ),
        (
            "future",
            vec![],
            SendMessage::new("x").at_unix_ms(now_ms() + 60_000),
        ),
        (
            "fraction fits",
            vec![("maxsize", "1500.5".into())],
            SendMessage::new("x".repeat(1500)),
        ),
        (
            "fraction over",
            vec![("maxsize", "1500.5".into())],
            SendMessage::new("x".repeat(1501)),
        ),
        (
            "garbage maxsize",
            vec![("maxsize", "abc".into())],
            SendMessage::new("x"),
        ),
        (
            "unlimited",
            vec![("maxsize", "-1".into())],
            SendMessage::new("x".repeat(70_000)),
        ),
        (
            "waiting",
            vec![("redjob:waiting", "1".into())],
            SendMessage::new("x"),
        ),
        (
            "paused",
            vec![("redjob:paused", "1 me".into())],
            SendMessage::new("x"),
        ),
        // a registered worker that listens is handed the message, one of a
        // lease of whole seconds and one of another length (the token's two
        // ways to its digits), with the counts it adds to
        (
            "handed",
            vec![
                reg("30000", LIVE),
                ("redjob:waiting", "1".into()),
                ("totalrecv", "7".into()),
            ],
            SendMessage::new("x"),
        ),
        (
            "handed, a lease of 1.5 s",
            vec![reg("1500", LIVE), ("redjob:leased", "3".into())],
            SendMessage::new("x"),
        ),
        (
            "handed, due in the past",
            vec![reg("30000", LIVE)],
            SendMessage::new("x").at_unix_ms(now_ms() - 60_000),
        ),
        // a counted one: kept and counted down while more than one is left,
        // cleared by the last (a count that is none is one); a "v2" is good
        // for one whatever the count says
        (
            "handed, counted, three left",
            vec![counted.clone(), count("3")],
            SendMessage::new("x"),
        ),
        (
            "handed, counted, the last",
            vec![counted.clone(), count("1")],
            SendMessage::new("x"),
        ),
        (
            "handed, counted, no count",
            vec![counted.clone()],
            SendMessage::new("x"),
        ),
        (
            "handed, counted, a count that is none",
            vec![counted.clone(), count("2.5")],
            SendMessage::new("x"),
        ),
        (
            "handed, a v2 beside a count",
            vec![reg("30000", LIVE), count("5")],
            SendMessage::new("x"),
        ),
        // a line waits behind the one in place ("+" on its count): the last
        // job that one is good for passes the place to the next in line;
        // one whose worker does not listen gives it up to the next, which
        // is handed the job
        (
            "handed, counted, the last, one in line",
            vec![
                counted.clone(),
                count("1+"),
                ("redjob:line", "2 v3 30000 rsmq:w:next q".into()),
            ],
            SendMessage::new("x"),
        ),
        (
            "handed, counted, three left, one in line",
            vec![
                counted.clone(),
                count("3+"),
                ("redjob:line", "2 v3 30000 rsmq:w:next q".into()),
            ],
            SendMessage::new("x"),
        ),
        (
            "handed, from the line, nobody listens in place",
            vec![
                ("redjob:handoff", "v3 30000 rsmq:w:gone q".into()),
                count("4+"),
                (
                    "redjob:line",
                    format!(
                        "1 v3 30000 rsmq:w:gone2 q\n3 v3 30000 {LIVE} q\n2 v3 30000 rsmq:w:next q"
                    ),
                ),
            ],
            SendMessage::new("x"),
        ),
        (
            "registered, a stale line",
            vec![
                reg("30000", "rsmq:w:gone"),
                count("2"),
                ("redjob:line", format!("3 v3 30000 {LIVE} q")),
                ("redjob:waiting", "1".into()),
            ],
            SendMessage::new("x"),
        ),
        (
            "registered, counted, paused",
            vec![
                counted.clone(),
                count("3"),
                ("redjob:paused", "1 me".into()),
            ],
            SendMessage::new("x"),
        ),
        (
            "registered, due later",
            vec![reg("30000", LIVE)],
            SendMessage::new("x").at_unix_ms(now_ms() + 60_000),
        ),
        (
            "registered, nobody listens",
            vec![reg("30000", "rsmq:w:gone"), ("redjob:waiting", "1".into())],
            SendMessage::new("x"),
        ),
        (
            "registered, an earlier redjob's",
            vec![("redjob:handoff", format!("{LIVE} q"))],
            SendMessage::new("x"),
        ),
        (
            "registered, paused",
            vec![reg("30000", LIVE), ("redjob:paused", "1 me".into())],
            SendMessage::new("x"),
        ),
        (
            "registered, throttled",
            vec![
                reg("30000", LIVE),
                ("redjob:throttled", (now_ms() + 60_000).to_string()),
            ],
            SendMessage::new("x"),
        ),
        (
            "registered, limited across the fleet",
            vec![reg("30000", LIVE), ("redjob:concurrency", "0 4".into())],
            SendMessage::new("x"),
        ),
    ];
    let mut calls = Vec::new();
    let mut function = String::new();
    // the hand-offs' messages, as the worker of LIVE reads them
    let mut messages = listener.on_message();
    for (i, (what, fields, msg)) in states.into_iter().enumerate() {
        let registered = fields.iter().any(|(f, _)| *f == "redjob:handoff");
        let mut got: Vec<Sent> = Vec::new();
        for side in ["hand", "lean", "general"] {
            let q = format!("{}{i}", &side[..1]);
            lean.create_queue(&q, QueueOptions::default())
                .await
                .unwrap();
            if side == "lean" {
                // a send that finds no worker waiting, then the queue emptied
                lean.send(&q, SendMessage::new("first")).await.unwrap();
                let _: () = redis::pipe()
                    .cmd("DEL")
                    .arg(format!("rsmq:{q}"))
                    .cmd("HDEL")
                    .arg(format!("rsmq:{q}:Q"))
                    .arg("totalsent")
                    .query_async(&mut con)
                    .await
                    .unwrap();
            }
            for (f, v) in &fields {
                let _: () = redis::cmd("HSET")
                    .arg(format!("rsmq:{q}:Q"))
                    .arg(f)
                    .arg(v.replace(" q", &format!(" {q}")))
                    .query_async(&mut con)
                    .await
                    .unwrap();
            }
            let _: () = redis::pipe()
                .cmd("SLOWLOG")
                .arg("RESET")
                .cmd("CONFIG")
                .arg("SET")
                .arg("slowlog-log-slower-than")
                .arg(0)
                .query_async(&mut con)
                .await
                .unwrap();
            let reply: Result<String, String> = match side {
                "general" => {
                    let suffix = "a".repeat(22);
                    let when = match msg.when {
                        redjob::queue::When::AtUnixMs(ms) => format!("a{ms}"),
                        _ => String::new(),
                    };
                    let r: redis::RedisResult<redis::Value> = redis::cmd("FCALL")
                        .arg(&function)
                        .arg(4)
                        .arg(format!("rsmq:{q}"))
                        .arg(format!("rsmq:{q}:Q"))
                        .arg(format!("rsmq:{q}:leases"))
                        .arg(format!("rsmq:{q}:exact"))
                        .arg(format!("rsmq:rt:{q}"))
                        .arg("0")
                        .arg(msg.body.len())
                        .arg("0")
                        .arg(&suffix)
                        .arg(when)
                        .arg(&msg.body[..])
                        .query_async(&mut con)
                        .await;
                    match r {
                        Ok(redis::Value::Array(v)) => match v.as_slice() {
                            [redis::Value::Int(1), redis::Value::BulkString(p), ..] => {
                                Ok(format!("{}{suffix}", String::from_utf8_lossy(p)))
                            }
                            [redis::Value::Int(-2), ..] => Err("too large".into()),
                            other => Err(format!("{other:?}")),
                        },
                        Ok(other) => Err(format!("{other:?}")),
                        Err(e) => Err(e.to_string()),
                    }
                }
                _ => {
                    let handle = if side == "hand" {
                        Rsmq::connect(&server.url()).await.unwrap()
                    } else {
                        lean.clone()
                    };
                    match handle.send(&q, msg.clone()).await {
                        Ok(id) => Ok(id.to_string()),
                        Err(Error::MessageTooLarge { .. }) => Err("too large".into()),
                        Err(e) => Err(e.to_string()),
                    }
                }
            };
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("slowlog-log-slower-than")
                .arg(10_000)
                .query_async(&mut con)
                .await
                .unwrap();
            let sends: Vec<Vec<String>> = common::slow_fcalls(&mut con)
                .await
                .into_iter()
                .filter(|c| c[1].starts_with("redjob_send_"))
                .collect();
            if let Some(c) = sends.first() {
                function.clone_from(&c[1]);
            }
            calls.push((what, side, sends.first().map(|c| c[2].clone())));
            let (outcome, offset) = match &reply {
                Ok(id) => {
                    let score: Option<f64> = redis::cmd("ZSCORE")
                        .arg(format!("rsmq:{q}"))
                        .arg(id)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    ("ok".to_owned(), score.map(|s| s - ms_of(id) as f64))
                }
                // the error's message, less where in the script and the
                // pipeline it was
                Err(text) => {
                    let from = text
                        .find("user_function:")
                        .and_then(|at| text[at..].find(": ").map(|n| at + n + 2))
                        .unwrap_or(0);
                    let to = text[from..]
                        .find(" script:")
                        .map_or(text.len(), |n| from + n);
                    (text[from..to].to_owned(), None)
                }
            };
            let hash: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(format!("rsmq:{q}:Q"))
                .arg(&[
                    "totalsent",
                    "redjob:waiting",
                    "redjob:paused",
                    "redjob:handoff",
                    "totalrecv",
                    "redjob:leased",
                ])
                .arg(format!("redjob:handed {LIVE}"))
                .arg("redjob:handoffs")
                .arg("redjob:line")
                .arg(format!("redjob:handed {LIVE} 3"))
                .query_async(&mut con)
                .await
                .unwrap();
            // a counted registration's hand-off that found 3 is noted in a
            // field of its own (only where the state had three left)
            let mut hash = hash;
            let own = hash.pop().flatten();
            if (what.starts_with("handed, counted, three left")
                || what == "handed, from the line, nobody listens in place")
                && side != "lean"
            {
                assert_eq!(hash[6], None, "{what} {side}");
                assert!(own.is_some(), "{what} {side}");
                hash[6] = own;
            } else {
                assert_eq!(own, None, "{what} {side}");
            }
            // what was handed, "<id> <token> <priority>": the priority alone
            // compared (the id and the token differ between the sides)
            // a registration names its queue, which differs between the sides
            for at in [3, 8] {
                if let Some(h) = hash[at].as_mut() {
                    *h = h.replace(&format!(" {q}"), " q");
                }
            }
            if let Some(h) = hash[6].as_mut() {
                *h = h
                    .split_once(' ')
                    .map_or(h.clone(), |(_, rest)| rest.to_owned());
                *h = h.split_once(' ').map_or(h.clone(), |(_, p)| p.to_owned());
            }
            // the message handed on LIVE, "<queue> <priority> <id> <token>
            // <now µs> <body>": the id the send's, the token its lease's end,
            // the µs the id's; compared without them
            let lease = if what.contains("1.5 s") { 1500 } else { 30_000 };
            hash.push(
                match (&reply, what.starts_with("handed") && side != "lean") {
                    (Ok(id), true) => {
                        let m = tokio::time::timeout(Duration::from_secs(5), messages.next())
                            .await
                            .expect("handed on LIVE")
                            .unwrap();
                        let text: String = m.get_payload().unwrap();
                        let parts: Vec<&str> = text.splitn(6, ' ').collect();
                        let us = u64::from_str_radix(&id[..10], 36).unwrap();
                        assert_eq!(parts[2], id, "{what} {side}: {text}");
                        assert_eq!(
                            parts[3],
                            format!("{}.501", us / 1000 + lease),
                            "{what} {side}: {text}"
                        );
                        assert_eq!(parts[4], us.to_string(), "{what} {side}: {text}");
                        Some(format!(
                            "{} {} {}",
                            parts[0].replace(&q, "q"),
                            parts[1],
                            parts[5]
                        ))
                    }
                    _ => None,
                },
            );
            // the lease counts, summed over their seconds
            let counts: Vec<u64> = redis::cmd("HVALS")
                .arg(format!("rsmq:{q}:leases"))
                .query_async(&mut con)
                .await
                .unwrap();
            hash.push((!counts.is_empty()).then(|| counts.iter().sum::<u64>().to_string()));
            got.push((outcome, offset, hash));
        }
        // a time ahead or behind is as far from the send's ms on each side
        // (within a ms or two of their sends)
        let near = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b))
                if what.contains("past") || what.contains("later") || what == "future" =>
            {
                (a - b).abs() < 1_000.0
            }
            (a, b) => a == b,
        };
        let (hand, lean_got, general) = (&got[0], &got[1], &got[2]);
        // a handed message is scored by its lease's token, its end's ms and
        // delivery 1 (.501), recorded as handed, and counted as received
        if what.starts_with("handed") {
            let lease = if what.contains("1.5 s") {
                1500.501
            } else {
                30000.501
            };
            let off = hand.1.expect("scored");
            assert!((off - lease).abs() < 0.001, "{what}: {got:?}");
            // (the id and the token differ between the sides; the priority)
            assert_eq!(hand.2[6].as_deref(), Some("0"), "{what}: {got:?}");
        } else {
            assert_eq!(hand.2[6], None, "{what}: {got:?}");
        }
        assert_eq!(hand.0, general.0, "{what}: {got:?}");
        assert_eq!(hand.2, general.2, "{what}: {got:?}");
        assert!(near(hand.1, general.1), "{what}: {got:?}");
        assert_eq!(lean_got.0, general.0, "{what}: {got:?}");
        if !registered {
            assert_eq!(lean_got.2, general.2, "{what}: {got:?}");
            assert!(near(lean_got.1, general.1), "{what}: {got:?}");
        } else if lean_got.0 == "ok" {
            // the lean call hands nothing off and keeps the registration
            let kept = fields.iter().find(|(f, _)| *f == "redjob:handoff").unwrap();
            assert_eq!(
                lean_got.2[3].as_deref(),
                Some(kept.1.as_str()),
                "{what}: {got:?}"
            );
            assert_eq!(lean_got.2[6], None, "{what}: {got:?}");
            let kept = fields.iter().find(|(f, _)| *f == "redjob:handoffs");
            assert_eq!(
                lean_got.2[7].as_deref(),
                kept.map(|k| k.1.as_str()),
                "{what}: {got:?}"
            );
            let kept = fields.iter().find(|(f, _)| *f == "redjob:line");
            assert_eq!(
                lean_got.2[8].as_deref(),
                kept.map(|k| k.1.as_str()),
                "{what}: {got:?}"
            );
            assert_eq!(lean_got.2[9..], [None, None], "{what}: {got:?}");
        }
        // a counted registration with more than one left stays, counted
        // down; any other that handed a job is cleared
        let (registration, left) = (hand.2[3].as_deref(), hand.2[7].as_deref());
        match what {
            "handed, counted, three left" => {
                assert_eq!(
                    (registration, left),
                    (Some(counted.1.as_str()), Some("2")),
                    "{got:?}"
                );
            }
            "handed, counted, the last" => assert_eq!((registration, left), (Some(""), Some("1"))),
            "handed, counted, a count that is none" => {
                assert_eq!((registration, left), (Some(""), Some("2.5")));
            }
            "handed, a v2 beside a count" => {
                assert_eq!((registration, left), (Some(""), Some("5")))
            }
            "handed, counted, the last, one in line" => assert_eq!(
                (registration, left, hand.2[8].as_deref()),
                (Some("v3 30000 rsmq:w:next q"), Some("2"), Some(""))
            ),
            "handed, counted, three left, one in line" => assert_eq!(
                (registration, left, hand.2[8].as_deref()),
                (
                    Some(counted.1.as_str()),
                    Some("2+"),
                    Some("2 v3 30000 rsmq:w:next q")
                )
            ),
            // the one in place and the first in line are passed over, the
            // second in line is handed the job and counted down in place
            "handed, from the line, nobody listens in place" => assert_eq!(
                (registration, left, hand.2[8].as_deref()),
                (
                    Some(counted.1.as_str()),
                    Some("2+"),
                    Some("2 v3 30000 rsmq:w:next q")
                )
            ),
            // a count without "+": the line is stale, and nobody is handed
            // the job
            "registered, a stale line" => assert_eq!(
                (registration, left, hand.2[8].as_deref()),
                (
                    Some(""),
                    Some("2"),
                    Some(format!("3 v3 30000 {LIVE} q").as_str())
                )
            ),
            "registered, counted, paused" => {
                assert_eq!((registration, left), (Some(counted.1.as_str()), Some("3")));
            }
            w if w.starts_with("handed") => assert_eq!(registration, Some(""), "{what}"),
            _ => {}
        }
    }
    // no other message went to LIVE
    let more = tokio::time::timeout(Duration::from_millis(200), messages.next()).await;
    assert!(
        more.is_err(),
        "{:?}",
        more.map(|m| m.map(|m| m.get_payload::<String>()))
    );
    drop(messages);
    for (what, side, keys) in &calls {
        let want = match *side {
            "hand" => "3",
            "lean" => "2",
            _ => "4",
        };
        assert_eq!(keys.as_deref(), Some(want), "{what} {side}: {calls:?}");
    }
}

/// A handed job's token is its lease's end, "<ms>.501", whatever the
/// microseconds of Redis's clock (the send takes a lease of whole seconds'
/// digits from TIME's, the first three of its microseconds padded to six).
/// Sends with a lease of 30 s, and every tenth of 1.5 s, until the clock's
/// microseconds were below 100,000 (a millisecond of one or two digits)
/// several times, within 4 s.
#[tokio::test]
async fn a_handed_jobs_token_is_its_lease_end_at_every_microsecond() {
    handed_tokens(&RedisServer::start()).await;
}

/// The same on Redis 6.2, where the send is a script whose chunk (and so
/// its memos of registrations and seconds) runs anew on every call.
#[tokio::test]
async fn a_handed_jobs_token_is_its_lease_end_as_a_script() {
    let bin = common::server_binary("redis-server-6.2", "REDJOB_REDIS_6_2_SERVER");
    handed_tokens(&RedisServer::start_binary(&bin)).await;
}

async fn handed_tokens(server: &RedisServer) {
    let mut con = server.raw().await;
    let rsmq = Rsmq::connect(&server.url()).await.unwrap();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let raw = redis::Client::open(server.url()).unwrap();
    let mut listener = raw.get_async_pubsub().await.unwrap();
    listener.subscribe("rsmq:w:live").await.unwrap();
    let started = std::time::Instant::now();
    let (mut low, mut sends) = (0, 0);
    while low < 5 && started.elapsed() < Duration::from_secs(4) {
        let lease = if sends % 10 == 9 { 1500 } else { 30_000 };
        let _: () = redis::cmd("HSET")
            .arg("rsmq:q:Q")
            .arg("redjob:handoff")
            .arg(format!("v2 {lease} rsmq:w:live q"))
            .query_async(&mut con)
            .await
            .unwrap();
        let id = rsmq.send("q", SendMessage::new("x")).await.unwrap();
        let handed: Option<String> = redis::cmd("HGET")
            .arg("rsmq:q:Q")
            .arg("redjob:handed rsmq:w:live")
            .query_async(&mut con)
            .await
            .unwrap();
        let us = u64::from_str_radix(&id.as_ref()[..10], 36).unwrap();
        let ms = us / 1000;
        assert_eq!(
            handed.as_deref(),
            Some(format!("{id} {}.501 0", ms + lease).as_str()),
            "sent at {us} µs with a lease of {lease} ms"
        );
        if us % 1_000_000 < 100_000 {
            low += 1;
        }
        sends += 1;
    }
    assert!(
        low >= 5,
        "{sends} sends in 4 s, {low} of them below 100,000 µs"
    );
}

/// A lean call that finds the send's function gone (a restart, a flush)
/// loads it and is sent again, as any call of the function is.
#[tokio::test]
async fn a_lean_call_loads_the_function_again_after_a_flush() {
    let server = RedisServer::start();
    let (_, rsmq) = backend_with_queue(&server).await;
    let mut con = server.raw().await;
    rsmq.send("q", SendMessage::new("a")).await.unwrap();
    rsmq.send("q", SendMessage::new("b")).await.unwrap();
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .query_async(&mut con)
        .await
        .unwrap();
    let id = rsmq.send("q", SendMessage::new("c")).await.unwrap();
    // each FCALL's key count, oldest first: the one the flush failed, then
    // the one sent again once loaded, both lean
    let keys = common::send_calls(&mut con).await;
    assert_eq!(keys, ["2", "2"]);
    let body: Option<String> = redis::cmd("HGET")
        .arg("rsmq:q:Q")
        .arg(id.as_ref())
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(body.as_deref(), Some("c"));
}

/// With `realtime` on, a send at a priority other than 0 publishes the size of
/// its priority's sorted set (docs/jobs.md, "Priorities"), whatever script
/// sends it: a unique send at priority 3 counts the jobs at priority 3 as a
/// plain send at priority 3 does. unique.lua published the length of RSMQ's
/// sorted set (priority 0) instead, here 0 where three jobs wait at 3.
#[tokio::test]
async fn realtime_publishes_a_unique_sends_priority_level_as_a_plain_sends() {
    use futures::StreamExt;
    use redjob::queue::Unique;
    let server = RedisServer::start();
    let cfg = redjob::queue::RsmqConfig {
        realtime: true,
        ..redjob::queue::RsmqConfig::from_url(server.url())
    };
    let rsmq = Rsmq::with_config(cfg).await.unwrap();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe("rsmq:rt:q").await.unwrap();
    rsmq.send("q", SendMessage::new("a").priority(3))
        .await
        .unwrap();
    rsmq.send("q", SendMessage::new("b").priority(3))
        .await
        .unwrap();
    rsmq.send(
        "q",
        SendMessage::new("c").priority(3).unique(Unique::new("k")),
    )
    .await
    .unwrap();
    let mut stream = pubsub.on_message();
    let mut got = Vec::new();
    for _ in 0..3 {
        let msg = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .unwrap()
            .unwrap();
        got.push(msg.get_payload::<i64>().unwrap());
    }
    assert_eq!(got, [1, 2, 3], "each send publishes the size of level 3");
}

/// A send whose messages alternate between plain and unique (one call each:
/// 100 calls, seven round trips of up to 16 calls) stores every message once,
/// and returns each one's id at its place: the id's body is the message
/// given there, and a unique one's key is held by it.
#[tokio::test]
async fn a_send_of_many_calls_goes_in_round_trips_and_returns_each_id_at_its_place() {
    use redjob::inspect::Inspect;
    use redjob::queue::Unique;
    let server = RedisServer::start();
    let (_backend, rsmq) = backend_with_queue(&server).await;
    let msgs: Vec<SendMessage> = (0..100)
        .map(|i| {
            let m = SendMessage::new(format!("m{i}"));
            if i % 2 == 0 {
                m
            } else {
                m.unique(Unique::new(format!("k{i}")))
            }
        })
        .collect();
    let ids = rsmq.send_batch("q", &msgs).await.unwrap();
    assert_eq!(ids.len(), 100);
    assert_eq!(rsmq.attributes("q").await.unwrap().msgs, 100);
    for (i, id) in ids.iter().enumerate() {
        let job = rsmq
            .job("q", id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{i}: {id}"));
        assert_eq!(job.body, format!("m{i}").into_bytes(), "{i}");
    }
    // the unique ones hold their keys: sent again, each is a duplicate
    let again = rsmq.send_outcomes("q", &msgs[1..2]).await.unwrap();
    assert_eq!(again[0].id, ids[1]);
}
