//! What a subscriber's worker holds and reads: a subscriber removed while
//! its events run is said once, not warned about each renewal, and a dropped
//! worker's blocked read takes no event published after it. Each case runs
//! on the memory backend and on a private redis-server.

mod common;
#[path = "common/logs.rs"]
mod logs;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::RedisServer;
use logs::Lines;
use redjob::backend::memory::MemoryBackend;
use redjob::topic::{Event, Start, Topics};
use redjob::{Client, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

#[derive(Serialize, Deserialize, Event)]
#[event(name = "parcel", topic = "parcels")]
struct Parcel {
    n: u64,
}

/// "`client.unsubscribe(topic, subscriber)` deletes a subscriber with its
/// pending events": its running events go on, and their renewals find them
/// held by no consumer. That is said once, at info, not as "another consumer
/// claimed this running event" each third of the lease until the runs end
/// (as the old code warned: a renewal could not tell a removed subscriber
/// from a claim), and their settle is no error.
async fn a_subscriber_removed_while_its_events_run_is_said_once(client: &Client, lines: &Lines) {
    client
        .subscribe("parcels", "s", Start::Beginning)
        .await
        .unwrap();
    client.publish(&Parcel { n: 1 }).await.unwrap();
    let started = Arc::new(AtomicU32::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let (seen, wait) = (started.clone(), gate.clone());
    let worker = Worker::builder(client.backend())
        .handle_signals(false)
        .lease(Duration::from_secs(1))
        .subscribe("s", move |_: Parcel, _ctx| {
            seen.fetch_add(1, Ordering::SeqCst);
            let wait = wait.clone();
            async move {
                wait.acquire().await.unwrap().forget();
                Ok::<(), JobError>(())
            }
        })
        .build()
        .unwrap();
    let running = common::start(worker);
    assert!(
        common::wait_for(Duration::from_secs(5), || async {
            started.load(Ordering::SeqCst) == 1
        })
        .await
    );
    assert!(client.unsubscribe("parcels", "s").await.unwrap());
    // six renewals while it runs on
    tokio::time::sleep(Duration::from_secs(2)).await;
    gate.add_permits(1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    let text = lines.text();
    let said = text
        .matches("no longer pending in their subscriber")
        .count();
    assert!(
        !text.contains("another consumer claimed")
            && !text.contains("could not settle")
            && said == 1,
        "{text}"
    );
}

#[tokio::test]
async fn a_subscriber_removed_while_its_events_run_is_said_once_on_memory() {
    let lines = Lines::default();
    // this test's runtime has one thread: the worker's tasks log through it too
    let _log = tracing::subscriber::set_default(lines.subscriber());
    let client = Client::memory(MemoryBackend::new());
    a_subscriber_removed_while_its_events_run_is_said_once(&client, &lines).await;
}

#[tokio::test]
async fn a_subscriber_removed_while_its_events_run_is_said_once_on_redis() {
    let lines = Lines::default();
    let _log = tracing::subscriber::set_default(lines.subscriber());
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    a_subscriber_removed_while_its_events_run_is_said_once(&client, &lines).await;
}

/// "The events of a consumer that died are claimed by a live one after the
/// worker's lease": of a worker dropped (as a killed process) while its
/// subscriber waits in a blocking read, an event published just after is
/// not taken by that read for a consumer that is gone, to wait a lease: the
/// next worker runs it at once. The old code left the read to run in its
/// task, which took the event (on Redis, its connection stayed open).
async fn a_dropped_workers_blocked_read_takes_no_event(
    client: &Client,
    server: Option<&RedisServer>,
) {
    client
        .subscribe("parcels", "s", Start::Beginning)
        .await
        .unwrap();
    let lease = Duration::from_secs(30);
    let worker = Worker::builder(client.backend())
        .handle_signals(false)
        .lease(lease)
        .subscribe("s", |_: Parcel, _ctx| async { Ok::<(), JobError>(()) })
        .build()
        .unwrap();
    let dropped = tokio::spawn(worker.run_until_stopped());
    // its read waits for an event
    match server {
        Some(server) => {
            let con = server.raw().await;
            let blocked = common::wait_for(Duration::from_secs(5), || {
                let mut con = con.clone();
                async move {
                    let list: String = redis::cmd("CLIENT")
                        .arg("LIST")
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    list.lines().any(|l| l.contains("cmd=xreadgroup"))
                }
            })
            .await;
            assert!(blocked, "no blocked read");
        }
        None => tokio::time::sleep(Duration::from_millis(300)).await,
    }
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.publish(&Parcel { n: 1 }).await.unwrap();
    let ran = Arc::new(AtomicU32::new(0));
    let seen = ran.clone();
    let worker = Worker::builder(client.backend())
        .handle_signals(false)
        .lease(lease)
        .subscribe("s", move |_: Parcel, _ctx| {
            seen.fetch_add(1, Ordering::SeqCst);
            async { Ok::<(), JobError>(()) }
        })
        .build()
        .unwrap();
    let running = common::start(worker);
    let on_time = common::wait_for(Duration::from_secs(5), || async {
        ran.load(Ordering::SeqCst) == 1
    })
    .await;
    running.stop().await;
    assert!(
        on_time,
        "the event published after the worker was dropped did not run within 5 s"
    );
}

#[tokio::test]
async fn a_dropped_workers_blocked_read_takes_no_event_on_memory() {
    let client = Client::memory(MemoryBackend::new());
    a_dropped_workers_blocked_read_takes_no_event(&client, None).await;
}

#[tokio::test]
async fn a_dropped_workers_blocked_read_takes_no_event_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    a_dropped_workers_blocked_read_takes_no_event(&client, Some(&server)).await;
}

/// "A settle names the delivery it settles (its count and the epoch…)": the
/// events a blocking read delivers after a rewind made during its wait
/// belong to the rewind's epoch, and their acknowledgement is applied. The
/// old code tagged them with the epoch read as the wait began (before the
/// rewind): their acknowledgement was not applied, and they ran again after a
/// lease.
#[tokio::test]
async fn a_blocking_read_across_a_rewind_delivers_in_the_rewinds_epoch_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let b = client.backend();
    client
        .subscribe("parcels", "s", Start::Beginning)
        .await
        .unwrap();
    let first = client.publish(&Parcel { n: 1 }).await.unwrap();
    let got = b
        .read("parcels", "s", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    // a read that waits for the next event
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move {
            b.read("parcels", "s", "c2", 10, Duration::from_secs(10))
                .await
                .unwrap()
                .unwrap()
        })
    };
    let con = server.raw().await;
    let blocked = common::wait_for(Duration::from_secs(5), || {
        let mut con = con.clone();
        async move {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut con)
                .await
                .unwrap();
            list.lines().any(|l| l.contains("cmd=xreadgroup"))
        }
    })
    .await;
    assert!(blocked, "no blocked read");
    client
        .rewind("parcels", "s", Start::Beginning)
        .await
        .unwrap();
    client.publish(&Parcel { n: 2 }).await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the read returns")
        .unwrap();
    assert_eq!(read.len(), 2);
    assert_eq!((read[0].id, read[0].deliveries), (first, 1), "replayed");
    let acks = redjob::topic::EventSettle {
        acks: read.iter().map(|e| e.delivery()).collect(),
        ..Default::default()
    };
    b.settle_events("parcels", "s", "c2", &acks, None)
        .await
        .unwrap();
    let s = client.topic("parcels").await.unwrap().unwrap().subscribers[0].clone();
    assert_eq!(
        s.pending, 0,
        "the read's deliveries were not acknowledged: {s:?}"
    );
}

/// topic_read_epoch.lua, which tags a read's events when the epoch changed
/// while it ran, in each ordering: events a read delivered after the rewind
/// belong to its epoch; events it delivered before a rewind that took the
/// subscriber back before them keep the epoch read first (tagged with the
/// new one, an old run's acknowledgement would take the delivery a read then
/// makes anew); events before the rewind's point (which no read of the new
/// epoch delivers anew) are taken for the new epoch.
#[tokio::test]
async fn a_reads_events_take_the_epoch_they_belong_to_in_each_ordering_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut con = server.raw().await;
    let script = redis::Script::new(include_str!(
        "../src/backend/redis/lua/topic_read_epoch.lua"
    ));
    let (stream, epoch) = ("rsmq:t:{parcels}", "rsmq:t:{parcels}:epoch:s");
    client
        .subscribe("parcels", "s", Start::Beginning)
        .await
        .unwrap();
    let ids = [
        client.publish(&Parcel { n: 1 }).await.unwrap(),
        client.publish(&Parcel { n: 2 }).await.unwrap(),
    ];
    let read = |con: &mut redis::aio::MultiplexedConnection| {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg("s")
            .arg("c2")
            .arg("STREAMS")
            .arg(stream)
            .arg(">");
        let mut con = con.clone();
        async move { cmd.query_async::<redis::Value>(&mut con).await.unwrap() }
    };
    let tags = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        let script = &script;
        async move {
            let mut inv = script.prepare_invoke();
            inv.key(stream).key(epoch).arg("s").arg("c2");
            for id in &ids {
                inv.arg(id.to_string());
            }
            inv.invoke_async::<Vec<i64>>(&mut con).await.unwrap()
        }
    };
    let now = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        async move {
            redis::cmd("GET")
                .arg(epoch)
                .query_async::<i64>(&mut con)
                .await
                .unwrap()
        }
    };
    // read, then a rewind back before both: the epoch read first
    read(&mut con).await;
    client
        .rewind("parcels", "s", Start::Beginning)
        .await
        .unwrap();
    assert_eq!(tags(&mut con).await, [now(&mut con).await, 0, 0]);
    // a rewind, then the read: the rewind's epoch
    read(&mut con).await;
    assert_eq!(tags(&mut con).await, [now(&mut con).await, 1, 1]);
    // read, then a rewind back between them: the first is left behind it
    client
        .rewind("parcels", "s", Start::At(ids[1]))
        .await
        .unwrap();
    assert_eq!(tags(&mut con).await, [now(&mut con).await, 1, 0]);
}

/// "A worker keeps its running events held": one whose hold another consumer
/// claimed (its renewals failed for a lease, say a Redis stall or a network
/// cut on its side) now runs there too, at the same time. The run here is
/// cancelled (its context's token), as a job's run is when its lease is
/// lost, so that a handler that watches it stops instead of running beside
/// the claimer's; its outcome is left to the claimer. The old code only
/// warned "it may run twice" and ran it to its end.
async fn a_run_whose_event_another_consumer_claimed_is_cancelled(client: &Client) {
    client
        .subscribe("parcels", "s", Start::Beginning)
        .await
        .unwrap();
    client.publish(&Parcel { n: 1 }).await.unwrap();
    // 0: running, 2: ran its 10 s to the end (a run cancelled is dropped)
    let state = Arc::new(AtomicU32::new(u32::MAX));
    let seen = state.clone();
    // its context's token
    let token = Arc::new(std::sync::Mutex::new(None));
    let kept = token.clone();
    let worker = Worker::builder(client.backend())
        .handle_signals(false)
        .lease(Duration::from_secs(1))
        .subscribe("s", move |_: Parcel, ctx| {
            let seen = seen.clone();
            *kept.lock().unwrap() = Some(ctx.cancellation().clone());
            async move {
                seen.store(0, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(10)).await;
                seen.store(2, Ordering::SeqCst);
                Ok::<(), JobError>(())
            }
        })
        .build()
        .unwrap();
    let running = common::start(worker);
    assert!(
        common::wait_for(Duration::from_secs(5), || async {
            state.load(Ordering::SeqCst) == 0
        })
        .await
    );
    // another consumer of the subscriber takes the running event over
    let claimed = client
        .backend()
        .claim(
            "parcels",
            "s",
            "other",
            Duration::ZERO,
            10,
            redjob::topic::EventId::ZERO,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.events.len(), 1);
    // the next renewal (a third of the lease) finds it claimed
    let cancelled = common::wait_for(Duration::from_secs(3), || async {
        token
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|t| t.is_cancelled())
    })
    .await;
    running.stop().await;
    assert!(
        cancelled,
        "the run was not cancelled (state {})",
        state.load(Ordering::SeqCst)
    );
    assert_eq!(state.load(Ordering::SeqCst), 0, "it ran to its end");
    // its outcome is the claimer's: the event is still pending there
    let s = &client.topic("parcels").await.unwrap().unwrap().subscribers[0];
    assert_eq!(s.pending, 1);
    let renewed = client
        .backend()
        .renew("parcels", "s", "other", &[claimed.events[0].id])
        .await
        .unwrap();
    assert_eq!(renewed, [redjob::topic::Renewed::Held]);
}

#[tokio::test]
async fn a_run_whose_event_another_consumer_claimed_is_cancelled_on_memory() {
    let client = Client::memory(MemoryBackend::new());
    a_run_whose_event_another_consumer_claimed_is_cancelled(&client).await;
}

#[tokio::test]
async fn a_run_whose_event_another_consumer_claimed_is_cancelled_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    a_run_whose_event_another_consumer_claimed_is_cancelled(&client).await;
}

/// "Runs one event of the subscriber at a time, across all its worker
/// processes": an owner that lost the ordered subscriber while it waited to
/// retry an event in place (its ownership went to another worker) does not
/// run the event again when the wait ends, beside the new owner. The old
/// code slept out the backoff without looking and started the retry (its
/// handler called) under the cancelled ownership.
#[tokio::test]
async fn an_owner_that_lost_its_ordered_subscriber_during_a_retry_wait_runs_it_no_more_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("parcels", "s", Start::Beginning)
        .await
        .unwrap();
    client.publish(&Parcel { n: 1 }).await.unwrap();
    let attempts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = attempts.clone();
    let worker = Worker::builder(client.backend())
        .handle_signals(false)
        .lease(Duration::from_secs(3))
        .subscribe(
            redjob::topic::Subscription::new("s").ordered(),
            move |_: Parcel, ctx| {
                // recorded as the handler is called
                seen.lock().unwrap().push(ctx.attempt());
                async move {
                    Err::<(), JobError>(JobError::retry_after(
                        std::io::Error::other("down"),
                        Duration::from_millis(2500),
                    ))
                }
            },
        )
        .build()
        .unwrap();
    let running = common::start(worker);
    assert!(
        common::wait_for(Duration::from_secs(5), || async {
            !attempts.lock().unwrap().is_empty()
        })
        .await
    );
    // another worker owns the subscriber now (this one's next renewal, a
    // second on, finds it so)
    let mut con = server.raw().await;
    let _: () = redis::cmd("SET")
        .arg("rsmq:t:{parcels}:owner:s")
        .arg("other")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut con)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let ran = attempts.lock().unwrap().clone();
    running.stop().await;
    assert_eq!(ran, [1], "attempts run here");
}

/// A TCP proxy on a free loopback port to `port` that forwards nothing
/// either way while `stalled` is set (a network cut on one worker's side:
/// its calls go unanswered), and forwards again once it is cleared.
async fn stalling_proxy(port: u16, stalled: Arc<std::sync::atomic::AtomicBool>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxied = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                continue;
            };
            let (ir, iw) = inbound.into_split();
            let (or, ow) = outbound.into_split();
            for (mut from, mut to) in [
                (
                    Box::new(ir) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
                    Box::new(ow) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
                ),
                (Box::new(or) as _, Box::new(iw) as _),
            ] {
                let stalled = stalled.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let Ok(n) = from.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        while stalled.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        if to.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    proxied
}

/// "A worker keeps its running events held" by renewals every third of the
/// lease; when they go unanswered for a whole lease (a network cut on the
/// worker's side, Redis stalled for it), another consumer may claim the
/// event and run it. The run here is cancelled when its hold runs out on
/// the worker's clock (from when the read or the last renewal that
/// answered was sent), as a job's run whose lease ran out without a
/// renewal, rather than run on beside the claimer's. The old code ran it to
/// its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_hold_ran_out_unrenewed_is_cancelled_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("parcels", "s", Start::Beginning)
        .await
        .unwrap();
    let stalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = stalling_proxy(server.port, stalled.clone()).await;
    let cut_off = Client::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap();
    let state = Arc::new(AtomicU32::new(u32::MAX));
    let seen = state.clone();
    let token = Arc::new(std::sync::Mutex::new(None));
    let kept = token.clone();
    let worker = Worker::builder(cut_off.backend())
        .handle_signals(false)
        .lease(Duration::from_secs(1))
        .subscribe("s", move |_: Parcel, ctx| {
            let seen = seen.clone();
            *kept.lock().unwrap() = Some(ctx.cancellation().clone());
            async move {
                seen.store(0, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(10)).await;
                seen.store(2, Ordering::SeqCst);
                Ok::<(), JobError>(())
            }
        })
        .build()
        .unwrap();
    let running = common::start(worker);
    tokio::time::sleep(Duration::from_millis(300)).await;
    client.publish(&Parcel { n: 1 }).await.unwrap();
    assert!(
        common::wait_for(Duration::from_secs(5), || async {
            state.load(Ordering::SeqCst) == 0
        })
        .await
    );
    stalled.store(true, Ordering::SeqCst);
    // within a lease and a bit of its renewals' going unanswered
    let cancelled = common::wait_for(Duration::from_secs(3), || async {
        token
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|t| t.is_cancelled())
    })
    .await;
    let ran = state.load(Ordering::SeqCst);
    stalled.store(false, Ordering::SeqCst);
    running.stop().await;
    assert!(cancelled, "the run was not cancelled (state {ran})");
    assert_eq!(ran, 0, "it ran to its end");
}
