//! Interop with PyPI's RSMQ client (PyRSMQ), through the very files the
//! layout chapter shows: docs/interop/python/enqueue_job.py (enqueues a typed
//! job) and docs/interop/python/driver.py (any RSMQ call).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::RedisServer;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/interop/python");

/// The virtualenv scripts/test makes, with PyRSMQ in it.
fn python() -> String {
    let py = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/interop-python/bin/python"
    );
    assert!(
        std::path::Path::new(py).exists(),
        "PyRSMQ missing: run scripts/test (it installs docs/interop/python/requirements.txt into target/interop-python)"
    );
    py.to_string()
}

/// Runs `script` with `args` and `stdin`; its standard output.
fn run_python(script: &str, args: &[&str], stdin: &str) -> String {
    let mut child = Command::new(python())
        .arg(format!("{DIR}/{script}"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs RSMQ calls with PyRSMQ; one result per call.
fn rsmq_py(server: &RedisServer, ops: Value) -> Vec<Value> {
    let port = server.port.to_string();
    let out = run_python("driver.py", &[&port, "rsmq"], &ops.to_string());
    serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// The job Python enqueues: what each run saw.
#[derive(Serialize, Deserialize, Job, Debug, PartialEq, Clone)]
#[job(name = "interop_welcome", queue = "py-mail")]
struct Welcome {
    user: u64,
    note: String,
}

impl Job for Welcome {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Mutex<Vec<Welcome>>>>()?
            .lock()
            .unwrap()
            .push(self.clone());
        Ok(())
    }
}

/// A worker of `Welcome` jobs that records them in `seen`, serving.
async fn serve(client: &Client, seen: &Arc<Mutex<Vec<Welcome>>>) -> common::Running {
    let worker = Worker::builder(client.backend())
        .register::<Welcome>()
        .data(seen.clone())
        .build()
        .unwrap();
    common::start_serving(worker).await
}

#[tokio::test]
async fn python_enqueues_a_typed_job_a_redjob_worker_runs() {
    let server = RedisServer::start();
    let port = server.port.to_string();
    let id = run_python(
        "enqueue_job.py",
        &[
            &port,
            "py-mail",
            "interop_welcome",
            r#"{"user": 7, "note": "from python ✓"}"#,
        ],
        "",
    );
    let id = id.trim();
    assert_eq!(id.len(), 32, "an RSMQ id: {id:?}");

    let client = Client::connect(&server.url()).await.unwrap();
    let found = client.locate(&id.parse().unwrap()).await.unwrap();
    assert_eq!(found.expect("listed under its RSMQ id").queue, "py-mail");
    let seen: Arc<Mutex<Vec<Welcome>>> = Arc::default();
    let running = serve(&client, &seen).await;
    let done =
        common::wait_until(Duration::from_secs(10), || !seen.lock().unwrap().is_empty()).await;
    running.stop().await;
    assert!(done, "the worker did not run the job");
    assert_eq!(
        *seen.lock().unwrap(),
        [Welcome {
            user: 7,
            note: "from python ✓".into()
        }]
    );
    let stats = client.stats("py-mail").await.unwrap();
    assert_eq!((stats.processed, stats.failed), (1, 0));
}

#[tokio::test]
async fn python_receives_redjobs_envelope_and_deletes_it() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let id = client
        .enqueue(&Welcome {
            user: 9,
            note: "from rust".into(),
        })
        .await
        .unwrap();
    let r = rsmq_py(
        &server,
        json!([
            {"op": "getQueueAttributes", "qname": "py-mail"},
            {"op": "receiveMessage", "qname": "py-mail", "vt": 30},
            {"op": "receiveMessage", "qname": "py-mail"},
        ]),
    );
    assert_eq!(r[0]["msgs"], 1, "{r:?}");
    assert_eq!(r[1]["id"], id.to_string());
    let envelope: Value = serde_json::from_str(r[1]["message"].as_str().unwrap()).unwrap();
    assert_eq!(
        envelope,
        json!({"type": "interop_welcome", "args": {"user": 9, "note": "from rust"}})
    );
    assert_eq!(r[1]["rc"], 1);
    // received: hidden for its visibility timeout
    assert!(
        r[2]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("NoMessageInQueue")),
        "{r:?}"
    );
    let r = rsmq_py(
        &server,
        json!([{"op": "deleteMessage", "qname": "py-mail", "id": id.to_string()}]),
    );
    assert_eq!(r[0], true, "{r:?}");
    assert!(client.locate(&id).await.unwrap().is_none());
}

#[tokio::test]
async fn a_python_delay_holds_the_job_back_from_a_redjob_worker() {
    let server = RedisServer::start();
    let port = server.port.to_string();
    let client = Client::connect(&server.url()).await.unwrap();
    let seen: Arc<Mutex<Vec<Welcome>>> = Arc::default();
    let running = serve(&client, &seen).await;
    let sent = std::time::Instant::now();
    run_python(
        "enqueue_job.py",
        &[
            &port,
            "py-mail",
            "interop_welcome",
            r#"{"user": 1, "note": "later"}"#,
            "1.5",
        ],
        "",
    );
    let done =
        common::wait_until(Duration::from_secs(10), || !seen.lock().unwrap().is_empty()).await;
    let took = sent.elapsed();
    running.stop().await;
    assert!(done);
    // sent with a 1.5 s delay (PyRSMQ takes seconds): not run before it
    assert!(took >= Duration::from_millis(1500), "ran after {took:?}");
}
