//! Batches: jobs counted as they finish, each callback enqueued once with the
//! batch's status, however many workers finish the last jobs together; a
//! finish a dead worker left uncounted is counted by a later fetch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redjob::backend::Backend;
use redjob::inspect::Inspect;
use redjob::ops::{BatchId, BatchStatus};
use redjob::{Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{start_serving, wait_for};

/// What the jobs and callbacks saw: the batch each member job named, and
/// each callback's runs with the status it carried.
#[derive(Default)]
struct Seen {
    members: Mutex<Vec<Option<BatchId>>>,
    callbacks: Mutex<Vec<(String, BatchStatus)>>,
}

/// Fails fatally (dies) when `die`; fails once then succeeds when `flaky`.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "batches_work",
    queue = "batches_a",
    max_attempts = 3,
    backoff = "10ms"
)]
struct Work {
    n: u32,
    die: bool,
    flaky: bool,
}

impl Job for Work {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Seen>()?
            .members
            .lock()
            .unwrap()
            .push(ctx.batch());
        if self.die {
            return Err(JobError::fatal("this one dies"));
        }
        if self.flaky && ctx.attempt() == 1 {
            return Err(JobError::retry(std::io::Error::other(
                "first attempt fails",
            )));
        }
        Ok(())
    }
}

/// The same on another queue (another master on the Cluster).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "batches_other", queue = "batches_b")]
struct Other {
    n: u32,
}

impl Job for Other {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Seen>()?
            .members
            .lock()
            .unwrap()
            .push(ctx.batch());
        Ok(())
    }
}

/// A callback: records its kind and the status it carries.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "batches_done", queue = "batches_cb")]
struct Done {
    kind: String,
}

impl Job for Done {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let status = ctx
            .batch_status()
            .cloned()
            .expect("a callback carries its batch's status");
        ctx.data::<Seen>()?
            .callbacks
            .lock()
            .unwrap()
            .push((self.kind.clone(), status));
        Ok(())
    }
}

fn cb(kind: &str) -> Done {
    Done { kind: kind.into() }
}

fn worker(env: &Env, seen: &Arc<Seen>) -> Worker {
    Worker::builder(env.client.backend())
        .register::<Work>()
        .register::<Other>()
        .register::<Done>()
        .data(seen.clone())
        .handle_signals(false)
        .build()
        .unwrap()
}

/// Callback runs by kind, for one batch.
fn runs(seen: &Seen, id: &BatchId) -> HashMap<String, usize> {
    let mut by = HashMap::new();
    for (kind, s) in seen.callbacks.lock().unwrap().iter() {
        if s.id == id.as_str() {
            *by.entry(kind.clone()).or_default() += 1;
        }
    }
    by
}

async fn completed(env: &Env, id: &BatchId) -> bool {
    wait_for(Duration::from_secs(30), || async {
        env.client
            .batch_status(id)
            .await
            .unwrap()
            .is_some_and(|s| s.completed_ms.is_some())
    })
    .await
}

pub async fn a_batch_counts_its_jobs_and_enqueues_each_callback_once_with_its_status(env: &Env) {
    let seen = Arc::new(Seen::default());
    let work: Vec<Work> = (0..30)
        .map(|n| Work {
            n,
            die: n % 10 == 3,
            flaky: n % 10 == 5,
        })
        .collect();
    let failing = env
        .client
        .batch()
        .description("thirty, three die")
        .on_complete(&cb("complete"))
        .on_success(&cb("success"))
        .on_death(&cb("death"))
        .jobs(&work)
        .jobs(&(0..10).map(|n| Other { n }).collect::<Vec<_>>())
        .enqueue()
        .await
        .unwrap();
    let fine = env
        .client
        .batch()
        .on_complete(&cb("complete"))
        .on_success(&cb("success"))
        .on_death(&cb("death"))
        .jobs(&(0..5).map(|n| Other { n }).collect::<Vec<_>>())
        .enqueue()
        .await
        .unwrap();
    let before = env.client.batch_status(&failing).await.unwrap().unwrap();
    assert_eq!(
        (before.total, before.pending(), before.sealed),
        (40, 40, true)
    );
    assert_eq!(before.description.as_deref(), Some("thirty, three die"));
    assert!(before.completed_ms.is_none());

    let running = start_serving(worker(env, &seen)).await;
    assert!(completed(env, &failing).await, "the batch completes");
    assert!(completed(env, &fine).await, "the other batch completes");
    // every callback is enqueued by now; they run, then nothing more comes
    assert!(
        wait_for(Duration::from_secs(20), || async {
            seen.callbacks.lock().unwrap().len() >= 4
        })
        .await,
        "four callbacks ran"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;

    let s = env.client.batch_status(&failing).await.unwrap().unwrap();
    // a job retried once then succeeded counts once, as succeeded
    assert_eq!((s.total, s.succeeded, s.dead, s.pending()), (40, 37, 3, 0));
    assert!(s.is_complete());
    let by = runs(&seen, &failing);
    assert_eq!(by.get("complete"), Some(&1), "{by:?}");
    assert_eq!(by.get("death"), Some(&1), "{by:?}");
    assert_eq!(
        by.get("success"),
        None,
        "a batch with dead jobs did not succeed"
    );
    let by = runs(&seen, &fine);
    assert_eq!(
        (by.get("complete"), by.get("success")),
        (Some(&1), Some(&1))
    );
    assert_eq!(by.get("death"), None);
    // each callback carries the batch's status: complete the final counts,
    // death the first dead job
    for (kind, status) in seen.callbacks.lock().unwrap().iter() {
        if status.id == failing.as_str() && kind == "complete" {
            assert_eq!((status.succeeded, status.dead, status.total), (37, 3, 40));
        }
        if kind == "death" {
            assert!(status.dead >= 1);
        }
    }
    // every member job knew its batch
    let members = seen.members.lock().unwrap();
    assert!(
        members
            .iter()
            .all(|b| *b == Some(failing) || *b == Some(fine))
    );
    assert_eq!(members.iter().filter(|b| **b == Some(fine)).count(), 5);
}

pub async fn three_workers_finishing_a_batch_together_enqueue_each_callback_once(env: &Env) {
    let seen = Arc::new(Seen::default());
    let id = env
        .client
        .batch()
        .on_complete(&cb("complete"))
        .on_success(&cb("success"))
        .jobs(&(0..300).map(|n| Other { n }).collect::<Vec<_>>())
        .enqueue()
        .await
        .unwrap();
    let mut running = Vec::new();
    for _ in 0..3 {
        running.push(start_serving(worker(env, &seen)).await);
    }
    assert!(completed(env, &id).await);
    assert!(
        wait_for(Duration::from_secs(20), || async {
            seen.callbacks.lock().unwrap().len() >= 2
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    for r in running {
        r.stop().await;
    }
    let by = runs(&seen, &id);
    assert_eq!(
        (by.get("complete"), by.get("success")),
        (Some(&1), Some(&1)),
        "{by:?}"
    );
    let s = env.client.batch_status(&id).await.unwrap().unwrap();
    assert_eq!((s.total, s.succeeded), (300, 300));
}

pub async fn an_empty_batch_completes_at_once_and_an_unknown_one_has_no_status(env: &Env) {
    let seen = Arc::new(Seen::default());
    let id = env
        .client
        .batch()
        .on_complete(&cb("complete"))
        .enqueue()
        .await
        .unwrap();
    let s = env.client.batch_status(&id).await.unwrap().unwrap();
    assert!(s.is_complete() && s.completed_ms.is_some(), "{s:?}");
    let running = start_serving(worker(env, &seen)).await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            !seen.callbacks.lock().unwrap().is_empty()
        })
        .await
    );
    running.stop().await;
    let unknown: BatchId = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
    assert!(env.client.batch_status(&unknown).await.unwrap().is_none());
}

/// A callback whose job type runs at priority 5, in a queue nobody serves
/// here.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "batches_urgent_done", queue = "batches_urgent", priority = 5)]
struct UrgentDone;

impl Job for UrgentDone {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A batch's callback is enqueued at the priority its job type says
/// (`#[job(priority = 5)]`), as an enqueue of that job is; one of a type
/// without a priority at 0. Every callback was sent at priority 0, so an
/// urgent callback waited behind its queue's due jobs of priority 1 and up.
/// (An empty batch completes at its enqueue: its callbacks are sent then.)
pub async fn a_callback_is_enqueued_at_its_job_types_priority(env: &Env) {
    env.client
        .batch()
        .on_complete(&UrgentDone)
        .on_success_in("batches_urgent", &cb("success"))
        .enqueue()
        .await
        .unwrap();
    let got = env
        .client
        .backend()
        .fetch("batches_urgent", 10, Duration::from_secs(30))
        .await
        .unwrap();
    let mut sent: Vec<(bool, i8)> = got
        .jobs
        .iter()
        .map(|d| {
            let urgent = String::from_utf8_lossy(&d.body).contains("batches_urgent_done");
            (urgent, d.token.priority())
        })
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        [(false, 0), (true, 5)],
        "(the urgent callback, its priority) of each callback sent"
    );
}

/// A worker that dies after its settle landed but before its batch counted
/// the finish: the finish waits with the queue, and a fetch a lease later has
/// it counted (Redis; memory counts in the settle itself).
pub async fn a_finish_a_dead_worker_left_uncounted_is_counted_by_a_later_fetch(env: &Env) {
    use redjob::backend::Backend as _;
    use redjob::ops::Retention;
    let id = env
        .client
        .batch()
        .on_complete(&cb("complete"))
        .job(&Other { n: 1 })
        .enqueue()
        .await
        .unwrap();
    let backend = env.client.backend();
    let f = backend
        .fetch("batches_b", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(f.jobs.len(), 1);
    let d = &f.jobs[0];
    let r = redjob::backend::BatchRef::of_body(&d.body).expect("the body names its batch");
    let settle = redjob::backend::Settle {
        acks: vec![(d.id, d.token)],
        batched: vec![(d.id, r)],
        retention: Retention::default(),
        ..Default::default()
    };
    // the worker "dies" here: batch_settled is never called
    let done = backend.settle("batches_b", &settle).await.unwrap();
    assert_eq!(done.acked, 1);
    let s = env.client.batch_status(&id).await.unwrap().unwrap();
    if !env.is_redis() {
        assert!(done.batched.is_empty());
        assert!(s.is_complete(), "memory counts in the settle: {s:?}");
        return;
    }
    assert_eq!(done.batched.len(), 1);
    assert_eq!(s.succeeded, 0, "not counted yet");
    // a fetch now does not report it; one a lease (30 s) later does (the wait moved
    // back in time: the finish's score and the queue's field)
    let f = backend
        .fetch("batches_b", 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(!f.stale_batches);
    let mut raw = env.raw().await;
    let old = env.clock_ms().await - 31_000;
    let _: () = redis::cmd("ZADD")
        .arg(env.key("batches_b", ":bout"))
        .arg(old)
        .arg(&done.batched[0])
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(env.key("batches_b", ":Q"))
        .arg("redjob:bout")
        .arg(old)
        .query_async(&mut raw)
        .await
        .unwrap();
    let f = backend
        .fetch("batches_b", 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(f.stale_batches, "the fetch reports the old finish");
    backend.batch_recover("batches_b").await.unwrap();
    let s = env.client.batch_status(&id).await.unwrap().unwrap();
    assert!(s.is_complete() && s.succeeded == 1, "{s:?}");
    // counted once, however often it is applied again
    backend
        .batch_settled("batches_b", &done.batched)
        .await
        .unwrap();
    let again = env.client.batch_status(&id).await.unwrap().unwrap();
    assert_eq!(again.succeeded, 1);
    let f = backend
        .fetch("batches_b", 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(!f.stale_batches, "nothing left to recover");
    // a callback sent by a worker that died before it told the batch is due
    // again for the next one: its queue's once mark sends it once
    let _: () = redis::cmd("HSET")
        .arg(env.batch_key(id.as_str()))
        .arg("due:c")
        .arg("1")
        .query_async(&mut raw)
        .await
        .unwrap();
    backend
        .batch_settled("batches_b", &done.batched)
        .await
        .unwrap();
    assert_eq!(env.client.counts("batches_cb").await.unwrap().total(), 1);
}

/// A settle whose entries fail the fence in part enters only the finishes
/// that passed: the batch counts those, and the job settled again later
/// once.
pub async fn a_settle_enters_only_the_batch_finishes_that_passed_the_fence(env: &Env) {
    use redjob::backend::{Backend as _, Token};
    use redjob::ops::Retention;
    let id = env
        .client
        .batch()
        .jobs(&[Other { n: 1 }, Other { n: 2 }, Other { n: 3 }])
        .enqueue()
        .await
        .unwrap();
    let backend = env.client.backend();
    let f = backend
        .fetch("batches_b", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(f.jobs.len(), 3);
    let refs: Vec<_> = f
        .jobs
        .iter()
        .map(|d| (d.id, redjob::backend::BatchRef::of_body(&d.body).unwrap()))
        .collect();
    let stale = Token::new(1, 1);
    let settle = redjob::backend::Settle {
        // the second's token is stale: it fails the fence
        acks: vec![(f.jobs[0].id, f.jobs[0].token), (f.jobs[1].id, stale)],
        dead: vec![redjob::backend::DeadLetterEntry {
            id: f.jobs[2].id,
            token: f.jobs[2].token,
            error: "dies".into(),
        }],
        batched: refs.clone(),
        retention: Retention::default(),
        ..Default::default()
    };
    let done = backend.settle("batches_b", &settle).await.unwrap();
    assert_eq!((done.acked, done.dead), (1, 1));
    backend
        .batch_settled("batches_b", &done.batched)
        .await
        .unwrap();
    let s = env.client.batch_status(&id).await.unwrap().unwrap();
    assert_eq!((s.succeeded, s.dead, s.pending()), (1, 1, 1), "{s:?}");
    // the second settled with its own token now
    let settle = redjob::backend::Settle {
        acks: vec![(f.jobs[1].id, f.jobs[1].token)],
        batched: refs,
        retention: Retention::default(),
        ..Default::default()
    };
    let done = backend.settle("batches_b", &settle).await.unwrap();
    backend
        .batch_settled("batches_b", &done.batched)
        .await
        .unwrap();
    let s = env.client.batch_status(&id).await.unwrap().unwrap();
    assert_eq!((s.succeeded, s.dead), (2, 1), "{s:?}");
    assert!(s.is_complete());
}

/// A worker marks the queue before it settles jobs of batches; one that
/// dies before its count leaves the mark, and any worker's sweep counts the
/// finish and drops the mark once none is left (Redis; memory counts in the
/// settle itself).
pub async fn a_sweep_counts_the_finishes_of_a_marked_queue_and_drops_its_mark(env: &Env) {
    use redjob::backend::Backend as _;
    use redjob::ops::Retention;
    let id = env
        .client
        .batch()
        .job(&Other { n: 1 })
        .enqueue()
        .await
        .unwrap();
    let backend = env.client.backend();
    backend
        .batch_mark("batches_b", Duration::from_secs(30))
        .await
        .unwrap();
    let f = backend
        .fetch("batches_b", 10, Duration::from_secs(30))
        .await
        .unwrap();
    let d = &f.jobs[0];
    let r = redjob::backend::BatchRef::of_body(&d.body).unwrap();
    let settle = redjob::backend::Settle {
        acks: vec![(d.id, d.token)],
        batched: vec![(d.id, r)],
        retention: Retention::default(),
        ..Default::default()
    };
    // the worker "dies" here: batch_settled is never called
    let done = backend.settle("batches_b", &settle).await.unwrap();
    if !env.is_redis() {
        backend.batch_sweep().await.unwrap();
        assert!(
            env.client
                .batch_status(&id)
                .await
                .unwrap()
                .unwrap()
                .is_complete()
        );
        return;
    }
    let mut raw = env.raw().await;
    let marks = format!("{}:{{@workers}}:bmarks", env.namespace());
    let marked = |raw: &mut redjob::connection::Connection| {
        let mut raw = raw.clone();
        let marks = marks.clone();
        async move {
            redis::cmd("ZSCORE")
                .arg(&marks)
                .arg("qbatches_b")
                .query_async::<Option<f64>>(&mut raw)
                .await
                .unwrap()
                .is_some()
        }
    };
    assert!(marked(&mut raw).await);
    // a mark that stands (its worker counts its finishes) is left alone,
    // though its finish is old and another worker sweeps with a shorter lease
    let old = env.clock_ms().await - 31_000;
    let _: () = redis::cmd("ZADD")
        .arg(env.key("batches_b", ":bout"))
        .arg(old)
        .arg(&done.batched[0])
        .query_async(&mut raw)
        .await
        .unwrap();
    backend.batch_sweep().await.unwrap();
    let s = env.client.batch_status(&id).await.unwrap().unwrap();
    assert_eq!(s.succeeded, 0, "a standing mark is not swept");
    // the mark runs out (its worker died): a sweep counts the finish, then
    // drops the mark
    let _: () = redis::cmd("ZADD")
        .arg(&marks)
        .arg(old)
        .arg("qbatches_b")
        .query_async(&mut raw)
        .await
        .unwrap();
    backend.batch_sweep().await.unwrap();
    let s = env.client.batch_status(&id).await.unwrap().unwrap();
    assert!(s.is_complete() && s.succeeded == 1, "{s:?}");
    assert!(
        !marked(&mut raw).await,
        "the mark is dropped once none is left"
    );
}

/// Batches are listed newest first, a page before a given time, and a
/// batch's dead jobs are read in order of death.
pub async fn batches_are_listed_newest_first_and_their_dead_jobs_read(env: &Env) {
    let seen = Arc::new(Seen::default());
    let first = env
        .client
        .batch()
        .description("first")
        .jobs(&[
            Work {
                n: 1,
                die: true,
                flaky: false,
            },
            Work {
                n: 2,
                die: false,
                flaky: false,
            },
        ])
        .enqueue()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = env
        .client
        .batch()
        .description("second")
        .enqueue()
        .await
        .unwrap();
    let all = env.client.batches(None, 10).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, [second.as_str(), first.as_str()]);
    assert_eq!(all[1].description.as_deref(), Some("first"));
    let older = env
        .client
        .batches(Some(all[0].created_ms), 10)
        .await
        .unwrap();
    assert_eq!(older.len(), 1);
    assert_eq!(older[0].id, first.as_str());
    assert!(
        env.client.batches(None, 0).await.is_err(),
        "a limit of 0 is refused"
    );

    let running = start_serving(worker(env, &seen)).await;
    assert!(completed(env, &first).await);
    running.stop().await;
    let dead = env.client.batch_dead(&first, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].0, "batches_a");
    let letters = env.client.dead_letters("batches_a", 10).await.unwrap();
    assert!(
        letters.iter().any(|l| l.id == dead[0].1),
        "the dead job is a dead letter"
    );
    assert!(env.client.batch_dead(&second, 10).await.unwrap().is_empty());
}

/// A sealer that died after its seal landed but before it sent the
/// callbacks the seal made due leaves them to a worker's sweep (Redis: the
/// batch's state as such a seal leaves it, written by hand); a callback that
/// can never be sent (over its queue's maxsize) is dropped, and the batch's
/// other callbacks and counts go on.
pub async fn callbacks_a_sealer_left_due_are_sent_by_a_sweep_and_an_oversized_one_dropped(
    env: &Env,
) {
    use redjob::backend::Backend as _;
    use redjob::queue::{QueueOptions, Queues};
    let seen = Arc::new(Seen::default());
    env.queues()
        .create_queue(
            "batches_small",
            QueueOptions {
                maxsize: 1024,
                ..QueueOptions::default()
            },
        )
        .await
        .unwrap();
    let big = Done {
        kind: "x".repeat(2000),
    };
    let id = env
        .client
        .batch()
        .on_complete(&cb("complete"))
        .on_success_in("batches_small", &big)
        .job(&Other { n: 1 })
        .enqueue()
        .await
        .unwrap();
    let running = start_serving(worker(env, &seen)).await;
    assert!(completed(env, &id).await);
    assert!(
        wait_for(Duration::from_secs(20), || async {
            !seen.callbacks.lock().unwrap().is_empty()
        })
        .await
    );
    running.stop().await;
    // the oversized success callback was dropped; complete ran once
    assert_eq!(runs(&seen, &id).get("complete"), Some(&1));
    let small = env.queues().attributes("batches_small").await.unwrap();
    assert_eq!(small.msgs, 0, "nothing sent over the maxsize");
    if !env.is_redis() {
        return;
    }
    // its finish was counted and forgotten: nothing left to recover
    let mut raw = env.raw().await;
    let left: u64 = redis::cmd("ZCARD")
        .arg(env.key("batches_b", ":bout"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(left, 0, "an unsendable callback holds no finish back");
    // a batch sealed by a sealer that died before it sent the callback
    let lost = env
        .client
        .batch()
        .on_complete(&cb("complete"))
        .job(&Other { n: 2 })
        .enqueue()
        .await
        .unwrap();
    let old = env.clock_ms().await - 31_000;
    let _: () = redis::cmd("HSET")
        .arg(env.batch_key(lost.as_str()))
        .arg("due:c")
        .arg("1")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(format!("{}:{{@workers}}:bmarks", env.namespace()))
        .arg(old)
        .arg(format!("b{lost}"))
        .query_async(&mut raw)
        .await
        .unwrap();
    let before = env.queues().attributes("batches_cb").await.unwrap().msgs;
    env.client.backend().batch_sweep().await.unwrap();
    let after = env.queues().attributes("batches_cb").await.unwrap().msgs;
    assert_eq!(after, before + 1, "the sweep sent the callback");
    // and once: a second sweep finds nothing recorded
    env.client.backend().batch_sweep().await.unwrap();
    assert_eq!(
        env.queues().attributes("batches_cb").await.unwrap().msgs,
        after
    );
}

/// A batch opened through `Backend::batch_open` with a callback at a
/// priority outside -10..=10 is refused, as an enqueue at that priority is,
/// and nothing is opened (Redis stored it and, when the batch fired, sent
/// the callback into a priority set no fetch reads, while memory ran it).
pub async fn a_callback_priority_out_of_range_is_refused_at_batch_open(env: &Env) {
    use redjob::Error;
    use redjob::backend::Callback;
    use redjob::ops::CallbackKind;
    let b = env.client.backend();
    for (n, priority) in [(21u32, 50i8), (22, 11), (23, -11), (24, i8::MIN)] {
        let id: BatchId = format!("{n:0>32}").parse().unwrap();
        let body = br#"{"type":"batches_cb","args":{"what":"x"}}"#.to_vec();
        let spec = redjob::backend::BatchSpec {
            id,
            callbacks: vec![
                Callback::new(CallbackKind::Complete, "batches_cb", body).at_priority(priority),
            ],
            description: None,
            members: 0,
        };
        let opened = b.batch_open(&spec).await;
        assert!(
            matches!(
                opened,
                Err(Error::InvalidValue {
                    what: "priority",
                    ..
                })
            ),
            "priority {priority}: {opened:?}"
        );
        assert_eq!(
            b.batch_status(&id).await.unwrap(),
            None,
            "priority {priority}: not opened"
        );
    }
    // the range's ends are taken
    for (n, priority) in [(25u32, 10i8), (26, -10)] {
        let id: BatchId = format!("{n:0>32}").parse().unwrap();
        let body = br#"{"type":"batches_cb","args":{"what":"x"}}"#.to_vec();
        let spec = redjob::backend::BatchSpec {
            id,
            callbacks: vec![
                Callback::new(CallbackKind::Complete, "batches_cb", body).at_priority(priority),
            ],
            description: None,
            members: 1,
        };
        b.batch_open(&spec).await.unwrap();
    }
}

/// A batch opened by hand (its enqueuer's first step), with no callbacks.
async fn opened(env: &Env, n: u32) -> BatchId {
    let id: BatchId = format!("{n:0>32}").parse().unwrap();
    let spec = redjob::backend::BatchSpec {
        id,
        callbacks: Vec::new(),
        description: None,
        members: 1,
    };
    env.client.backend().batch_open(&spec).await.unwrap();
    id
}

/// A batch's dead jobs are read a page of 1 to 1,000, as its results and the
/// batches' list are: a limit outside is refused on every backend (the memory
/// backend took any, and read nothing for 0).
pub async fn a_batchs_dead_jobs_are_read_with_a_limit_of_1_to_1000(env: &Env) {
    use redjob::Error;
    let b = env.client.backend();
    let id = opened(env, 7).await;
    for limit in [0, 1001, 5000] {
        let results = b.batch_results(&id, 0, limit).await;
        assert!(
            matches!(results, Err(Error::InvalidValue { what: "limit", .. })),
            "batch_results, limit {limit}: {results:?}"
        );
        let dead = b.batch_dead(&id, limit).await;
        assert!(
            matches!(dead, Err(Error::InvalidValue { what: "limit", .. })),
            "batch_dead, limit {limit}: {dead:?}"
        );
    }
    for limit in [1, 1000] {
        assert_eq!(b.batch_dead(&id, limit).await.unwrap(), Vec::new());
    }
}

/// A batch its enqueuer opened and never sealed (the process died between
/// the two) is cancelled by the workers' sweep an hour after its open, on
/// every backend (the memory backend left it open for ever); one sealed by
/// then is left as it is.
pub async fn a_batch_never_sealed_is_cancelled_by_the_sweep_an_hour_on(env: &Env) {
    let b = env.client.backend();
    let unsealed = opened(env, 9).await;
    let sealed = opened(env, 10).await;
    b.batch_seal(&sealed, 1).await.unwrap();
    // before the hour: nothing changes
    b.batch_sweep().await.unwrap();
    let s = b.batch_status(&unsealed).await.unwrap().unwrap();
    assert!(!s.sealed && s.cancelled_at_ms.is_none(), "{s:?}");
    // an hour and a bit on
    match env.queues() {
        _ if env.is_redis() => {
            // the sweep's marks brought to the past, as the hour passing would
            // (the sealed batch's too, recorded again: a sweep meets it sealed)
            let marks = format!("{}:{{@workers}}:bmarks", env.namespace());
            for id in [unsealed, sealed] {
                let _: i64 = redis::cmd("ZADD")
                    .arg(&marks)
                    .arg(1)
                    .arg(format!("b{id}"))
                    .query_async(&mut env.raw().await)
                    .await
                    .unwrap();
            }
        }
        redjob::backend::any::AnyBackend::Memory(m) => {
            m.clock().advance(Duration::from_secs(3_700))
        }
        _ => unreachable!("a backend other than Redis or memory"),
    }
    b.batch_sweep().await.unwrap();
    let s = b.batch_status(&unsealed).await.unwrap().unwrap();
    assert!(
        s.cancelled_at_ms.is_some(),
        "a batch never sealed is cancelled by the sweep: {s:?}"
    );
    let s = b.batch_status(&sealed).await.unwrap().unwrap();
    assert!(
        s.sealed && s.cancelled_at_ms.is_none(),
        "a sealed batch is left as it is: {s:?}"
    );
    // once: a second sweep changes nothing
    let before = b.batch_status(&unsealed).await.unwrap().unwrap();
    b.batch_sweep().await.unwrap();
    let after = b.batch_status(&unsealed).await.unwrap().unwrap();
    assert_eq!(before.cancelled_at_ms, after.cancelled_at_ms);
}

/// Paging through the batches by the last one's `created_ms` shows every
/// batch once, also those opened in one millisecond (on memory, all of them,
/// as its clock stands still here): a full page takes the rest of its last
/// millisecond, where those after the page's end were on no page.
pub async fn pages_of_batches_show_each_batch_once_however_many_share_a_millisecond(env: &Env) {
    let c = &env.client;
    let mut opened = std::collections::BTreeSet::new();
    for _ in 0..40 {
        opened.insert(c.batch().enqueue().await.unwrap().to_string());
    }
    let mut seen = Vec::new();
    let mut before = None;
    for _ in 0..40 {
        let page = c.batches(before, 7).await.unwrap();
        seen.extend(page.iter().map(|s| s.id.clone()));
        if page.len() < 7 {
            break;
        }
        before = page.last().map(|s| s.created_ms);
    }
    let shown: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(seen.len(), shown.len(), "a batch on two pages: {seen:?}");
    assert_eq!(shown, opened, "a batch on no page");
}
