//! Run with: `cargo run --release --example bench -- --json`
//!
//! BENCH.md's protocol: enqueue one by one and in bulk, process a backlog, Redis
//! commands and round trips per job, memory per job, enqueue-to-start latency,
//! delayed-job accuracy, and scale (backlogs of 10k, 100k, 1M; idle cost). Each
//! run starts its own `redis-server` (from PATH, `--save "" --appendonly no`, a
//! free loopback port) unless `REDIS_URL` is set. Prints a table; with `--json`
//! the last line is one JSON object of medians over the runs.
//!
//! Flags: `--n 20000` jobs per throughput phase, `--runs 3`, `--phase 1,2,...`
//! (1–3 throughput and cost, with one send's round trip on a bare socket beside
//! the client's (bare.rs), 4 latency, 5 delayed, 6 scale, 7 queue features
//! and metrics beside the plain figures, 8 inspection at 10k and the largest backlog, 9 a
//! flood of `--flood 1000000` fatal failures held to the dead-letter retention,
//! 10 topics: publish one by one and in batches, a subscriber draining `n`;
//! 11 a backlog over 12 queues on one Redis and on a 3-master Cluster, 12
//! enqueue one by one to a master with a replica, plain and waiting for it;
//! 13 the history of finished jobs at its defaults beside off (Redis and worker CPU a job), and its bytes;
//! 14 the dashboard's overview at 10 and 1,000 queues, per queue and in one
//! overview call; 16 plain and keyed (1,000 keys) bulk enqueue and processing
//! side by side; 15 a backlog under a rate limit of 1,000/s drained by three
//! workers; 17 plain and batched bulk enqueue and processing side by side,
//! the batch timed to its callback; 18 the floor of fetch + ack (+ the
//! history) as plain commands, no script; 19 backlogs of 300 sent and
//! processed in rounds (the queue's hash a listpack); 20 an idle fleet of 1
//! worker of 80 slots and 40 of 2 on one queue, sent one job at a time; default all), `--concurrency 32`, `--backlogs 10000,100000,1000000`, `--json`.
//!
//! `bench start-floor worker|produce --kind stream|layout|plain|settled …`: target 5's
//! floor, enqueue → start on bare sockets (start_floor.rs; `start_floor.py`
//! runs it beside the peer harness's latency phase).

mod bare;
mod batches;
mod features;
mod fleet;
mod flood;
mod floor;
mod history;
mod inspect;
mod jobs;
mod keyed;
mod limits;
mod metered;
mod overview;
mod phases;
mod redis;
mod report;
mod small;
mod spread;
mod start_floor;
mod topics;

use phases::{Figures, Settings};

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    if all.first().map(String::as_str) == Some("start-floor") {
        return start_floor::main(&all[1..]);
    }
    let mut s = Settings {
        n: 20_000,
        concurrency: 32,
        phases: vec![
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
        ],
    };
    let mut runs = 3usize;
    let mut json = false;
    let mut backlogs = vec![10_000usize, 100_000, 1_000_000];
    let mut flood_n = 1_000_000usize;
    let mut args = std::env::args().skip(1);
    let list = |v: Option<String>| -> Vec<usize> {
        v.unwrap_or_default()
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .collect()
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--n" => s.n = list(args.next()).first().copied().unwrap_or(s.n),
            "--runs" => runs = list(args.next()).first().copied().unwrap_or(runs).max(1),
            "--concurrency" => {
                s.concurrency = list(args.next()).first().copied().unwrap_or(s.concurrency)
            }
            "--phase" => s.phases = list(args.next()).into_iter().map(|p| p as u8).collect(),
            "--backlogs" => backlogs = list(args.next()),
            "--flood" => flood_n = list(args.next()).first().copied().unwrap_or(flood_n),
            "--json" => json = true,
            "--bench" => {} // cargo bench passes it
            other => {
                eprintln!("unknown flag {other}; see the top of examples/bench/main.rs");
                std::process::exit(2);
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut all = Vec::new();
    for run in 1..=runs {
        let mut f = Figures::default();
        rt.block_on(async {
            if s.phases.iter().any(|p| (1..=3).contains(p)) {
                phases::throughput(&s, &mut f).await;
            }
            if s.phases.contains(&4) {
                phases::latency(&s, &mut f).await;
            }
            if s.phases.contains(&5) {
                phases::delayed(&s, &mut f).await;
            }
            if s.phases.contains(&6) {
                phases::scale(&s, &mut f, &backlogs).await;
            }
            if s.phases.contains(&7) {
                features::features(&s, &mut f).await;
            }
            if s.phases.contains(&8) {
                inspect::inspection(&mut f, &backlogs).await;
            }
            if s.phases.contains(&9) {
                flood::flood(&mut f, flood_n, s.concurrency).await;
            }
            if s.phases.contains(&10) {
                topics::topics(&s, &mut f).await;
            }
            if s.phases.contains(&11) {
                spread::spread(&s, &mut f).await;
            }
            if s.phases.contains(&12) {
                spread::durability(&s, &mut f).await;
            }
            if s.phases.contains(&13) {
                history::history(&s, &mut f).await;
            }
            if s.phases.contains(&14) {
                overview::overview(&mut f).await;
            }
            if s.phases.contains(&15) {
                limits::limits(&s, &mut f).await;
            }
            if s.phases.contains(&18) {
                floor::floor(&s, &mut f).await;
            }
            if s.phases.contains(&17) {
                batches::batches(&s, &mut f).await;
            }
            if s.phases.contains(&16) {
                keyed::keyed(&s, &mut f).await;
            }
            if s.phases.contains(&19) {
                small::small(s.concurrency, &mut f).await;
            }
            if s.phases.contains(&20) {
                fleet::fleet(&s, &mut f).await;
            }
        });
        eprintln!("run {run} of {runs} done");
        all.push(f);
    }
    report::print(&s, &all, json);
}
