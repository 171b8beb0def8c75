//! Operations: pause and resume, dead letters paged either way and filtered,
//! requeued (at once or at a rate), deleted and purged, their retention, a
//! scheduled job run now, and the bad input of each.

use std::time::Duration;

use redjob::backend::{Backend, DeadLetterEntry, Reschedule, Settle};
use redjob::inspect::{Cursor, Inspect, JobInfo, JobState};
use redjob::ops::{Admin, DeadOrder, DeadQuery, Retention, Spread};
use redjob::queue::{QueueOptions, SendMessage, SendOutcome, Unique};
use redjob::{Error, Job, JobContext, JobError, JobId, Worker};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::Env;
use crate::common::{Recorder, start_serving, wait_for, wait_until};

const LONG: Duration = Duration::from_secs(60);

/// The body of dead letter `i` of type `ty`.
fn body(ty: &str, i: usize) -> String {
    format!(r#"{{"type":"{ty}","args":{{"i":{i}}}}}"#)
}

/// Sends one job per `(type, error)` to `queue` at `priority`, leases them all
/// and dead-letters each with its error under `retention`, in one settle call.
/// Returns their ids in send order.
pub(super) async fn kill(
    env: &Env,
    queue: &str,
    rows: &[(&str, &str)],
    priority: i8,
    retention: Retention,
) -> Vec<JobId> {
    let q = env.client.backend();
    let msgs: Vec<SendMessage> = rows
        .iter()
        .enumerate()
        .map(|(i, (ty, _))| SendMessage::new(body(ty, i)).priority(priority))
        .collect();
    let sent = q
        .send(queue, &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let ids: Vec<JobId> = sent.iter().map(|s| s.id).collect();
    let mut leased = Vec::new();
    while leased.len() < ids.len() {
        let got = q.fetch(queue, 1000, LONG).await.unwrap();
        assert!(!got.jobs.is_empty(), "every job due");
        leased.extend(got.jobs);
    }
    let dead = leased
        .iter()
        .map(|d| DeadLetterEntry {
            id: d.id,
            token: d.token,
            error: rows[ids.iter().position(|i| *i == d.id).unwrap()].1.into(),
        })
        .collect();
    let settle = Settle {
        dead,
        retention,
        ..Settle::default()
    };
    assert_eq!(
        q.settle(queue, &settle).await.unwrap().dead,
        ids.len() as u64
    );
    ids
}

/// Every dead letter of `queue` matching `query`, `n` a page.
async fn all_pages(env: &Env, queue: &str, query: &DeadQuery, n: usize) -> Vec<JobInfo> {
    let q = env.client.backend();
    let (mut out, mut after): (Vec<JobInfo>, Option<Cursor>) = (Vec::new(), None);
    loop {
        let page = q
            .dead_matching(queue, query, after.as_ref(), n)
            .await
            .unwrap();
        assert!(page.jobs.len() <= n);
        out.extend(page.jobs);
        match page.next {
            Some(c) => after = Some(c),
            None => return out,
        }
    }
}

fn ids(jobs: &[JobInfo]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

pub async fn pause_holds_fetches_until_resume_and_sends_still_go_in(env: &Env) {
    let q = env.client.backend();
    let opts = QueueOptions::default();
    q.send("pz", &[SendMessage::new("a")], &opts).await.unwrap();
    assert!(!q.is_paused("pz").await.unwrap());
    q.pause("pz").await.unwrap();
    q.pause("pz").await.unwrap();
    assert!(q.is_paused("pz").await.unwrap());
    let got = q.fetch("pz", 10, LONG).await.unwrap();
    assert!(got.paused && got.jobs.is_empty(), "{got:?}");
    q.send("pz", &[SendMessage::new("b")], &opts).await.unwrap();
    assert_eq!(q.counts("pz").await.unwrap().ready, 2);

    q.resume("pz").await.unwrap();
    q.resume("pz").await.unwrap();
    assert!(!q.is_paused("pz").await.unwrap());
    let got = q.fetch("pz", 10, LONG).await.unwrap();
    assert_eq!((got.jobs.len(), got.paused), (2, false));

    for r in [
        q.pause("nope").await,
        q.resume("nope").await,
        q.is_paused("nope").await.map(drop),
    ] {
        assert!(matches!(r, Err(Error::QueueNotFound { .. })), "{r:?}");
    }
    let r = q.pause("bad name").await;
    assert!(matches!(r, Err(Error::InvalidQueueName { .. })), "{r:?}");
}

/// Records its run.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "ops_tick", queue = "ops")]
struct Tick {
    key: u64,
}

impl Job for Tick {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        Ok(())
    }
}

/// Dies at once.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "ops_doomed", queue = "ops")]
struct Doomed {
    key: u64,
}

impl Job for Doomed {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Err(JobError::fatal(format!("account {} closed", self.key)))
    }
}

/// A worker on "ops" recording its runs in `rec`, polling only every minute
/// (so that it starts a job early only when woken).
async fn serve_ticks(env: &Env, rec: &Recorder) -> crate::common::Running {
    let w = Worker::builder(env.client.backend())
        .queue("ops")
        .handle_signals(false)
        .data(rec.clone())
        .poll_interval(LONG)
        .build()
        .unwrap();
    start_serving(w).await
}

pub async fn a_paused_worker_runs_nothing_and_a_resume_wakes_it_at_once(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    client.enqueue(&Tick { key: 1 }).await.unwrap();
    let w = serve_ticks(env, &rec).await;
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);

    client.pause("ops").await.unwrap();
    client.enqueue(&Tick { key: 2 }).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rec.len(), 1, "a paused queue runs nothing");
    assert_eq!(client.counts("ops").await.unwrap().ready, 1);

    // the resume wakes the worker: well before its 5 s check of a paused queue
    let resumed = Instant::now();
    client.resume("ops").await.unwrap();
    assert!(wait_until(Duration::from_secs(10), || rec.len() == 2).await);
    let took = resumed.elapsed();
    assert!(took < Duration::from_secs(2), "resumed after {took:?}");
    w.stop().await;
}

pub async fn dead_letters_page_oldest_or_newest_first_and_filter(env: &Env) {
    let q = env.client.backend();
    let rows: Vec<(&str, &str)> = (0..10)
        .map(|i| {
            let ty = ["A", "B", "C"][i % 3];
            (
                ty,
                if i % 2 == 0 {
                    "smtp timeout"
                } else {
                    "refused"
                },
            )
        })
        .collect();
    let sent = kill(env, "dl", &rows, 3, Retention::default()).await;

    let all = DeadQuery::default();
    let oldest = all_pages(env, "dl", &all, 3).await;
    // one settle call: one time of death, ties in id order (send order)
    assert_eq!(ids(&oldest), sent);
    let newest = all_pages(env, "dl", &all.clone().newest_first(), 3).await;
    let mut rev = sent.clone();
    rev.reverse();
    assert_eq!(ids(&newest), rev);
    let job = &oldest[4];
    assert_eq!(
        (job.state, job.priority, job.attempts),
        (JobState::Dead, 3, 1)
    );
    assert_eq!(job.last_error.as_deref(), Some("smtp timeout"));
    assert_eq!(job.job_name().as_deref(), Some("B"));
    let mut looked = q.job("dl", &sent[4]).await.unwrap().unwrap();
    assert_eq!(looked.runs.len(), 1, "a lookup carries the attempt records");
    looked.runs.clear();
    assert_eq!(&looked, job);
    // Inspect's listing of dead jobs is the oldest-first page
    let listed = q.list("dl", JobState::Dead, None, 100).await.unwrap();
    assert_eq!(listed.jobs, oldest);

    let a = DeadQuery::default().job_type("A");
    let got = all_pages(env, "dl", &a, 2).await;
    assert_eq!(ids(&got), [0, 3, 6, 9].map(|i| sent[i]));
    let a_timeouts = a.clone().error_contains("timeout").newest_first();
    let got = all_pages(env, "dl", &a_timeouts, 1).await;
    assert_eq!(ids(&got), [sent[6], sent[0]]);
    let none = DeadQuery::default().job_type("Z");
    let page = q.dead_matching("dl", &none, None, 10).await.unwrap();
    assert!(page.jobs.is_empty() && page.next.is_none());

    // n = 0: an empty page without a cursor; large n is capped
    let page = q
        .dead_page("dl", DeadOrder::OldestFirst, None, 0)
        .await
        .unwrap();
    assert!(page.jobs.is_empty() && page.next.is_none());
    let page = q
        .dead_page("dl", DeadOrder::NewestFirst, None, usize::MAX)
        .await
        .unwrap();
    assert_eq!((page.jobs.len(), page.next), (10, None));
}

pub async fn requeue_puts_a_dead_letter_back_fresh_at_its_priority(env: &Env) {
    let q = env.client.backend();
    let id = kill(env, "rq", &[("A", "boom")], 5, Retention::default()).await[0];
    let stranger: JobId = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
    assert_eq!(
        q.requeue_dead("rq", &[id, id, stranger], Spread::NOW)
            .await
            .unwrap(),
        1
    );
    let c = q.counts("rq").await.unwrap();
    assert_eq!((c.ready, c.dead), (1, 0));
    let job = q.job("rq", &id).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.priority, job.attempts, job.last_error),
        (JobState::Ready, 5, 0, None)
    );
    assert_eq!(job.body, body("A", 0).into_bytes());
    assert_eq!(q.requeue_dead("rq", &[id], Spread::NOW).await.unwrap(), 0);

    let got = q.fetch("rq", 10, LONG).await.unwrap();
    assert_eq!(got.jobs.len(), 1);
    let d = &got.jobs[0];
    assert_eq!((d.id, d.token.priority(), d.token.attempt()), (id, 5, 1));
}

pub async fn a_requeue_at_a_rate_spreads_the_jobs_due_times(env: &Env) {
    let q = env.client.backend();
    let rows = vec![("A", "e"); 10];
    kill(env, "rate", &rows, 0, Retention::default()).await;
    let n = q
        .requeue_dead_matching("rate", &DeadQuery::default(), Some(1))
        .await
        .unwrap();
    assert_eq!(n, 10);
    let c = q.counts("rate").await.unwrap();
    assert_eq!((c.ready, c.scheduled, c.dead), (1, 9, 0));
    let page = q.list("rate", JobState::Scheduled, None, 20).await.unwrap();
    let due: Vec<u64> = page.jobs.iter().map(|j| j.due_ms).collect();
    assert!(due.windows(2).all(|w| w[1] - w[0] == 1000), "{due:?}");
}

pub async fn a_requeue_spread_past_the_longest_delay_is_due_at_most_that_far(env: &Env) {
    // a step between two past what a u64 of µs holds (it wrapped to 448 ms
    // on Redis), and Duration::MAX: the letters after the first are due
    // MAX_DELAY from now, as a delay that long would be
    let q = env.client.backend();
    for (i, every) in [Duration::from_secs(18_446_744_073_710), Duration::MAX]
        .into_iter()
        .enumerate()
    {
        let queue = format!("far{i}");
        let ids = kill(env, &queue, &[("A", "e"); 3], 0, Retention::default()).await;
        let spread = Spread {
            first: Duration::ZERO,
            every,
        };
        assert_eq!(q.requeue_dead(&queue, &ids, spread).await.unwrap(), 3);
        let first = q.job(&queue, &ids[0]).await.unwrap().unwrap();
        assert_eq!(first.state, JobState::Ready, "{every:?}");
        let most = redjob::worker::MAX_DELAY.as_millis() as u64;
        for id in &ids[1..] {
            let j = q.job(&queue, id).await.unwrap().unwrap();
            assert_eq!(j.state, JobState::Scheduled, "{every:?}");
            let ahead = j.due_ms - first.due_ms;
            assert!(
                ahead.abs_diff(most) < 5_000,
                "{every:?}: due {ahead} ms after the first, not {most}"
            );
        }
    }
}

pub async fn a_filter_reads_a_bounded_run_of_dead_letters_a_call(env: &Env) {
    // more letters than one call reads, the only match behind them: the
    // first pages are empty with a `next`, and paging on finds it
    let q = env.client.backend();
    let n = redjob::ops::MAX_SCAN + 500;
    let rows = vec![("A", "e"); n];
    kill(env, "scan", &rows, 0, Retention::UNBOUNDED).await;
    let z = kill(env, "scan", &[("Z", "e")], 0, Retention::UNBOUNDED).await[0];
    let only_z = DeadQuery::default().job_type("Z");
    let first = q.dead_matching("scan", &only_z, None, 10).await.unwrap();
    assert!(first.jobs.is_empty(), "{:?}", ids(&first.jobs));
    assert!(first.next.is_some(), "a page of none, with more to read");
    assert_eq!(ids(&all_pages(env, "scan", &only_z, 10).await), [z]);
    // newest first, it is the first letter read
    let newest = q
        .dead_matching("scan", &only_z.newest_first(), None, 10)
        .await
        .unwrap();
    assert_eq!(ids(&newest.jobs), [z]);
}

pub async fn requeue_and_delete_by_filter_page_past_their_own_changes(env: &Env) {
    let q = env.client.backend();
    // more than a page (1000) of each
    let rows: Vec<(&str, &str)> = (0..2500)
        .map(|i| match i % 4 {
            0 | 2 => ("A", "timeout"),
            1 => ("B", "refused"),
            _ => ("B", "reset"),
        })
        .collect();
    kill(env, "many", &rows, 0, Retention::UNBOUNDED).await;
    let a = DeadQuery::default().job_type("A");
    assert_eq!(
        q.requeue_dead_matching("many", &a, None).await.unwrap(),
        1250
    );
    let c = q.counts("many").await.unwrap();
    assert_eq!((c.ready, c.dead), (1250, 1250));
    let left = all_pages(env, "many", &DeadQuery::default(), 1000).await;
    assert!(left.iter().all(|j| j.job_name().as_deref() == Some("B")));

    let refused = DeadQuery::default()
        .error_contains("refused")
        .newest_first();
    let page = q.dead_matching("many", &refused, None, 3).await.unwrap();
    assert_eq!(q.delete_dead("many", &ids(&page.jobs)).await.unwrap(), 3);
    assert_eq!(q.delete_dead("many", &ids(&page.jobs)).await.unwrap(), 0);
    assert_eq!(q.delete_dead_matching("many", &refused).await.unwrap(), 622);
    let left = all_pages(env, "many", &DeadQuery::default(), 1000).await;
    assert!(
        left.iter()
            .all(|j| j.last_error.as_deref() == Some("reset"))
    );

    assert_eq!(q.purge_dead("many").await.unwrap(), 625);
    assert_eq!(q.purge_dead("many").await.unwrap(), 0);
    let c = q.counts("many").await.unwrap();
    assert_eq!(
        (c.ready, c.dead),
        (1250, 0),
        "the queue itself is untouched"
    );
}

pub async fn retention_caps_dead_letters_by_count_and_age(env: &Env) {
    let q = env.client.backend();
    let five = Retention {
        max_count: Some(5),
        max_age: None,
    };
    let sent = kill(env, "ret", &vec![("A", "e"); 8], 0, five).await;
    let kept = all_pages(env, "ret", &DeadQuery::default(), 100).await;
    assert_eq!(ids(&kept), sent[3..], "the newest five stay");

    let young = Retention {
        max_count: None,
        max_age: Some(Duration::from_millis(300)),
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let last = kill(env, "ret", &[("A", "e")], 0, young).await;
    let kept = all_pages(env, "ret", &DeadQuery::default(), 100).await;
    assert_eq!(ids(&kept), last, "older letters are gone");

    // a lowered limit is reached over the next calls, 1000 beyond their own a call
    kill(env, "ret", &vec![("A", "e"); 1500], 0, Retention::UNBOUNDED).await;
    let ten = Retention {
        max_count: Some(10),
        max_age: None,
    };
    kill(env, "ret", &[("A", "e")], 0, ten).await;
    assert_eq!(q.counts("ret").await.unwrap().dead, 1502 - 1001);
    kill(env, "ret", &[("A", "e")], 0, ten).await;
    assert_eq!(q.counts("ret").await.unwrap().dead, 10);
}

pub async fn a_worker_keeps_its_dead_letters_within_its_retention(env: &Env) {
    let client = env.client.clone();
    for key in 0..6 {
        client.enqueue(&Doomed { key }).await.unwrap();
    }
    let w = Worker::builder(client.backend())
        .queue("ops")
        .handle_signals(false)
        .dead_letter_retention(Retention {
            max_count: Some(4),
            max_age: None,
        })
        .build()
        .unwrap();
    let w = start_serving(w).await;
    assert!(
        wait_for(Duration::from_secs(10), || async {
            let c = client.counts("ops").await.unwrap();
            c.ready + c.in_flight == 0
        })
        .await
    );
    w.stop().await;
    assert_eq!(client.counts("ops").await.unwrap().dead, 4);
    assert_eq!(client.stats("ops").await.unwrap().dead, 6);
    let err = Worker::builder(client.backend())
        .queue("ops")
        .dead_letter_retention(Retention {
            max_count: Some(0),
            max_age: None,
        })
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("dead_letter_retention"), "{err}");
}

pub async fn dead_letter_operations_on_a_missing_queue_or_bad_name_are_clear(env: &Env) {
    let q = env.client.backend();
    let all = DeadQuery::default();
    for queue in ["nope", "bad name"] {
        let results = [
            q.dead_page(queue, DeadOrder::OldestFirst, None, 5)
                .await
                .map(drop),
            q.dead_matching(queue, &all, None, 5).await.map(drop),
            q.requeue_dead(queue, &[], Spread::NOW).await.map(drop),
            q.requeue_dead_matching(queue, &all, Some(5))
                .await
                .map(drop),
            q.delete_dead(queue, &[]).await.map(drop),
            q.delete_dead_matching(queue, &all).await.map(drop),
            q.purge_dead(queue).await.map(drop),
        ];
        for r in results {
            match queue {
                "nope" => assert!(matches!(r, Err(Error::QueueNotFound { .. })), "{r:?}"),
                _ => assert!(matches!(r, Err(Error::InvalidQueueName { .. })), "{r:?}"),
            }
        }
    }
}

pub async fn purge_deletes_every_job_but_keeps_dead_letters_and_the_queue(env: &Env) {
    let q = env.client.backend();
    kill(env, "pg", &[("A", "e")], 0, Retention::default()).await;
    let opts = QueueOptions::default();
    let unique = || SendMessage::new("u").unique(Unique::new("k"));
    let msgs = [
        SendMessage::new("ready"),
        SendMessage::new("later").delay(LONG),
        SendMessage::new("high").priority(7),
        unique(),
    ];
    q.send("pg", &msgs, &opts).await.unwrap();
    let leased = q.fetch("pg", 1, LONG).await.unwrap().jobs;
    assert_eq!(leased.len(), 1);
    assert_eq!(q.purge_queue("pg").await.unwrap(), 4);
    let c = q.counts("pg").await.unwrap();
    assert_eq!((c.ready, c.scheduled, c.in_flight, c.dead), (0, 0, 0, 1));
    // the leased job's outcome finds it gone; its unique key is free again
    let ack = Settle {
        acks: vec![(leased[0].id, leased[0].token)],
        ..Settle::default()
    };
    assert_eq!(q.settle("pg", &ack).await.unwrap().gone, [leased[0].id]);
    let sent = q.send("pg", &[unique()], &opts).await.unwrap();
    assert_eq!(sent[0].outcome, SendOutcome::Added);
    assert_eq!(q.purge_queue("pg").await.unwrap(), 1);
    assert_eq!(q.purge_queue("pg").await.unwrap(), 0);
    let attrs = redjob::queue::Queues::attributes(env.client.queues(), "pg").await;
    assert!(attrs.is_ok(), "{attrs:?}");
    let r = q.purge_queue("nope").await;
    assert!(matches!(r, Err(Error::QueueNotFound { .. })), "{r:?}");
}

pub async fn run_now_makes_a_scheduled_job_due_keeping_its_attempts_and_wakes_a_worker(env: &Env) {
    let q = env.client.backend();
    let later = SendMessage::new(body("ops_later", 0))
        .delay(LONG)
        .priority(3);
    let sent = q.send("rn", &[later], &QueueOptions::default()).await;
    let id = sent.unwrap()[0].id;
    assert_eq!(q.counts("rn").await.unwrap().scheduled, 1);
    assert_eq!(
        q.run_now("rn", &id).await.unwrap(),
        Some(JobState::Scheduled)
    );
    assert_eq!(q.run_now("rn", &id).await.unwrap(), Some(JobState::Ready));
    // leased at its priority, first attempt; running jobs are left to their lease
    let got = q.fetch("rn", 10, LONG).await.unwrap().jobs;
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].token.attempt(), got[0].token.priority()), (1, 3));
    assert_eq!(
        q.run_now("rn", &id).await.unwrap(),
        Some(JobState::InFlight)
    );
    // retried an hour from now: run now keeps the delivery counted
    let retry = Reschedule {
        id,
        token: got[0].token,
        delay: LONG,
        deliveries: 1,
        release: false,
        error: Some("smtp down".into()),
    };
    let settle = Settle {
        reschedules: vec![retry],
        ..Settle::default()
    };
    assert_eq!(q.settle("rn", &settle).await.unwrap().rescheduled, 1);
    assert_eq!(q.counts("rn").await.unwrap().scheduled, 1);
    assert_eq!(
        q.run_now("rn", &id).await.unwrap(),
        Some(JobState::Scheduled)
    );
    let got = q.fetch("rn", 10, LONG).await.unwrap().jobs;
    assert_eq!((got[0].id, got[0].token.attempt()), (id, 2));
    // gone, missing queue, bad name
    q.cancel("rn", &id).await.unwrap();
    assert_eq!(q.run_now("rn", &id).await.unwrap(), None);
    assert!(matches!(
        q.run_now("nope", &id).await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(q.run_now("bad name!", &id).await.is_err());
    // a message an RSMQ-style receive hid is its receiver's until its timeout
    let sent = q
        .send("rn", &[SendMessage::new("raw")], &QueueOptions::default())
        .await;
    let raw = sent.unwrap()[0].id;
    let got = redjob::queue::Queues::receive(&q, "rn", Some(LONG))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.id, raw);
    assert_eq!(
        q.run_now("rn", &raw).await.unwrap(),
        Some(JobState::InFlight)
    );
    let again = redjob::queue::Queues::receive(&q, "rn", None)
        .await
        .unwrap();
    assert!(again.is_none(), "still hidden");

    // a worker asleep until the job's time is woken at once
    let rec = Recorder::default();
    let w = serve_ticks(env, &rec).await;
    let id = env.client.enqueue_in(&Tick { key: 7 }, LONG).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rec.len(), 0);
    let asked = Instant::now();
    assert_eq!(
        env.client.run_now("ops", &id).await.unwrap(),
        Some(JobState::Scheduled)
    );
    assert!(wait_until(Duration::from_secs(10), || rec.len() == 1).await);
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    w.stop().await;
}
