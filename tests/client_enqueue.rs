//! The enqueue client: typed jobs into RSMQ queues, delays, batches and connection URLs.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{RedisServer, command_calls};
use redis::AsyncCommands;
use redjob::client::{ClientConfig, EnqueueOptions};
use redjob::queue::QueueOptions;
use redjob::queue::Queues;
use redjob::{Client, Error, Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "email", queue = "mail")]
struct Email {
    to: String,
}

impl Job for Email {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "n")]
struct N {
    i: u32,
}

impl Job for N {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

async fn score(con: &mut redis::aio::MultiplexedConnection, key: &str, id: &redjob::JobId) -> u64 {
    let s: f64 = con.zscore(key, id.as_str()).await.unwrap();
    s as u64
}

#[tokio::test]
async fn enqueue_creates_the_queue_and_stores_the_envelope() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let id = client.enqueue(&Email { to: "a@b.c".into() }).await.unwrap();
    let mut con = server.raw().await;
    let body: String = con.hget("rsmq:mail:Q", id.as_str()).await.unwrap();
    assert_eq!(body, r#"{"type":"email","args":{"to":"a@b.c"}}"#);
    let attrs = client.queues().attributes("mail").await.unwrap();
    assert_eq!(
        (attrs.vt, attrs.delay, attrs.maxsize, attrs.totalsent),
        (30, 0, 65536, 1)
    );
    assert_eq!(client.queues().list_queues().await.unwrap(), ["mail"]);
    let sent = id
        .sent_at()
        .unwrap()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(now.abs_diff(sent) < 5_000, "id prefix is the Redis time");
    assert_eq!(score(&mut con, "rsmq:mail", &id).await, sent, "due now");
}

#[tokio::test]
async fn enqueue_in_and_at_score_by_redis_time() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut con = server.raw().await;
    let id = client
        .enqueue_in(&Email { to: "x".into() }, Duration::from_millis(2500))
        .await
        .unwrap();
    let due = score(&mut con, "rsmq:mail", &id).await;
    let sent = id.sent_ms();
    assert!(
        (2500..2510).contains(&(due - sent)),
        "due {due} sent {sent}"
    );

    // a time 400 µs into a ms is due at the ms's end, never before it (the
    // old code truncated it to the ms's start, 400 µs early)
    let hour_on = SystemTime::now() + Duration::from_secs(3600);
    let at_ms = hour_on.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let at = UNIX_EPOCH + Duration::from_micros(at_ms * 1000 + 400);
    let id = client
        .enqueue_at(&Email { to: "y".into() }, at)
        .await
        .unwrap();
    assert_eq!(score(&mut con, "rsmq:mail", &id).await, at_ms + 1);
    let id = client
        .enqueue_at(
            &Email { to: "y".into() },
            UNIX_EPOCH + Duration::from_millis(at_ms),
        )
        .await
        .unwrap();
    assert_eq!(
        score(&mut con, "rsmq:mail", &id).await,
        at_ms,
        "a whole ms is kept"
    );

    let past = SystemTime::now() - Duration::from_secs(3600);
    let id = client
        .enqueue_at(&Email { to: "z".into() }, past)
        .await
        .unwrap();
    assert!(
        score(&mut con, "rsmq:mail", &id).await >= id.sent_ms(),
        "a past time means now"
    );

    // nothing is due but the past one
    let due_now = client
        .queues()
        .receive_batch("mail", 10, None)
        .await
        .unwrap();
    assert_eq!(due_now.len(), 1);
    assert_eq!(due_now[0].id, id);
}

#[tokio::test]
async fn per_call_queue_override_and_validation() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .enqueue_with(
            &Email { to: "o".into() },
            EnqueueOptions::new().queue("urgent"),
        )
        .await
        .unwrap();
    assert_eq!(client.queues().attributes("urgent").await.unwrap().msgs, 1);
    assert!(matches!(
        client
            .enqueue_with(
                &Email { to: "o".into() },
                EnqueueOptions::new().queue("no good")
            )
            .await,
        Err(Error::InvalidQueueName { .. })
    ));
    client
        .queues()
        .create_queue(
            "mail",
            QueueOptions {
                maxsize: 1024,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        client
            .enqueue(&Email {
                to: "x".repeat(2000)
            })
            .await,
        Err(Error::MessageTooLarge { max: 1024, .. })
    ));
    // one rule for a job's due time, however it is given: up to 50 years ahead
    let year = Duration::from_secs(365 * 86_400);
    client
        .enqueue_in(&Email { to: "o".into() }, year)
        .await
        .unwrap();
    client
        .enqueue_at(&Email { to: "o".into() }, SystemTime::now() + year)
        .await
        .unwrap();
    assert!(matches!(
        client
            .enqueue_in(&Email { to: "o".into() }, 51 * year)
            .await,
        Err(Error::InvalidValue { what: "delay", .. })
    ));
    assert!(matches!(
        client
            .enqueue_at(&Email { to: "o".into() }, SystemTime::now() + 51 * year)
            .await,
        Err(Error::InvalidValue {
            what: "due time",
            ..
        })
    ));
}

#[tokio::test]
async fn namespace_and_queue_defaults_come_from_config() {
    let server = RedisServer::start();
    let cfg = ClientConfig {
        namespace: "myapp".into(),
        queue_defaults: QueueOptions {
            vt: 90,
            ..Default::default()
        },
        ..ClientConfig::from_url(server.url())
    };
    let client = Client::from_config(cfg).await.unwrap();
    client.enqueue(&N { i: 1 }).await.unwrap();
    let mut con = server.raw().await;
    let n: u64 = con.zcard("myapp:default").await.unwrap();
    assert_eq!(n, 1);
    let vt: u64 = con.hget("myapp:default:Q", "vt").await.unwrap();
    assert_eq!(vt, 90);
    let exists: bool = con.exists("rsmq:default").await.unwrap();
    assert!(!exists);
    // a namespace no key prefix should have: refused at connect, by name
    for odd in ["", "my app", "a\nb", "{tag}", &"x".repeat(201)] {
        let cfg = ClientConfig {
            namespace: odd.to_string(),
            ..ClientConfig::from_url(server.url())
        };
        match Client::from_config(cfg).await {
            Err(Error::InvalidValue { what, .. }) => assert_eq!(what, "namespace"),
            other => panic!("{odd:?}: {:?}", other.map(|_| ())),
        }
        let cfg = redjob::queue::RsmqConfig {
            namespace: odd.to_string(),
            ..redjob::queue::RsmqConfig::from_url(server.url())
        };
        assert!(
            matches!(
                redjob::queue::Rsmq::with_config(cfg).await,
                Err(Error::InvalidValue {
                    what: "namespace",
                    ..
                })
            ),
            "{odd:?}"
        );
        // an open connection's handle too
        let con = redjob::connection::RedisConfig::from_url(server.url())
            .connect()
            .await
            .unwrap();
        assert!(
            matches!(
                redjob::queue::Rsmq::from_connection(con, odd, false),
                Err(Error::InvalidValue {
                    what: "namespace",
                    ..
                })
            ),
            "{odd:?}"
        );
    }
}

/// A send far larger than one reply's response timeout allows goes in round
/// trips of 16,000 jobs, each within it: the whole succeeds. The old code sent
/// it in one pipeline, whose reply took 16 parts' time and timed out (the
/// jobs stored, the caller told nothing of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_larger_than_one_reply_may_take_goes_in_parts_within_the_timeout() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let part: Vec<N> = (0..16_000).map(|i| N { i }).collect();
    // how long one part takes here, at its slowest of three
    let mut slowest = Duration::ZERO;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        client.enqueue_batch(&part).await.unwrap();
        slowest = slowest.max(t.elapsed());
    }
    let timeout = (slowest * 5).max(Duration::from_millis(100));
    let mut cfg = ClientConfig::from_url(server.url());
    cfg.redis.response_timeout = timeout;
    let tight = Client::from_config(cfg).await.unwrap();
    let jobs: Vec<N> = (0..16 * 16_000).map(|i| N { i }).collect();
    let t = std::time::Instant::now();
    let ids = tight.enqueue_batch(&jobs).await.unwrap_or_else(|e| {
        panic!(
            "a send of 16 parts (one took {slowest:?}) under a {timeout:?} timeout: {e}, after {:?}",
            t.elapsed()
        )
    });
    println!("16 parts in {:?}, each under {timeout:?}", t.elapsed());
    assert_eq!(ids.len(), jobs.len());
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, ids, "unique and in send order across the parts");
    let held = client.queues().attributes("default").await.unwrap().msgs;
    assert_eq!(held, 3 * 16_000 + 16 * 16_000);
}

#[tokio::test]
async fn batch_of_10000_costs_10_script_calls_in_one_pipeline() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("default", QueueOptions::default())
        .await
        .unwrap();
    let jobs: Vec<N> = (0..10_000).map(|i| N { i }).collect();
    let mut con = server.raw().await;
    let mut ids;
    // the first batch of a handle loads the script once; the second shows the steady cost
    for round in 0..2 {
        common::reset_stats(&mut con).await;
        ids = client.enqueue_batch(&jobs).await.unwrap();
        let calls = command_calls(&mut con).await;
        let evalsha = calls.get("evalsha").copied().unwrap_or(0);
        let from_client: u64 = calls
            .iter()
            .filter(|(name, _)| {
                ![
                    "hmget", "time", "zadd", "hset", "hincrby", "zcard", "publish",
                ]
                .contains(&name.as_str())
                    && !name.starts_with("config")
            })
            .map(|(_, n)| n)
            .sum();
        println!(
            "enqueue_batch of 10000 jobs, round {round}: {evalsha} EVALSHA in one pipeline, {from_client} client commands; {calls:?}"
        );
        assert_eq!(evalsha, 10);
        assert_eq!(
            from_client,
            if round == 0 { 11 } else { 10 },
            "script calls (+ one SCRIPT LOAD at first)"
        );
        assert_eq!(
            calls.get("zadd"),
            Some(&10),
            "one multi-member ZADD per 1000 jobs"
        );
        client.queues().delete_batch("default", &ids).await.unwrap();
    }
    let ids = client.enqueue_batch(&jobs).await.unwrap();
    assert_eq!(ids.len(), 10_000);
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, ids, "unique and in send order");
    let msgs = client
        .queues()
        .receive_batch("default", 10_000, None)
        .await
        .unwrap();
    let order: Vec<u32> = msgs
        .iter()
        .map(|m| {
            serde_json::from_str::<serde_json::Value>(&m.body).unwrap()["args"]["i"]
                .as_u64()
                .unwrap() as u32
        })
        .collect();
    assert_eq!(
        order,
        (0..10_000).collect::<Vec<_>>(),
        "received in FIFO order"
    );
}

#[tokio::test]
async fn password_and_acl_user_urls() {
    let server = RedisServer::start_with(&[
        "--requirepass",
        "s3cret",
        "--user",
        "app",
        "on",
        ">apppw",
        "~*",
        "&*",
        "+@all",
    ]);
    let port = server.port;
    let client = Client::connect(&format!("redis://:s3cret@127.0.0.1:{port}"))
        .await
        .unwrap();
    client.enqueue(&N { i: 1 }).await.unwrap();
    let app = Client::connect(&format!("redis://app:apppw@127.0.0.1:{port}/0"))
        .await
        .unwrap();
    app.enqueue(&N { i: 2 }).await.unwrap();
    assert_eq!(app.queues().attributes("default").await.unwrap().msgs, 2);
    let err = Client::connect(&format!("redis://app:wrong@127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "cannot connect to Redis at redis://app:***@127.0.0.1:{port}: "
        )),
        "{text}"
    );
    assert!(!text.contains("wrong"), "{text}");
}

#[tokio::test]
async fn a_refused_connection_names_the_url_once_with_one_cause() {
    let port = RedisServer::free_port();
    let err = Client::connect(&format!("redis://app:pw@127.0.0.1:{port}/0"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "cannot connect to Redis at redis://app:***@127.0.0.1:{port}/0: "
        )),
        "{text}"
    );
    assert_eq!(text.matches("refused").count(), 1, "{text}");
    // as an error report (anyhow, `Box<dyn Error>`) prints it: no repeated causes
    assert!(std::error::Error::source(&err).is_none());
}

#[cfg(not(feature = "tls"))]
#[tokio::test]
async fn rediss_without_tls_feature_is_a_clear_error() {
    let err = Client::connect("rediss://127.0.0.1:1").await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidValue {
                what: "redis url",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("redjob's `tls` feature"), "{err}");
}

/// Unique for an hour: `unique_for` alone makes a type unique (keep).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "hourly_digest", queue = "digest", unique_for = "1h")]
struct Digest {
    user: u64,
    tags: std::collections::HashMap<String, u32>,
}

impl Job for Digest {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn unique_attributes_derive_keys_from_arguments_and_options_override_them() {
    use redjob::job::{JobSpec, unique_key};
    use redjob::queue::{OnDuplicate, SendOutcome};
    assert_eq!(Digest::OPTIONS.unique, Some(OnDuplicate::Keep));
    assert_eq!(Digest::OPTIONS.unique_for, Some(Duration::from_secs(3600)));
    assert_eq!(Email::OPTIONS.unique, None);
    // a map's entry order does not change the key
    let tags = |pairs: &[(&str, u32)]| pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let a = Digest {
        user: 1,
        tags: tags(&[("x", 1), ("y", 2), ("z", 3)]),
    };
    let b = Digest {
        user: 1,
        tags: tags(&[("z", 3), ("x", 1), ("y", 2)]),
    };
    assert_eq!(unique_key(&a).unwrap(), unique_key(&b).unwrap());
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let id = client.enqueue(&a).await.unwrap();
    assert_eq!(client.enqueue(&b).await.unwrap(), id);
    // the key lives an hour at most
    let mut con = server.raw().await;
    let entry: String = con
        .hget(
            "rsmq:digest:unique",
            format!("k:{}", unique_key(&a).unwrap()),
        )
        .await
        .unwrap();
    let expires: u64 = entry.rsplit(' ').next().unwrap().parse().unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(expires.abs_diff(now + 3_600_000) < 60_000, "{entry}");
    // options: a plain type made unique per call, with a policy
    let opts = EnqueueOptions::new().on_duplicate(OnDuplicate::ReplaceDelay);
    let e = Email { to: "a@b".into() };
    let first = client
        .enqueue_outcome(&e, opts.clone().delay(Duration::from_secs(60)))
        .await
        .unwrap();
    let moved = client.enqueue_outcome(&e, opts).await.unwrap();
    assert_eq!((moved.id, moved.outcome), (first.id, SendOutcome::Moved));
    // not unique without any of them
    assert_ne!(client.enqueue(&e).await.unwrap(), first.id);
}

#[tokio::test]
async fn an_enqueue_waiting_for_replicas_returns_once_they_have_it_or_says_they_do_not() {
    use redjob::connection::WaitForReplicas;
    let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let wait = |replicas, url: String| {
        let mut cfg = ClientConfig::from_url(url);
        cfg.redis.wait_for_replicas = Some(WaitForReplicas {
            replicas,
            timeout: Duration::from_millis(200),
        });
        cfg
    };
    // a wait at or above the response timeout is refused
    let mut slow = wait(1, master.url());
    slow.redis.response_timeout = Duration::from_millis(200);
    let e = Client::from_config(slow).await.unwrap_err();
    assert!(
        matches!(&e, Error::InvalidValue { what, .. } if *what == "wait_for_replicas"),
        "{e}"
    );

    // so is one over MAX_DELAY, whatever the response timeout
    let mut absurd = ClientConfig::from_url(master.url());
    absurd.redis.response_timeout = Duration::MAX;
    absurd.redis.wait_for_replicas = Some(WaitForReplicas {
        replicas: 1,
        timeout: Duration::from_secs(u64::MAX / 2),
    });
    let e = Client::from_config(absurd).await.unwrap_err();
    assert!(
        matches!(&e, Error::InvalidValue { what, .. } if *what == "wait_for_replicas"),
        "{e}"
    );

    // no replica: the job is stored, and the caller is told it is on the master only
    let lonely = Client::from_config(wait(1, master.url())).await.unwrap();
    let e = lonely.enqueue(&N { i: 1 }).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotReplicated {
                replicas: 0,
                wanted: 1
            }
        ),
        "{e}"
    );
    let mut con = master.raw().await;
    assert_eq!(con.zcard::<_, u64>("rsmq:default").await.unwrap(), 1);

    // with a replica in sync, enqueues (one and a batch) return when it has them
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let mut synced = false;
    for _ in 0..500 {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut con)
            .await
            .unwrap();
        if info
            .lines()
            .any(|l| l.starts_with("slave0:") && l.contains("state=online"))
        {
            synced = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(synced, "the replica did not sync within 10 s");
    // "online" on the master only says the snapshot went out: the replica may
    // still be loading it and acknowledges nothing until it is done (a 200 ms
    // WAIT then failed on a loaded machine). Wait until it says its link is up
    // and it has acknowledged a write, with time to spare.
    let mut on_replica = replica.raw().await;
    let mut up = false;
    for _ in 0..500 {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut on_replica)
            .await
            .unwrap();
        if info.lines().any(|l| l.trim() == "master_link_status:up") {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(up, "the replica's link did not come up within 10 s");
    let _: () = con.set("redjob-test:synced", 1).await.unwrap();
    let mut acked = 0;
    for _ in 0..50 {
        // well within the test connection's response timeout
        acked = redis::cmd("WAIT")
            .arg(1)
            .arg(200)
            .query_async(&mut con)
            .await
            .unwrap();
        if acked == 1 {
            break;
        }
    }
    assert_eq!(acked, 1, "the replica acknowledges writes");
    // time to spare for the replica's acknowledgement on a loaded machine
    let mut patient = wait(1, master.url());
    patient.redis.wait_for_replicas = Some(WaitForReplicas {
        replicas: 1,
        timeout: Duration::from_secs(2),
    });
    let durable = Client::from_config(patient).await.unwrap();
    durable.enqueue(&N { i: 2 }).await.unwrap();
    let batch: Vec<N> = (3..10).map(|i| N { i }).collect();
    assert_eq!(durable.enqueue_batch(&batch).await.unwrap().len(), 7);
    assert_eq!(
        on_replica.zcard::<_, u64>("rsmq:default").await.unwrap(),
        9,
        "the replica has every job once the enqueues returned"
    );
    // two replicas wanted, one there: not replicated enough
    let greedy = Client::from_config(wait(2, master.url())).await.unwrap();
    let e = greedy.enqueue(&N { i: 10 }).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotReplicated {
                replicas: 1,
                wanted: 2
            }
        ),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_enqueue_while_another_producer_creates_its_queue_stores_each_job_once() {
    // the batch's first call finds the queue missing, another producer's first
    // use creates it, and the batch's later calls store their jobs: only the
    // calls refused may be sent again, not the whole batch
    let server = RedisServer::start();
    let mut con = server.raw().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let other = Client::connect(&server.url()).await.unwrap();
    let jobs: Vec<N> = (0..2500).map(|i| N { i }).collect();
    let opts = EnqueueOptions::new().queue("race");
    for round in 0..80u64 {
        let _ = client.queues().delete_queue("race").await;
        let creator = {
            let other = other.clone();
            tokio::spawn(async move {
                // somewhere within the batch's few tens of ms
                tokio::time::sleep(Duration::from_micros(round % 40 * 500)).await;
                match other
                    .queues()
                    .create_queue("race", QueueOptions::default())
                    .await
                {
                    Ok(()) | Err(Error::QueueExists { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            })
        };
        let ids = client
            .enqueue_batch_with(&jobs, opts.clone())
            .await
            .unwrap();
        creator.await.unwrap();
        assert_eq!(ids.len(), 2500);
        let stored: u64 = con.zcard("rsmq:race").await.unwrap();
        assert_eq!(
            stored, 2500,
            "round {round}: the batch stored {stored} jobs"
        );
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), 2500);
        // every id returned is a stored job's
        let scores: Vec<Option<f64>> = redis::cmd("ZMSCORE")
            .arg("rsmq:race")
            .arg(ids.iter().map(|id| id.as_str()).collect::<Vec<_>>())
            .query_async(&mut con)
            .await
            .unwrap();
        assert!(scores.iter().all(Option::is_some), "round {round}");
    }
}

/// A job with two bad values is refused for the same one through the client
/// as by a backend's send (`contract::queues::check_send`: priority, then
/// concurrency key, then delay or due time, then unique key). The client
/// checked the delay before the concurrency key.
#[tokio::test]
async fn a_job_with_two_bad_values_is_refused_for_the_one_a_send_names() {
    let client = Client::memory(redjob::backend::memory::MemoryBackend::new());
    let far = Duration::from_secs(60 * 365 * 86_400);
    let far_at = SystemTime::now() + far;
    let cases = [
        (
            EnqueueOptions::new().concurrency_key("").delay(far),
            "concurrency key",
        ),
        (
            EnqueueOptions::new().concurrency_key("").at(far_at),
            "concurrency key",
        ),
        (EnqueueOptions::new().delay(far).unique_key(""), "delay"),
    ];
    for (opts, what) in cases {
        let r = client.enqueue_with(&N { i: 1 }, opts).await;
        assert!(
            matches!(&r, Err(Error::InvalidValue { what: w, .. }) if *w == what),
            "{what} first: {r:?}"
        );
    }
}

/// `EnqueueOptions::per_key` bounds the jobs of the enqueue's concurrency
/// key; for a job without one (none given, none derived by its type) it is
/// refused as an invalid `per_key`, whatever its value, and nothing is sent.
/// The old code dropped it without a word: `per_key(1)` meant as "one at a
/// time" enqueued a job that ran with no limit, and `per_key(0)`, refused
/// with a key, was taken.
#[tokio::test]
async fn per_key_without_a_concurrency_key_is_refused_not_dropped() {
    let client = Client::memory(redjob::backend::memory::MemoryBackend::new());
    let email = Email { to: "a@b.c".into() };
    let keyed = EnqueueOptions::new().concurrency_key("acct-1");
    let r = client.enqueue_with(&email, keyed.clone().per_key(0)).await;
    assert!(
        matches!(
            r,
            Err(Error::InvalidValue {
                what: "per_key",
                ..
            })
        ),
        "{r:?}"
    );
    client.enqueue_with(&email, keyed.per_key(1)).await.unwrap();
    for n in [0, 1] {
        let r = client
            .enqueue_with(&email, EnqueueOptions::new().per_key(n))
            .await;
        match r {
            Err(Error::InvalidValue {
                what: "per_key",
                reason,
            }) => {
                assert!(reason.contains("no concurrency key"), "{reason}")
            }
            other => panic!("per_key({n}) without a concurrency key: {other:?}"),
        }
    }
    let sent = client.queues().attributes("mail").await.unwrap().totalsent;
    assert_eq!(sent, 1, "only the keyed job was sent");
}
