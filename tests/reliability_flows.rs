//! Flows and batches whose enqueue stops part way, on Redis: an enqueue
//! dropped (a timeout, a cancelled task) cancels its groups at once, one whose
//! enqueuer died (left unsealed, nobody to cancel it) is cancelled by a
//! worker's sweep an hour after it was opened, and a cancelled batch that
//! can never complete still expires (on the memory backend too). A cancel
//! that loses a race with the batch's completion leaves it unlisted for the
//! workers.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{RedisServer, start_serving};
use redjob::client::Flow;
use redjob::ops::BatchStatus;
use redjob::{Client, Error, Job, JobContext, JobError, JobId, Worker};
use serde::{Deserialize, Serialize};

#[derive(Default)]
struct Seen {
    ran: Mutex<Vec<String>>,
}

/// Notes that `what` ran.
fn ran(ctx: &JobContext, what: String) -> Result<(), JobError> {
    ctx.data::<Seen>()?.ran.lock().unwrap().push(what);
    Ok(())
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "rf_child", queue = "rf_c", max_attempts = 1)]
struct Child {
    n: u32,
}

impl Job for Child {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ran(ctx, format!("c{}", self.n))
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "rf_parent", queue = "rf_p")]
struct Parent {
    n: u32,
}

impl Job for Parent {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ran(ctx, format!("p{}", self.n))
    }
}

fn worker(c: &Client, seen: &Arc<Seen>) -> Worker {
    Worker::builder(c.backend())
        .register::<Child>()
        .register::<Parent>()
        .data(seen.clone())
        .lease(Duration::from_secs(3))
        .handle_signals(false)
        .build()
        .unwrap()
}

/// A chain parent (p1) above a parent (p2) of `n` children.
fn big_flow(n: u32) -> Flow {
    let inner = (0..n).fold(Flow::new(&Parent { n: 2 }), |f, i| f.child(&Child { n: i }));
    Flow::new(&Parent { n: 1 }).subflow(inner)
}

/// Every batch listed, once each has its parent named (open ones too).
async fn batches(c: &Client) -> Vec<BatchStatus> {
    c.batches(None, 100).await.unwrap()
}

/// Polls `fut`, an enqueue, until it opened its first batch, then leaves it
/// where it is (not polled again here).
async fn poll_until_opened<F>(fut: &mut F, con: &mut redis::aio::MultiplexedConnection)
where
    F: std::future::Future + Unpin,
    F::Output: std::fmt::Debug,
{
    loop {
        tokio::select! {
            r = &mut *fut => panic!("the enqueue finished first: {r:?}"),
            _ = tokio::time::sleep(Duration::from_millis(1)) => {}
        }
        let n: u64 = redis::cmd("ZCARD")
            .arg("rsmq:@batches")
            .query_async(con)
            .await
            .unwrap();
        if n > 0 {
            return;
        }
    }
}

/// [`poll_until_opened`], then pauses Redis's writes and polls `fut` 200 ms
/// more: it waits on a call Redis holds, part way. Writes resume with
/// `CLIENT UNPAUSE`.
async fn hold_part_way<F>(fut: &mut F, con: &mut redis::aio::MultiplexedConnection)
where
    F: std::future::Future + Unpin,
    F::Output: std::fmt::Debug,
{
    poll_until_opened(fut, con).await;
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query_async(con)
        .await
        .unwrap();
    tokio::select! {
        r = &mut *fut => panic!("the enqueue finished while Redis held its writes: {r:?}"),
        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
    }
}

async fn unpause(con: &mut redis::aio::MultiplexedConnection) {
    let () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(con)
        .await
        .unwrap();
}

fn parent_of(s: &BatchStatus) -> JobId {
    let p = s
        .parent
        .as_deref()
        .expect("a flow's batch names its parent");
    p.split(' ').nth(1).unwrap().parse().unwrap()
}

/// Waits until every flow parent of the batches listed has failed as
/// cancelled, up to `limit`; the parents' results then.
async fn parents_fail(c: &Client, limit: Duration) -> Vec<Result<Option<()>, Error>> {
    let until = std::time::Instant::now() + limit;
    loop {
        let mut out = Vec::new();
        for s in batches(c).await {
            out.push(c.result::<Parent>(&parent_of(&s)).await);
        }
        let failed = |r: &Result<Option<()>, Error>| matches!(r, Err(Error::JobFailed { error, .. }) if error.contains("cancelled"));
        if (!out.is_empty() && out.iter().all(failed)) || std::time::Instant::now() > until {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `running` until each of the `n` flow parents listed has failed as
/// cancelled, then stops it; none of them ran.
async fn all_parents_fail(c: &Client, running: common::Running, n: usize, seen: &Seen) {
    let results = parents_fail(c, Duration::from_secs(20)).await;
    running.stop().await;
    assert_eq!(results.len(), n);
    for r in &results {
        assert!(
            matches!(r, Err(Error::JobFailed { error, .. }) if error.contains("cancelled")),
            "a parent of a flow enqueued part way fails as cancelled: {results:?}"
        );
    }
    let ran = seen.ran.lock().unwrap().clone();
    assert!(
        !ran.iter().any(|r| r.starts_with('p')),
        "no parent ran: {ran:?}"
    );
}

#[tokio::test]
async fn a_flow_whose_enqueue_is_dropped_part_way_fails_its_parents_at_once() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let c = Client::connect(&s.url()).await.unwrap();
        let seen = Arc::new(Seen::default());
        let mut con = s.raw().await;
        let mut fut = Box::pin(c.enqueue_flow(big_flow(300)));
        hold_part_way(&mut fut, &mut con).await;
        drop(fut);
        unpause(&mut con).await;
        let listed = batches(&c).await;
        assert!(
            !listed.is_empty() && listed.iter().all(|b| !b.sealed),
            "{listed:?}"
        );
        let running = start_serving(worker(&c, &seen)).await;
        all_parents_fail(&c, running, listed.len(), &seen).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_flow_whose_enqueuer_died_before_its_seal_is_cancelled_by_a_sweep_an_hour_on() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let c = Client::connect(&s.url()).await.unwrap();
        let seen = Arc::new(Seen::default());
        // the enqueuer stops where it is, as a process killed would: its
        // future is never polled again, nor dropped
        let mut con = s.raw().await;
        let mut fut = Box::pin(c.enqueue_flow(big_flow(300)));
        hold_part_way(&mut fut, &mut con).await;
        std::mem::forget(fut);
        unpause(&mut con).await;
        let listed = batches(&c).await;
        assert!(
            !listed.is_empty() && listed.iter().all(|b| !b.sealed),
            "{listed:?}"
        );
        let (secs, us): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await.unwrap();
        let now = secs * 1000 + us / 1000;
        for b in &listed {
            let due: Option<f64> = redis::cmd("ZSCORE")
                .arg("rsmq:{@workers}:bmarks")
                .arg(format!("b{}", b.id))
                .query_async(&mut con)
                .await
                .unwrap();
            let due = due.expect("an open batch is marked for the sweep") as u64;
            let left = due.saturating_sub(now);
            assert!(
                (3_590_000..=3_600_000).contains(&left),
                "the sweep's in an hour: {left} ms"
            );
        }
        // a worker's sweep before the hour leaves them open
        let running = start_serving(worker(&c, &seen)).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            batches(&c)
                .await
                .iter()
                .all(|b| b.cancelled_at_ms.is_none())
        );
        // the hour is over
        for b in &listed {
            let () = redis::cmd("ZADD")
                .arg("rsmq:{@workers}:bmarks")
                .arg(1)
                .arg(format!("b{}", b.id))
                .query_async(&mut con)
                .await
                .unwrap();
        }
        all_parents_fail(&c, running, listed.len(), &seen).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_cancelled_batch_whose_jobs_cannot_finish_expires() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let c = Client::connect(&s.url()).await.unwrap();
        let parent = c
            .enqueue_flow(Flow::new(&Parent { n: 1 }).child(&Child { n: 1 }))
            .await
            .unwrap();
        let b = batches(&c).await.remove(0);
        assert!(b.sealed);
        // the child's queue goes: its job never finishes
        redjob::queue::Queues::delete_queue(&c.backend(), "rf_c")
            .await
            .unwrap();
        assert!(c.cancel_batch(&b.id.parse().unwrap()).await.unwrap());
        let r = c.result::<Parent>(&parent).await;
        assert!(
            matches!(&r, Err(Error::JobFailed { error, .. }) if error.contains("cancelled")),
            "{r:?}"
        );
        let mut con = s.raw().await;
        let ttl: i64 = redis::cmd("PTTL")
            .arg(format!("rsmq:@batch:{}", b.id))
            .query_async(&mut con)
            .await
            .unwrap();
        let week = 7 * 24 * 3600 * 1000;
        assert!(
            ttl > week - 60_000 && ttl <= week,
            "kept 7 days from its cancel: {ttl} ms"
        );
    })
    .await
    .unwrap();
}

/// The enqueue of a batch of 300 jobs: more than one send, so that it can
/// be held part way.
fn batch_of_300(
    c: &Client,
) -> impl std::future::Future<Output = redjob::Result<redjob::ops::BatchId>> + '_ {
    (0..300)
        .fold(c.batch(), |b, n| b.job(&Child { n }))
        .enqueue()
}

#[tokio::test]
async fn a_batch_whose_enqueue_is_dropped_part_way_is_cancelled_at_once() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let c = Client::connect(&s.url()).await.unwrap();
        let mut con = s.raw().await;
        let mut fut = Box::pin(batch_of_300(&c));
        hold_part_way(&mut fut, &mut con).await;
        drop(fut);
        unpause(&mut con).await;
        let until = std::time::Instant::now() + Duration::from_secs(10);
        let listed = loop {
            let listed = batches(&c).await;
            if listed.iter().all(|b| b.cancelled_at_ms.is_some())
                || std::time::Instant::now() > until
            {
                break listed;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(listed.len(), 1);
        assert!(!listed[0].sealed, "{listed:?}");
        assert!(
            listed[0].cancelled_at_ms.is_some(),
            "the batch is cancelled: {listed:?}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_cancelled_batch_whose_jobs_cannot_finish_expires_in_memory() {
    let backend = redjob::backend::memory::MemoryBackend::new();
    let c = Client::memory(backend.clone());
    c.enqueue_flow(Flow::new(&Parent { n: 1 }).child(&Child { n: 1 }))
        .await
        .unwrap();
    let b = batches(&c).await.remove(0);
    let id = b.id.parse().unwrap();
    redjob::queue::Queues::delete_queue(&c.backend(), "rf_c")
        .await
        .unwrap();
    assert!(c.cancel_batch(&id).await.unwrap());
    backend
        .clock()
        .advance(Duration::from_secs(7 * 24 * 3600 - 60));
    assert!(c.batch_status(&id).await.unwrap().is_some(), "kept 7 days");
    backend.clock().advance(Duration::from_secs(61));
    assert!(
        c.batch_status(&id).await.unwrap().is_none(),
        "gone 7 days after its cancel"
    );
}

/// A cancel whose listing for the workers is refused (here by an ACL rule;
/// by an out-of-memory Redis in production) leaves the batch as it was: it
/// said it was cancelled while its jobs, which no worker learned of it, ran.
#[tokio::test]
async fn a_cancel_the_workers_cannot_learn_of_leaves_the_batch_as_it_was() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let mut admin = s.raw().await;
        let () = redis::cmd("ACL")
            .arg(
                &[
                    "SETUSER",
                    "app",
                    "on",
                    ">pw",
                    "+@all",
                    "&*",
                    "%R~*",
                    "~rsmq:[^@]*",
                    "~rsmq:@b*",
                    "~rsmq:@m*",
                    "~rsmq:?@workers*",
                ][..],
            )
            .query_async(&mut admin)
            .await
            .unwrap();
        let url = s.url().replace("redis://", "redis://app:pw@");
        let c = Client::connect(&url).await.unwrap();
        let id = (0..3)
            .fold(c.batch(), |b, n| b.job(&Child { n }))
            .enqueue()
            .await
            .unwrap();
        let e = c.cancel_batch(&id).await.unwrap_err();
        assert!(
            e.to_string().contains("NOPERM") || e.to_string().contains("permission"),
            "{e}"
        );
        let status = c.batch_status(&id).await.unwrap().unwrap();
        assert_eq!(status.cancelled_at_ms, None, "{status:?}");
    })
    .await
    .unwrap();
}

/// A batch cancelled while its enqueue still runs (by an operator, or by a
/// worker's sweep an hour after it was opened) fails that enqueue: it
/// returned the batch's id as if it were enqueued.
#[tokio::test]
async fn a_batch_cancelled_while_its_enqueue_runs_fails_the_enqueue() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let c = Client::connect(&s.url()).await.unwrap();
        let mut con = s.raw().await;
        let mut fut = Box::pin(batch_of_300(&c));
        poll_until_opened(&mut fut, &mut con).await;
        let listed = batches(&c).await;
        assert!(!listed[0].sealed, "{listed:?}");
        assert!(
            c.cancel_batch(&listed[0].id.parse().unwrap())
                .await
                .unwrap()
        );
        let e = fut.await.unwrap_err();
        assert!(
            e.to_string()
                .contains("was cancelled before its enqueue finished"),
            "{e}"
        );
    })
    .await
    .unwrap();
}

/// A TCP proxy on a free loopback port to `port` that holds, once, the
/// first bytes a client sends that contain `needle`: `held` is notified as
/// it holds them, and they go on when `release` is notified.
async fn holding_proxy(
    port: u16,
    needle: &'static [u8],
    held: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
) -> u16 {
    holding_proxy_at(port, vec![needle], held, release).await
}

/// As [`holding_proxy`], holding once at each of `needles` in turn: the
/// first bytes that contain the first needle, then the first bytes after
/// them that contain the second, and so on.
async fn holding_proxy_at(
    port: u16,
    needles: Vec<&'static [u8]>,
    held: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxied = listener.local_addr().unwrap().port();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                continue;
            };
            let (mut from_client, mut to_client) = inbound.into_split();
            let (mut from_server, mut to_server) = outbound.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
            });
            let (held, release, next) = (held.clone(), release.clone(), next.clone());
            let needles = needles.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match from_client.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let at = next.load(std::sync::atomic::Ordering::SeqCst);
                    let hit = needles
                        .get(at)
                        .is_some_and(|needle| buf[..n].windows(needle.len()).any(|w| w == *needle));
                    if hit
                        && next
                            .compare_exchange(
                                at,
                                at + 1,
                                std::sync::atomic::Ordering::SeqCst,
                                std::sync::atomic::Ordering::SeqCst,
                            )
                            .is_ok()
                    {
                        held.notify_one();
                        release.notified().await;
                    }
                    if to_server.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    proxied
}

/// A cancel that races its batch's completion, which wins, lists the batch
/// for the workers as cancelled all the same: the cancel lists it first
/// (`ns:@cancelled`), then cancels it, and a batch that completed in
/// between stays completed, not cancelled (the cancel returns false). The
/// workers, which read that list, then cancel any job of the batch they
/// fetch (a dead letter requeued, a finished job run again) for a week,
/// rather than run it. The cancel's listing is held here (a proxy) while
/// the batch's one job is counted.
#[tokio::test]
async fn a_cancel_that_loses_the_race_with_the_batchs_completion_leaves_it_unlisted() {
    use redjob::backend::Backend;
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let direct = Client::connect(&s.url()).await.unwrap();
        let held = Arc::new(tokio::sync::Notify::new());
        let release = Arc::new(tokio::sync::Notify::new());
        let port = holding_proxy(
            s.url()
                .rsplit(':')
                .next()
                .unwrap()
                .trim_end_matches('/')
                .parse()
                .unwrap(),
            b"\r\nrsmq:@cancelled\r\n",
            held.clone(),
            release.clone(),
        )
        .await;
        let proxied = Client::connect(&format!("redis://127.0.0.1:{port}"))
            .await
            .unwrap();
        let b = direct.backend();
        let id: redjob::ops::BatchId = format!("{:0>32}", 7).parse().unwrap();
        b.batch_open(&redjob::backend::BatchSpec {
            id,
            callbacks: Vec::new(),
            description: None,
            members: 1,
        })
        .await
        .unwrap();
        b.batch_seal(&id, 1).await.unwrap();
        let cancel = tokio::spawn(async move { proxied.cancel_batch(&id).await });
        tokio::time::timeout(Duration::from_secs(10), held.notified())
            .await
            .expect("the cancel lists the batch");
        // its one job succeeds: the batch completes
        b.batch_settled("flows_q", &[format!("{id} 0a")])
            .await
            .unwrap();
        let status = direct.batch_status(&id).await.unwrap().unwrap();
        assert!(status.completed_ms.is_some(), "{status:?}");
        release.notify_one();
        let now = cancel.await.unwrap().unwrap();
        let status = direct.batch_status(&id).await.unwrap().unwrap();
        let listed = b.cancelled_batches(0).await.unwrap();
        assert!(!now, "completed first: not cancelled now");
        assert_eq!(status.cancelled_at_ms, None, "{status:?}");
        assert!(
            listed.iter().all(|(b, _)| *b != id),
            "the completed batch is listed for the workers as cancelled: {listed:?}"
        );
    })
    .await
    .unwrap();
}

/// A worker that read the batches cancelled while a cancel that lost the
/// race with the batch's completion had it listed (between the cancel's
/// listing and its taking it off again, held here by a proxy) runs a job
/// of that batch it fetches: the batch is not cancelled, and the worker
/// keeps what it read for a week. It cancelled it (the job never ran).
#[tokio::test]
async fn a_worker_that_read_a_batch_listed_by_a_cancel_that_lost_the_race_runs_its_jobs() {
    use redjob::backend::Backend;
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let direct = Client::connect(&s.url()).await.unwrap();
        let held = Arc::new(tokio::sync::Notify::new());
        let release = Arc::new(tokio::sync::Notify::new());
        let port: u16 = s
            .url()
            .rsplit(':')
            .next()
            .unwrap()
            .trim_end_matches('/')
            .parse()
            .unwrap();
        // the cancel's listing, then its taking the listing off
        let port = holding_proxy_at(
            port,
            vec![
                b"\r\nrsmq:@cancelled\r\n",
                b"ZREM\r\n$15\r\nrsmq:@cancelled",
            ],
            held.clone(),
            release.clone(),
        )
        .await;
        let proxied = Client::connect(&format!("redis://127.0.0.1:{port}"))
            .await
            .unwrap();
        let id = direct.batch().job(&Child { n: 1 }).enqueue().await.unwrap();
        let cancel = tokio::spawn(async move { proxied.cancel_batch(&id).await });
        tokio::time::timeout(Duration::from_secs(10), held.notified())
            .await
            .expect("the cancel lists the batch");
        // its one job is counted as done (it is still queued, as a job
        // run again would be): the batch completes
        let b = direct.backend();
        b.batch_settled("rf_c", &[format!("{id} 0a")])
            .await
            .unwrap();
        let status = direct.batch_status(&id).await.unwrap().unwrap();
        assert!(status.completed_ms.is_some(), "{status:?}");
        release.notify_one();
        tokio::time::timeout(Duration::from_secs(10), held.notified())
            .await
            .expect("the cancel takes the listing off");
        let listed = b.cancelled_batches(0).await.unwrap();
        assert!(listed.iter().any(|(b, _)| *b == id), "{listed:?}");
        // a worker reads the list now, as it starts the batch's job
        let seen = Arc::new(Seen::default());
        let running = start_serving(worker(&direct, &seen)).await;
        let start = tokio::time::Instant::now();
        // it runs the job, or cancels it (the batch counts it cancelled);
        // the held call is let go before the client's response timeout
        while seen.ran.lock().unwrap().is_empty() && start.elapsed() < Duration::from_secs(3) {
            let status = direct.batch_status(&id).await.unwrap().unwrap();
            if status.cancelled > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        release.notify_one();
        let now = cancel.await.unwrap().unwrap();
        assert!(!now, "completed first: not cancelled now");
        let status = direct.batch_status(&id).await.unwrap().unwrap();
        assert_eq!(status.cancelled_at_ms, None, "{status:?}");
        running.stop().await;
        assert_eq!(
            *seen.ran.lock().unwrap(),
            vec!["c1".to_string()],
            "the job of a batch not cancelled was cancelled (status {status:?})"
        );
    })
    .await
    .unwrap();
}
