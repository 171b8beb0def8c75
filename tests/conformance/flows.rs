//! Flows: a parent runs once after its children succeeded and reads their
//! results; a chain runs in order; a child that dies fails its parent (and a
//! chain above it) with the reason, dead-lettered or cancelled as chosen.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redjob::client::Flow;
use redjob::inspect::Inspect;
use redjob::{Error, Job, JobContext, JobError, JobId, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::start_serving;

/// What ran, in order: `c<n>` a child, `p<n>` a parent (with the results
/// it read).
#[derive(Default)]
struct Seen {
    ran: Mutex<Vec<String>>,
    read: Mutex<Vec<(u32, Vec<Option<u64>>)>>,
}

/// A child: returns `n * 10`, or dies when `die`.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "flows_child",
    queue = "flows_a",
    output = "u64",
    max_attempts = 1
)]
struct Child {
    n: u32,
    die: bool,
}

impl Job for Child {
    async fn perform(&self, ctx: &JobContext) -> Result<u64, JobError> {
        ctx.data::<Seen>()?
            .ran
            .lock()
            .unwrap()
            .push(format!("c{}", self.n));
        if self.die {
            return Err(JobError::fatal("this child dies"));
        }
        Ok(u64::from(self.n) * 10)
    }
}

/// A child on another queue (another master on the Cluster), retried once.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "flows_other",
    queue = "flows_b",
    output = "u64",
    max_attempts = 3,
    backoff = "10ms"
)]
struct Other {
    n: u32,
}

impl Job for Other {
    async fn perform(&self, ctx: &JobContext) -> Result<u64, JobError> {
        ctx.data::<Seen>()?
            .ran
            .lock()
            .unwrap()
            .push(format!("c{}", self.n));
        if ctx.attempt() == 1 {
            return Err(JobError::retry(std::io::Error::other("first try fails")));
        }
        Ok(u64::from(self.n) * 10)
    }
}

/// A parent: reads its children's results, returns their sum plus `n`.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "flows_parent", queue = "flows_p", output = "u64")]
struct Parent {
    n: u32,
}

impl Job for Parent {
    async fn perform(&self, ctx: &JobContext) -> Result<u64, JobError> {
        let seen = ctx.data::<Seen>()?;
        seen.ran.lock().unwrap().push(format!("p{}", self.n));
        let results = ctx.child_results::<u64>().await?;
        let sum: u64 = results.iter().flatten().sum();
        seen.read.lock().unwrap().push((self.n, results));
        Ok(sum + u64::from(self.n))
    }
}

fn worker(env: &Env, seen: &Arc<Seen>) -> Worker {
    Worker::builder(env.client.backend())
        .register::<Child>()
        .register::<Other>()
        .register::<Parent>()
        .data(seen.clone())
        .handle_signals(false)
        .build()
        .unwrap()
}

fn child(n: u32) -> Child {
    Child { n, die: false }
}

pub async fn a_parent_runs_once_after_its_children_and_reads_their_results(env: &Env) {
    let seen = Arc::new(Seen::default());
    let flow = Flow::new(&Parent { n: 1 })
        .child(&child(1))
        .child(&Other { n: 2 })
        .child(&child(3))
        .child(&Other { n: 4 });
    let id = env.client.enqueue_flow(flow).await.unwrap();
    // the parent is not in its queue while its children wait: it is found
    // waiting for them
    let waiting = env.client.job("flows_p", &id).await.unwrap().unwrap();
    assert_eq!(waiting.state, redjob::inspect::JobState::Waiting);
    assert!(waiting.waits_for.is_some());
    assert_eq!(waiting.job_name().as_deref(), Some("flows_parent"));
    assert_eq!(
        env.client.result::<Parent>(&id).await.unwrap(),
        None,
        "not finished"
    );
    let running = start_serving(worker(env, &seen)).await;
    let sum = env
        .client
        .wait_result::<Parent>(&id, Duration::from_secs(30))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await;
    assert_eq!(sum, Some(10 + 20 + 30 + 40 + 1));
    let ran = seen.ran.lock().unwrap().clone();
    // the parent ran once, last: every child (retries too) ran before it
    assert_eq!(ran.iter().filter(|r| *r == "p1").count(), 1, "{ran:?}");
    assert_eq!(ran.last().map(String::as_str), Some("p1"), "{ran:?}");
    assert_eq!(
        seen.read.lock().unwrap().clone(),
        vec![(1, vec![Some(10), Some(20), Some(30), Some(40)])]
    );
    // the flow is a batch, listed for operators
    let listed = env.client.batches(None, 10).await.unwrap();
    let flow = listed
        .iter()
        .find(|b| b.description.as_deref() == Some(&format!("flow flows_parent {id}")))
        .expect("the flow's batch is listed");
    assert_eq!((flow.total, flow.succeeded), (4, 4));
}

pub async fn a_chain_runs_in_order_each_step_reading_the_one_before(env: &Env) {
    let seen = Arc::new(Seen::default());
    let chain = Flow::new(&Parent { n: 1 })
        .then(&Parent { n: 2 })
        .then(&Parent { n: 3 });
    let last = env.client.enqueue_flow(chain).await.unwrap();
    let running = start_serving(worker(env, &seen)).await;
    let got = env
        .client
        .wait_result::<Parent>(&last, Duration::from_secs(30))
        .await
        .unwrap();
    running.stop().await;
    // 1 returns 1, 2 returns 1 + 2, 3 returns 3 + 3
    assert_eq!(got, Some(6));
    assert_eq!(*seen.ran.lock().unwrap(), ["p1", "p2", "p3"]);
    assert_eq!(
        seen.read.lock().unwrap().clone(),
        vec![(1, vec![]), (2, vec![Some(1)]), (3, vec![Some(3)])]
    );
    // a flow without children: its parent is enqueued at once
    let alone = env
        .client
        .enqueue_flow(Flow::new(&Parent { n: 9 }))
        .await
        .unwrap();
    assert!(env.client.job("flows_p", &alone).await.unwrap().is_some());
}

/// Waits until job `id` of `queue` is known to have failed.
async fn failed(env: &Env, id: &JobId) -> Error {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match env.client.result::<Parent>(id).await {
            Err(e @ Error::JobFailed { .. }) => return e,
            _ if tokio::time::Instant::now() >= deadline => panic!("job {id} did not fail"),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

pub async fn a_dead_child_fails_its_parent_and_the_chain_above_it_with_the_reason(env: &Env) {
    let seen = Arc::new(Seen::default());
    // top waits for mid, which waits for a child that succeeds and one that dies
    let mid = Flow::new(&Parent { n: 2 })
        .child(&child(1))
        .child(&Child { n: 5, die: true });
    let top = env
        .client
        .enqueue_flow(Flow::new(&Parent { n: 3 }).child(&child(7)).subflow(mid))
        .await
        .unwrap();
    // the same, cancelled instead of dead-lettered
    let quiet = env
        .client
        .enqueue_flow(
            Flow::new(&Parent { n: 4 })
                .child(&Child { n: 6, die: true })
                .cancel_on_failure(),
        )
        .await
        .unwrap();
    // its batch names its parent (cancel_on_failure changes nothing there)
    let w = env.client.job("flows_p", &quiet).await.unwrap().unwrap();
    let group = env
        .client
        .batch_status(&w.waits_for.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(group.parent_job(), Some(("flows_p", quiet)));
    let running = start_serving(worker(env, &seen)).await;
    let e = failed(env, &top).await;
    let q = failed(env, &quiet).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await;
    let ran = seen.ran.lock().unwrap().clone();
    assert!(
        !ran.iter().any(|r| r.starts_with('p')),
        "no parent ran: {ran:?}"
    );
    // top is dead-lettered, its error naming why (mid failed)
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("dead")),
        "{e}"
    );
    let letter = env.client.job("flows_p", &top).await.unwrap().unwrap();
    let why = letter.last_error.clone().unwrap_or_default();
    assert!(
        why.contains("a job it waits for failed: flows_p") && why.contains("dead"),
        "{letter:?}"
    );
    assert!(String::from_utf8_lossy(&letter.body).contains("flows_parent"));
    // mid's error names the child that died
    let listed = env.client.batches(None, 10).await.unwrap();
    let mid_batch = listed
        .iter()
        .find(|b| {
            b.description
                .as_deref()
                .is_some_and(|d| d.starts_with("flow flows_parent") && b.total == 2)
        })
        .expect("mid's flow is listed");
    assert_eq!((mid_batch.succeeded, mid_batch.dead), (1, 1));
    let first = mid_batch.first_failure.clone().unwrap_or_default();
    assert!(
        first.starts_with("flows_a ") && first.ends_with(" dead"),
        "{first}"
    );
    // cancel_on_failure: entered as cancelled, no dead letter
    assert!(
        matches!(&q, Error::JobFailed { error, .. } if error.contains("cancelled")),
        "{q}"
    );
}

/// A parent dead-lettered because a child died, requeued from the dead
/// letters: it runs and reads what its children returned (none for the one
/// that died). Its letter lacked its flow's status before, so every attempt
/// of the requeued parent failed reading them.
pub async fn a_dead_parent_requeued_runs_and_reads_its_childrens_results(env: &Env) {
    use redjob::ops::Admin;
    let seen = Arc::new(Seen::default());
    let p = env
        .client
        .enqueue_flow(
            Flow::new(&Parent { n: 1 })
                .child(&Child { n: 5, die: true })
                .child(&child(2)),
        )
        .await
        .unwrap();
    let running = start_serving(worker(env, &seen)).await;
    failed(env, &p).await;
    let n = env
        .client
        .requeue_dead("flows_p", &[p], redjob::ops::Spread::NOW)
        .await
        .unwrap();
    assert_eq!(n, 1);
    let got = env
        .client
        .wait_result::<Parent>(&p, Duration::from_secs(10))
        .await;
    running.stop().await;
    assert_eq!(
        got.unwrap(),
        Some(21),
        "ran: {:?}",
        seen.ran.lock().unwrap()
    );
    assert_eq!(*seen.read.lock().unwrap(), [(1, vec![None, Some(20)])]);
}

/// A parent cancelled while it waits for its children: listed as waiting,
/// cancelled (not "not found"), never run though its children succeed,
/// its awaiter and a flow after it told; cancelling it again finds nothing.
pub async fn a_parent_cancelled_while_it_waits_never_runs_and_its_waiters_learn_it(env: &Env) {
    use redjob::inspect::{Cancelled, JobState};
    let c = &env.client;
    let seen = Arc::new(Seen::default());
    let p = c
        .enqueue_flow(
            Flow::new(&Parent { n: 1 })
                .child(&child(1))
                .child(&child(2)),
        )
        .await
        .unwrap();
    let after = c
        .enqueue_flow(
            Flow::new(&Parent { n: 2 })
                .after("flows_p", &p)
                .cancel_on_failure(),
        )
        .await
        .unwrap();
    let state = c.job("flows_p", &p).await.unwrap().map(|j| j.state);
    assert_eq!(state, Some(JobState::Waiting));
    assert_eq!(c.cancel("flows_p", &p).await.unwrap(), Cancelled::Removed);
    assert_eq!(c.cancel("flows_p", &p).await.unwrap(), Cancelled::NotFound);
    if env.is_redis() {
        // the once marks that keep it from being sent or failed later are
        // scored far ahead: the sends' trim of marks over 7 days old never
        // takes them, however long the flow runs on
        let marks: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(env.key("flows_p", ":once"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut env.raw().await)
            .await
            .unwrap();
        let year_ahead = 1000.0
            * (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as f64
                + 365.0 * 86_400.0);
        let kept = marks.iter().filter(|(_, at)| *at > year_ahead).count();
        assert_eq!(kept, 2, "{marks:?}");
    }
    let e = c.result::<Parent>(&p).await.unwrap_err();
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("cancelled")),
        "{e}"
    );
    let e = failed(env, &after).await;
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("cancelled")),
        "{e}"
    );
    // its children run on; it never does
    let running = start_serving(worker(env, &seen)).await;
    for _ in 0..200 {
        if seen.ran.lock().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    let mut ran = seen.ran.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran, ["c1", "c2"]);
    let e = c.result::<Parent>(&p).await.unwrap_err();
    assert!(matches!(&e, Error::JobFailed { .. }), "{e}");
    if env.is_redis() {
        // its flow completed, its parent found marked: the marks are scored
        // then, so the sends' trim takes them 7 days on, as the flow's
        // batch goes (they stayed a century ahead, two per cancelled parent
        // for ever)
        let marks: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(env.key("flows_p", ":once"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut env.raw().await)
            .await
            .unwrap();
        let soon = 1000.0
            * (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as f64
                + 60.0);
        let ahead: Vec<_> = marks.iter().filter(|(_, at)| *at > soon).collect();
        assert!(ahead.is_empty(), "still kept far ahead: {marks:?}");
    }
}

/// A parent cancelled while it waits never runs, though its queue is
/// deleted and created again before its children finish: its cancel lived
/// with its queue (the once marks on Redis, the queue's cancelled parents
/// in memory), and the flow sent it to the queue created again. A parent
/// is now sent only while it waits; one gone with its deleted queue does
/// not come back either.
pub async fn a_cancelled_parent_never_runs_though_its_queue_is_deleted_and_created_again(
    env: &Env,
) {
    use redjob::inspect::Cancelled;
    use redjob::queue::{QueueOptions, Queues};
    let c = &env.client;
    let seen = Arc::new(Seen::default());
    let cancelled = c
        .enqueue_flow(Flow::new(&Parent { n: 1 }).child(&child(1)))
        .await
        .unwrap();
    let gone = c
        .enqueue_flow(Flow::new(&Parent { n: 2 }).child(&child(2)))
        .await
        .unwrap();
    assert_eq!(
        c.cancel("flows_p", &cancelled).await.unwrap(),
        Cancelled::Removed
    );
    env.queues().delete_queue("flows_p").await.unwrap();
    env.queues()
        .create_queue("flows_p", QueueOptions::default())
        .await
        .unwrap();
    let running = start_serving(worker(env, &seen)).await;
    for _ in 0..200 {
        if seen.ran.lock().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    let mut ran = seen.ran.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran, ["c1", "c2"], "no parent runs ({cancelled}, {gone})");
}

/// A flow whose parent's queue was deleted while the parent waited does not
/// create that queue again when its children finish (nor send the parent):
/// an operator's deleted queue stays deleted.
pub async fn a_flow_does_not_create_again_its_parents_deleted_queue(env: &Env) {
    use redjob::queue::Queues;
    let seen = Arc::new(Seen::default());
    env.client
        .enqueue_flow(Flow::new(&Parent { n: 1 }).child(&child(1)))
        .await
        .unwrap();
    env.queues().delete_queue("flows_p").await.unwrap();
    // a worker of the child's queue alone
    let w = Worker::builder(env.client.backend())
        .register::<Child>()
        .data(seen.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let running = start_serving(w).await;
    for _ in 0..200 {
        if !seen.ran.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // the child's settle fires its flow
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    assert_eq!(*seen.ran.lock().unwrap(), ["c1"]);
    let queues = env.queues().list_queues().await.unwrap();
    assert!(
        !queues.iter().any(|q| q == "flows_p"),
        "the parent's deleted queue is back: {queues:?}"
    );
}

/// A flow whose parent's queue was deleted while the parent waited, and
/// whose child dies, does not create that queue again to dead-letter the
/// parent (it was created again, its dead letter in it): the parent went
/// with its queue, as one whose children succeed does.
pub async fn a_failed_flow_does_not_create_again_its_parents_deleted_queue(env: &Env) {
    use redjob::queue::Queues;
    let seen = Arc::new(Seen::default());
    env.client
        .enqueue_flow(Flow::new(&Parent { n: 1 }).child(&Child { n: 1, die: true }))
        .await
        .unwrap();
    env.queues().delete_queue("flows_p").await.unwrap();
    let w = Worker::builder(env.client.backend())
        .register::<Child>()
        .data(seen.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let running = start_serving(w).await;
    for _ in 0..200 {
        if !seen.ran.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // the child's settle fails its flow
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    assert_eq!(*seen.ran.lock().unwrap(), ["c1"]);
    let queues = env.queues().list_queues().await.unwrap();
    assert!(
        !queues.iter().any(|q| q == "flows_p"),
        "the parent's deleted queue is back: {queues:?}"
    );
}

/// A parent gone with its deleted queue, the queue created again since, is
/// not dead-lettered there when its child dies (as it is not sent there when
/// its child succeeds): it went with its queue, and counts as cancelled in
/// the flow above it. It was dead-lettered into the queue made anew, where a
/// requeue of the dead letters ran it.
pub async fn a_parent_gone_with_its_queue_created_again_is_not_dead_lettered_there(env: &Env) {
    use redjob::queue::{QueueOptions, Queues};
    let seen = Arc::new(Seen::default());
    let c = &env.client;
    let mid = Flow::new_in("flows_gone", &Parent { n: 2 }).child(&Child { n: 1, die: true });
    let top = c
        .enqueue_flow(Flow::new(&Parent { n: 3 }).subflow(mid))
        .await
        .unwrap();
    env.queues().delete_queue("flows_gone").await.unwrap();
    env.queues()
        .create_queue("flows_gone", QueueOptions::default())
        .await
        .unwrap();
    let running = start_serving(worker(env, &seen)).await;
    let e = failed(env, &top).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await;
    assert_eq!(*seen.ran.lock().unwrap(), ["c1"], "no parent ran");
    let letters = c.dead_letters("flows_gone", 10).await.unwrap();
    assert!(
        letters.is_empty(),
        "a gone parent dead-lettered: {letters:?}"
    );
    let letter = c.job("flows_p", &top).await.unwrap().unwrap();
    let why = letter.last_error.clone().unwrap_or_default();
    assert!(
        why.contains("a job it waits for failed: flows_gone ") && why.ends_with(" cancelled"),
        "{e} {letter:?}"
    );
}

/// The once marks of failed parents go 7 days on, as the layout says of a
/// queue's once marks: a failure drops some of those over 7 days old, as a
/// marked send does. Only the sends dropped them, so a queue whose flows
/// all failed kept one mark a flow for ever.
pub async fn failed_parents_once_marks_go_7_days_on(env: &Env) {
    let seen = Arc::new(Seen::default());
    let c = &env.client;
    let fail = || Flow::new(&Parent { n: 1 }).child(&Child { n: 1, die: true });
    let first = c.enqueue_flow(fail()).await.unwrap();
    let running = start_serving(worker(env, &seen)).await;
    failed(env, &first).await;
    if env.is_redis() {
        // its mark made 8 days ago
        let old = once_marks(env).await;
        assert_eq!(old.len(), 1, "{old:?}");
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            - 8 * 86_400_000;
        let _: i64 = redis::cmd("ZADD")
            .arg(env.key("flows_p", ":once"))
            .arg("XX")
            .arg(at)
            .arg(&old[0].0)
            .query_async(&mut env.raw().await)
            .await
            .unwrap();
    }
    let second = c.enqueue_flow(fail()).await.unwrap();
    failed(env, &second).await;
    running.stop().await;
    if env.is_redis() {
        let left = once_marks(env).await;
        assert_eq!(left.len(), 1, "the mark over 7 days old is kept: {left:?}");
    }
}

/// The once marks of queue flows_p (on Redis), with their scores.
async fn once_marks(env: &Env) -> Vec<(String, f64)> {
    redis::cmd("ZRANGE")
        .arg(env.key("flows_p", ":once"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut env.raw().await)
        .await
        .unwrap()
}

/// A flow above a parent gone with its deleted queue fails, by its failure
/// policy, its reason naming that queue: whether the gone parent's child
/// succeeded (the parent could not be sent) or died (it could not be
/// dead-lettered). It was never told and waited for ever.
pub async fn a_flow_above_a_parent_gone_with_its_deleted_queue_fails(env: &Env) {
    use redjob::queue::Queues;
    let seen = Arc::new(Seen::default());
    let c = &env.client;
    // top waits for mid, in a queue of its own, which waits for a child
    let mid = Flow::new_in("flows_gone", &Parent { n: 2 }).child(&child(1));
    let top = c
        .enqueue_flow(Flow::new(&Parent { n: 3 }).subflow(mid))
        .await
        .unwrap();
    // the same, mid's child dying, top cancelled on failure
    let mid = Flow::new_in("flows_gone", &Parent { n: 5 }).child(&Child { n: 4, die: true });
    let quiet = c
        .enqueue_flow(Flow::new(&Parent { n: 6 }).subflow(mid).cancel_on_failure())
        .await
        .unwrap();
    env.queues().delete_queue("flows_gone").await.unwrap();
    let running = start_serving(worker(env, &seen)).await;
    let e = failed(env, &top).await;
    let q = failed(env, &quiet).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await;
    let mut ran = seen.ran.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran, ["c1", "c4"], "no parent ran");
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("dead")),
        "{e}"
    );
    let letter = c.job("flows_p", &top).await.unwrap().unwrap();
    let why = letter.last_error.clone().unwrap_or_default();
    assert!(
        why.contains("a job it waits for failed: flows_gone "),
        "{letter:?}"
    );
    assert!(
        matches!(&q, Error::JobFailed { error, .. } if error.contains("cancelled")),
        "{q}"
    );
    let queues = env.queues().list_queues().await.unwrap();
    assert!(!queues.iter().any(|q| q == "flows_gone"), "{queues:?}");
}

pub async fn a_cancelled_child_fails_its_parent_and_a_batch_counts_its_cancelled_jobs(env: &Env) {
    let c = &env.client;
    // no worker: the children wait in their queue
    let parent = c
        .enqueue_flow(
            Flow::new(&Parent { n: 5 })
                .child(&child(1))
                .child(&child(2)),
        )
        .await
        .unwrap();
    let waiting = c.peek("flows_a", 10).await.unwrap();
    assert_eq!(waiting.len(), 2);
    c.cancel("flows_a", &waiting[0].id).await.unwrap();
    // the parent failed at once, naming the cancelled child
    let e = c.result::<Parent>(&parent).await.unwrap_err();
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("dead")),
        "{e}"
    );
    let letter = c.job("flows_p", &parent).await.unwrap().unwrap();
    let why = letter.last_error.clone().unwrap_or_default();
    assert!(
        why.contains(&format!("flows_a {} cancelled", waiting[0].id)),
        "{why}"
    );
    // a batch whose jobs are all cancelled completes, counting them
    let batch = c
        .batch()
        .on_complete_in("flows_cb", &Parent { n: 0 })
        .on_success_in("flows_cb", &Parent { n: 1 })
        .job_in("flows_c", &child(3))
        .job_in("flows_c", &child(4))
        .enqueue()
        .await
        .unwrap();
    for j in c.peek("flows_c", 10).await.unwrap() {
        c.cancel("flows_c", &j.id).await.unwrap();
    }
    let s = c.batch_status(&batch).await.unwrap().unwrap();
    assert_eq!((s.total, s.cancelled, s.succeeded), (2, 2, 0));
    assert!(s.is_complete() && s.completed_ms.is_some());
    // its complete callback only: the batch did not succeed
    let sent = c.peek("flows_cb", 10).await.unwrap();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(String::from_utf8_lossy(&sent[0].body).contains(r#""n":0"#));
}

/// A parent too big for its queue once its flow's status is added.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "flows_big", queue = "flows_small")]
struct Big {
    pad: String,
}

impl Job for Big {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

pub async fn a_parent_too_big_for_its_queue_is_dead_lettered_and_fails_its_chain(env: &Env) {
    let c = &env.client;
    redjob::queue::Queues::create_queue(
        &c.backend(),
        "flows_small",
        redjob::queue::QueueOptions {
            maxsize: 1024,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let seen = Arc::new(Seen::default());
    let big = Flow::new(&Big {
        pad: "x".repeat(900),
    })
    .child(&child(1));
    let top = c
        .enqueue_flow(Flow::new(&Parent { n: 2 }).subflow(big))
        .await
        .unwrap();
    let running = start_serving(worker(env, &seen)).await;
    let e = failed(env, &top).await;
    running.stop().await;
    assert!(matches!(&e, Error::JobFailed { .. }), "{e}");
    let letters = c.dead_letters("flows_small", 10).await.unwrap();
    assert_eq!(letters.len(), 1, "the big parent is dead-lettered");
    assert!(
        letters[0].error.contains("cannot be enqueued") && letters[0].error.contains("maxsize"),
        "{:?}",
        letters[0].error
    );
    let top = c.job("flows_p", &top).await.unwrap().unwrap();
    assert!(
        top.last_error
            .as_deref()
            .is_some_and(|e| e.contains(&format!("flows_small {} dead", letters[0].id))),
        "{top:?}"
    );
}

pub async fn a_flow_waits_for_jobs_enqueued_earlier_finished_or_not(env: &Env) {
    let c = &env.client;
    let seen = Arc::new(Seen::default());
    // one earlier job finishes (with its result), another dies, before any
    // flow waits for them
    let done = c.enqueue(&child(2)).await.unwrap();
    let died = c.enqueue(&Child { n: 3, die: true }).await.unwrap();
    let running = start_serving(worker(env, &seen)).await;
    assert_eq!(
        c.wait_result::<Child>(&done, Duration::from_secs(30))
            .await
            .unwrap(),
        Some(20)
    );
    assert!(
        c.wait_result::<Child>(&died, Duration::from_secs(30))
            .await
            .is_err()
    );
    running.stop().await;
    // one still waits in its queue
    let pending = c.enqueue(&child(1)).await.unwrap();
    let flow = Flow::new(&Parent { n: 1 })
        .after("flows_a", &pending)
        .after("flows_a", &done)
        .child(&child(4));
    let parent = c.enqueue_flow(flow).await.unwrap();
    // a flow after a dead job fails at once, naming it
    let failed_at_once = c
        .enqueue_flow(Flow::new(&Parent { n: 9 }).after("flows_a", &died))
        .await
        .unwrap();
    let letter = c.job("flows_p", &failed_at_once).await.unwrap().unwrap();
    assert!(
        letter
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains(&format!("flows_a {died} dead"))),
        "{letter:?}"
    );
    // a job never enqueued, or in a queue that does not hold it: refused
    let unknown: JobId = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
    let e = c
        .enqueue_flow(
            Flow::new(&Parent { n: 8 })
                .child(&child(77))
                .after("flows_a", &unknown),
        )
        .await
        .unwrap_err();
    // refused before any child was sent
    let queued = c.peek("flows_a", 100).await.unwrap();
    assert!(
        !queued
            .iter()
            .any(|j| String::from_utf8_lossy(&j.body).contains(r#""n":77"#)),
        "{queued:?}"
    );
    assert!(
        matches!(&e, Error::InvalidValue { reason, .. } if reason.contains("past its history's retention")),
        "{e}"
    );
    let running = start_serving(worker(env, &seen)).await;
    let sum = c
        .wait_result::<Parent>(&parent, Duration::from_secs(30))
        .await
        .unwrap();
    running.stop().await;
    assert_eq!(sum, Some(10 + 20 + 40 + 1));
    let read = seen.read.lock().unwrap().clone();
    assert!(
        read.contains(&(1, vec![Some(10), Some(20), Some(40)])),
        "{read:?}"
    );
}

pub async fn a_flow_after_a_waiting_parent_runs_after_it_and_one_after_a_cancelled_job_fails(
    env: &Env,
) {
    let c = &env.client;
    let seen = Arc::new(Seen::default());
    let first = c
        .enqueue_flow(Flow::new(&Parent { n: 1 }).child(&child(1)))
        .await
        .unwrap();
    // waits for a parent that itself waits
    let second = c
        .enqueue_flow(Flow::new(&Parent { n: 2 }).after("flows_p", &first))
        .await
        .unwrap();
    // waits for a job that is then cancelled
    let doomed = c.enqueue(&child(5)).await.unwrap();
    let third = c
        .enqueue_flow(
            Flow::new(&Parent { n: 3 })
                .after("flows_a", &doomed)
                .cancel_on_failure(),
        )
        .await
        .unwrap();
    c.cancel("flows_a", &doomed).await.unwrap();
    let e = c.result::<Parent>(&third).await.unwrap_err();
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("cancelled")),
        "{e}"
    );
    let running = start_serving(worker(env, &seen)).await;
    let got = c
        .wait_result::<Parent>(&second, Duration::from_secs(30))
        .await
        .unwrap();
    running.stop().await;
    // first returns 10 + 1; second reads it and adds 2
    assert_eq!(got, Some(13));
    let ran = seen.ran.lock().unwrap().clone();
    assert!(!ran.contains(&"p3".to_string()), "{ran:?}");
}

pub async fn deleted_jobs_count_as_cancelled_in_their_batches_and_flows(env: &Env) {
    use redjob::queue::Queues;
    let c = &env.client;
    let b = c.backend();
    // a flow's child deleted (as an RSMQ client's deleteMessage would)
    let parent = c
        .enqueue_flow(Flow::new(&Parent { n: 1 }).child_in("flows_d", &child(1)))
        .await
        .unwrap();
    let queued = c.peek("flows_d", 10).await.unwrap();
    assert!(Queues::delete(&b, "flows_d", &queued[0].id).await.unwrap());
    let e = c.result::<Parent>(&parent).await.unwrap_err();
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("dead")),
        "{e}"
    );
    // a job a flow waits for, deleted in a bulk delete with a batch's jobs
    let earlier = c
        .enqueue_with(
            &child(2),
            redjob::client::EnqueueOptions::new().queue("flows_e"),
        )
        .await
        .unwrap();
    let waiting = c
        .enqueue_flow(
            Flow::new(&Parent { n: 2 })
                .after("flows_e", &earlier)
                .cancel_on_failure(),
        )
        .await
        .unwrap();
    let batch = c
        .batch()
        .job_in("flows_e", &child(3))
        .job_in("flows_e", &child(4))
        .enqueue()
        .await
        .unwrap();
    let all: Vec<JobId> = c
        .peek("flows_e", 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(all.len(), 3);
    assert_eq!(Queues::delete_batch(&b, "flows_e", &all).await.unwrap(), 3);
    let e = c.result::<Parent>(&waiting).await.unwrap_err();
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("cancelled")),
        "{e}"
    );
    let s = c.batch_status(&batch).await.unwrap().unwrap();
    assert_eq!((s.total, s.cancelled), (2, 2));
    assert!(s.is_complete());
}

pub async fn purged_jobs_count_as_cancelled_in_their_batches_and_flows(env: &Env) {
    use redjob::ops::Admin;
    let c = &env.client;
    // a flow's child, a job another flow waits for, and a batch's jobs, all
    // in one queue that is purged
    let parent = c
        .enqueue_flow(Flow::new(&Parent { n: 1 }).child_in("flows_g", &child(1)))
        .await
        .unwrap();
    let earlier = c
        .enqueue_with(
            &child(2),
            redjob::client::EnqueueOptions::new().queue("flows_g"),
        )
        .await
        .unwrap();
    let waiting = c
        .enqueue_flow(
            Flow::new(&Parent { n: 2 })
                .after("flows_g", &earlier)
                .cancel_on_failure(),
        )
        .await
        .unwrap();
    let batch = c
        .batch()
        .job_in("flows_g", &child(3))
        .job_in("flows_g", &child(4))
        .enqueue()
        .await
        .unwrap();
    assert_eq!(c.purge_queue("flows_g").await.unwrap(), 4);
    let e = c.result::<Parent>(&parent).await.unwrap_err();
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("dead") && error.contains("cancelled")),
        "{e}"
    );
    let e = c.result::<Parent>(&waiting).await.unwrap_err();
    assert!(
        matches!(&e, Error::JobFailed { error, .. } if error.contains("was cancelled")),
        "{e}"
    );
    let s = c.batch_status(&batch).await.unwrap().unwrap();
    assert_eq!((s.total, s.cancelled), (2, 2), "{s:?}");
    assert!(s.is_complete());
}

/// On Redis: no flow is registered as waiting for a job of `flows_a` any more.
async fn no_registrations_left(env: &Env) {
    if env.is_redis() {
        let mut raw = env.raw().await;
        let left: u64 = redis::cmd("HLEN")
            .arg(env.key("flows_a", ":deps"))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(left, 0, "the registrations went");
    }
}

/// Rewrites the registrations of flows waiting for `job` (queue `flows_a`)
/// as a release before the count form kept them: one field, the job's id,
/// holding the list. Returns how many there were.
async fn legacy_registrations(env: &Env, job: &JobId) -> usize {
    let mut raw = env.raw().await;
    let key = env.key("flows_a", ":deps");
    let fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    let mut list: Vec<(u32, String)> = fields
        .iter()
        .filter_map(|(f, v)| Some((f.split_once(':')?.1.parse().ok()?, v.clone())))
        .collect();
    list.sort();
    let old: Vec<String> = list.into_iter().map(|(_, v)| v).collect();
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg(job.as_str())
        .arg(old.join(","))
        .query_async(&mut raw)
        .await
        .unwrap();
    old.len()
}

pub async fn many_flows_wait_for_one_job_and_all_run_once_it_succeeds(env: &Env) {
    let c = &env.client;
    let seen = Arc::new(Seen::default());
    let pending = c.enqueue(&child(5)).await.unwrap();
    let mut parents = Vec::new();
    for n in 0..100 {
        let flow = Flow::new(&Parent { n: 100 + n }).after("flows_a", &pending);
        parents.push(c.enqueue_flow(flow).await.unwrap());
        if n == 19 && env.is_redis() {
            // the first twenty as a release before this one kept them: the
            // job's list itself (read, and appended to, as it is)
            assert_eq!(legacy_registrations(env, &pending).await, 20);
        }
    }
    // a hundred wait, the most: one more is refused, before it sends a job
    let e = c
        .enqueue_flow(
            Flow::new(&Parent { n: 999 })
                .child(&child(9))
                .after("flows_a", &pending),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidValue { reason, .. } if reason.contains("100 flows waiting")),
        "{e}"
    );
    let running = start_serving(worker(env, &seen)).await;
    for p in &parents {
        let got = c
            .wait_result::<Parent>(p, Duration::from_secs(30))
            .await
            .unwrap();
        assert!(got.is_some(), "parent {p} ran");
    }
    running.stop().await;
    let read = seen.read.lock().unwrap().clone();
    assert_eq!(read.len(), 100, "each parent once, the one refused never");
    let ran = seen.ran.lock().unwrap().clone();
    assert!(
        !ran.contains(&"c9".to_string()),
        "the refused flow sent no job: {ran:?}"
    );
    assert!(read.iter().all(|(_, r)| *r == [Some(50)]), "{read:?}");
    no_registrations_left(env).await;
}

pub async fn flows_cancelled_while_they_wait_for_a_job_make_room_for_more(env: &Env) {
    let c = &env.client;
    let seen = Arc::new(Seen::default());
    let pending = c.enqueue(&child(5)).await.unwrap();
    for n in 0..100 {
        let flow = Flow::new(&Parent { n: 100 + n }).after("flows_a", &pending);
        c.enqueue_flow(flow).await.unwrap();
    }
    if env.is_redis() {
        // kept as a release before the count form kept them: the job's list
        // itself, which the drop rewrites in the count form
        legacy_registrations(env, &pending).await;
    }
    // every one of them cancelled (as an enqueue that failed part way, or
    // an operator, cancels its flow): none of them waits any more
    let flows = c.batches(None, 1000).await.unwrap();
    assert_eq!(flows.len(), 100, "{flows:?}");
    for s in &flows {
        let id: redjob::ops::BatchId = s.id.parse().unwrap();
        assert!(c.cancel_batch(&id).await.unwrap(), "{id}");
    }
    // so one more may wait for the job: the cancelled ones took no place
    let kept = c
        .enqueue_flow(Flow::new(&Parent { n: 999 }).after("flows_a", &pending))
        .await
        .unwrap();
    let running = start_serving(worker(env, &seen)).await;
    let got = c
        .wait_result::<Parent>(&kept, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(got.is_some(), "the flow enqueued last ran");
    running.stop().await;
    let read = seen.read.lock().unwrap().clone();
    assert_eq!(
        read,
        [(999, vec![Some(50)])],
        "the cancelled flows never ran"
    );
    no_registrations_left(env).await;
}

pub async fn a_popped_job_counts_as_succeeded_in_its_batch_and_flow(env: &Env) {
    use redjob::queue::Queues;
    let c = &env.client;
    let b = c.backend();
    // a flow's child and a batch's two jobs, all popped by a consumer that
    // runs them itself
    let parent = c
        .enqueue_flow(Flow::new(&Parent { n: 1 }).child_in("flows_h", &child(1)))
        .await
        .unwrap();
    let batch = c
        .batch()
        .job_in("flows_h", &child(2))
        .job_in("flows_h", &child(3))
        .enqueue()
        .await
        .unwrap();
    let first = Queues::pop(&b, "flows_h").await.unwrap();
    assert!(first.is_some());
    assert_eq!(Queues::pop_due(&b, "flows_h", 10).await.unwrap().len(), 2);
    let s = c.batch_status(&batch).await.unwrap().unwrap();
    assert_eq!((s.total, s.succeeded), (2, 2), "{s:?}");
    assert!(s.is_complete());
    // the flow's parent no longer waits: it was enqueued
    let p = c.job("flows_p", &parent).await.unwrap().unwrap();
    assert_eq!(p.state, redjob::inspect::JobState::Ready, "{p:?}");
}
