//! Every page of the dashboard is valid HTML5: each is fetched over HTTP,
//! with data in every state (jobs ready, scheduled, in flight, finished and
//! dead; a topic with dead events; a live worker and a schedule), as an
//! action's confirmation, read-only and as an error, and parsed by html5ever
//! (the parsing algorithm browsers follow); any parse error it reports fails
//! the test, a duplicate attribute on an element among them.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::borrow::Cow;
use std::cell::{Cell, Ref, RefCell};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use common::RedisServer;
use html5ever::interface::{ElementFlags, NodeOrText, QuirksMode, TreeSink};
use html5ever::tendril::{StrTendril, TendrilSink};
use html5ever::tokenizer::TokenizerOpts;
use html5ever::tree_builder::TreeBuilderOpts;
use html5ever::{Attribute, LocalName, Namespace, ParseOpts, QualName};
use http::get;
use redjob::Client;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::client::EnqueueOptions;
use redjob::inspect::{AttemptOutcome, Inspect, JobState};
use redjob::queue::{QueueOptions, SendMessage};
use redjob::topic::{EventOptions, EventRun, EventSettle, Start, Topics};

/// A tree sink that keeps no tree: element names (for the tree builder's
/// questions) and the parse errors, each with where it was found.
#[derive(Default)]
struct Errors {
    names: RefCell<Vec<QualName>>,
    errors: RefCell<Vec<String>>,
    line: Cell<u64>,
    quirks: Cell<bool>,
}

impl Errors {
    fn node(&self, name: QualName) -> usize {
        let mut names = self.names.borrow_mut();
        names.push(name);
        names.len() - 1
    }
}

fn no_name() -> QualName {
    QualName::new(None, Namespace::from(""), LocalName::from(""))
}

impl TreeSink for Errors {
    type Handle = usize;
    type Output = Vec<String>;
    type ElemName<'a> = Ref<'a, QualName>;

    fn finish(self) -> Vec<String> {
        let mut errors = self.errors.into_inner();
        if self.quirks.get() {
            errors.push("the document is in quirks mode (no <!DOCTYPE html>)".into());
        }
        errors
    }
    fn parse_error(&self, msg: Cow<'static, str>) {
        // where: the line, and the element made last (a tag's own errors
        // come before its element is made)
        let line = self.line.get();
        let names = self.names.borrow();
        let after = names.last().map_or("", |n| &*n.local);
        let text = format!("line {line}, after <{after}>: {msg}");
        self.errors.borrow_mut().push(text);
    }
    fn get_document(&self) -> usize {
        if self.names.borrow().is_empty() {
            self.node(no_name());
        }
        0
    }
    fn elem_name<'a>(&'a self, target: &'a usize) -> Ref<'a, QualName> {
        Ref::map(self.names.borrow(), |n| &n[*target])
    }
    fn create_element(&self, name: QualName, _: Vec<Attribute>, _: ElementFlags) -> usize {
        self.node(name)
    }
    fn create_comment(&self, _: StrTendril) -> usize {
        self.node(no_name())
    }
    fn create_pi(&self, _: StrTendril, _: StrTendril) -> usize {
        self.node(no_name())
    }
    fn append(&self, _: &usize, _: NodeOrText<usize>) {}
    fn append_based_on_parent_node(&self, _: &usize, _: &usize, _: NodeOrText<usize>) {}
    fn append_doctype_to_document(&self, _: StrTendril, _: StrTendril, _: StrTendril) {}
    fn get_template_contents(&self, target: &usize) -> usize {
        *target
    }
    fn same_node(&self, x: &usize, y: &usize) -> bool {
        x == y
    }
    fn set_quirks_mode(&self, mode: QuirksMode) {
        self.quirks.set(mode != QuirksMode::NoQuirks);
    }
    fn append_before_sibling(&self, _: &usize, _: NodeOrText<usize>) {}
    fn add_attrs_if_missing(&self, _: &usize, _: Vec<Attribute>) {}
    fn remove_from_parent(&self, _: &usize) {}
    fn reparent_children(&self, _: &usize, _: &usize) {}
    fn set_current_line(&self, line: u64) {
        self.line.set(line);
    }
}

/// The parse errors of `html` as a whole document, each with where.
fn parse_errors(html: &str) -> Vec<String> {
    let opts = ParseOpts {
        tokenizer: TokenizerOpts {
            exact_errors: true,
            ..Default::default()
        },
        tree_builder: TreeBuilderOpts {
            exact_errors: true,
            ..Default::default()
        },
    };
    html5ever::parse_document(Errors::default(), opts).one(html)
}

#[test]
fn the_check_catches_what_it_should() {
    let ok =
        "<!DOCTYPE html><html lang=en><head><title>t</title></head><body><p>x</p></body></html>";
    assert_eq!(parse_errors(ok), Vec::<String>::new());
    let twice = "<!DOCTYPE html><html><head><title>t</title></head><body><a class=x class=y>z</a></body></html>";
    let errors = parse_errors(twice);
    assert!(
        errors.len() == 1 && errors[0].contains("Duplicate attribute"),
        "{errors:?}"
    );
    let misnested = "<!DOCTYPE html><html><head><title>t</title></head><body><table><div>x</div></table></body></html>";
    assert!(!parse_errors(misnested).is_empty());
    let quirks = "<html><head><title>t</title></head><body></body></html>";
    assert!(!parse_errors(quirks).is_empty());
}

fn envelope(ty: &str, i: usize) -> String {
    format!(r#"{{"type":"{ty}","args":{{"i":{i},"note":"<b>&amp;</b>"}}}}"#)
}

/// Runs until cancelled (in flight on the workers page).
#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "markup_slow", queue = "slow")]
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
async fn every_page_is_valid_html5() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let b = client.backend();
    let opts = QueueOptions::default();

    // "mail": 2 dead letters, then ready, scheduled, in flight and finished
    let msgs: Vec<SendMessage> = (0..2).map(|i| SendMessage::new(envelope("A", i))).collect();
    b.send("mail", &msgs, &opts).await.unwrap();
    let leased = b.fetch("mail", 2, Duration::from_secs(60)).await.unwrap();
    let dead = leased
        .jobs
        .iter()
        .map(|d| DeadLetterEntry {
            id: d.id,
            token: d.token,
            error: "smtp <timeout> & more".into(),
        })
        .collect();
    let settle = Settle {
        dead,
        ..Settle::default()
    };
    assert_eq!(b.settle("mail", &settle).await.unwrap().dead, 2);
    let msgs = [
        SendMessage::new(envelope("B", 10)),
        SendMessage::new(envelope("C", 11)),
        SendMessage::new(envelope("C", 12)),
        SendMessage::new(envelope("A", 13)).delay(Duration::from_secs(600)),
    ];
    b.send("mail", &msgs, &opts).await.unwrap();
    b.fetch("mail", 1, Duration::from_secs(60)).await.unwrap();
    let ready = client.list("mail", JobState::Ready, None, 2).await.unwrap();
    client.cancel("mail", &ready.jobs[1].id).await.unwrap();
    let mut jobs = Vec::new();
    for state in [
        JobState::Ready,
        JobState::Scheduled,
        JobState::InFlight,
        JobState::Finished,
        JobState::Dead,
    ] {
        let page = client.list("mail", state, None, 1).await.unwrap();
        assert_eq!(page.jobs.len(), 1, "a job {state:?}");
        jobs.push(page.jobs[0].id);
    }

    // "orders": "billing" dead-lettered two events, one with its attempt
    client
        .subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    let events = [("placed", r#"{"note":"<i>"}"#), ("paid", "{}")];
    b.publish("orders", &events, &EventOptions::DEFAULT)
        .await
        .unwrap();
    let got = b
        .read("orders", "billing", "c", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let batch = EventSettle {
        dead: vec![
            (got[0].delivery(), got[0].clone(), "<declined>".into()),
            (got[1].delivery(), got[1].clone(), "card declined".into()),
        ],
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

    // a live worker running a job, with an hourly schedule
    let hourly = redjob::ops::Schedule::every(Duration::from_secs(3600)).unwrap();
    let worker = redjob::Worker::builder(client.backend())
        .queue("slow")
        .periodic(hourly, Slow { n: 1 })
        .grace_period(Duration::from_millis(200))
        // beats come with lease renewals: a short lease, a first beat soon
        .lease(Duration::from_secs(3))
        .handle_signals(false)
        .build()
        .unwrap();
    let running = common::start_serving(worker).await;
    client
        .enqueue_with(&Slow { n: 2 }, EnqueueOptions::new())
        .await
        .unwrap();

    // a flow: its parent waits for its child
    let parent = client
        .enqueue_flow(
            redjob::client::Flow::new_in("albums", &Slow { n: 3 })
                .child_in("images", &Slow { n: 4 }),
        )
        .await
        .unwrap();
    let group = client
        .job("albums", &parent)
        .await
        .unwrap()
        .and_then(|j| j.waits_for)
        .expect("the parent waits");

    let p = "/jobs";
    let app = Router::new()
        .nest(p, redjob_web::router(client.clone()))
        .nest(
            "/ro",
            redjob_web::Dashboard::new(client.clone())
                .read_only(true)
                .router(),
        );
    assert!(
        common::wait_for(Duration::from_secs(10), || async {
            get(&app, &format!("{p}/workers"))
                .await
                .body
                .contains("markup_slow")
        })
        .await,
        "the worker reports the job it runs"
    );

    let mut pages: Vec<(String, StatusCode)> = Vec::new();
    let ok = |pages: &mut Vec<_>, path: String| pages.push((path, StatusCode::OK));
    for base in [p, "/ro"] {
        ok(&mut pages, base.to_string());
        ok(&mut pages, format!("{base}?q=ma&sort=ready&desc=1"));
        ok(&mut pages, format!("{base}?range=week&sort=processed"));
        for state in ["ready", "scheduled", "in_flight", "finished"] {
            ok(&mut pages, format!("{base}/queues/mail?state={state}"));
        }
        for id in &jobs {
            ok(&mut pages, format!("{base}/queues/mail/jobs/{id}"));
        }
        ok(&mut pages, format!("{base}/queues/mail/dead"));
        ok(
            &mut pages,
            format!("{base}/queues/mail/dead?type=A&error=smtp&order=oldest"),
        );
        ok(&mut pages, format!("{base}/topics"));
        ok(&mut pages, format!("{base}/topics/orders"));
        ok(&mut pages, format!("{base}/topics/orders/billing/dead"));
        ok(&mut pages, format!("{base}/workers"));
        ok(&mut pages, format!("{base}/periodic"));
        ok(&mut pages, format!("{base}/queues/slow"));
        ok(&mut pages, format!("{base}/batches"));
        ok(&mut pages, format!("{base}/batches/{group}"));
        ok(&mut pages, format!("{base}/queues/albums/jobs/{parent}"));
    }
    for confirm in [
        "queues/mail/purge",
        "queues/mail/dead/confirm?do=requeue",
        "queues/mail/dead/confirm?do=delete&type=A",
        "topics/orders/billing/dead/confirm?do=requeue",
        "topics/orders/billing/dead/confirm?do=delete",
        "topics/orders/billing/rewind?to=beginning",
        "topics/orders/billing/rewind?to=end",
    ] {
        ok(&mut pages, format!("{p}/{confirm}"));
        pages.push((format!("/ro/{confirm}"), StatusCode::FORBIDDEN));
    }
    for (path, status) in [
        ("queues/nope", StatusCode::NOT_FOUND),
        ("queues/mail?state=bogus", StatusCode::BAD_REQUEST),
        ("queues/mail/jobs/not-an-id", StatusCode::BAD_REQUEST),
        ("topics/nope", StatusCode::NOT_FOUND),
        ("no/such/page", StatusCode::NOT_FOUND),
    ] {
        pages.push((format!("{p}/{path}"), status));
    }

    let mut failures = Vec::new();
    for (path, status) in &pages {
        let got = get(&app, path).await;
        assert_eq!(got.status, *status, "{path}: {}", got.body);
        let errors = parse_errors(&got.body);
        if !errors.is_empty() {
            failures.push(format!("{path}:\n  {}", errors.join("\n  ")));
        }
    }
    running.stop().await;
    assert!(
        failures.is_empty(),
        "HTML5 parse errors in {} of {} pages:\n{}",
        failures.len(),
        pages.len(),
        failures.join("\n")
    );
}
