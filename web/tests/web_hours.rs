//! The overview's chart of the last 7 days, hour by hour (`?range=week`),
//! beside the last hour's by minute.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::time::Duration;

use axum::http::StatusCode;
use common::RedisServer;
use http::get;
use redjob::Client;
use redjob::backend::{Backend, Settle};
use redjob::queue::{QueueOptions, SendMessage};

#[tokio::test]
async fn the_overview_charts_the_last_week_by_hour_when_asked() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.backend();
    let msgs: Vec<SendMessage> = (0..5).map(|i| SendMessage::new(format!("{i}"))).collect();
    q.send("mail", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let got = q.fetch("mail", 5, Duration::from_secs(60)).await.unwrap();
    let acks = got.jobs.iter().map(|j| (j.id, j.token)).collect();
    let settle = Settle {
        acks,
        ..Settle::default()
    };
    q.settle("mail", &settle).await.unwrap();
    let app = redjob_web::router(client.clone());

    let hour = get(&app, "/").await;
    assert!(
        hour.body.contains("Last hour: <b class=\"ok\">5</b>"),
        "{}",
        hour.body
    );
    assert!(
        hour.body.contains(r#"href="/?range=week""#),
        "{}",
        hour.body
    );

    let week = get(&app, "/?range=week&sort=processed&desc=1").await;
    assert_eq!(week.status, StatusCode::OK);
    assert!(
        week.body.contains("Last 7 days: <b class=\"ok\">5</b>"),
        "{}",
        week.body
    );
    assert!(week.body.contains("7 days ago"), "{}", week.body);
    // one bar an hour, 7 days and the current one; the range survives a sort
    assert_eq!(week.body.matches("<rect class=\"base\"").count(), 169);
    assert!(
        week.body
            .contains("sort=processed&amp;desc=1&amp;range=week"),
        "{}",
        week.body
    );
    assert!(
        week.body.contains(r#"name="range" value="week""#),
        "{}",
        week.body
    );

    // refreshed once a minute, the hour's every 5 s
    assert!(
        week.body.contains(r#"data-refresh="60000""#),
        "{}",
        week.body
    );
    assert!(
        hour.body.contains(r#"data-refresh="5000""#),
        "{}",
        hour.body
    );

    let bad = get(&app, "/?range=year").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}
