//! Results: what a job's handler returns is kept with its history entry and
//! read by id, typed; a job that did not succeed says how it ended.

use std::time::Duration;

use redjob::inspect::Inspect;
use redjob::ops::{Admin, History, QueueSettings};
use redjob::{Error, Job, JobContext, JobError, JobId, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{start_serving, wait_for};

const QUEUE: &str = "results";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub total: u64,
    pub names: Vec<String>,
}

/// Returns a report of its items; fails fatally for "bad", returns a result
/// too large with "huge".
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "results_tally",
    queue = "results",
    output = "Report",
    max_attempts = 1
)]
struct Tally {
    items: Vec<String>,
}

impl Job for Tally {
    async fn perform(&self, _: &JobContext) -> Result<Report, JobError> {
        if self.items.iter().any(|i| i == "bad") {
            return Err(JobError::fatal("a bad item"));
        }
        let mut names = self.items.clone();
        if self.items.iter().any(|i| i == "huge") {
            names.push("x".repeat(redjob::job::MAX_RESULT));
        }
        Ok(Report {
            total: self.items.len() as u64,
            names,
        })
    }
}

/// A job without a declared result.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "results_plain", queue = "results")]
struct Plain;

impl Job for Plain {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn tally(items: &[&str]) -> Tally {
    Tally {
        items: items.iter().map(|s| s.to_string()).collect(),
    }
}

/// Runs a worker until `ids` have all finished (succeeded or dead).
async fn run(env: &Env, ids: &[JobId]) {
    let w = Worker::builder(env.client.backend())
        .register::<Tally>()
        .register::<Plain>()
        .handle_signals(false)
        .build()
        .unwrap();
    let running = start_serving(w).await;
    let done = wait_for(Duration::from_secs(20), || async {
        let c = env.client.counts(QUEUE).await.unwrap();
        // finished: out of the queue (a job without a history leaves no trace)
        let mut left = 0;
        for id in ids {
            if let Some(j) = env.client.job(QUEUE, id).await.unwrap()
                && j.finished.is_none()
                && j.state != redjob::inspect::JobState::Dead
            {
                left += 1;
            }
        }
        left == 0 && c.in_flight == 0
    })
    .await;
    running.stop().await;
    assert!(done, "the jobs finished");
}

pub async fn a_jobs_result_is_read_typed_once_it_succeeded(env: &Env) {
    let c = &env.client;
    let ok = c.enqueue(&tally(&["a", "b"])).await.unwrap();
    let plain = c.enqueue(&Plain).await.unwrap();
    assert_eq!(
        c.result::<Tally>(&ok).await.unwrap(),
        None,
        "queued: none yet"
    );
    run(env, &[ok, plain]).await;
    let want = Report {
        total: 2,
        names: vec!["a".into(), "b".into()],
    };
    assert_eq!(c.result::<Tally>(&ok).await.unwrap(), Some(want));
    assert_eq!(c.result::<Plain>(&plain).await.unwrap(), Some(()));
    // the history entry keeps it as JSON
    let job = c.job(QUEUE, &ok).await.unwrap().unwrap();
    assert_eq!(
        job.result.as_deref(),
        Some(&br#"{"total":2,"names":["a","b"]}"#[..])
    );
    assert_eq!(c.job(QUEUE, &plain).await.unwrap().unwrap().result, None);
    // with its arguments
    assert!(
        String::from_utf8_lossy(&job.body).contains(r#"["a","b"]"#),
        "{job:?}"
    );
    // another type's job: a clear error
    let e = c.result::<Plain>(&ok).await.unwrap_err();
    assert!(
        matches!(&e, Error::InvalidValue { reason, .. } if reason.contains("results_tally")),
        "{e}"
    );
    // a job sent to another queue than its type's
    let opts = redjob::client::EnqueueOptions::new().queue("results_other");
    let other = c.enqueue_with(&tally(&["x"]), opts).await.unwrap();
    let w = Worker::builder(env.client.backend())
        .register::<Tally>()
        .queue("results_other")
        .handle_signals(false)
        .build()
        .unwrap();
    let running = start_serving(w).await;
    let got = c
        .wait_result_in::<Tally>("results_other", &other, Duration::from_secs(20))
        .await;
    running.stop().await;
    assert_eq!(got.unwrap().map(|r| r.total), Some(1));
    let got = c.result_in::<Tally>("results_other", &other).await.unwrap();
    assert_eq!(got.map(|r| r.total), Some(1));
    // no such job: a clear error
    let none: JobId = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
    let e = c.result::<Tally>(&none).await.unwrap_err();
    assert!(matches!(e, Error::InvalidValue { .. }), "{e}");
}

pub async fn a_job_that_did_not_succeed_says_how_it_ended(env: &Env) {
    let c = &env.client;
    let bad = c.enqueue(&tally(&["bad"])).await.unwrap();
    let huge = c.enqueue(&tally(&["huge"])).await.unwrap();
    run(env, &[bad, huge]).await;
    let e = c.result::<Tally>(&bad).await.unwrap_err();
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("dead") && error.contains("a bad item")),
        "{e}"
    );
    // the dead letter keeps its body
    let letter = c.job(QUEUE, &bad).await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&letter.body).contains(r#"["bad"]"#),
        "{letter:?}"
    );
    // a result over the limit dead-letters the job with the reason
    let e = c.result::<Tally>(&huge).await.unwrap_err();
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("result of")),
        "{e}"
    );
    let cancelled = c.enqueue(&tally(&["c"])).await.unwrap();
    c.cancel(QUEUE, &cancelled).await.unwrap();
    let e = c.result::<Tally>(&cancelled).await.unwrap_err();
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("cancelled")),
        "{e}"
    );
}

pub async fn without_a_history_no_result_is_kept(env: &Env) {
    let c = &env.client;
    redjob::queue::Queues::create_queue(&c.backend(), QUEUE, Default::default())
        .await
        .unwrap();
    c.set_settings(QUEUE, &QueueSettings::history(History::OFF))
        .await
        .unwrap();
    let id = c.enqueue(&tally(&["a"])).await.unwrap();
    run(env, &[id]).await;
    let e = c.result::<Tally>(&id).await.unwrap_err();
    assert!(matches!(e, Error::InvalidValue { .. }), "{e}");
}

pub async fn a_waiter_is_woken_when_its_job_finishes_however_it_ends(env: &Env) {
    use tokio::time::Instant;
    let c = &env.client;
    // succeeds: the waiter, there before the worker, is woken with its result
    let ok = c.enqueue(&tally(&["a"])).await.unwrap();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            let got = c.wait_result::<Tally>(&ok, Duration::from_secs(60)).await;
            (got, t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    run(env, &[ok]).await;
    let (got, took) = waiter.await.unwrap();
    assert_eq!(got.unwrap().map(|r| r.total), Some(1));
    assert!(
        took < Duration::from_secs(30),
        "woken, not timed out: {took:?}"
    );
    // finished already: at once
    let t = Instant::now();
    let again = c.wait_result::<Tally>(&ok, Duration::MAX).await;
    assert!(again.unwrap().is_some() && t.elapsed() < Duration::from_secs(30));
    // cancelled, deleted and dead-lettered while awaited: woken with how it ended
    for how in ["cancelled", "deleted", "dead"] {
        let id = c.enqueue(&tally(&["b"])).await.unwrap();
        let waiter = {
            let c = c.clone();
            tokio::spawn(async move {
                let t = Instant::now();
                let got = c.wait_result::<Tally>(&id, Duration::from_secs(60)).await;
                (got, t.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        match how {
            "cancelled" => _ = c.cancel(QUEUE, &id).await.unwrap(),
            "deleted" => assert!(
                redjob::queue::Queues::delete(&c.backend(), QUEUE, &id)
                    .await
                    .unwrap()
            ),
            _ => assert_eq!(env.kill_due(QUEUE, 1).await, [id]),
        }
        let (got, took) = waiter.await.unwrap();
        let e = got.unwrap_err();
        assert!(
            matches!(&e, Error::JobFailed { error, .. } if error.contains(how)),
            "{e}"
        );
        assert!(took < Duration::from_secs(30), "woken: {took:?}");
    }
    // never run: none after the timeout
    let idle = c.enqueue(&tally(&["c"])).await.unwrap();
    let t = Instant::now();
    let none = c
        .wait_result::<Tally>(&idle, Duration::from_millis(500))
        .await;
    assert_eq!(none.unwrap(), None);
    assert!(t.elapsed() >= Duration::from_millis(500));
}

/// A wait for a result in a queue no name can be fails at once with the
/// name's error (it was taken for Redis out of reach, and tried again every
/// half second until the wait's time was up: an hour here).
pub async fn a_wait_for_a_result_in_an_invalid_queue_fails_at_once(env: &Env) {
    let c = &env.client;
    let id = c
        .enqueue(&Tally {
            items: vec!["a".into()],
        })
        .await
        .unwrap();
    let wait = c.wait_result_in::<Tally>("no/such queue", &id, Duration::from_secs(3600));
    match tokio::time::timeout(Duration::from_secs(5), wait).await {
        Ok(Err(Error::InvalidQueueName { .. })) => {}
        Ok(other) => panic!("{other:?}"),
        Err(_) => panic!("still waiting after 5 s"),
    }
}

/// A result is kept with its history entry, so no longer than the history's
/// count: with a count of 40, the 41st and 42nd jobs to finish leave the
/// first two's results unread, on both backends. Redis's settles trimmed by
/// count only once it was over by a twentieth (one step in many), so the
/// first two (two entries past the count) were still read by id until the
/// next trim, where memory read none.
pub async fn a_result_is_not_read_past_the_historys_count(env: &Env) {
    use redjob::backend::{Backend, Settle};
    use redjob::queue::{Queues, SendMessage};
    const KEEP: u64 = 40;
    let c = &env.client;
    let q = c.backend();
    q.create_queue(QUEUE, Default::default()).await.unwrap();
    let h = History {
        max_count: Some(KEEP),
        ..History::default()
    };
    c.set_settings(QUEUE, &QueueSettings::history(h))
        .await
        .unwrap();
    let body = r#"{"type":"results_tally","args":{"items":["a"]}}"#;
    let mut ids = Vec::new();
    for _ in 0..KEEP + 2 {
        ids.push(
            Queues::send(&q, QUEUE, SendMessage::new(body))
                .await
                .unwrap(),
        );
    }
    let report = br#"{"total":1,"names":["a"]}"#.to_vec();
    // the first alone (on Redis that settle trims by age too, and so by
    // count exactly), the others in one settle within the next second
    for n in [1, KEEP as usize + 1] {
        let f = q.fetch(QUEUE, n, Duration::from_secs(60)).await.unwrap();
        assert_eq!(f.jobs.len(), n);
        let s = Settle {
            acks: f.jobs.iter().map(|d| (d.id, d.token)).collect(),
            results: f.jobs.iter().map(|d| (d.id, report.clone())).collect(),
            history: h,
            ..Settle::default()
        };
        assert_eq!(q.settle(QUEUE, &s).await.unwrap().acked as usize, n);
    }
    // read: the newest, at most the count (a trim goes down to a twentieth
    // under it in one step)
    let mut read = Vec::new();
    for id in &ids {
        match c.result::<Tally>(id).await {
            Ok(r) => read.push(r.map(|r| r.total) == Some(1)),
            Err(Error::InvalidValue { .. }) => read.push(false),
            Err(e) => panic!("{e}"),
        }
    }
    let kept = read.iter().filter(|r| **r).count() as u64;
    assert!(
        !read[0] && !read[1] && (KEEP - KEEP / 20..=KEEP).contains(&kept),
        "past the history's count of {KEEP}, read: {read:?}"
    );
    assert!(read.ends_with(&vec![true; kept as usize]), "{read:?}");
    // the history lists the same ones
    let page = c
        .list(QUEUE, redjob::inspect::JobState::Finished, None, 100)
        .await
        .unwrap();
    assert_eq!(page.jobs.len() as u64, kept);
}
