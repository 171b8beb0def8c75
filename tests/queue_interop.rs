//! Interop with the real npm `rsmq` client (docs/interop/node/driver.js) on the same Redis.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::RedisServer;
use redjob::queue::{QueueOptions, Rsmq, SendMessage};
use serde_json::{Value, json};

/// Runs RSMQ calls with the npm client; returns one result per call.
fn rsmq_js(server: &RedisServer, ops: Value) -> Vec<Value> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/interop/node");
    assert!(
        std::path::Path::new(dir).join("node_modules/rsmq").exists(),
        "npm rsmq missing: run `npm ci --prefix docs/interop/node` (scripts/test does)"
    );
    let mut child = Command::new("node")
        .arg(format!("{dir}/driver.js"))
        .arg(server.port.to_string())
        .arg("rsmq")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node must be on PATH");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ops.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "driver failed");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array().unwrap().clone()
}

async fn setup() -> (RedisServer, Rsmq) {
    let server = RedisServer::start();
    let rsmq = Rsmq::connect(&server.url()).await.unwrap();
    (server, rsmq)
}

#[tokio::test]
async fn rsmq_sends_redjob_receives() {
    let (server, rsmq) = setup().await;
    let r = rsmq_js(
        &server,
        json!([
            {"op": "createQueue", "qname": "jsq", "vt": 20, "maxsize": 2048},
            {"op": "sendMessage", "qname": "jsq", "message": "hello from node"},
            {"op": "receiveMessage", "qname": "jsq", "vt": 0},
            {"op": "sendMessage", "qname": "jsq", "message": "second"},
        ]),
    );
    assert_eq!(r[0], json!(1));
    let first_id = r[1].as_str().unwrap().to_string();
    let js = &r[2];
    assert_eq!(js["id"], json!(first_id));
    assert!(
        rsmq.list_queues()
            .await
            .unwrap()
            .contains(&"jsq".to_string())
    );

    // rsmq received it once (vt 0, so visible again): redjob sees rc 2 and the same fr
    let m = rsmq
        .receive("jsq", Some(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.id.as_str(), first_id);
    assert_eq!(m.body, "hello from node");
    assert_eq!(m.rc, 2);
    assert_eq!(m.fr, js["fr"].as_u64().unwrap());
    assert_eq!(m.sent, js["sent"].as_f64().unwrap().floor() as u64);

    let m2 = rsmq.receive("jsq", None).await.unwrap().unwrap();
    assert_eq!(
        (m2.id.as_str(), m2.body.as_str(), m2.rc),
        (r[3].as_str().unwrap(), "second", 1)
    );
    assert!(rsmq.delete("jsq", &m.id).await.unwrap());
    assert!(rsmq.delete("jsq", &m2.id).await.unwrap());
    let r = rsmq_js(
        &server,
        json!([{"op": "getQueueAttributes", "qname": "jsq"}]),
    );
    assert_eq!(
        (r[0]["msgs"].clone(), r[0]["totalrecv"].clone()),
        (json!(0), json!(3))
    );
}

#[tokio::test]
async fn redjob_sends_rsmq_receives_rehides_and_deletes() {
    let (server, rsmq) = setup().await;
    rsmq.create_queue("rq", QueueOptions::default())
        .await
        .unwrap();
    let id = rsmq
        .send("rq", SendMessage::new("from rust"))
        .await
        .unwrap();
    let mut r = rsmq_js(
        &server,
        json!([
            {"op": "receiveMessage", "qname": "rq", "vt": 60},
            {"op": "changeMessageVisibility", "qname": "rq", "id": id.as_str(), "vt": 0},
            {"op": "receiveMessage", "qname": "rq", "vt": 60},
            {"op": "deleteMessage", "qname": "rq", "id": id.as_str()},
        ]),
    );
    let batch = rsmq
        .send_batch(
            "rq",
            &[
                SendMessage::new("b1"),
                SendMessage::new("b2"),
                SendMessage::new("b3"),
            ],
        )
        .await
        .unwrap();
    r.extend(rsmq_js(
        &server,
        json!([
            {"op": "receiveMessage", "qname": "rq"},
            {"op": "receiveMessage", "qname": "rq"},
            {"op": "popMessage", "qname": "rq"},
            {"op": "listQueues"},
        ]),
    ));
    let first = &r[0];
    assert_eq!(first["id"], json!(id.as_str()));
    assert_eq!(first["message"], json!("from rust"));
    assert_eq!(first["rc"], json!(1));
    assert_eq!(first["sent"].as_f64().unwrap().floor() as u64, id.sent_ms());
    assert_eq!(r[1], json!(1), "re-hidden");
    assert_eq!(
        (r[2]["id"].clone(), r[2]["rc"].clone()),
        (json!(id.as_str()), json!(2))
    );
    assert_eq!(r[2]["fr"], first["fr"]);
    assert_eq!(r[3], json!(1), "deleted");
    let got: Vec<_> = r[4..7]
        .iter()
        .map(|m| (m["id"].clone(), m["message"].clone()))
        .collect();
    let want: Vec<_> = batch
        .iter()
        .zip(["b1", "b2", "b3"])
        .map(|(id, b)| (json!(id.as_str()), json!(b)))
        .collect();
    assert_eq!(got, want, "batch arrives in order");
    assert_eq!(r[7], json!(["rq"]));
    assert_eq!(
        rsmq.attributes("rq").await.unwrap().msgs,
        2,
        "b3 was popped"
    );
}

#[tokio::test]
async fn attributes_read_the_same_from_both_sides() {
    let (server, rsmq) = setup().await;
    rsmq.create_queue(
        "a",
        QueueOptions {
            vt: 45,
            delay: 3,
            maxsize: -1,
        },
    )
    .await
    .unwrap();
    rsmq.send("a", SendMessage::new("now").delay(Duration::ZERO))
        .await
        .unwrap();
    rsmq.send("a", SendMessage::new("later")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    rsmq.receive("a", None).await.unwrap().unwrap();
    let r = rsmq_js(
        &server,
        json!([
            {"op": "getQueueAttributes", "qname": "a"},
            {"op": "createQueue", "qname": "b", "vt": 7, "delay": 1, "maxsize": 1024},
            {"op": "setQueueAttributes", "qname": "a", "vt": 50},
            {"op": "getQueueAttributes", "qname": "b"},
        ]),
    );
    let mine = rsmq.attributes("a").await.unwrap();
    let js = &r[0];
    assert_eq!(js["vt"], json!(45));
    for (k, v) in [
        ("delay", mine.delay as i64),
        ("maxsize", mine.maxsize),
        ("totalrecv", mine.totalrecv as i64),
        ("totalsent", mine.totalsent as i64),
        ("created", mine.created as i64),
        ("msgs", mine.msgs as i64),
        ("hiddenmsgs", mine.hiddenmsgs as i64),
    ] {
        assert_eq!(js[k], json!(v), "{k}");
    }
    assert_eq!(
        (mine.msgs, mine.hiddenmsgs, mine.totalsent, mine.totalrecv),
        (2, 2, 2, 1)
    );
    assert_eq!(mine.vt, 50, "set by rsmq");
    let b = rsmq.attributes("b").await.unwrap();
    assert_eq!((b.vt, b.delay, b.maxsize), (7, 1, 1024));
    assert_eq!(r[3]["created"], json!(b.created));
    let mut names = rsmq.list_queues().await.unwrap();
    names.sort();
    assert_eq!(names, ["a", "b"]);
}

#[tokio::test]
async fn errors_agree_with_rsmq() {
    let (server, rsmq) = setup().await;
    rsmq.create_queue(
        "dup",
        QueueOptions {
            maxsize: 1024,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let big = "x".repeat(1025);
    let r = rsmq_js(
        &server,
        json!([
            {"op": "createQueue", "qname": "dup"},
            {"op": "sendMessage", "qname": "dup", "message": big},
            {"op": "receiveMessage", "qname": "missing"},
            {"op": "createQueue", "qname": "bad name"},
        ]),
    );
    for (i, want) in [
        "queueExists",
        "messageTooLong",
        "queueNotFound",
        "invalidFormat",
    ]
    .iter()
    .enumerate()
    {
        assert!(
            r[i]["error"].as_str().unwrap().contains(want),
            "{i}: {}",
            r[i]
        );
    }
    assert!(matches!(
        rsmq.send("dup", SendMessage::new(big)).await,
        Err(redjob::Error::MessageTooLarge { .. })
    ));
}

/// What an RSMQ client sees of priorities: its own sends are at priority 0 and
/// run after due jobs of higher priority; jobs at other priorities are not in
/// its receives or counts; its delete of one removes the body, and a worker then
/// drops the id.
#[tokio::test]
async fn rsmq_clients_see_priority_zero_and_their_sends_are_at_it() {
    use redjob::backend::Backend;
    let (server, rsmq) = setup().await;
    rsmq.create_queue("pq", QueueOptions::default())
        .await
        .unwrap();
    let ids = rsmq
        .send_batch(
            "pq",
            &[
                SendMessage::new("urgent").priority(5),
                SendMessage::new("bulk").priority(-5),
                SendMessage::new("plain"),
            ],
        )
        .await
        .unwrap();
    let r = rsmq_js(
        &server,
        json!([
            {"op": "getQueueAttributes", "qname": "pq"},
            {"op": "receiveMessage", "qname": "pq", "vt": 0},
            {"op": "receiveMessage", "qname": "pq", "vt": 60},
            {"op": "receiveMessage", "qname": "pq", "vt": 60},
            {"op": "deleteMessage", "qname": "pq", "id": ids[1].as_str()},
            {"op": "sendMessage", "qname": "pq", "message": "from node"},
        ]),
    );
    assert_eq!(r[0]["msgs"], json!(1), "only priority 0 is counted");
    assert_eq!(r[1]["message"], json!("plain"));
    assert_eq!(
        r[2]["message"],
        json!("plain"),
        "made visible again by vt 0"
    );
    assert_eq!(r[3], json!({}), "the prioritized jobs are not received");
    assert_eq!(
        r[4],
        json!(0),
        "not in RSMQ's sorted set: its body goes, 0 returned"
    );
    let node_id = r[5].as_str().unwrap().to_string();
    let backend = redjob::Client::connect(&server.url())
        .await
        .unwrap()
        .backend();
    // "plain" is hidden for 60 s by the RSMQ receive
    let got = backend
        .fetch("pq", 10, Duration::from_secs(30))
        .await
        .unwrap();
    let seen: Vec<(String, i8)> = got
        .jobs
        .iter()
        .map(|d| (d.id.to_string(), d.token.priority()))
        .collect();
    assert_eq!(
        seen,
        [(ids[0].to_string(), 5), (node_id, 0)],
        "urgent first; the RSMQ send at priority 0; bulk's id dropped"
    );
    assert_eq!(got.orphans, 1, "the id whose body RSMQ deleted");
}

/// A unique message is a plain message to RSMQ clients: they receive and delete
/// it as any other; once received it counts as delivered, and is not replaced. Their delete does not know its unique key, which stays
/// behind; the next unique send finds the key's job gone and takes the key.
#[tokio::test]
async fn rsmq_clients_take_unique_messages_and_their_delete_frees_the_key() {
    use redjob::queue::{OnDuplicate, SendOutcome, Unique};
    let (server, rsmq) = setup().await;
    rsmq.create_queue("uq", QueueOptions::default())
        .await
        .unwrap();
    let msg = |body: &str| {
        SendMessage::new(body).unique(Unique::new("report").on_duplicate(OnDuplicate::Replace))
    };
    let first = rsmq.send_outcomes("uq", &[msg("v1")]).await.unwrap()[0];
    let second = rsmq.send_outcomes("uq", &[msg("v2")]).await.unwrap()[0];
    assert_eq!(
        (second.id, second.outcome),
        (first.id, SendOutcome::Replaced)
    );
    let r = rsmq_js(
        &server,
        json!([
            {"op": "getQueueAttributes", "qname": "uq"},
            {"op": "receiveMessage", "qname": "uq", "vt": 60},
        ]),
    );
    assert_eq!(r[0]["msgs"], json!(1));
    assert_eq!(r[1]["message"], json!("v2"));
    assert_eq!(r[1]["id"], json!(first.id.as_str()));
    // received by an RSMQ client: delivered, so no longer replaced
    let kept = rsmq.send_outcomes("uq", &[msg("late")]).await.unwrap()[0];
    assert_eq!((kept.id, kept.outcome), (first.id, SendOutcome::Duplicate));
    let r = rsmq_js(
        &server,
        json!([{"op": "deleteMessage", "qname": "uq", "id": first.id.as_str()}]),
    );
    assert_eq!(r[0], json!(1));
    let third = rsmq.send_outcomes("uq", &[msg("v3")]).await.unwrap()[0];
    assert_eq!(third.outcome, SendOutcome::Added);
    assert_ne!(third.id, first.id);
}

#[tokio::test]
async fn a_job_a_worker_leased_is_hidden_from_rsmq_clients_until_its_lease_ends() {
    use redjob::backend::redis::RedisBackend;
    use redjob::backend::{Backend, Reschedule, Settle};
    use redjob::connection::RedisConfig;
    use redjob::queue::Queues;
    let (server, rsmq) = setup().await;
    rsmq.create_queue("lq", QueueOptions::default())
        .await
        .unwrap();
    let r = rsmq_js(
        &server,
        json!([
            {"op": "sendMessage", "qname": "lq", "message": "a"},
            {"op": "sendMessage", "qname": "lq", "message": "b"},
        ]),
    );
    let a = r[0].as_str().unwrap().to_owned();
    // RSMQ counts hidden messages from the start of the current second
    tokio::time::sleep(Duration::from_millis(1050)).await;
    let backend = RedisBackend::connect(&RedisConfig::from_url(server.url()), "rsmq", false)
        .await
        .unwrap();
    let leased = backend
        .fetch("lq", 1, Duration::from_secs(1))
        .await
        .unwrap()
        .jobs;
    assert_eq!(leased[0].id.as_str(), a);
    let r = rsmq_js(
        &server,
        json!([{"op": "getQueueAttributes", "qname": "lq"}]),
    );
    assert_eq!((&r[0]["msgs"], &r[0]["hiddenmsgs"]), (&json!(2), &json!(1)));
    // while the lease runs, an RSMQ client takes the next message
    let r = rsmq_js(
        &server,
        json!([{"op": "receiveMessage", "qname": "lq", "vt": 60}]),
    );
    assert_eq!(r[0]["message"], json!("b"));
    // the lease ran out (its worker gone): an RSMQ client receives the job, as
    // it would a message whose visibility timeout ended; RSMQ's rc counts only
    // RSMQ's receives
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = rsmq_js(
        &server,
        json!([{"op": "receiveMessage", "qname": "lq", "vt": 60}]),
    );
    assert_eq!((&r[0]["id"], &r[0]["message"]), (&json!(a), &json!("a")));
    assert_eq!(r[0]["rc"], json!(1));
    // the worker that held the lease can no longer settle it
    let ack = Settle {
        acks: vec![(leased[0].id, leased[0].token)],
        ..Settle::default()
    };
    assert_eq!(backend.settle("lq", &ack).await.unwrap().acked, 0);
    // a retry keeps its error beside the body; redjob's delete takes both
    let r = rsmq_js(
        &server,
        json!([{"op": "sendMessage", "qname": "lq", "message": "c"}]),
    );
    let c = r[0].as_str().unwrap().to_owned();
    let again = backend
        .fetch("lq", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs;
    assert_eq!(
        (again[0].id.as_str(), again[0].token.attempt()),
        (&c[..], 1)
    );
    let retry = Reschedule {
        id: again[0].id,
        token: again[0].token,
        delay: Duration::from_secs(60),
        deliveries: 1,
        release: false,
        error: Some("boom".into()),
    };
    let settle = Settle {
        reschedules: vec![retry],
        ..Settle::default()
    };
    assert_eq!(backend.settle("lq", &settle).await.unwrap().rescheduled, 1);
    let mut con = server.raw().await;
    let field = format!("{c}:err");
    let err: Option<String> = redis::cmd("HGET")
        .arg("rsmq:lq:Q")
        .arg(&field)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(err.as_deref(), Some("boom"));
    assert!(Queues::delete(&rsmq, "lq", &again[0].id).await.unwrap());
    let left: bool = redis::cmd("HEXISTS")
        .arg("rsmq:lq:Q")
        .arg(&field)
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(!left);
}

/// A job that never ends, for the killed worker process below: it writes its
/// start to the file at `REDJOB_INTEROP_STARTED`.
#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "hangs", queue = "killed")]
struct Hangs;

impl redjob::Job for Hangs {
    async fn perform(&self, _: &redjob::JobContext) -> Result<(), redjob::JobError> {
        if let Ok(path) = std::env::var("REDJOB_INTEROP_STARTED") {
            std::fs::write(path, b"started").unwrap();
        }
        std::future::pending::<()>().await;
        Ok(())
    }
}

/// The worker process of the test below: serves `killed` with a 3 s lease until
/// it is killed.
#[test]
#[ignore = "a worker process for an_rsmq_client_alone_receives_a_job_whose_worker_was_killed"]
fn interop_worker_process() {
    let Ok(url) = std::env::var("REDJOB_INTEROP_REDIS") else {
        eprintln!("run by an_rsmq_client_alone_receives_a_job_whose_worker_was_killed");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = redjob::Client::connect(&url).await.unwrap();
        redjob::Worker::builder(client.backend())
            .register::<Hangs>()
            .lease(Duration::from_secs(3))
            .build()
            .unwrap()
            .run()
            .await
            .unwrap();
    });
}

/// RSMQ's promise: a message not deleted becomes visible when its visibility
/// timeout ends. A job leased by a redjob worker that is then SIGKILLed, with no
/// redjob process left on the queue, is received by the npm client alone once
/// the lease ends (and not before).
#[tokio::test]
async fn an_rsmq_client_alone_receives_a_job_whose_worker_was_killed() {
    let (server, rsmq) = setup().await;
    rsmq.create_queue("killed", QueueOptions::default())
        .await
        .unwrap();
    let client = redjob::Client::connect(&server.url()).await.unwrap();
    let id = client.enqueue(&Hangs).await.unwrap();
    let started = server.dir().join("interop-started");
    let mut worker = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "interop_worker_process",
            "--nocapture",
        ])
        .env("REDJOB_INTEROP_REDIS", server.url())
        .env("REDJOB_INTEROP_STARTED", &started)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !started.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the worker never started the job"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // the job runs (its lease renewed every second) for a while, then its worker dies
    tokio::time::sleep(Duration::from_millis(2500)).await;
    worker.kill().unwrap();
    let killed = std::time::Instant::now();
    worker.wait().unwrap();
    let receive = json!([{"op": "receiveMessage", "qname": "killed", "vt": 60}]);
    // its lease ends 2 to 3 s after the last renewal: hidden until then
    let r = rsmq_js(&server, receive.clone());
    assert!(
        r[0].get("id").is_none() || killed.elapsed() >= Duration::from_secs(2),
        "received {:?} while its lease ran",
        r[0]
    );
    let got = loop {
        let r = rsmq_js(&server, receive.clone());
        if r[0].get("id").is_some() {
            break r[0].clone();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(63),
            "no RSMQ client received the job a minute after its lease ended"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let waited = killed.elapsed();
    println!("received by the npm client {waited:?} after the kill (lease 3 s)");
    assert_eq!(got["id"], json!(id.as_str()));
    assert!(waited < Duration::from_secs(10), "{waited:?}");
}

/// The npm rsmq client receives and deletes a message a delayed send marked
/// (its id holds a `:`, which RSMQ's id rule allows; see `send_suffixes`).
#[tokio::test]
async fn rsmq_reads_and_deletes_a_delayed_sends_message() {
    let (server, rsmq) = setup().await;
    rsmq.create_queue("m", QueueOptions::default())
        .await
        .unwrap();
    let id = rsmq
        .send(
            "m",
            SendMessage::new("later").delay(Duration::from_millis(5)),
        )
        .await
        .unwrap();
    assert_eq!(id.as_str().as_bytes()[23], b':', "{id}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = rsmq_js(
        &server,
        json!([
            {"op": "changeMessageVisibility", "qname": "m", "id": id.as_str(), "vt": 0},
            {"op": "receiveMessage", "qname": "m", "vt": 60},
            {"op": "deleteMessage", "qname": "m", "id": id.as_str()},
        ]),
    );
    assert_eq!(r[0], json!(1), "its visibility changed");
    assert_eq!(r[1]["id"], json!(id.as_str()));
    assert_eq!(r[1]["message"], json!("later"));
    assert_eq!(r[2], json!(1), "deleted");
}

/// An RSMQ client's deleteMessage removes a job's body, rc and fr only: its
/// last error and attempt records are swept by a later idle fetch (one step in
/// one second of ten).
#[tokio::test]
async fn records_an_rsmq_delete_leaves_behind_are_swept() {
    use redjob::backend::redis::RedisBackend;
    use redjob::backend::{Backend, Reschedule, Settle};
    use redjob::connection::RedisConfig;
    use redjob::queue::Queues;
    let (server, rsmq) = setup().await;
    rsmq.create_queue("sq", QueueOptions::default())
        .await
        .unwrap();
    let backend = RedisBackend::connect(&RedisConfig::from_url(server.url()), "rsmq", false)
        .await
        .unwrap();
    let id = Queues::send(&rsmq, "sq", SendMessage::new("x"))
        .await
        .unwrap();
    let d = backend
        .fetch("sq", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs
        .remove(0);
    let retry = Settle {
        reschedules: vec![Reschedule {
            id,
            token: d.token,
            delay: Duration::ZERO,
            deliveries: 1,
            release: false,
            error: Some("boom".into()),
        }],
        ..Settle::default()
    };
    assert_eq!(backend.settle("sq", &retry).await.unwrap().rescheduled, 1);
    let mut con = server.raw().await;
    let fields = [format!("{id}:err"), format!("{id}:a")];
    let left = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        let fields = fields.clone();
        async move {
            let v: Vec<Option<String>> = redis::cmd("HMGET")
                .arg("rsmq:sq:Q")
                .arg(&fields[..])
                .query_async(&mut con)
                .await
                .unwrap();
            v.iter().filter(|f| f.is_some()).count()
        }
    };
    assert_eq!(left(&mut con).await, 2);
    let r = rsmq_js(
        &server,
        json!([{"op": "deleteMessage", "qname": "sq", "id": id.as_str()}]),
    );
    assert_eq!(r[0], json!(1));
    assert_eq!(left(&mut con).await, 2, "RSMQ deletes body, rc and fr only");
    // idle fetches: one lands in a tenth second within 11 s
    let start = std::time::Instant::now();
    while left(&mut con).await > 0 && start.elapsed() < Duration::from_secs(11) {
        backend
            .fetch("sq", 1, Duration::from_secs(60))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(left(&mut con).await, 0, "swept");
}

#[tokio::test]
async fn rsmq_clients_see_a_keys_holder_alone_and_their_delete_frees_its_place() {
    use redjob::queue::Keyed;
    let (server, rsmq) = setup().await;
    rsmq.create_queue("kq", QueueOptions::default())
        .await
        .unwrap();
    let msg = |body: &str| SendMessage::new(body).keyed(Keyed::new("acct"));
    let ids = rsmq
        .send_batch("kq", &[msg("k1"), msg("k2"), msg("k3")])
        .await
        .unwrap();
    // RSMQ clients see the key's holder alone; they receive and delete it
    // (deleteMessage: no script, so the key's place is not given on)
    let r = rsmq_js(
        &server,
        json!([
            {"op": "getQueueAttributes", "qname": "kq"},
            {"op": "receiveMessage", "qname": "kq", "vt": 60},
            {"op": "deleteMessage", "qname": "kq", "id": ids[0].as_str()},
            {"op": "getQueueAttributes", "qname": "kq"},
        ]),
    );
    assert_eq!(r[0]["msgs"], json!(1));
    assert_eq!(r[1]["message"], json!("k1"));
    assert_eq!(r[2], json!(1));
    assert_eq!(r[3]["msgs"], json!(0));
    // the key's next send finds the place free: the key's earlier job takes it
    let k4 = rsmq.send("kq", msg("k4")).await.unwrap();
    let r = rsmq_js(
        &server,
        json!([
            {"op": "getQueueAttributes", "qname": "kq"},
            {"op": "receiveMessage", "qname": "kq", "vt": 60},
        ]),
    );
    assert_eq!(r[0]["msgs"], json!(1));
    assert_eq!(r[1]["id"], json!(ids[1].as_str()), "k2 before {k4}");
    // a job due now does not take the place of a holder an RSMQ client works on
    rsmq.send("kq", msg("k5")).await.unwrap();
    let r = rsmq_js(
        &server,
        json!([{"op": "getQueueAttributes", "qname": "kq"}]),
    );
    assert_eq!((&r[0]["msgs"], &r[0]["hiddenmsgs"]), (&json!(1), &json!(1)));
    // with no send of the key, a worker's fetch finds the place a delete
    // freed within about 10 s (its sweep of the keys)
    let r = rsmq_js(
        &server,
        json!([{"op": "deleteMessage", "qname": "kq", "id": ids[1].as_str()}]),
    );
    assert_eq!(r[0], json!(1));
    let client = redjob::Client::connect(&server.url()).await.unwrap();
    let backend = client.backend();
    let start = std::time::Instant::now();
    let got = loop {
        use redjob::backend::Backend;
        let f = backend
            .fetch("kq", 1, Duration::from_secs(30))
            .await
            .unwrap();
        if let Some(j) = f.jobs.first() {
            break j.id;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "no sweep");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(got, ids[2]);
}

#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "wide_note", queue = "wide")]
struct Note {
    text: String,
}

impl redjob::Job for Note {
    async fn perform(&self, ctx: &redjob::JobContext) -> Result<(), redjob::JobError> {
        ctx.data::<common::Recorder>()?
            .record(ctx, self.text.chars().count() as u64);
        Ok(())
    }
}

/// The npm client checks a message against the queue's maxsize by its length
/// as a JavaScript string (UTF-16 code units): a job of 30,000 CJK characters
/// (90 KB of UTF-8) is within the default 65,536, and it stores it. A worker
/// counts as RSMQ does and runs it; it measured bytes and dead-lettered it
/// unrun as over the queue's maxsize.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_an_rsmq_client_sent_within_maxsize_by_its_rule_runs() {
    let (server, _) = setup().await;
    let client = redjob::Client::connect(&server.url()).await.unwrap();
    let text = "日".repeat(30_000);
    let body = json!({"type": "wide_note", "args": {"text": text}}).to_string();
    assert!(body.len() > 65_536 && body.chars().count() < 65_536);
    let r = rsmq_js(
        &server,
        json!([
            {"op": "createQueue", "qname": "wide"},
            {"op": "sendMessage", "qname": "wide", "message": body},
        ]),
    );
    let sent = r[1]
        .as_str()
        .unwrap_or_else(|| panic!("rsmq refused it: {}", r[1]));
    let rec = common::Recorder::default();
    let w = redjob::Worker::builder(client.backend())
        .register::<Note>()
        .handle_signals(false)
        .data(rec.clone())
        .build()
        .unwrap();
    let running = common::start_serving(w).await;
    let ran = common::wait_until(Duration::from_secs(5), || rec.len() == 1).await;
    running.stop().await;
    let dead = client.dead_letters("wide", 10).await.unwrap();
    assert!(
        ran && dead.is_empty(),
        "rsmq stored {sent}; the worker ran it {} times and dead-lettered it: {:?}",
        rec.len(),
        dead.iter().map(|d| d.error.clone()).collect::<Vec<_>>()
    );
}

/// The docs (jobs.md, "Unique jobs"): an RSMQ client's `deleteMessage` does
/// not know a unique job's key, "so the entry stays behind; the next unique
/// enqueue finds the holder gone and takes the key over". At a priority
/// other than 0 the delete removes the body only (returns 0) and leaves the
/// id in `ns:q:p<n>`: unique.lua sees the id there and takes the key as
/// still held, so the next unique send is a `Duplicate` of a job that no
/// longer exists (until a worker's fetch happens to drop the orphan; for a
/// delayed job not before its due time, and never when nothing fetches).
#[tokio::test]
async fn an_rsmq_delete_of_a_prioritized_unique_job_frees_its_key_for_the_next_send() {
    use redjob::queue::{SendOutcome, Unique};
    let (server, rsmq) = setup().await;
    rsmq.create_queue("upq", QueueOptions::default())
        .await
        .unwrap();
    let msg = |body: &str| {
        SendMessage::new(body)
            .priority(5)
            .delay(Duration::from_secs(3600))
            .unique(Unique::new("nightly"))
    };
    let first = rsmq.send_outcomes("upq", &[msg("v1")]).await.unwrap()[0];
    assert_eq!(first.outcome, SendOutcome::Added);
    let r = rsmq_js(
        &server,
        json!([{"op": "deleteMessage", "qname": "upq", "id": first.id.as_str()}]),
    );
    assert_eq!(r[0], json!(0), "not in RSMQ's sorted set: its body goes");
    let again = rsmq.send_outcomes("upq", &[msg("v2")]).await.unwrap()[0];
    assert_eq!(
        again.outcome,
        SendOutcome::Added,
        "the key's holder {} is gone, yet the send was refused as a duplicate of it",
        first.id
    );
}

/// An RSMQ client's `deleteMessage` of unique jobs leaves their entries in
/// `ns:q:unique` ("k:<key>" and "i:<id>"): the idle fetches' sweep clears what
/// such a delete leaves in the queue's hash (`<id>:err`, `<id>:a`, see
/// `records_an_rsmq_delete_leaves_behind_are_swept`) but never these, and only
/// a later send of the same key replaces its entry. With a key per entity
/// (an order, a user), an RSMQ consumer that deletes what it handles grows
/// the hash by two fields a job, without bound.
#[tokio::test]
async fn unique_entries_an_rsmq_delete_leaves_behind_are_swept() {
    use redjob::backend::Backend;
    use redjob::backend::redis::RedisBackend;
    use redjob::connection::RedisConfig;
    use redjob::queue::Unique;
    let (server, rsmq) = setup().await;
    rsmq.create_queue("lq", QueueOptions::default())
        .await
        .unwrap();
    let backend = RedisBackend::connect(&RedisConfig::from_url(server.url()), "rsmq", false)
        .await
        .unwrap();
    let msgs: Vec<_> = (0..5)
        .map(|i| SendMessage::new(format!("order {i}")).unique(Unique::new(format!("order:{i}"))))
        .collect();
    rsmq.send_outcomes("lq", &msgs).await.unwrap();
    let mut ops = Vec::new();
    for _ in 0..5 {
        ops.push(json!({"op": "receiveMessage", "qname": "lq", "vt": 60}));
    }
    let got = rsmq_js(&server, Value::Array(ops));
    let dels: Vec<Value> = got
        .iter()
        .map(|m| json!({"op": "deleteMessage", "qname": "lq", "id": m["id"]}))
        .collect();
    let r = rsmq_js(&server, Value::Array(dels));
    assert_eq!(r, vec![json!(1); 5], "each handled job deleted");
    let mut con = server.raw().await;
    let entries = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        async move {
            let n: usize = redis::cmd("HLEN")
                .arg("rsmq:lq:unique")
                .query_async(&mut con)
                .await
                .unwrap();
            n
        }
    };
    assert_eq!(entries(&mut con).await, 10, "two fields a job");
    // idle fetches, as in the sweep of the hash's records: within 11 s
    let start = std::time::Instant::now();
    while entries(&mut con).await > 0 && start.elapsed() < Duration::from_secs(11) {
        backend
            .fetch("lq", 1, Duration::from_secs(60))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        entries(&mut con).await,
        0,
        "the entries of jobs no longer in the queue stay for ever"
    );
}

/// The same ghost, for ever: an RSMQ client's `deleteQueue` removes `ns:q`
/// and `ns:q:Q` only, so a unique job at priority 5 stays in `ns:q:p5` with
/// its entry in `ns:q:unique`. Once the queue is created again, its hash has
/// no priority bits (`redjob:prio`), so no fetch reads `ns:q:p5` and drops
/// the orphan, and every unique send of the key is a `Duplicate` of a job
/// that went with its queue.
#[tokio::test]
async fn a_unique_key_does_not_outlive_its_queue_deleted_by_an_rsmq_client() {
    use redjob::backend::Backend;
    use redjob::backend::redis::RedisBackend;
    use redjob::connection::RedisConfig;
    use redjob::queue::{SendOutcome, Unique};
    let (server, rsmq) = setup().await;
    rsmq.create_queue("dq", QueueOptions::default())
        .await
        .unwrap();
    let msg = |body: &str| {
        SendMessage::new(body)
            .priority(5)
            .unique(Unique::new("rebuild"))
    };
    let first = rsmq.send_outcomes("dq", &[msg("v1")]).await.unwrap()[0];
    assert_eq!(first.outcome, SendOutcome::Added);
    let r = rsmq_js(
        &server,
        json!([
            {"op": "deleteQueue", "qname": "dq"},
            {"op": "createQueue", "qname": "dq"},
        ]),
    );
    assert_eq!(r, vec![json!(1), json!(1)]);
    let backend = RedisBackend::connect(&RedisConfig::from_url(server.url()), "rsmq", false)
        .await
        .unwrap();
    for _ in 0..3 {
        let got = backend
            .fetch("dq", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(got.jobs.is_empty());
    }
    let again = rsmq.send_outcomes("dq", &[msg("v2")]).await.unwrap()[0];
    assert_eq!(
        again.outcome,
        SendOutcome::Added,
        "the key is held by {}, a job of the queue deleted before",
        first.id
    );
}

/// A raw integer reply of `cmd key` (ZCARD, HLEN) on the test's server.
async fn count(server: &RedisServer, cmd: &str, key: &str) -> usize {
    redis::cmd(cmd)
        .arg(key)
        .query_async(&mut server.raw().await)
        .await
        .unwrap()
}

async fn backend(server: &RedisServer) -> redjob::backend::redis::RedisBackend {
    use redjob::connection::RedisConfig;
    redjob::backend::redis::RedisBackend::connect(
        &RedisConfig::from_url(server.url()),
        "rsmq",
        false,
    )
    .await
    .unwrap()
}

/// A due unique job at priority 5 whose body an RSMQ client deleted is an
/// orphan a fetch drops: its unique entries go with it, at once (not at the
/// next sweep or the next send of its key).
#[tokio::test]
async fn a_fetch_that_drops_an_orphan_frees_its_unique_entries() {
    use redjob::backend::Backend;
    use redjob::queue::Unique;
    let (server, rsmq) = setup().await;
    rsmq.create_queue("oq", QueueOptions::default())
        .await
        .unwrap();
    let m = SendMessage::new("v1").priority(5).unique(Unique::new("k"));
    let sent = rsmq.send_outcomes("oq", &[m]).await.unwrap()[0];
    let r = rsmq_js(
        &server,
        json!([{"op": "deleteMessage", "qname": "oq", "id": sent.id.as_str()}]),
    );
    assert_eq!(r[0], json!(0), "its body goes, its id stays in rsmq:oq:p5");
    let got = backend(&server)
        .await
        .fetch("oq", 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(got.jobs.is_empty());
    assert_eq!(
        count(&server, "ZCARD", "rsmq:oq:p5").await,
        0,
        "the orphan dropped"
    );
    assert_eq!(
        count(&server, "HLEN", "rsmq:oq:unique").await,
        0,
        "the orphan's unique entries stay behind"
    );
}

/// After an RSMQ client's `deleteQueue`, redjob's `create_queue` of the name
/// picks up the priority levels left behind, so that fetches read them and
/// drop the members without a body (plain jobs too, which no unique send
/// meets).
#[tokio::test]
async fn a_queue_redjob_creates_again_reads_the_levels_an_rsmq_delete_left() {
    use redjob::backend::Backend;
    let (server, rsmq) = setup().await;
    rsmq.create_queue("cq", QueueOptions::default())
        .await
        .unwrap();
    let m = SendMessage::new("plain").priority(-3);
    rsmq.send_outcomes("cq", &[m]).await.unwrap();
    let r = rsmq_js(&server, json!([{"op": "deleteQueue", "qname": "cq"}]));
    assert_eq!(r, vec![json!(1)]);
    rsmq.create_queue("cq", QueueOptions::default())
        .await
        .unwrap();
    let got = backend(&server)
        .await
        .fetch("cq", 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(got.jobs.is_empty(), "the job went with its queue");
    assert_eq!(
        count(&server, "ZCARD", "rsmq:cq:p-3").await,
        0,
        "a job of the deleted queue stays in rsmq:cq:p-3, never read"
    );
}

/// A dead letter's unique key, held meanwhile by a job at priority 5 whose
/// body an RSMQ client deleted, is free: the requeue takes it (dead_requeue.lua
/// reads a holder as unique.lua does).
#[tokio::test]
async fn a_dead_letter_requeued_takes_its_key_from_a_holder_an_rsmq_client_deleted() {
    use redjob::backend::{Backend, DeadLetterEntry, Settle};
    use redjob::ops::{Admin, Spread};
    use redjob::queue::{SendOutcome, Unique};
    let (server, rsmq) = setup().await;
    rsmq.create_queue("rq", QueueOptions::default())
        .await
        .unwrap();
    let b = backend(&server).await;
    let msg = |body: &str, p: i8| SendMessage::new(body).priority(p).unique(Unique::new("k"));
    let a = rsmq.send_outcomes("rq", &[msg("a", 0)]).await.unwrap()[0].id;
    let leased = b
        .fetch("rq", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs;
    let dead = Settle {
        dead: vec![DeadLetterEntry {
            id: a,
            token: leased[0].token,
            error: "gave up".into(),
        }],
        ..Settle::default()
    };
    assert_eq!(b.settle("rq", &dead).await.unwrap().dead, 1);
    let later = msg("b", 5).delay(Duration::from_secs(3600));
    let holder = rsmq.send_outcomes("rq", &[later]).await.unwrap()[0];
    assert_eq!(holder.outcome, SendOutcome::Added, "the key was free");
    let r = rsmq_js(
        &server,
        json!([{"op": "deleteMessage", "qname": "rq", "id": holder.id.as_str()}]),
    );
    assert_eq!(r[0], json!(0));
    tokio::time::sleep(Duration::from_millis(5)).await;
    let n = b.requeue_dead("rq", &[a], Spread::NOW).await.unwrap();
    assert_eq!(
        n, 1,
        "the key's holder {} is gone, yet the letter stays dead",
        holder.id
    );
    let dup = rsmq.send_outcomes("rq", &[msg("c", 0)]).await.unwrap()[0];
    assert_eq!((dup.id, dup.outcome), (a, SendOutcome::Duplicate));
}

/// A due unique job at priority 0 whose body is gone (evicted, or deleted
/// halfway by another client) is an orphan an RSMQ-style receive drops: its
/// unique entries go with it, at once, as a fetch frees them (not at the next
/// sweep, which only idle fetches make: a queue read by receives alone kept
/// them for ever).
#[tokio::test]
async fn a_receive_that_drops_an_orphan_frees_its_unique_entries() {
    use redjob::queue::Unique;
    let (server, rsmq) = setup().await;
    rsmq.create_queue("ro", QueueOptions::default())
        .await
        .unwrap();
    let m = SendMessage::new("v1").unique(Unique::new("k"));
    let sent = rsmq.send_outcomes("ro", &[m]).await.unwrap()[0];
    let gone: usize = redis::cmd("HDEL")
        .arg("rsmq:ro:Q")
        .arg(sent.id.as_str())
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    assert_eq!(gone, 1, "its body goes, its id stays in rsmq:ro");
    assert!(rsmq.receive("ro", None).await.unwrap().is_none());
    assert_eq!(
        count(&server, "ZCARD", "rsmq:ro").await,
        0,
        "the orphan dropped"
    );
    assert_eq!(
        count(&server, "HLEN", "rsmq:ro:unique").await,
        0,
        "the orphan's unique entries stay behind"
    );
}

/// After an RSMQ client's `deleteQueue` and `createQueue`, the queue's hash
/// has none of redjob's fields: a worker's first fetch picks up the priority
/// levels and unique keys the delete left, as redjob's `create_queue` does,
/// so that fetches read the levels (and drop the members without a body)
/// and sweep the unique keys of jobs that are gone.
#[tokio::test]
async fn a_queue_an_rsmq_client_creates_again_reads_the_levels_its_delete_left() {
    use redjob::backend::Backend;
    use redjob::queue::Unique;
    let (server, rsmq) = setup().await;
    rsmq.create_queue("aq", QueueOptions::default())
        .await
        .unwrap();
    let m = SendMessage::new("plain").priority(-3);
    rsmq.send_outcomes("aq", &[m]).await.unwrap();
    let u = SendMessage::new("once").unique(Unique::new("k"));
    rsmq.send_outcomes("aq", &[u]).await.unwrap();
    let r = rsmq_js(
        &server,
        json!([
            {"op": "deleteQueue", "qname": "aq"},
            {"op": "createQueue", "qname": "aq"},
        ]),
    );
    assert_eq!(r, vec![json!(1), json!(1)]);
    let got = backend(&server)
        .await
        .fetch("aq", 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(got.jobs.is_empty(), "the jobs went with their queue");
    assert_eq!(
        count(&server, "ZCARD", "rsmq:aq:p-3").await,
        0,
        "a job of the deleted queue stays in rsmq:aq:p-3, never read"
    );
    let marked: Option<String> = redis::cmd("HGET")
        .arg("rsmq:aq:Q")
        .arg("redjob:unique")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    assert_eq!(
        marked.as_deref(),
        Some("1"),
        "the unique keys left behind are never swept"
    );
}

/// A job at priority 5 whose body an RSMQ client deleted (its id stays in
/// `ns:q:p5`) is no job for an inspection, as for a unique send or a fetch:
/// `job` found it, with an empty body.
#[tokio::test]
async fn a_job_an_rsmq_client_deleted_at_a_priority_is_not_found() {
    use redjob::inspect::Inspect;
    let (server, rsmq) = setup().await;
    rsmq.create_queue("iq", QueueOptions::default())
        .await
        .unwrap();
    let m = SendMessage::new("v1")
        .priority(5)
        .delay(Duration::from_secs(3600));
    let sent = rsmq.send_outcomes("iq", &[m]).await.unwrap()[0];
    let r = rsmq_js(
        &server,
        json!([{"op": "deleteMessage", "qname": "iq", "id": sent.id.as_str()}]),
    );
    assert_eq!(r[0], json!(0), "its body goes, its id stays in rsmq:iq:p5");
    let job = rsmq.job("iq", &sent.id).await.unwrap();
    assert!(job.is_none(), "a job without a body: {job:?}");
    let job = backend(&server).await.job("iq", &sent.id).await.unwrap();
    assert!(job.is_none(), "a job without a body: {job:?}");
}

/// A queue an RSMQ client made (its hash without redjob's fields) is drained
/// at maxmemory, as any queue is: its first fetch has `adopt.lua` look it over,
/// whose first write was one that may grow memory, refused by a Redis at
/// maxmemory with noeviction, so that every fetch of the queue failed.
#[tokio::test]
async fn a_queue_an_rsmq_client_made_is_drained_at_maxmemory() {
    use redjob::backend::Backend;
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let r = rsmq_js(
        &server,
        json!([
            {"op": "createQueue", "qname": "mq"},
            {"op": "sendMessage", "qname": "mq", "message": "hello"},
        ]),
    );
    assert_eq!(r[0], json!(1));
    let b = backend(&server).await;
    let mut raw = server.raw().await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut raw)
        .await
        .unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used / 2)
        .query_async(&mut raw)
        .await
        .unwrap();
    let got = b.fetch("mq", 10, Duration::from_secs(60)).await;
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query_async(&mut raw)
        .await
        .unwrap();
    let got = got.expect("a fetch of an RSMQ client's queue at maxmemory");
    assert_eq!(got.jobs.len(), 1, "the queued message is fetched");
}

/// Jobs at a priority whose bodies an RSMQ client deleted (their ids stay in
/// `ns:q:p<n>`; an HDEL of the body stands for its `deleteMessage`) are no
/// jobs for `list` and `peek`, as for `job`: they were shown with empty
/// bodies. Pages may hold fewer jobs, but walking them by their cursors
/// reads every live job once, past a page of bodyless members alone.
#[tokio::test]
async fn list_and_peek_skip_jobs_an_rsmq_client_deleted_at_a_priority() {
    use redjob::inspect::{Inspect, JobState};
    let (server, rsmq) = setup().await;
    for (q, state, delay) in [
        ("lr", JobState::Ready, Duration::ZERO),
        ("ls", JobState::Scheduled, Duration::from_secs(3600)),
    ] {
        rsmq.create_queue(q, QueueOptions::default()).await.unwrap();
        let mut ids = Vec::new();
        for i in 0..7 {
            let m = SendMessage::new(format!("v{i}")).priority(5).delay(delay);
            ids.push(rsmq.send_outcomes(q, &[m]).await.unwrap()[0].id);
            // each its own ms: the pages' order is the send order
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // the first two (a whole first page), the fourth and the last
        for i in [0, 1, 3, 6] {
            let gone: usize = redis::cmd("HDEL")
                .arg(format!("rsmq:{q}:Q"))
                .arg(ids[i].as_str())
                .query_async(&mut server.raw().await)
                .await
                .unwrap();
            assert_eq!(gone, 1);
        }
        let live: Vec<_> = [2, 4, 5].iter().map(|&i| ids[i]).collect();
        let (mut seen, mut after, mut pages) = (Vec::new(), None, 0);
        loop {
            let page = rsmq.list(q, state, after.as_ref(), 2).await.unwrap();
            for j in &page.jobs {
                assert!(!j.body.is_empty(), "{state:?}: a job without a body: {j:?}");
                seen.push(j.id);
            }
            pages += 1;
            assert!(pages < 10, "{state:?}: pages without end");
            match page.next {
                Some(c) => after = Some(c),
                None => break,
            }
        }
        assert_eq!(seen, live, "{state:?}: each live job once, in order");
        let peeked = rsmq.peek(q, 10).await.unwrap();
        let peeked: Vec<_> = peeked.iter().map(|j| (j.id, j.body.is_empty())).collect();
        let want: Vec<_> = live.iter().map(|&id| (id, false)).collect();
        assert_eq!(peeked, want, "{state:?}: peek shows the live jobs alone");
    }
}
