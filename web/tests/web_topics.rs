//! The dashboard's topic pages against a private redis-server: the topic list,
//! a topic with its subscribers, a subscriber's dead letters; replay, requeue
//! and delete need the CSRF token and change Redis; read-only mode refuses
//! them; what an event holds is escaped; unknown names get 404.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use common::RedisServer;
use http::{get, note, post, session};
use redjob::Client;
use redjob::inspect::AttemptOutcome;
use redjob::topic::{EventOptions, EventRun, EventSettle, Start, Topics};

const XSS: &str = "<script>alert(1)</script>";

/// "orders" with 3 events; "billing" took them all, handled one and
/// dead-lettered two (one error holds a script tag); "audit" starts at the end.
async fn setup() -> (RedisServer, Client) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let b = client.backend();
    client
        .subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    let data = format!(r#"{{"note":"{XSS}"}}"#);
    let events = [("placed", data.as_str()), ("placed", "{}"), ("paid", "{}")];
    b.publish("orders", &events, &EventOptions::DEFAULT)
        .await
        .unwrap();
    client
        .subscribe("orders", "audit", Start::End)
        .await
        .unwrap();
    let got = b
        .read("orders", "billing", "c", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let batch = EventSettle {
        acks: vec![got[2].delivery()],
        dead: vec![
            (got[0].delivery(), got[0].clone(), XSS.into()),
            (got[1].delivery(), got[1].clone(), "card declined".into()),
        ],
        // the declined one with the run that failed it
        runs: vec![EventRun::new(
            got[1].id,
            1,
            Instant::now(),
            Instant::now(),
            AttemptOutcome::Error,
            Some("card declined".into()),
        )],
        ..Default::default()
    };
    b.settle_events("orders", "billing", "c", &batch, None)
        .await
        .unwrap();
    (server, client)
}

/// The dead letters' ids the page offers to select (`<ms>-<seq>`).
fn dead_ids(body: &str) -> Vec<String> {
    body.match_indices(r#"name="id" value=""#)
        .map(|(i, m)| {
            let rest = &body[i + m.len()..];
            rest[..rest.find('"').unwrap()].to_string()
        })
        .collect()
}

async fn lag(client: &Client, sub: &str) -> u64 {
    let t = client.topic("orders").await.unwrap().unwrap();
    t.subscribers.iter().find(|s| s.name == sub).unwrap().lag
}

#[tokio::test]
async fn topic_pages_render_under_a_prefix_and_escape_what_events_hold() {
    let (_server, client) = setup().await;
    let app = Router::new().nest("/jobs", redjob_web::router(client.clone()));
    let list = get(&app, "/jobs/topics").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    assert!(
        list.body.contains(r#"href="/jobs/topics/orders""#) && list.body.contains(">Topics<"),
        "{}",
        list.body
    );
    let topic = get(&app, "/jobs/topics/orders").await;
    assert_eq!(topic.status, StatusCode::OK);
    for want in [
        "billing",
        "audit",
        r#"href="/jobs/topics/orders/billing/dead""#,
        r#"href="/jobs/topics/orders/audit/rewind?to=beginning""#,
        "3 held, 3 published",
    ] {
        assert!(topic.body.contains(want), "{want}: {}", topic.body);
    }
    let dead = get(&app, "/jobs/topics/orders/billing/dead").await;
    assert_eq!(dead.status, StatusCode::OK);
    assert_eq!(dead_ids(&dead.body).len(), 2, "{}", dead.body);
    assert!(dead.body.contains("card declined"));
    // its attempts, in a table of their own
    assert!(
        dead.body.contains("1 attempts") && dead.body.contains(r#"<table class="runs">"#),
        "{}",
        dead.body
    );
    assert!(!dead.body.contains(XSS), "unescaped: {}", dead.body);
    assert!(dead.body.contains("&lt;script&gt;"));
    let confirm = get(&app, "/jobs/topics/orders/billing/dead/confirm?do=requeue").await;
    assert!(
        confirm.body.contains("Requeue all 2 dead letters"),
        "{}",
        confirm.body
    );

    for path in ["/jobs/topics/nothing", "/jobs/topics/orders/nobody/dead"] {
        assert_eq!(
            get(&app, path).await.status,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    assert_eq!(
        get(&app, "/jobs/topics/bad%20name").await.status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn replay_requeue_and_delete_change_redis_only_with_the_token() {
    let (_server, client) = setup().await;
    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/topics/orders/audit/rewind?to=beginning", true).await;
    let csrf = ("csrf", token.as_str());

    let refused = post(
        &app,
        "/topics/orders/audit/rewind",
        &cookie,
        &[("to", "beginning")],
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(lag(&client, "audit").await, 0);
    let replay = post(
        &app,
        "/topics/orders/audit/rewind",
        &cookie,
        &[csrf, ("to", "beginning")],
    )
    .await;
    assert_eq!(replay.status, StatusCode::SEE_OTHER);
    assert_eq!(replay.location, "/topics/orders");
    assert_eq!(
        note(&replay),
        "audit replays the topic from its oldest event: 3 events to take."
    );
    assert_eq!(lag(&client, "audit").await, 3);
    // a skip asks first, counting what it skips, and its form carries the
    // last event then: one published after the question is not skipped
    let ask = get(&app, "/topics/orders/audit/rewind?to=end").await;
    assert_eq!(ask.status, StatusCode::OK, "{}", ask.body);
    assert!(
        ask.body
            .contains("Skip the 3 events this subscriber has not taken"),
        "{}",
        ask.body
    );
    let upto = ask
        .body
        .split(r#"name="upto" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("{}", ask.body))
        .to_string();
    client
        .backend()
        .publish("orders", &[("placed", "{}")], &EventOptions::DEFAULT)
        .await
        .unwrap();
    let skip = post(
        &app,
        "/topics/orders/audit/rewind",
        &cookie,
        &[csrf, ("to", "end"), ("upto", &upto)],
    )
    .await;
    assert_eq!(note(&skip), "audit skipped to the end: 1 events to take.");
    let ask = get(&app, "/topics/orders/audit/rewind?to=beginning").await;
    assert!(
        ask.body
            .contains("Replay the topic&#39;s 4 events for this subscriber")
            || ask
                .body
                .contains("Replay the topic's 4 events for this subscriber"),
        "{}",
        ask.body
    );
    assert_eq!(
        get(&app, "/topics/orders/audit/rewind?to=yesterday")
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    let bad = post(
        &app,
        "/topics/orders/audit/rewind",
        &cookie,
        &[csrf, ("to", "yesterday")],
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);

    let ids = dead_ids(&get(&app, "/topics/orders/billing/dead").await.body);
    let one = post(
        &app,
        "/topics/orders/billing/dead/requeue",
        &cookie,
        &[csrf, ("id", &ids[0])],
    )
    .await;
    assert_eq!(one.status, StatusCode::SEE_OTHER);
    assert_eq!(note(&one), "Requeued 1 dead letters.");
    // back on the topic, for billing alone
    // (and the event published during the skip's question)
    let t = client.topic("orders").await.unwrap().unwrap();
    assert_eq!(t.length, 5);
    assert_eq!(
        (lag(&client, "billing").await, lag(&client, "audit").await),
        (2, 2)
    );
    let none = post(&app, "/topics/orders/billing/dead/delete", &cookie, &[csrf]).await;
    assert_eq!(none.status, StatusCode::BAD_REQUEST);
    let junk = post(
        &app,
        "/topics/orders/billing/dead/delete",
        &cookie,
        &[csrf, ("id", "x")],
    )
    .await;
    assert_eq!(junk.status, StatusCode::BAD_REQUEST);
    let all = post(
        &app,
        "/topics/orders/billing/dead/delete",
        &cookie,
        &[csrf, ("all", "1")],
    )
    .await;
    assert_eq!(note(&all), "Deleted 1 dead letters.");
    assert!(
        client
            .dead_events("orders", "billing", 10)
            .await
            .unwrap()
            .is_empty()
    );
    let missing = post(
        &app,
        "/topics/orders/nobody/dead/requeue",
        &cookie,
        &[csrf, ("all", "1")],
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn read_only_topic_pages_offer_no_action_and_refuse_posts() {
    let (_server, client) = setup().await;
    let app = redjob_web::Dashboard::new(client.clone())
        .read_only(true)
        .router();
    let (cookie, token) = session(&app, "/topics/orders", false).await;
    let topic = get(&app, "/topics/orders").await;
    assert!(!topic.body.contains("From the beginning"), "{}", topic.body);
    let dead = get(&app, "/topics/orders/billing/dead").await;
    assert!(dead_ids(&dead.body).is_empty() && !dead.body.contains("Requeue"));
    for path in [
        "/topics/orders/audit/rewind",
        "/topics/orders/billing/dead/requeue",
    ] {
        let r = post(
            &app,
            path,
            &cookie,
            &[("csrf", &token), ("all", "1"), ("to", "beginning")],
        )
        .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}");
    }
    assert_eq!(
        get(&app, "/topics/orders/billing/dead/confirm?do=delete")
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(lag(&client, "audit").await, 0);
    assert_eq!(
        client
            .dead_events("orders", "billing", 10)
            .await
            .unwrap()
            .len(),
        2
    );
}

/// Dead ids selected that are no dead letters of the subscriber (another
/// subscriber's, none at all) are named in the note, with how many, as the
/// queue's dead-letter form does: the form said "Requeued 1 dead letters."
/// and nothing of them. A subscriber that does not exist is 404.
#[tokio::test]
async fn selected_ids_that_are_no_dead_letters_of_the_subscriber_are_named_in_the_note() {
    let (_server, client) = setup().await;
    let b = client.backend();
    // "audit" dead-letters an event a few ms later (a dead id is its stream's
    // own: two subscribers' would be alike within a millisecond)
    b.publish("orders", &[("placed", "{}")], &EventOptions::DEFAULT)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let got = b
        .read("orders", "audit", "c", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let batch = EventSettle {
        dead: got
            .into_iter()
            .map(|e| (e.delivery(), e, "down".into()))
            .collect(),
        ..Default::default()
    };
    b.settle_events("orders", "audit", "c", &batch, None)
        .await
        .unwrap();
    let ids = |sub: &'static str| {
        let client = client.clone();
        async move {
            let dead = client.dead_events("orders", sub, 10).await.unwrap();
            dead.iter()
                .map(|d| d.dead_id.to_string())
                .collect::<Vec<_>>()
        }
    };
    let (billing, audit) = (ids("billing").await, ids("audit").await);
    assert!(!billing.contains(&audit[0]), "{billing:?} {audit:?}");

    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/topics/orders/billing/dead", true).await;
    let csrf = ("csrf", token.as_str());
    let r = post(
        &app,
        "/topics/orders/billing/dead/requeue",
        &cookie,
        &[csrf, ("id", &billing[0]), ("id", &audit[0])],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        note(&r),
        format!(
            "Requeued 1 dead letters; 1 id selected is not a dead letter of subscriber \"billing\" of \"orders\" (not found): {}.",
            audit[0]
        )
    );
    let r = post(
        &app,
        "/topics/orders/billing/dead/delete",
        &cookie,
        &[csrf, ("id", &audit[0]), ("id", "1-0")],
    )
    .await;
    assert_eq!(
        note(&r),
        format!(
            "Deleted 0 dead letters; 2 ids selected are not dead letters of subscriber \"billing\" of \"orders\" (not found): 1-0, {}.",
            audit[0]
        )
    );
    assert_eq!(
        (ids("billing").await.len(), ids("audit").await.len()),
        (1, 1)
    );
    let r = post(
        &app,
        "/topics/orders/nobody/dead/delete",
        &cookie,
        &[csrf, ("id", &audit[0])],
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert_eq!(ids("audit").await.len(), 1);
}

/// The hidden `upto` a confirmation page carries.
fn upto_of(body: &str) -> String {
    body.split(r#"name="upto" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string()
}

/// A "skip to the end" confirmed after the subscriber read on past the event
/// its confirmation counted up to leaves it where it is: a skip never moves a
/// subscriber back (it was set to just after the counted event, and the
/// events handled since ran again).
#[tokio::test]
async fn a_confirmed_skip_to_the_end_never_moves_a_subscriber_back() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let app = redjob_web::router(client.clone());
    let b = client.backend();
    client
        .subscribe("orders", "audit", Start::Beginning)
        .await
        .unwrap();
    let three = [("placed", "{}"), ("placed", "{}"), ("placed", "{}")];
    b.publish("orders", &three, &EventOptions::DEFAULT)
        .await
        .unwrap();
    // the operator opens the skip's confirmation: 3 events to skip
    let confirm = "/topics/orders/audit/rewind?to=end";
    let (cookie, token) = session(&app, confirm, true).await;
    let upto = upto_of(&get(&app, confirm).await.body);
    // meanwhile the subscriber takes them, and two more
    async fn take_all<B: Topics>(b: &B) {
        let got = b
            .read("orders", "audit", "c", 10, Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        let settle = EventSettle {
            acks: got.iter().map(|e| e.delivery()).collect(),
            ..Default::default()
        };
        b.settle_events("orders", "audit", "c", &settle, None)
            .await
            .unwrap();
    }
    take_all(&b).await;
    b.publish("orders", &three[..2], &EventOptions::DEFAULT)
        .await
        .unwrap();
    take_all(&b).await;
    assert_eq!(lag(&client, "audit").await, 0);
    let form = [("csrf", token.as_str()), ("to", "end"), ("upto", &upto)];
    let skip = post(&app, "/topics/orders/audit/rewind", &cookie, &form).await;
    assert_eq!(skip.status, StatusCode::SEE_OTHER, "{}", skip.body);
    assert_eq!(
        lag(&client, "audit").await,
        0,
        "moved back: {}",
        note(&skip)
    );
    // and one behind what was counted is skipped up to it, no further
    client
        .rewind("orders", "audit", Start::Beginning)
        .await
        .unwrap();
    let skip = post(&app, "/topics/orders/audit/rewind", &cookie, &form).await;
    assert_eq!(skip.status, StatusCode::SEE_OTHER, "{}", skip.body);
    assert_eq!(lag(&client, "audit").await, 2, "{}", note(&skip));
}

/// "A skip to the end skips only the events it counted: its cutoff, the
/// topic's last event then, travels with the confirmation, so events
/// published meanwhile are still taken." On a topic that holds no event when
/// the confirmation is shown (new, or every event trimmed by age) the page
/// counts 0 events and carries no cutoff, and the action then moves the
/// subscriber to the end as it is when confirmed: the events published
/// between the confirmation and the click were skipped, unseen and uncounted
/// (the action did `rewind(Start::End)` when the form carried no cutoff); it
/// now skips nothing, as nothing was counted.
#[tokio::test]
async fn a_confirmed_skip_on_an_empty_topic_skips_no_event_published_since() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let app = redjob_web::router(client.clone());
    client
        .subscribe("orders", "audit", Start::Beginning)
        .await
        .unwrap();
    // the operator opens the skip's confirmation: nothing to skip
    let confirm = "/topics/orders/audit/rewind?to=end";
    let (cookie, token) = session(&app, confirm, true).await;
    let page = get(&app, confirm).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("the 0 events"), "{}", page.body);
    let upto = page
        .body
        .split(r#"name="upto" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map(str::to_string);
    // meanwhile two events are published
    client
        .backend()
        .publish(
            "orders",
            &[("placed", "{}"), ("placed", "{}")],
            &EventOptions::DEFAULT,
        )
        .await
        .unwrap();
    assert_eq!(lag(&client, "audit").await, 2);
    // the operator confirms the form as the page gave it
    let mut form = vec![("csrf", token.clone()), ("to", "end".to_string())];
    if let Some(u) = upto {
        form.push(("upto", u));
    }
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let skip = post(&app, "/topics/orders/audit/rewind", &cookie, &form).await;
    assert_eq!(skip.status, StatusCode::SEE_OTHER, "{}", skip.body);
    assert_eq!(
        lag(&client, "audit").await,
        2,
        "a skip of the 0 events counted skipped the 2 published since: {}",
        note(&skip)
    );
    assert!(
        note(&skip).contains("audit had no events counted to skip"),
        "{}",
        note(&skip)
    );
    // a subscriber removed since: a 404, as for a skip that counted events
    assert!(client.unsubscribe("orders", "audit").await.unwrap());
    let r = post(&app, "/topics/orders/audit/rewind", &cookie, &form).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
}

/// A delete of all of a subscriber's dead letters confirmed after the
/// subscriber was removed is a 404, as the requeue is (it said "Deleted 0
/// dead letters.").
#[tokio::test]
async fn a_confirmed_delete_of_a_removed_subscribers_letters_is_a_404() {
    let (_server, client) = setup().await;
    let app = redjob_web::router(client.clone());
    let confirm = "/topics/orders/billing/dead/confirm?do=delete";
    let (cookie, token) = session(&app, confirm, true).await;
    let upto = upto_of(&get(&app, confirm).await.body);
    assert!(!upto.is_empty());
    assert!(client.unsubscribe("orders", "billing").await.unwrap());
    let form = [
        ("csrf", token.as_str()),
        ("all", "1"),
        ("upto", upto.as_str()),
    ];
    for action in ["requeue", "delete"] {
        let path = format!("/topics/orders/billing/dead/{action}");
        let r = post(&app, &path, &cookie, &form).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{action}: {:?}", note(&r));
    }
}

/// A program in another language that publishes to a stream `rsmq:t:{T}`
/// whose `T` redjob would not accept as a name (`orders.v2`) leaves the topic
/// list whole: that stream is not listed, the others are. The old code listed
/// it, read every topic listed by a name check that refused it, and the page
/// was an error instead of a list of the others.
#[tokio::test]
async fn the_topic_list_shows_though_another_program_named_a_topic_oddly() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let app = redjob_web::router(client.clone());
    client
        .subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    let mut con = server.raw().await;
    let _: String = redis::cmd("XADD")
        .arg("rsmq:t:{orders.v2}")
        .arg("*")
        .arg("type")
        .arg("order_placed")
        .arg("data")
        .arg("{}")
        .query_async(&mut con)
        .await
        .unwrap();
    let list = get(&app, "/topics").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    assert!(
        list.body.contains(r#"href="/topics/orders""#),
        "{}",
        list.body
    );
}

/// `calls` of `cmdstat_<name>` on `server`.
async fn calls(server: &RedisServer, name: &str) -> u64 {
    common::command_calls(&mut server.raw().await)
        .await
        .get(name)
        .copied()
        .unwrap_or(0)
}

/// The topic list reads a page of topics (the page size's, by name), in one
/// script call for them all and one pipeline of their dead letters' lengths,
/// as the queues' overview does: the old list read every topic, each in
/// three round trips (`EXISTS`, `XINFO GROUPS`, then topic_info.lua with
/// its own `XINFO GROUPS`), 1,000 topics 3,000 round trips for one render.
#[tokio::test]
async fn the_topic_list_reads_a_page_of_topics_in_a_few_calls() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for i in 0..120 {
        client
            .subscribe(&format!("t{i:03}"), "s", Start::Beginning)
            .await
            .unwrap();
    }
    client
        .backend()
        .publish("t101", &[("x", "{}"), ("y", "{}")], &EventOptions::DEFAULT)
        .await
        .unwrap();
    let app = redjob_web::Dashboard::new(client.clone())
        .page_size(50)
        .router();
    // once for the scripts to load
    assert_eq!(get(&app, "/topics").await.status, StatusCode::OK);
    let names = ["evalsha", "xinfo|groups", "xlen"];
    let before: Vec<u64> = futures::future::join_all(names.map(|c| calls(&server, c))).await;
    let page = get(&app, "/topics").await;
    let after: Vec<u64> = futures::future::join_all(names.map(|c| calls(&server, c))).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let d: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    // one script call for the 50 topics of the page (an XINFO GROUPS of
    // each inside), one XLEN of each subscriber's dead letters
    assert_eq!(d, [1, 50, 50]);
    for (topic, shown) in [("t000", true), ("t049", true), ("t050", false)] {
        let link = format!(r#"href="/topics/{topic}""#);
        assert_eq!(page.body.contains(&link), shown, "{topic}: {}", page.body);
    }
    assert!(page.body.contains("Topics 1–50 of 120"), "{}", page.body);
    // the last page: the 20 topics left, each line as the topic's own read
    let last = get(&app, "/topics?page=3").await;
    assert_eq!(last.status, StatusCode::OK, "{}", last.body);
    for (topic, shown) in [("t099", false), ("t100", true), ("t119", true)] {
        let link = format!(r#"href="/topics/{topic}""#);
        assert_eq!(last.body.contains(&link), shown, "{topic}: {}", last.body);
    }
    assert!(last.body.contains("Topics 101–120 of 120"), "{}", last.body);
    let row = last.body.split(r#"href="/topics/t101""#).nth(1).unwrap();
    let row = &row[..row.find("</tr>").unwrap()];
    // 2 events, 2 published, 1 subscriber 2 behind, no dead letter
    assert!(
        row.contains(r#"<td class="num">2</td><td class="num">2</td><td class="num">1</td><td class="num">2</td><td class="num">0</td>"#),
        "{row}"
    );
}

/// A subscriber's dead-letter page and its actions read that subscriber
/// alone: the old page read the whole topic (`Client::topic`), counting the
/// lag of every other subscriber (an `XRANGE` of up to 101 events each), to
/// show one subscriber's count of letters; so did the confirmation's count
/// and every action's check that the subscriber exists.
#[tokio::test]
async fn a_subscribers_dead_letter_page_reads_no_other_subscriber() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for i in 0..30 {
        client
            .subscribe("orders", &format!("s{i:02}"), Start::Beginning)
            .await
            .unwrap();
    }
    let events: Vec<(&str, &str)> = (0..200).map(|_| ("placed", "{}")).collect();
    client
        .backend()
        .publish("orders", &events, &EventOptions::DEFAULT)
        .await
        .unwrap();
    let app = redjob_web::router(client.clone());
    assert_eq!(
        get(&app, "/topics/orders/s07/dead").await.status,
        StatusCode::OK
    );
    let before = calls(&server, "xrange").await;
    let page = get(&app, "/topics/orders/s07/dead").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let confirm = get(&app, "/topics/orders/s07/dead/confirm?do=requeue").await;
    assert_eq!(confirm.status, StatusCode::OK, "{}", confirm.body);
    let (cookie, token) = session(&app, "/topics/orders/s07/dead", true).await;
    let r = post(
        &app,
        "/topics/orders/s07/dead/delete",
        &cookie,
        &[("csrf", token.as_str()), ("all", "1"), ("upto", "")],
    )
    .await;
    assert_eq!(note(&r), "Deleted 0 dead letters.");
    // the lag of s07 alone, once for each of the three (the session's page
    // read it too)
    assert_eq!(calls(&server, "xrange").await - before, 4);
    assert_eq!(
        get(&app, "/topics/orders/nobody/dead").await.status,
        StatusCode::NOT_FOUND
    );
}

/// One post names at most 1,000 of a subscriber's dead letters (the most a
/// page shows): a hand-made form naming more is refused whole with a 400
/// that says so, and nothing is requeued or deleted. The old action took
/// any number, one round trip per id.
#[tokio::test]
async fn a_selection_of_more_dead_events_than_a_page_shows_is_refused_whole() {
    let (_server, client) = setup().await;
    let dead: Vec<String> = client
        .dead_events("orders", "billing", 10)
        .await
        .unwrap()
        .iter()
        .map(|d| d.dead_id.to_string())
        .collect();
    assert_eq!(dead.len(), 2);
    let mut ids = dead.clone();
    ids.extend((0..999).map(|i| format!("1-{i}")));
    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/topics/orders/billing/dead", true).await;
    for action in ["requeue", "delete"] {
        let mut form = vec![("csrf", token.as_str())];
        form.extend(ids.iter().map(|id| ("id", id.as_str())));
        let path = format!("/topics/orders/billing/dead/{action}");
        let r = post(&app, &path, &cookie, &form).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{action}: {}", r.body);
        assert!(
            r.body
                .contains("1,001 dead letters selected: one action takes at most 1,000"),
            "{action}: {}",
            r.body
        );
        assert_eq!(
            client
                .dead_events("orders", "billing", 10)
                .await
                .unwrap()
                .len(),
            2,
            "{action}"
        );
    }
    // a thousand (each id once) are taken
    let mut form = vec![("csrf", token.as_str())];
    form.extend(ids[..1_000].iter().map(|id| ("id", id.as_str())));
    let r = post(&app, "/topics/orders/billing/dead/delete", &cookie, &form).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(
        note(&r).starts_with("Deleted 2 dead letters; 998 ids"),
        "{}",
        note(&r)
    );
    assert!(
        client
            .dead_events("orders", "billing", 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// On Redis 6.2, where topics cannot work (they need 7.0's consumer-group
/// lag), the topic pages say so with 501 Not Implemented: the server lacks
/// what they need, and asking again will not help. The old pages answered
/// 503 Service Unavailable ("the backend failed: topics need Redis 7.0 …"),
/// the status of a Redis that is down or busy, which says to try later.
#[tokio::test]
async fn topics_on_redis_6_2_are_said_to_need_redis_7_not_to_be_down() {
    let bin = common::server_binary("redis-server-6.2", "REDJOB_REDIS_6_2_SERVER");
    let server = RedisServer::start_binary(&bin);
    let client = Client::connect(&server.url()).await.unwrap();
    // a topic another program made there
    let mut con = server.raw().await;
    let _: String = redis::cmd("XADD")
        .arg("rsmq:t:{orders}")
        .arg("*")
        .arg("type")
        .arg("placed")
        .arg("data")
        .arg("{}")
        .query_async(&mut con)
        .await
        .unwrap();
    let app = redjob_web::router(client.clone());
    for path in ["/topics", "/topics/orders"] {
        let page = get(&app, path).await;
        assert_eq!(
            page.status,
            StatusCode::NOT_IMPLEMENTED,
            "{path}: {}",
            page.body
        );
        assert!(
            page.body.contains("topics need Redis 7.0 or newer"),
            "{path}: {}",
            page.body
        );
    }
    // the rest of the dashboard works
    assert_eq!(get(&app, "/").await.status, StatusCode::OK);
}
