//! How long the dashboard's pages take at scale, against a private
//! redis-server: one queue of 1,000,000 jobs with 10,000 dead letters, and
//! 1,000 more queues (the overview lists every queue).
//!
//! `cargo run --release -p redjob-web --example page_times [-- --jobs N --queues N]`

#[path = "../../examples/bench/redis.rs"]
#[allow(dead_code)]
mod server;

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use redjob::Client;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::inspect::{Inspect, JobState};
use redjob::queue::{QueueOptions, SendMessage};
use tower::ServiceExt;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn body(i: usize) -> String {
    format!(r#"{{"type":"page_job","args":{{"i":{i},"to":"user{i}@example.com"}}}}"#)
}

#[tokio::main]
async fn main() {
    let (jobs, queues) = (arg("--jobs", 1_000_000), arg("--queues", 1000));
    let server = server::Server::start();
    let client = Client::connect(&server.url).await.unwrap();
    let q = client.backend();
    let opts = QueueOptions::default();
    let filled = Instant::now();
    for start in (0..jobs).step_by(1000) {
        let msgs: Vec<SendMessage> = (start..(start + 1000).min(jobs))
            .map(|i| SendMessage::new(body(i)))
            .collect();
        q.send("big", &msgs, &opts).await.unwrap();
    }
    let mut killed = 0;
    while killed < 10_000.min(jobs / 2) {
        let got = q
            .fetch("big", 1000, Duration::from_secs(3600))
            .await
            .unwrap();
        let dead = got
            .jobs
            .iter()
            .map(|d| DeadLetterEntry {
                id: d.id,
                token: d.token,
                error: format!("smtp timeout {}", d.id),
            })
            .collect();
        let settle = Settle {
            dead,
            ..Settle::default()
        };
        killed += q.settle("big", &settle).await.unwrap().dead as usize;
    }
    for n in 0..queues {
        let msgs: Vec<SendMessage> = (0..10).map(|i| SendMessage::new(body(i))).collect();
        q.send(&format!("q{n:04}"), &msgs, &opts).await.unwrap();
    }
    println!(
        "filled in {:.1?}: {jobs} jobs in \"big\" ({killed} dead), {queues} more queues of 10",
        filled.elapsed()
    );

    // a cursor 100,000 jobs deep, and a job's id
    let mut after = None;
    for _ in 0..100 {
        after = client
            .list("big", JobState::Ready, after.as_ref(), 1000)
            .await
            .unwrap()
            .next;
    }
    let deep = after.map(|c| c.to_string()).unwrap_or_default();
    let id = client.peek("big", 1).await.unwrap()[0].id;

    let app = redjob_web::router(client.clone());
    let pages = [
        ("overview (all queues)", "/".to_string()),
        ("queue, first page of ready", "/queues/big".into()),
        (
            "queue, ready 100,000 deep",
            format!("/queues/big?state=ready&after={deep}"),
        ),
        ("queue, in flight", "/queues/big?state=in_flight".into()),
        ("job", format!("/queues/big/jobs/{id}")),
        ("dead letters, newest first", "/queues/big/dead".into()),
        (
            "dead letters, error filter matching none",
            "/queues/big/dead?error=nothing-like-this".into(),
        ),
        ("workers", "/workers".into()),
        ("periodic", "/periodic".into()),
    ];
    println!(
        "{:<44} {:>10} {:>10}",
        "page (median of 5, ms)", "median", "max"
    );
    for (name, path) in pages {
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let res = app
                .clone()
                .oneshot(Request::get(&path).body(Body::empty()).unwrap())
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{path}");
            res.into_body().collect().await.unwrap();
            times.push(t.elapsed());
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!("{name:<44} {:>10.1} {:>10.1}", ms(times[2]), ms(times[4]));
    }
}
