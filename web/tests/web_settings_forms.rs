//! The queue page's dead-letter and history forms posted as a browser posts
//! them (every field as the page showed it, one changed): a part left as
//! shown keeps the value stored now, which another operator may have changed
//! since the page was read or while the change was on its way, and a form
//! saved unchanged stores nothing (the setting stays the default, so a
//! worker's own value may still be stored).

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::time::Duration;

use axum::http::StatusCode;
use common::RedisServer;
use http::{get_with, note, post, session};
use redjob::Client;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, History, QueueSettings, Retention};
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

/// The value of attribute `name` in the tag `tag` (as maud writes it).
fn attr(tag: &str, name: &str) -> Option<String> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(
        tag[start..start + len]
            .replace("&quot;", "\"")
            .replace("&amp;", "&"),
    )
}

/// The fields the form holding a field named `marker` sends as the page
/// showed it: its inputs' values and its selects' selected options.
fn form_as_shown(body: &str, marker: &str) -> Vec<(String, String)> {
    let at = body
        .find(&format!("name=\"{marker}\""))
        .unwrap_or_else(|| panic!("no field {marker}: {body}"));
    let start = body[..at].rfind("<form").unwrap();
    let end = at + body[at..].find("</form>").unwrap();
    let form = &body[start..end];
    let mut fields = Vec::new();
    for tag in form.split('<').skip(1) {
        let tag = tag.split('>').next().unwrap_or("");
        if tag.starts_with("input ")
            && let (Some(n), Some(v)) = (attr(tag, "name"), attr(tag, "value"))
        {
            fields.push((n, v));
        }
    }
    for select in form.split("<select ").skip(1) {
        let name = attr(&format!(" {select}"), "name").unwrap();
        let options = select.split("</select>").next().unwrap();
        let chosen = options
            .split("<option ")
            .skip(1)
            .find(|o| o.split('>').next().unwrap().contains("selected"))
            .and_then(|o| attr(&format!(" {o}"), "value"))
            .unwrap();
        fields.push((name, chosen));
    }
    fields
}

/// `fields` with `name` set to `value`.
fn with(fields: &[(String, String)], name: &str, value: &str) -> Vec<(String, String)> {
    let mut f = fields.to_vec();
    f.iter_mut().find(|(n, _)| n == name).unwrap().1 = value.into();
    f
}

async fn post_form(app: &axum::Router, cookie: &str, fields: &[(String, String)]) -> http::Got {
    let form: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    post(app, "/queues/mail/settings", cookie, &form).await
}

#[tokio::test]
async fn the_history_and_dead_letter_forms_keep_a_part_another_operator_changed_since_the_page_was_read()
 {
    let (_server, client) = setup().await;
    let app = redjob_web::router(client.clone());
    let (cookie, _) = session(&app, "/queues/mail", true).await;
    let page = get_with(&app, "/queues/mail", &cookie).await;
    let history = form_as_shown(&page.body, "history_max_count");
    let dead = form_as_shown(&page.body, "dead_max_count");

    // another operator keeps the history a week, and dead letters a day
    let other = client.clone().acting_as("cli bob");
    let week = History {
        max_age: Some(Duration::from_secs(7 * 86_400)),
        ..History::default()
    };
    other
        .set_settings("mail", &QueueSettings::history(week))
        .await
        .unwrap();
    let day = Retention {
        max_age: Some(Duration::from_secs(86_400)),
        ..Retention::default()
    };
    other
        .set_settings("mail", &QueueSettings::dead_letters(day))
        .await
        .unwrap();

    // this operator saves the forms as the page showed them, the count changed
    let r = post_form(&app, &cookie, &with(&history, "history_max_count", "5000")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let h = client.settings("mail").await.unwrap().history.unwrap();
    assert_eq!(
        (h.max_count, h.max_age),
        (Some(5000), week.max_age),
        "the history's age shown was put back over bob's week ({})",
        note(&r)
    );
    let r = post_form(&app, &cookie, &with(&dead, "dead_max_count", "250")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let d = client.settings("mail").await.unwrap().dead_letters.unwrap();
    assert_eq!(
        (d.max_count, d.max_age),
        (Some(250), day.max_age),
        "the dead letters' age shown was put back over bob's day ({})",
        note(&r)
    );
}

#[tokio::test]
async fn the_history_and_dead_letter_forms_saved_unchanged_store_nothing() {
    let (_server, client) = setup().await;
    let app = redjob_web::router(client.clone());
    let (cookie, _) = session(&app, "/queues/mail", true).await;
    let page = get_with(&app, "/queues/mail", &cookie).await;
    for marker in ["history_max_count", "dead_max_count"] {
        let r = post_form(&app, &cookie, &form_as_shown(&page.body, marker)).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
        assert!(
            note(&r).contains("Nothing changed"),
            "{marker}: {}",
            note(&r)
        );
    }
    let s = client.settings("mail").await.unwrap();
    assert_eq!(
        (s.history, s.dead_letters),
        (None, None),
        "the defaults shown were stored as the dashboard's"
    );
}

/// The history and dead-letter forms store the fields changed and keep the
/// others as stored when the change lands: another operator's change of
/// another field, stored after the dashboard sent its own (a proxy holds the
/// dashboard's call until then), stays. The handler read the retention in
/// force and wrote it back whole, putting back the field it had read.
#[tokio::test]
async fn the_history_and_dead_letter_forms_keep_a_part_another_operator_changed_before_their_change_landed()
 {
    let (server, client) = setup().await;
    let bob = client.clone().acting_as("cli bob");
    let week = Some(Duration::from_secs(7 * 86_400));
    let day = Some(Duration::from_secs(86_400));
    let changes = [
        (
            ("history_max_count", "5000"),
            QueueSettings::history(History {
                max_age: week,
                ..History::default()
            }),
        ),
        (
            ("dead_max_count", "250"),
            QueueSettings::dead_letters(Retention {
                max_age: day,
                ..Retention::default()
            }),
        ),
    ];
    for ((field, value), other) in changes {
        // the proxy holds the dashboard's change (settings.lua's "set")
        let proxy = common::HoldingProxy::start(server.port, b"$3\r\nset\r\n").await;
        let dashboard = Client::connect(&proxy.url()).await.unwrap();
        let app = redjob_web::router(dashboard);
        let (cookie, _) = session(&app, "/queues/mail", true).await;
        let page = get_with(&app, "/queues/mail", &cookie).await;
        let form = with(&form_as_shown(&page.body, field), field, value);
        let save = tokio::spawn(async move { post_form(&app, &cookie, &form).await });
        proxy.held().await;
        bob.set_settings("mail", &other).await.unwrap();
        proxy.release();
        let r = save.await.unwrap();
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    }
    let s = client.settings("mail").await.unwrap();
    let (h, d) = (s.history.unwrap(), s.dead_letters.unwrap());
    assert_eq!(
        ((h.max_count, h.max_age), (d.max_count, d.max_age)),
        ((Some(5000), week), (Some(250), day)),
        "bob's ages were put back by the dashboard's whole write"
    );
}

/// The rate limit's form saved as the page showed it stores nothing, as the
/// other forms do: a rate another operator stored since the page was read
/// stays, and stays theirs. The form sent the rate shown, which the handler
/// stored over theirs.
#[tokio::test]
async fn the_rate_limit_form_saved_as_shown_keeps_a_rate_another_operator_stored_since() {
    use redjob::ops::RateLimit;
    let (_server, client) = setup().await;
    let rate = |n| QueueSettings::rate_limit(RateLimit::per_second(n));
    client.set_settings("mail", &rate(50)).await.unwrap();
    let app = redjob_web::router(client.clone());
    let (cookie, _) = session(&app, "/queues/mail", true).await;
    let page = get_with(&app, "/queues/mail", &cookie).await;
    let shown = form_as_shown(&page.body, "rate_limit");
    let other = client.clone().acting_as("cli bob");
    other.set_settings("mail", &rate(100)).await.unwrap();
    let r = post_form(&app, &cookie, &shown).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let s = client.settings("mail").await.unwrap();
    assert_eq!(
        (s.rate_limit, s.set_by.rate_limit.map(|c| c.by)),
        (
            Some(RateLimit::per_second(100)),
            Some("cli bob".to_string())
        ),
        "the rate shown was put back over bob's ({})",
        note(&r)
    );
    // changed, it is stored
    let r = post_form(&app, &cookie, &with(&shown, "rate_limit", "20/1s")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        client.settings("mail").await.unwrap().rate_limit,
        Some(RateLimit::per_second(20)),
        "{}",
        note(&r)
    );
}

/// A settings form with a value past its bound is a 400 that names the
/// field and the bound and keeps the form as sent (to correct and send
/// again), and nothing is stored: a history age of 99999999999d was stored
/// as 2^52 ms without a word, a count past a billion as given.
#[tokio::test]
async fn a_value_past_its_bound_is_a_400_naming_it_with_the_form_kept() {
    let (_server, client) = setup().await;
    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/queues/mail", true).await;
    for (form, says) in [
        (
            [
                ("history_max_age", "99999999999d"),
                ("history_max_count", "5000"),
            ],
            "max age 99999999999d: at most 18250d",
        ),
        (
            [("dead_max_age", "30d"), ("dead_max_count", "5000000000")],
            "max count 5000000000: at most 1000000000",
        ),
    ] {
        let mut sent = vec![("csrf", token.as_str())];
        sent.extend(form);
        let r = post(&app, "/queues/mail/settings", &cookie, &sent).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{form:?}: {}", r.body);
        assert!(r.body.contains(says), "{says}: {}", r.body);
        for (name, value) in form {
            assert!(
                r.body
                    .contains(&format!(r#"name="{name}" value="{value}""#)),
                "{name} kept: {}",
                r.body
            );
        }
    }
    let stored = client.settings("mail").await.unwrap();
    assert!(stored.is_empty(), "nothing stored: {stored:?}");
}

/// A stored setting has a "Reset to default" button: it removes the stored
/// value (the default is in force, the page says so), recorded as a
/// change, the other settings left as they are.
#[tokio::test]
async fn a_stored_setting_is_reset_to_the_default_from_its_form() {
    use redjob::ops::RateLimit;
    let (_server, client) = setup().await;
    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/queues/mail", true).await;
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(
        !page.body.contains(r#"name="reset""#),
        "nothing stored, nothing to reset: {}",
        page.body
    );
    client
        .set_settings(
            "mail",
            &QueueSettings::rate_limit(RateLimit::per_second(5)).and(QueueSettings::history(
                History {
                    max_count: Some(5),
                    ..History::default()
                },
            )),
        )
        .await
        .unwrap();
    let page = get_with(&app, "/queues/mail", &cookie).await;
    for setting in ["history", "rate-limit"] {
        assert!(
            page.body
                .contains(&format!(r#"name="reset" value="{setting}""#)),
            "{setting}: {}",
            page.body
        );
    }
    let r = post(
        &app,
        "/queues/mail/settings",
        &cookie,
        &[("csrf", &token), ("reset", "rate-limit")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(note(&r).contains("Reset: the rate limit"), "{}", note(&r));
    let s = client.settings("mail").await.unwrap();
    assert_eq!(s.rate_limit, None);
    assert_eq!(s.history.unwrap().max_count, Some(5), "the others stay");
    let page = get_with(&app, "/queues/mail", &cookie).await;
    assert!(
        page.body
            .contains("Rate limit across all workers (default)")
            && !page.body.contains(r#"value="rate-limit""#),
        "{}",
        page.body
    );
    let events = client.history_events("mail").await.unwrap();
    assert_eq!(events[0].what, "settings", "{events:?}");
    // a reset sent with another form's fields, or of no setting: a 400
    for bad in [
        vec![
            ("csrf", token.as_str()),
            ("reset", "history"),
            ("rate_limit", "5/1s"),
        ],
        vec![("csrf", token.as_str()), ("reset", "speed")],
    ] {
        let r = post(&app, "/queues/mail/settings", &cookie, &bad).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad:?}: {}", r.body);
    }
    assert!(client.settings("mail").await.unwrap().history.is_some());
}
