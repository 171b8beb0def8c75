//! Delayed sends on Redis: a job sent with a delay is due at its send (Redis's
//! µs, in its id) plus the delay, not at the whole ms its score is rounded up
//! to; never before; and a later score set on the same id is never taken for
//! its send's.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::RedisServer;
use redjob::backend::Backend;
use redjob::queue::{OnDuplicate, QueueOptions, Rsmq, SendMessage, Unique};
use redjob::{Client, JobId};

const LEASE: Duration = Duration::from_secs(30);

/// The send's Redis time, Unix µs, from the id's prefix.
fn sent_us(id: &JobId) -> u64 {
    u64::from_str_radix(&id.as_str()[..10], 36).unwrap()
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

async fn redis_ms(con: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(con).await.unwrap();
    secs * 1000 + micros / 1000
}

async fn score(server: &RedisServer, queue: &str, id: &JobId) -> String {
    let mut con = server.raw().await;
    redis::cmd("ZSCORE")
        .arg(format!("rsmq:{queue}"))
        .arg(id.as_str())
        .query_async(&mut con)
        .await
        .unwrap()
}

/// Fetches watched around a delayed job's due time: every fetch whose Redis
/// clock read had reached send + delay leased the job, none before; at least
/// one of them ran in the ms before the job's score, where a fetch that goes by
/// the score alone finds nothing.
#[tokio::test]
async fn a_delayed_job_is_leased_at_its_send_plus_its_delay_not_its_rounded_score() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let backend = client.backend();
    let delay = Duration::from_millis(80);
    let mut inside = 0;
    for attempt in 0..40 {
        let queue = format!("d{attempt}");
        let msg = SendMessage::new("x").delay(delay);
        let sent = Backend::send(&backend, &queue, &[msg], &QueueOptions::default())
            .await
            .unwrap();
        let id = sent[0].id;
        let exact = sent_us(&id) + delay.as_micros() as u64;
        let rounded = exact.div_ceil(1000) * 1000;
        assert_eq!(
            score(&server, &queue, &id).await,
            (rounded / 1000).to_string(),
            "RSMQ's layout: the score is the due ms, rounded up"
        );
        let early = backend.fetch(&queue, 10, LEASE).await.unwrap();
        if early.now_us >= exact {
            // a machine slow enough that the delay passed before this fetch:
            // it leased the job, and this attempt has no fetch before the due
            assert_eq!(
                early.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
                [id],
                "a fetch at {} (due {exact})",
                early.now_us
            );
            continue;
        }
        assert!(early.jobs.is_empty(), "not due yet");
        assert_eq!(
            early.next_due_us,
            Some(exact),
            "the worker learns the exact due"
        );
        if rounded - exact < 300 {
            continue; // too little room to land a fetch in between
        }
        // this machine's clock is Redis's (loopback): wait to just before the due
        let start = exact - 150;
        while now_us() < start {
            let left = start.saturating_sub(now_us());
            if left > 3000 {
                tokio::time::sleep(Duration::from_micros(left - 2000)).await;
            } else {
                std::hint::spin_loop();
            }
        }
        let mut got = false;
        for _ in 0..200 {
            let f = backend.fetch(&queue, 10, LEASE).await.unwrap();
            let due = f.now_us >= exact;
            assert_eq!(
                !f.jobs.is_empty(),
                due,
                "fetch at {} (due {exact}, score {rounded})",
                f.now_us
            );
            if due {
                assert_eq!(f.jobs[0].id, id);
                if f.now_us < rounded {
                    inside += 1;
                }
                got = true;
                break;
            }
        }
        assert!(got, "the job came within 200 fetches");
        if inside >= 3 {
            break;
        }
    }
    assert!(
        inside >= 1,
        "no fetch landed between the due time and the score"
    );
}

/// A unique send that moves a held job's due time onto the ms its own send's
/// due rounded up to scores it at that ms, as asked (as memory does), and
/// drops the held id's exact due, up to a ms earlier, which would otherwise
/// start it before the time asked for. (It was scored a ms later.)
#[tokio::test]
async fn a_due_time_moved_onto_the_sends_own_ms_is_not_taken_for_the_sends() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let backend = client.backend();
    let key = || Unique::new("k").on_duplicate(OnDuplicate::ReplaceDelay);
    let first = SendMessage::new("a")
        .delay(Duration::from_secs(60))
        .unique(key());
    let sent = Backend::send(&backend, "u", &[first], &QueueOptions::default())
        .await
        .unwrap();
    let id = sent[0].id;
    let s: u64 = score(&server, "u", &id).await.parse().unwrap();
    let again = SendMessage::new("b").at_unix_ms(s).unique(key());
    let sent = Backend::send(&backend, "u", &[again], &QueueOptions::default())
        .await
        .unwrap();
    assert_eq!(sent[0].id, id, "the held job was kept");
    assert_eq!(score(&server, "u", &id).await, s.to_string());
    let f = backend.fetch("u", 10, LEASE).await.unwrap();
    assert_eq!(f.next_due_us, Some(s * 1000), "due by its score alone");

    // moved anywhere else, the score is what was asked
    let again = SendMessage::new("c").at_unix_ms(s + 7).unique(key());
    Backend::send(&backend, "u", &[again], &QueueOptions::default())
        .await
        .unwrap();
    assert_eq!(score(&server, "u", &id).await, (s + 7).to_string());
}

/// A change of visibility that lands on the ms of the message's send-time due
/// stays there and drops the exact due, like the unique send above. Each try aims at that ms from
/// Redis's clock just before; the tries whose clock had not moved on after
/// the change (most) landed on it.
#[tokio::test]
async fn a_visibility_change_onto_the_sends_own_ms_is_not_taken_for_the_sends() {
    let server = RedisServer::start();
    let rsmq = Rsmq::connect(&server.url()).await.unwrap();
    rsmq.create_queue("v", QueueOptions::default())
        .await
        .unwrap();
    let id = rsmq
        .send("v", SendMessage::new("x").delay(Duration::from_secs(60)))
        .await
        .unwrap();
    let s: u64 = score(&server, "v", &id).await.parse().unwrap();
    let mut con = server.raw().await;
    let mut landed = 0;
    for _ in 0..50 {
        let before = redis_ms(&mut con).await;
        let vt = Duration::from_millis(s - before);
        assert!(rsmq.change_visibility("v", &id, vt).await.unwrap());
        let after = redis_ms(&mut con).await;
        let got: u64 = score(&server, "v", &id).await.parse().unwrap();
        let exact: Option<String> = redis::cmd("ZSCORE")
            .arg("rsmq:v:exact")
            .arg(id.as_str())
            .query_async(&mut con)
            .await
            .unwrap();
        if before == after {
            // the change ran within that ms, so it aimed at the send's own
            assert_eq!(got, s);
            assert_eq!(exact, None, "the exact due is dropped");
            landed += 1;
        }
    }
    assert!(landed > 0, "no change ran within the ms it was aimed from");
}

/// A delayed job at the same ms as 1,000 jobs without a delay mark whose ids
/// sort before its own (sent earlier, then moved onto that ms as another
/// client's change of visibility would): the first fetch whose Redis clock has
/// reached its exact due, and runs before that ms, leases it; no fetch before
/// its due does. Tries until a fetch lands between the due and the ms.
#[tokio::test]
async fn a_delayed_job_behind_1000_unmarked_ties_is_leased_at_its_exact_due() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let backend = client.backend();
    let mut con = server.raw().await;
    let delay = Duration::from_millis(80);
    let far = redis_ms(&mut con).await + 3_600_000;
    let mut inside = 0;
    for attempt in 0..40 {
        let queue = format!("t{attempt}");
        let ties: Vec<SendMessage> = (0..1000)
            .map(|_| SendMessage::new("u").at_unix_ms(far))
            .collect();
        let ties = Backend::send(&backend, &queue, &ties, &QueueOptions::default())
            .await
            .unwrap();
        let msg = SendMessage::new("x").delay(delay);
        let sent = Backend::send(&backend, &queue, &[msg], &QueueOptions::default())
            .await
            .unwrap();
        let id = sent[0].id;
        let exact = sent_us(&id) + delay.as_micros() as u64;
        let s: u64 = score(&server, &queue, &id).await.parse().unwrap();
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(format!("rsmq:{queue}")).arg("XX");
        for t in &ties {
            zadd.arg(s).arg(t.id.as_str());
        }
        let _: i64 = zadd.query_async(&mut con).await.unwrap();
        let rank: i64 = redis::cmd("ZRANK")
            .arg(format!("rsmq:{queue}"))
            .arg(id.as_str())
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(
            rank, 1000,
            "the 1,000 sort before the delayed job at its ms"
        );
        let early = backend.fetch(&queue, 10, LEASE).await.unwrap();
        assert!(early.jobs.is_empty(), "not due yet");
        let rounded = s * 1000;
        if rounded - exact < 300 {
            continue; // too little room to land a fetch in between
        }
        let start = exact - 150;
        while now_us() < start {
            let left = start.saturating_sub(now_us());
            if left > 3000 {
                tokio::time::sleep(Duration::from_micros(left - 2000)).await;
            } else {
                std::hint::spin_loop();
            }
        }
        for _ in 0..200 {
            let f = backend.fetch(&queue, 10, LEASE).await.unwrap();
            if f.now_us < exact {
                assert!(
                    f.jobs.is_empty(),
                    "fetch at {} before the due {exact}",
                    f.now_us
                );
                continue;
            }
            if f.now_us < rounded {
                let got: Vec<_> = f.jobs.iter().map(|j| j.id).collect();
                assert_eq!(
                    got,
                    [id],
                    "the first fetch past the due (at {}, due {exact}, ms {s})",
                    f.now_us
                );
                inside += 1;
            }
            break;
        }
        if inside >= 3 {
            break;
        }
    }
    assert!(
        inside >= 1,
        "no fetch landed between the due time and the ms"
    );
}
