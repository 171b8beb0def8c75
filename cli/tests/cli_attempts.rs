//! What happened to a job, from the CLI alone (the binary run as a process
//! against a private redis-server, beside a real worker): `jobs show` prints
//! every attempt of a job that failed twice then succeeded, with its outcome,
//! error and worker, from the queue's history; and for a cancelled job, when
//! it was cancelled and from where.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{RedisServer, start_serving, wait_for};
use redjob::inspect::{Inspect, JobState};
use redjob::queue::{QueueOptions, Queues};
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

/// Fails its first two runs, naming the attempt, then succeeds.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "cli_flaky", queue = "mail", max_attempts = 3, backoff = "10ms")]
struct Flaky {}

impl Job for Flaky {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        match ctx.attempt() {
            n @ (1 | 2) => Err(JobError::retry(format!("smtp refused try {n}"))),
            _ => Ok(()),
        }
    }
}

async fn cli(url: &str, args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_redjob"))
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("REDIS_URL")
        .env("USER", "alice")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .expect("the CLI exits within 30 s")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test]
async fn jobs_show_prints_every_attempt_of_a_job_that_failed_twice_then_succeeded() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("mail", QueueOptions::default())
        .await
        .unwrap();
    let worker = Worker::builder(client.backend())
        .queue("mail")
        .handle_signals(false)
        .build()
        .unwrap();
    let worker_id = worker.id().to_string();
    let running = start_serving(worker).await;
    let id = client.enqueue(&Flaky {}).await.unwrap();
    let b = client.backend();
    assert!(
        wait_for(Duration::from_secs(10), || async {
            matches!(b.job("mail", &id).await, Ok(Some(j)) if j.state == JobState::Finished)
        })
        .await
    );
    running.stop().await;

    let (code, text) = cli(&url, &["jobs", "show", id.as_ref()]).await;
    assert_eq!(code, 0, "{text}");
    let runs: Vec<&str> = text.lines().filter(|l| l.starts_with("  #")).collect();
    assert_eq!(runs.len(), 3, "{text}");
    for (n, line) in runs.iter().enumerate() {
        let outcome = if n < 2 { "error" } else { "ok" };
        assert!(
            line.starts_with(&format!("  #{:<3} {outcome}", n + 1)),
            "{line}"
        );
        assert!(line.contains(&format!("worker {worker_id} on ")), "{line}");
        assert!(line.contains("took "), "{line}");
    }
    for n in 1..=2 {
        assert!(text.contains(&format!("smtp refused try {n}")), "{text}");
    }
    assert!(
        text.lines().any(|l| l.starts_with("finished   succeeded")),
        "{text}"
    );

    let (code, out) = cli(&url, &["jobs", "show", id.as_ref(), "--json"]).await;
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[2]["outcome"], "ok");
    assert_eq!(v["state"], "finished");
    assert_eq!(v["finished"]["how"], "succeeded");
    assert_eq!(runs[2]["worker"], worker_id.as_str());
    assert!(runs[2]["duration_ms"].is_u64());
    assert!(runs[0]["error"].as_str().unwrap().contains("try 1"));

    // three runs of its type, in the queue's run times
    let (_, out) = cli(&url, &["queue", "show", "mail", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let t = &v["run_times"][0];
    assert_eq!(
        (t["type"].as_str(), t["count"].as_u64()),
        (Some("cli_flaky"), Some(3))
    );
    assert!(t["p99_ms"].as_u64().is_some(), "{v}");
    let (_, text) = cli(&url, &["queue", "show", "mail"]).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("cli_flaky") && l.contains(" 3 ")),
        "{text}"
    );

    // run it again from its history: a copy that names it
    let (code, out) = cli(&url, &["jobs", "retry", id.as_ref(), "--json"]).await;
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let copy = v["id"].as_str().unwrap().to_string();
    assert_ne!(copy, id.to_string());
    let (_, out) = cli(&url, &["jobs", "show", "mail", &copy, "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["retry_of"].as_str()),
        (Some("ready"), Some(id.as_ref()))
    );
    let (code, _) = cli(&url, &["jobs", "retry", &copy]).await;
    assert_eq!(code, 1, "a waiting job is not in the history");
}

#[tokio::test]
async fn jobs_show_says_when_a_job_was_cancelled_and_from_where() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("mail", QueueOptions::default())
        .await
        .unwrap();
    let id = client
        .enqueue_in(&Flaky {}, Duration::from_secs(3600))
        .await
        .unwrap();
    let (code, out) = cli(&url, &["jobs", "cancel", "mail", id.as_ref()]).await;
    assert_eq!(code, 0, "{out}");
    let (code, text) = cli(&url, &["jobs", "show", id.as_ref()]).await;
    assert_eq!(code, 0, "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("finished"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.starts_with("finished   cancelled "), "{line}");
    assert!(line.ends_with(" by cli alice"), "{line}");
    let (_, out) = cli(&url, &["jobs", "show", id.as_ref(), "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["finished"]["how"], "cancelled");
    assert_eq!(v["finished"]["by"], "cli alice");
    let at = v["finished"]["at_ms"].as_u64().unwrap();
    assert!(at >= id.sent_ms(), "cancelled after it was sent");
    // the history lists it, filtered by how it finished
    let (_, out) = cli(
        &url,
        &[
            "jobs",
            "history",
            "mail",
            "--outcome",
            "cancelled",
            "--since",
            "1h",
            "--json",
        ],
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["jobs"][0]["id"], id.as_ref());
    assert_eq!(v["jobs"][0]["finished"]["by"], "cli alice");
    let (_, out) = cli(
        &url,
        &["jobs", "history", "mail", "--outcome", "dead", "--json"],
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["jobs"].as_array().unwrap().len(), 0);
    let (_, text) = cli(&url, &["jobs", "history", "mail"]).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with(id.as_ref()) && l.contains(" cancelled ")),
        "{text}"
    );
    // a purge is one event, with who
    client
        .enqueue_in(&Flaky {}, Duration::from_secs(3600))
        .await
        .unwrap();
    let (code, out) = cli(&url, &["queue", "purge", "mail", "--yes"]).await;
    assert_eq!(code, 0, "{out}");
    let (_, text) = cli(&url, &["jobs", "history", "mail"]).await;
    assert!(
        text.lines()
            .any(|l| l.ends_with("purged 1 jobs by cli alice")),
        "{text}"
    );
    let (_, out) = cli(&url, &["jobs", "history", "mail", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["events"][0]["what"], "purged");
    assert_eq!(v["events"][0]["count"], 1);
    // so is a pause, as every other action the CLI takes
    let (code, out) = cli(&url, &["queue", "pause", "mail"]).await;
    assert_eq!(code, 0, "{out}");
    let (_, text) = cli(&url, &["jobs", "history", "mail"]).await;
    assert!(
        text.lines().any(|l| l.ends_with(" paused by cli alice")),
        "{text}"
    );
    // the API's own cancel says so
    let other = client
        .enqueue_in(&Flaky {}, Duration::from_secs(3600))
        .await
        .unwrap();
    client.backend().cancel("mail", &other).await.unwrap();
    let (_, text) = cli(&url, &["jobs", "show", other.as_ref()]).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("finished   cancelled") && l.ends_with(" by api")),
        "{text}"
    );
}

#[tokio::test]
async fn queue_settings_show_and_change_the_history() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("mail", QueueOptions::default())
        .await
        .unwrap();
    let (code, out) = cli(&url, &["queue", "settings", "mail", "--json"]).await;
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["history"]["enabled"], true);
    assert_eq!(v["history"]["max_count"], 1000);
    assert_eq!(v["history"]["args_max_age_ms"], 3_600_000);
    assert_eq!(v["history"]["stored"], false);
    let (code, out) = cli(
        &url,
        &[
            "queue",
            "settings",
            "mail",
            "--history-max-count",
            "none",
            "--history-args-max-age",
            "0s",
            "--json",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["history"]["max_count"], serde_json::Value::Null);
    assert_eq!(v["history"]["args_max_age_ms"], 0);
    assert_eq!(v["history"]["stored"], true);
    let (code, text) = cli(&url, &["queue", "settings", "mail", "--history", "off"]).await;
    assert_eq!(code, 0, "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("history ") && l.contains("off")),
        "{text}"
    );
    let (code, _) = cli(&url, &["queue", "settings", "mail", "--history", "maybe"]).await;
    assert_eq!(code, 2, "a usage error");
    use redjob::ops::Admin;
    let h = client.settings("mail").await.unwrap().history.unwrap();
    assert_eq!((h.enabled, h.max_count), (false, None));
}
