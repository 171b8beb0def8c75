//! A queue redjob's workers and RSMQ clients both use: what an RSMQ client's
//! receive, delete and change of visibility leave of redjob's own state
//! (delivery counts given back, concurrency keys, released jobs' lease ends).
//! RSMQ's calls are made here as RSMQ makes them: its receive is
//! `Rsmq::receive` (the same script), its delete a plain `ZREM` and `HDEL` of
//! the body, `rc` and `fr`, its change of visibility a whole-ms `ZADD`.

mod common;

use std::time::Duration;

use common::RedisServer;
use redjob::backend::redis::RedisBackend;
use redjob::backend::{Backend, Reschedule, Settle, Throttle};
use redjob::connection::RedisConfig;
use redjob::queue::{QueueOptions, Queues, Rsmq, SendMessage};
use redjob::{Client, Job, JobContext, JobError, JobId, Worker};
use serde::{Deserialize, Serialize};

async fn setup(queue: &str) -> (RedisServer, Rsmq, RedisBackend) {
    let server = RedisServer::start();
    let rsmq = Rsmq::connect(&server.url()).await.unwrap();
    rsmq.create_queue(queue, QueueOptions::default())
        .await
        .unwrap();
    let backend = RedisBackend::connect(&RedisConfig::from_url(server.url()), "rsmq", false)
        .await
        .unwrap();
    (server, rsmq, backend)
}

/// RSMQ's deleteMessage: no script, its body, rc and fr alone.
async fn rsmq_delete(server: &RedisServer, queue: &str, id: &JobId) {
    let mut con = server.raw().await;
    let id = id.as_str();
    let _: () = redis::pipe()
        .cmd("ZREM")
        .arg(format!("rsmq:{queue}"))
        .arg(id)
        .cmd("HDEL")
        .arg(format!("rsmq:{queue}:Q"))
        .arg(id)
        .arg(format!("{id}:rc"))
        .arg(format!("{id}:fr"))
        .query_async(&mut con)
        .await
        .unwrap();
}

/// Fetches job `id`, the next due of `queue`, and releases it at once: it
/// keeps its lease's end in `<id>:l` (and `redjob:released` counts it).
async fn fetch_and_release(backend: &RedisBackend, queue: &str, id: JobId) {
    let d = backend
        .fetch(queue, 1, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert_eq!(d.id, id);
    let release = Settle {
        reschedules: vec![Reschedule {
            id,
            token: d.token,
            delay: Duration::ZERO,
            deliveries: 0,
            release: true,
            error: None,
        }],
        ..Settle::default()
    };
    assert_eq!(
        backend.settle(queue, &release).await.unwrap().rescheduled,
        1
    );
}

/// Redis's clock, Unix ms.
async fn redis_ms(server: &RedisServer) -> u64 {
    let mut con = server.raw().await;
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await.unwrap();
    s * 1000 + us / 1000
}

/// A throttle and a release give their delivery back on a queue an RSMQ
/// client also receives from: the receive count its receive stored is taken
/// into the score's count at the next fetch, so it never outweighs what they
/// gave back (the RSMQ receive counts, they do not).
#[tokio::test]
async fn an_rsmq_receive_does_not_make_a_throttle_or_release_count() {
    let (_server, rsmq, backend) = setup("mq").await;
    let id = Queues::send(&rsmq, "mq", SendMessage::new("x"))
        .await
        .unwrap();
    // an RSMQ client receives it once, with a visibility timeout of 0
    let m = rsmq
        .receive("mq", Some(Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((m.id, m.rc), (id, 1));
    let lease = Duration::from_secs(60);
    let fetch = || async {
        let mut f = backend.fetch("mq", 1, lease).await.unwrap();
        assert_eq!(f.jobs.len(), 1, "due");
        f.jobs.remove(0)
    };
    let d = fetch().await;
    assert_eq!(d.token.attempt(), 2, "the RSMQ receive counts");
    let throttle = Settle {
        throttles: vec![Throttle {
            id,
            token: d.token,
            deliveries: d.token.attempt() - 1,
            delay: Duration::from_millis(1),
            error: "slow down".into(),
            key: false,
        }],
        ..Settle::default()
    };
    backend.settle("mq", &throttle).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let d = fetch().await;
    assert_eq!(d.token.attempt(), 2, "the throttle gave its delivery back");
    let release = Settle {
        reschedules: vec![Reschedule {
            id,
            token: d.token,
            delay: Duration::ZERO,
            deliveries: d.token.attempt() - 1,
            release: true,
            error: None,
        }],
        ..Settle::default()
    };
    assert_eq!(backend.settle("mq", &release).await.unwrap().rescheduled, 1);
    let d = fetch().await;
    assert_eq!(d.token.attempt(), 2, "the release gave its delivery back");
}

#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "mixed_charge",
    queue = "mk",
    concurrency_key = "account",
    per_key = 1
)]
struct Charge {
    account: u64,
    n: u64,
}

impl Job for Charge {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<common::Recorder>()?.record(ctx, self.n);
        Ok(())
    }
}

/// An RSMQ client receives a key's holder and deletes it (no script: the
/// key's place is not given on). A worker with nothing else to do finds the
/// place freed by its sweep of the keys (one step in one second of ten), and
/// runs the key's next job: while keyed jobs wait, it wakes for such a
/// second a minute on (60–70 s). It slept until a send: the key's jobs
/// waited for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_next_job_runs_after_an_rsmq_client_deleted_its_holder() {
    let (server, rsmq, _) = setup("mk").await;
    let client = Client::connect(&server.url()).await.unwrap();
    let first = client.enqueue(&Charge { account: 1, n: 1 }).await.unwrap();
    client.enqueue(&Charge { account: 1, n: 2 }).await.unwrap();
    let m = rsmq
        .receive("mk", Some(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.id, first, "RSMQ clients see the key's holder");
    rsmq_delete(&server, "mk", &first).await;
    // the worker's first fetch lands in no tenth second (where a fetch
    // sweeps the keys): at a second 1..7 of ten
    while !(1000..8000).contains(&(redis_ms(&server).await % 10_000)) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recorder = common::Recorder::default();
    let worker = Worker::builder(client.backend())
        .register::<Charge>()
        .data(recorder.clone())
        .build()
        .unwrap();
    let running = common::start_serving(worker).await;
    let ran = common::wait_until(Duration::from_secs(80), || recorder.len() == 1).await;
    running.stop().await;
    assert!(ran, "the key's next job did not run");
    assert_eq!(recorder.runs()[0].key, 2);
}

/// A released job keeps its last lease end in `<id>:l` until it is leased
/// again; an RSMQ client that receives and deletes it leaves the field, and
/// the count of such fields that makes every fetch read them: idle fetches
/// sweep them as they sweep a deleted job's records.
#[tokio::test]
async fn a_released_jobs_lease_end_an_rsmq_delete_leaves_behind_is_swept() {
    let (server, rsmq, backend) = setup("rq").await;
    let id = Queues::send(&rsmq, "rq", SendMessage::new("x"))
        .await
        .unwrap();
    fetch_and_release(&backend, "rq", id).await;
    let m = rsmq.receive("rq", None).await.unwrap().unwrap();
    assert_eq!(m.id, id);
    rsmq_delete(&server, "rq", &id).await;
    let mut con = server.raw().await;
    let field = format!("{id}:l");
    let left = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        let field = field.clone();
        async move {
            let v: (Option<String>, Option<String>) = redis::pipe()
                .cmd("HGET")
                .arg("rsmq:rq:Q")
                .arg(&field)
                .cmd("HGET")
                .arg("rsmq:rq:Q")
                .arg("redjob:released")
                .query_async(&mut con)
                .await
                .unwrap();
            v
        }
    };
    let (l, n) = left(&mut con).await;
    assert!(l.is_some(), "RSMQ deletes body, rc and fr only");
    assert_eq!(n.as_deref(), Some("1"));
    // idle fetches: one lands in a tenth second within 11 s
    let start = std::time::Instant::now();
    while left(&mut con).await.0.is_some() && start.elapsed() < Duration::from_secs(11) {
        backend
            .fetch("rq", 1, Duration::from_secs(60))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (l, n) = left(&mut con).await;
    assert_eq!(
        (l, n.as_deref()),
        (None, Some("0")),
        "swept, and counted out"
    );
}

/// An RSMQ client's changeMessageVisibility of a job a worker runs moves its
/// lease (a whole-ms score): the worker's ack is fenced off, the job is not
/// lost, and it runs again at the time the client set, counted from its
/// receive count (none here: delivery 1, as docs/layout.md says).
#[tokio::test]
async fn an_rsmq_change_of_visibility_fences_off_a_running_jobs_settle() {
    let (server, rsmq, backend) = setup("vq").await;
    let id = Queues::send(&rsmq, "vq", SendMessage::new("x"))
        .await
        .unwrap();
    let lease = Duration::from_secs(60);
    let d = backend.fetch("vq", 1, lease).await.unwrap().jobs.remove(0);
    let mut con = server.raw().await;
    let now = redis_ms(&server).await;
    let _: () = redis::cmd("ZADD")
        .arg("rsmq:vq")
        .arg(now)
        .arg(id.as_str())
        .query_async(&mut con)
        .await
        .unwrap();
    let ack = |token| Settle {
        acks: vec![(id, token)],
        ..Settle::default()
    };
    let s = backend.settle("vq", &ack(d.token)).await.unwrap();
    assert_eq!(s.acked, 0, "fenced off");
    let mut f = backend.fetch("vq", 1, lease).await.unwrap();
    assert_eq!(f.jobs.len(), 1, "not lost: due again");
    let d = f.jobs.remove(0);
    assert_eq!((d.id, d.token.attempt()), (id, 1));
    assert_eq!(backend.settle("vq", &ack(d.token)).await.unwrap().acked, 1);
    assert!(backend.fetch("vq", 1, lease).await.unwrap().jobs.is_empty());
}

/// One idle fetch that drops two released jobs' lease ends two ways counts
/// both out of `redjob:released`: a key's orphan (an RSMQ client deleted
/// the key's holder and its next job) dropped as the keys' sweep fills the
/// key, and a leftover an RSMQ delete left, dropped by the sweep of
/// leftover fields. The fetch wrote its own count over the fill's, from the
/// count it read first: one stayed counted for good.
#[tokio::test]
async fn a_fetch_that_drops_lease_ends_two_ways_counts_both_out() {
    let (server, rsmq, backend) = setup("mk").await;
    let client = Client::connect(&server.url()).await.unwrap();
    let lease = Duration::from_secs(60);
    let holder = client.enqueue(&Charge { account: 1, n: 1 }).await.unwrap();
    let next = client.enqueue(&Charge { account: 1, n: 2 }).await.unwrap();
    let got = backend.fetch("mk", 1, lease).await.unwrap();
    assert_eq!(
        got.jobs[0].id, holder,
        "the key's holder, its next job waits"
    );
    // a released job an RSMQ client then deletes: its lease end stays
    let x = Queues::send(&rsmq, "mk", SendMessage::new("x"))
        .await
        .unwrap();
    fetch_and_release(&backend, "mk", x).await;
    rsmq_delete(&server, "mk", &x).await;
    // the key's next job with a lease end of its own (as if released
    // before), deleted by an RSMQ client, and the holder deleted too
    let mut con = server.raw().await;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("rsmq:mk:Q")
        .arg(format!("{next}:l"))
        .arg(redis_ms(&server).await)
        .cmd("HINCRBY")
        .arg("rsmq:mk:Q")
        .arg("redjob:released")
        .arg(1)
        .query_async(&mut con)
        .await
        .unwrap();
    rsmq_delete(&server, "mk", &next).await;
    rsmq_delete(&server, "mk", &holder).await;
    let left = || {
        let mut con = con.clone();
        async move {
            let v: (Option<String>, Option<String>, Option<String>) = redis::pipe()
                .cmd("HGET")
                .arg("rsmq:mk:Q")
                .arg(format!("{x}:l"))
                .cmd("HGET")
                .arg("rsmq:mk:Q")
                .arg(format!("{next}:l"))
                .cmd("HGET")
                .arg("rsmq:mk:Q")
                .arg("redjob:released")
                .query_async(&mut con)
                .await
                .unwrap();
            v
        }
    };
    let (a, b, n) = left().await;
    assert!(a.is_some() && b.is_some(), "two lease ends left");
    assert_eq!(n.as_deref(), Some("2"));
    // idle fetches: one lands in a tenth second (both sweeps) within 11 s
    let start = std::time::Instant::now();
    loop {
        let (a, b, _) = left().await;
        if (a.is_none() && b.is_none()) || start.elapsed() > Duration::from_secs(11) {
            break;
        }
        assert!(backend.fetch("mk", 1, lease).await.unwrap().jobs.is_empty());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        left().await,
        (None, None, Some("0".into())),
        "both dropped, both counted out"
    );
}
