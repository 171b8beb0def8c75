//! Workers say what they serve: the registry lists each live worker's job
//! types with their declared options, and `redjob enqueue` applies them (the
//! type's priority; a unique type's key, the app's for the same arguments; a
//! keyed type's concurrency key, the app's from the same arguments);
//! it warns when no live worker knows the type (refuses with `--strict`) or
//! when live workers disagree, and `jobs show` says a job of a type no live
//! worker knows waits for one, until when.

#[path = "../../tests/common/mod.rs"]
mod common;
mod run;

use std::time::Duration;

use common::RedisServer;
use redjob::backend::Backend;
use redjob::inspect::Inspect;
use redjob::ops::Admin;
use redjob::queue::{QueueOptions, Queues};
use redjob::{Client, Job, JobContext, JobError};
use run::cli;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "reg_unique", queue = "regq", unique, priority = 3)]
struct RegUnique {
    user: u64,
    full: bool,
}

impl Job for RegUnique {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "reg_low", queue = "regq", priority = -5, max_attempts = 3)]
struct RegLow {}

impl Job for RegLow {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A job type whose jobs of one account run one at a time.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "reg_per_account", queue = "acct", concurrency_key = "account")]
struct RegPerAccount {
    account: u64,
}

impl Job for RegPerAccount {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A keyed type whose key field serde renames, as a type written for a
/// JavaScript producer would.
#[derive(Serialize, Deserialize, Job)]
#[serde(rename_all = "camelCase")]
#[job(
    name = "reg_per_account_camel",
    queue = "acct_camel",
    concurrency_key = "account_id"
)]
struct RegPerAccountCamel {
    account_id: u64,
}

impl Job for RegPerAccountCamel {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// The live workers as `redjob workers --json` lists them, once `n` are.
async fn listed(url: &str, n: usize) -> Value {
    for _ in 0..100 {
        let v = cli(url, &["workers", "--json"]).await.json();
        if v.as_array().is_some_and(|w| w.len() == n) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{n} workers listed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_applies_the_options_the_live_workers_declare() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("regq", QueueOptions::default())
        .await
        .unwrap();
    // paused: the jobs stay queued for the checks
    client.pause("regq").await.unwrap();
    let worker = redjob::Worker::builder(client.backend())
        .register::<RegUnique>()
        .unknown_jobs_retry_for(Duration::from_secs(3600))
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());

    let w = listed(&url, 1).await;
    let types = w[0]["job_types"].as_array().unwrap();
    let unique = types.iter().find(|t| t["name"] == "reg_unique").unwrap();
    assert_eq!(
        (&unique["queue"], &unique["priority"], &unique["unique"]),
        (&json!("regq"), &json!(3), &json!("keep"))
    );
    let low = types.iter().find(|t| t["name"] == "reg_low").unwrap();
    assert_eq!(
        (&low["priority"], &low["max_attempts"]),
        (&json!(-5), &json!(3))
    );
    assert_eq!(w[0]["unknown_jobs_retry_for_ms"], 3_600_000);

    // the type's priority, unless --priority says otherwise
    let v = cli(
        &url,
        &[
            "enqueue",
            "regq",
            r#"{"type":"reg_low","args":{}}"#,
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(v["priority"], -5);
    let id = v["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(client.job("regq", &id).await.unwrap().unwrap().priority, -5);
    let v = cli(
        &url,
        &[
            "enqueue",
            "regq",
            r#"{"type":"reg_low","args":{}}"#,
            "--priority",
            "2",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(v["priority"], 2);

    // a unique type: the CLI's key is the app's, the fields in another order
    let body = r#"{"type":"reg_unique","args":{"full":true,"user":7}}"#;
    let v = cli(&url, &["enqueue", "regq", body, "--json"]).await.json();
    assert_eq!(
        (&v["duplicate"], &v["outcome"], &v["priority"]),
        (&json!(false), &json!("added"), &json!(3))
    );
    let first = v["id"].as_str().unwrap().to_string();
    let again = client
        .enqueue(&RegUnique {
            user: 7,
            full: true,
        })
        .await
        .unwrap();
    assert_eq!(
        again.to_string(),
        first,
        "the app's enqueue meets the CLI's job"
    );
    let v = cli(&url, &["enqueue", "regq", body, "--json"]).await.json();
    assert_eq!((&v["duplicate"], &v["id"]), (&json!(true), &json!(first)));
    assert_eq!(v["outcome"], "duplicate");
    assert_eq!(client.counts("regq").await.unwrap().ready, 3);

    // a type no live worker knows: a warning, or a refusal with --strict
    let unknown = r#"{"type":"no_such_job","args":{}}"#;
    let r = cli(&url, &["enqueue", "regq", unknown]).await;
    let id = r.ok().trim().to_string();
    assert!(
        r.err
            .contains("warning: no live worker knows job type \"no_such_job\""),
        "{}",
        r.err
    );
    let strict = cli(&url, &["enqueue", "regq", unknown, "--strict"]).await;
    strict.failed("no live worker knows job type \"no_such_job\"");
    // and the job says what it waits for, until when
    let show = cli(&url, &["jobs", "show", "regq", &id]).await;
    let out = show.ok();
    assert!(
        out.contains("waiting    for a worker that knows `no_such_job` since")
            && out.contains("dead-lettered in 59m"),
        "{out}"
    );
    let v = cli(&url, &["jobs", "show", "regq", &id, "--json"])
        .await
        .json();
    let w = &v["waiting_for_worker"];
    let since = w["since_ms"].as_u64().unwrap();
    assert_eq!(w["dead_at_ms"].as_u64(), Some(since + 3_600_000));

    // live workers that disagree on a type's options: a warning naming them
    let b = client.backend();
    let other = json!({"job_types": [{"name": "reg_low", "queue": "regq", "priority": 7,
        "max_attempts": 3, "timeout_ms": 1800000, "backoff_ms": 1000}]});
    b.serve("other-build", other.to_string().as_bytes())
        .await
        .unwrap();
    let beat = json!({"id": "other-worker", "host": "web-9", "pid": 42, "version": "0",
        "queues": ["regq"], "concurrency": 1, "ttl_ms": 60000, "up_ms": 0,
        "serves": "other-build"});
    b.beat(
        "other-worker",
        beat.to_string().as_bytes(),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    listed(&url, 2).await;
    let r = cli(
        &url,
        &["enqueue", "regq", r#"{"type":"reg_low","args":{}}"#],
    )
    .await;
    r.ok();
    assert!(
        r.err
            .contains("live workers disagree on job type \"reg_low\"")
            && r.err.contains("priority 7")
            && r.err.contains("web-9 (pid 42"),
        "{}",
        r.err
    );

    stop.cancel();
    task.await.unwrap().unwrap();
}

/// `redjob enqueue` of a keyed type derives the concurrency key the app
/// derives from the same arguments, with the type's places, as the live
/// workers publish the type's key: a second job of one account waits for
/// the first's place, from the CLI as from the app. An argument it cannot
/// tell the app's key from is refused, and `--concurrency-key` gives one.
/// The old registry carried no key: a CLI enqueue took no place of its key,
/// so two jobs of one account sent by an operator ran at once, past
/// `per_key = 1`, with no warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_enqueue_of_a_keyed_type_waits_for_its_keys_place_as_an_app_enqueue_does() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("acct", QueueOptions::default())
        .await
        .unwrap();
    // paused: nothing runs while the places are counted
    client.pause("acct").await.unwrap();
    let worker = redjob::Worker::builder(client.backend())
        .register::<RegPerAccount>()
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    let w = listed(&url, 1).await;
    let types = w[0]["job_types"].as_array().unwrap();
    let keyed = types
        .iter()
        .find(|t| t["name"] == "reg_per_account")
        .unwrap();
    assert_eq!(
        (&keyed["concurrency_key"], &keyed["per_key"]),
        (&json!("account"), &json!(1))
    );
    // the app: the second job of account 7 waits for the first's place
    client.enqueue(&RegPerAccount { account: 7 }).await.unwrap();
    client.enqueue(&RegPerAccount { account: 7 }).await.unwrap();
    assert_eq!(client.counts("acct").await.unwrap().blocked, 1);
    // the CLI, two jobs of account 8
    let body = r#"{"type":"reg_per_account","args":{"account":8}}"#;
    for _ in 0..2 {
        let v = cli(&url, &["enqueue", "acct", body, "--json"]).await.json();
        assert_eq!(v["concurrency_key"], "8");
    }
    assert_eq!(
        client.counts("acct").await.unwrap().blocked,
        2,
        "the CLI's second job of account 8 waits for its key's place as the app's does"
    );
    // no key the app's would be: refused, sending nothing
    for args in [r#"{}"#, r#"{"account":null}"#, r#"{"account":[8]}"#] {
        let body = format!(r#"{{"type":"reg_per_account","args":{args}}}"#);
        cli(&url, &["enqueue", "acct", &body])
            .await
            .failed("give the key with --concurrency-key");
    }
    assert_eq!(client.counts("acct").await.unwrap().total(), 4);
    // a key given: it is the one
    let v = cli(
        &url,
        &["enqueue", "acct", body, "--concurrency-key", "7", "--json"],
    )
    .await
    .json();
    assert_eq!(v["concurrency_key"], "7");
    assert_eq!(client.counts("acct").await.unwrap().blocked, 3);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A keyed type whose key field serde renames: the registry names the
/// field as the job's JSON holds it, and a CLI enqueue of the JSON the app
/// sends finds its key there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_enqueue_of_a_keyed_type_finds_a_key_field_serde_renames() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("acct_camel", QueueOptions::default())
        .await
        .unwrap();
    client.pause("acct_camel").await.unwrap();
    let worker = redjob::Worker::builder(client.backend())
        .register::<RegPerAccountCamel>()
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    let w = listed(&url, 1).await;
    let types = w[0]["job_types"].as_array().unwrap();
    let keyed = types
        .iter()
        .find(|t| t["name"] == "reg_per_account_camel")
        .unwrap();
    assert_eq!(keyed["concurrency_key"], "accountId");
    client
        .enqueue(&RegPerAccountCamel { account_id: 8 })
        .await
        .unwrap();
    // the JSON the app sends, from the CLI: the same key, so it waits
    let args = serde_json::to_string(&RegPerAccountCamel { account_id: 8 }).unwrap();
    let body = format!(r#"{{"type":"reg_per_account_camel","args":{args}}}"#);
    let v = cli(&url, &["enqueue", "acct_camel", &body, "--json"])
        .await
        .json();
    assert_eq!(v["concurrency_key"], "8");
    assert_eq!(client.counts("acct_camel").await.unwrap().blocked, 1);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A debounced type: a second enqueue moves the queued job's due time.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "reg_debounce", queue = "deb", unique = "replace_delay")]
struct RegDebounce {
    account: u64,
}

impl Job for RegDebounce {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// `redjob enqueue` of a type whose unique policy replaces says what the
/// send did to the queued job: here it moved it from an hour ahead to now
/// (`SendOutcome::Moved`). It said "a duplicate: the job already queued
/// under the same unique key" (`"duplicate": true`, no outcome), as for a
/// `keep` type whose job stays as it was, though the job's due time changed.
/// Now it says so, and `--json` has `"outcome": "moved"` (`"duplicate"`
/// stays true: the key was held, no job was added).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_enqueue_that_moves_a_unique_job_says_so_not_duplicate() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("deb", QueueOptions::default())
        .await
        .unwrap();
    client.pause("deb").await.unwrap();
    let worker = redjob::Worker::builder(client.backend())
        .register::<RegDebounce>()
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    listed(&url, 1).await;
    let body = r#"{"type":"reg_debounce","args":{"account":1}}"#;
    let first = cli(&url, &["enqueue", "deb", body, "--delay", "1h", "--json"])
        .await
        .json();
    assert_eq!(client.counts("deb").await.unwrap().scheduled, 1);
    // the same job again, due now: the queued one is moved to now
    let r = cli(&url, &["enqueue", "deb", body]).await;
    let text = r.ok().trim().to_string();
    let counts = client.counts("deb").await.unwrap();
    assert_eq!(
        (counts.ready, counts.scheduled),
        (1, 0),
        "the job was moved"
    );
    assert!(text.starts_with(first["id"].as_str().unwrap()), "{text}");
    assert!(
        !text.contains("a duplicate: the job already queued"),
        "the CLI says nothing changed, though it moved the job: {text:?}"
    );
    assert!(text.contains("its due time moved"), "{text:?}");
    let v = cli(&url, &["enqueue", "deb", body, "--delay", "2h", "--json"])
        .await
        .json();
    assert_eq!(v["outcome"], "moved", "{v}");
    assert_eq!((&v["duplicate"], &v["id"]), (&json!(true), &first["id"]));
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// Fails every run, retried an hour on; unique until its run starts.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "reg_until_start",
    queue = "startq",
    unique_until = "start",
    backoff = "1h"
)]
struct RegUntilStart {
    feed: u64,
}

impl Job for RegUntilStart {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Err(JobError::retry("fails every run"))
    }
}

/// `redjob enqueue` of a type unique until its run starts (as the live
/// workers declare it: `"unique_until": "start"`) enqueues it so: a second
/// enqueue meets it while it waits, and once its run started (it now waits
/// an hour for its retry) an enqueue of its key adds a new job, as an app's
/// enqueue does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_enqueue_of_a_type_unique_until_start_frees_its_key_as_its_run_starts() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("startq", QueueOptions::default())
        .await
        .unwrap();
    client.pause("startq").await.unwrap();
    let worker = redjob::Worker::builder(client.backend())
        .register::<RegUntilStart>()
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    let w = listed(&url, 1).await;
    let types = w[0]["job_types"].as_array().unwrap();
    let t = types
        .iter()
        .find(|t| t["name"] == "reg_until_start")
        .unwrap();
    assert_eq!(
        (&t["unique"], &t["unique_until"]),
        (&json!("keep"), &json!("start"))
    );
    let body = r#"{"type":"reg_until_start","args":{"feed":1}}"#;
    let first = cli(&url, &["enqueue", "startq", body, "--json"])
        .await
        .json();
    let dup = cli(&url, &["enqueue", "startq", body, "--json"])
        .await
        .json();
    assert_eq!(
        (&dup["outcome"], &dup["id"]),
        (&json!("duplicate"), &first["id"]),
        "held while it waits"
    );
    client.resume("startq").await.unwrap();
    let ran = common::wait_for(Duration::from_secs(10), || async {
        let c = client.counts("startq").await.unwrap();
        (c.ready, c.in_flight, c.scheduled) == (0, 0, 1)
    })
    .await;
    assert!(ran, "its first run failed: it waits for its retry");
    let again = cli(&url, &["enqueue", "startq", body, "--json"])
        .await
        .json();
    assert_eq!(
        again["outcome"], "added",
        "its key was freed as its run started: {again}"
    );
    assert_ne!(again["id"], first["id"]);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// `redjob enqueue` of a hand-written envelope that says
/// `"unique_until": "start"` itself, spaced as Python's `json.dumps` writes
/// it, for a type unique until its run starts: the stored body has the
/// member once, last, as the app writes it (the CLI recognised it only
/// without spaces and appended a second one). One that puts it elsewhere
/// than last, where no worker reads it, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_enqueue_of_an_envelope_spacing_its_unique_until_member_writes_it_once() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("startq", QueueOptions::default())
        .await
        .unwrap();
    client.pause("startq").await.unwrap();
    let worker = redjob::Worker::builder(client.backend())
        .register::<RegUntilStart>()
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    listed(&url, 1).await;
    let body = r#"{"type": "reg_until_start", "args": {"feed": 2}, "unique_until": "start"}"#;
    let sent = cli(&url, &["enqueue", "startq", body, "--json"])
        .await
        .json();
    assert_eq!(sent["outcome"], "added");
    let id: redjob::JobId = sent["id"].as_str().unwrap().parse().unwrap();
    let stored = client.job("startq", &id).await.unwrap().unwrap().body;
    let stored = String::from_utf8(stored).unwrap();
    assert_eq!(stored.matches("unique_until").count(), 1, "{stored}");
    assert_eq!(
        stored,
        r#"{"type": "reg_until_start", "args": {"feed": 2},"unique_until":"start"}"#
    );
    let elsewhere = r#"{"type": "reg_until_start", "unique_until": "start", "args": {"feed": 3}}"#;
    cli(&url, &["enqueue", "startq", elsewhere])
        .await
        .failed(r#""unique_until""#);
    stop.cancel();
    task.await.unwrap().unwrap();
}
