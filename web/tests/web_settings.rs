//! A queue's settings on the dashboard: the values in force shown on the
//! queue page (stored or default), changed by its form with the token for
//! every worker, bad values refused with a clear status, read-only mode
//! showing them without a form.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::time::Duration;

use axum::http::StatusCode;
use common::RedisServer;
use http::{get, get_with, note, post, session};
use redjob::Client;
use redjob::ops::{Admin, Retention};
use redjob::queue::{QueueOptions, Queues};

async fn setup() -> (RedisServer, Client) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("mail", QueueOptions::default())
        .await
        .unwrap();
    (server, client)
}

#[tokio::test]
async fn the_queue_page_shows_its_settings_and_its_form_changes_them() {
    let (_server, client) = setup().await;
    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/queues/mail", true).await;
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(
        page.body.contains(r#"name="dead_max_count" value="10000""#)
            && page.body.contains(r#"name="dead_max_age" value="30d""#)
            && page.body.contains("(default)"),
        "{}",
        page.body
    );

    let saved = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[
            ("csrf", &token),
            ("dead_max_count", "250"),
            ("dead_max_age", "none"),
        ],
    )
    .await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER);
    assert!(
        note(&saved).contains("at most 250, for none"),
        "{}",
        note(&saved)
    );
    assert_eq!(
        client.settings("mail").await.unwrap().dead_letters,
        Some(Retention {
            max_count: Some(250),
            max_age: None
        })
    );
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(
        page.body.contains(r#"value="250""#)
            && page.body.contains(r#"name="dead_max_age" value="none""#)
            && page.body.contains("(stored with the queue)"),
        "{}",
        page.body
    );

    // bad values and a missing token change nothing
    for (count, age) in [("0", "1d"), ("ten", "1d"), ("5", "3"), ("5", "0s")] {
        let r = post(
            &app,
            "/queues/mail/settings",
            &cookie,
            &[
                ("csrf", &token),
                ("dead_max_count", count),
                ("dead_max_age", age),
            ],
        )
        .await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{count} {age}: {}",
            r.body
        );
    }
    let r = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("dead_max_count", "1"), ("dead_max_age", "1d")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = post(
        &app,
        "/queues/nope/settings",
        &cookie,
        &[("csrf", &token), ("dead_max_count", "1")],
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert_eq!(
        client.settings("mail").await.unwrap().dead_letters,
        Some(Retention {
            max_count: Some(250),
            max_age: None
        })
    );

    // an age is kept in its unit
    post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[
            ("csrf", &token),
            ("dead_max_count", "none"),
            ("dead_max_age", "36h"),
        ],
    )
    .await;
    assert_eq!(
        client.settings("mail").await.unwrap().dead_letters,
        Some(Retention {
            max_count: None,
            max_age: Some(Duration::from_secs(36 * 3600))
        })
    );
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(page.body.contains(r#"value="36h""#), "{}", page.body);

    // a field left out keeps its value in force
    post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("dead_max_count", "300")],
    )
    .await;
    assert_eq!(
        client.settings("mail").await.unwrap().dead_letters,
        Some(Retention {
            max_count: Some(300),
            max_age: Some(Duration::from_secs(36 * 3600))
        })
    );
    post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("dead_max_count", "none")],
    )
    .await;

    // read-only: shown, no form, a POST refused
    let ro = redjob_web::Dashboard::new(client.clone())
        .read_only(true)
        .router();
    let page = get(&ro, "/queues/mail").await;
    assert!(
        page.body.contains("Dead letters: at most none, for 36h.")
            && !page.body.contains("dead_max_count"),
        "{}",
        page.body
    );
    let r = post(
        &ro,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("dead_max_count", "1")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}
