//! The dashboard in a real browser: headless Chromium driven over WebDriver
//! (chromedriver, Debian's `chromium` and `chromium-driver`, which
//! `scripts/test` installs when missing) against a private redis-server with a
//! live worker and real jobs. It loads every page, clicks pause, resume, cancel,
//! requeue and purge and checks each effect in Redis, checks that the live
//! refresh picks up a change, that a job's `<script>` never runs, and that the
//! pages fit a phone's width; it takes a screenshot of each page.
//!
//! Screenshots go to `target/tmp/screenshots/`; with
//! `REDJOB_SCREENSHOTS=docs` they also replace the ones in `docs/screenshots/`
//! that docs/operating.md (and the README) show. `REDJOB_SKIP_BROWSER=1` skips the test (say so when
//! you do: nothing else covers the pages in a browser).

#[path = "../../tests/common/mod.rs"]
mod common;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::RedisServer;
use fantoccini::{ClientBuilder, Locator};
use redjob::backend::Backend;
use redjob::inspect::{Inspect, JobState};
use redjob::ops::Admin;
use redjob::{Client, JobContext, JobError, JobId};
use serde_json::json;

/// Sent by the hour; the odd ones fail for good.
#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "send_email", queue = "emails")]
struct SendEmail {
    to: String,
    subject: String,
    fail: bool,
}

impl redjob::Job for SendEmail {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        if self.fail {
            return Err(JobError::fatal(format!(
                "550 mailbox {} unavailable",
                self.to
            )));
        }
        Ok(())
    }
}

/// Never run here: a paused queue's jobs.
#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "build_report", queue = "reports")]
struct BuildReport {
    account: u32,
    note: String,
}

impl redjob::Job for BuildReport {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Runs until the worker stops: in flight on the workers page.
#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "transcode_video", queue = "media")]
struct TranscodeVideo {
    video: u32,
}

impl redjob::Job for TranscodeVideo {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.cancellation().cancelled().await;
        Ok(())
    }
}

/// What a job may hold: markup that must show as text and never run.
const XSS: &str = r#"<script>window.__xss=1</script><img src=x onerror="window.__xss=2">"#;

/// chromedriver on a free loopback port; killed on drop.
struct Driver(Child, u16);

impl Drop for Driver {
    fn drop(&mut self) {
        // chromedriver leads its own process group, Chromium's processes in it
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names
        .iter()
        .flat_map(|n| std::env::split_paths(&path).map(move |d| d.join(n)))
        .find(|p| p.is_file())
}

async fn browser() -> (Driver, fantoccini::Client) {
    let driver = which(&["chromedriver"])
        .expect("chromedriver not found: install chromium-driver (scripts/test does)");
    let chromium = which(&["chromium", "chromium-browser", "google-chrome"])
        .expect("chromium not found: install chromium (scripts/test does)");
    let port = RedisServer::free_port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver(child, port);
    assert!(
        common::wait_until(Duration::from_secs(15), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await,
        "chromedriver listens within 15 s"
    );
    let caps = json!({
        "goog:chromeOptions": {
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,900", "--force-device-scale-factor=1",
                     "--hide-scrollbars"],
        }
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!()
    };
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let session = tokio::time::timeout(
        Duration::from_secs(60),
        ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", driver.1)),
    )
    .await
    .expect("a browser session within 60 s")
    .expect("a browser session");
    (driver, session)
}

/// Saves a screenshot of the page (and checks it is a PNG of some size).
async fn shot(b: &fantoccini::Client, name: &str) {
    let png = b.screenshot().await.unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{name}: {} bytes",
        png.len()
    );
    let mut dirs = vec![PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots")];
    if std::env::var("REDJOB_SCREENSHOTS").as_deref() == Ok("docs") {
        dirs.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/screenshots"));
    }
    for dir in dirs {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
    }
}

/// Clicks the button labelled `label` (the first one), then waits for the page
/// the form leads to.
async fn click_button(b: &fantoccini::Client, label: &str) {
    let xpath = format!("//button[normalize-space()='{label}']");
    let button = b
        .find(Locator::XPath(&xpath))
        .await
        .unwrap_or_else(|e| panic!("no {label:?} button: {e}"));
    leave(b, button.click()).await;
}

/// Clicks the link `text`, then waits for the page it leads to.
async fn click_link(b: &fantoccini::Client, text: &str) {
    let link = b
        .find(Locator::LinkText(text))
        .await
        .unwrap_or_else(|e| panic!("no {text:?} link: {e}"));
    leave(b, link.click()).await;
}

/// Marks the current page, runs `go`, and waits until another page has loaded.
async fn leave<F: std::future::Future<Output = Result<(), fantoccini::error::CmdError>>>(
    b: &fantoccini::Client,
    go: F,
) {
    b.execute("window.__left = 1", vec![]).await.unwrap();
    go.await.unwrap();
    let done = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let js = "return window.__left === undefined && document.readyState === 'complete'";
            if b.execute(js, vec![]).await.ok() == Some(json!(true)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    done.await.expect("the next page loads within 10 s");
}

async fn wait_loaded(b: &fantoccini::Client) {
    let done = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let state = b
                .execute("return document.readyState", vec![])
                .await
                .unwrap();
            if state == "complete" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    done.await.expect("the page loads within 10 s");
}

async fn open(b: &fantoccini::Client, url: &str) -> String {
    b.goto(url).await.unwrap();
    wait_loaded(b).await;
    b.source().await.unwrap()
}

async fn text_of(b: &fantoccini::Client, css: &str) -> String {
    b.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// `2519` as `2,519`, as the dashboard writes numbers.
fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The job a table row names by its link, on the current page: the first id.
async fn first_job_id(b: &fantoccini::Client) -> JobId {
    text_of(b, "#jobs td a code, table td a code")
        .await
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_a_real_browser() {
    if std::env::var_os("REDJOB_SKIP_BROWSER").is_some() {
        eprintln!("REDJOB_SKIP_BROWSER set: the browser test did not run");
        return;
    }
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let start_minute = client.backend().now_ms().await.unwrap() / 60_000;

    // "emails": 41 sent and 5 failed for good by a worker that then stops, and
    // 3 waiting an hour; "reports" (paused, never served): 4 ready, one holding
    // markup, and 2 later; "media": a live worker running one job, and an
    // hourly schedule
    let emails = redjob::Worker::builder(client.backend())
        .queue("emails")
        .handle_signals(false)
        .build()
        .unwrap();
    let emails = common::start_serving(emails).await;
    let mails: Vec<SendEmail> = (0..46)
        .map(|i| SendEmail {
            to: format!("user{i}@example.com"),
            subject: format!("Your invoice #{}", 1000 + i),
            fail: i % 8 == 7,
        })
        .collect();
    client.enqueue_batch(&mails).await.unwrap();
    assert!(
        common::wait_for(Duration::from_secs(20), || async {
            client
                .stats("emails")
                .await
                .is_ok_and(|s| s.processed == 41 && s.dead == 5)
        })
        .await,
        "the worker settles every email: {:?} {:?}",
        client.stats("emails").await,
        client.counts("emails").await
    );
    emails.stop().await;
    for i in 0..3 {
        let later = SendEmail {
            to: format!("later{i}@example.com"),
            subject: "Reminder".into(),
            fail: false,
        };
        client
            .enqueue_in(&later, Duration::from_secs(3600))
            .await
            .unwrap();
    }
    let notes = ["quarterly", XSS, "weekly", "daily"];
    let mut ready = Vec::new();
    for (i, note) in notes.iter().enumerate() {
        let job = BuildReport {
            account: 100 + i as u32,
            note: (*note).into(),
        };
        ready.push(client.enqueue(&job).await.unwrap());
    }
    for i in 0..2 {
        let job = BuildReport {
            account: 200 + i,
            note: "monthly".into(),
        };
        client
            .enqueue_in(&job, Duration::from_secs(1800))
            .await
            .unwrap();
    }
    client.pause("reports").await.unwrap();
    let media = redjob::Worker::builder(client.backend())
        .queue("media")
        .periodic(
            redjob::ops::Schedule::every(Duration::from_secs(3600)).unwrap(),
            TranscodeVideo { video: 0 },
        )
        .lease(Duration::from_secs(5))
        .grace_period(Duration::from_millis(200))
        .handle_signals(false)
        .build()
        .unwrap();
    let media = common::start_serving(media).await;
    client.enqueue(&TranscodeVideo { video: 7 }).await.unwrap();
    assert!(
        common::wait_for(Duration::from_secs(20), || async {
            client.counts("media").await.is_ok_and(|c| c.in_flight == 1)
        })
        .await,
        "the video job runs"
    );

    // an hour of history for "emails" before the minute the test started in
    // (so no settle of the worker's is overwritten), written into the
    // per-minute ring as settle calls write it, so that the chart (and its
    // screenshot) shows a whole hour; 57 minutes, so that it stays in the hour
    // shown for 3 minutes
    let (mut past_processed, mut past_failed) = (0, 0);
    let mut con = server.raw().await;
    for back in 1..=57u64 {
        let m = start_minute - back;
        let (p, f) = (
            30 + (back * 7919) % 97 % 35,
            u64::from(back % 9 == 4) * (1 + back % 5),
        );
        past_processed += p;
        past_failed += f;
        let _: () = redis::cmd("HSET")
            .arg("rsmq:emails:stats")
            .arg(format!("m{}", m % 61))
            .arg(format!("{m} {p} {f}"))
            .query_async(&mut con)
            .await
            .unwrap();
    }

    // the dashboard nested under /ops in an app, without live refresh (a
    // refresh replaces the parts an element found was in), and under /live
    // refreshing every second for the live check
    let still = redjob_web::Dashboard::new(client.clone())
        .refresh(Duration::ZERO)
        .router();
    let live = redjob_web::Dashboard::new(client.clone())
        .refresh(Duration::from_secs(1))
        .router();
    let app = axum::Router::new().nest("/ops", still).nest("/live", live);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://localhost:{}", listener.local_addr().unwrap().port());
    let base = format!("{origin}/ops");
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });

    let (_driver, b) = browser().await;
    let run = async {
        // overview: every queue, the chart with bars of both kinds
        let page = open(&b, &base).await;
        for q in ["emails", "media", "reports"] {
            assert!(page.contains(&format!(">{q}</a>")), "{q} listed");
        }
        let bars = b
            .find_all(Locator::Css("#chart rect.p"))
            .await
            .unwrap()
            .len();
        let failed = b
            .find_all(Locator::Css("#chart rect.f"))
            .await
            .unwrap()
            .len();
        assert!(
            bars >= 1 && failed >= 1,
            "chart bars: {bars} processed, {failed} failed"
        );
        let caption = text_of(&b, "#chart figcaption").await;
        assert!(
            caption.contains(&format!("{} processed", grouped(41 + past_processed)))
                && caption.contains(&format!("{} failed", grouped(5 + past_failed))),
            "{caption}"
        );
        shot(&b, "overview").await;

        // the queue page by its link; the job holding markup shows it as text
        click_link(&b, "reports").await;
        assert!(
            b.current_url()
                .await
                .unwrap()
                .path()
                .ends_with("/ops/queues/reports")
        );
        let jobs = text_of(&b, "#jobs").await;
        assert!(jobs.contains("<script>window.__xss=1</script>"), "{jobs}");
        let made = b
            .find_all(Locator::Css("#jobs script, #jobs img"))
            .await
            .unwrap();
        assert!(made.is_empty(), "the markup made elements");
        shot(&b, "queue").await;

        // resume and pause change Redis
        assert!(client.is_paused("reports").await.unwrap());
        click_button(&b, "Resume").await;
        assert!(
            !client.is_paused("reports").await.unwrap(),
            "resumed in Redis"
        );
        click_button(&b, "Pause").await;
        assert!(
            client.is_paused("reports").await.unwrap(),
            "paused in Redis"
        );
        assert!(text_of(&b, "h1").await.contains("paused"));

        // the job with markup: its page shows it, nothing ran
        open(&b, &format!("{base}/queues/reports/jobs/{}", ready[1])).await;
        let made = b
            .find_all(Locator::Css("pre script, pre img"))
            .await
            .unwrap();
        assert!(made.is_empty(), "the markup made elements");
        assert!(
            text_of(&b, "pre").await.contains("<img src=x"),
            "shown as text"
        );
        let ran = b
            .execute("return window.__xss === undefined", vec![])
            .await
            .unwrap();
        assert_eq!(ran, json!(true), "a job's markup never runs");
        shot(&b, "job").await;

        // cancel a ready job from its page: gone from the queue, in its
        // history as cancelled from the dashboard
        click_button(&b, "Cancel").await;
        let job = client.job("reports", &ready[1]).await.unwrap().unwrap();
        let f = job.finished.expect("cancelled in Redis");
        assert_eq!(
            (f.how, f.by.as_deref()),
            (redjob::inspect::Finish::Cancelled, Some("dashboard"))
        );

        // dead letters: tick one, requeue it, it is ready again
        open(&b, &format!("{base}/queues/emails/dead")).await;
        assert_eq!(
            b.find_all(Locator::Css("input[name=id]"))
                .await
                .unwrap()
                .len(),
            5
        );
        shot(&b, "dead").await;
        let first = first_job_id(&b).await;
        b.find(Locator::Css("input[name=id]"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        click_button(&b, "Requeue selected").await;
        assert_eq!(
            client.counts("emails").await.unwrap().dead,
            4,
            "one dead letter left the dead"
        );
        let back = client
            .job("emails", &first)
            .await
            .unwrap()
            .expect("requeued");
        assert_eq!(back.state, JobState::Ready);

        // live refresh: a job sent now shows up on the open page without a reload
        open(&b, &format!("{origin}/live/queues/reports")).await;
        let before = text_of(&b, "#figures").await;
        client
            .enqueue(&BuildReport {
                account: 300,
                note: "ad hoc".into(),
            })
            .await
            .unwrap();
        let live = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let now = text_of(&b, "#figures").await;
                if now != before {
                    return now;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await
        .expect("the figures refresh within 10 s");
        let ready_now = text_of(&b, "#figures .card b").await;
        assert_eq!(ready_now, "4", "{before} -> {live}");

        // purge, confirmed: no job left in Redis, dead letters kept
        click_link(&b, "Purge…").await;
        assert!(text_of(&b, "h1").await.starts_with("Purge reports"));
        let waiting = client.counts("reports").await.unwrap();
        let label = format!(
            "Delete {} jobs",
            waiting.ready + waiting.scheduled + waiting.in_flight
        );
        click_button(&b, &label).await;
        let after = client.counts("reports").await.unwrap();
        assert_eq!(
            (after.ready, after.scheduled, after.in_flight),
            (0, 0, 0),
            "purged in Redis"
        );

        // periodic schedules and live workers
        let page = open(&b, &format!("{base}/periodic")).await;
        assert!(
            page.contains("transcode_video") && page.contains("every 3600s"),
            "{page}"
        );
        shot(&b, "periodic").await;
        let page = open(&b, &format!("{base}/workers")).await;
        assert!(
            page.contains("media") && page.contains("transcode_video"),
            "{page}"
        );
        // quieted from the page: it says who did, with a Resume
        click_button(&b, "Quiet").await;
        let start = std::time::Instant::now();
        loop {
            let page = open(&b, &format!("{base}/workers")).await;
            if page.contains("quiet by dashboard") && page.contains(">Resume</button>") {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "{page}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        shot(&b, "workers").await;
        click_button(&b, "Resume").await;
        let page = open(&b, &format!("{base}/workers")).await;
        assert!(page.contains(">Quiet</button>"), "{page}");

        // dark theme, kept across pages
        open(&b, &base).await;
        b.find(Locator::Id("theme"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        open(&b, &base).await;
        let theme = b
            .execute("return document.documentElement.dataset.theme", vec![])
            .await
            .unwrap();
        assert_eq!(theme, json!("dark"));
        shot(&b, "overview-dark").await;

        // the last 7 days by hour, and an error page inside the layout
        b.find(Locator::Id("theme"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        open(&b, &format!("{base}?range=week")).await;
        let caption = b.find(Locator::Css("figcaption")).await.unwrap();
        let caption = caption.text().await.unwrap();
        assert!(caption.starts_with("Last 7 days:"), "{caption}");
        shot(&b, "overview-week").await;
        open(&b, &format!("{base}/queues/no_such_queue")).await;
        let nav = b.find_all(Locator::Css("header nav a")).await.unwrap();
        assert_eq!(nav.len(), 5, "the error page has the navigation");
        shot(&b, "error").await;

        // a phone's width: nothing wider than the screen but the tables, which scroll
        b.set_window_size(390, 844).await.unwrap();
        for path in ["", "/workers", "/queues/emails/dead", "/queues/emails"] {
            open(&b, &format!("{base}{path}")).await;
            let fits = b
                .execute(
                    "return document.documentElement.scrollWidth <= window.innerWidth",
                    vec![],
                )
                .await
                .unwrap();
            assert_eq!(fits, json!(true), "{path} fits a phone");
        }
        shot(&b, "phone").await;
    };
    tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the browser run within 4 minutes");
    let _ = tokio::time::timeout(Duration::from_secs(10), b.close()).await;
    serving.abort();
    media.stop().await;
}

/// What the dead letters page looks like at a phone's width, as the browser
/// measures it (see the script's header).
const NARROW_CHECK: &str = include_str!("browser/narrow.js");

/// At a phone's width the dead letters' table scrolls sideways inside its
/// wrapper to every column, the long error wraps inside a cell that fits the
/// screen, no cell's content overflows it, and no word that fits its cell is
/// broken in the middle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letters_fit_a_phone() {
    if std::env::var_os("REDJOB_SKIP_BROWSER").is_some() {
        eprintln!("REDJOB_SKIP_BROWSER set: the browser test did not run");
        return;
    }
    use redjob::backend::{DeadLetterEntry, Settle};
    use redjob::queue::{QueueOptions, SendMessage};
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let b = client.backend();
    let body = json!({"type": "send_email", "args": {
        "to": "customer@example.com",
        "subject": "Your quarterly statement is ready for download",
    }});
    b.send(
        "emails",
        &[SendMessage::new(body.to_string())],
        &QueueOptions::default(),
    )
    .await
    .unwrap();
    let leased = b.fetch("emails", 1, Duration::from_secs(60)).await.unwrap();
    let error = format!(
        "550 5.1.1 The email account that you tried to reach does not exist; \
         please check the recipient address for typos https://mail.example.com/bounce?{}",
        "x".repeat(300)
    );
    let settle = Settle {
        dead: vec![DeadLetterEntry {
            id: leased.jobs[0].id,
            token: leased.jobs[0].token,
            error,
        }],
        ..Settle::default()
    };
    assert_eq!(b.settle("emails", &settle).await.unwrap().dead, 1);

    let app = axum::Router::new().nest(
        "/ops",
        redjob_web::Dashboard::new(client.clone())
            .refresh(Duration::ZERO)
            .router(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });
    let (_driver, b) = browser().await;
    let run = async {
        b.set_window_size(375, 812).await.unwrap();
        open(
            &b,
            &format!("http://localhost:{port}/ops/queues/emails/dead"),
        )
        .await;
        let width = b.execute("return window.innerWidth", vec![]).await.unwrap();
        assert_eq!(width, json!(375), "the phone's width");
        let got = b.execute(NARROW_CHECK, vec![]).await.unwrap();
        shot(&b, "dead-phone").await;
        assert_eq!(got["fits"], json!(true), "the page fits the screen: {got}");
        assert_eq!(got["scrolls"], json!(true), "the table scrolls: {got}");
        for list in ["unreachable", "overflowing", "broken"] {
            assert_eq!(got[list], json!([]), "{list}: {got}");
        }
        assert_eq!(got["error_on_screen"], json!(true), "{got}");
    };
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the browser run within 2 minutes");
    let _ = tokio::time::timeout(Duration::from_secs(10), b.close()).await;
    serving.abort();
}
