//! The dashboard against a private redis-server holding real jobs in every
//! state: every page renders (nested under a prefix), every action changes
//! Redis and needs the CSRF token, read-only mode refuses them, nothing from a
//! job is rendered unescaped, and bad input gets a clear status.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::RedisServer;
use http::{get, get_with, note, post, send, session};
use redjob::Client;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::inspect::Inspect;
use redjob::ops::Admin;
use redjob::queue::{QueueOptions, SendMessage};

const XSS: &str = "<script>alert(1)</script>";

fn envelope(ty: &str, i: usize) -> String {
    format!(r#"{{"type":"{ty}","args":{{"i":{i},"note":"{XSS}"}}}}"#)
}

/// "mail" with 3 dead letters (types A, B, A; the B one's error holds a
/// script tag), 2 ready jobs, 1 scheduled and 1 in flight.
async fn setup() -> (RedisServer, Client) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.backend();
    let opts = QueueOptions::default();
    let msgs: Vec<SendMessage> = ["A", "B", "A"]
        .iter()
        .enumerate()
        .map(|(i, ty)| SendMessage::new(envelope(ty, i)))
        .collect();
    q.send("mail", &msgs, &opts).await.unwrap();
    let leased = q.fetch("mail", 3, Duration::from_secs(60)).await.unwrap();
    let errors = ["smtp timeout", XSS, "smtp timeout"];
    let dead = leased
        .jobs
        .iter()
        .zip(errors)
        .map(|(d, e)| DeadLetterEntry {
            id: d.id,
            token: d.token,
            error: e.into(),
        })
        .collect();
    let settle = Settle {
        dead,
        ..Settle::default()
    };
    assert_eq!(q.settle("mail", &settle).await.unwrap().dead, 3);
    let msgs = [
        SendMessage::new(envelope("A", 10)),
        SendMessage::new(envelope("B", 11)),
        SendMessage::new(envelope("C", 12)),
        SendMessage::new(envelope("A", 13)).delay(Duration::from_secs(600)),
    ];
    q.send("mail", &msgs, &opts).await.unwrap();
    q.fetch("mail", 1, Duration::from_secs(60)).await.unwrap();
    (server, client)
}

fn ids_in(body: &str) -> Vec<String> {
    body.match_indices(r#"name="id" value=""#)
        .map(|(i, m)| body[i + m.len()..i + m.len() + 32].to_string())
        .collect()
}

#[tokio::test]
async fn every_page_renders_real_jobs_under_its_prefix_and_escapes_what_jobs_hold() {
    let (_server, client) = setup().await;
    let app = Router::new().nest("/admin/jobs", redjob_web::router(client.clone()));
    let p = "/admin/jobs";

    let overview = get(&app, p).await;
    assert_eq!(overview.status, StatusCode::OK);
    // a link styled as a button has one class attribute, both classes in it
    let dead = get(&app, &format!("{p}/queues/mail/dead")).await;
    assert!(
        dead.body
            .contains(r#"<a class="button primary" href="/admin/jobs/queues/mail/dead/confirm"#),
        "{}",
        dead.body
    );
    assert!(
        !dead.body.contains(r#"class="button" class="#),
        "{}",
        dead.body
    );
    assert!(
        overview.body.contains(r#"href="/admin/jobs/queues/mail""#),
        "{}",
        overview.body
    );
    assert!(
        overview
            .body
            .contains(r#"href="/admin/jobs/assets/style.css""#)
    );
    assert!(
        overview
            .body
            .contains(r#"<a class="brand" href="/admin/jobs">"#),
        "{}",
        overview.body
    );

    let queue = get(&app, &format!("{p}/queues/mail")).await;
    assert_eq!(queue.status, StatusCode::OK, "{}", queue.body);
    assert!(
        queue.body.contains("Ready (2)") && queue.body.contains("Scheduled (1)"),
        "{}",
        queue.body
    );
    assert!(queue.body.contains("In flight (1)") && queue.body.contains("Dead (3)"));
    for state in ["scheduled", "in_flight"] {
        let tab = get(&app, &format!("{p}/queues/mail?state={state}")).await;
        assert_eq!(tab.status, StatusCode::OK);
        assert!(
            tab.body.contains(r#"&quot;i&quot;:13"#) == (state == "scheduled"),
            "{state}"
        );
    }
    // a page of one: the cursor leads to the second ready job
    let app1 = Router::new().nest(
        p,
        redjob_web::Dashboard::new(client.clone())
            .page_size(1)
            .router(),
    );
    let first = get(&app1, &format!("{p}/queues/mail")).await;
    let at = first
        .body
        .find("?state=ready&amp;after=")
        .expect("a next page");
    let next = &first.body[at..first.body[at..].find('"').unwrap() + at].replace("&amp;", "&");
    let second = get(&app1, &format!("{p}/queues/mail{next}")).await;
    assert_eq!(second.status, StatusCode::OK);
    // (job 10 is in flight)
    assert!(
        first.body.contains(r#"&quot;i&quot;:11"#) && second.body.contains(r#"&quot;i&quot;:12"#)
    );

    let dead = get(&app, &format!("{p}/queues/mail/dead")).await;
    assert_eq!(dead.status, StatusCode::OK);
    let ids = ids_in(&dead.body);
    assert_eq!(ids.len(), 3, "{}", dead.body);
    let only_b = get(&app, &format!("{p}/queues/mail/dead?type=B")).await;
    assert_eq!(ids_in(&only_b.body).len(), 1);
    let smtp = get(
        &app,
        &format!("{p}/queues/mail/dead?error=smtp&order=oldest"),
    )
    .await;
    assert_eq!(ids_in(&smtp.body).len(), 2);

    let job = get(&app, &format!("{p}/queues/mail/jobs/{}", ids[0])).await;
    assert_eq!(job.status, StatusCode::OK);
    assert!(job.body.contains("Why it died") && job.body.contains("Requeue"));
    // search by id lands on the job's page
    let found = get(&app, &format!("{p}/queues/mail?id={}", ids[1])).await;
    assert_eq!(found.status, StatusCode::SEE_OTHER);
    assert_eq!(found.location, format!("{p}/queues/mail/jobs/{}", ids[1]));

    for page in ["periodic", "workers"] {
        assert_eq!(
            get(&app, &format!("{p}/{page}")).await.status,
            StatusCode::OK
        );
    }
    for asset in ["style.css", "app.js"] {
        assert_eq!(
            get(&app, &format!("{p}/assets/{asset}")).await.status,
            StatusCode::OK
        );
    }

    // nothing a job holds is markup: its args and its error come out escaped
    for body in [&queue.body, &dead.body, &job.body] {
        assert!(!body.contains(XSS), "unescaped: {body}");
    }
    assert!(dead.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    let b = ids_in(&only_b.body)[0].clone();
    let b_job = get(&app, &format!("{p}/queues/mail/jobs/{b}")).await;
    assert!(
        !b_job.body.contains(XSS) && b_job.body.contains("&lt;script&gt;"),
        "{}",
        b_job.body
    );
}

#[tokio::test]
async fn actions_change_redis_only_with_the_token_from_this_site() {
    let (_server, client) = setup().await;
    let app = Router::new().nest("/jobs", redjob_web::router(client.clone()));
    let (cookie, token) = session(&app, "/jobs/queues/mail", true).await;
    let csrf = ("csrf", token.as_str());

    // refused: no token, a wrong one, another site's Origin
    let none = post(&app, "/jobs/queues/mail/pause", &cookie, &[]).await;
    assert_eq!(none.status, StatusCode::FORBIDDEN);
    let wrong = post(
        &app,
        "/jobs/queues/mail/pause",
        &cookie,
        &[("csrf", "0123456789abcdef0123456789abcdef")],
    )
    .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    let req = Request::post("/jobs/queues/mail/pause")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, &cookie)
        .header(header::HOST, "dash.local")
        .header(header::ORIGIN, "https://evil.example")
        .body(Body::from(format!("csrf={token}")))
        .unwrap();
    assert_eq!(send(&app, req).await.status, StatusCode::FORBIDDEN);
    assert!(!client.is_paused("mail").await.unwrap());

    let paused = post(&app, "/jobs/queues/mail/pause", &cookie, &[csrf]).await;
    assert_eq!(paused.status, StatusCode::SEE_OTHER);
    assert_eq!(paused.location, "/jobs/queues/mail");
    assert!(client.is_paused("mail").await.unwrap());
    // the note is shown once, from its cookie; a link cannot make one up
    let set = paused.cookie.clone().unwrap();
    assert!(
        set.contains("Path=/jobs") && set.contains("HttpOnly"),
        "{set}"
    );
    let with_note = format!("{cookie}; {}", set.split(';').next().unwrap());
    let page = get_with(&app, &paused.location, &with_note).await;
    assert!(
        page.body.contains("Paused: workers start none"),
        "{}",
        page.body
    );
    assert!(
        page.cookie
            .unwrap()
            .contains("redjob_note=; Path=/jobs; Max-Age=0")
    );
    let forged = get(&app, "/jobs/queues/mail?note=Sign+in+at+evil.example").await;
    assert!(!forged.body.contains("evil.example"), "{}", forged.body);
    post(&app, "/jobs/queues/mail/resume", &cookie, &[csrf]).await;
    assert!(!client.is_paused("mail").await.unwrap());

    // run the scheduled job now, cancel a ready one
    let scheduled = client
        .list("mail", redjob::inspect::JobState::Scheduled, None, 10)
        .await
        .unwrap()
        .jobs;
    let r = post(
        &app,
        &format!("/jobs/queues/mail/jobs/{}/run-now", scheduled[0].id),
        &cookie,
        &[csrf],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(client.counts("mail").await.unwrap().scheduled, 0);
    let ready = client.peek("mail", 1).await.unwrap();
    post(
        &app,
        &format!("/jobs/queues/mail/jobs/{}/cancel", ready[0].id),
        &cookie,
        &[csrf],
    )
    .await;
    let job = client.job("mail", &ready[0].id).await.unwrap().unwrap();
    assert_eq!(
        job.finished.and_then(|f| f.by).as_deref(),
        Some("dashboard"),
        "cancelled from the dashboard"
    );

    // dead letters: requeue the selected, delete all of a type, requeue one by its page
    let dead = get(&app, "/jobs/queues/mail/dead?type=A").await;
    let a = ids_in(&dead.body);
    assert_eq!(a.len(), 2);
    let r = post(
        &app,
        "/jobs/queues/mail/dead/requeue",
        &cookie,
        &[csrf, ("id", &a[0])],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(note(&r), "Requeued 1 dead letters.");
    assert_eq!(client.counts("mail").await.unwrap().dead, 2);
    let confirm = get(&app, "/jobs/queues/mail/dead/confirm?do=delete&type=A").await;
    assert!(
        confirm.body.contains("of type &quot;A&quot;"),
        "{}",
        confirm.body
    );
    post(
        &app,
        "/jobs/queues/mail/dead/delete",
        &cookie,
        &[csrf, ("all", "1"), ("type", "A")],
    )
    .await;
    let left = client
        .dead_page("mail", Default::default(), None, 10)
        .await
        .unwrap()
        .jobs;
    assert_eq!(left.len(), 1, "only the B letter is left");
    post(
        &app,
        &format!("/jobs/queues/mail/jobs/{}/requeue", left[0].id),
        &cookie,
        &[csrf],
    )
    .await;
    assert_eq!(client.counts("mail").await.unwrap().dead, 0);
    let bad_rate = post(
        &app,
        "/jobs/queues/mail/dead/requeue",
        &cookie,
        &[csrf, ("all", "1"), ("rate", "fast")],
    )
    .await;
    assert_eq!(bad_rate.status, StatusCode::BAD_REQUEST);

    // purge, after its confirmation page
    let ask = get(&app, "/jobs/queues/mail/purge").await;
    assert!(ask.body.contains("Delete 5 jobs"), "{}", ask.body);
    let purged = post(&app, "/jobs/queues/mail/purge", &cookie, &[csrf]).await;
    assert_eq!(note(&purged), "Deleted 5 jobs.");
    let n = client.counts("mail").await.unwrap();
    assert_eq!(n.ready + n.scheduled + n.in_flight, 0);
}

#[tokio::test]
async fn read_only_shows_no_action_and_refuses_every_post() {
    let (_server, client) = setup().await;
    let app = redjob_web::Dashboard::new(client.clone())
        .read_only(true)
        .router();
    let (cookie, token) = session(&app, "/queues/mail", false).await;
    let queue = get(&app, "/queues/mail").await;
    assert!(
        queue.body.contains("read-only") && !queue.body.contains("Pause"),
        "{}",
        queue.body
    );
    let dead = get(&app, "/queues/mail/dead").await;
    assert!(!dead.body.contains("Requeue") && ids_in(&dead.body).is_empty());
    for path in [
        "/queues/mail/pause",
        "/queues/mail/purge",
        "/queues/mail/dead/delete",
    ] {
        let r = post(&app, path, &cookie, &[("csrf", &token), ("all", "1")]).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}");
    }
    assert_eq!(
        get(&app, "/queues/mail/purge").await.status,
        StatusCode::FORBIDDEN
    );
    assert!(!client.is_paused("mail").await.unwrap());
    assert_eq!(client.counts("mail").await.unwrap().dead, 3);
}

#[tokio::test]
async fn bad_input_and_a_lost_redis_get_clear_statuses() {
    let (server, client) = setup().await;
    let app = redjob_web::router(client.clone());
    let cases = [
        ("/queues/nope", StatusCode::NOT_FOUND),
        ("/queues/bad%20name!", StatusCode::BAD_REQUEST),
        ("/queues/mail/jobs/not-an-id", StatusCode::BAD_REQUEST),
        (
            "/queues/mail/jobs/0000000000abcdefghijklmnopqrstuv",
            StatusCode::NOT_FOUND,
        ),
        ("/queues/mail?after=garbage", StatusCode::BAD_REQUEST),
        // a tab it does not have, not the ready tab in silence
        ("/queues/mail?state=bogus", StatusCode::BAD_REQUEST),
        ("/queues/mail?state=in_flight", StatusCode::OK),
        ("/?sort=bogus", StatusCode::BAD_REQUEST),
        ("/queues/mail/dead?after=1:2", StatusCode::BAD_REQUEST),
        (
            "/queues/mail/dead/confirm?do=explode",
            StatusCode::BAD_REQUEST,
        ),
        ("/assets/secrets.txt", StatusCode::NOT_FOUND),
    ];
    for (path, want) in cases {
        let got = get(&app, path).await;
        assert_eq!(got.status, want, "{path}: {}", got.body);
        assert!(got.body.contains("<h1>"), "{path}: an HTML page says why");
    }
    let (cookie, token) = session(&app, "/queues/mail", true).await;
    let r = post(&app, "/queues/mail/explode", &cookie, &[("csrf", &token)]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = post(
        &app,
        "/queues/mail/dead/requeue",
        &cookie,
        &[("csrf", &token)],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "nothing selected");

    drop(server);
    let down = get(&app, "/").await;
    assert_eq!(
        down.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        down.body
    );
}

/// An error page is a page of the dashboard: its header, navigation and style,
/// every link under the mount point, and the status with what went wrong.
#[tokio::test]
async fn error_pages_are_in_the_layout_with_links_under_the_prefix() {
    let (_server, client) = setup().await;
    let app = Router::new().nest("/admin/jobs", redjob_web::router(client.clone()));
    let cases = [
        ("/admin/jobs/queues/nope", StatusCode::NOT_FOUND, "no queue"),
        (
            "/admin/jobs/queues/mail?state=bogus",
            StatusCode::BAD_REQUEST,
            "no state",
        ),
        ("/admin/jobs/no/such/page", StatusCode::NOT_FOUND, "no page"),
    ];
    for (path, status, why) in cases {
        let got = get(&app, path).await;
        assert_eq!(got.status, status, "{path}: {}", got.body);
        for part in [
            r#"href="/admin/jobs/assets/style.css""#.to_string(),
            r#"<a class="brand" href="/admin/jobs">"#.into(),
            r#"href="/admin/jobs/topics""#.into(),
            r#"href="/admin/jobs/workers""#.into(),
            format!(
                "<h1>{} {}</h1>",
                status.as_u16(),
                status.canonical_reason().unwrap()
            ),
            why.into(),
        ] {
            assert!(
                got.body.contains(&part),
                "{path}: no {part} in {}",
                got.body
            );
        }
    }
}

/// A name in `rsmq:QUEUES` no queue can have (another RSMQ port's, a stray
/// SADD) is skipped by the overview, which says so and names it; the other
/// queues' pages work, and only a request for the bad name itself is a 400.
#[tokio::test]
async fn an_invalid_name_in_the_set_of_queues_is_skipped_by_the_overview() {
    let (server, client) = setup().await;
    let mut con = server.raw().await;
    let _: i64 = redis::cmd("SADD")
        .arg("rsmq:QUEUES")
        .arg("bad <name>")
        .query_async(&mut con)
        .await
        .unwrap();
    let app = redjob_web::router(client.clone());
    let overview = get(&app, "/").await;
    assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
    assert!(
        overview.body.contains(r#"href="/queues/mail""#),
        "{}",
        overview.body
    );
    assert!(
        overview.body.contains("1 entry skipped")
            && overview.body.contains("&quot;bad &lt;name&gt;&quot;"),
        "{}",
        overview.body
    );
    assert_eq!(get(&app, "/queues/mail").await.status, StatusCode::OK);
    assert_eq!(
        get(&app, "/queues/bad%20%3Cname%3E").await.status,
        StatusCode::BAD_REQUEST
    );
}

/// Runs until cancelled (stays in flight for the workers page).
#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "web_slow", queue = "slow")]
struct Slow {
    n: u32,
}

impl redjob::Job for Slow {
    async fn perform(&self, ctx: &redjob::JobContext) -> Result<(), redjob::JobError> {
        ctx.cancellation().cancelled().await;
        Ok(())
    }
}

#[tokio::test]
async fn workers_and_periodic_pages_show_live_workers_and_run_a_schedule_now() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let hourly = redjob::ops::Schedule::every(Duration::from_secs(3600)).unwrap();
    let worker = redjob::Worker::builder(client.backend())
        .queue("slow")
        .periodic(hourly, Slow { n: 7 })
        .grace_period(Duration::from_millis(200))
        .lease(Duration::from_secs(3))
        .handle_signals(false)
        .build()
        .unwrap();
    let running = common::start_serving(worker).await;
    let app = redjob_web::router(client.clone());
    // the schedule is listed once the worker's first beat is in; nothing ticks
    // within the hour, so a run now is the only job
    assert!(
        common::wait_for(Duration::from_secs(10), || async {
            get(&app, "/periodic").await.body.contains("every 3600s")
        })
        .await
    );
    let periodic = get(&app, "/periodic").await;
    assert!(
        periodic.body.contains("never") && periodic.body.contains("Run now"),
        "{}",
        periodic.body
    );
    let (cookie, token) = session(&app, "/periodic", true).await;
    let form = [
        ("csrf", token.as_str()),
        ("queue", "slow"),
        ("name", "web_slow"),
    ];
    let r = post(&app, "/periodic/run", &cookie, &form).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(r.location, "/periodic");
    let said = note(&r);
    assert!(
        said.starts_with("Enqueued a run of \"web_slow\" now"),
        "{said}"
    );
    assert!(
        common::wait_for(Duration::from_secs(10), || async {
            client.counts("slow").await.is_ok_and(|c| c.in_flight == 1)
        })
        .await,
        "the run enqueued now starts"
    );
    let in_flight = client
        .list("slow", redjob::inspect::JobState::InFlight, None, 1)
        .await
        .unwrap()
        .jobs;
    assert!(
        in_flight[0].body.windows(5).any(|w| w == br#""n":7"#),
        "the schedule's job"
    );
    let id = in_flight[0].id.to_string();
    assert!(
        common::wait_for(Duration::from_secs(10), || async {
            get(&app, "/workers").await.body.contains(&id)
        })
        .await,
        "the worker lists the job it runs"
    );
    let workers = get(&app, "/workers").await;
    assert!(
        workers.body.contains("web_slow") && workers.body.contains("1 of "),
        "{}",
        workers.body
    );
    let job = get(&app, &format!("/queues/slow/jobs/{id}")).await;
    assert!(
        job.body.contains("Started") && job.body.contains("pid"),
        "{}",
        job.body
    );
    let gone = [
        ("csrf", token.as_str()),
        ("queue", "slow"),
        ("name", "nope"),
    ];
    assert_eq!(
        post(&app, "/periodic/run", &cookie, &gone).await.status,
        StatusCode::NOT_FOUND
    );
    // paused and resumed for every worker, the page saying by whom
    let page = get(&app, "/periodic").await;
    assert!(page.body.contains(">Pause<"), "{}", page.body);
    let r = post(&app, "/periodic/pause", &cookie, &form).await;
    assert!(note(&r).starts_with("Paused \"web_slow\""), "{}", note(&r));
    let s = client.schedules().await.unwrap();
    assert_eq!(
        s[0].paused.as_ref().map(|p| p.by.as_str()),
        Some("dashboard")
    );
    let page = get(&app, "/periodic").await;
    assert!(
        page.body.contains("paused by dashboard") && page.body.contains(">Resume<"),
        "{}",
        page.body
    );
    let r = post(&app, "/periodic/resume", &cookie, &form).await;
    assert!(note(&r).starts_with("Resumed"), "{}", note(&r));
    assert!(client.schedules().await.unwrap()[0].paused.is_none());
    // a name no worker ticks: paused, and the note says nothing runs it; a
    // name none could have: a 400
    let r = post(&app, "/periodic/pause", &cookie, &gone).await;
    assert!(
        note(&r).contains("which no live worker ticks"),
        "{}",
        note(&r)
    );
    let nul = [("csrf", token.as_str()), ("queue", "slow"), ("name", "\0")];
    let r = post(&app, "/periodic/pause", &cookie, &nul).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    running.stop().await;
}

/// A resume of a schedule that is not paused (a crafted form, a stale page
/// another operator resumed already) says it was not paused, as the CLI
/// does. The old code said "Resumed ...: its next tick runs." whatever the
/// resume did.
#[tokio::test]
async fn a_resume_of_a_schedule_not_paused_says_so_not_resumed() {
    let client = Client::memory(Default::default());
    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/periodic", false).await;
    let form = [
        ("csrf", token.as_str()),
        ("queue", "reports"),
        ("name", "nightly_report"),
    ];
    let r = post(&app, "/periodic/resume", &cookie, &form).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        note(&r),
        "\"nightly_report\" was not paused: nothing changed."
    );
    // paused, then resumed: said so
    post(&app, "/periodic/pause", &cookie, &form).await;
    let r = post(&app, "/periodic/resume", &cookie, &form).await;
    assert!(
        note(&r).starts_with("Resumed \"nightly_report\""),
        "{}",
        note(&r)
    );
}

#[tokio::test]
async fn allowed_hosts_refuse_every_other_host_name() {
    let client = Client::memory(Default::default());
    let app = redjob_web::Dashboard::new(client)
        .allowed_hosts(["localhost", "[::1]"])
        .router();
    let with_host = |host: &'static str| {
        Request::get("/")
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(
        send(&app, with_host("localhost:8080")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, with_host("[::1]:8080")).await.status,
        StatusCode::OK
    );
    // a rebinding page's own name, and no Host at all
    let evil = send(&app, with_host("evil.example:8080")).await;
    assert_eq!(evil.status, StatusCode::FORBIDDEN);
    assert!(evil.body.contains("evil.example"), "{}", evil.body);
    assert_eq!(get(&app, "/").await.status, StatusCode::FORBIDDEN);
}

/// `calls` of `cmdstat_<name>` on `server`.
async fn calls(server: &RedisServer, name: &str) -> u64 {
    common::command_calls(&mut server.raw().await)
        .await
        .get(name)
        .copied()
        .unwrap_or(0)
}

/// The overview reads 150 queues with one `SMEMBERS`, two script calls (100
/// queues each at most) and one `HMGET` a queue for its minutes, pipelined.
#[tokio::test]
async fn the_overview_reads_every_queue_in_one_pipeline() {
    let (server, client) = setup().await;
    for i in 0..149 {
        redjob::queue::Queues::create_queue(
            client.queues(),
            &format!("q{i:03}"),
            QueueOptions::default(),
        )
        .await
        .unwrap();
    }
    let app = redjob_web::Dashboard::new(client.clone())
        .page_size(500)
        .router();
    // once for the scripts to load
    assert_eq!(get(&app, "/").await.status, StatusCode::OK);
    let names = ["smembers", "evalsha", "time"];
    let before: Vec<u64> = futures::future::join_all(names.map(|c| calls(&server, c))).await;
    let page = get(&app, "/").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains(r#"href="/queues/q148""#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"href="/queues/mail""#),
        "{}",
        page.body
    );
    let after: Vec<u64> = futures::future::join_all(names.map(|c| calls(&server, c))).await;
    let d: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    // 150 queues ("mail" too): two script calls, each reading the clock once
    // inside (the per-queue reads called three scripts and TIME twice per
    // queue)
    assert_eq!(d, [1, 2, 2]);
}

/// The overview filters by name, sorts by a column either way and pages;
/// a column it does not have is a 400.
#[tokio::test]
async fn the_overview_filters_sorts_and_pages() {
    let (_server, client) = setup().await;
    for (name, jobs) in [("alpha", 3), ("beta", 1), ("gamma", 2), ("delta", 0)] {
        redjob::queue::Queues::create_queue(client.queues(), name, QueueOptions::default())
            .await
            .unwrap();
        for i in 0..jobs {
            redjob::queue::Queues::send(client.queues(), name, SendMessage::new(format!("{i}")))
                .await
                .unwrap();
        }
    }
    let app = redjob_web::Dashboard::new(client.clone())
        .page_size(2)
        .router();
    // "mail" has 2 ready: by ready, largest first: alpha 3, gamma 2, mail 2, beta 1, delta 0
    let order = |body: &str| -> Vec<String> {
        body.split(r#"<td><a class="name" href="/queues/"#)
            .skip(1)
            .filter_map(|rest| rest.split('"').next().map(str::to_string))
            .collect()
    };
    let first = get(&app, "/?sort=ready&desc=1").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert_eq!(order(&first.body), ["alpha", "gamma"], "{}", first.body);
    assert!(first.body.contains("Queues 1–2 of 5"), "{}", first.body);
    let second = get(&app, "/?sort=ready&desc=1&page=2").await;
    assert_eq!(order(&second.body), ["mail", "beta"], "{}", second.body);
    let last = get(&app, "/?sort=ready&desc=1&page=9").await;
    assert_eq!(order(&last.body), ["delta"], "past the end: the last page");
    // the header sorts the other way on a second click
    assert!(
        first.body.contains(r#"href="/?sort=ready">Ready ↓"#),
        "{}",
        first.body
    );
    let filtered = get(&app, "/?q=ta").await;
    assert_eq!(
        order(&filtered.body),
        ["beta", "delta"],
        "{}",
        filtered.body
    );
    let none = get(&app, "/?q=zzz").await;
    assert!(
        none.body.contains("No queue&#39;s name contains")
            || none.body.contains("No queue's name contains"),
        "{}",
        none.body
    );
    let bad = get(&app, "/?sort=bogus").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.body);
    // a 160-character name is cut short by the style, whole in its title
    let long = "q".repeat(160);
    redjob::queue::Queues::create_queue(client.queues(), &long, QueueOptions::default())
        .await
        .unwrap();
    let page = get(&app, &format!("/?q={long}")).await;
    assert!(
        page.body.contains(&format!(
            r#"<a class="name" href="/queues/{long}" title="{long}">"#
        )),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn the_queue_page_shows_its_concurrency_keys_and_blocked_jobs_escaped() {
    use redjob::queue::Keyed;
    let (_server, client) = setup().await;
    let q = client.backend();
    let msgs: Vec<SendMessage> = (0..3)
        .map(|i| SendMessage::new(envelope("A", 20 + i)).keyed(Keyed::new(XSS)))
        .collect();
    let sent = q
        .send("mail", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let app = redjob_web::router(client.clone());
    // a job's page shows its key, escaped
    let job = get(&app, &format!("/queues/mail/jobs/{}", sent[1].id)).await;
    assert_eq!(job.status, StatusCode::OK, "{}", job.body);
    assert!(job.body.contains("Concurrency key"), "{}", job.body);
    assert!(job.body.contains("(1 at a time)"), "{}", job.body);
    assert!(!job.body.contains(XSS), "the key is escaped");
    // the blocked tab lists them, with their key
    let tab = get(&app, "/queues/mail?state=blocked").await;
    assert_eq!(tab.status, StatusCode::OK, "{}", tab.body);
    assert!(tab.body.contains(&sent[2].id.to_string()), "{}", tab.body);
    assert!(tab.body.contains("waits for key"), "{}", tab.body);
    assert!(tab.body.contains("Blocked (2)"), "{}", tab.body);
    assert!(!tab.body.contains(XSS), "the key is escaped");
    let page = get(&app, "/queues/mail").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("Concurrency keys"), "{}", page.body);
    assert!(page.body.contains("blocked by keys"), "{}", page.body);
    assert!(!page.body.contains(XSS), "the key is escaped");
    assert!(page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

#[tokio::test]
async fn batches_show_their_progress_dead_jobs_and_a_flows_parent_and_children() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let flow = redjob::client::Flow::new_in("albums", &Slow { n: 1 })
        .child_in("images", &Slow { n: 2 })
        .child_in("images", &Slow { n: 3 });
    let parent = client.enqueue_flow(flow).await.unwrap();
    // one child dies, as a worker would settle it
    let b = client.backend();
    let f = b.fetch("images", 1, Duration::from_secs(60)).await.unwrap();
    let d = &f.jobs[0];
    let settle = Settle {
        dead: vec![DeadLetterEntry {
            id: d.id,
            token: d.token,
            error: "boom".into(),
        }],
        batched: vec![(d.id, redjob::backend::BatchRef::of_body(&d.body).unwrap())],
        ..Settle::default()
    };
    let done = b.settle("images", &settle).await.unwrap();
    b.batch_settled("images", &done.batched).await.unwrap();
    let group = redjob::backend::BatchRef::of_body(&d.body).unwrap().batch;
    let app = redjob_web::router(client.clone());

    let list = get(&app, "/batches").await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(
        list.body.contains(&format!("flow web_slow {parent}")),
        "{}",
        list.body
    );
    assert!(
        list.body.contains(r#"<progress value="1" max="2""#),
        "{}",
        list.body
    );
    assert!(list.body.contains("50%"), "{}", list.body);
    let page = get(&app, &format!("/batches/{group}")).await;
    assert_eq!(page.status, StatusCode::OK);
    // its parent (failed with the child), its first failure, its dead job
    assert!(
        page.body.contains(&format!("/queues/albums/jobs/{parent}")),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(&format!("images {} dead", d.id)),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(&format!("/queues/images/jobs/{}", d.id)),
        "{}",
        page.body
    );
    // the other child's page names the parent that waits for it
    let other = client.peek("images", 10).await.unwrap();
    let child = get(&app, &format!("/queues/images/jobs/{}", other[0].id)).await;
    assert!(child.body.contains("Waited for by"), "{}", child.body);
    assert!(
        child
            .body
            .contains(&format!("/queues/albums/jobs/{parent}"))
    );
    // a waiting parent's page says what it waits for
    let waiting = client
        .enqueue_flow(
            redjob::client::Flow::new_in("albums", &Slow { n: 4 })
                .child_in("images", &Slow { n: 5 }),
        )
        .await
        .unwrap();
    let p = get(&app, &format!("/queues/albums/jobs/{waiting}")).await;
    assert!(p.body.contains("waiting for its children"), "{}", p.body);
    assert!(p.body.contains("0 of 1 children finished"), "{}", p.body);
    // its batch is cancelled from its page, once
    let info = client.job("albums", &waiting).await.unwrap().unwrap();
    let its = info.waits_for.unwrap();
    let (cookie, token) = session(&app, &format!("/batches/{its}"), true).await;
    let before = get(&app, &format!("/batches/{its}")).await;
    assert!(before.body.contains("Cancel batch"), "{}", before.body);
    let r = post(
        &app,
        &format!("/batches/{its}/cancel"),
        &cookie,
        &[("csrf", &token)],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(
        note(&r).starts_with(&format!("Batch {its} cancelled")),
        "{}",
        note(&r)
    );
    let after = get(&app, &format!("/batches/{its}")).await;
    assert!(
        after.body.contains("cancelling (workers cancel"),
        "{}",
        after.body
    );
    assert!(!after.body.contains("Cancel batch"), "{}", after.body);
    let again = post(
        &app,
        &format!("/batches/{its}/cancel"),
        &cookie,
        &[("csrf", &token)],
    )
    .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
    assert_eq!(
        get(&app, "/batches/nonsense").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&app, "/batches/0000000000abcdefghijklmnopqrstuv")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_batch_whose_counts_another_client_wrote_out_of_range_is_shown_at_100_percent() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let flow =
        redjob::client::Flow::new_in("albums", &Slow { n: 1 }).child_in("images", &Slow { n: 2 });
    client.enqueue_flow(flow).await.unwrap();
    let b = client.backend();
    let f = b.fetch("images", 1, Duration::from_secs(60)).await.unwrap();
    let group = redjob::backend::BatchRef::of_body(&f.jobs[0].body)
        .unwrap()
        .batch;
    let mut con = server.raw().await;
    let _: () = redis::cmd("HSET")
        .arg(format!("rsmq:@batch:{group}"))
        .arg("succeeded")
        .arg(u64::MAX)
        .arg("dead")
        .arg(5)
        .query_async(&mut con)
        .await
        .unwrap();
    let app = redjob_web::router(client.clone());
    for path in ["/batches".to_string(), format!("/batches/{group}")] {
        let page = get(&app, &path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert!(page.body.contains("100%"), "{path}: {}", page.body);
    }
}

/// A job of a large body: the job's page shows at most the first 64 KiB of
/// it, and says so with its whole size (it rendered all of a 50 MB body:
/// 131 MB of HTML); the queue page previews it in a line; an ordinary body
/// shows whole as before.
#[tokio::test]
async fn a_large_body_is_shown_cut_to_64_kib_with_its_size() {
    let (_server, client) = setup().await;
    let opts = QueueOptions {
        maxsize: -1,
        ..QueueOptions::default()
    };
    redjob::queue::Queues::create_queue(client.queues(), "big", opts)
        .await
        .unwrap();
    let body = serde_json::json!({"type": "A", "args": {"x": "<a>".repeat(400_000)}}).to_string();
    let size = body.len();
    Backend::send(&client.backend(), "big", &[SendMessage::new(body)], &opts)
        .await
        .unwrap();
    let id = client.peek("big", 1).await.unwrap()[0].id.to_string();
    let app = redjob_web::router(client.clone());
    let page = get(&app, &format!("/queues/big/jobs/{id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.len() < 400_000,
        "{} bytes of HTML",
        page.body.len()
    );
    // 1,200,028
    let size = format!(
        "{},{:03},{:03}",
        size / 1_000_000,
        size / 1000 % 1000,
        size % 1000
    );
    assert!(
        page.body
            .contains(&format!("first 64 KiB of its {size} bytes")),
        "{}",
        &page.body[..2000.min(page.body.len())]
    );
    // the queue page: a line of it
    let queue = get(&app, "/queues/big").await;
    assert_eq!(queue.status, StatusCode::OK);
    assert!(queue.body.len() < 100_000, "{} bytes", queue.body.len());
    assert!(
        queue
            .body
            .contains("{&quot;x&quot;:&quot;&lt;a&gt;&lt;a&gt;"),
        "{}",
        queue.body
    );
    // an ordinary one, whole
    let small = client.peek("mail", 1).await.unwrap()[0].id.to_string();
    let page = get(&app, &format!("/queues/mail/jobs/{small}")).await;
    assert!(!page.body.contains("first 64 KiB"), "{}", page.body);
}

/// The batches' pages, "Older →" after "Older →", show every batch once,
/// also when more than a page's were opened in one millisecond (here a clock
/// that stands still): the 10 after the first page's 50 were on no page.
#[tokio::test]
async fn the_batches_pages_show_every_batch_once() {
    use redjob::backend::memory::{Clock, MemoryBackend};
    let clock = Clock::frozen_at(std::time::SystemTime::now());
    let client = Client::memory(MemoryBackend::with_clock(clock));
    let mut ids = std::collections::BTreeSet::new();
    for _ in 0..60 {
        let id = client.batch().description("b").enqueue().await.unwrap();
        ids.insert(id.to_string());
    }
    let app = redjob_web::router(client.clone());
    let mut seen = Vec::new();
    let mut path = "/batches".to_string();
    for _ in 0..5 {
        let page = get(&app, &path).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        seen.extend(
            ids.iter()
                .filter(|id| page.body.contains(&format!("<code>{id}</code>")))
                .cloned(),
        );
        // the "Older →" link's href
        let Some(end) = page.body.find(">Older →<") else {
            break;
        };
        let start = page.body[..end].rfind("href=\"").unwrap() + 6;
        let href = &page.body[start..];
        path = href[..href.find('"').unwrap()].replace("&amp;", "&");
    }
    let distinct: std::collections::BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!(
        (seen.len(), distinct.len()),
        (60, 60),
        "of 60 batches, the pages showed {} ({} distinct)",
        seen.len(),
        distinct.len()
    );
}

/// A job waiting for its concurrency key's place is blocked: its page says
/// so. The page's state label had no arm for `JobState::Blocked` and fell to
/// the dead letters' ("dead", its time under "Died"), though the job is
/// waiting in the queue and its queue page lists it under "Blocked".
#[tokio::test]
async fn a_blocked_jobs_page_says_blocked_not_dead() {
    use redjob::backend::memory::MemoryBackend;
    use redjob::inspect::JobState;
    use redjob::queue::Keyed;
    let client = Client::memory(MemoryBackend::new());
    let q = client.backend();
    let msgs: Vec<SendMessage> = (0..2)
        .map(|i| SendMessage::new(envelope("A", i)).keyed(Keyed::new("account-7")))
        .collect();
    let sent = q
        .send("mail", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let id = sent[1].id;
    let job = client.job("mail", &id).await.unwrap().expect("queued");
    assert_eq!(job.state, JobState::Blocked);
    let app = redjob_web::router(client.clone());
    let page = get(&app, &format!("/queues/mail/jobs/{id}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        !page.body.contains(r#"<span class="badge">dead</span>"#) && !page.body.contains("Died"),
        "a blocked job's page calls it dead: {}",
        page.body
    );
    assert!(page.body.contains("blocked"), "{}", page.body);
    // the overview's totals count it (a card, as on the queue's page)
    let overview = get(&app, "/").await;
    assert!(
        overview
            .body
            .contains("<b>1</b><span>blocked by keys</span>"),
        "{}",
        overview.body
    );
}

/// The alert an error page shows.
fn alert(body: &str) -> &str {
    let at = body.find(r#"role="alert">"#).map_or(body.len(), |i| i + 13);
    let rest = &body[at..];
    &rest[..rest.find('<').unwrap_or(rest.len())]
}

/// A Redis that stalls (stopped with SIGSTOP) or is gone is said so on the
/// error page, with what to expect: the page said "the backend failed:
/// redis error: timed out", and for a server gone "the backend failed:
/// redis error: Connection refused (os error 111)" (or "broken pipe",
/// "unexpected end of file"), redis-rs's words for what went wrong. Those
/// words stay on the page after what it says (a timeout's were dropped).
#[tokio::test]
async fn a_stalled_or_gone_redis_is_said_so_on_the_error_page() {
    let server = RedisServer::start();
    let mut cfg = redjob::client::ClientConfig::from_url(server.url());
    cfg.redis.response_timeout = Duration::from_millis(500);
    let client = Client::from_config(cfg).await.unwrap();
    let app = redjob_web::router(client.clone());
    assert_eq!(get(&app, "/").await.status, StatusCode::OK);
    let signal = |s: &str| {
        let done = std::process::Command::new("kill")
            .args([s, &server.pid().to_string()])
            .status()
            .unwrap();
        assert!(done.success(), "kill {s}");
    };
    signal("-STOP");
    let stalled = get(&app, "/topics").await;
    signal("-CONT");
    assert_eq!(stalled.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        alert(&stalled.body),
        "Redis did not answer in time (the client's response timeout: redis error: timed out): it is stalled or too busy. This page answers again once Redis does."
    );
    assert_eq!(get(&app, "/").await.status, StatusCode::OK, "awake again");
    drop(server);
    for path in ["/", "/topics", "/workers"] {
        let gone = get(&app, path).await;
        assert_eq!(gone.status, StatusCode::SERVICE_UNAVAILABLE, "{path}");
        let said = alert(&gone.body);
        assert!(
            said.starts_with("Redis cannot be reached (")
                && said.ends_with("). This page answers again once it can."),
            "{path}: {said}"
        );
    }
}
