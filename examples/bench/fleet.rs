//! Phase 20: an idle fleet. 1,000 jobs sent one by one at 400/s, each running
//! 20 ms, to a queue served by one worker of 80 running slots and by 40
//! workers of 2 (in one process): Redis CPU and commands a job, top-level
//! calls a job (sends, fetches, settles), and enqueue → start p50 and p99. Idle workers
//! wait in line for hand-offs (`redjob:line`): a send that finds the worker in
//! place used up hands the job to the next in line rather than waking every
//! idle worker of the queue to fetch.

use std::sync::Arc;
use std::time::Duration;

use redjob::Client;
use redjob::queue::Queues;
use tokio::time::{MissedTickBehavior, interval};

use crate::jobs::{Napping, Tally, now_us, quantile};
use crate::phases::{Figures, Settings, worker};
use crate::redis::{Server, cost, cpu_us, reset};

/// The fleets measured: how many workers, and each one's running slots.
pub const FLEETS: [(usize, usize); 2] = [(1, 80), (40, 2)];

/// One fleet's figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fleet {
    pub redis_cpu_us: f64,
    pub commands: f64,
    pub calls: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Phase 20: each fleet of `FLEETS`, in turn, on a Redis of its own.
pub async fn fleet(_: &Settings, f: &mut Figures) {
    for (workers, slots) in FLEETS {
        f.fleet.push(one(workers, slots).await);
    }
}

async fn one(workers: usize, slots: usize) -> Fleet {
    let server = Server::start();
    let client = Client::connect(&server.url).await.expect("connect");
    let mut con = server.con().await;
    let n = 1000;
    client
        .enqueue(&Napping { i: u64::MAX, t: 0 })
        .await
        .unwrap();
    client.queues().pop("bench_fleet").await.unwrap();
    let tally = Arc::new(Tally::new(n));
    let mut running = Vec::new();
    for _ in 0..workers {
        let w = worker(&client, "bench_fleet", &tally, slots);
        let stop = w.shutdown_token();
        running.push((stop, tokio::spawn(w.run())));
    }
    // every worker idle, and registered
    tokio::time::sleep(Duration::from_secs(1)).await;
    reset(&mut con).await;
    let cpu = cpu_us(&mut con).await;
    let mut tick = interval(Duration::from_micros(2500));
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    for i in 0..n {
        tick.tick().await;
        let job = Napping {
            i: i as u64,
            t: now_us(),
        };
        client.enqueue(&job).await.expect("enqueue");
    }
    tokio::time::timeout(Duration::from_secs(60), tally.all_done.notified())
        .await
        .expect("every job of the fleet ran");
    // the last jobs' settles
    tokio::time::sleep(Duration::from_millis(100)).await;
    let used = cost(&mut con).await;
    let cpu = cpu_us(&mut con).await - cpu;
    for (stop, run) in running {
        stop.cancel();
        run.await.unwrap().unwrap();
    }
    let (dup, missing) = tally.check();
    assert_eq!((dup, missing), (0, 0), "duplicates, missing");
    let lags = tally.lags_ms();
    Fleet {
        redis_cpu_us: cpu / n as f64,
        commands: used.commands as f64 / n as f64,
        calls: used.calls as f64 / n as f64,
        p50_ms: quantile(&lags, 0.5),
        p99_ms: quantile(&lags, 0.99),
    }
}
