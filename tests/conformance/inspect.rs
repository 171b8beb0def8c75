//! Inspection and cancel: counts by state, peek, one job by id, paged listing,
//! cancel of waiting and running jobs, and their bad input.

use std::collections::HashSet;
use std::time::Duration;

use redjob::backend::{Backend, DeadLetterEntry, Reschedule, Settle};
use redjob::inspect::{Cancelled, Cursor, Inspect, JobInfo, JobState, StateCounts};
use redjob::queue::{OnDuplicate, QueueOptions, Queues, SendMessage, SendOutcome, Unique};
use redjob::{Error, Job, JobContext, JobError, JobId};
use serde::{Deserialize, Serialize};

use super::Env;
use super::worker::worker;
use crate::common::{Recorder, start_serving, wait_until};

const LONG: Duration = Duration::from_secs(60);

async fn send(env: &Env, queue: &str, msg: SendMessage) -> JobId {
    let sent = Backend::send(
        &env.client.backend(),
        queue,
        &[msg],
        &QueueOptions::default(),
    )
    .await
    .unwrap();
    sent[0].id
}

fn bodies(jobs: &[JobInfo]) -> Vec<String> {
    jobs.iter()
        .map(|j| String::from_utf8_lossy(&j.body).into_owned())
        .collect()
}

fn counts(ready: u64, scheduled: u64, in_flight: u64, dead: u64) -> StateCounts {
    StateCounts {
        ready,
        scheduled,
        in_flight,
        dead,
        blocked: 0,
    }
}

pub async fn counts_and_job_follow_a_job_through_every_state(env: &Env) {
    let q = env.client.backend();
    let a = send(env, "st", SendMessage::new("a")).await;
    let b = send(env, "st", SendMessage::new("b").delay(LONG)).await;
    let c = send(env, "st", SendMessage::new("c").priority(5)).await;
    assert_eq!(q.counts("st").await.unwrap(), counts(2, 1, 0, 0));
    let job = q.job("st", &b).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.attempts, job.priority),
        (JobState::Scheduled, 0, 0)
    );
    assert_eq!(
        (job.body.as_slice(), job.last_error.as_deref()),
        (&b"b"[..], None)
    );

    // leased: in flight, counting this delivery, due when its lease ends
    let got = q.fetch("st", 1, LONG).await.unwrap();
    let (d, now_ms) = (&got.jobs[0], got.now_us / 1000);
    assert_eq!(d.id, c);
    assert_eq!(q.counts("st").await.unwrap(), counts(1, 1, 1, 0));
    let job = q.job("st", &c).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.attempts, job.priority),
        (JobState::InFlight, 1, 5)
    );
    assert!(
        job.due_ms >= now_ms + 59_000 && job.due_ms <= now_ms + 61_000,
        "{job:?}"
    );

    // a retry waits with its error
    let retry = Reschedule {
        id: c,
        token: d.token,
        delay: LONG,
        deliveries: 1,
        release: false,
        error: Some("smtp timed out".into()),
    };
    let settle = Settle {
        reschedules: vec![retry],
        ..Settle::default()
    };
    assert_eq!(q.settle("st", &settle).await.unwrap().rescheduled, 1);
    assert_eq!(q.counts("st").await.unwrap(), counts(1, 2, 0, 0));
    let job = q.job("st", &c).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.attempts, job.priority),
        (JobState::Scheduled, 1, 5)
    );
    assert_eq!(job.last_error.as_deref(), Some("smtp timed out"));

    // dead: its error, deliveries and time of death
    let d = q.fetch("st", 1, LONG).await.unwrap().jobs.remove(0);
    assert_eq!(d.id, a);
    let settle = Settle {
        dead: vec![DeadLetterEntry {
            id: a,
            token: d.token,
            error: "fatal: bad address".into(),
        }],
        ..Settle::default()
    };
    q.settle("st", &settle).await.unwrap();
    assert_eq!(q.counts("st").await.unwrap(), counts(0, 2, 0, 1));
    let job = q.job("st", &a).await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Dead, 1));
    assert_eq!(job.last_error.as_deref(), Some("fatal: bad address"));
    assert_eq!(job.body, b"a");

    // a lease that runs out (its worker died) is ready again, due from its end
    // (a lease is scored at its end, where RSMQ clients see it again too)
    let e = send(env, "st", SendMessage::new("e")).await;
    let f = send(env, "st", SendMessage::new("f")).await;
    assert_eq!(
        q.fetch("st", 1, Duration::from_millis(300))
            .await
            .unwrap()
            .jobs[0]
            .id,
        e
    );
    assert_eq!(q.counts("st").await.unwrap(), counts(1, 2, 1, 1));
    let job = q.job("st", &e).await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::InFlight, 1));
    let running = q.list("st", JobState::InFlight, None, 10).await.unwrap();
    assert_eq!(running.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [e]);
    let scheduled = q.list("st", JobState::Scheduled, None, 10).await.unwrap();
    assert!(scheduled.jobs.iter().all(|j| j.id != e));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(q.counts("st").await.unwrap(), counts(2, 2, 0, 1));
    let job = q.job("st", &e).await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Ready, 1));
    let peeked: Vec<JobId> = q
        .peek("st", 2)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(peeked, [f, e]);
    let again = q.fetch("st", 2, LONG).await.unwrap();
    let got: Vec<_> = again
        .jobs
        .iter()
        .map(|j| (j.id, j.token.attempt()))
        .collect();
    assert_eq!(got, [(f, 1), (e, 2)]);
}

/// Counts follow a running job that is cancelled, deleted or made visible again
/// at once (on Redis, the lease leaves the counts of leases in flight).
pub async fn a_running_job_cancelled_deleted_or_made_visible_leaves_the_in_flight_count(env: &Env) {
    let q = env.client.backend();
    for body in ["a", "b", "c"] {
        send(env, "lc", SendMessage::new(body)).await;
    }
    let got = q.fetch("lc", 3, LONG).await.unwrap().jobs;
    assert_eq!(q.counts("lc").await.unwrap(), counts(0, 0, 3, 0));
    assert_eq!(
        q.cancel("lc", &got[0].id).await.unwrap(),
        Cancelled::Cancelling
    );
    assert_eq!(q.counts("lc").await.unwrap(), counts(0, 0, 2, 0));
    assert!(Queues::delete(&q, "lc", &got[1].id).await.unwrap());
    assert_eq!(q.counts("lc").await.unwrap(), counts(0, 0, 1, 0));
    assert!(
        Queues::change_visibility(&q, "lc", &got[2].id, Duration::from_secs(30))
            .await
            .unwrap()
    );
    assert_eq!(q.counts("lc").await.unwrap(), counts(0, 1, 0, 0));
    let job = q.job("lc", &got[2].id).await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Scheduled, 1));
}

pub async fn peek_shows_the_next_jobs_in_run_order_and_leases_none(env: &Env) {
    let q = env.client.backend();
    send(env, "pk", SendMessage::new("a0")).await;
    send(
        env,
        "pk",
        SendMessage::new("c-later").delay(Duration::from_secs(20)),
    )
    .await;
    send(env, "pk", SendMessage::new("b5").priority(5)).await;
    send(
        env,
        "pk",
        SendMessage::new("d-soon")
            .priority(-2)
            .delay(Duration::from_secs(10)),
    )
    .await;
    send(env, "pk", SendMessage::new("e0")).await;
    let all = q.peek("pk", 10).await.unwrap();
    assert_eq!(bodies(&all), ["b5", "a0", "e0", "d-soon", "c-later"]);
    let states: Vec<JobState> = all.iter().map(|j| j.state).collect();
    use JobState::{Ready, Scheduled};
    assert_eq!(states, [Ready, Ready, Ready, Scheduled, Scheduled]);
    assert_eq!(bodies(&q.peek("pk", 2).await.unwrap()), ["b5", "a0"]);
    assert!(q.peek("pk", 0).await.unwrap().is_empty());
    // nothing was leased: the fetch takes the same jobs
    assert_eq!(q.counts("pk").await.unwrap(), counts(3, 2, 0, 0));
    let got = q.fetch("pk", 10, LONG).await.unwrap();
    let fetched: Vec<JobId> = got.jobs.iter().map(|d| d.id).collect();
    let peeked: Vec<JobId> = all[..3].iter().map(|j| j.id).collect();
    assert_eq!(fetched, peeked);
    // leased jobs are not next: only the scheduled ones are
    assert_eq!(
        bodies(&q.peek("pk", 10).await.unwrap()),
        ["d-soon", "c-later"]
    );
}

/// Scheduled jobs due at one time are peeked highest priority first, a
/// retry's among them too: they went by the whole score, whose thousandths
/// count a retry's deliveries, so a priority -1 job came before a priority
/// 10 retry due the same ms.
pub async fn peeked_scheduled_jobs_of_one_ms_go_by_priority_retries_too(env: &Env) {
    let q = env.client.backend();
    q.create_queue("po", QueueOptions::default()).await.unwrap();
    let retry = send(env, "po", SendMessage::new("retry10").priority(10)).await;
    let d = q.fetch("po", 1, LONG).await.unwrap().jobs.remove(0);
    assert_eq!(d.id, retry);
    let later = Settle {
        reschedules: vec![Reschedule {
            id: retry,
            token: d.token,
            delay: Duration::from_secs(3600),
            deliveries: d.token.attempt(),
            release: false,
            error: Some("later".into()),
        }],
        ..Settle::default()
    };
    q.settle("po", &later).await.unwrap();
    let due = q.job("po", &retry).await.unwrap().unwrap().due_ms;
    send(
        env,
        "po",
        SendMessage::new("low").priority(-1).at_unix_ms(due),
    )
    .await;
    let all = q.peek("po", 10).await.unwrap();
    assert_eq!(all.iter().map(|j| j.due_ms).collect::<Vec<_>>(), [due, due]);
    assert_eq!(bodies(&all), ["retry10", "low"]);
}

/// Every page of one state, following the cursors; checks no page is over `n`.
async fn all_pages(q: &impl Inspect, queue: &str, state: JobState, n: usize) -> Vec<JobInfo> {
    let mut out = Vec::new();
    let mut after: Option<Cursor> = None;
    for _ in 0..100 {
        let page = q.list(queue, state, after.as_ref(), n).await.unwrap();
        assert!(page.jobs.len() <= n);
        out.extend(page.jobs);
        match page.next {
            Some(c) => after = Some(c),
            None => return out,
        }
    }
    panic!("more than 100 pages");
}

pub async fn list_pages_through_each_state_in_order_without_gaps_or_repeats(env: &Env) {
    let q = env.client.backend();
    // batches: many jobs share one score, so pages split ties
    let batch = |n: usize, p: i8, tag: &str| -> Vec<SendMessage> {
        (0..n)
            .map(|i| SendMessage::new(format!("{tag}{i:02}")).priority(p))
            .collect()
    };
    let opts = QueueOptions::default();
    let low = Backend::send(&q, "ls", &batch(13, 0, "low"), &opts)
        .await
        .unwrap();
    let high = Backend::send(&q, "ls", &batch(12, 3, "high"), &opts)
        .await
        .unwrap();
    let later: Vec<SendMessage> = (0..7)
        .map(|i| SendMessage::new(format!("later{i}")).delay(LONG + Duration::from_secs(i)))
        .collect();
    Backend::send(&q, "ls", &later, &opts).await.unwrap();

    let ready = all_pages(&q, "ls", JobState::Ready, 10).await;
    let want: Vec<JobId> = high.iter().chain(&low).map(|s| s.id).collect();
    let got: Vec<JobId> = ready.iter().map(|j| j.id).collect();
    assert_eq!(got, want, "by priority, then oldest first");
    assert!(ready.iter().all(|j| j.state == JobState::Ready));
    let scheduled = all_pages(&q, "ls", JobState::Scheduled, 3).await;
    assert_eq!(
        bodies(&scheduled),
        (0..7).map(|i| format!("later{i}")).collect::<Vec<_>>()
    );
    assert!(all_pages(&q, "ls", JobState::InFlight, 5).await.is_empty());

    // the job a cursor points at is deleted between pages: the next page goes on
    // right after it
    let first = q.list("ls", JobState::Ready, None, 5).await.unwrap();
    let cursor = first.next.unwrap();
    assert!(Queues::delete(&q, "ls", &first.jobs[4].id).await.unwrap());
    let second = q
        .list("ls", JobState::Ready, Some(&cursor), 5)
        .await
        .unwrap();
    assert_eq!(second.jobs[0].id, want[5]);
    // the cursor survives its text form
    let parsed: Cursor = cursor.to_string().parse().unwrap();
    let again = q
        .list("ls", JobState::Ready, Some(&parsed), 5)
        .await
        .unwrap();
    assert_eq!(again.jobs, second.jobs);

    // in flight and dead, paged the same way
    let leased = q.fetch("ls", 9, LONG).await.unwrap().jobs;
    let in_flight = all_pages(&q, "ls", JobState::InFlight, 4).await;
    let ids: HashSet<JobId> = in_flight.iter().map(|j| j.id).collect();
    assert_eq!(ids, leased.iter().map(|d| d.id).collect::<HashSet<_>>());
    let dead = Settle {
        dead: leased
            .iter()
            .map(|d| DeadLetterEntry {
                id: d.id,
                token: d.token,
                error: format!("no {}", d.id),
            })
            .collect(),
        ..Settle::default()
    };
    assert_eq!(q.settle("ls", &dead).await.unwrap().dead, 9);
    let dead = all_pages(&q, "ls", JobState::Dead, 4).await;
    assert_eq!(dead.len(), 9);
    assert!(
        dead.iter()
            .all(|j| j.last_error == Some(format!("no {}", j.id)))
    );
    let ids: HashSet<JobId> = dead.iter().map(|j| j.id).collect();
    assert_eq!(ids.len(), 9);
    assert_eq!(q.counts("ls").await.unwrap(), counts(15, 7, 0, 9));
}

/// A page of scheduled jobs among many leases (or of leases among many
/// scheduled jobs) reads at most its size + 1,000 rows, as list.lua does,
/// and ends early with a cursor to go on from.
pub async fn a_page_of_one_kind_among_many_of_the_other_ends_early_with_a_cursor(env: &Env) {
    let q = env.client.backend();
    let opts = QueueOptions::default();
    let now: Vec<SendMessage> = (0..1500)
        .map(|i| SendMessage::new(format!("r{i}")))
        .collect();
    Backend::send(&q, "lk", &now, &opts).await.unwrap();
    // all of them leased for a minute, then three jobs due after the leases
    let mut leased = 0;
    while leased < 1500 {
        leased += q.fetch("lk", 1000, LONG).await.unwrap().jobs.len();
    }
    let later: Vec<SendMessage> = (0..3)
        .map(|i| SendMessage::new(format!("later{i}")).delay(LONG * 2 + Duration::from_secs(i)))
        .collect();
    Backend::send(&q, "lk", &later, &opts).await.unwrap();
    let first = q.list("lk", JobState::Scheduled, None, 2).await.unwrap();
    assert!(
        first.jobs.is_empty() && first.next.is_some(),
        "it read 1,002 leases and stopped: {} jobs, next {:?}",
        first.jobs.len(),
        first.next
    );
    let scheduled = all_pages(&q, "lk", JobState::Scheduled, 2).await;
    assert_eq!(bodies(&scheduled), ["later0", "later1", "later2"]);
    assert_eq!(
        all_pages(&q, "lk", JobState::InFlight, 1000).await.len(),
        1500
    );
}

/// Waits on its cancellation token, then fails (a retry, were its outcome kept).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "inspect_waits", queue = "work", unique)]
struct WaitsForCancel {
    key: u64,
}

/// Runs that ended (returned, or were dropped when their token was cancelled).
#[derive(Default, Clone)]
struct CancelSeen(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl CancelSeen {
    fn ended(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Counts a run as ended when dropped.
struct Ended(CancelSeen);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Job for WaitsForCancel {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        let _ended = Ended(ctx.data::<CancelSeen>()?.clone());
        ctx.cancellation().cancelled().await;
        Err(JobError::retry("cancelled"))
    }
}

pub async fn cancel_removes_waiting_jobs_and_stops_running_ones_for_good(env: &Env) {
    let client = env.client.clone();
    let q = client.backend();
    // waiting: removed, its unique key free again
    let key = Unique::new("k").on_duplicate(OnDuplicate::Keep);
    let w = send(env, "cq", SendMessage::new("x").unique(key.clone())).await;
    assert_eq!(q.cancel("cq", &w).await.unwrap(), Cancelled::Removed);
    assert_eq!(q.cancel("cq", &w).await.unwrap(), Cancelled::NotFound);
    let gone = q.job("cq", &w).await.unwrap().unwrap();
    assert_eq!(
        gone.state,
        JobState::Finished,
        "in the history, as cancelled"
    );
    let sent = q
        .send_outcomes("cq", &[SendMessage::new("y").unique(key)])
        .await
        .unwrap();
    assert_eq!(sent[0].outcome, SendOutcome::Added);
    let later = send(env, "cq", SendMessage::new("z").delay(LONG)).await;
    assert_eq!(q.cancel("cq", &later).await.unwrap(), Cancelled::Removed);
    assert_eq!(q.counts("cq").await.unwrap(), counts(1, 0, 0, 0));

    // running: cancelled at the worker's next renewal, never retried
    let rec = Recorder::default();
    let seen = CancelSeen::default();
    let running = start_serving(
        worker(&client, &rec)
            .lease(Duration::from_secs(1))
            .data(seen.clone())
            .build()
            .unwrap(),
    )
    .await;
    let id = client.enqueue(&WaitsForCancel { key: 1 }).await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    assert_eq!(
        q.job("work", &id).await.unwrap().unwrap().state,
        JobState::InFlight
    );
    assert_eq!(q.cancel("work", &id).await.unwrap(), Cancelled::Cancelling);
    assert_eq!(seen.ended(), 0);
    assert!(
        wait_until(Duration::from_secs(5), || seen.ended() == 1).await,
        "the run's token was cancelled"
    );
    // its key is free: a new job with the same arguments runs
    let again = client.enqueue(&WaitsForCancel { key: 1 }).await.unwrap();
    assert_ne!(again, id);
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 2).await);
    assert_eq!(
        q.cancel("work", &again).await.unwrap(),
        Cancelled::Cancelling
    );
    assert!(wait_until(Duration::from_secs(5), || seen.ended() == 2).await);
    // two lease periods more: nothing retried, nothing recorded
    tokio::time::sleep(Duration::from_secs(2)).await;
    running.stop().await;
    assert_eq!(rec.len(), 2);
    let stats = client.stats("work").await.unwrap();
    assert_eq!((stats.processed, stats.failed, stats.dead), (0, 0, 0));
    assert_eq!(q.counts("work").await.unwrap(), counts(0, 0, 0, 0));
    let job = q.job("work", &id).await.unwrap().unwrap();
    assert_eq!(
        job.finished.map(|f| f.how),
        Some(redjob::inspect::Finish::Cancelled),
        "cancelled, not run again nor recorded as run"
    );
}

pub async fn finished_and_unknown_jobs_and_bad_input_are_clear(env: &Env) {
    let q = env.client.backend();
    let unknown: JobId = "0000000000zzzzzzzzzzzzzzzzzzzzzz".parse().unwrap();
    // no queue: an error, never an empty answer
    assert!(matches!(
        q.counts("none").await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(matches!(
        q.job("none", &unknown).await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(matches!(
        q.peek("none", 1).await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(matches!(
        q.list("none", JobState::Ready, None, 1).await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(matches!(
        q.cancel("none", &unknown).await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(matches!(
        q.counts("bad name").await,
        Err(Error::InvalidQueueName { .. })
    ));
    assert!(matches!(
        q.cancel("a:b", &unknown).await,
        Err(Error::InvalidQueueName { .. })
    ));
    // an unknown id: none, not found
    let acked = send(env, "fin", SendMessage::new("done")).await;
    assert!(q.job("fin", &unknown).await.unwrap().is_none());
    assert_eq!(
        q.cancel("fin", &unknown).await.unwrap(),
        Cancelled::NotFound
    );
    // a finished job: in the history, and cancelling it changes nothing
    let d = q.fetch("fin", 1, LONG).await.unwrap().jobs.remove(0);
    let ack = Settle {
        acks: vec![(acked, d.token)],
        ..Settle::default()
    };
    assert_eq!(q.settle("fin", &ack).await.unwrap().acked, 1);
    assert_eq!(q.cancel("fin", &acked).await.unwrap(), Cancelled::NotFound);
    let job = q.job("fin", &acked).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Finished);
    assert_eq!(env.client.stats("fin").await.unwrap().processed, 1);
    // page sizes are capped, a cursor of another queue or state is harmless
    for i in 0..3 {
        send(env, "fin", SendMessage::new(format!("m{i}"))).await;
    }
    let page = q
        .list("fin", JobState::Ready, None, usize::MAX)
        .await
        .unwrap();
    assert_eq!((page.jobs.len(), page.next), (3, None));
    let stray: Cursor = format!("10:9999999999999.999:{unknown}").parse().unwrap();
    let page = q
        .list("fin", JobState::Ready, Some(&stray), 10)
        .await
        .unwrap();
    assert_eq!(
        page.jobs.len(),
        3,
        "below every level: the levels below it from their start"
    );
    for bad in [
        "",
        "1:2",
        "x:1.000:0000000000zzzzzzzzzzzzzzzzzzzzzz",
        "1:1.5:abc",
    ] {
        assert!(
            matches!(bad.parse::<Cursor>(), Err(Error::InvalidValue { .. })),
            "{bad}"
        );
    }
    // a body that is no job envelope has no job name
    assert!(q.peek("fin", 1).await.unwrap()[0].job_name().is_none());
    // a dead-letter cursor's priority means nothing: any gives the same page
    let d = q.fetch("fin", 3, LONG).await.unwrap().jobs;
    let dead = Settle {
        dead: d
            .iter()
            .map(|d| DeadLetterEntry {
                id: d.id,
                token: d.token,
                error: "x".into(),
            })
            .collect(),
        ..Settle::default()
    };
    q.settle("fin", &dead).await.unwrap();
    let first = q.list("fin", JobState::Dead, None, 1).await.unwrap();
    let c = first.next.clone().unwrap().to_string();
    let moved: Cursor = format!("-3{}", &c[c.find(':').unwrap()..]).parse().unwrap();
    let a = q
        .list("fin", JobState::Dead, first.next.as_ref(), 5)
        .await
        .unwrap();
    let b = q
        .list("fin", JobState::Dead, Some(&moved), 5)
        .await
        .unwrap();
    assert_eq!((a.jobs.len(), &a.jobs), (2, &b.jobs));
}

pub async fn a_retry_without_a_message_keeps_the_last_error(env: &Env) {
    let q = env.client.backend();
    let id = send(env, "le", SendMessage::new("x")).await;
    for (error, delay) in [("timeout", Duration::ZERO), ("", LONG)] {
        let d = q.fetch("le", 1, LONG).await.unwrap().jobs.remove(0);
        let retry = Reschedule {
            id,
            token: d.token,
            delay,
            deliveries: d.token.attempt(),
            release: false,
            error: Some(error.into()),
        };
        let settle = Settle {
            reschedules: vec![retry],
            ..Settle::default()
        };
        assert_eq!(q.settle("le", &settle).await.unwrap().rescheduled, 1);
        // a retry's score carries its count: due in the next millisecond
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let job = q.job("le", &id).await.unwrap().unwrap();
    assert_eq!(
        (job.attempts, job.last_error.as_deref()),
        (2, Some("timeout"))
    );
}

/// Latency is how long the oldest ready job has waited, at any priority (the
/// job that runs next, at a higher one, may have waited less), and a lease that
/// ran out counts from its end.
pub async fn latency_is_the_wait_of_the_oldest_ready_job_at_any_priority(env: &Env) {
    let q = env.client.backend();
    assert!(matches!(
        q.latency("lat").await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(matches!(
        q.latency("bad name").await,
        Err(Error::InvalidQueueName { .. })
    ));
    send(
        env,
        "lat",
        SendMessage::new("later").delay(Duration::from_secs(60)),
    )
    .await;
    assert_eq!(q.latency("lat").await.unwrap(), None, "nothing is ready");
    send(env, "lat", SendMessage::new("low").priority(-3)).await;
    let low_sent = env.now().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    send(env, "lat", SendMessage::new("high").priority(7)).await;
    // read before the latency, which a loaded machine may read much later:
    // the high one's wait by then is at most the wait up to this read
    let now_ms = env
        .now()
        .await
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let waited = q.latency("lat").await.unwrap().expect("two are ready");
    assert!(
        (Duration::from_millis(400)..LONG).contains(&waited),
        "{waited:?}"
    );
    // the next to run is the high one, which had waited less
    let next = &q.peek("lat", 1).await.unwrap()[0];
    assert_eq!(bodies(std::slice::from_ref(next)), ["high"]);
    assert!(now_ms.saturating_sub(next.due_ms) + 300 < waited.as_millis() as u64);

    // leased: nothing is ready; once the leases run out, they count from their end
    let got = q
        .fetch("lat", 10, Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(got.jobs.len(), 2);
    assert_eq!(q.latency("lat").await.unwrap(), None, "both leased");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ran_out = q.latency("lat").await.unwrap().expect("leases ran out");
    // from the lease end, not from "low"'s due time 600 ms before it
    assert!(ran_out >= Duration::from_millis(250), "{ran_out:?}");
    let since_low = env.now().await.duration_since(low_sent).unwrap();
    assert!(
        ran_out + Duration::from_millis(500) <= since_low,
        "{ran_out:?} of {since_low:?}"
    );
}

/// A page of scheduled jobs that passes over exactly its budget of leased
/// rows (the page's size plus 1,000) and reaches the end of the queue there
/// is the last page: no cursor to an empty page after it.
pub async fn a_scheduled_page_that_reads_its_whole_budget_to_the_end_is_the_last(env: &Env) {
    let q = env.client.backend();
    q.create_queue("pb", QueueOptions::default()).await.unwrap();
    let msgs: Vec<SendMessage> = (0..1001)
        .map(|i| SendMessage::new(format!("m{i}")))
        .collect();
    Backend::send(&q, "pb", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let leased = q.fetch("pb", 1001, LONG).await.unwrap();
    assert_eq!(leased.jobs.len(), 1001);
    let page = q.list("pb", JobState::Scheduled, None, 1).await.unwrap();
    assert!(page.jobs.is_empty());
    let next = match &page.next {
        Some(c) => {
            let after = q.list("pb", JobState::Scheduled, Some(c), 1).await.unwrap();
            Some((after.jobs.len(), after.next.is_some()))
        }
        None => None,
    };
    assert_eq!(next, None, "a cursor to a page after the end");
}
