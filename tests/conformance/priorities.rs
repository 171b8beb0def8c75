//! Priorities: higher first among due jobs, FIFO within one, one fetch for all
//! levels, delays still honoured, leases and settles at any level, RSMQ's view.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redjob::backend::{Backend, DeadLetterEntry, Reschedule, Settle};
use redjob::client::EnqueueOptions;
use redjob::queue::{QueueOptions, Queues, SendMessage};
use redjob::{Error, Job, JobContext, JobError, JobId, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{start_serving, wait_until};

const LONG: Duration = Duration::from_secs(30);

/// Sends one message per `(body, priority)`, each in its own call, in order.
async fn send_each(env: &Env, queue: &str, msgs: &[(&str, i8)]) -> Vec<JobId> {
    let backend = env.client.backend();
    let mut ids = Vec::new();
    for (body, p) in msgs {
        let msg = SendMessage::new(*body).priority(*p);
        let sent = Backend::send(&backend, queue, &[msg], &QueueOptions::default())
            .await
            .unwrap();
        ids.extend(sent);
    }
    ids
}

fn bodies(jobs: &[redjob::backend::Delivery]) -> Vec<String> {
    jobs.iter()
        .map(|d| String::from_utf8_lossy(&d.body).into_owned())
        .collect()
}

pub async fn fetch_takes_higher_priorities_first_and_fifo_within_one(env: &Env) {
    let msgs = [
        ("a0", 0),
        ("b5", 5),
        ("c-3", -3),
        ("d5", 5),
        ("e0", 0),
        ("f10", 10),
        ("g-10", -10),
        ("h-3", -3),
    ];
    send_each(env, "prio", &msgs).await;
    let backend = env.client.backend();
    let got = backend.fetch("prio", 100, LONG).await.unwrap();
    assert_eq!(
        bodies(&got.jobs),
        ["f10", "b5", "d5", "a0", "e0", "c-3", "h-3", "g-10"]
    );
    let levels: Vec<i8> = got.jobs.iter().map(|d| d.token.priority()).collect();
    assert_eq!(levels, [10, 5, 5, 0, 0, -3, -3, -10]);
    // every one acked through its token, wherever it lives
    let settle = Settle {
        acks: got.jobs.iter().map(|d| (d.id, d.token)).collect(),
        ..Settle::default()
    };
    let done = backend.settle("prio", &settle).await.unwrap();
    assert_eq!((done.acked, done.gone.len()), (8, 0));
    let again = backend.fetch("prio", 100, LONG).await.unwrap();
    assert!(again.jobs.is_empty());
    assert_eq!(again.next_due_ms, None, "nothing left at any level");
    assert_eq!(backend.stats("prio").await.unwrap().processed, 8);
}

pub async fn one_fetch_takes_the_highest_up_to_its_limit(env: &Env) {
    let mut msgs = Vec::new();
    for p in [-1i8, 0, 1] {
        for i in 0..3 {
            msgs.push((format!("p{p}-{i}"), p));
        }
    }
    let refs: Vec<(&str, i8)> = msgs.iter().map(|(b, p)| (b.as_str(), *p)).collect();
    send_each(env, "prio", &refs).await;
    let backend = env.client.backend();
    let first = backend.fetch("prio", 4, LONG).await.unwrap();
    assert_eq!(bodies(&first.jobs), ["p1-0", "p1-1", "p1-2", "p0-0"]);
    let rest = backend.fetch("prio", 100, LONG).await.unwrap();
    assert_eq!(
        bodies(&rest.jobs),
        ["p0-1", "p0-2", "p-1-0", "p-1-1", "p-1-2"]
    );
}

pub async fn a_delayed_high_priority_job_never_starts_early(env: &Env) {
    let backend = env.client.backend();
    let delay = Duration::from_millis(400);
    let high = SendMessage::new("high").priority(9).delay(delay);
    Backend::send(&backend, "prio", &[high], &QueueOptions::default())
        .await
        .unwrap();
    send_each(env, "prio", &[("low", -9)]).await;
    let sent_at = env.now().await;
    let got = backend.fetch("prio", 10, LONG).await.unwrap();
    assert_eq!(bodies(&got.jobs), ["low"]);
    // the worker learns when to look again: the delayed job's due time
    let next = got.next_due_ms.expect("the delayed job is reported");
    let due = (sent_at + delay)
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // (the send rounds the delay up to a whole ms)
    assert!(
        next <= due + 1 && next + 1000 > due,
        "next due {next}, job due {due}"
    );
    tokio::time::sleep(delay + Duration::from_millis(50)).await;
    let got = backend.fetch("prio", 10, LONG).await.unwrap();
    assert_eq!(bodies(&got.jobs), ["high"]);
    assert_eq!(got.jobs[0].token.priority(), 9);
}

pub async fn leases_retries_and_dead_letters_keep_a_job_at_its_priority(env: &Env) {
    let backend = env.client.backend();
    let ids = send_each(env, "prio", &[("x", 7), ("y", 0), ("z", -2)]).await;
    let got = backend
        .fetch("prio", 10, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(bodies(&got.jobs), ["x", "y", "z"]);
    let held: Vec<_> = got.jobs.iter().map(|d| (d.id, d.token)).collect();
    // one renewal for all levels
    let renewed = backend.extend("prio", &held, LONG).await.unwrap();
    let renewed: Vec<_> = renewed.into_iter().map(Option::unwrap).collect();
    for (t, d) in renewed.iter().zip(&got.jobs) {
        assert_eq!(t.priority(), d.token.priority());
        assert!(t.lease_until_ms() > d.token.lease_until_ms());
    }
    let scores = backend.scores("prio", &held).await.unwrap();
    assert!(scores.iter().all(Option::is_some), "found at their levels");
    // the old tokens are fenced off at every level
    let stale = Settle {
        acks: held.clone(),
        ..Settle::default()
    };
    assert_eq!(backend.settle("prio", &stale).await.unwrap().acked, 0);
    // x retried at once, y acked, z dead-lettered: one call
    let settle = Settle {
        acks: vec![(ids[1], renewed[1])],
        reschedules: vec![Reschedule {
            id: ids[0],
            token: renewed[0],
            delay: Duration::ZERO,
            deliveries: 1,
            release: false,
        }],
        dead: vec![DeadLetterEntry {
            id: ids[2],
            token: renewed[2],
            error: "gave up".into(),
        }],
    };
    let done = backend.settle("prio", &settle).await.unwrap();
    assert_eq!((done.acked, done.rescheduled, done.dead), (1, 1, 1));
    // due within the next millisecond
    tokio::time::sleep(Duration::from_millis(5)).await;
    let again = backend.fetch("prio", 10, LONG).await.unwrap();
    assert_eq!(bodies(&again.jobs), ["x"]);
    assert_eq!(
        (
            again.jobs[0].token.priority(),
            again.jobs[0].token.attempt()
        ),
        (7, 2)
    );
    let dead = env.client.dead_letters("prio", 10).await.unwrap();
    assert_eq!((dead.len(), &dead[0].error[..]), (1, "gave up"));
}

pub async fn rsmq_receive_sees_priority_zero_only_delete_sees_all(env: &Env) {
    let ids = send_each(env, "prio", &[("plain", 0), ("urgent", 3)]).await;
    let q = env.queues();
    assert_eq!(q.attributes("prio").await.unwrap().msgs, 1);
    let got = q.receive_batch("prio", 10, None).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body, "plain");
    assert!(q.pop("prio").await.unwrap().is_none());
    // a worker still gets the urgent one
    let backend = env.client.backend();
    let fetched = backend.fetch("prio", 10, LONG).await.unwrap();
    assert_eq!(bodies(&fetched.jobs), ["urgent"]);
    // change visibility and delete find a message at any priority
    assert!(
        q.change_visibility("prio", &ids[1], Duration::ZERO)
            .await
            .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    let again = backend.fetch("prio", 10, LONG).await.unwrap();
    assert_eq!(bodies(&again.jobs), ["urgent"]);
    assert!(q.delete("prio", &ids[1]).await.unwrap());
    assert!(!q.delete("prio", &ids[1]).await.unwrap());
    let settle = Settle {
        acks: vec![(ids[1], again.jobs[0].token)],
        ..Settle::default()
    };
    assert_eq!(
        backend.settle("prio", &settle).await.unwrap().gone,
        [ids[1]]
    );
}

pub async fn a_priority_out_of_range_is_refused_and_sends_nothing(env: &Env) {
    let backend = env.client.backend();
    for p in [11i8, -11, i8::MAX, i8::MIN] {
        let msgs = [SendMessage::new("ok"), SendMessage::new("bad").priority(p)];
        let err = Backend::send(&backend, "prio", &msgs, &QueueOptions::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidValue { what: "priority", reason } if reason.contains(&p.to_string())),
            "{err}"
        );
        let err = env
            .client
            .enqueue_with(&Urgent { n: 0 }, EnqueueOptions::new().priority(p))
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidValue {
                what: "priority",
                ..
            }
        ));
    }
    let got = backend.fetch("prio", 10, LONG).await.unwrap();
    assert!(got.jobs.is_empty(), "nothing of a refused batch was sent");
}

/// Counts job starts; the urgent one records how many had started before it.
#[derive(Default)]
struct Starts {
    started: AtomicUsize,
    urgent_after: std::sync::Mutex<Vec<usize>>,
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "prio_bulk", queue = "prio", priority = -5)]
struct Bulk;

impl Job for Bulk {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Starts>>()?
            .started
            .fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "prio_urgent", queue = "prio", priority = 5)]
struct Urgent {
    n: u32,
}

impl Job for Urgent {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let s = ctx.data::<Arc<Starts>>()?;
        let before = s.started.fetch_add(1, Ordering::SeqCst);
        s.urgent_after.lock().unwrap().push(before);
        Ok(())
    }
}

/// A backlog of 10,000 low-priority jobs delays a high-priority one by at most
/// one fetch batch (the worker's concurrency), whether the high one was there
/// before the worker started or arrives while it works through the backlog.
pub async fn a_backlog_of_10k_low_jobs_delays_a_high_one_by_one_batch_at_most(env: &Env) {
    const CONCURRENCY: usize = 8;
    let client = env.client.clone();
    let bulk: Vec<Bulk> = (0..10_000).map(|_| Bulk).collect();
    client.enqueue_batch(&bulk).await.unwrap();
    client.enqueue(&Urgent { n: 1 }).await.unwrap();
    let starts = Arc::new(Starts::default());
    let worker = Worker::builder(client.backend())
        .queue("prio")
        .concurrency(CONCURRENCY)
        .handle_signals(false)
        .data(starts.clone())
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    assert!(
        wait_until(Duration::from_secs(20), || starts
            .started
            .load(Ordering::SeqCst)
            > 500)
        .await
    );
    // while the worker works through the backlog
    let before = starts.started.load(Ordering::SeqCst);
    client.enqueue(&Urgent { n: 2 }).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || starts
            .urgent_after
            .lock()
            .unwrap()
            .len()
            == 2)
        .await
    );
    let after = starts.urgent_after.lock().unwrap().clone();
    running.stop().await;
    assert!(
        after[0] < CONCURRENCY,
        "the urgent job waiting from the start ran after {} others",
        after[0]
    );
    assert!(
        after[1] - before <= CONCURRENCY,
        "the urgent job sent while the backlog ran waited for {} others",
        after[1] - before
    );
    assert!(
        after[1] < 10_000,
        "the backlog was not yet done when the urgent job came: the test measured something"
    );
}
