//! The table (median, min–max over runs, the target) and the JSON line.

use crate::phases::{Figures, Settings};
use std::borrow::Cow;

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

struct Row {
    key: Cow<'static, str>,
    label: String,
    values: Vec<f64>,
    target: &'static str,
}

fn rows(all: &[Figures]) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut add =
        |key: &'static str, label: &str, get: &dyn Fn(&Figures) -> Option<f64>, target| {
            rows.push(Row {
                key: key.into(),
                label: label.to_owned(),
                values: all.iter().filter_map(get).collect(),
                target,
            })
        };
    add(
        "enqueue_single_jobs_per_s",
        "enqueue, one awaited call per job (jobs/s)",
        &|f| f.enqueue_single,
        ">= 1.3x e6ae42f",
    );
    add(
        "enqueue_ping_us",
        "  of which: PING on the client's connection (us per call)",
        &|f| f.ping_us,
        "-",
    );
    add(
        "enqueue_raw_send_us",
        "  of which: raw RSMQ send, no job encoding (us per call)",
        &|f| f.raw_send_us,
        "-",
    );
    add(
        "enqueue_bare_xadd_us",
        "  floor: chasquimq's XADD on a bare socket (us per call)",
        &|f| f.bare_xadd_us,
        "-",
    );
    add(
        "enqueue_bare_layout_us",
        "  floor: RSMQ's fewest send commands, one FCALL, bare socket (us per call)",
        &|f| f.bare_layout_us,
        "-",
    );
    add(
        "enqueue_bare_send_us",
        "  floor: redjob's send function on a bare socket (us per call)",
        &|f| f.bare_send_us,
        "-",
    );
    add(
        "enqueue_script_us",
        "  of which: the send (function or script) inside Redis (us per call)",
        &|f| f.send_script_us,
        "-",
    );
    add(
        "enqueue_bulk_jobs_per_s",
        "enqueue, bulk 1000 per call (jobs/s)",
        &|f| f.enqueue_bulk,
        ">= 250,000",
    );
    add(
        "process_jobs_per_s",
        "process the backlog (jobs/s)",
        &|f| f.process,
        ">= 1.75x e6ae42f",
    );
    add(
        "redis_cmds_per_job",
        "Redis commands per job (1-by-1 enqueue + process)",
        &|f| f.cmds_per_job,
        "<= 5",
    );
    add(
        "client_round_trips_per_job",
        "client calls per job (1-by-1 enqueue + process)",
        &|f| f.calls_per_job,
        "<= 1.1",
    );
    add(
        "bytes_per_job",
        "Redis memory per queued job (bytes)",
        &|f| f.bytes_per_job,
        "<= 0.7x e6ae42f",
    );
    add(
        "bytes_per_job_keys",
        "  the queue's keys per job (MEMORY USAGE, bytes)",
        &|f| f.bytes_per_job_keys,
        "-",
    );
    add(
        "bytes_per_job_rsmq",
        "  the same, an RSMQ send of the bare payload (bytes)",
        &|f| f.bytes_per_job_rsmq,
        "-",
    );
    add(
        "worker_cpu_us_per_job",
        "worker CPU per job, whole process (us)",
        &|f| f.worker_cpu_us_per_job,
        "-",
    );
    add(
        "redis_cpu_us_per_job",
        "Redis CPU per processed job (us)",
        &|f| f.redis_cpu_us_per_job,
        "-",
    );
    add(
        "latency_p50_ms",
        "enqueue -> start p50 (ms)",
        &|f| f.latency_p50,
        "<= 0.5x e6ae42f",
    );
    add(
        "latency_p99_ms",
        "enqueue -> start p99 (ms)",
        &|f| f.latency_p99,
        "<= 0.6x e6ae42f",
    );
    add(
        "latency_max_ms",
        "enqueue -> start max (ms)",
        &|f| f.latency_max,
        "-",
    );
    add(
        "delayed_p50_ms",
        "delayed start - due p50 (ms)",
        &|f| f.delayed_p50,
        "<= 0.5",
    );
    add(
        "delayed_p99_ms",
        "delayed start - due p99 (ms)",
        &|f| f.delayed_p99,
        "<= 2",
    );
    add(
        "delayed_max_ms",
        "delayed start - due max (ms)",
        &|f| f.delayed_max,
        "-",
    );
    add(
        "delayed_min_ms",
        "delayed start - due min (ms)",
        &|f| f.delayed_min,
        ">= 0",
    );
    add(
        "duplicates",
        "duplicate executions",
        &|f| Some(f.duplicates as f64),
        "0",
    );
    add(
        "missing",
        "jobs never run",
        &|f| Some(f.missing as f64),
        "0",
    );
    let sizes: Vec<usize> = all
        .first()
        .map(|f| f.backlog.iter().map(|(b, _)| *b).collect())
        .unwrap_or_default();
    for b in sizes {
        let key: &'static str = match b {
            1_000_000 => "process_jobs_per_s_backlog_1m",
            100_000 => "process_jobs_per_s_backlog_100k",
            10_000 => "process_jobs_per_s_backlog_10k",
            _ => "process_jobs_per_s_backlog_other",
        };
        rows.push(Row {
            key: key.into(),
            label: format!("process a {b} backlog (jobs/s)"),
            values: all
                .iter()
                .filter_map(|f| f.backlog.iter().find(|(x, _)| *x == b).map(|(_, r)| *r))
                .collect(),
            target: if b == 1_000_000 {
                "within 15% of 20k"
            } else {
                "flat"
            },
        });
    }
    rows.push(Row {
        key: "process_jobs_per_s_plain_bulk".into(),
        label: "process a bulk-enqueued backlog, plain (jobs/s)".into(),
        values: all.iter().flat_map(|f| f.backlog_plain.clone()).collect(),
        target: "-",
    });
    rows.push(Row {
        key: "process_jobs_per_s_5_priorities".into(),
        label: "  the same at 5 priorities (jobs/s)".into(),
        values: all
            .iter()
            .flat_map(|f| f.backlog_priorities.clone())
            .collect(),
        target: "within 15% of plain",
    });
    rows.push(Row {
        key: "process_jobs_per_s_metrics_off".into(),
        label: "  the same, worker metrics off (jobs/s)".into(),
        values: all
            .iter()
            .flat_map(|f| f.backlog_metrics_off.clone())
            .collect(),
        target: "-",
    });
    rows.push(Row {
        key: "process_jobs_per_s_prometheus".into(),
        label: "  the same, metrics to Prometheus (jobs/s)".into(),
        values: all
            .iter()
            .flat_map(|f| f.backlog_prometheus.clone())
            .collect(),
        target: "-",
    });
    for (key, label, get, target) in [
        (
            "process_jobs_per_s_history_on",
            "process a backlog, history at its defaults (jobs/s)",
            (|f: &Figures| f.history_on.clone()) as fn(&Figures) -> Vec<f64>,
            ">= 90% of off",
        ),
        (
            "process_jobs_per_s_history_off",
            "  the same, history off (jobs/s)",
            |f| f.history_off.clone(),
            "-",
        ),
        (
            "redis_cpu_us_per_job_history_on",
            "  Redis CPU per job, history on (µs)",
            |f| f.history_on_cpu_us.clone(),
            "-",
        ),
        (
            "redis_cpu_us_per_job_history_off",
            "  Redis CPU per job, history off (µs)",
            |f| f.history_off_cpu_us.clone(),
            "-",
        ),
        (
            "worker_cpu_us_per_job_history_on",
            "  worker CPU per job, history on (µs)",
            |f| f.history_on_worker_cpu_us.clone(),
            "-",
        ),
        (
            "worker_cpu_us_per_job_history_off",
            "  worker CPU per job, history off (µs)",
            |f| f.history_off_worker_cpu_us.clone(),
            "-",
        ),
        (
            "process_jobs_per_s_history_errors",
            "  history on, in a queue that has seen a failure (jobs/s)",
            |f| f.history_errors.clone(),
            "-",
        ),
        (
            "redis_cpu_us_per_job_history_errors",
            "  Redis CPU per job, the same (µs)",
            |f| f.history_errors_cpu_us.clone(),
            "-",
        ),
        (
            "floor_redis_cpu_us_per_job",
            "floor: fetch + ack as plain commands, Redis CPU per job (µs)",
            |f| f.floor_plain_us.clone(),
            "-",
        ),
        (
            "floor_redis_cpu_us_per_job_history",
            "  the same with the history's writes (µs)",
            |f| f.floor_history_us.clone(),
            "-",
        ),
        (
            "floor_scripted_redis_cpu_us_per_job",
            "  the same by two minimal scripts (µs)",
            |f| f.floor_scripted_us.clone(),
            "-",
        ),
        (
            "floor_scripted_redis_cpu_us_per_job_history",
            "  the same by two minimal scripts, with the history (µs)",
            |f| f.floor_scripted_history_us.clone(),
            "-",
        ),
    ] {
        rows.push(Row {
            key: key.into(),
            label: label.into(),
            values: all.iter().flat_map(get).collect(),
            target,
        });
    }
    rows.push(Row {
        key: "enqueue_single_jobs_per_s_plain".into(),
        label: "enqueue one by one, plain (jobs/s)".into(),
        values: all
            .iter()
            .flat_map(|f| f.enqueue_single_plain.clone())
            .collect(),
        target: "-",
    });
    rows.push(Row {
        key: "enqueue_single_jobs_per_s_unique".into(),
        label: "  the same, unique by derived key (jobs/s)".into(),
        values: all
            .iter()
            .flat_map(|f| f.enqueue_single_unique.clone())
            .collect(),
        target: "within 15% of plain",
    });
    for op in [
        "counts",
        "peek",
        "job",
        "list_ready",
        "list_ready_deep",
        "list_scheduled",
        "list_scheduled_deep",
    ] {
        let mut sizes: Vec<usize> = all
            .iter()
            .flat_map(|f| {
                f.inspect
                    .iter()
                    .filter(|(o, _, _)| o == op)
                    .map(|(_, n, _)| *n)
            })
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        for n in sizes {
            rows.push(Row {
                key: format!("inspect_{op}_ms_at_{n}").into(),
                label: format!("  {op} at {n} jobs (ms per call)"),
                values: all
                    .iter()
                    .flat_map(|f| {
                        f.inspect
                            .iter()
                            .filter(|(o, m, _)| o == op && *m == n)
                            .map(|(_, _, ms)| *ms)
                    })
                    .collect(),
                target: "flat: near the 10k figure",
            });
        }
    }
    let mut counts: Vec<usize> = all
        .iter()
        .flat_map(|f| f.locate.iter().map(|l| l.0))
        .collect();
    counts.sort_unstable();
    counts.dedup();
    for n in counts {
        let of = |pick: fn(&(usize, f64, f64, f64)) -> f64| -> Vec<f64> {
            all.iter()
                .flat_map(|f| f.locate.iter().filter(|l| l.0 == n).map(pick))
                .collect()
        };
        rows.push(Row {
            key: format!("locate_ms_at_{n}_queues").into(),
            label: format!("  a job by id, queue unknown, {n} queues, none has it (ms)"),
            values: of(|l| l.1),
            target: "256 queues asked at once",
        });
        rows.push(Row {
            key: format!("locate_calls_at_{n}_queues").into(),
            label: "  the same: script calls sent (pipelined)".into(),
            values: of(|l| l.2),
            target: "one per queue",
        });
        rows.push(Row {
            key: format!("locate_cmds_at_{n}_queues").into(),
            label: "  the same: Redis commands, scripts' inner ones too".into(),
            values: of(|l| l.3),
            target: "a few per queue",
        });
    }
    for (key, label, get, target) in [
        (
            "flood_jobs_per_s",
            "flood of fatal failures (jobs/s)",
            (|f: &Figures| f.flood_jobs_per_s) as fn(&Figures) -> Option<f64>,
            "near the processing figure",
        ),
        (
            "flood_dead_kept",
            "  dead letters kept after it",
            |f: &Figures| f.flood_dead_kept,
            "the retention: 10000",
        ),
        (
            "flood_mem_queued_mb",
            "  Redis memory with the flood queued (MB)",
            |f: &Figures| f.flood_mem_queued_mb,
            "",
        ),
        (
            "flood_mem_after_mb",
            "  Redis memory after (MB)",
            |f: &Figures| f.flood_mem_after_mb,
            "bounded: the cap's letters",
        ),
    ] {
        rows.push(Row {
            key: key.into(),
            label: label.into(),
            values: all.iter().filter_map(get).collect(),
            target,
        });
    }
    for (key, label, get, target) in [
        (
            "spread_single_jobs_per_s",
            "12 queues, one worker, one Redis (jobs/s)",
            (|f: &Figures| f.spread_single) as fn(&Figures) -> Option<f64>,
            "-",
        ),
        (
            "spread_cluster_jobs_per_s",
            "  the same on a 3-master Cluster, same machine (jobs/s)",
            |f| f.spread_cluster,
            "the client's overhead",
        ),
        (
            "rate_limited_per_s",
            "rate limit 1,000/s, 3 workers: achieved (starts/s)",
            |f| f.rate_limited_per_s,
            "within 2% of 1,000",
        ),
        (
            "rate_limited_max_1s",
            "  most starts in any 1 s window, Redis's clock",
            |f| f.rate_limited_max_1s,
            "1,000",
        ),
        (
            "rate_limited_handler_max_1s",
            "  the same by the handlers' clocks",
            |f| f.rate_limited_handler_max_1s,
            "-",
        ),
        (
            "plain_bulk_jobs_per_s",
            "bulk enqueue, plain, phase 16 (jobs/s)",
            |f| f.plain_bulk,
            "-",
        ),
        (
            "keyed_bulk_jobs_per_s",
            "  the same with concurrency keys, 1,000 keys (jobs/s)",
            |f| f.keyed_bulk,
            "-",
        ),
        (
            "plain_process_jobs_per_s",
            "processing, plain, phase 16 (jobs/s)",
            |f| f.plain_process,
            "-",
        ),
        (
            "keyed_process_jobs_per_s",
            "  the same, one at a time per key, 1,000 keys (jobs/s)",
            |f| f.keyed_process,
            "-",
        ),
        (
            "batch_plain_bulk_jobs_per_s",
            "bulk enqueue, plain, phase 17 (jobs/s)",
            |f| f.batch_plain_bulk,
            "-",
        ),
        (
            "batch_bulk_jobs_per_s",
            "  the same as one batch with a callback (jobs/s)",
            |f| f.batch_bulk,
            "-",
        ),
        (
            "batch_plain_process_jobs_per_s",
            "processing, plain, phase 17 (jobs/s)",
            |f| f.batch_plain_process,
            "-",
        ),
        (
            "batch_process_jobs_per_s",
            "  the same batch, from the worker's start to its callback (jobs/s)",
            |f| f.batch_process,
            "-",
        ),
        (
            "flow_child_to_parent_p50_ms",
            "a flow's child finished -> its parent started, p50 (ms)",
            |f| f.flow_p50,
            "-",
        ),
        (
            "flow_child_to_parent_p99_ms",
            "  the same, p99 (ms)",
            |f| f.flow_p99,
            "-",
        ),
        (
            "hand_child_to_parent_p50_ms",
            "  a chain by hand (the child enqueues its parent), p50 (ms)",
            |f| f.hand_p50,
            "-",
        ),
        (
            "hand_child_to_parent_p99_ms",
            "  the same, p99 (ms)",
            |f| f.hand_p99,
            "-",
        ),
        (
            "enqueue_replicated_plain_jobs_per_s",
            "enqueue one by one, master with a replica (jobs/s)",
            |f| f.enqueue_replicated_plain,
            "-",
        ),
        (
            "enqueue_replicated_waiting_jobs_per_s",
            "  the same, waiting for the replica (jobs/s)",
            |f| f.enqueue_replicated_waiting,
            "the cost of WAIT",
        ),
        (
            "history_bytes_per_entry",
            "history: bytes per entry, bench payload",
            |f| f.history_bytes_per_entry,
            "-",
        ),
        (
            "history_full_kb",
            "  a full history at the defaults (KB)",
            |f| f.history_full_kb,
            "-",
        ),
        (
            "history_bytes_per_entry_1kb",
            "history: bytes per entry, 1 KB payload",
            |f| f.history_bytes_per_entry_1kb,
            "-",
        ),
        (
            "history_full_kb_1kb",
            "  a full history at the defaults (KB)",
            |f| f.history_full_kb_1kb,
            "-",
        ),
    ] {
        rows.push(Row {
            key: key.into(),
            label: label.into(),
            values: all.iter().filter_map(get).collect(),
            target,
        });
    }
    for (queues, label) in [(10, "10 queues"), (1000, "1,000 queues")] {
        for (w, way, key) in [
            (0, "per queue", "per_queue"),
            (1, "overview", "overview"),
            (2, "overview with the last 7 days", "overview_week"),
            (3, "overview, counters of a week", "overview_full"),
            (
                4,
                "overview with the last 7 days, counters of a week",
                "overview_week_full",
            ),
        ] {
            for (i, (what, unit)) in [
                ("round trips", "trips"),
                ("commands inside Redis", "cmds"),
                ("Redis CPU", "ms"),
                ("wall time", "wall_ms"),
                ("a script call's time inside Redis", "call_ms"),
            ]
            .into_iter()
            .enumerate()
            {
                let unit_label = match i {
                    2 | 3 => " per render (ms)",
                    4 => " (ms)",
                    _ => " per render",
                };
                let target = match (queues, w, i) {
                    (1000, 1, 0) => "<= 2",
                    (1000, 1, 2) => "<= 20",
                    _ => "-",
                };
                rows.push(Row {
                    key: format!("overview_{queues}_{key}_{unit}").into(),
                    label: format!("dashboard overview, {label}, {way}: {what}{unit_label}"),
                    values: all
                        .iter()
                        .flat_map(|f| f.overview.iter())
                        .filter(|(q, n, _)| *q == queues && *n == w)
                        .map(|(_, _, m)| [m.0, m.1, m.2, m.3, m.4][i])
                        .collect(),
                    target,
                });
            }
        }
    }
    rows.push(Row {
        key: "small_process_per_s".into(),
        label: "process backlogs of 300 in rounds, bulk sends between (jobs/s)".into(),
        values: all.iter().filter_map(|f| f.small_process).collect(),
        target: "-",
    });
    rows.push(Row {
        key: "small_redis_cpu_us_per_job".into(),
        label: "  Redis CPU per job there, the sends included (us)".into(),
        values: all.iter().filter_map(|f| f.small_redis_cpu_us).collect(),
        target: "-",
    });
    rows.push(Row {
        key: "stats_week_bytes".into(),
        label: "  one queue's counters holding a week (MEMORY USAGE, bytes)".into(),
        values: all.iter().filter_map(|f| f.stats_week_bytes).collect(),
        target: "-",
    });
    for (key, label, get, target) in [
        (
            "topic_publish_single_per_s",
            "topic: publish, one awaited call per event (events/s)",
            (|f: &Figures| f.topic_publish_single) as fn(&Figures) -> Option<f64>,
            "chasquimq 11,294",
        ),
        (
            "topic_publish_bulk_per_s",
            "topic: publish, 1000 per call (events/s)",
            |f| f.topic_publish_bulk,
            "chasquimq 115,422",
        ),
        (
            "topic_drain_per_s",
            "topic: one subscriber drains the backlog (events/s)",
            |f| f.topic_drain,
            ">= 1.5 x process",
        ),
        (
            "topic_drain_over_process",
            "topic: drain rate / job process rate, same run",
            |f| f.topic_drain.zip(f.process).map(|(d, p)| d / p),
            ">= 1.5",
        ),
        (
            "topic_cmds_per_event",
            "topic: Redis commands per event (publish + drain)",
            |f| f.topic_cmds_per_event,
            "chasquimq 1.03",
        ),
        (
            "topic_worker_cpu_us_per_event",
            "topic: worker CPU per event drained, whole process (us)",
            |f| f.topic_worker_cpu_us,
            "-",
        ),
        (
            "topic_redis_cpu_us_per_event",
            "topic: Redis CPU per event drained (us)",
            |f| f.topic_redis_cpu_us,
            "-",
        ),
        (
            "topic_bytes_per_event",
            "topic: Redis memory per stored event (bytes)",
            |f| f.topic_bytes_per_event,
            "<= 80",
        ),
    ] {
        rows.push(Row {
            key: key.into(),
            label: label.into(),
            values: all.iter().filter_map(get).collect(),
            target,
        });
    }
    for (at, (workers, slots)) in crate::fleet::FLEETS.iter().enumerate() {
        let lead = if at == 0 { "" } else { "  " };
        let pick = |get: fn(&crate::fleet::Fleet) -> f64| -> Vec<f64> {
            all.iter()
                .filter_map(|f| f.fleet.get(at).map(get))
                .collect()
        };
        for (key, label, get) in [
            (
                "redis_cpu_us",
                "Redis CPU a job (us)",
                (|f: &crate::fleet::Fleet| f.redis_cpu_us) as fn(&crate::fleet::Fleet) -> f64,
            ),
            ("commands", "Redis commands a job", |f| f.commands),
            ("calls", "top-level calls a job", |f| f.calls),
            ("p50_ms", "enqueue -> start p50 (ms)", |f| f.p50_ms),
            ("p99_ms", "enqueue -> start p99 (ms)", |f| f.p99_ms),
        ] {
            rows.push(Row {
                key: format!("fleet_{workers}_{key}").into(),
                label: format!("{lead}{workers} idle worker(s) x {slots} slots, 400/s: {label}"),
                values: pick(get),
                target: if at == 0 { "-" } else { "near the first's" },
            });
        }
    }
    rows.push(Row {
        key: "idle_cmds_per_s_1_queue".into(),
        label: "idle worker, 1 queue (Redis cmds/s)".into(),
        values: all.iter().filter_map(|f| f.idle_1).collect(),
        target: "a handful",
    });
    rows.push(Row {
        key: "idle_cmds_per_s_100_queues".into(),
        label: "idle worker, 100 queues (Redis cmds/s)".into(),
        values: all.iter().filter_map(|f| f.idle_100).collect(),
        target: "<= 2",
    });
    rows.push(Row {
        key: "idle_cmds_per_s_100_queues_features".into(),
        label: "  the same, with limits, a batch, 10 result waiters".into(),
        values: all.iter().filter_map(|f| f.idle_100_features).collect(),
        target: "<= 2",
    });
    rows
}

fn fmt(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
    }
}

pub fn print(s: &Settings, all: &[Figures], json: bool) {
    println!(
        "redjob bench: n = {}, concurrency = {}, {} run(s); median (min-max)",
        s.n,
        s.concurrency,
        all.len()
    );
    println!("{:<52} {:>28}  target", "figure", "measured");
    let rows = rows(all);
    let mut obj = Vec::new();
    for r in &rows {
        let Some(m) = median(r.values.clone()) else {
            continue;
        };
        let lo = r.values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = r.values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let measured = format!("{} ({}-{})", fmt(m), fmt(lo), fmt(hi));
        println!("{:<52} {:>28}  {}", r.label, measured, r.target);
        obj.push(format!("\"{}\":{}", r.key, (m * 1000.0).round() / 1000.0));
    }
    if json {
        println!("{{{}}}", obj.join(","));
    }
}
