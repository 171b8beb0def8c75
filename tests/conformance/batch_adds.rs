//! A batch's jobs add jobs to it while it runs (waited for, counted, their
//! results read by a flow's parent), and a cancelled batch cancels its jobs
//! rather than start them and takes no more.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redjob::backend::Backend as _;
use redjob::client::Flow;
use redjob::inspect::Inspect;
use redjob::ops::{BatchId, BatchStatus};
use redjob::{Error, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{start_serving, wait_for};

struct Seen {
    ran: Mutex<Vec<String>>,
    errors: Mutex<Vec<String>>,
    callbacks: Mutex<Vec<BatchStatus>>,
    read: Mutex<Vec<Vec<Option<u64>>>>,
    gate: tokio::sync::Semaphore,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            ran: Mutex::default(),
            errors: Mutex::default(),
            callbacks: Mutex::default(),
            read: Mutex::default(),
            gate: tokio::sync::Semaphore::new(0),
        }
    }
}

/// A page of a crawl: adds `fanout` pages one level down while `depth` > 0
/// (the first on another queue, another master on a Cluster); returns its
/// depth.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "adds_page", queue = "adds_a", output = "u64")]
struct Page {
    id: String,
    depth: u32,
    fanout: u32,
}

impl Job for Page {
    async fn perform(&self, ctx: &JobContext) -> Result<u64, JobError> {
        ctx.data::<Seen>()?
            .ran
            .lock()
            .unwrap()
            .push(self.id.clone());
        if self.depth > 0 {
            let mut below: Vec<Page> = (0..self.fanout)
                .map(|i| Page {
                    id: format!("{}.{i}", self.id),
                    depth: self.depth - 1,
                    fanout: self.fanout,
                })
                .collect();
            let first = below.remove(0);
            ctx.add_to_batch_in("adds_b", &first).await?;
            ctx.add_all_to_batch(&below).await?;
        }
        Ok(u64::from(self.depth))
    }
}

/// A flow's parent: reads its children's results.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "adds_sum", queue = "adds_p", output = "u64")]
struct Sum;

impl Job for Sum {
    async fn perform(&self, ctx: &JobContext) -> Result<u64, JobError> {
        let seen = ctx.data::<Seen>()?;
        seen.ran.lock().unwrap().push("sum".into());
        let results = ctx.child_results::<u64>().await?;
        let sum = results.iter().flatten().sum();
        seen.read.lock().unwrap().push(results);
        Ok(sum)
    }
}

/// A batch's callback: records the status it carries.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "adds_done", queue = "adds_cb")]
struct Done;

impl Job for Done {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let status = ctx.batch_status().cloned().expect("a callback's status");
        ctx.data::<Seen>()?.callbacks.lock().unwrap().push(status);
        Ok(())
    }
}

/// Tries to add a page to its batch, once let through the gate (or at once
/// when `wait` is false), and records the error.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "adds_try", queue = "adds_a")]
struct Try {
    wait: bool,
}

impl Job for Try {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let seen = ctx.data::<Seen>()?;
        seen.ran.lock().unwrap().push("try".into());
        if self.wait {
            seen.gate.acquire().await?.forget();
        }
        let page = Page {
            id: "late".into(),
            depth: 0,
            fanout: 0,
        };
        if let Err(e) = ctx.add_to_batch(&page).await {
            seen.errors.lock().unwrap().push(e.to_string());
        }
        Ok(())
    }
}

fn worker(env: &Env, seen: &Arc<Seen>) -> Worker {
    Worker::builder(env.client.backend())
        .register::<Page>()
        .register::<Sum>()
        .register::<Done>()
        .register::<Try>()
        .queue("adds_b")
        .data(seen.clone())
        .handle_signals(false)
        .build()
        .unwrap()
}

async fn completed(env: &Env, id: &BatchId) -> BatchStatus {
    assert!(
        wait_for(Duration::from_secs(30), || async {
            env.client
                .batch_status(id)
                .await
                .unwrap()
                .is_some_and(|s| s.completed_ms.is_some())
        })
        .await,
        "batch {id} did not complete: {:?}",
        env.client.batch_status(id).await
    );
    env.client.batch_status(id).await.unwrap().unwrap()
}

fn page(id: &str, depth: u32, fanout: u32) -> Page {
    Page {
        id: id.into(),
        depth,
        fanout,
    }
}

pub async fn jobs_added_while_a_batch_runs_are_waited_for_counted_and_read(env: &Env) {
    let seen = Arc::new(Seen::default());
    // a flow whose one child crawls two levels of two: 1 + 2 + 4 pages
    let parent = env
        .client
        .enqueue_flow(Flow::new(&Sum).child(&page("f", 2, 2)))
        .await
        .unwrap();
    // a batch whose one job adds three
    let batch = env
        .client
        .batch()
        .on_complete(&Done)
        .job(&page("b", 1, 3))
        .enqueue()
        .await
        .unwrap();
    // a job enqueued alone has no batch to add to
    env.client.enqueue(&Try { wait: false }).await.unwrap();
    let running = start_serving(worker(env, &seen)).await;
    let sum = env
        .client
        .wait_result::<Sum>(&parent, Duration::from_secs(30))
        .await
        .unwrap();
    let status = completed(env, &batch).await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            !seen.callbacks.lock().unwrap().is_empty() && !seen.errors.lock().unwrap().is_empty()
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await;
    // the parent ran once, after every page, and read all seven results in
    // the order they were added: the first child, then the pages it added
    assert_eq!(sum, Some(2 + 1 + 1));
    let ran = seen.ran.lock().unwrap().clone();
    assert_eq!(ran.iter().filter(|r| *r == "sum").count(), 1, "{ran:?}");
    let sum_at = ran.iter().position(|r| r == "sum").unwrap();
    let flow_pages = ran.iter().filter(|r| r.starts_with('f')).count();
    assert_eq!(flow_pages, 7, "{ran:?}");
    assert!(
        ran[..sum_at].iter().filter(|r| r.starts_with('f')).count() == 7,
        "every page ran before the parent: {ran:?}"
    );
    let read = seen.read.lock().unwrap().clone();
    // by index: the child, the page it added first, then the others in the
    // order they were added (the pages run meanwhile, so that order varies)
    assert_eq!(read.len(), 1);
    assert_eq!(read[0][..2], [Some(2), Some(1)], "{read:?}");
    let mut rest = read[0][2..].to_vec();
    rest.sort();
    assert_eq!(
        rest,
        [Some(0), Some(0), Some(0), Some(0), Some(1)],
        "{read:?}"
    );
    // the batch counted the jobs added, and its callback ran once with them
    assert_eq!((status.total, status.succeeded), (4, 4), "{status:?}");
    let callbacks = seen.callbacks.lock().unwrap().clone();
    let ours: Vec<_> = callbacks
        .iter()
        .filter(|s| s.id == batch.as_str())
        .collect();
    assert_eq!(ours.len(), 1, "{callbacks:?}");
    assert_eq!((ours[0].total, ours[0].succeeded), (4, 4));
    assert_eq!(
        ran.iter().filter(|r| r.starts_with("b.")).count(),
        3,
        "{ran:?}"
    );
    let errors = seen.errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("only a batch's job"), "{errors:?}");
    // a completed batch takes no more
    let (queue, msg) = ("adds_a".to_string(), sent(&page("x", 0, 0)));
    let refused = env
        .client
        .backend()
        .batch_add(&batch, &[(queue, msg)])
        .await;
    assert!(
        matches!(&refused, Err(Error::InvalidValue { reason, .. }) if reason.contains("completed")),
        "{refused:?}"
    );
}

/// `job` as a batch's message (no batch named yet).
fn sent(job: &Page) -> redjob::queue::SendMessage {
    redjob::queue::SendMessage::new(redjob::job::encode(job).unwrap())
}

pub async fn a_cancelled_batch_cancels_its_jobs_rather_than_start_them_and_takes_no_more(
    env: &Env,
) {
    let seen = Arc::new(Seen::default());
    let pages: Vec<Page> = (0..10).map(|i| page(&format!("c{i}"), 0, 0)).collect();
    let id = env
        .client
        .batch()
        .on_complete(&Done)
        .jobs(&pages)
        .enqueue()
        .await
        .unwrap();
    let one = env.client.peek("adds_a", 1).await.unwrap()[0].id;
    assert!(env.client.cancel_batch(&id).await.unwrap());
    assert!(!env.client.cancel_batch(&id).await.unwrap(), "once");
    let unknown: BatchId = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
    assert!(!env.client.cancel_batch(&unknown).await.unwrap());
    let at = env.client.batch_status(&id).await.unwrap().unwrap();
    assert!(at.cancelled_at_ms.is_some() && at.completed_ms.is_none());
    // a flow cancelled: its child is cancelled, and so is its parent
    let parent = env
        .client
        .enqueue_flow(Flow::new(&Sum).child(&page("fc", 0, 0)))
        .await
        .unwrap();
    let waiting = env.client.job("adds_p", &parent).await.unwrap().unwrap();
    let group: BatchId = waiting.waits_for.unwrap();
    assert!(env.client.cancel_batch(&group).await.unwrap());
    // a running job whose batch is cancelled goes on, and can add no more;
    // its batch ends with no failed job, and does not succeed
    let gated = env
        .client
        .batch()
        .on_success(&Done)
        .job(&Try { wait: true })
        .enqueue()
        .await
        .unwrap();
    let running = start_serving(worker(env, &seen)).await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            seen.ran.lock().unwrap().contains(&"try".to_string())
        })
        .await
    );
    assert!(env.client.cancel_batch(&gated).await.unwrap());
    seen.gate.add_permits(1);
    let status = completed(env, &id).await;
    let flow = completed(env, &group).await;
    let tried = completed(env, &gated).await;
    let failed = env.client.result::<Sum>(&parent);
    let failed = failed.await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            !seen.callbacks.lock().unwrap().is_empty()
        })
        .await
    );
    running.stop().await;
    let ran = seen.ran.lock().unwrap().clone();
    assert_eq!(ran, ["try"], "no job of a cancelled batch started");
    assert_eq!(
        (status.total, status.cancelled, status.succeeded),
        (10, 10, 0),
        "{status:?}"
    );
    // the complete callback ran, the cancelled batch's success one did not
    // (nor waits to)
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(env.client.peek("adds_cb", 10).await.unwrap().is_empty());
    let callbacks = seen.callbacks.lock().unwrap().clone();
    assert_eq!(callbacks.len(), 1, "{callbacks:?}");
    assert_eq!(
        (callbacks[0].id.as_str(), callbacks[0].cancelled),
        (id.as_str(), 10)
    );
    assert_eq!(status.first_failure.as_deref(), Some("batch cancelled"));
    // each is in its queue's history, cancelled by its batch
    let info = env.client.job("adds_a", &one).await.unwrap().unwrap();
    let by = info.finished.as_ref().and_then(|f| f.by.clone());
    assert_eq!(
        by.as_deref(),
        Some(&*format!("batch {id} cancelled")),
        "{info:?}"
    );
    assert_eq!((flow.total, flow.cancelled), (1, 1));
    assert!(
        matches!(&failed, Err(Error::JobFailed { error, .. }) if error.contains("was cancelled")),
        "{failed:?}"
    );
    let p = env.client.job("adds_p", &parent).await.unwrap().unwrap();
    let by = p.finished.and_then(|f| f.by).unwrap_or_default();
    assert!(by.contains("its flow was cancelled"), "{by}");
    assert_eq!((tried.total, tried.succeeded), (1, 1), "{tried:?}");
    let errors = seen.errors.lock().unwrap().clone();
    assert!(
        errors.len() == 1 && errors[0].contains("cancelled"),
        "{errors:?}"
    );
    // workers read the cancelled batches in the order they were listed,
    // each read going on from the last score seen
    let listed = env.client.backend().cancelled_batches(0).await.unwrap();
    let ids: Vec<BatchId> = listed.iter().map(|(b, _)| *b).collect();
    assert_eq!(ids, [id, group, gated], "{listed:?}");
    assert!(listed.windows(2).all(|w| w[0].1 < w[1].1), "{listed:?}");
    let after = env
        .client
        .backend()
        .cancelled_batches(listed[1].1)
        .await
        .unwrap();
    assert_eq!(after, listed[2..]);
}

/// On Redis, jobs added by an adder that stopped before it sent them are
/// sent by a sweep (the batch's state as such an adder leaves it, written by
/// hand), once however often it runs.
pub async fn jobs_an_adder_left_unsent_are_sent_by_a_sweep(env: &Env) {
    let seen = Arc::new(Seen::default());
    let gated = env
        .client
        .batch()
        .on_complete(&Done)
        .job(&Try { wait: true })
        .enqueue()
        .await
        .unwrap();
    if !env.is_redis() {
        return;
    }
    let mut raw = env.raw().await;
    // a mark whose adder has not kept its jobs yet (a minute ago): a sweep
    // leaves it for a later one
    let marks = format!("{}:{{@workers}}:bmarks", env.namespace());
    let slow = format!("a{gated} {}.x", env.clock_ms().await - 60_000);
    let _: () = redis::cmd("ZADD")
        .arg(&marks)
        .arg(env.clock_ms().await - 31_000)
        .arg(&slow)
        .query_async(&mut raw)
        .await
        .unwrap();
    env.client.backend().batch_sweep().await.unwrap();
    let left: Option<u64> = redis::cmd("ZSCORE")
        .arg(&marks)
        .arg(&slow)
        .query_async(&mut raw)
        .await
        .unwrap();
    let now = env.clock_ms().await;
    assert!(
        left.is_some_and(|s| s > now),
        "looked at again later: {left:?}"
    );
    let body = redjob::job::encode(&page("left", 0, 0)).unwrap();
    let mut kept = format!("adds_a 0 {}\n", body.len()).into_bytes();
    kept.extend_from_slice(&body);
    let hash = env.batch_key(gated.as_str());
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(&hash)
        .arg("next")
        .arg(2)
        .ignore()
        .cmd("HINCRBY")
        .arg(&hash)
        .arg("total")
        .arg(1)
        .ignore()
        .query_async(&mut raw)
        .await
        .unwrap();
    keep_lost(env, &mut raw, &gated, &kept).await;
    env.client.backend().batch_sweep().await.unwrap();
    let queued = env.client.peek("adds_a", 10).await.unwrap();
    assert_eq!(queued.len(), 2, "the Try and the page left: {queued:?}");
    // kept again, as a slow adder's would be after the sweep sent them:
    // sent once all the same
    keep_lost(env, &mut raw, &gated, &kept).await;
    env.client.backend().batch_sweep().await.unwrap();
    let queued = env.client.peek("adds_a", 10).await.unwrap();
    assert_eq!(queued.len(), 2, "sent once: {queued:?}");
    let running = start_serving(worker(env, &seen)).await;
    seen.gate.add_permits(1);
    let status = completed(env, &gated).await;
    running.stop().await;
    // the Try, the page left, and the page the Try added once let through
    assert_eq!((status.total, status.succeeded), (3, 3), "{status:?}");
    let ran = seen.ran.lock().unwrap().clone();
    assert!(
        ran.contains(&"left".to_string()) && ran.contains(&"late".to_string()),
        "{ran:?}"
    );
    let left: u64 = redis::cmd("HLEN")
        .arg(format!("{hash}:adds"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

pub async fn an_enqueue_that_fails_part_way_cancels_its_batch_or_flow(env: &Env) {
    use redjob::queue::{QueueOptions, Queues};
    let seen = Arc::new(Seen::default());
    env.queues()
        .create_queue(
            "adds_small",
            QueueOptions {
                maxsize: 1024,
                ..QueueOptions::default()
            },
        )
        .await
        .unwrap();
    let big = page(&"x".repeat(2000), 0, 0);
    // a batch whose first queue's job is sent, its second queue's refused
    let refused = env
        .client
        .batch()
        .job(&page("sent", 0, 0))
        .job_in("adds_small", &big)
        .enqueue()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let listed = env.client.batches(None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    let b = &listed[0];
    assert!(b.cancelled_at_ms.is_some() && !b.sealed, "{b:?}");
    // a flow whose child is refused: its parent is not left waiting
    let refused = env
        .client
        .enqueue_flow(Flow::new(&Sum).child_in("adds_small", &big))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let listed = env.client.batches(None, 10).await.unwrap();
    let flow = listed
        .iter()
        .find(|b| b.parent.is_some())
        .expect("the flow's batch");
    assert!(flow.cancelled_at_ms.is_some(), "{flow:?}");
    let (q, parent) = flow.parent_job().unwrap();
    let p = env.client.job(q, &parent).await.unwrap().unwrap();
    assert_eq!(p.state, redjob::inspect::JobState::Finished, "{p:?}");
    assert_eq!(
        p.finished.map(|f| f.how),
        Some(redjob::inspect::Finish::Cancelled)
    );
    // the job the batch sent is cancelled when fetched, not run
    assert_eq!(env.client.peek("adds_a", 10).await.unwrap().len(), 1);
    let running = start_serving(worker(env, &seen)).await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            env.client.peek("adds_a", 10).await.unwrap().is_empty()
        })
        .await
    );
    running.stop().await;
    assert!(seen.ran.lock().unwrap().is_empty(), "nothing ran");
}

/// Jobs added to a batch whose group was refused (over its queue's
/// maxsize: they left the batch's total), kept still because their adder
/// stopped before it forgot them, are not sent by a sweep once their queue
/// takes them (its maxsize raised): sent, they ran uncounted in the total
/// and their finishes could complete the batch (and run a flow's parent)
/// before its other jobs finished. Redis alone keeps added jobs.
pub async fn jobs_added_whose_group_was_refused_are_not_sent_by_a_sweep(env: &Env) {
    let gated = env
        .client
        .batch()
        .on_complete(&Done)
        .job(&Try { wait: true })
        .enqueue()
        .await
        .unwrap();
    if !env.is_redis() {
        return;
    }
    let mut raw = env.raw().await;
    // the adder kept a job at index 1, grew the total, was refused and
    // took the job out of the total (once: its "u1"), then stopped
    let body = redjob::job::encode(&page("refused", 0, 0)).unwrap();
    let mut kept = format!("adds_a 0 {}\n", body.len()).into_bytes();
    kept.extend_from_slice(&body);
    let hash = env.batch_key(gated.as_str());
    let _: () = redis::cmd("HSET")
        .arg(&hash)
        .arg("next")
        .arg(2)
        .arg("u1")
        .arg(1)
        .query_async(&mut raw)
        .await
        .unwrap();
    keep_lost(env, &mut raw, &gated, &kept).await;
    env.client.backend().batch_sweep().await.unwrap();
    let queued = env.client.peek("adds_a", 10).await.unwrap();
    assert_eq!(queued.len(), 1, "the Try alone: {queued:?}");
    let left: u64 = redis::cmd("HLEN")
        .arg(format!("{hash}:adds"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(left, 0, "the refused group is forgotten");
    let status = env.client.batch_status(&gated).await.unwrap().unwrap();
    assert_eq!(status.total, 1, "{status:?}");
}

/// Keeps `kept` as jobs added to batch `id` at index 1 by an adder that
/// stopped ("lost"), with its sweep mark due.
async fn keep_lost(env: &Env, raw: &mut redjob::connection::Connection, id: &BatchId, kept: &[u8]) {
    let _: () = redis::cmd("HSET")
        .arg(format!("{}:adds", env.batch_key(id.as_str())))
        .arg("1 lost")
        .arg(kept)
        .query_async(raw)
        .await
        .unwrap();
    // the sweep's mark, in a slot of its own on a Cluster
    let _: () = redis::cmd("ZADD")
        .arg(format!("{}:{{@workers}}:bmarks", env.namespace()))
        .arg(env.clock_ms().await - 31_000)
        .arg(format!("a{id} lost"))
        .query_async(raw)
        .await
        .unwrap();
}

/// A job added to a flow with `Flow::after` is no job of the flow's batch:
/// enqueued alone, its `add_to_batch` fails (as the docs now say; they said
/// a flow's child could add), and the flow's parent runs once it finished,
/// with nothing added.
pub async fn a_job_a_flow_waits_for_with_after_adds_nothing_to_the_flow(env: &Env) {
    let seen = Arc::new(Seen::default());
    let alone = env.client.enqueue(&Try { wait: false }).await.unwrap();
    let parent = env
        .client
        .enqueue_flow(Flow::new(&Sum).after("adds_a", &alone))
        .await
        .unwrap();
    let running = start_serving(worker(env, &seen)).await;
    let sum = env
        .client
        .wait_result::<Sum>(&parent, Duration::from_secs(30))
        .await;
    running.stop().await;
    assert_eq!(sum.unwrap(), Some(0));
    let errors = seen.errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("only a batch's job"), "{errors:?}");
    assert_eq!(*seen.ran.lock().unwrap(), ["try", "sum"]);
}
