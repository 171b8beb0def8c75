//! Long names on the dashboard: a queue, topic or subscriber name of 160
//! characters (the longest legal) and a long job or event type are cut short
//! by the style on every page that shows them, the whole name in the `title`
//! of the element that cuts it (shown on hover).

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use common::RedisServer;
use http::get;
use redjob::Client;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::client::EnqueueOptions;
use redjob::inspect::{Inspect, JobState};
use redjob::queue::{QueueOptions, SendMessage};
use redjob::topic::{EventOptions, EventSettle, Start, Topics};

/// Runs until cancelled (in flight on the workers page).
#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "web_names_slow", queue = "slow")]
struct Slow {
    n: u32,
}

impl redjob::Job for Slow {
    async fn perform(&self, ctx: &redjob::JobContext) -> Result<(), redjob::JobError> {
        ctx.cancellation().cancelled().await;
        Ok(())
    }
}

/// Every place the page's `<body>` shows `name` as text (after a tag or a
/// space; not in an attribute), the element around it is one that cuts it
/// short with the whole name in its title; and it shows it.
fn cut_everywhere(page: &str, html: &str, name: &str) {
    let body = &html[html.find("<body").expect("a body")..];
    let shown: Vec<usize> = body
        .match_indices(name)
        .map(|(i, _)| i)
        .filter(|&i| body[..i].ends_with(['>', ' ']))
        .collect();
    assert!(!shown.is_empty(), "{page}: {name} not shown in {body}");
    for i in shown {
        let before = &body[..i];
        let tag = &before[before.rfind('<').unwrap()..];
        assert!(
            tag.contains(r#"class="name""#) && tag.ends_with(&format!(r#"title="{name}">"#)),
            "{page}: {name} shown whole, not cut short with its title, after {tag}"
        );
    }
}

#[tokio::test]
async fn long_names_are_cut_short_with_the_whole_name_in_their_title() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let b = client.backend();
    let (queue, topic, sub) = ("q".repeat(160), "t".repeat(160), "s".repeat(160));
    let (job_type, event_type) = ("j".repeat(120), "e".repeat(120));

    // the queue: a dead letter and a job of the long type (which the worker
    // below retries: no handler has its type)
    let body = format!(r#"{{"type":"{job_type}","args":{{"n":1}}}}"#);
    let opts = QueueOptions::default();
    b.send(&queue, &[SendMessage::new(body.clone())], &opts)
        .await
        .unwrap();
    let leased = b.fetch(&queue, 1, Duration::from_secs(60)).await.unwrap();
    let settle = Settle {
        dead: vec![DeadLetterEntry {
            id: leased.jobs[0].id,
            token: leased.jobs[0].token,
            error: "boom".into(),
        }],
        ..Settle::default()
    };
    b.settle(&queue, &settle).await.unwrap();
    let ready = b
        .send(&queue, &[SendMessage::new(body)], &opts)
        .await
        .unwrap()[0]
        .id;

    // the topic: a dead event of the long type
    client
        .subscribe(&topic, &sub, Start::Beginning)
        .await
        .unwrap();
    b.publish(
        &topic,
        &[(event_type.as_str(), "{}")],
        &EventOptions::DEFAULT,
    )
    .await
    .unwrap();
    let got = b
        .read(&topic, &sub, "c", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let batch = EventSettle {
        dead: vec![(got[0].delivery(), got[0].clone(), "declined".into())],
        ..Default::default()
    };
    b.settle_events(&topic, &sub, "c", &batch, None)
        .await
        .unwrap();

    // a worker on the long queue running a job, and a schedule of long name
    let hourly = redjob::ops::Schedule::every(Duration::from_secs(3600)).unwrap();
    let periodic = redjob::worker::Periodic::new(hourly, Slow { n: 1 })
        .queue(queue.clone())
        .name(queue.clone());
    let worker = redjob::Worker::builder(client.backend())
        .queue(queue.clone())
        .periodic_job(periodic)
        .grace_period(Duration::from_millis(200))
        // beats come with lease renewals: a short lease, a first beat soon
        .lease(Duration::from_secs(3))
        .handle_signals(false)
        .build()
        .unwrap();
    let running = common::start_serving(worker).await;
    client
        .enqueue_with(&Slow { n: 2 }, EnqueueOptions::new().queue(queue.clone()))
        .await
        .unwrap();

    let app = Router::new().nest("/jobs", redjob_web::router(client.clone()));
    assert!(
        common::wait_for(Duration::from_secs(10), || async {
            let page = get(&app, "/jobs/workers").await.body;
            page.contains("web_names_slow") && page.contains(&queue)
        })
        .await,
        "the worker reports the job it runs"
    );
    let dead_id = client
        .list(&queue, JobState::Dead, None, 1)
        .await
        .unwrap()
        .jobs[0]
        .id;
    let q = format!("/jobs/queues/{queue}");
    let t = format!("/jobs/topics/{topic}");
    let pages = [
        ("overview", "/jobs".to_string(), vec![&queue]),
        (
            "queue",
            format!("{q}?state=scheduled"),
            vec![&queue, &job_type],
        ),
        ("dead letters", format!("{q}/dead"), vec![&queue, &job_type]),
        (
            "dead job",
            format!("{q}/jobs/{dead_id}"),
            vec![&queue, &job_type],
        ),
        (
            "ready job",
            format!("{q}/jobs/{ready}"),
            vec![&queue, &job_type],
        ),
        ("topics", "/jobs/topics".into(), vec![&topic]),
        ("topic", t.clone(), vec![&topic, &sub]),
        (
            "topic dead",
            format!("{t}/{sub}/dead"),
            vec![&topic, &sub, &event_type],
        ),
        ("purge confirmation", format!("{q}/purge"), vec![&queue]),
        (
            "dead letters' confirmation",
            format!("{q}/dead/confirm?do=delete"),
            vec![&queue],
        ),
        (
            "topic dead confirmation",
            format!("{t}/{sub}/dead/confirm?do=requeue"),
            vec![&topic, &sub],
        ),
        (
            "rewind confirmation",
            format!("{t}/{sub}/rewind?to=beginning"),
            vec![&topic, &sub],
        ),
        ("workers", "/jobs/workers".into(), vec![&queue]),
        ("periodic", "/jobs/periodic".into(), vec![&queue]),
    ];
    for (page, path, names) in pages {
        let got = get(&app, &path).await;
        assert_eq!(got.status, StatusCode::OK, "{page}: {}", got.body);
        for name in names {
            cut_everywhere(page, &got.body, name);
        }
    }

    // the style cuts them short
    let css = get(&app, "/jobs/assets/style.css").await.body;
    let rule = css
        .split('}')
        .find_map(|r| r.split_once("\n.name {").map(|(_, rule)| rule))
        .expect("a .name rule");
    for part in [
        "overflow: hidden",
        "text-overflow: ellipsis",
        "white-space: nowrap",
    ] {
        assert!(rule.contains(part), "no {part} in {rule}");
    }
    running.stop().await;
}
