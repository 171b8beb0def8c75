//! A queue's settings on the dashboard: the values in force shown on the
//! queue page (stored or default), changed by its form with the token for
//! every worker, bad values refused with a clear status, read-only mode
//! showing them without a form; two operators changing each part of the
//! concurrency at once keep both changes.

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
            && page.body.contains("Dead letters (set by "),
        "{}",
        page.body
    );

    // the concurrency per worker, for every worker: not stored, the form
    // is empty, and saving it so stores nothing
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(
        page.body
            .contains(r#"name="concurrency" value="" placeholder="none""#),
        "{}",
        page.body
    );
    let same = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("concurrency", "")],
    )
    .await;
    assert!(note(&same).contains("Nothing changed"), "{}", note(&same));
    assert_eq!(client.settings("mail").await.unwrap().concurrency, None);
    let saved = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("concurrency", "4")],
    )
    .await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER);
    assert!(
        note(&saved).contains("at most 4 at once in each worker"),
        "{}",
        note(&saved)
    );
    let stored = client.settings("mail").await.unwrap();
    assert_eq!(stored.in_force().concurrency.per_worker, Some(4));
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(
        page.body.contains(r#"name="concurrency" value="4""#)
            && page.body.contains(&format!(
                "Concurrency (set by {} at ",
                stored.set_by.concurrency.unwrap().by
            )),
        "{}",
        page.body
    );
    for bad in ["0", "many", "1000001"] {
        let r = post(
            &app,
            "/queues/mail/settings",
            &cookie,
            &[("csrf", &token), ("concurrency", bad)],
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.body);
    }
    assert_eq!(
        client
            .settings("mail")
            .await
            .unwrap()
            .in_force()
            .concurrency
            .per_worker,
        Some(4)
    );

    // the global concurrency keeps the per worker one; the rate limit as
    // starts per period
    let saved = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("concurrency", ""), ("global", "6")],
    )
    .await;
    assert!(
        note(&saved).contains("6 across all workers"),
        "{}",
        note(&saved)
    );
    let c = client
        .settings("mail")
        .await
        .unwrap()
        .in_force()
        .concurrency;
    assert_eq!((c.per_worker, c.global), (Some(4), Some(6)));
    let same = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("rate_limit", "")],
    )
    .await;
    assert!(note(&same).contains("Nothing changed"), "{}", note(&same));
    assert_eq!(client.settings("mail").await.unwrap().rate_limit, None);
    let saved = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("rate_limit", "100/1m")],
    )
    .await;
    assert!(
        note(&saved).contains("rate limit 100/1m"),
        "{}",
        note(&saved)
    );
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(
        page.body.contains(r#"name="rate_limit" value="100/1m""#)
            && page.body.contains(r#"name="global" value="6""#)
            && page
                .body
                .contains("In use across all workers: 0 of 6 running.")
            && page.body.contains("Rate: 0 of 100 started in the last 1m."),
        "{}",
        page.body
    );
    for bad in ["100", "0/1s", "5/2d", "x/1s"] {
        let r = post(
            &app,
            "/queues/mail/settings",
            &cookie,
            &[("csrf", &token), ("rate_limit", bad)],
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.body);
    }
    assert_eq!(
        client.settings("mail").await.unwrap().rate_limit,
        Some(redjob::ops::RateLimit::per_minute(100))
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
        page.body.contains("Dead letters (set by dashboard at ")
            && page.body.contains("): at most none, for 36h.")
            && page.body.contains("Concurrency (set by dashboard at ")
            && page
                .body
                .contains("at most 4 at once in each worker, 6 across all workers.")
            && page.body.contains("): 100/1m.")
            && !page.body.contains("dead_max_count")
            && !page.body.contains(r#"name="concurrency""#),
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

/// Two operators change a queue's concurrency at once, one per worker, the
/// other across all workers: both changes stay. The dashboard read the
/// stored concurrency and wrote both parts back, so the one whose write
/// came second put back the part the other had changed (here the two posts
/// both read before either wrote, and one change was lost).
#[tokio::test]
async fn two_operators_changing_each_part_of_the_concurrency_at_once_keep_both_changes() {
    let (_server, client) = setup().await;
    client
        .set_settings(
            "mail",
            &redjob::ops::QueueSettings::concurrency(
                redjob::ops::Concurrency::per_worker(2).with_global(10),
            ),
        )
        .await
        .unwrap();
    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/queues/mail", true).await;
    let per_worker = [("csrf", &*token), ("concurrency", "5"), ("global", "")];
    let global = [("csrf", &*token), ("concurrency", ""), ("global", "20")];
    let (a, b) = tokio::join!(
        post(&app, "/queues/mail/settings", &cookie, &per_worker),
        post(&app, "/queues/mail/settings", &cookie, &global)
    );
    assert_eq!(
        (a.status, b.status),
        (StatusCode::SEE_OTHER, StatusCode::SEE_OTHER)
    );
    let c = client
        .settings("mail")
        .await
        .unwrap()
        .in_force()
        .concurrency;
    assert_eq!(
        (c.per_worker, c.global),
        (Some(5), Some(20)),
        "one operator's change was lost ({} / {})",
        note(&a),
        note(&b)
    );
}

/// The concurrency form sends both fields as the page showed them: saving
/// it with one field changed leaves the other part as stored now, which
/// another operator may have changed since the page was read (the old
/// handler wrote both fields, putting back the part shown).
#[tokio::test]
async fn saving_the_concurrency_form_with_one_field_changed_keeps_the_other_part_as_stored_now() {
    let (_server, client) = setup().await;
    let both = |pw: u32, g: u32| {
        redjob::ops::QueueSettings::concurrency(
            redjob::ops::Concurrency::per_worker(pw).with_global(g),
        )
    };
    client.set_settings("mail", &both(2, 10)).await.unwrap();
    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/queues/mail", true).await;
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(
        page.body.contains(r#"name="concurrency_was" value="2""#)
            && page.body.contains(r#"name="global_was" value="10""#),
        "the form carries the values shown"
    );
    // another operator changes the per-worker part meanwhile
    client.set_settings("mail", &both(5, 10)).await.unwrap();
    let form = [
        ("csrf", &*token),
        ("concurrency_was", "2"),
        ("global_was", "10"),
        ("concurrency", "2"),
        ("global", "20"),
    ];
    let r = post(&app, "/queues/mail/settings", &cookie, &form).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let c = client
        .settings("mail")
        .await
        .unwrap()
        .in_force()
        .concurrency;
    assert_eq!(
        (c.per_worker, c.global),
        (Some(5), Some(20)),
        "the per-worker part shown was put back ({})",
        note(&r)
    );
}

#[tokio::test]
async fn the_history_settings_show_and_change_from_the_queue_page() {
    use redjob::ops::History;
    let (_server, client) = setup().await;
    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/queues/mail", true).await;
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(
        page.body
            .contains(r#"name="history_max_count" value="1000""#)
            && page.body.contains(r#"name="history_max_age" value="1d""#)
            && page
                .body
                .contains(r#"name="history_args_max_age" value="1h""#)
            && page.body.contains("History of finished jobs (default)"),
        "{}",
        page.body
    );
    let saved = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[
            ("csrf", &token),
            ("history", "on"),
            ("history_max_count", "50"),
            ("history_max_age", "7d"),
            ("history_args_max_age", "0s"),
        ],
    )
    .await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER);
    assert!(
        note(&saved).contains("history on, at most 50, for 7d, arguments for 0ms"),
        "{}",
        note(&saved)
    );
    assert_eq!(
        client.settings("mail").await.unwrap().history,
        Some(History {
            enabled: true,
            max_count: Some(50),
            max_age: Some(Duration::from_secs(7 * 86_400)),
            args_max_age: Some(Duration::ZERO),
        })
    );
    // the dead letters' setting is left as it was
    assert_eq!(client.settings("mail").await.unwrap().dead_letters, None);
    let off = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("history", "off")],
    )
    .await;
    assert_eq!(off.status, StatusCode::SEE_OTHER);
    let h = client.settings("mail").await.unwrap().history.unwrap();
    assert_eq!((h.enabled, h.max_count), (false, Some(50)), "the rest kept");
    for (field, value) in [
        ("history", "maybe"),
        ("history_max_count", "0"),
        ("history_max_age", "soon"),
    ] {
        let mut form = vec![("csrf", token.as_str()), (field, value)];
        if field != "history" {
            form.push(("history", "on"));
        }
        let r = post(&app, "/queues/mail/settings", &cookie, &form).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{field}={value}");
    }
    assert!(
        !client
            .settings("mail")
            .await
            .unwrap()
            .history
            .unwrap()
            .enabled
    );
    // a history field without `history` (a form of a script's): the
    // history's setting, not the dead letters'
    let r = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("history_max_count", "5")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let s = client.settings("mail").await.unwrap();
    assert_eq!(s.history.unwrap().max_count, Some(5));
    assert_eq!(s.dead_letters, None);
    // an age past the longest (50 years): refused with the bound, not cut
    // to what is stored (2^52 ms, as it was); the stored age stays
    let before = client.settings("mail").await.unwrap().history.unwrap();
    let r = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("history_max_age", "9999999999d")],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(
        r.body.contains("max age 9999999999d: at most 18250d"),
        "{}",
        r.body
    );
    let stored = client.settings("mail").await.unwrap().history.unwrap();
    assert_eq!(stored, before);
    // two forms' fields in one post: refused, nothing stored (the first
    // form's fields were saved and the rest dropped unsaid)
    let r = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[
            ("csrf", &token),
            ("history_max_count", "7"),
            ("dead_max_count", "9"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("one form"), "{}", r.body);
    let s = client.settings("mail").await.unwrap();
    assert_eq!(s.history.unwrap().max_count, Some(5));
    assert_eq!(s.dead_letters, None);
    // no setting at all: refused, nothing stored
    let r = post(&app, "/queues/mail/settings", &cookie, &[("csrf", &token)]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert_eq!(client.settings("mail").await.unwrap().dead_letters, None);
}

#[tokio::test]
async fn a_throttle_is_shown_and_ended_from_the_queue_page() {
    use redjob::backend::{Backend, Settle, Throttle};
    use redjob::queue::SendMessage;
    let (_server, client) = setup().await;
    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/queues/mail", true).await;
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(!page.body.contains("/queues/mail/unthrottle"));
    // a job whose handler said its dependency throttles it for an hour
    let q = client.backend();
    let body = r#"{"type":"A","args":{}}"#;
    Backend::send(
        &q,
        "mail",
        &[SendMessage::new(body)],
        &QueueOptions::default(),
    )
    .await
    .unwrap();
    let d = q
        .fetch("mail", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs[0]
        .clone();
    let throttle = Settle {
        throttles: vec![Throttle {
            id: d.id,
            token: d.token,
            deliveries: d.token.attempt().saturating_sub(1),
            delay: Duration::from_secs(3600),
            error: "429".into(),
            key: false,
        }],
        ..Settle::default()
    };
    q.settle("mail", &throttle).await.unwrap();
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(
        page.body.contains("Throttled by a handler until ")
            && page.body.contains("/queues/mail/unthrottle"),
        "{}",
        page.body
    );
    let ended = post(
        &app,
        "/queues/mail/unthrottle",
        &cookie,
        &[("csrf", &token)],
    )
    .await;
    assert_eq!(ended.status, StatusCode::SEE_OTHER);
    assert!(note(&ended).contains("Throttle ended"), "{}", note(&ended));
    assert_eq!(
        client.limit_usage("mail").await.unwrap().throttled_until_ms,
        None
    );
    let again = post(
        &app,
        "/queues/mail/unthrottle",
        &cookie,
        &[("csrf", &token)],
    )
    .await;
    assert!(note(&again).contains("not throttled"), "{}", note(&again));
}
