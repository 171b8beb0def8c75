//! Topic subscribers while Redis is out of memory (`maxmemory` with
//! `noeviction`): publishing is refused with `Error::OutOfMemory`, but a
//! worker keeps draining what was published: it dead-letters the events it
//! gives up on, and an ordered subscriber is taken and held. Redis refuses a
//! script whose first write could grow memory, so each of these scripts
//! starts with one that cannot. Making a subscriber and rewinding one are
//! refused whole.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{RedisServer, start, wait_for, wait_until};
use redjob::topic::{Event, Start, Subscription};
use redjob::{Client, Error, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Event)]
#[event(name = "oom_note", topic = "oom")]
struct Note {
    n: u64,
}

/// Puts the server over its `maxmemory` (half of what it uses now), and
/// checks that a publish is refused for it.
async fn out_of_memory(server: &RedisServer, client: &Client) {
    let mut raw = server.raw().await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut raw)
        .await
        .unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used / 2)
        .query_async(&mut raw)
        .await
        .unwrap();
    let refused = client.publish(&Note { n: 99 }).await.unwrap_err();
    assert!(matches!(refused, Error::OutOfMemory(_)), "{refused:?}");
}

/// The subscriber `name` of "oom": (pending, dead letters).
async fn state(client: &Client, name: &str) -> (u64, u64) {
    let info = client.topic("oom").await.unwrap().unwrap();
    let s = info.subscribers.iter().find(|s| s.name == name).unwrap();
    (s.pending, s.dead)
}

/// Events given up on are dead-lettered while Redis is out of memory: a
/// settle that only dead-letters (no acknowledgement first) began with the
/// dead letter's `XADD`, which Redis refuses over maxmemory; the settle failed
/// 8 times, and the events ran again after each lease, for as long as memory
/// stayed full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_given_up_on_are_dead_lettered_out_of_memory() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("oom", "s", Start::Beginning)
        .await
        .unwrap();
    for n in 0..5 {
        client.publish(&Note { n }).await.unwrap();
    }
    out_of_memory(&server, &client).await;
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let worker = Worker::builder(client.backend())
        .handle_signals(false)
        .lease(Duration::from_secs(2))
        .subscribe("s", move |_: Note, _ctx| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { Err(JobError::fatal("never")) }
        })
        .build()
        .unwrap();
    let running = start(worker);
    let drained = wait_for(Duration::from_secs(8), || async {
        state(&client, "s").await == (0, 5)
    })
    .await;
    assert!(
        drained,
        "(pending, dead letters): {:?}",
        state(&client, "s").await
    );
    assert_eq!(runs.load(Ordering::SeqCst), 5);
    // what would grow memory is refused whole: a subscriber made, a rewind
    // (its reads deliver the events again)
    let made = client.subscribe("oom", "new", Start::Beginning).await;
    assert!(matches!(made, Err(Error::OutOfMemory(_))), "{made:?}");
    let rewound = client.rewind("oom", "s", Start::Beginning).await;
    assert!(matches!(rewound, Err(Error::OutOfMemory(_))), "{rewound:?}");
    running.stop().await;
}

/// What an ordered subscriber's handler saw: per run, the event and whether
/// its run was cancelled.
type Seen = Arc<Mutex<Vec<(u64, bool)>>>;

/// A worker serving "oom" with the ordered subscriber "o" (lease 1.5 s):
/// event 0 runs for 4 s (past two leases: its ownership must be renewed), the
/// others at once.
fn ordered_worker(client: &Client, seen: &Seen) -> Worker {
    let seen = seen.clone();
    Worker::builder(client.backend())
        .handle_signals(false)
        .lease(Duration::from_millis(1500))
        .subscribe(Subscription::new("o").ordered(), move |e: Note, ctx| {
            let seen = seen.clone();
            async move {
                if e.n == 0 {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(4)) => {}
                        _ = ctx.cancellation().cancelled() => {}
                    }
                }
                let cancelled = ctx.cancellation().is_cancelled();
                seen.lock().unwrap().push((e.n, cancelled));
                Ok(())
            }
        })
        .build()
        .unwrap()
}

/// A worker started while Redis is out of memory takes an ordered subscriber
/// (whose owner is gone) and runs its events: taking it began with the
/// owner's `SET`, which Redis refuses over maxmemory, and nothing ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_subscriber_is_taken_out_of_memory() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("oom", "o", Start::Beginning)
        .await
        .unwrap();
    for n in 1..4 {
        client.publish(&Note { n }).await.unwrap();
    }
    out_of_memory(&server, &client).await;
    let seen = Seen::default();
    let running = start(ordered_worker(&client, &seen));
    let ran = wait_until(Duration::from_secs(8), || seen.lock().unwrap().len() == 3).await;
    assert!(ran, "ran {:?}", seen.lock().unwrap());
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(1, false), (2, false), (3, false)]
    );
    assert!(
        wait_for(Duration::from_secs(5), || async {
            state(&client, "o").await.0 == 0
        })
        .await
    );
    running.stop().await;
}

/// An ordered subscriber's owner keeps it while Redis is out of memory: its
/// renewal (a `SET` of the owner) was refused over maxmemory, so the owner
/// gave it up two thirds into the lease, cancelling the event it ran, and
/// could not take it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_subscriber_is_held_out_of_memory() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("oom", "o", Start::Beginning)
        .await
        .unwrap();
    for n in 0..3 {
        client.publish(&Note { n }).await.unwrap();
    }
    let seen = Seen::default();
    let running = start(ordered_worker(&client, &seen));
    // event 0 runs (it is pending) before memory runs out
    assert!(
        wait_for(Duration::from_secs(5), || async {
            state(&client, "o").await.0 >= 1
        })
        .await
    );
    out_of_memory(&server, &client).await;
    let ran = wait_until(Duration::from_secs(10), || seen.lock().unwrap().len() == 3).await;
    assert!(ran, "ran {:?}", seen.lock().unwrap());
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(0, false), (1, false), (2, false)]
    );
    running.stop().await;
}
