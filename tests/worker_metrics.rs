//! The worker's metrics, read back the way an operator sees them: through the
//! Prometheus exporter's text rendering, against a real redis-server.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{RedisServer, start, wait_for, wait_until};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redjob::ops::Admin;
use redjob::queue::Queues;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

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
    let handle = PrometheusBuilder::new()
        .set_buckets(&[0.001, 0.01, 0.1, 1.0, 10.0])
        .unwrap()
        .install_recorder()
        .unwrap();
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
