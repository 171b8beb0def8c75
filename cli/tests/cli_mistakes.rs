//! Mistakes get errors, not silent success: one exit-code scheme (0 success,
//! 1 an error, including an explicit id that matched nothing, 2 usage), errors
//! as JSON under `--json`, `drain` refusing a paused queue and saying how many
//! died, one spelling of each state, dates as people read them.

#[path = "../../tests/common/mod.rs"]
mod common;
mod run;

use std::time::Duration;

use common::RedisServer;
use redjob::Client;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::inspect::Inspect;
use redjob::ops::Admin;
use redjob::queue::{QueueOptions, SendMessage};
use run::cli;
use serde_json::Value;

/// "mail" with one dead letter (its id returned) and one ready job.
async fn setup() -> (RedisServer, Client, String) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.backend();
    let opts = QueueOptions::default();
    let body = r#"{"type":"A","args":{}}"#;
    q.send("mail", &[SendMessage::new(body)], &opts)
        .await
        .unwrap();
    let d = q.fetch("mail", 1, Duration::from_secs(60)).await.unwrap();
    let dead = d.jobs[0].id;
    let settle = Settle {
        dead: vec![DeadLetterEntry {
            id: dead,
            token: d.jobs[0].token,
            error: "down".into(),
        }],
        ..Settle::default()
    };
    q.settle("mail", &settle).await.unwrap();
    q.send("mail", &[SendMessage::new(body)], &opts)
        .await
        .unwrap();
    (server, client, dead.to_string())
}

#[tokio::test]
async fn an_id_that_is_no_dead_letter_is_an_error_naming_it() {
    let (server, client, dead) = setup().await;
    let url = server.url();
    let ready = client.peek("mail", 1).await.unwrap()[0].id.to_string();
    for verb in ["delete", "requeue"] {
        let r = cli(&url, &["dead", verb, "mail", &ready]).await;
        assert_eq!(r.code, 1, "{verb}: {} {}", r.out, r.err);
        assert!(
            r.err.contains("not dead letters of \"mail\"") && r.err.contains(&ready),
            "{}",
            r.err
        );
    }
    // the ready job is untouched
    assert_eq!(client.counts("mail").await.unwrap().ready, 1);
    // one of two matched: done, and still an error for the other
    let r = cli(&url, &["dead", "requeue", "mail", &dead, &ready]).await;
    assert_eq!(r.code, 1, "{}", r.err);
    assert!(r.err.contains("requeued 1;"), "{}", r.err);
    assert_eq!(client.counts("mail").await.unwrap().dead, 0);
    // a queue that does not exist
    let r = cli(&url, &["dead", "delete", "nope", &ready]).await;
    assert_eq!(r.code, 1);
    assert!(r.err.contains("not found"), "{}", r.err);
}

/// A dead letter whose unique key a queued job holds stays dead: the
/// requeue says so, and fails (it printed "requeued 0" and exited 0).
#[tokio::test]
async fn a_dead_letter_whose_unique_key_is_held_stays_dead_and_says_why() {
    use redjob::queue::Unique;
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.backend();
    let opts = QueueOptions::default();
    let body = r#"{"type":"A","args":{}}"#;
    let msg = || SendMessage::new(body).unique(Unique::new("k"));
    q.send("mail", &[msg()], &opts).await.unwrap();
    let d = q.fetch("mail", 1, Duration::from_secs(60)).await.unwrap();
    let dead = d.jobs[0].id;
    let settle = Settle {
        dead: vec![DeadLetterEntry {
            id: dead,
            token: d.jobs[0].token,
            error: "down".into(),
        }],
        ..Settle::default()
    };
    q.settle("mail", &settle).await.unwrap();
    // a new job of the key
    q.send("mail", &[msg()], &opts).await.unwrap();
    let r = cli(&server.url(), &["dead", "requeue", "mail", dead.as_ref()]).await;
    assert_eq!(r.code, 1, "{} {}", r.out, r.err);
    assert!(
        r.err.contains("requeued 0; 1 stayed dead") && r.err.contains("unique key"),
        "{}",
        r.err
    );
    assert_eq!(client.counts("mail").await.unwrap().dead, 1);
}

#[tokio::test]
async fn errors_are_json_under_json_and_usage_errors_exit_2() {
    let (server, _client, _) = setup().await;
    let url = server.url();
    let r = cli(&url, &["queue", "show", "nope", "--json"]).await;
    assert_eq!(r.code, 1);
    let v: Value = serde_json::from_str(r.err.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.err));
    assert_eq!(v["exit_code"], 1);
    assert!(v["error"].as_str().unwrap().contains("not found"), "{v}");
    assert!(r.out.is_empty(), "{}", r.out);
    // a usage error: 2, as JSON too
    let r = cli(&url, &["queues", "--sort", "bogus", "--json"]).await;
    assert_eq!(r.code, 2, "{}", r.err);
    let v: Value = serde_json::from_str(r.err.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.err));
    assert_eq!(v["exit_code"], 2);
    assert!(v["error"].as_str().unwrap().contains("bogus"), "{v}");
    // and plain without --json
    let r = cli(&url, &["jobs", "list", "mail", "--state", "bogus"]).await;
    assert_eq!(r.code, 2);
    assert!(r.err.starts_with("error:"), "{}", r.err);
    // the help says so
    let help = cli(&url, &["--help"]).await;
    assert_eq!(help.code, 0);
    assert!(help.out.contains("2 a usage error"), "{}", help.out);
}

#[tokio::test]
async fn drain_refuses_a_paused_queue_and_says_how_many_died() {
    let (server, client, _) = setup().await;
    let url = server.url();
    client.pause("mail").await.unwrap();
    let r = cli(&url, &["drain", "mail", "--timeout", "5s"]).await;
    assert_eq!(r.code, 1);
    assert!(r.err.contains("is paused"), "{}", r.err);
    client.resume("mail").await.unwrap();
    // a consumer dead-letters the ready job while drain watches
    let q = client.backend();
    let kill = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let d = q.fetch("mail", 1, Duration::from_secs(60)).await.unwrap();
        let settle = Settle {
            dead: vec![DeadLetterEntry {
                id: d.jobs[0].id,
                token: d.jobs[0].token,
                error: "down".into(),
            }],
            ..Settle::default()
        };
        q.settle("mail", &settle).await.unwrap();
    });
    let r = cli(&url, &["drain", "mail", "--timeout", "20s", "--json"]).await;
    kill.await.unwrap();
    assert_eq!(r.code, 1, "{} {}", r.out, r.err);
    let v: Value = serde_json::from_str(&r.out).unwrap_or_else(|e| panic!("{e}: {}", r.out));
    assert_eq!(
        (v["succeeded"].as_u64(), v["dead"].as_u64()),
        (Some(0), Some(1)),
        "{v}"
    );
    assert!(r.err.contains("dead-lettered"), "{}", r.err);
    // nothing left: with --allow-dead, 0
    let r = cli(&url, &["drain", "mail", "--allow-dead"]).await;
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(r.out.contains("0 succeeded, 0 dead-lettered"), "{}", r.out);
}

#[tokio::test]
async fn states_have_one_spelling_and_dates_are_human() {
    let (server, client, _) = setup().await;
    let url = server.url();
    client
        .backend()
        .fetch("mail", 1, Duration::from_secs(60))
        .await
        .unwrap();
    for spelling in ["in_flight", "in-flight"] {
        let r = cli(
            &url,
            &["jobs", "list", "mail", "--state", spelling, "--json"],
        )
        .await;
        assert_eq!(r.code, 0, "{spelling}: {}", r.err);
        let v: Value = serde_json::from_str(&r.out).unwrap();
        assert_eq!(v["jobs"][0]["state"], "in_flight", "{v}");
    }
    let help = cli(&url, &["jobs", "list", "--help"]).await;
    assert!(help.out.contains("in_flight"), "{}", help.out);
    let show = cli(&url, &["queue", "show", "mail"]).await;
    assert_eq!(show.code, 0, "{}", show.err);
    let created = show
        .out
        .lines()
        .find(|l| l.starts_with("created"))
        .unwrap_or_else(|| panic!("{}", show.out));
    assert!(
        created.contains(" ago") || created.contains("now"),
        "{created}"
    );
}

#[tokio::test]
async fn a_long_name_is_cut_short_in_tables_and_whole_with_wide_or_json() {
    let (server, client, _) = setup().await;
    let url = server.url();
    let long = "q".repeat(160);
    redjob::queue::Queues::create_queue(client.queues(), &long, QueueOptions::default())
        .await
        .unwrap();
    for args in [vec!["queues"], vec!["stats"]] {
        let out = cli(&url, &args).await.ok().to_string();
        assert!(!out.contains(&long), "{args:?} printed it whole: {out}");
        let cut = format!("{}…", &long[..47]);
        assert!(out.contains(&cut), "{args:?}: {out}");
        // the other columns stay on a screen's width
        let row = out.lines().find(|l| l.contains(&cut)).unwrap();
        assert!(row.chars().count() < 120, "{row}");
    }
    let wide = cli(&url, &["queues", "--wide"]).await;
    assert!(wide.ok().contains(&long), "{}", wide.out);
    let v = cli(&url, &["queues", "--json"]).await.json();
    let names: Vec<&str> = v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["queue"].as_str().unwrap())
        .collect();
    assert!(names.contains(&long.as_str()), "{names:?}");
}

#[tokio::test]
async fn an_argument_that_is_not_utf8_or_no_job_id_is_a_usage_error_in_json_too() {
    use std::os::unix::ffi::OsStrExt;
    let (server, _client, _) = setup().await;
    let url = server.url();
    // a queue name of bytes that are not UTF-8: clap's error, not a panic
    for json in [false, true] {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_redjob"));
        cmd.arg("--url")
            .arg(&url)
            .args(["queue", "show"])
            .arg(std::ffi::OsStr::from_bytes(b"\xff"));
        if json {
            cmd.arg("--json");
        }
        let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
            .await
            .unwrap()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "json {json}: {err}");
        assert!(err.contains("UTF-8"), "{err}");
        if json {
            let v: Value =
                serde_json::from_str(err.trim()).unwrap_or_else(|e| panic!("{e}: {err}"));
            assert_eq!(v["exit_code"], 2);
        }
    }
    // an id that is none, under --json: the error as JSON
    let r = cli(&url, &["jobs", "show", "notanid", "--json"]).await;
    assert_eq!(r.code, 2, "{}", r.err);
    let v: Value = serde_json::from_str(r.err.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.err));
    assert_eq!(v["exit_code"], 2);
    assert!(v["error"].as_str().unwrap().contains("notanid"), "{v}");
    // and as text without it
    let r = cli(&url, &["jobs", "show", "notanid"]).await;
    assert_eq!(r.code, 2);
    assert!(
        r.err.starts_with("error:") && r.err.contains("notanid"),
        "{}",
        r.err
    );
}

#[tokio::test]
async fn a_queue_of_part_seconds_or_a_refresh_of_no_time_is_a_usage_error() {
    let (server, client, _) = setup().await;
    let url = server.url();
    // RSMQ keeps whole seconds: refused rather than cut
    for (flag, value) in [("--vt", "500ms"), ("--delay", "1500ms")] {
        let r = cli(&url, &["queue", "create", "qq", flag, value]).await;
        assert_eq!(r.code, 2, "{flag} {value}: {}", r.err);
        assert!(r.err.contains("whole seconds"), "{}", r.err);
    }
    let queues = redjob::queue::Queues::list_queues(client.queues()).await;
    assert!(!queues.unwrap().contains(&"qq".to_string()));
    let r = cli(
        &url,
        &["queue", "create", "qq", "--vt", "2s", "--delay", "1m"],
    )
    .await;
    r.ok();
    let a = redjob::queue::Queues::attributes(client.queues(), "qq")
        .await
        .unwrap();
    assert_eq!((a.vt, a.delay), (2, 60));
    // a watch refreshing without pause would read Redis in a busy loop
    let r = cli(&url, &["stats", "--watch", "--interval", "0s", "--json"]).await;
    assert_eq!(r.code, 2, "{}", r.err);
    assert!(r.err.contains("100ms"), "{}", r.err);
}

/// A usage error under `--json` carries clap's whole message, what is missing
/// included (it kept only its first line, "the following required arguments
/// were not provided:"), without its terminal styling even when colours are
/// forced.
#[tokio::test]
async fn a_usage_error_in_json_carries_the_whole_message_without_styling() {
    let (server, _client, _) = setup().await;
    for force in ["0", "1"] {
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            tokio::process::Command::new(env!("CARGO_BIN_EXE_redjob"))
                .args(["--url", &server.url(), "jobs", "list", "mail", "--json"])
                .env("CLICOLOR_FORCE", force)
                .output(),
        )
        .await
        .unwrap()
        .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        let v: Value = serde_json::from_str(err.trim()).unwrap_or_else(|e| panic!("{e}: {err}"));
        let message = v["error"].as_str().unwrap();
        assert!(
            message.starts_with("the following required arguments were not provided:")
                && message.contains("--state <STATE>"),
            "{v}"
        );
        assert!(!message.contains('\u{1b}'), "{v}");
        assert_eq!(v["exit_code"], 2);
    }
}

/// Values out of their documented range are usage errors, refused before
/// anything is read: a priority outside -10..=10 (300 said "-128..=127",
/// -11 failed only after a warning about the worker registry), a page of
/// keys outside 1 to 1000 (0 and 100000000 were taken silently).
#[tokio::test]
async fn a_priority_or_a_page_of_keys_out_of_range_is_a_usage_error() {
    let (server, client, _) = setup().await;
    let url = server.url();
    let env = r#"{"type":"A","args":{}}"#;
    for p in ["300", "-11", "11"] {
        let r = cli(&url, &["enqueue", "mail", env, "--priority", p]).await;
        assert_eq!(r.code, 2, "{p}: {} {}", r.out, r.err);
        assert!(r.err.contains("-10..=10"), "{p}: {}", r.err);
        assert!(!r.err.contains("warning"), "{p}: {}", r.err);
    }
    assert_eq!(client.counts("mail").await.unwrap().ready, 1);
    for p in ["-10", "10"] {
        let r = cli(&url, &["enqueue", "mail", env, "--priority", p]).await;
        assert_eq!(r.code, 0, "{p}: {}", r.err);
    }
    for n in ["0", "1001", "100000000"] {
        let r = cli(&url, &["queue", "keys", "mail", "--limit", n]).await;
        assert_eq!(r.code, 2, "{n}: {} {}", r.out, r.err);
        assert!(r.err.contains("1..=1000"), "{n}: {}", r.err);
    }
    for n in ["1", "1000"] {
        cli(&url, &["queue", "keys", "mail", "--limit", n])
            .await
            .ok();
    }
}

/// Every page size is a usage error outside 1 to 1000, refused before
/// anything is read: `jobs peek|list|history -n`, `dead list -n`,
/// `topic dead -n`, `batches --limit`, `batch --dead` (0 and 100000000 were
/// taken silently); `queues|stats --limit`, which lists every queue without
/// it, takes any count from 1.
#[tokio::test]
async fn a_page_size_out_of_range_is_a_usage_error() {
    let (server, _client, _) = setup().await;
    let url = server.url();
    // a well-formed batch id (a bad one is a usage error of its own)
    let id = "0000000000abcdefghijklmnopqrstuv";
    let commands: [&[&str]; 7] = [
        &["jobs", "peek", "mail", "-n"],
        &["jobs", "list", "mail", "--state", "ready", "-n"],
        &["jobs", "history", "mail", "-n"],
        &["dead", "list", "mail", "-n"],
        &["topic", "dead", "clicks", "stats", "-n"],
        &["batches", "--limit"],
        &["batch", id, "--dead"],
    ];
    for args in commands {
        for n in ["0", "1001", "100000000"] {
            let r = cli(&url, &[args, &[n]].concat()).await;
            assert_eq!(r.code, 2, "{args:?} {n}: {} {}", r.out, r.err);
            assert!(r.err.contains("1..=1000"), "{args:?} {n}: {}", r.err);
        }
    }
    // the bounds themselves are taken (the commands that need nothing more)
    for args in commands
        .iter()
        .filter(|a| !matches!(a[0], "topic" | "batch"))
    {
        for n in ["1", "1000"] {
            let r = cli(&url, &[*args, &[n]].concat()).await;
            assert_eq!(r.code, 0, "{args:?} {n}: {}", r.err);
        }
    }
    for args in [["queues", "--limit"], ["stats", "--limit"]] {
        let r = cli(&url, &[&args[..], &["0"]].concat()).await;
        assert_eq!(r.code, 2, "{args:?} 0: {} {}", r.out, r.err);
        for n in ["1", "100000000"] {
            let r = cli(&url, &[&args[..], &[n]].concat()).await;
            assert_eq!(r.code, 0, "{args:?} {n}: {}", r.err);
        }
    }
}

/// "orders": "billing" and "audit" each took its 2 events and dead-lettered
/// them, "audit" a few ms later (a dead id is its stream's own: the two
/// would share ids within a millisecond); the dead ids of each, oldest first.
async fn topic_with_dead_letters(client: &Client) -> (Vec<String>, Vec<String>) {
    use redjob::topic::{EventOptions, EventSettle, Start, Topics};
    let b = client.backend();
    for sub in ["billing", "audit"] {
        client.subscribe("orders", sub, Start::End).await.unwrap();
    }
    let events = [("placed", "{}"), ("paid", "{}")];
    b.publish("orders", &events, &EventOptions::DEFAULT)
        .await
        .unwrap();
    let mut dead = Vec::new();
    for sub in ["billing", "audit"] {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let got = b
            .read("orders", sub, "c", 10, Duration::ZERO)
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
        b.settle_events("orders", sub, "c", &batch, None)
            .await
            .unwrap();
        let mut ids: Vec<String> = client
            .dead_events("orders", sub, 10)
            .await
            .unwrap()
            .iter()
            .map(|d| d.dead_id.to_string())
            .collect();
        ids.reverse();
        dead.push(ids);
    }
    let audit = dead.pop().unwrap();
    let billing = dead.pop().unwrap();
    assert!(
        audit.iter().all(|a| !billing.contains(a)),
        "{billing:?} {audit:?}"
    );
    (billing, audit)
}

/// Dead ids given to `topic requeue|delete-dead` that are no dead letters of
/// the subscriber (another subscriber's, none at all) are an error naming
/// them, after the others are done, as `dead requeue|delete` does: they were
/// skipped silently ("requeued 1", exit 0). A subscriber that does not exist
/// is an error.
#[tokio::test]
async fn a_dead_id_that_is_no_dead_letter_of_the_subscriber_is_an_error_naming_it() {
    let (server, client, _) = setup().await;
    let url = server.url();
    let (billing, audit) = topic_with_dead_letters(&client).await;
    let never = "1-0";
    let r = cli(
        &url,
        &[
            "topic",
            "requeue",
            "orders",
            "billing",
            &billing[0],
            &audit[0],
        ],
    )
    .await;
    assert_eq!(r.code, 1, "{} {}", r.out, r.err);
    assert!(
        r.err.contains("requeued 1;")
            && r.err
                .contains("not dead letters of subscriber \"billing\" of \"orders\"")
            && r.err.contains(&audit[0]),
        "{}",
        r.err
    );
    let left = |sub: &'static str| {
        let client = client.clone();
        async move { client.dead_events("orders", sub, 10).await.unwrap().len() }
    };
    assert_eq!((left("billing").await, left("audit").await), (1, 2));
    let r = cli(
        &url,
        &[
            "topic",
            "delete-dead",
            "orders",
            "billing",
            &audit[1],
            never,
            "--json",
        ],
    )
    .await;
    assert_eq!(r.code, 1, "{} {}", r.out, r.err);
    let v: Value = serde_json::from_str(r.err.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.err));
    let message = v["error"].as_str().unwrap();
    assert!(
        message.starts_with("deleted 0;") && message.contains(&audit[1]) && message.contains(never),
        "{message}"
    );
    assert_eq!((left("billing").await, left("audit").await), (1, 2));
    // all found: done, exit 0
    let r = cli(
        &url,
        &["topic", "delete-dead", "orders", "billing", &billing[1]],
    )
    .await;
    assert_eq!(r.ok().trim(), "deleted 1");
    // a subscriber that does not exist
    for verb in ["requeue", "delete-dead"] {
        cli(&url, &["topic", verb, "orders", "nobody", &audit[0]])
            .await
            .failed("no subscriber \"nobody\"");
    }
    assert_eq!(left("audit").await, 2);
}

/// `topic dead` of a subscriber (or topic) that does not exist exits 1, as
/// `dead list` of an unknown queue does, rather than print an empty table
/// (`[]` under --json), as if it had no dead letters.
#[tokio::test]
async fn topic_dead_of_an_unknown_subscriber_exits_1() {
    use redjob::topic::Start;
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    // the subscriber's name mistyped, then the topic's
    for args in [
        &["topic", "dead", "orders", "biling"][..],
        &["topic", "dead", "ordres", "billing"],
        &["--json", "topic", "dead", "orders", "biling"],
    ] {
        let r = cli(&url, args).await;
        assert_eq!(r.code, 1, "{args:?}: {:?} {:?}", r.out, r.err);
    }
    let r = cli(&url, &["topic", "dead", "orders", "billing"]).await;
    assert_eq!(r.code, 0, "{:?} {:?}", r.out, r.err);
}

/// "Exit codes: … 2 a usage error (a bad flag or value)": `dead requeue mail
/// notanid`, `jobs show notanid` and `--since soon` are usage errors (2). The
/// topic commands took their event ids and durations as plain strings and
/// parsed them after connecting: a bad `--id`, `--ago` or dead id was exit 1,
/// an error like a Redis failure, to a script that tells the two apart. clap
/// now parses them: a usage error (2), before anything is read.
#[tokio::test]
async fn a_bad_event_id_or_duration_to_a_topic_command_is_a_usage_error() {
    use redjob::topic::Start;
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    let url = server.url();
    // well-formed, they succeed
    let good = cli(
        &url,
        &[
            "topic", "rewind", "orders", "billing", "--ago", "1h", "--yes",
        ],
    )
    .await;
    assert_eq!(good.code, 0, "{}", good.err);
    // as a job command's bad id is
    let jobs = cli(&url, &["dead", "requeue", "mail", "notanid"]).await;
    assert_eq!(jobs.code, 2, "{}", jobs.err);
    for args in [
        &[
            "topic", "rewind", "orders", "billing", "--id", "notanid", "--yes",
        ][..],
        &[
            "topic", "rewind", "orders", "billing", "--ago", "soon", "--yes",
        ],
        &["topic", "requeue", "orders", "billing", "notanid", "--yes"],
        &[
            "topic",
            "delete-dead",
            "orders",
            "billing",
            "notanid",
            "--yes",
        ],
    ] {
        let r = cli(&url, args).await;
        assert_eq!(r.code, 2, "{args:?}: exit {}: {}", r.code, r.err);
    }
}

/// "2 a usage error (a bad flag or value, such as a job or event id that is
/// none …, refused before anything is read)": a batch id that is none is
/// such a value, as a job's or an event's is (`jobs show notanid` exits 2).
/// `batch <id>` and `batches --before <id>` took it as a plain string and
/// parsed it after connecting: exit 1, as a Redis failure or a batch not
/// found, which a script cannot tell from a typo.
#[tokio::test]
async fn a_batch_id_that_is_none_is_a_usage_error() {
    let server = RedisServer::start();
    let url = server.url();
    let jobs = cli(&url, &["jobs", "show", "notanid"]).await;
    assert_eq!(jobs.code, 2, "{}", jobs.err);
    for args in [
        &["batch", "notanid"][..],
        &["batch", "notanid", "--cancel"],
        &["batches", "--before", "notanid"],
        &["--json", "batch", "notanid"],
    ] {
        let r = cli(&url, args).await;
        assert_eq!(r.code, 2, "{args:?}: exit {}: {}", r.code, r.err);
    }
    // under --json the usage error is JSON, exit code and all
    let r = cli(&url, &["--json", "batches", "--before", "notanid"]).await;
    let v: Value = serde_json::from_str(r.err.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.err));
    assert_eq!(v["exit_code"], 2, "{v}");
    assert!(v["error"].as_str().unwrap().contains("notanid"), "{v}");
    // a well-formed id of no batch is a failure found by reading: exit 1
    let unknown = "0000000000abcdefghijklmnopqrstuv";
    for args in [&["batch", unknown][..], &["batches", "--before", unknown]] {
        let r = cli(&url, args).await;
        assert_eq!(r.code, 1, "{args:?}: exit {}: {}", r.code, r.err);
        assert!(r.err.contains("no batch"), "{args:?}: {}", r.err);
    }
}
