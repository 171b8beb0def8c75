//! The worker's metrics, read back the way an operator sees them: through the
//! Prometheus exporter's text rendering, against a real redis-server.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::{RedisServer, start, wait_for, wait_until};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redjob::backend::memory::MemoryBackend;
use redjob::client::EnqueueOptions;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, Concurrency, QueueSettings};
use redjob::queue::Queues;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "mt_ok", queue = "metered")]
struct Ok5;

impl Job for Ok5 {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "mt_fatal", queue = "metered")]
struct Fatal;

impl Job for Fatal {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Err(JobError::fatal("bad input"))
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "mt_quiet", queue = "quiet")]
struct Quiet;

impl Job for Quiet {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "mt_event", topic = "mt_topic")]
struct MtEvent {
    n: u64,
}

/// An event of the topic that `mt_sub` has no handler for.
#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "mt_other", topic = "mt_topic")]
struct MtOther;

/// Runs until its worker stops it.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "mt_long")]
struct Long;

impl Job for Long {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.cancellation().cancelled().await;
        Err(JobError::retry("stopped"))
    }
}

/// Waits for a permit of the worker's semaphore.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "mt_gated")]
struct Gated;

impl Job for Gated {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gate = ctx.data::<Arc<Semaphore>>()?;
        gate.acquire().await.map_err(JobError::fatal)?.forget();
        Ok(())
    }
}

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "mt_gated_event", topic = "mt_gates")]
struct GatedEvent;

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "mt_bad_event", topic = "mt_bad")]
struct BadEvent {
    n: u64,
}

/// The process's Prometheus recorder, shared by the tests of this file (each
/// with queues and topics of its own).
fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets(&[0.001, 0.01, 0.1, 1.0, 10.0])
                .unwrap()
                .install_recorder()
                .unwrap()
        })
        .clone()
}

/// The rendered samples: `name{labels}` (labels sorted) → value.
fn samples(handle: &PrometheusHandle) -> BTreeMap<String, f64> {
    handle
        .render()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let key = match key.split_once('{') {
                Some((name, labels)) => {
                    let mut ls: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                    ls.sort_unstable();
                    format!("{name}{{{}}}", ls.join(","))
                }
                None => key.to_string(),
            };
            Some((key, value.parse().ok()?))
        })
        .collect()
}

/// A sample's key as [`samples`] writes it.
fn key(name: &str, labels: &[&str]) -> String {
    let mut labels = labels.to_vec();
    labels.sort_unstable();
    format!("{name}{{{}}}", labels.join(","))
}

fn get(s: &BTreeMap<String, f64>, key: &str) -> Option<f64> {
    s.get(key).copied()
}

#[tokio::test]
async fn counters_histograms_and_gauges_reach_the_prometheus_exporter() {
    let handle = handle();
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for _ in 0..3 {
        client.enqueue(&Ok5).await.unwrap();
    }
    client.enqueue(&Fatal).await.unwrap();
    client.enqueue(&Quiet).await.unwrap();
    client
        .queues()
        .create_queue("held", Default::default())
        .await
        .unwrap();
    client.pause("held").await.unwrap();
    client
        .queues()
        .send("held", redjob::queue::SendMessage::new("{}"))
        .await
        .unwrap();
    // two jobs of one concurrency key: one holds its place, one is blocked
    for _ in 0..2 {
        let keyed = redjob::queue::SendMessage::new("{}").keyed(redjob::queue::Keyed::new("acct"));
        client.queues().send("held", keyed).await.unwrap();
    }

    client
        .subscribe("mt_topic", "mt_sub", redjob::topic::Start::Beginning)
        .await
        .unwrap();
    let events: Vec<MtEvent> = (1..=3).map(|n| MtEvent { n }).collect();
    client.publish_all(&events).await.unwrap();
    client.publish_all(&[MtOther, MtOther]).await.unwrap();

    let worker = Worker::builder(client.backend())
        .queues(["metered", "held"])
        .subscribe("mt_sub", |e: MtEvent, _| async move {
            match e.n {
                2 => Err(JobError::fatal("bad event")),
                _ => Ok(()),
            }
        })
        .handle_signals(false)
        .metrics_interval(Duration::from_secs(1))
        .build()
        .unwrap();
    let quiet = Worker::builder(client.backend())
        .queue("quiet")
        .handle_signals(false)
        .metrics(false)
        .build()
        .unwrap();
    let (w, q) = (start(worker), start(quiet));
    let settled = || {
        let s = samples(&handle);
        get(&s, r#"redjob_queue_jobs{queue="metered",state="dead"}"#) == Some(1.0)
            && get(&s, r#"redjob_queue_jobs{queue="metered",state="ready"}"#) == Some(0.0)
            && get(&s, r#"redjob_queue_jobs{queue="held",state="ready"}"#) == Some(2.0)
            && get(&s, r#"redjob_queue_jobs{queue="held",state="blocked"}"#) == Some(1.0)
            && get(&s, r#"redjob_queue_paused{queue="held"}"#) == Some(1.0)
            && ["lag", "pending", "dead"]
                .iter()
                .zip([0.0, 0.0, 1.0])
                .all(|(state, n)| {
                    let labels = [
                        r#"subscriber="mt_sub""#,
                        r#"topic="mt_topic""#,
                        &format!(r#"state="{state}""#),
                    ];
                    get(&s, &key("redjob_subscriber_events", &labels)) == Some(n)
                })
    };
    let ok = wait_until(Duration::from_secs(15), settled).await;
    let s = samples(&handle);
    assert!(ok, "{s:#?}");
    assert!(
        wait_until(Duration::from_secs(10), || client_done(&handle)).await,
        "{s:#?}"
    );
    let backend = client.backend();
    let quiet_ran = || async {
        redjob::backend::Backend::stats(&backend, "quiet")
            .await
            .is_ok_and(|st| st.processed == 1)
    };
    assert!(wait_for(Duration::from_secs(10), quiet_ran).await);
    w.stop().await;
    q.stop().await;

    let s = samples(&handle);
    let ok = |name: &str, more: &[&str]| {
        let mut labels = vec![r#"job="mt_ok""#, r#"queue="metered""#];
        labels.extend(more);
        get(&s, &key(name, &labels))
    };
    assert_eq!(ok("redjob_jobs_started_total", &[]), Some(3.0));
    let succeeded = r#"outcome="succeeded""#;
    assert_eq!(ok("redjob_jobs_finished_total", &[succeeded]), Some(3.0));
    for other in ["retried", "dead", "cancelled"] {
        let outcome = format!(r#"outcome="{other}""#);
        assert_eq!(ok("redjob_jobs_finished_total", &[&outcome]), Some(0.0));
    }
    let fatal = [
        r#"job="mt_fatal""#,
        r#"outcome="dead""#,
        r#"queue="metered""#,
    ];
    assert_eq!(
        get(&s, &key("redjob_jobs_finished_total", &fatal)),
        Some(1.0)
    );
    // run time: three runs of 5 ms or more, none under 1 ms
    assert_eq!(ok("redjob_job_run_seconds_count", &[]), Some(3.0));
    assert_eq!(
        ok("redjob_job_run_seconds_bucket", &[r#"le="0.001""#]),
        Some(0.0)
    );
    assert!(ok("redjob_job_run_seconds_sum", &[]).unwrap() >= 0.015);
    // queue wait: each of the three waited a little, none 10 s
    assert_eq!(ok("redjob_job_wait_seconds_count", &[]), Some(3.0));
    assert_eq!(
        ok("redjob_job_wait_seconds_bucket", &[r#"le="10""#]),
        Some(3.0)
    );
    assert!(ok("redjob_job_wait_seconds_sum", &[]).unwrap() > 0.0);
    // events, by topic, subscriber and type
    let ev = |name: &str, more: &[&str]| {
        let mut labels = vec![
            r#"event="mt_event""#,
            r#"subscriber="mt_sub""#,
            r#"topic="mt_topic""#,
        ];
        labels.extend(more);
        get(&s, &key(name, &labels))
    };
    assert_eq!(ev("redjob_events_started_total", &[]), Some(3.0));
    assert_eq!(ev("redjob_events_finished_total", &[succeeded]), Some(2.0));
    assert_eq!(
        ev("redjob_events_finished_total", &[r#"outcome="dead""#]),
        Some(1.0)
    );
    assert_eq!(
        ev("redjob_events_finished_total", &[r#"outcome="retried""#]),
        Some(0.0)
    );
    assert_eq!(ev("redjob_event_run_seconds_count", &[]), Some(3.0));
    // the two events it has no handler for, skipped
    assert_eq!(
        get(
            &s,
            &key(
                "redjob_events_skipped_total",
                &[r#"subscriber="mt_sub""#, r#"topic="mt_topic""#]
            )
        ),
        Some(2.0)
    );
    // the worker with metrics off recorded nothing
    assert!(!s.keys().any(|k| k.contains("quiet")), "{s:#?}");
}

/// Every metered job ended.
fn client_done(handle: &PrometheusHandle) -> bool {
    let s = samples(handle);
    get(
        &s,
        r#"redjob_jobs_finished_total{job="mt_ok",outcome="succeeded",queue="metered"}"#,
    ) == Some(3.0)
}

/// `redjob_jobs_held_total` counts the due jobs a limit kept a fetch from
/// leasing, not the slots the fetch had free: under a global concurrency of 1
/// with its place taken, a queue with nothing else due counts none, and a
/// queue with three jobs due counts three at each fetch (on the old code,
/// each fetch counted the worker's seven free slots).
async fn held_counts_jobs(client: Client, ns: &str) {
    let handle = handle();
    let (idle, busy) = (format!("mt_held_idle_{ns}"), format!("mt_held_busy_{ns}"));
    for q in [&idle, &busy] {
        client
            .queues()
            .create_queue(q, Default::default())
            .await
            .unwrap();
        client
            .set_settings(q, &QueueSettings::concurrency(Concurrency::global(1)))
            .await
            .unwrap();
        // first, as it has the higher priority: it holds the one place
        client
            .enqueue_with(&Long, EnqueueOptions::new().queue(q.as_str()).priority(1))
            .await
            .unwrap();
    }
    for _ in 0..3 {
        client
            .enqueue_with(&Gated, EnqueueOptions::new().queue(busy.as_str()))
            .await
            .unwrap();
    }
    // a worker each, so that each fetch asks for more than three
    let workers = [&idle, &busy].map(|q| {
        let worker = Worker::builder(client.backend())
            .queue(q.as_str())
            .concurrency(8)
            .grace_period(Duration::from_millis(100))
            .data(Arc::new(Semaphore::new(0)))
            .handle_signals(false)
            .build()
            .unwrap();
        start(worker)
    });
    let held = |q: &str| {
        let labels = [&format!(r#"queue="{q}""#), r#"limit="concurrency""#];
        get(&samples(&handle), &key("redjob_jobs_held_total", &labels)).unwrap_or(0.0)
    };
    let both_running = || async {
        let (a, b) = (
            Inspect::counts(&client, &idle).await.unwrap(),
            Inspect::counts(&client, &busy).await.unwrap(),
        );
        a.in_flight == 1 && b.in_flight == 1
    };
    assert!(wait_for(Duration::from_secs(10), both_running).await);
    // the fetch that leased the long job was held: counted before it started
    assert!(
        wait_until(Duration::from_secs(10), || held(&busy) > 0.0).await,
        "{:#?}",
        samples(&handle)
    );
    let (idle_held, busy_held) = (held(&idle), held(&busy));
    for w in workers {
        w.stop().await;
    }
    assert_eq!(idle_held, 0.0, "nothing else was due in {idle}");
    assert_eq!(
        busy_held % 3.0,
        0.0,
        "three jobs held at each fetch: {busy_held}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_counts_the_due_jobs_a_limit_holds_back_memory() {
    held_counts_jobs(Client::memory(MemoryBackend::new()), "mem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_counts_the_due_jobs_a_limit_holds_back_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    held_counts_jobs(client, "redis").await;
}

/// A stopped worker's gauges say what it left behind: it samples once more
/// after its drain. With a sample an hour, the only ones are the first (a job
/// and an event waiting or running) and the last (all done); the old code
/// left the first in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gauges_are_sampled_once_more_when_the_worker_stops() {
    let handle = handle();
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let queue = "mt_gauges";
    client
        .enqueue_with(&Gated, EnqueueOptions::new().queue(queue))
        .await
        .unwrap();
    client
        .subscribe("mt_gates", "mt_gate_sub", redjob::topic::Start::Beginning)
        .await
        .unwrap();
    client.publish(&GatedEvent).await.unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let event_gate = gate.clone();
    let worker = Worker::builder(client.backend())
        .queue(queue)
        .subscribe("mt_gate_sub", move |_: GatedEvent, _| {
            let gate = event_gate.clone();
            async move {
                gate.acquire().await.map_err(JobError::fatal)?.forget();
                Ok(())
            }
        })
        .data(gate.clone())
        .metrics_interval(Duration::from_secs(3600))
        .handle_signals(false)
        .build()
        .unwrap();
    let w = start(worker);
    let job = |state: &str| {
        let labels = [r#"queue="mt_gauges""#, &format!(r#"state="{state}""#)];
        get(&samples(&handle), &key("redjob_queue_jobs", &labels))
    };
    let event = |state: &str| {
        let labels = [
            r#"topic="mt_gates""#,
            r#"subscriber="mt_gate_sub""#,
            &format!(r#"state="{state}""#),
        ];
        get(&samples(&handle), &key("redjob_subscriber_events", &labels))
    };
    // the first sample: the job and the event not done
    let first = || {
        job("ready").unwrap_or(0.0) + job("in_flight").unwrap_or(0.0) == 1.0
            && event("lag").unwrap_or(0.0) + event("pending").unwrap_or(0.0) == 1.0
    };
    assert!(
        wait_until(Duration::from_secs(10), first).await,
        "{:#?}",
        samples(&handle)
    );
    gate.add_permits(2);
    let done = || async {
        let stats = client.stats(queue).await.unwrap();
        let topic = redjob::topic::Topics::topic_info(&client.backend(), "mt_gates")
            .await
            .unwrap()
            .unwrap();
        stats.processed == 1
            && topic
                .subscribers
                .iter()
                .all(|s| s.pending == 0 && s.lag == 0)
    };
    assert!(wait_for(Duration::from_secs(10), done).await);
    w.stop().await;
    for state in ["ready", "scheduled", "in_flight", "dead", "blocked"] {
        assert_eq!(job(state), Some(0.0), "{state}: {:#?}", samples(&handle));
    }
    for state in ["lag", "pending", "dead"] {
        assert_eq!(event(state), Some(0.0), "{state}: {:#?}", samples(&handle));
    }
}

/// Events dead-lettered without running are counted among the dead: an entry
/// with no type under `event="(undecodable)"` (a bounded label, as jobs have),
/// one whose data does not decode under its type, as a job whose arguments do
/// not decode: dead, neither started nor timed. The old code counted neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_dead_lettered_unrun_are_counted() {
    let handle = handle();
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("mt_bad", "mt_bad_sub", redjob::topic::Start::Beginning)
        .await
        .unwrap();
    client.publish(&BadEvent { n: 1 }).await.unwrap();
    let mut con = server.raw().await;
    let stream = "rsmq:t:{mt_bad}";
    let entries: [&[&str]; 2] = [
        &["nofield", "x"],
        &["type", "mt_bad_event", "data", r#"{"n":"nope"}"#],
    ];
    for fields in entries {
        let _: String = redis::cmd("XADD")
            .arg(stream)
            .arg("*")
            .arg(fields)
            .query_async(&mut con)
            .await
            .unwrap();
    }
    let worker = Worker::builder(client.backend())
        .subscribe("mt_bad_sub", |_: BadEvent, _| async move { Ok(()) })
        .handle_signals(false)
        .build()
        .unwrap();
    let w = start(worker);
    let dead = || async {
        let info = redjob::topic::Topics::topic_info(&client.backend(), "mt_bad")
            .await
            .unwrap()
            .unwrap();
        info.subscribers
            .iter()
            .any(|s| s.dead == 2 && s.pending == 0)
    };
    assert!(wait_for(Duration::from_secs(10), dead).await);
    w.stop().await;
    let s = samples(&handle);
    let ev = |name: &str, event: &str, more: &[&str]| {
        let event = format!(r#"event="{event}""#);
        let mut labels = vec![r#"subscriber="mt_bad_sub""#, r#"topic="mt_bad""#, &event];
        labels.extend(more);
        get(&s, &key(name, &labels))
    };
    let dead = [r#"outcome="dead""#];
    assert_eq!(
        ev("redjob_events_finished_total", "(undecodable)", &dead),
        Some(1.0),
        "{s:#?}"
    );
    assert_eq!(
        ev("redjob_events_finished_total", "mt_bad_event", &dead),
        Some(1.0),
        "{s:#?}"
    );
    let ok = [r#"outcome="succeeded""#];
    assert_eq!(
        ev("redjob_events_finished_total", "mt_bad_event", &ok),
        Some(1.0),
        "{s:#?}"
    );
    // only the event that decoded started, and was timed
    assert_eq!(
        ev("redjob_events_started_total", "mt_bad_event", &[]),
        Some(1.0),
        "{s:#?}"
    );
    assert_eq!(
        ev("redjob_event_run_seconds_count", "mt_bad_event", &[]),
        Some(1.0),
        "{s:#?}"
    );
}

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "mt_dropped_event", topic = "mt_dropped")]
struct DroppedEvent;

/// A worker whose `run` future is dropped (as a process killed) samples its
/// subscriber no more: the gauges keep its last sample (one event waiting)
/// though more are published after. The old code's sampler, a task of its
/// own, took one more sample after the drop (`lag` + `pending` 4).
#[tokio::test]
async fn a_dropped_worker_samples_its_subscriber_no_more() {
    let handle = handle();
    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    client
        .subscribe("mt_dropped", "mt_dropped_sub", redjob::topic::Start::End)
        .await
        .unwrap();
    client.publish(&DroppedEvent).await.unwrap();
    let worker = Worker::builder(client.backend())
        .subscribe("mt_dropped_sub", |_: DroppedEvent, _| async move {
            std::future::pending::<()>().await;
            Ok(())
        })
        .metrics_interval(Duration::from_secs(3600))
        .handle_signals(false)
        .build()
        .unwrap();
    let waiting = || {
        let s = samples(&handle);
        let state = |state: &str| {
            let labels = [
                r#"topic="mt_dropped""#,
                r#"subscriber="mt_dropped_sub""#,
                &format!(r#"state="{state}""#),
            ];
            get(&s, &key("redjob_subscriber_events", &labels))
        };
        Some(state("lag")? + state("pending")?)
    };
    let mut run = Box::pin(worker.run());
    tokio::select! {
        r = &mut run => panic!("the worker stopped: {r:?}"),
        first = wait_until(Duration::from_secs(10), || waiting() == Some(1.0)) => {
            assert!(first, "{:#?}", samples(&handle));
        }
    }
    drop(run);
    for _ in 0..3 {
        client.publish(&DroppedEvent).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(waiting(), Some(1.0), "{:#?}", samples(&handle));
}
