//! Phase 14: the overview of every queue, as the dashboard renders it, at 10
//! and 1,000 queues: before (per queue: counts, latency, counters, the last
//! hour and the pause, one call each, 32 queues at once, as the dashboard
//! read until issue 38) and after (`Admin::overview`: the set of queues, then
//! one pipeline), and the overview with the last week's hours instead of the
//! last hour's minutes (the chart's "Last 7 days"). Per render: client round trips (the calls the render
//! awaits), commands inside Redis (`total_commands_processed`, scripts'
//! commands included), Redis CPU and wall time. Then both overviews again
//! once every queue's counters hold what a week of settles leaves there
//! (every slot of both rings, 20 run-time buckets), written by the bench,
//! then one job run through each queue at a new hour as a worker would, and
//! the bytes of one such counters hash.

use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use redjob::Client;
use redjob::backend::{Backend, Settle};
use redjob::inspect::Inspect;
use redjob::ops::{Admin, OverviewQuery};
use redjob::queue::{QueueOptions, Queues, SendMessage};

use crate::phases::Figures;
use crate::redis::{Server, cost, cpu_us, info_field, reset};

/// The figures of one way of rendering: per render, (round trips, commands
/// inside Redis, Redis CPU ms, wall ms), and a script call's mean time
/// inside Redis (ms: how long a call holds Redis from everything else).
pub type PerRender = (f64, f64, f64, f64, f64);

/// The dashboard's read before issue 38: one queue's line in five calls.
async fn line_before(client: &Client, name: String) -> u64 {
    let counts = client.counts(&name).await.expect("counts");
    client.stats(&name).await.expect("stats");
    client.minutes(&name).await.expect("minutes");
    client.is_paused(&name).await.expect("paused");
    if counts.ready > 0 {
        client.latency(&name).await.expect("latency");
        return 5;
    }
    4
}

async fn before(client: &Client) -> u64 {
    let names = client.queues().queue_listing().await.expect("list").names;
    let trips: Vec<u64> = stream::iter(names)
        .map(|n| line_before(client, n))
        .buffered(32)
        .collect()
        .await;
    // the listing and the clock for the chart
    client.backend().now_ms().await.expect("now");
    2 + trips.iter().sum::<u64>()
}

async fn after(client: &Client, week: bool) -> u64 {
    let query = OverviewQuery::default();
    let query = if week {
        query.with_hours()
    } else {
        query.with_minutes()
    };
    client.overview(&query).await.expect("overview");
    2
}

async fn measure(
    client: &Client,
    con: &mut redis::aio::MultiplexedConnection,
    renders: usize,
    way: u8,
) -> PerRender {
    reset(con).await;
    let cpu0 = cpu_us(con).await;
    let cmds0 = info_field(con, "stats", "total_commands_processed").await;
    let t = Instant::now();
    let mut trips = 0;
    for _ in 0..renders {
        trips += match way {
            0 => before(client).await,
            w => after(client, w == 2).await,
        };
    }
    let wall = t.elapsed().as_secs_f64() * 1000.0;
    // the first INFO counts itself once it answered: left out
    let cmds = info_field(con, "stats", "total_commands_processed").await - cmds0 - 1.0;
    let cpu = (cpu_us(con).await - cpu0) / 1000.0;
    let per_call = cost(con).await.script_us / 1000.0;
    let n = renders as f64;
    (trips as f64 / n, cmds / n, cpu / n, wall / n, per_call)
}

pub async fn overview(f: &mut Figures) {
    for (queues, renders) in [(10usize, 50usize), (1000, 5)] {
        let server = Server::start();
        let mut con = server.con().await;
        let client = Client::connect(&server.url).await.expect("connect");
        for i in 0..queues {
            let name = format!("q{i:04}");
            client
                .queues()
                .create_queue(&name, QueueOptions::default())
                .await
                .expect("create");
            // one ready job in every other queue, so that half read a latency
            if i % 2 == 0 {
                Queues::send(client.queues(), &name, SendMessage::new("{}"))
                    .await
                    .expect("send");
            }
        }
        // warm up: scripts loaded
        before(&client).await;
        after(&client, false).await;
        after(&client, true).await;
        for way in [0, 1, 2, 0, 1, 2] {
            let m = measure(&client, &mut con, renders, way).await;
            f.overview.push((queues, way, m));
        }
        a_week(&client, &mut con, queues).await;
        if queues == 1000 {
            let b: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg("rsmq:q0000:stats")
                .arg("SAMPLES")
                .arg(0)
                .query_async(&mut con)
                .await
                .expect("MEMORY USAGE");
            f.stats_week_bytes = b.map(|b| b as f64);
        }
        after(&client, false).await;
        after(&client, true).await;
        for way in [1, 2, 1, 2] {
            let m = measure(&client, &mut con, renders, way).await;
            f.overview.push((queues, way + 2, m));
        }
    }
}

/// Fills every queue's counters with a week of settles (see complete.lua's
/// KEYS[5]), this hour's slot holding the hour a week before, then runs one
/// job through each queue: its settle is the first of a new hour there. Each
/// queue keeps the ready jobs it had.
async fn a_week(client: &Client, con: &mut redis::aio::MultiplexedConnection, queues: usize) {
    let backend = client.backend();
    let now = backend.now_ms().await.expect("now");
    let (m, h) = (now / 60_000, now / 3_600_000);
    for i in 0..queues {
        let name = format!("q{i:04}");
        let mut fields: Vec<(String, String)> = ["processed", "retried", "dead", "failed"]
            .iter()
            .map(|f| (f.to_string(), "50400".to_string()))
            .collect();
        fields.extend((0..61).map(|j| (format!("m{}", (m - j) % 61), format!("{} 5 1", m - j))));
        fields
            .extend((1..=169).map(|j| (format!("h{}", (h - j) % 169), format!("{} 300 6", h - j))));
        fields.extend((0..20).map(|b| (format!("rt:{b}:bench"), "2520".to_string())));
        let _: () = redis::cmd("HSET")
            .arg(format!("rsmq:{name}:stats"))
            .arg(&fields)
            .query_async(con)
            .await
            .expect("counters");
        Queues::send(client.queues(), &name, SendMessage::new("{}"))
            .await
            .expect("send");
        let leased = backend
            .fetch(&name, 1, Duration::from_secs(30))
            .await
            .expect("fetch")
            .jobs;
        let settle = Settle {
            acks: leased.iter().map(|d| (d.id, d.token)).collect(),
            ..Settle::default()
        };
        backend.settle(&name, &settle).await.expect("settle");
    }
}
