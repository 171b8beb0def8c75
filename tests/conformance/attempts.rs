//! Every attempt at a job recorded with the settle that ends it: times,
//! outcome, error and worker; a lease that ran out recorded by the fetch that
//! delivers the job again; the last 25 kept; a dead letter keeps them; a settle
//! replayed after it landed records nothing twice; an ack or a delete leaves
//! no record behind.

use std::time::Duration;

use redjob::backend::{Backend, DeadLetterEntry, Ran, Reschedule, RunBy, Settle, Token};
use redjob::inspect::{AttemptOutcome, Inspect, JobState, MAX_ERROR, MAX_RECORDS};
use redjob::ops::{Admin, Spread};
use redjob::queue::{QueueOptions, Queues, SendMessage};
use redjob::{Job, JobContext, JobError, JobId, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{start_serving, wait_for};

const LONG: Duration = Duration::from_secs(60);

fn by() -> RunBy {
    RunBy {
        worker: "w-1".into(),
        host: "web-3".into(),
    }
}

fn retry(id: JobId, token: Token, error: &str) -> Settle {
    Settle {
        reschedules: vec![Reschedule {
            id,
            token,
            delay: Duration::ZERO,
            deliveries: token.attempt(),
            release: false,
            error: Some(error.into()),
        }],
        by: Some(by()),
        ..Settle::default()
    }
}

async fn fetch_one(env: &Env, queue: &str, lease: Duration) -> redjob::backend::Delivery {
    let q = env.client.backend();
    let mut f = q.fetch(queue, 1, lease).await.unwrap();
    assert_eq!(f.jobs.len(), 1, "one job due");
    f.jobs.remove(0)
}

/// Whether the queue's hash still holds an attempt field of `id` (Redis only:
/// the memory backend keeps them with the job itself).
async fn has_record_field(env: &Env, queue: &str, id: JobId) -> bool {
    if !env.is_redis() {
        return false;
    }
    redis::cmd("HEXISTS")
        .arg(env.key(queue, ":Q"))
        .arg(format!("{id}:a"))
        .query_async(&mut env.raw().await)
        .await
        .unwrap()
}

pub async fn attempts_are_recorded_with_their_settle_and_a_dead_letter_keeps_them(env: &Env) {
    let q = env.client.backend();
    q.create_queue("att", QueueOptions::default())
        .await
        .unwrap();
    let id = Queues::send(&q, "att", SendMessage::new("x"))
        .await
        .unwrap();

    // 1: a timeout, with its times and worker
    let d = fetch_one(env, "att", LONG).await;
    let mut s = retry(id, d.token, "timed out after 5s");
    s.ran = vec![Ran {
        id,
        started_ms: 1_790_000_000_000,
        ended_ms: 1_790_000_005_000,
        outcome: AttemptOutcome::Timeout,
        job_type: None,
    }];
    assert_eq!(q.settle("att", &s).await.unwrap().rescheduled, 1);
    // replayed after it landed (a lost reply): the fence turns it away
    assert_eq!(q.settle("att", &s).await.unwrap().rescheduled, 0);
    let job = q.job("att", &id).await.unwrap().unwrap();
    assert_eq!(job.runs.len(), 1, "{:?}", job.runs);
    let a = &job.runs[0];
    assert_eq!((a.number, a.outcome), (1, AttemptOutcome::Timeout));
    assert_eq!(a.duration(), Some(Duration::from_secs(5)));
    assert_eq!(a.error.as_deref(), Some("timed out after 5s"));
    assert_eq!(
        (a.worker.as_deref(), a.host.as_deref()),
        (Some("w-1"), Some("web-3"))
    );

    // 2: an error nobody timed, with a text far over the bound
    let d = fetch_one(env, "att", LONG).await;
    let long = "é".repeat(MAX_ERROR);
    assert_eq!(
        q.settle("att", &retry(id, d.token, &long))
            .await
            .unwrap()
            .rescheduled,
        1
    );
    let job = q.job("att", &id).await.unwrap().unwrap();
    let a = &job.runs[1];
    assert_eq!(
        (a.number, a.outcome, a.started_ms),
        (2, AttemptOutcome::Error, None)
    );
    let text = a.error.as_deref().unwrap();
    assert!(
        text.len() <= MAX_ERROR && text.ends_with('…'),
        "{}",
        text.len()
    );
    assert_eq!(
        job.last_error.as_deref(),
        Some(text),
        "the last error is bounded alike"
    );

    // 3: its lease runs out; the fetch that delivers it again records it
    let d = fetch_one(env, "att", Duration::from_millis(200)).await;
    let lease_end = d.token.lease_until_ms();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let d = fetch_one(env, "att", LONG).await;
    assert_eq!(d.token.attempt(), 4);
    let job = q.job("att", &id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::InFlight);
    let a = &job.runs[2];
    assert_eq!((a.number, a.outcome), (3, AttemptOutcome::LeaseLost));
    assert_eq!(a.lease_end_ms, Some(lease_end));
    assert_eq!(
        (a.started_ms, a.ended_ms, a.worker.as_deref()),
        (None, None, None)
    );

    // 4: dead: the letter keeps all four
    let dead = Settle {
        dead: vec![DeadLetterEntry {
            id,
            token: d.token,
            error: "fatal: account closed".into(),
        }],
        by: Some(by()),
        ..Settle::default()
    };
    assert_eq!(q.settle("att", &dead).await.unwrap().dead, 1);
    assert!(
        !has_record_field(env, "att", id).await,
        "moved with the letter"
    );
    let job = q.job("att", &id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Dead);
    let seen: Vec<(u32, AttemptOutcome)> = job.runs.iter().map(|a| (a.number, a.outcome)).collect();
    assert_eq!(
        seen,
        [
            (1, AttemptOutcome::Timeout),
            (2, AttemptOutcome::Error),
            (3, AttemptOutcome::LeaseLost),
            (4, AttemptOutcome::Error)
        ]
    );
    assert_eq!(job.runs[3].error.as_deref(), Some("fatal: account closed"));
    // found by id alone, with them
    let found = q.locate(&id).await.unwrap().unwrap();
    assert_eq!(found.job.runs.len(), 4);
    // a requeue starts it afresh, records and all
    q.requeue_dead("att", &[id], Spread::NOW).await.unwrap();
    let job = q.job("att", &id).await.unwrap().unwrap();
    assert!(job.runs.is_empty(), "{:?}", job.runs);
}

pub async fn a_job_keeps_its_last_attempts_and_an_ack_or_delete_leaves_none(env: &Env) {
    let q = env.client.backend();
    q.create_queue("many", QueueOptions::default())
        .await
        .unwrap();
    let id = Queues::send(&q, "many", SendMessage::new("x"))
        .await
        .unwrap();
    let tries = MAX_RECORDS as u32 + 3;
    for n in 1..=tries {
        let d = fetch_one(env, "many", LONG).await;
        assert_eq!(d.token.attempt(), n);
        q.settle("many", &retry(id, d.token, &format!("try {n}")))
            .await
            .unwrap();
    }
    let job = q.job("many", &id).await.unwrap().unwrap();
    assert_eq!(job.runs.len(), MAX_RECORDS);
    assert_eq!(job.runs[0].number, 4, "the oldest dropped");
    assert_eq!(
        job.runs[MAX_RECORDS - 1].error.as_deref(),
        Some(format!("try {tries}").as_str())
    );
    // an ack takes them with it
    let d = fetch_one(env, "many", LONG).await;
    let ack = Settle {
        acks: vec![(id, d.token)],
        ..Settle::default()
    };
    assert_eq!(q.settle("many", &ack).await.unwrap().acked, 1);
    let done = q.job("many", &id).await.unwrap().unwrap();
    assert_eq!(done.state, JobState::Finished, "in the history now");
    assert_eq!(
        done.runs.len(),
        MAX_RECORDS,
        "its last records, the ack's the newest"
    );
    assert_eq!(done.runs[MAX_RECORDS - 1].outcome, AttemptOutcome::Ok);
    assert!(
        !has_record_field(env, "many", id).await,
        "an ack leaves no record field"
    );

    // a delete and a cancel too
    for cancel in [false, true] {
        let id = Queues::send(&q, "many", SendMessage::new("y"))
            .await
            .unwrap();
        let d = fetch_one(env, "many", LONG).await;
        q.settle("many", &retry(id, d.token, "boom")).await.unwrap();
        assert!(has_record_field(env, "many", id).await || !env.is_redis());
        if cancel {
            q.cancel("many", &id).await.unwrap();
        } else {
            Queues::delete(&q, "many", &id).await.unwrap();
        }
        assert!(!has_record_field(env, "many", id).await, "cancel {cancel}");
    }
}

/// Fails its first two runs (the second with a cause), then succeeds; dies for
/// good when `die`.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "attempts_flaky",
    queue = "flaky",
    max_attempts = 3,
    backoff = "10ms"
)]
struct Flaky {
    die: bool,
}

#[derive(Debug)]
struct Smtp(std::io::Error);

impl std::fmt::Display for Smtp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("sending failed")
    }
}

impl std::error::Error for Smtp {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl Job for Flaky {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        match ctx.attempt() {
            1 => Err(JobError::retry("first try failed")),
            2 => Err(JobError::retry(Smtp(std::io::Error::other(
                "connection reset",
            )))),
            _ if self.die => panic!("third try panicked"),
            _ => Ok(()),
        }
    }
}

pub async fn a_worker_records_each_attempt_with_its_error_chain_and_itself(env: &Env) {
    let q = env.client.backend();
    q.create_queue("flaky", QueueOptions::default())
        .await
        .unwrap();
    let worker = Worker::builder(q.clone())
        .queue("flaky")
        .handle_signals(false)
        .build()
        .unwrap();
    let worker_id = worker.id().to_string();
    let running = start_serving(worker).await;
    let id = env.client.enqueue(&Flaky { die: true }).await.unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || async {
            matches!(q.job("flaky", &id).await, Ok(Some(j)) if j.state == JobState::Dead)
        })
        .await,
        "dead-lettered"
    );
    running.stop().await;
    let job = q.job("flaky", &id).await.unwrap().unwrap();
    let seen: Vec<(u32, AttemptOutcome)> = job.runs.iter().map(|a| (a.number, a.outcome)).collect();
    assert_eq!(
        seen,
        [
            (1, AttemptOutcome::Error),
            (2, AttemptOutcome::Error),
            (3, AttemptOutcome::Panic)
        ]
    );
    assert_eq!(job.runs[0].error.as_deref(), Some("first try failed"));
    assert_eq!(
        job.runs[1].error.as_deref(),
        Some("sending failed: connection reset"),
        "the error's chain of causes"
    );
    assert!(
        job.runs[2]
            .error
            .as_deref()
            .unwrap()
            .contains("third try panicked")
    );
    let sent_ms = id.sent_ms();
    for a in &job.runs {
        assert_eq!(a.worker.as_deref(), Some(worker_id.as_str()));
        assert!(a.host.as_deref().is_some_and(|h| !h.is_empty()));
        let (start, end) = (a.started_ms.unwrap(), a.ended_ms.unwrap());
        // backend time as the worker reckons it: after the send, in order
        assert!(start + 5 >= sent_ms && end >= start, "{a:?} sent {sent_ms}");
    }
    assert!(job.runs[0].ended_ms <= job.runs[1].started_ms);
    // the worker named each run's type: three runs of it
    let times = q.run_times("flaky").await.unwrap();
    assert_eq!(times.len(), 1);
    assert_eq!(
        (times[0].job_type.as_str(), times[0].count()),
        ("attempts_flaky", 3)
    );
}

pub async fn run_times_are_counted_per_type_once_per_settled_run(env: &Env) {
    let q = env.client.backend();
    q.create_queue("rt", QueueOptions::default()).await.unwrap();
    let ran = |id, ms: u64, t: &'static str| Ran {
        id,
        started_ms: 1_790_000_000_000,
        ended_ms: 1_790_000_000_000 + ms,
        outcome: AttemptOutcome::Ok,
        job_type: Some(t.into()),
    };
    let mut acks = Vec::new();
    let mut runs = Vec::new();
    for (i, ms) in [3u64, 4, 40, 900].into_iter().enumerate() {
        let id = Queues::send(&q, "rt", SendMessage::new(format!("{i}")))
            .await
            .unwrap();
        let d = fetch_one(env, "rt", LONG).await;
        acks.push((id, d.token));
        runs.push(ran(id, ms, "Mail"));
    }
    // a retry of another type, and a release (its run cut short: recorded
    // as released, not timed)
    let r = Queues::send(&q, "rt", SendMessage::new("r")).await.unwrap();
    let d = fetch_one(env, "rt", LONG).await;
    let mut settle = retry(r, d.token, "boom");
    settle.reschedules[0].delay = LONG;
    runs.push(ran(r, 7_000, "Sms"));
    let l = Queues::send(&q, "rt", SendMessage::new("l")).await.unwrap();
    let dl = fetch_one(env, "rt", LONG).await;
    settle.reschedules.push(Reschedule {
        id: l,
        token: dl.token,
        delay: LONG,
        deliveries: 0,
        release: true,
        error: None,
    });
    runs.push(ran(l, 1, "Sms"));
    settle.acks = acks;
    settle.ran = runs;
    let done = q.settle("rt", &settle).await.unwrap();
    assert_eq!((done.acked, done.rescheduled), (4, 2));
    // replayed after it landed: fenced off, counted once
    q.settle("rt", &settle).await.unwrap();
    // a fresh ack beside a stale one of the same type and run time: only
    // the fresh one counts
    let f = Queues::send(&q, "rt", SendMessage::new("f")).await.unwrap();
    let df = fetch_one(env, "rt", LONG).await;
    let mixed = Settle {
        acks: vec![(f, df.token), settle.acks[0]],
        ran: vec![ran(f, 3, "Mail"), ran(settle.acks[0].0, 3, "Mail")],
        ..Settle::default()
    };
    let done = q.settle("rt", &mixed).await.unwrap();
    assert_eq!(done.acked, 1);
    let times = q.run_times("rt").await.unwrap();
    let get = |t: &str| times.iter().find(|x| x.job_type == t).unwrap().clone();
    let mail = get("Mail");
    assert_eq!(mail.count(), 5, "four, then the fresh ack alone");
    assert_eq!(mail.quantile(0.5), Some(Duration::from_millis(5)));
    assert_eq!(mail.quantile(0.99), Some(Duration::from_secs(1)));
    let sms = get("Sms");
    assert_eq!(sms.count(), 1, "the retry, not the release");
    assert_eq!(sms.quantile(0.5), Some(Duration::from_secs(10)));
    assert!(q.run_times("nope").await.unwrap().is_empty());
}

/// A settle that names one delivery twice (`Backend::settle` is public: a
/// caller's own loop can) settles it once, by its first entry in the
/// script's order (acks, reschedules, dead letters): once settled, the
/// job's token no longer matches, so the other entries fail the fence and
/// are not counted. Redis checked every fence before any write and applied
/// each: an ack and a retry left a job without a body behind.
pub async fn a_settle_naming_one_delivery_twice_settles_it_once(env: &Env) {
    let q = env.client.backend();
    q.create_queue("twice", QueueOptions::default())
        .await
        .unwrap();
    let dead = |id, token| DeadLetterEntry {
        id,
        token,
        error: "fatal".into(),
    };
    // an ack, again, and a retry: acked once, finished
    let id = Queues::send(&q, "twice", SendMessage::new("a"))
        .await
        .unwrap();
    let d = fetch_one(env, "twice", LONG).await;
    let mut s = retry(id, d.token, "boom");
    s.acks = vec![(id, d.token), (id, d.token)];
    let r = q.settle("twice", &s).await.unwrap();
    assert_eq!((r.acked, r.rescheduled, r.dead), (1, 0, 0));
    let stats = env.client.stats("twice").await.unwrap();
    assert_eq!((stats.processed, stats.retried), (1, 0));
    assert_eq!(
        q.job("twice", &id).await.unwrap().map(|j| j.state),
        Some(JobState::Finished)
    );
    // an ack and a dead letter: acked, no letter
    let id = Queues::send(&q, "twice", SendMessage::new("b"))
        .await
        .unwrap();
    let d = fetch_one(env, "twice", LONG).await;
    let s = Settle {
        acks: vec![(id, d.token)],
        dead: vec![dead(id, d.token)],
        ..Settle::default()
    };
    let r = q.settle("twice", &s).await.unwrap();
    assert_eq!((r.acked, r.dead), (1, 0));
    assert_eq!(env.client.stats("twice").await.unwrap().dead, 0);
    assert_eq!(q.counts("twice").await.unwrap().dead, 0);
    // a retry, then a dead letter of it: back in the queue, body and all
    let id = Queues::send(&q, "twice", SendMessage::new("c"))
        .await
        .unwrap();
    let d = fetch_one(env, "twice", LONG).await;
    let mut s = retry(id, d.token, "boom");
    s.dead = vec![dead(id, d.token), dead(id, d.token)];
    let r = q.settle("twice", &s).await.unwrap();
    assert_eq!((r.acked, r.rescheduled, r.dead), (0, 1, 0));
    let counts = q.counts("twice").await.unwrap();
    assert_eq!((counts.ready, counts.dead), (1, 0));
    let again = fetch_one(env, "twice", LONG).await;
    assert_eq!((again.id, &again.body[..]), (id, &b"c"[..]));
    assert_eq!(again.token.attempt(), 2);
}
