//! A bulk action's confirmation page states the count, and its form carries
//! the count's cutoff: the action confirmed takes what was counted, not what
//! came since (a purge leaves the jobs sent after the page was shown, a
//! requeue or delete of every dead letter leaves those that died since).

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use common::RedisServer;
use http::{get, note, post, session};
use redjob::Client;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::inspect::Inspect;
use redjob::queue::{QueueOptions, SendMessage};
use redjob::topic::Start;

const BODY: &str = r#"{"type":"A","args":{}}"#;

/// `n` dead letters of "mail".
async fn kill(client: &Client, n: usize) {
    kill_as(client, n, BODY).await
}

/// `n` dead letters of "mail" with this body.
async fn kill_as(client: &Client, n: usize, body: &str) {
    let q = client.backend();
    let msgs: Vec<SendMessage> = (0..n).map(|_| SendMessage::new(body)).collect();
    q.send("mail", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let leased = q.fetch("mail", n, Duration::from_secs(60)).await.unwrap();
    let dead = leased
        .jobs
        .iter()
        .map(|d| DeadLetterEntry {
            id: d.id,
            token: d.token,
            error: "down".into(),
        })
        .collect();
    let settle = Settle {
        dead,
        ..Settle::default()
    };
    assert_eq!(q.settle("mail", &settle).await.unwrap().dead, n as u64);
}

/// The value of the hidden field `upto` of a page's form.
fn upto(body: &str) -> String {
    let at = body
        .find(r#"name="upto" value=""#)
        .unwrap_or_else(|| panic!("no cutoff in the form: {body}"));
    let rest = &body[at + r#"name="upto" value=""#.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

async fn app() -> (RedisServer, Client, Router) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let app = redjob_web::router(client.clone());
    (server, client, app)
}

#[tokio::test]
async fn a_confirmed_purge_leaves_the_jobs_sent_after_its_page() {
    let (_server, client, app) = app().await;
    let q = client.backend();
    let two = [SendMessage::new(BODY), SendMessage::new(BODY)];
    q.send("mail", &two, &QueueOptions::default())
        .await
        .unwrap();
    let (cookie, token) = session(&app, "/queues/mail", true).await;
    let page = get(&app, "/queues/mail/purge").await;
    assert!(page.body.contains("Delete 2 jobs"), "{}", page.body);
    let cut = upto(&page.body);
    tokio::time::sleep(Duration::from_millis(5)).await;
    q.send("mail", &two[..1], &QueueOptions::default())
        .await
        .unwrap();
    let form = [("csrf", token.as_str()), ("upto", cut.as_str())];
    let purged = post(&app, "/queues/mail/purge", &cookie, &form).await;
    assert_eq!(note(&purged), "Deleted 2 jobs.");
    assert_eq!(client.counts("mail").await.unwrap().ready, 1);
    // a cutoff that is no time is refused, and deletes nothing
    let bad = [("csrf", token.as_str()), ("upto", "soon")];
    let r = post(&app, "/queues/mail/purge", &cookie, &bad).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(client.counts("mail").await.unwrap().ready, 1);
}

#[tokio::test]
async fn every_dead_letter_confirmed_leaves_those_that_died_after_its_page() {
    let (_server, client, app) = app().await;
    kill(&client, 3).await;
    let (cookie, token) = session(&app, "/queues/mail/dead", true).await;
    for (action, verb) in [("requeue", "Requeue"), ("delete", "Delete")] {
        let page = get(&app, &format!("/queues/mail/dead/confirm?do={action}")).await;
        assert!(
            page.body.contains(&format!("{verb} the 3 dead letters")),
            "{}",
            page.body
        );
    }
    let page = get(&app, "/queues/mail/dead/confirm?do=delete&type=B").await;
    assert!(
        page.body
            .contains("the 0 dead letters of type &quot;B&quot; (of 3 in all)"),
        "{}",
        page.body
    );
    let page = get(&app, "/queues/mail/dead/confirm?do=delete").await;
    let cut = upto(&page.body);
    tokio::time::sleep(Duration::from_millis(5)).await;
    kill(&client, 1).await;
    let form = [
        ("csrf", token.as_str()),
        ("all", "1"),
        ("upto", cut.as_str()),
    ];
    let r = post(&app, "/queues/mail/dead/delete", &cookie, &form).await;
    assert_eq!(note(&r), "Deleted 3 dead letters.");
    assert_eq!(client.counts("mail").await.unwrap().dead, 1);

    // filtered by type: the count is of the matches, the cutoff the same
    let page = get(&app, "/queues/mail/dead/confirm?do=requeue&type=A").await;
    assert!(
        page.body
            .contains("the 1 dead letter of type &quot;A&quot; (of 1 in all)"),
        "{}",
        page.body
    );
    let cut = upto(&page.body);
    tokio::time::sleep(Duration::from_millis(5)).await;
    kill(&client, 2).await;
    let form = [
        ("csrf", token.as_str()),
        ("all", "1"),
        ("type", "A"),
        ("upto", cut.as_str()),
    ];
    let r = post(&app, "/queues/mail/dead/requeue", &cookie, &form).await;
    assert_eq!(note(&r), "Requeued 1 dead letters.");
    assert_eq!(client.counts("mail").await.unwrap().dead, 2);
}

#[tokio::test]
async fn a_subscribers_letters_confirmed_leave_those_that_died_after_its_page() {
    let (_server, client, app) = app().await;
    let b = client.backend();
    client
        .subscribe("orders", "billing", Start::End)
        .await
        .unwrap();
    common::dead_events(&b, "orders", "billing", 2).await;
    let path = "/topics/orders/billing/dead";
    let (cookie, token) = session(&app, path, true).await;
    let page = get(&app, &format!("{path}/confirm?do=requeue")).await;
    assert!(page.body.contains("all 2 dead letters"), "{}", page.body);
    let cut = upto(&page.body);
    common::dead_events(&b, "orders", "billing", 1).await;
    let form = [
        ("csrf", token.as_str()),
        ("all", "1"),
        ("upto", cut.as_str()),
    ];
    let r = post(&app, &format!("{path}/requeue"), &cookie, &form).await;
    assert_eq!(note(&r), "Requeued 2 dead letters.");
    let left = client.dead_events("orders", "billing", 10).await.unwrap();
    assert_eq!(left.len(), 1, "the letter that died after the page stays");
}

/// A dead letter whose unique key a queued job holds stays dead: its page's
/// requeue says why (it said there was no such dead letter).
#[tokio::test]
async fn a_letter_whose_unique_key_is_held_stays_dead_and_the_page_says_why() {
    use redjob::queue::Unique;
    let (_server, client, app) = app().await;
    let q = client.backend();
    let opts = QueueOptions::default();
    let msg = || SendMessage::new(BODY).unique(Unique::new("k"));
    q.send("mail", &[msg()], &opts).await.unwrap();
    let d = q.fetch("mail", 1, Duration::from_secs(60)).await.unwrap();
    let id = d.jobs[0].id;
    let settle = Settle {
        dead: vec![DeadLetterEntry {
            id,
            token: d.jobs[0].token,
            error: "down".into(),
        }],
        ..Settle::default()
    };
    q.settle("mail", &settle).await.unwrap();
    q.send("mail", &[msg()], &opts).await.unwrap();
    let path = format!("/queues/mail/jobs/{id}");
    let (cookie, token) = session(&app, &path, true).await;
    let r = post(
        &app,
        &format!("{path}/requeue"),
        &cookie,
        &[("csrf", token.as_str())],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("unique key"), "{}", r.body);
    assert_eq!(client.counts("mail").await.unwrap().dead, 1);
}

/// Dead letters selected by id that are not dead letters of the queue (of
/// another queue, a job still queued) are named in the note, with how many,
/// as the CLI does: the form said "Requeued 0 dead letters." and nothing else
/// while the job's own route answered 404.
#[tokio::test]
async fn selected_ids_that_are_no_dead_letters_of_the_queue_are_counted_in_the_note() {
    let (_server, client, app) = app().await;
    kill(&client, 2).await;
    let mine: Vec<String> = client
        .dead_letters("mail", 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id.to_string())
        .collect();
    // a dead letter of another queue, and a job of this one still queued
    let q = client.backend();
    q.send("other", &[SendMessage::new(BODY)], &QueueOptions::default())
        .await
        .unwrap();
    let d = q.fetch("other", 1, Duration::from_secs(60)).await.unwrap();
    let settle = Settle {
        dead: vec![DeadLetterEntry {
            id: d.jobs[0].id,
            token: d.jobs[0].token,
            error: "down".into(),
        }],
        ..Settle::default()
    };
    q.settle("other", &settle).await.unwrap();
    let other = d.jobs[0].id.to_string();
    q.send("mail", &[SendMessage::new(BODY)], &QueueOptions::default())
        .await
        .unwrap();
    let queued = client.peek("mail", 1).await.unwrap()[0].id.to_string();

    let (cookie, token) = session(&app, "/queues/mail/dead", true).await;
    let form = [
        ("csrf", token.as_str()),
        ("id", mine[0].as_str()),
        ("id", other.as_str()),
    ];
    let r = post(&app, "/queues/mail/dead/requeue", &cookie, &form).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        note(&r),
        format!(
            "Requeued 1 dead letters; 1 id selected is not a dead letter of \"mail\" (not found): {other}."
        )
    );
    let form = [
        ("csrf", token.as_str()),
        ("id", other.as_str()),
        ("id", queued.as_str()),
    ];
    let r = post(&app, "/queues/mail/dead/delete", &cookie, &form).await;
    assert_eq!(
        note(&r),
        format!(
            "Deleted 0 dead letters; 2 ids selected are not dead letters of \"mail\" (not found): {other}, {queued}."
        )
    );
    // the other queue's letter and the queued job are untouched
    assert_eq!(client.counts("other").await.unwrap().dead, 1);
    assert_eq!(client.counts("mail").await.unwrap().dead, 1);
    assert!(
        client
            .job("mail", &queued.parse().unwrap())
            .await
            .unwrap()
            .is_some()
    );
}

/// The hidden fields of a page's forms, as a browser sends them.
fn hidden(body: &str) -> Vec<(String, String)> {
    let field = |input: &str, attr: &str| -> Option<String> {
        let at = input.find(&format!(r#"{attr}=""#))? + attr.len() + 2;
        Some(input[at..at + input[at..].find('"')?].to_string())
    };
    body.split("<input")
        .skip(1)
        .map(|rest| &rest[..rest.find('>').unwrap_or(rest.len())])
        .filter(|input| input.contains(r#"type="hidden""#))
        .filter_map(|input| Some((field(input, "name")?, field(input, "value")?)))
        .collect()
}

/// Every matching dead letter requeued at a rate becomes due in the order
/// the page showed them: oldest first from a page listing the oldest first,
/// newest first from one listing the newest first (the confirmation's form
/// did not carry the page's order, and the action always went newest first).
#[tokio::test]
async fn letters_requeued_at_a_rate_become_due_in_the_order_the_page_showed() {
    use redjob::inspect::JobState;
    for (order, first) in [("oldest", 0), ("newest", 2)] {
        let (_server, client, app) = app().await;
        // three letters, one after another
        for _ in 0..3 {
            kill(&client, 1).await;
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        let died: Vec<_> = client.dead_letters("mail", 10).await.unwrap();
        let died: Vec<_> = died.iter().map(|d| d.id).collect();
        let (cookie, token) = session(&app, "/queues/mail/dead", true).await;
        let page = get(
            &app,
            &format!("/queues/mail/dead/confirm?do=requeue&type=A&order={order}"),
        )
        .await;
        let mut form: Vec<(String, String)> = hidden(&page.body)
            .into_iter()
            .filter(|(name, _)| name != "csrf")
            .collect();
        form.push(("csrf".into(), token.clone()));
        form.push(("rate".into(), "1".into()));
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let r = post(&app, "/queues/mail/dead/requeue", &cookie, &form).await;
        assert_eq!(note(&r), "Requeued 3 dead letters.", "{order}");
        // the first shown is due now, the others a second apart after it
        let mut states = Vec::new();
        for id in &died {
            states.push(client.job("mail", id).await.unwrap().unwrap().state);
        }
        let ready: Vec<usize> = (0..3).filter(|&i| states[i] == JobState::Ready).collect();
        assert_eq!(ready, [first], "{order}: {states:?}");
    }
}

/// A requeue of every matching letter, newest first, starts at its count's
/// cutoff: the letters that died after the page are not read at all (it
/// read them all, a page of 1,000 bodies at a time, before it came to the
/// ones counted). Counted by the pages Redis read (`ZREVRANGE`s).
#[tokio::test]
async fn a_newest_first_requeue_starts_at_its_cutoff_not_at_the_newest_letter() {
    let (server, client, app) = app().await;
    kill(&client, 3).await;
    let (cookie, token) = session(&app, "/queues/mail/dead", true).await;
    let page = get(
        &app,
        "/queues/mail/dead/confirm?do=requeue&type=A&order=newest",
    )
    .await;
    let cut = upto(&page.body);
    tokio::time::sleep(Duration::from_millis(5)).await;
    // 3,000 letters of another type die after the page
    kill_as(&client, 3000, r#"{"type":"B","args":{}}"#).await;
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut con)
        .await
        .unwrap();
    let form = [
        ("csrf", token.as_str()),
        ("all", "1"),
        ("type", "A"),
        ("order", "newest"),
        ("rate", "1"),
        ("upto", cut.as_str()),
    ];
    let r = post(&app, "/queues/mail/dead/requeue", &cookie, &form).await;
    assert_eq!(note(&r), "Requeued 3 dead letters.");
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut con)
        .await
        .unwrap();
    let pages: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_zrevrange:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap());
    assert!(pages <= 1, "pages read: {pages}");
    assert_eq!(client.counts("mail").await.unwrap().dead, 3000);
}

/// "Requeue selected" or "Delete selected" of a form naming one letter twice
/// (a page refreshed under a selection, a hand-made post) acts on it once and
/// says so: the old action requeued it once and said "1 stayed dead: a
/// queued job holds their unique key", though no letter stayed dead; an id
/// selected twice that is no dead letter was named twice.
#[tokio::test]
async fn a_letter_selected_twice_is_requeued_once_and_none_said_to_stay_dead() {
    let (_server, client, app) = app().await;
    kill(&client, 2).await;
    let dead = client.dead_letters("mail", 10).await.unwrap();
    let (a, b) = (dead[0].id.to_string(), dead[1].id.to_string());
    let stranger = "0000000000abcdefghijklmnopqrstuv";
    let (cookie, token) = session(&app, "/queues/mail/dead", true).await;
    let form = [
        ("csrf", token.as_str()),
        ("id", a.as_str()),
        ("id", a.as_str()),
        ("id", stranger),
        ("id", stranger),
    ];
    let r = post(&app, "/queues/mail/dead/requeue", &cookie, &form).await;
    assert_eq!(
        note(&r),
        format!(
            "Requeued 1 dead letters; 1 id selected is not a dead letter of \"mail\" (not found): {stranger}."
        )
    );
    assert_eq!(client.counts("mail").await.unwrap().dead, 1);
    let form = [
        ("csrf", token.as_str()),
        ("id", b.as_str()),
        ("id", b.as_str()),
    ];
    let r = post(&app, "/queues/mail/dead/delete", &cookie, &form).await;
    assert_eq!(note(&r), "Deleted 1 dead letters.");
    assert_eq!(client.counts("mail").await.unwrap().dead, 0);
}

/// One post names at most 1,000 dead letters (the most a page shows): a
/// hand-made form naming more is refused whole with a 400 that says so,
/// and nothing is requeued or deleted. The old action took any number,
/// each id looked up at once (a post of 100,000 ids sent 100,000 requests
/// together).
#[tokio::test]
async fn a_selection_of_more_letters_than_a_page_shows_is_refused_whole() {
    let (_server, client, app) = app().await;
    kill(&client, 2).await;
    let dead = client.dead_letters("mail", 10).await.unwrap();
    let mut ids: Vec<String> = dead.iter().map(|d| d.id.to_string()).collect();
    ids.extend((0..999).map(|i| format!("{i:010}abcdefghijklmnopqrstuv")));
    assert_eq!(ids.len(), 1_001);
    let (cookie, token) = session(&app, "/queues/mail/dead", true).await;
    for action in ["requeue", "delete"] {
        let mut form = vec![("csrf", token.as_str())];
        form.extend(ids.iter().map(|id| ("id", id.as_str())));
        let r = post(&app, &format!("/queues/mail/dead/{action}"), &cookie, &form).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{action}: {}", r.body);
        assert!(
            r.body
                .contains("1,001 dead letters selected: one action takes at most 1,000"),
            "{action}: {}",
            r.body
        );
        assert_eq!(client.counts("mail").await.unwrap().dead, 2, "{action}");
        // a thousand (each id once) are taken
        form.pop();
        let r = post(&app, &format!("/queues/mail/dead/{action}"), &cookie, &form).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{action}: {}", r.body);
        assert!(
            note(&r).contains("998 ids selected are not dead letters"),
            "{action}: {}",
            note(&r)
        );
        if action == "requeue" {
            assert_eq!(client.counts("mail").await.unwrap().dead, 0);
            // dead again, for the delete
            let q = client.backend();
            let leased = q.fetch("mail", 2, Duration::from_secs(60)).await.unwrap();
            let settle = Settle {
                dead: leased
                    .jobs
                    .iter()
                    .map(|d| DeadLetterEntry {
                        id: d.id,
                        token: d.token,
                        error: "down".into(),
                    })
                    .collect(),
                ..Settle::default()
            };
            assert_eq!(q.settle("mail", &settle).await.unwrap().dead, 2);
        }
    }
    assert_eq!(client.counts("mail").await.unwrap().dead, 0);
}

/// The note of an action that names the ids it did not find (ids of no dead
/// letter of the queue) names the first 20 and counts the rest, so that it
/// fits in its cookie (browsers keep cookies of up to 4,096 bytes and drop
/// a longer one whole, note and all): the old note named every id, 300 of
/// them a `Set-Cookie` of about 10,000 bytes, which no browser showed.
#[tokio::test]
async fn a_note_naming_many_ids_not_found_fits_in_its_cookie() {
    let (_server, client, app) = app().await;
    kill(&client, 1).await;
    let ids: Vec<String> = (0..300)
        .map(|i| format!("{i:010}abcdefghijklmnopqrstuv"))
        .collect();
    let (cookie, token) = session(&app, "/queues/mail/dead", true).await;
    let mut form = vec![("csrf", token.as_str())];
    form.extend(ids.iter().map(|id| ("id", id.as_str())));
    let r = post(&app, "/queues/mail/dead/delete", &cookie, &form).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let set = r.cookie.clone().unwrap_or_default();
    assert!(set.len() <= 4_096, "a Set-Cookie of {} bytes", set.len());
    let note = note(&r);
    assert!(
        note.starts_with(
            "Deleted 0 dead letters; 300 ids selected are not dead letters of \"mail\" (not found): 0000000000abcdefghijklmnopqrstuv, "
        ),
        "{note}"
    );
    assert!(note.ends_with(", and 280 more."), "{note}");
    assert!(
        note.contains(&ids[19]) && !note.contains(&ids[20]),
        "{note}"
    );
    assert_eq!(client.counts("mail").await.unwrap().dead, 1);
}
