//! The `redjob` binary driven as a process against a private redis-server:
//! every subcommand, its `--json` output parsed back, and its error paths.

#[path = "../../tests/common/mod.rs"]
mod common;
mod run;

use std::process::Stdio;
use std::time::Duration;

use common::RedisServer;
use redjob::Client;
use redjob::backend::{Backend, DeadLetterEntry, RunBy, Settle, Throttle};
use redjob::inspect::{AttemptOutcome, Inspect};
use redjob::ops::Admin;
use redjob::queue::{QueueOptions, Queues, SendMessage};
use redjob::topic::{EventOptions, EventRun, EventSettle, Received, Start, Topics};
use run::cli;
use serde_json::{Value, json};

fn envelope(ty: &str, i: usize) -> String {
    format!(r#"{{"type":"{ty}","args":{{"i":{i}}}}}"#)
}

/// A server with queue "mail": 2 ready, 1 scheduled, 1 in flight, and 3 dead
/// letters (types A, B, A; errors "smtp timeout", "refused", "smtp timeout").
async fn setup() -> (RedisServer, Client) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.backend();
    let opts = QueueOptions::default();
    let dead = [
        ("A", "smtp timeout"),
        ("B", "refused"),
        ("A", "smtp timeout"),
    ];
    let msgs: Vec<SendMessage> = dead
        .iter()
        .enumerate()
        .map(|(i, (ty, _))| SendMessage::new(envelope(ty, i)))
        .collect();
    Backend::send(&q, "mail", &msgs, &opts).await.unwrap();
    dead_letter_due(&client, &dead.map(|d| d.1.to_string())).await;
    let msgs = [
        SendMessage::new(envelope("A", 10)),
        SendMessage::new(envelope("B", 11)),
        SendMessage::new(envelope("C", 12)),
        SendMessage::new(envelope("A", 13)).delay(Duration::from_secs(600)),
    ];
    Backend::send(&q, "mail", &msgs, &opts).await.unwrap();
    q.fetch("mail", 1, Duration::from_secs(60)).await.unwrap();
    (server, client)
}

#[tokio::test]
async fn queues_and_queue_show_count_every_state_as_a_table_and_as_json() {
    let (server, client) = setup().await;
    client
        .queues()
        .create_queue("empty", QueueOptions::default())
        .await
        .unwrap();
    let url = server.url();
    let v = cli(&url, &["queues", "--json"]).await.json();
    assert_eq!(
        (&v["skipped"], &v["skipped_names"]),
        (&json!(0), &json!([]))
    );
    let rows = v["queues"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let mail = &rows[1];
    assert_eq!(mail["queue"], "mail");
    let got: Vec<Value> = [
        "ready",
        "scheduled",
        "in_flight",
        "dead",
        "failed",
        "paused",
    ]
    .iter()
    .map(|k| mail[*k].clone())
    .collect();
    let want: Vec<Value> = vec![
        2.into(),
        1.into(),
        1.into(),
        3.into(),
        3.into(),
        false.into(),
    ];
    assert_eq!(got, want);
    // how long its oldest ready job has waited; none ready, none
    assert!(mail["latency_ms"].as_u64().is_some(), "{mail}");
    assert_eq!(rows[0]["latency_ms"], Value::Null);

    let table = cli(&url, &["queues"]).await;
    let lines: Vec<&str> = table.ok().lines().collect();
    assert!(
        lines[0].starts_with("QUEUE") && lines[0].contains("IN FLIGHT"),
        "{lines:?}"
    );
    assert!(lines[0].contains("LATENCY"), "{lines:?}");
    let cells: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(cells[..5], ["mail", "2", "1", "1", "3"]);
    assert!(
        cells[5].ends_with("ms") || cells[5].ends_with('s'),
        "{cells:?}"
    );
    assert_eq!(cells[6..], ["0", "3", "no"]);
    let empty: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(empty[5], "-");
    // filtered, sorted, cut
    let v = cli(&url, &["queues", "--filter", "mai", "--json"])
        .await
        .json();
    assert_eq!(
        (v["matched"].as_u64(), v["queues"][0]["queue"].as_str()),
        (Some(1), Some("mail"))
    );
    let v = cli(
        &url,
        &[
            "queues", "--sort", "ready", "--desc", "--limit", "1", "--json",
        ],
    )
    .await
    .json();
    assert_eq!(v["queues"].as_array().unwrap().len(), 1);
    assert_eq!(
        (v["queues"][0]["queue"].as_str(), v["matched"].as_u64()),
        (Some("mail"), Some(2))
    );
    let table = cli(&url, &["queues", "--sort", "dead", "--limit", "1"]).await;
    assert!(table.ok().contains("1 of 2 queues"), "{}", table.ok());
    // a usage error (clap's code)
    let bad = cli(&url, &["queues", "--sort", "bogus"]).await;
    assert_eq!(bad.code, 2, "{}", bad.err);
    assert!(bad.err.contains("use one of name, ready"), "{}", bad.err);

    let v = cli(&url, &["queue", "show", "mail", "--json"]).await.json();
    assert_eq!(
        (v["ready"].as_u64(), v["settings"]["vt_s"].as_u64()),
        (Some(2), Some(30))
    );
    cli(&url, &["queue", "show", "nope"])
        .await
        .failed(r#"queue "nope" not found"#);
    // stats without --watch is the same table (the wait grows meanwhile)
    let without_wait = |mut v: Value| {
        for q in v["queues"].as_array_mut().unwrap() {
            q.as_object_mut().unwrap().remove("latency_ms");
        }
        v
    };
    assert_eq!(
        without_wait(cli(&url, &["stats", "--json"]).await.json()),
        without_wait(cli(&url, &["queues", "--json"]).await.json())
    );
}

#[tokio::test]
async fn pause_resume_purge_and_delete_a_queue_destructive_ones_asking_first() {
    let (server, client) = setup().await;
    let url = server.url();
    let v = cli(&url, &["queue", "pause", "mail", "--json"])
        .await
        .json();
    assert_eq!(v["paused"], true);
    assert!(client.is_paused("mail").await.unwrap());
    assert_eq!(
        cli(&url, &["queues", "--json"]).await.json()["queues"][0]["paused"],
        true
    );
    assert_eq!(
        cli(&url, &["queue", "resume", "mail"]).await.ok().trim(),
        "resumed"
    );
    assert!(!client.is_paused("mail").await.unwrap());

    // no terminal to ask on: refused without --yes, nothing deleted
    cli(&url, &["queue", "purge", "mail"])
        .await
        .failed("refused without --yes");
    assert_eq!(client.counts("mail").await.unwrap().ready, 2);
    let v = cli(&url, &["queue", "purge", "mail", "--yes", "--json"])
        .await
        .json();
    assert_eq!(v["deleted"], 4);
    let c = client.counts("mail").await.unwrap();
    assert_eq!((c.ready + c.scheduled + c.in_flight, c.dead), (0, 3));

    // a handler's throttle, ended by an operator
    assert_eq!(
        cli(&url, &["queue", "unthrottle", "mail"])
            .await
            .ok()
            .trim(),
        "not throttled"
    );
    let q = client.backend();
    let opts = QueueOptions::default();
    Backend::send(&q, "mail", &[SendMessage::new(envelope("A", 20))], &opts)
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
    let show = cli(&url, &["queue", "show", "mail"]).await.ok().to_string();
    assert!(show.contains("throttled until"), "{show}");
    let v = cli(&url, &["queue", "unthrottle", "mail", "--json"])
        .await
        .json();
    assert_eq!(v["ended"], true);
    assert_eq!(
        client.limit_usage("mail").await.unwrap().throttled_until_ms,
        None
    );

    cli(&url, &["queue", "delete", "mail"])
        .await
        .failed("refused without --yes");
    cli(&url, &["queue", "delete", "mail", "--yes"]).await.ok();
    assert!(client.queues().list_queues().await.unwrap().is_empty());
    cli(&url, &["queue", "pause", "mail"])
        .await
        .failed("not found");
}

#[tokio::test]
async fn queue_settings_show_the_values_in_force_and_change_them_for_every_worker() {
    let (server, client) = setup().await;
    let url = server.url();
    let v = cli(&url, &["queue", "settings", "mail", "--json"])
        .await
        .json();
    assert_eq!(v["queue"], "mail");
    assert_eq!(
        v["dead_letters"],
        json!({"max_count": 10000, "max_age_ms": 30u64 * 86_400_000, "stored": false, "set_by": null})
    );
    assert_eq!(
        v["concurrency"],
        json!({"per_worker": null, "global": null, "stored": false, "set_by": null})
    );
    assert_eq!(
        v["rate_limit"],
        json!({"max": null, "period_ms": null, "stored": false, "set_by": null})
    );
    let text = cli(&url, &["queue", "settings", "mail"])
        .await
        .ok()
        .to_string();
    assert!(text.contains("10000") && text.contains("30d"), "{text}");
    assert!(text.contains("default"), "{text}");

    // one limit changed, the other kept as it was in force
    let v = cli(
        &url,
        &[
            "queue",
            "settings",
            "mail",
            "--dead-max-count",
            "2",
            "--json",
        ],
    )
    .await
    .json();
    let dead = &v["dead_letters"];
    assert_eq!(
        (&dead["max_count"], &dead["max_age_ms"], &dead["stored"]),
        (&json!(2), &json!(30u64 * 86_400_000), &json!(true))
    );
    assert_eq!(dead["set_by"]["by"], "cli", "the CLI's actor");
    let stored = client.settings("mail").await.unwrap().dead_letters.unwrap();
    assert_eq!(
        (stored.max_count, stored.max_age),
        (Some(2), Some(Duration::from_secs(30 * 86_400)))
    );
    // in force at the next dead letter, whatever the settling worker asks
    dead_letter_due(&client, &["again".to_string()]).await;
    assert_eq!(client.counts("mail").await.unwrap().dead, 2);

    let v = cli(
        &url,
        &[
            "queue",
            "settings",
            "mail",
            "--dead-max-age",
            "none",
            "--json",
        ],
    )
    .await
    .json();
    let dead = &v["dead_letters"];
    assert_eq!(
        (&dead["max_count"], &dead["max_age_ms"], &dead["stored"]),
        (&json!(2), &json!(null), &json!(true))
    );
    let by = dead["set_by"]["by"].as_str().unwrap();
    assert!(by.starts_with("cli"), "{v}");
    assert!(dead["set_by"]["at_ms"].as_u64().unwrap() > 1_700_000_000_000);
    let show = cli(&url, &["queue", "show", "mail"]).await.ok().to_string();
    assert!(
        show.lines().any(|l| l.starts_with("dead letters: at most")
            && l.contains(" 2 ")
            && l.contains(&format!("set by {by} "))),
        "{show}"
    );

    // the concurrency per worker: set, shown with who set it, lifted
    let v = cli(
        &url,
        &["queue", "settings", "mail", "--concurrency", "2", "--json"],
    )
    .await
    .json();
    assert_eq!(v["concurrency"]["per_worker"], 2);
    assert_eq!(v["concurrency"]["stored"], true);
    assert_eq!(v["concurrency"]["set_by"]["by"], by);
    assert_eq!(
        client
            .settings("mail")
            .await
            .unwrap()
            .in_force()
            .concurrency
            .per_worker,
        Some(2)
    );
    let show = cli(&url, &["queue", "settings", "mail"])
        .await
        .ok()
        .to_string();
    assert!(
        show.lines().any(|l| l.starts_with("concurrency per worker")
            && l.contains(" 2 ")
            && l.contains(&format!("set by {by} "))),
        "{show}"
    );
    let v = cli(
        &url,
        &[
            "queue",
            "settings",
            "mail",
            "--concurrency",
            "none",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(
        (&v["concurrency"]["per_worker"], &v["concurrency"]["stored"]),
        (&json!(null), &json!(true))
    );
    // the limits across the fleet: the global concurrency keeps the per
    // worker one; the rate limit as starts per period
    let v = cli(
        &url,
        &[
            "queue",
            "settings",
            "mail",
            "--concurrency",
            "3",
            "--global-concurrency",
            "7",
            "--rate-limit",
            "50/1m",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(v["concurrency"]["per_worker"], 3);
    assert_eq!(v["concurrency"]["global"], 7);
    assert_eq!(v["rate_limit"]["max"], 50);
    assert_eq!(v["rate_limit"]["period_ms"], 60_000);
    assert_eq!(v["rate_limit"]["set_by"]["by"], by);
    // the setup leased one job (before the rate limit: no start counted)
    assert_eq!(
        v["usage"],
        json!({"in_flight": 1, "started_in_window": 0, "held_until_ms": null, "throttled_until_ms": null})
    );
    let v = cli(
        &url,
        &[
            "queue",
            "settings",
            "mail",
            "--global-concurrency",
            "none",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(
        (&v["concurrency"]["per_worker"], &v["concurrency"]["global"]),
        (&json!(3), &json!(null))
    );
    let show = cli(&url, &["queue", "settings", "mail"])
        .await
        .ok()
        .to_string();
    assert!(
        show.lines()
            .any(|l| l.starts_with("rate limit") && l.contains(" 50/1m ")),
        "{show}"
    );
    assert!(
        show.lines()
            .any(|l| l.starts_with("in use, rate") && l.contains("0 of 50 started in the last 1m")),
        "{show}"
    );
    let v = cli(
        &url,
        &[
            "queue",
            "settings",
            "mail",
            "--rate-limit",
            "none",
            "--concurrency",
            "none",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(
        (&v["rate_limit"]["max"], &v["rate_limit"]["stored"]),
        (&json!(null), &json!(true))
    );
    let v = cli(&url, &["queue", "show", "mail", "--json"]).await.json();
    assert_eq!(v["settings"]["dead_letters"]["max_count"], 2);
    assert_eq!(v["settings"]["vt_s"], 30);

    // bad input: a clear error, nothing stored
    // (a bad value is the argument parser's usage error, code 2)
    for (args, says) in [
        (["--dead-max-count", "0"], "give a count from 1, or none"),
        (["--dead-max-age", "5"], "add a unit"),
        (
            ["--concurrency", "0"],
            "give a count from 1 to 1000000, or none",
        ),
        (
            ["--rate-limit", "50"],
            "give starts per period (50/1s, 100/1m), or none",
        ),
        (["--rate-limit", "5/2d"], "give a period from 1ms to 24h"),
        (
            ["--global-concurrency", "0"],
            "give a count from 1 to 1000000, or none",
        ),
    ] {
        let r = cli(
            &url,
            &[&["queue", "settings", "mail"][..], &args[..]].concat(),
        )
        .await;
        assert!(r.code == 2 && r.err.contains(says), "{}", r.err);
    }
    cli(
        &url,
        &["queue", "settings", "nope", "--dead-max-count", "3"],
    )
    .await
    .failed(r#"queue "nope" not found"#);
    assert_eq!(
        client
            .settings("mail")
            .await
            .unwrap()
            .dead_letters
            .unwrap()
            .max_count,
        Some(2)
    );
}

/// `queue settings --history-…` or `--dead-…` changes the fields given and
/// keeps the others as stored when its change lands: another operator's
/// change of another field of the same setting, stored after the CLI sent
/// its own (a proxy holds the CLI's call until then), stays. The CLI read
/// the retention in force and wrote it back whole, putting back the field
/// it had read.
#[tokio::test]
async fn queue_settings_keep_a_field_another_operator_changed_before_the_change_landed() {
    use redjob::ops::{History, QueueSettings, Retention};
    let (server, client) = setup().await;
    let bob = client.clone().acting_as("cli bob");
    let week = Some(Duration::from_secs(7 * 86_400));
    let day = Some(Duration::from_secs(86_400));
    let changes: [(&[&str], QueueSettings); 2] = [
        (
            &["--history-max-count", "5000"],
            QueueSettings::history(History {
                max_age: week,
                ..History::default()
            }),
        ),
        (
            &["--dead-max-count", "250"],
            QueueSettings::dead_letters(Retention {
                max_age: day,
                ..Retention::default()
            }),
        ),
    ];
    for (args, other) in changes {
        // the proxy holds the CLI's change (settings.lua's "set")
        let proxy = common::HoldingProxy::start(server.port, b"$3\r\nset\r\n").await;
        let url = proxy.url();
        let args: Vec<String> = [&["queue", "settings", "mail", "--json"][..], args]
            .concat()
            .into_iter()
            .map(String::from)
            .collect();
        let run = tokio::spawn(async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli(&url, &args).await
        });
        proxy.held().await;
        bob.set_settings("mail", &other).await.unwrap();
        proxy.release();
        run.await.unwrap().json();
    }
    let s = client.settings("mail").await.unwrap();
    let (h, d) = (s.history.unwrap(), s.dead_letters.unwrap());
    assert_eq!(
        ((h.max_count, h.max_age), (d.max_count, d.max_age)),
        ((Some(5000), week), (Some(250), day)),
        "bob's ages were put back by the CLI's whole write"
    );
    assert_eq!(s.set_by.history.unwrap().by, "cli", "the last change's");
}

/// `queue settings` given several settings changes them in one step, one
/// operator action: one `settings` event in the queue's history (an
/// operation records its one event), one notice to the workers, and none
/// stored alone should a later one fail. It stored each setting in a call
/// of its own, four events for one command.
#[tokio::test]
async fn queue_settings_changes_several_settings_as_one_action() {
    let (server, client) = setup().await;
    let url = server.url();
    let v = cli(
        &url,
        &[
            "queue",
            "settings",
            "mail",
            "--dead-max-count",
            "5",
            "--history-max-count",
            "7",
            "--concurrency",
            "3",
            "--rate-limit",
            "5/1s",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(
        (
            &v["dead_letters"]["max_count"],
            &v["history"]["max_count"],
            &v["concurrency"]["per_worker"],
            &v["rate_limit"]["max"]
        ),
        (&json!(5), &json!(7), &json!(3), &json!(5))
    );
    let events = client.history_events("mail").await.unwrap();
    let settings: Vec<_> = events.iter().filter(|e| e.what == "settings").collect();
    assert_eq!(settings.len(), 1, "{events:?}");
}

/// `queue settings` refuses an age or a count past its bound, naming the
/// flag and the bound: `--history-max-age 99999999999d` stored 2^52 ms
/// without a word. `--reset` removes a stored setting in one action (one
/// event), the default then shown; a reset beside a value of the same
/// setting is refused.
#[tokio::test]
async fn queue_settings_refuse_values_past_their_bounds_and_reset_a_setting() {
    let (server, client) = setup().await;
    let url = server.url();
    for (flag, v, says) in [
        ("--history-max-age", "99999999999d", "at most 18250d"),
        ("--dead-max-age", "18251d", "at most 18250d"),
        ("--history-args-max-age", "99999999999d", "at most 18250d"),
        ("--history-max-count", "99999999999", "at most 1000000000"),
        ("--dead-max-count", "1000000001", "at most 1000000000"),
    ] {
        let r = cli(&url, &["queue", "settings", "mail", flag, v]).await;
        assert_ne!(r.code, 0, "{flag} {v} was taken: {}", r.out);
        assert!(
            r.err.contains(flag) && r.err.contains(says),
            "{flag} {v}: {}",
            r.err
        );
    }
    let stored = client.settings("mail").await.unwrap();
    assert!(stored.is_empty(), "nothing stored: {stored:?}");

    cli(
        &url,
        &[
            "queue",
            "settings",
            "mail",
            "--history-max-count",
            "5",
            "--rate-limit",
            "5/1s",
            "--concurrency",
            "2",
        ],
    )
    .await
    .ok();
    let v = cli(
        &url,
        &[
            "queue",
            "settings",
            "mail",
            "--reset",
            "history",
            "--reset",
            "rate-limit",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(
        (
            &v["history"]["stored"],
            &v["history"]["max_count"],
            &v["rate_limit"]["stored"],
            &v["concurrency"]["per_worker"]
        ),
        (&json!(false), &json!(1000), &json!(false), &json!(2))
    );
    let events = client.history_events("mail").await.unwrap();
    let settings = events.iter().filter(|e| e.what == "settings").count();
    assert_eq!(settings, 2, "a change and a reset: {events:?}");
    let text = cli(&url, &["queue", "settings", "mail"]).await;
    assert!(
        text.ok().contains("rate limit")
            && text
                .out
                .lines()
                .any(|l| l.starts_with("rate limit") && l.ends_with("default")),
        "{}",
        text.out
    );
    cli(
        &url,
        &[
            "queue",
            "settings",
            "mail",
            "--reset",
            "concurrency",
            "--concurrency",
            "3",
        ],
    )
    .await
    .failed("--reset concurrency and a value of it");
    let r = cli(&url, &["queue", "settings", "mail", "--reset", "speed"]).await;
    assert!(
        r.code == 2
            && r.err
                .contains("give dead-letters, history, concurrency or rate-limit"),
        "{}",
        r.err
    );
    let c = client.settings("mail").await.unwrap().concurrency;
    assert_eq!(
        c,
        Some(redjob::ops::Concurrency::per_worker(2)),
        "left as stored"
    );
}

#[tokio::test]
async fn jobs_peek_show_list_by_page_cancel_and_run_now() {
    let (server, client) = setup().await;
    let url = server.url();
    let peek = cli(&url, &["jobs", "peek", "mail", "-n", "5", "--json"])
        .await
        .json();
    let jobs = peek["jobs"].as_array().unwrap();
    let order: Vec<_> = jobs
        .iter()
        .map(|j| {
            (
                j["state"].as_str().unwrap(),
                j["args"]["i"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(order, [("ready", 11), ("ready", 12), ("scheduled", 13)]);

    let id = jobs[0]["id"].as_str().unwrap().to_string();
    let v = cli(&url, &["jobs", "show", "mail", &id, "--json"])
        .await
        .json();
    assert_eq!(
        (v["type"].as_str(), v["attempts"].as_u64()),
        (Some("B"), Some(0))
    );
    let text = cli(&url, &["jobs", "show", "mail", &id]).await;
    assert!(text.ok().contains("\"i\": 11"), "{}", text.out);
    // without its queue: every queue is asked, and the one that holds it named
    client
        .queues()
        .create_queue("other", QueueOptions::default())
        .await
        .unwrap();
    let v = cli(&url, &["jobs", "show", &id, "--json"]).await.json();
    assert_eq!(
        (v["queue"].as_str(), v["args"]["i"].as_u64()),
        (Some("mail"), Some(11))
    );
    let text = cli(&url, &["jobs", "show", &id]).await;
    assert!(
        text.ok()
            .lines()
            .any(|l| l.starts_with("queue") && l.ends_with("mail")),
        "{}",
        text.out
    );

    // two pages of one, the cursor handed over from the JSON
    let first = cli(
        &url,
        &[
            "jobs", "list", "mail", "--state", "ready", "-n", "1", "--json",
        ],
    )
    .await
    .json();
    let after = first["next"].as_str().unwrap().to_string();
    let second = cli(
        &url,
        &[
            "jobs", "list", "mail", "--state", "ready", "-n", "1", "--after", &after, "--json",
        ],
    )
    .await
    .json();
    assert_eq!(second["jobs"][0]["args"]["i"], 12);
    let flight = cli(&url, &["jobs", "list", "mail", "--state", "in-flight"]).await;
    assert!(flight.ok().contains("in_flight"), "{}", flight.out);
    let table = cli(
        &url,
        &["jobs", "list", "mail", "--state", "ready", "-n", "1"],
    )
    .await;
    assert!(table.ok().contains("--after"), "{}", table.out);

    let v = cli(&url, &["jobs", "cancel", "mail", &id, "--json"])
        .await
        .json();
    assert_eq!(v["cancelled"], "removed");
    cli(&url, &["jobs", "cancel", "mail", &id])
        .await
        .failed("no job");
    // in the history now, as cancelled from the CLI
    let v = cli(&url, &["jobs", "show", "mail", &id, "--json"])
        .await
        .json();
    assert_eq!(
        (v["state"].as_str(), v["finished"]["how"].as_str()),
        (Some("finished"), Some("cancelled"))
    );
    assert!(v["finished"]["by"].as_str().unwrap().starts_with("cli"));
    let gone = "0000000000abcdefghijklmnopqrstuv";
    cli(&url, &["jobs", "show", "mail", gone])
        .await
        .failed("no job");
    cli(&url, &["jobs", "show", gone])
        .await
        .failed("in any queue");
    assert_eq!(client.counts("mail").await.unwrap().ready, 1);
    let bad = cli(&url, &["jobs", "show", "mail", "not-an-id"]).await;
    assert_eq!(bad.code, 2, "a usage error: {}", bad.err);
    let bad = cli(&url, &["jobs", "show", "mail"]).await;
    assert!(
        bad.code == 2 && bad.err.contains("jobs show <queue> <id>"),
        "{}",
        bad.err
    );

    // the delayed job, run now
    let later = cli(
        &url,
        &["jobs", "list", "mail", "--state", "scheduled", "--json"],
    )
    .await
    .json();
    let later = later["jobs"][0]["id"].as_str().unwrap().to_string();
    let v = cli(&url, &["jobs", "run-now", "mail", &later, "--json"])
        .await
        .json();
    assert_eq!(v["state"], "due now");
    assert_eq!(client.counts("mail").await.unwrap().scheduled, 0);
    let again = cli(&url, &["jobs", "run-now", "mail", &later]).await;
    assert!(again.ok().contains("due already"), "{}", again.out);
    cli(&url, &["jobs", "run-now", "mail", &id])
        .await
        .failed("no job");
}

#[tokio::test]
async fn dead_letters_list_filter_show_requeue_delete_and_purge() {
    let (server, client) = setup().await;
    let url = server.url();
    let all = cli(&url, &["dead", "list", "mail", "--json"]).await.json();
    let ids: Vec<String> = all["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().into())
        .collect();
    assert_eq!(ids.len(), 3);
    let newest = cli(&url, &["dead", "list", "mail", "--newest", "--json"])
        .await
        .json();
    assert_eq!(newest["jobs"][0]["id"].as_str(), Some(ids[2].as_str()));
    let a = cli(
        &url,
        &[
            "dead", "list", "mail", "--type", "A", "--error", "timeout", "--json",
        ],
    )
    .await
    .json();
    assert_eq!(a["jobs"].as_array().unwrap().len(), 2);
    let v = cli(&url, &["dead", "show", "mail", &ids[1], "--json"])
        .await
        .json();
    assert_eq!(
        (v["state"].as_str(), v["last_error"].as_str()),
        (Some("dead"), Some("refused"))
    );
    cli(
        &url,
        &["dead", "show", "mail", "0000000000abcdefghijklmnopqrstuv"],
    )
    .await
    .failed("no dead letter");

    // by id
    let v = cli(&url, &["dead", "requeue", "mail", &ids[1], "--json"])
        .await
        .json();
    assert_eq!(v["requeued"], 1);
    // in bulk: asks first, filters need --all
    cli(&url, &["dead", "requeue", "mail"])
        .await
        .failed("give ids, or --all");
    cli(&url, &["dead", "requeue", "mail", "--type", "A"])
        .await
        .failed("with --all");
    cli(&url, &["dead", "requeue", "mail", "--all", "--type", "A"])
        .await
        .failed("refused without --yes");
    let v = cli(
        &url,
        &[
            "dead", "requeue", "mail", "--all", "--type", "A", "--rate", "1", "--yes", "--json",
        ],
    )
    .await
    .json();
    assert_eq!(v["requeued"], 2);
    let c = client.counts("mail").await.unwrap();
    // 2 ready + 1 requeued at once + 1 of the 2 at 1/s; scheduled: 1 + the other
    assert_eq!((c.ready, c.scheduled, c.dead), (4, 2, 0));

    dead_letter_due(&client, &["x0".into(), "x1".into(), "x2".into()]).await;
    let v = cli(
        &url,
        &[
            "dead", "delete", "mail", "--all", "--error", "x1", "--yes", "--json",
        ],
    )
    .await
    .json();
    assert_eq!(v["deleted"], 1);
    cli(&url, &["dead", "purge", "mail"])
        .await
        .failed("refused without --yes");
    let v = cli(&url, &["dead", "purge", "mail", "--yes", "--json"])
        .await
        .json();
    assert_eq!(v["deleted"], 2);
    assert_eq!(client.counts("mail").await.unwrap().dead, 0);
    cli(&url, &["dead", "list", "nope"])
        .await
        .failed("not found");
}

/// Leases as many due jobs of "mail" as there are `errors` and dead-letters
/// each with its error, in order.
async fn dead_letter_due(client: &Client, errors: &[String]) {
    let q = client.backend();
    let n = errors.len();
    let leased = q.fetch("mail", n, Duration::from_secs(60)).await.unwrap();
    let settle = Settle {
        dead: leased
            .jobs
            .iter()
            .zip(errors)
            .map(|(d, error)| DeadLetterEntry {
                id: d.id,
                token: d.token,
                error: error.clone(),
            })
            .collect(),
        ..Settle::default()
    };
    assert_eq!(q.settle("mail", &settle).await.unwrap().dead, n as u64);
}

#[tokio::test]
async fn enqueue_takes_a_valid_envelope_into_an_existing_queue_only() {
    let (server, client) = setup().await;
    let url = server.url();
    let body = r#"{"type":"Welcome","args":{"user":7}}"#;
    let v = cli(
        &url,
        &[
            "enqueue",
            "mail",
            body,
            "--priority",
            "-2",
            "--delay",
            "5m",
            "--json",
        ],
    )
    .await
    .json();
    let id = v["id"].as_str().unwrap().parse().unwrap();
    let job = client.job("mail", &id).await.unwrap().unwrap();
    assert_eq!(
        (job.priority, job.job_name().as_deref()),
        (-2, Some("Welcome"))
    );
    assert_eq!(job.body, body.as_bytes());
    cli(&url, &["enqueue", "mail", "{not json"])
        .await
        .failed("not a job envelope");
    cli(&url, &["enqueue", "mail", r#"{"args":{}}"#])
        .await
        .failed(r#"needs "type""#);
    cli(&url, &["enqueue", "mail", r#"{"type":"A"}"#])
        .await
        .failed(r#"needs "args""#);
    cli(&url, &["enqueue", "nope", body])
        .await
        .failed("not found");
    // out of range: a usage error (cli_mistakes has the details)
    let r = cli(&url, &["enqueue", "mail", body, "--priority", "11"]).await;
    assert_eq!(r.code, 2, "{}", r.err);
    assert!(r.err.contains("priority"), "{}", r.err);
    let bad = cli(&url, &["enqueue", "mail", body, "--delay", "5 parsecs"]).await;
    assert_eq!(bad.code, 2, "{}", bad.err);
}

#[tokio::test]
async fn drain_waits_for_an_empty_queue_and_gives_up_at_its_timeout() {
    let (server, client) = setup().await;
    let url = server.url();
    cli(&url, &["drain", "mail", "--timeout", "500ms"])
        .await
        .failed("jobs left");
    client.purge_queue("mail").await.unwrap();
    let opts = QueueOptions::default();
    let msgs: Vec<SendMessage> = (0..40)
        .map(|i| SendMessage::new(envelope("A", i)))
        .collect();
    Backend::send(&client.backend(), "mail", &msgs, &opts)
        .await
        .unwrap();
    // a consumer takes one job every 25 ms while drain watches
    let consumer = client.clone();
    let eat = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        while consumer.queues().pop("mail").await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    });
    let v = cli(&url, &["drain", "mail", "--timeout", "20s", "--json"])
        .await
        .json();
    // all 40 unless the CLI started after the consumer took some
    let drained = v["drained"].as_u64().unwrap();
    assert!((1..=40).contains(&drained), "{v}");
    eat.await.unwrap();
    assert_eq!(client.counts("mail").await.unwrap().ready, 0);
}

#[tokio::test]
async fn unreachable_redis_and_bad_arguments_fail_clearly() {
    let port = RedisServer::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let r = cli(&url, &["queues"]).await;
    assert_eq!(r.code, 1);
    assert!(
        r.err.starts_with("error:") && r.err.contains(&port.to_string()),
        "{}",
        r.err
    );
    let server = RedisServer::start();
    let r = cli(&server.url(), &["frobnicate"]).await;
    assert_eq!(r.code, 2, "{}", r.err);
    let help = cli(&server.url(), &["dead", "requeue", "--help"]).await;
    assert!(help.ok().contains("--rate"), "{}", help.out);
}

#[tokio::test]
async fn stats_watch_prints_a_line_a_refresh_with_rates() {
    let (server, _client) = setup().await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redjob"))
        .args([
            "--url",
            &server.url(),
            "stats",
            "--watch",
            "--interval",
            "100ms",
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut got = Vec::new();
    for _ in 0..2 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        got.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    child.kill().await.unwrap();
    assert_eq!(got[0]["queues"][0]["processed_per_s"], "-");
    assert_eq!(got[1]["queues"][0]["processed_per_s"], "0.0");
    assert_eq!(got[1]["queues"][0]["dead"], 3);
    assert_eq!(got[1]["skipped"], 0);
}

/// Runs until its worker's data `Notify` is notified.
#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "cli_busy", queue = "cli_busy")]
struct CliBusy;

impl redjob::Job for CliBusy {
    async fn perform(&self, ctx: &redjob::JobContext) -> Result<(), redjob::JobError> {
        ctx.data::<std::sync::Arc<tokio::sync::Notify>>()?
            .notified()
            .await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_and_periodic_list_live_workers_their_jobs_and_schedules() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let worker = redjob::Worker::builder(client.backend())
        .register::<CliBusy>()
        .concurrency(4)
        .lease(Duration::from_secs(3))
        .periodic(
            redjob::ops::Schedule::every(Duration::from_secs(1)).unwrap(),
            CliBusy,
        )
        .data(release.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let id = worker.id().to_string();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());

    // a tick enqueued, its job running, and a beat since: all listed
    let mut listed = Value::Null;
    for _ in 0..100 {
        listed = cli(&url, &["workers", "--json"]).await.json();
        if listed[0]["running"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let w = &listed[0];
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(w["id"], id.as_str());
    assert_eq!(w["pid"], std::process::id());
    assert_eq!(w["queues"], json!(["cli_busy"]));
    assert_eq!(w["concurrency"], 4);
    assert_eq!(w["running"][0]["queue"], "cli_busy");
    assert_eq!(w["running"][0]["job"], "cli_busy");
    assert_eq!(w["schedules"][0]["schedule"], "every 1s");
    let table = cli(&url, &["workers"]).await;
    let out = table.ok();
    assert!(out.starts_with("ID"), "{out}");
    assert!(out.contains(&id) && out.contains("cli_busy"), "{out}");
    assert!(
        out.contains("JOB ID")
            && out.contains(&format!("{}/4", w["running"].as_array().unwrap().len())),
        "{out}"
    );

    let periodic = cli(&url, &["periodic", "--json"]).await.json();
    let s = &periodic[0];
    assert_eq!(periodic.as_array().unwrap().len(), 1, "{periodic}");
    assert_eq!(
        (
            &s["name"],
            &s["queue"],
            &s["job"],
            &s["schedule"],
            &s["workers"]
        ),
        (
            &Value::from("cli_busy"),
            &Value::from("cli_busy"),
            &Value::from("cli_busy"),
            &Value::from("every 1s"),
            &Value::from(1)
        )
    );
    let (last, next) = (
        s["last_ms"].as_u64().unwrap(),
        s["next_ms"].as_u64().unwrap(),
    );
    assert_eq!(next, last + 1000, "{s}");
    let out = cli(&url, &["periodic"]).await;
    assert!(
        out.ok().contains("every 1s") && out.ok().contains("NEXT"),
        "{}",
        out.ok()
    );

    stop.cancel();
    for _ in 0..200 {
        release.notify_waiters();
        if task.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.await.unwrap().unwrap();
    assert_eq!(cli(&url, &["workers", "--json"]).await.json(), json!([]));
    assert_eq!(cli(&url, &["periodic", "--json"]).await.json(), json!([]));
    let out = cli(&url, &["workers"]).await;
    assert_eq!(out.ok().lines().count(), 1, "only the header: {}", out.ok());
}

/// One HTTP/1.1 GET of `path` on `addr`: the status line and the whole answer.
async fn http_get(addr: &str, path: &str) -> String {
    http_get_as(addr, addr, path).await
}

/// The same, naming `host` in the `Host` header.
async fn http_get_as(addr: &str, host: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
        .await
        .expect("answered within 10 s")
        .unwrap();
    out
}

#[tokio::test]
async fn web_serves_the_dashboard_until_interrupted() {
    use tokio::io::AsyncBufReadExt;
    let (server, _client) = setup().await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redjob"))
        .args([
            "--url",
            &server.url(),
            "web",
            "--bind",
            "127.0.0.1:0",
            "--read-only",
        ])
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("it says where it listens")
        .unwrap()
        .unwrap();
    assert!(first.contains("(read-only)"), "{first}");
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    let page = http_get(&addr, "/").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(
        page.contains(r#"href="/queues/mail""#) && page.contains("read-only"),
        "{page}"
    );
    let dead = http_get(&addr, "/queues/mail/dead").await;
    assert!(
        dead.starts_with("HTTP/1.1 200") && dead.contains("smtp timeout"),
        "{dead}"
    );
    // a name it was not given (DNS rebinding) gets nothing
    let rebound = http_get_as(&addr, "evil.example:8080", "/").await;
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");
    let local = http_get_as(&addr, "localhost", "/").await;
    assert!(local.starts_with("HTTP/1.1 200"), "{local}");

    let pid = child.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("it stops on Ctrl-C")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// `redjob --json args...`, parsed.
async fn topic_json(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    cli(url, &all).await.json()
}

#[tokio::test]
async fn topic_show_rewind_and_dead_letters_as_tables_and_json() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let b = client.backend();
    client
        .subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    let opts = EventOptions::DEFAULT;
    let ids = b
        .publish(
            "orders",
            &[
                ("placed", "{\"n\":1}"),
                ("placed", "{\"n\":2}"),
                ("placed", "{\"n\":3}"),
            ],
            &opts,
        )
        .await
        .unwrap();
    // billing takes all three, acknowledges one and gives one up
    let got = b
        .read("orders", "billing", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 3);
    let first: Received = got[0].clone();
    let batch = EventSettle {
        acks: vec![got[1].delivery()],
        dead: vec![(first.delivery(), first, "card declined".into())],
        ..Default::default()
    };
    b.settle_events("orders", "billing", "c1", &batch, None)
        .await
        .unwrap();

    let v = topic_json(&url, &["topic", "list"]).await;
    assert_eq!(
        v,
        json!([{"topic": "orders", "length": 3, "subscribers": 1, "max_lag": 0, "dead": 1,
                "memory": v[0]["memory"]}])
    );
    assert!(v[0]["memory"].as_u64().unwrap() > 0);
    let v = topic_json(&url, &["topic", "show", "orders"]).await;
    assert_eq!(v["length"], json!(3));
    assert_eq!(v["first"], json!(ids[0].to_string()));
    assert_eq!(v["last"], json!(ids[2].to_string()));
    assert_eq!(
        v["subscribers"],
        json!([{"name": "billing", "offset": ids[2].to_string(), "pending": 1, "lag": 0, "consumers": 1, "dead": 1}])
    );
    let run = cli(&url, &["topic", "show", "orders"]).await;
    let out = run.ok();
    assert!(
        out.contains("SUBSCRIBER") && out.contains("billing") && out.contains("3 events"),
        "{out}"
    );

    let v = topic_json(&url, &["topic", "dead", "orders", "billing"]).await;
    assert_eq!(v[0]["id"], json!(ids[0].to_string()));
    assert_eq!(v[0]["error"], json!("card declined"));
    assert_eq!(v[0]["data"], json!("{\"n\":1}"));

    // a replay says what it does first, and does nothing unconfirmed
    let run = cli(
        &url,
        &["topic", "rewind", "orders", "billing", "--beginning"],
    )
    .await;
    run.failed("replay the topic's 3 events for billing: refused without --yes");
    let v = topic_json(
        &url,
        &[
            "topic",
            "rewind",
            "orders",
            "billing",
            "--beginning",
            "--yes",
        ],
    )
    .await;
    assert_eq!(v["lag"], json!(3));
    // a dry run says what a skip would do, and does nothing
    let v = topic_json(
        &url,
        &["topic", "rewind", "orders", "billing", "--end", "--dry-run"],
    )
    .await;
    assert_eq!(
        (&v["dry_run"], &v["skips"], &v["events"]),
        (&json!(true), &json!(true), &json!(3)),
        "{v}"
    );
    assert_eq!(v["upto"], json!(ids[2].to_string()));
    let run = cli(
        &url,
        &["topic", "rewind", "orders", "billing", "--end", "--dry-run"],
    )
    .await;
    assert!(
        run.ok()
            .contains("would skip the 3 events billing has not taken"),
        "{}",
        run.out
    );
    let s = &client.topic("orders").await.unwrap().unwrap().subscribers[0];
    assert_eq!(s.lag, 3, "nothing done");
    // a point in the future: refused, by the dry run as by the rewind
    for dry in [true, false] {
        let mut args = vec![
            "topic",
            "rewind",
            "orders",
            "billing",
            "--at-ms",
            "99999999999999",
            "--yes",
        ];
        if dry {
            args.push("--dry-run");
        }
        cli(&url, &args).await.failed("over a minute past now");
    }
    let s = &client.topic("orders").await.unwrap().unwrap().subscribers[0];
    assert_eq!(s.lag, 3, "nothing done");
    let v = topic_json(
        &url,
        &[
            "topic",
            "rewind",
            "orders",
            "billing",
            "--id",
            &ids[1].to_string(),
            "--yes",
        ],
    )
    .await;
    assert_eq!(v["lag"], json!(2));
    let v = topic_json(
        &url,
        &["topic", "rewind", "orders", "billing", "--end", "--yes"],
    )
    .await;
    assert_eq!(v["lag"], json!(0));
    let v = topic_json(
        &url,
        &[
            "topic", "rewind", "orders", "billing", "--ago", "1h", "--yes",
        ],
    )
    .await;
    assert_eq!(v["lag"], json!(3));
    let at = ids[2].ms().to_string();
    let v = topic_json(
        &url,
        &[
            "topic", "rewind", "orders", "billing", "--at-ms", &at, "--yes",
        ],
    )
    .await;
    // the events published in that millisecond and after
    let from_at = ids.iter().filter(|i| i.ms() >= ids[2].ms()).count();
    assert_eq!(v["lag"], json!(from_at));

    cli(&url, &["topic", "show", "nothing"])
        .await
        .failed("topic \"nothing\" not found");
    cli(&url, &["topic", "rewind", "orders", "nobody", "--end"])
        .await
        .failed("no subscriber \"nobody\"");
    let run = cli(
        &url,
        &["topic", "rewind", "orders", "billing", "--id", "12"],
    )
    .await;
    assert_eq!(run.code, 2, "a usage error: {}", run.err);
    assert!(run.err.contains("invalid event id"), "{}", run.err);
    let run = cli(&url, &["topic", "rewind", "orders", "billing"]).await;
    assert_eq!(
        run.code, 2,
        "clap refuses a rewind without a target: {}",
        run.err
    );
    cli(&url, &["topic", "show", "bad name"])
        .await
        .failed("invalid topic name");
}

/// A skip to the end of a topic that holds no event (every one trimmed)
/// counts 0 events and has no cutoff: it skips nothing, says so, and leaves
/// the subscriber where it is. It did `rewind(Start::End)`: the subscriber
/// moved to the end as it was then, which skips whatever was published
/// between the count and the skip, none of it counted (here its offset moved
/// from 0-0 to the trimmed events' last id).
#[tokio::test]
async fn a_skip_to_the_end_of_an_empty_topic_skips_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .subscribe("orders", "audit", Start::Beginning)
        .await
        .unwrap();
    let two = [("placed", "{}"), ("placed", "{}")];
    client
        .backend()
        .publish("orders", &two, &EventOptions::DEFAULT)
        .await
        .unwrap();
    // every event trimmed: the topic holds none
    let mut con = server.raw().await;
    let _: i64 = redis::cmd("XTRIM")
        .arg("rsmq:t:{orders}")
        .arg("MAXLEN")
        .arg(0)
        .query_async(&mut con)
        .await
        .unwrap();
    let offset = || async {
        let t = client.topic("orders").await.unwrap().unwrap();
        assert_eq!(t.last, None, "the topic holds no event");
        t.subscribers[0].offset.to_string()
    };
    assert_eq!(offset().await, "0-0");
    let run = cli(
        &url,
        &["topic", "rewind", "orders", "audit", "--end", "--yes"],
    )
    .await;
    assert!(
        run.ok().contains("no events counted, none skipped"),
        "{}",
        run.out
    );
    assert_eq!(offset().await, "0-0", "moved to the end: {}", run.out);
    let v = topic_json(
        &url,
        &["topic", "rewind", "orders", "audit", "--end", "--yes"],
    )
    .await;
    assert_eq!(
        (&v["rewound"], &v["lag"]),
        (&json!(false), &json!(0)),
        "{v}"
    );
    assert_eq!(offset().await, "0-0");
}

#[tokio::test]
async fn topic_dead_letters_are_requeued_and_deleted_by_id_or_all() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let b = client.backend();
    client
        .subscribe("orders", "billing", Start::End)
        .await
        .unwrap();
    let events = [
        ("placed", "{\"n\":1}"),
        ("placed", "{\"n\":2}"),
        ("placed", "{\"n\":3}"),
    ];
    b.publish("orders", &events, &EventOptions::DEFAULT)
        .await
        .unwrap();
    let got = b
        .read("orders", "billing", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    // each with the run that failed it
    let now = std::time::Instant::now();
    let runs = got
        .iter()
        .map(|e| {
            let error = Some("card declined".to_string());
            EventRun::new(e.id, 1, now, now, AttemptOutcome::Error, error)
        })
        .collect();
    let batch = EventSettle {
        dead: got
            .into_iter()
            .map(|e| (e.delivery(), e, "card declined".into()))
            .collect(),
        runs,
        by: Some(RunBy {
            worker: "w-1".into(),
            host: "web-3".into(),
        }),
        ..Default::default()
    };
    b.settle_events("orders", "billing", "c1", &batch, None)
        .await
        .unwrap();
    let v = topic_json(&url, &["topic", "dead", "orders", "billing"]).await;
    let dead_id = v[2]["dead_id"].as_str().unwrap().to_string();
    assert_eq!(v[2]["data"], json!("{\"n\":1}"));
    let run = &v[2]["runs"][0];
    assert_eq!(
        (
            &run["n"],
            &run["outcome"],
            &run["error"],
            &run["worker"],
            &run["host"]
        ),
        (
            &json!(1),
            &json!("error"),
            &json!("card declined"),
            &json!("w-1"),
            &json!("web-3")
        ),
        "{v}"
    );
    let run = cli(&url, &["topic", "dead", "orders", "billing"]).await;
    let out = run.ok();
    assert!(out.contains("DEAD ID") && out.contains(&dead_id), "{out}");
    // the attempts below the table, with their worker and error
    assert!(
        out.contains(&format!("runs of {dead_id}"))
            && out.contains("w-1")
            && out.contains("      card declined"),
        "{out}"
    );

    let v = topic_json(&url, &["topic", "requeue", "orders", "billing", &dead_id]).await;
    assert_eq!(v["requeued"], json!(1));
    // back on the topic for billing: the entry names it in `to`
    let again = b
        .read("orders", "billing", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].data.as_deref(), Some("{\"n\":1}"));
    assert_eq!(again[0].to.as_deref(), Some("billing"));

    cli(&url, &["topic", "requeue", "orders", "billing"])
        .await
        .failed("requeue what?");
    cli(
        &url,
        &["topic", "delete-dead", "orders", "billing", "--all"],
    )
    .await
    .failed("refused without --yes");
    let v = topic_json(
        &url,
        &[
            "topic",
            "delete-dead",
            "orders",
            "billing",
            "--all",
            "--yes",
        ],
    )
    .await;
    assert_eq!(v["deleted"], json!(2));
    let v = topic_json(&url, &["topic", "dead", "orders", "billing"]).await;
    assert_eq!(v, json!([]));
    cli(
        &url,
        &["topic", "requeue", "orders", "nobody", "--all", "--yes"],
    )
    .await
    .failed("no subscriber \"nobody\"");
}

/// A name in `rsmq:QUEUES` no queue can have (another RSMQ port's, a stray
/// SADD) is skipped by `queues` and `stats` with a warning on stderr naming
/// it, and counted in `--json`; the other queues list as before.
#[tokio::test]
async fn queues_skip_an_invalid_name_in_the_set_with_a_warning() {
    let (server, _client) = setup().await;
    let url = server.url();
    let mut con = server.raw().await;
    let _: i64 = redis::cmd("SADD")
        .arg("rsmq:QUEUES")
        .arg("bad name")
        .query_async(&mut con)
        .await
        .unwrap();

    let table = cli(&url, &["queues"]).await;
    let lines: Vec<&str> = table.ok().lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].starts_with("mail "), "{lines:?}");
    assert!(
        table.err.contains("warning") && table.err.contains(r#""bad name""#),
        "{}",
        table.err
    );

    let v = cli(&url, &["queues", "--json"]).await.json();
    assert_eq!(v["queues"][0]["queue"], "mail", "{v}");
    assert_eq!(v["queues"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(
        (&v["skipped"], &v["skipped_names"]),
        (&json!(1), &json!(["bad name"]))
    );
    // the same as stats (but the wait, which grows meanwhile)
    let without_wait = |mut v: Value| {
        for q in v["queues"].as_array_mut().unwrap() {
            q.as_object_mut().unwrap().remove("latency_ms");
        }
        v
    };
    assert_eq!(
        without_wait(cli(&url, &["stats", "--json"]).await.json()),
        without_wait(v)
    );
    // the queue's own command is unaffected; the bad name itself is refused
    assert_eq!(
        cli(&url, &["queue", "show", "mail", "--json"]).await.json()["ready"],
        2
    );
    cli(&url, &["queue", "show", "bad name"])
        .await
        .failed("invalid queue name");
}

#[tokio::test]
async fn queue_keys_shows_each_keys_running_holding_and_blocked_jobs() {
    use redjob::queue::Keyed;
    let (server, client) = setup().await;
    let url = server.url();
    let q = client.backend();
    let opts = QueueOptions::default();
    let msgs: Vec<SendMessage> = (0..3)
        .map(|i| SendMessage::new(envelope("A", 30 + i)).keyed(Keyed::new("acct:7")))
        .collect();
    let sent = Backend::send(&q, "mail", &msgs, &opts).await.unwrap();
    // a job shows its key
    let id = sent[2].id.to_string();
    let v = cli(&url, &["jobs", "show", "mail", &id, "--json"])
        .await
        .json();
    assert_eq!(v["state"], "blocked");
    assert_eq!(v["concurrency_key"], json!({"key": "acct:7", "per_key": 1}));
    let text = cli(&url, &["jobs", "show", "mail", &id])
        .await
        .ok()
        .to_string();
    assert!(
        text.contains(r#"key        "acct:7" (1 at a time)"#),
        "{text}"
    );
    // the blocked ones are listed, by key then due time
    let v = cli(
        &url,
        &["jobs", "list", "mail", "--state", "blocked", "--json"],
    )
    .await
    .json();
    let listed: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [sent[1].id.to_string(), sent[2].id.to_string()]);
    let text = cli(&url, &["jobs", "list", "mail", "--state", "blocked"])
        .await
        .ok()
        .to_string();
    assert!(text.contains(r#"blocked by "acct:7""#), "{text}");
    let v = cli(&url, &["queue", "keys", "mail", "--json"]).await.json();
    assert_eq!(
        v["keys"],
        json!([{"key": "acct:7", "per_key": 1, "running": 0, "holding": 1, "blocked": 2,
            "throttled_until_ms": null}])
    );
    assert_eq!(v["next"], Value::Null);
    let one = cli(&url, &["queue", "keys", "mail", "--key", "acct:7"])
        .await
        .ok()
        .to_string();
    assert!(one.contains("BLOCKED") && one.contains("acct:7"), "{one}");
    // the queue counts them, and a purge deletes them with the rest
    let v = cli(&url, &["queues", "--json"]).await.json();
    assert_eq!(v["queues"][0]["blocked"], 2);
    let v = cli(&url, &["queue", "purge", "mail", "--yes", "--json"])
        .await
        .json();
    assert_eq!(v["deleted"], 7);
    cli(&url, &["queue", "keys", "nope"])
        .await
        .failed("not found");
}

/// A batch member job for the batch commands.
#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "cli_batch_member", queue = "cli_batch")]
struct Member {
    n: u32,
}

impl redjob::Job for Member {
    async fn perform(&self, _: &redjob::JobContext) -> Result<(), redjob::JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn batches_list_newest_first_with_progress_and_a_batch_shows_its_dead_jobs() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let url = server.url();
    let running = client
        .batch()
        .description("three members")
        .jobs(&[Member { n: 1 }, Member { n: 2 }, Member { n: 3 }])
        .enqueue()
        .await
        .unwrap();
    // one member dies, as a worker would settle it
    let b = client.backend();
    let f = b
        .fetch("cli_batch", 1, Duration::from_secs(60))
        .await
        .unwrap();
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
    let done = b.settle("cli_batch", &settle).await.unwrap();
    b.batch_settled("cli_batch", &done.batched).await.unwrap();
    // opened a ms later at least: listed first
    tokio::time::sleep(Duration::from_millis(5)).await;
    let empty = client.batch().enqueue().await.unwrap();

    let v = cli(&url, &["batches", "--json"]).await.json();
    let rows = v["batches"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    assert_eq!(rows[0]["id"], empty.to_string());
    assert_eq!(rows[0]["state"], "complete");
    assert_eq!(rows[1]["id"], running.to_string());
    assert_eq!(
        (
            &rows[1]["state"],
            &rows[1]["total"],
            &rows[1]["dead"],
            &rows[1]["pending"]
        ),
        (&json!("running"), &json!(3), &json!(1), &json!(2))
    );
    assert_eq!(rows[1]["description"], "three members");
    let table = cli(&url, &["batches"]).await;
    let text = table.ok();
    assert!(
        text.starts_with("ID") && text.contains("running 33%"),
        "{text}"
    );
    // paging on from the newest
    let v = cli(&url, &["batches", "--json", "--before", &empty.to_string()])
        .await
        .json();
    let rows = v["batches"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], running.to_string());

    let v = cli(&url, &["batch", &running.to_string(), "--json"])
        .await
        .json();
    assert_eq!(
        v["dead_jobs"],
        json!([{ "queue": "cli_batch", "id": d.id.to_string() }])
    );
    let text = cli(&url, &["batch", &running.to_string()]).await;
    assert!(text.ok().contains(&d.id.to_string()), "{}", text.out);
    // a flow: its parent waits, found by id with what it waits for; its
    // child's batch names the parent
    let parent = client
        .enqueue_flow(
            redjob::client::Flow::new_in("cli_parent", &Member { n: 9 }).child(&Member { n: 4 }),
        )
        .await
        .unwrap();
    let v = cli(
        &url,
        &["jobs", "show", "cli_parent", parent.as_ref(), "--json"],
    )
    .await
    .json();
    assert_eq!(v["state"], "waiting", "{v}");
    let group = v["waits_for"]
        .as_str()
        .expect("what it waits for")
        .to_string();
    let v = cli(&url, &["batch", &group, "--json"]).await.json();
    assert_eq!(v["parent"], format!("cli_parent {parent}"), "{v}");
    assert_eq!((&v["total"], &v["pending"]), (&json!(1), &json!(1)));
    let text = cli(&url, &["batch", &group]).await;
    assert!(
        text.ok().contains(&format!(
            "parent (runs when all succeeded): cli_parent {parent}"
        )),
        "{}",
        text.out
    );
    // cancelled: it says so, and a second cancel is refused
    let text = cli(&url, &["batch", &group, "--cancel"]).await;
    let out = text.ok();
    assert!(
        out.contains(&format!("cancelled batch {group}")) && out.contains("state: cancelling 0%"),
        "{out}"
    );
    let v = cli(&url, &["batch", &group, "--json"]).await.json();
    assert_eq!(v["state"], "cancelling", "{v}");
    assert!(v["cancelled_at_ms"].as_u64().is_some(), "{v}");
    cli(&url, &["batch", &group, "--cancel"])
        .await
        .failed("was not cancelled");
    // an id that is none is a usage error (exit 2), a well-formed one of no
    // batch a failure (exit 1)
    let bad = cli(&url, &["batch", "nonsense"]).await;
    assert_eq!(bad.code, 2, "{}", bad.err);
    assert!(bad.err.contains("not a batch id"), "{}", bad.err);
    cli(&url, &["batch", "0000000000abcdefghijklmnopqrstuv"])
        .await
        .failed("no batch");
}

#[tokio::test]
async fn a_batch_whose_counts_another_client_wrote_out_of_range_is_shown_at_100_percent() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let url = server.url();
    let id = client
        .batch()
        .jobs(&[Member { n: 1 }])
        .enqueue()
        .await
        .unwrap();
    let mut con = server.raw().await;
    for succeeded in [u64::MAX, 922_337_203_685_477_580] {
        let _: () = redis::cmd("HSET")
            .arg(format!("rsmq:@batch:{id}"))
            .arg("succeeded")
            .arg(succeeded)
            .arg("dead")
            .arg(5)
            .query_async(&mut con)
            .await
            .unwrap();
        let v = cli(&url, &["batches", "--json"]).await.json();
        assert_eq!(v["batches"][0]["id"], id.to_string(), "{v}");
        let text = cli(&url, &["batches"]).await;
        assert!(text.ok().contains("100%"), "{}", text.out);
        cli(&url, &["batch", &id.to_string()]).await.ok();
        cli(&url, &["batch", &id.to_string(), "--json"])
            .await
            .json();
    }
}

#[tokio::test]
async fn queue_show_reads_its_own_queue_not_every_queue_whose_name_holds_it() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let url = server.url();
    let q = client.queues();
    for name in std::iter::once("mail".to_string()).chain((0..200).map(|i| format!("mail{i}"))) {
        redjob::queue::Queues::create_queue(q, &name, redjob::queue::QueueOptions::default())
            .await
            .unwrap();
    }
    let mut con = server.raw().await;
    common::reset_stats(&mut con).await;
    let v = cli(&url, &["queue", "show", "mail", "--json"]).await.json();
    assert_eq!(v["queue"], "mail", "{v}");
    let calls: u64 = common::command_calls(&mut con)
        .await
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .map(|(_, n)| n)
        .sum();
    // a few dozen for its own line, settings and run times; not a line for
    // each of the 200 others
    assert!(calls < 150, "{calls} commands");
}

/// Text from Redis (a job's type, a dead letter's reason, a raw body) is
/// printed with its control characters escaped: a terminal escape in it does
/// not retitle the window or clear the screen, a newline in a type does not
/// break its table row. Ordinary non-ASCII text prints as is; `--json` is
/// JSON-escaped already.
#[tokio::test]
async fn text_from_redis_is_printed_with_its_control_characters_escaped() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let q = client.backend();
    let esc = "\u{1b}]0;PWNED\u{7}\u{1b}[2J\nrow\r\u{9b}";
    let env = json!({"type": format!("Été{esc}"), "args": {"x": esc}}).to_string();
    let msgs: Vec<SendMessage> = (0..3).map(|_| SendMessage::new(env.clone())).collect();
    Backend::send(&q, "mail", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    dead_letter_due(&client, &[format!("err{esc}"), "plain".into()]).await;
    // the dead letter with the hostile reason
    let dead: Vec<String> = cli(&url, &["dead", "list", "mail", "--json"]).await.json()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["last_error"].as_str().unwrap().starts_with("err"))
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    let ready = client.peek("mail", 1).await.unwrap()[0].id.to_string();
    // a raw body, no JSON, with invalid UTF-8 and escapes
    let mut con = server.raw().await;
    let _: i64 = redis::cmd("HSET")
        .arg("rsmq:mail:Q")
        .arg(&ready)
        .arg(b"\xff\x1b]0;RAW\x07raw\nbody".as_slice())
        .query_async(&mut con)
        .await
        .unwrap();

    let raw = |s: &str| s.contains(['\u{1b}', '\u{7}', '\r', '\u{9b}']);
    for args in [
        vec!["dead", "list", "mail"],
        vec!["dead", "show", "mail", &dead[0]],
        vec!["jobs", "list", "mail", "--state", "dead"],
        vec!["jobs", "show", "mail", &dead[0]],
        vec!["jobs", "show", &dead[0]],
        vec!["jobs", "show", "mail", &ready],
        vec!["jobs", "show", &ready],
        vec!["jobs", "peek", "mail"],
    ] {
        let r = cli(&url, &args).await;
        let out = r.ok();
        assert!(!raw(out), "{args:?}: {out:?}");
        assert!(!raw(&r.err), "{args:?}: {:?}", r.err);
    }
    // a row a job, the type escaped whole in it, its letters kept
    let list = cli(&url, &["dead", "list", "mail", "--wide"]).await;
    let lines: Vec<&str> = list.ok().lines().collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[1].contains(r"Été\x1b]0;PWNED\x07\x1b[2J\nrow\r\u{9b}"),
        "{lines:?}"
    );
    let show = cli(&url, &["dead", "show", "mail", &dead[0]]).await;
    assert!(
        show.ok()
            .contains(r"err\x1b]0;PWNED\x07\x1b[2J\nrow\r\u{9b}"),
        "{}",
        show.out
    );
    let body = cli(&url, &["jobs", "show", "mail", &ready]).await;
    assert!(
        body.ok().contains(r"\x1b]0;RAW\x07raw\nbody"),
        "{}",
        body.out
    );
    // --json: the text as it is, JSON-escaped
    let v = cli(&url, &["jobs", "show", "mail", &dead[0], "--json"])
        .await
        .json();
    assert_eq!(v["type"], format!("Été{esc}"));
}

/// A reader that went away (`redjob queues | head -1`) ends the CLI quietly,
/// with 0 (it panicked with "failed printing to stdout: Broken pipe", 101):
/// every command here runs with its stdout a pipe whose reading end is
/// closed before it starts, so its first line meets the closed pipe.
#[tokio::test]
async fn a_closed_pipe_ends_every_command_quietly() {
    let (server, client) = setup().await;
    let url = server.url();
    let msgs: Vec<SendMessage> = (0..300)
        .map(|i| SendMessage::new(envelope("A", i)))
        .collect();
    Backend::send(&client.backend(), "mail", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let id = client.peek("mail", 1).await.unwrap()[0].id.to_string();
    let cases: [&[&str]; 16] = [
        &["queues"],
        &["queues", "--json"],
        &["stats"],
        &["stats", "--json"],
        &["stats", "--watch", "--interval", "100ms"],
        &["stats", "--watch", "--interval", "100ms", "--json"],
        &["stats", "--hours", "2"],
        &["queue", "show", "mail"],
        &["queue", "settings", "mail"],
        &["jobs", "list", "mail", "--state", "ready", "-n", "1000"],
        &[
            "jobs", "list", "mail", "--state", "ready", "-n", "1000", "--json",
        ],
        &["jobs", "show", &id],
        &["dead", "list", "mail"],
        &["workers"],
        &["batches"],
        &["--help"],
    ];
    for args in cases {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redjob"))
            .arg("--url")
            .arg(&url)
            .args(args)
            .env_remove("REDIS_URL")
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
            .await
            .expect("the CLI exits within 30 s")
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}");
    }
}

/// `queue show` and `queue settings` print their settings in aligned
/// columns, each label apart from its value by two spaces at least (the
/// longest, "concurrency, all workers", ran into its value:
/// `concurrency, all workersnone`), each value apart from where it comes from.
#[tokio::test]
async fn queue_settings_print_in_aligned_columns() {
    let (server, _client) = setup().await;
    let url = server.url();
    cli(
        &url,
        &["queue", "settings", "mail", "--global-concurrency", "3"],
    )
    .await
    .ok();
    let labels = [
        "dead letters: at most",
        "history: arguments for",
        "concurrency per worker",
        "concurrency, all workers",
        "in use, all workers",
        "rate limit",
    ];
    for args in [["queue", "show", "mail"], ["queue", "settings", "mail"]] {
        let r = cli(&url, &args).await;
        let out = r.ok();
        let mut column = None;
        for label in labels {
            let line = out
                .lines()
                .find(|l| l.starts_with(label))
                .unwrap_or_else(|| panic!("{args:?}: no {label:?} in {out}"));
            let rest = &line[label.len()..];
            assert!(rest.starts_with("  "), "{args:?}: {line:?}");
            // every value starts in one column
            let at = line.len() - rest.trim_start().len();
            assert_eq!(*column.get_or_insert(at), at, "{args:?}: {line:?}\n{out}");
            // a value, then where it comes from, apart
            let words: Vec<&str> = rest.trim_start().split("  ").collect();
            assert!(!words[0].ends_with(' '), "{args:?}: {line:?}");
        }
    }
}

/// Sends one delayed job to "mail" and cancels it: an entry of the history
/// finished now; its id.
async fn cancelled_now(client: &Client, i: usize) -> String {
    let q = client.backend();
    let msg = SendMessage::new(envelope("A", i)).delay(Duration::from_secs(3600));
    let id = Queues::send(&q, "mail", msg).await.unwrap();
    client.cancel("mail", &id).await.unwrap();
    id.to_string()
}

/// The arguments of the `more: redjob ...` hint under a page (without the
/// leading `redjob`).
fn hint(out: &str) -> Vec<String> {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("more: redjob "))
        .unwrap_or_else(|| panic!("no paging hint in:\n{out}"));
    line.split_whitespace().map(String::from).collect()
}

/// `jobs history --since D` measures its cutoff once, and the hint under a
/// full page carries that cutoff (`--since-ms <unix ms>`, and `--json` says
/// `since_ms`), so the next page, run however much later, shows the entries
/// the first page selected. The old hint said `--since D` again, which the
/// next run measured from its own clock: the window had slid on, and the
/// oldest entries the first page selected were on no page.
#[tokio::test]
async fn history_since_paging_hint_shows_every_entry_the_first_page_selected() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("mail", QueueOptions::default())
        .await
        .unwrap();
    let oldest = cancelled_now(&client, 0).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let b = cancelled_now(&client, 1).await;
    let c = cancelled_now(&client, 2).await;
    // within 3 s: all three are selected, the newest two on this page
    let first = cli(
        &url,
        &["jobs", "history", "mail", "-n", "2", "--since", "3s"],
    )
    .await;
    let out = first.ok();
    assert!(out.contains(&b) && out.contains(&c), "{out}");
    assert!(!out.contains(&oldest), "{out}");
    let next = hint(out);
    let at = next
        .iter()
        .position(|a| a == "--since-ms")
        .expect("a cutoff");
    let cutoff: u64 = next[at + 1].parse().unwrap();
    // the operator reads the page, then runs the hint
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let args: Vec<&str> = next.iter().map(String::as_str).collect();
    let second = cli(&url, &args).await;
    let out2 = second.ok();
    assert!(
        out2.contains(&oldest),
        "the next page (`redjob {}`) lost {oldest}, which the first page selected:\n{out2}",
        next.join(" ")
    );
    // the same cutoff by hand, in JSON: every entry, and the cutoff itself
    let cut = cutoff.to_string();
    let v = cli(
        &url,
        &["jobs", "history", "mail", "--since-ms", &cut, "--json"],
    )
    .await
    .json();
    assert_eq!(v["jobs"].as_array().unwrap().len(), 3, "{v}");
    assert_eq!(v["since_ms"], cutoff);
    let both = cli(
        &url,
        &[
            "jobs",
            "history",
            "mail",
            "--since",
            "1h",
            "--since-ms",
            &cut,
        ],
    )
    .await;
    assert_eq!(both.code, 2, "one cutoff or the other: {}", both.err);
}

/// `dead requeue <queue> <id> <id>` (the same id twice, as a pasted list may
/// have it) requeues the letter once and succeeds, and so does `dead delete`;
/// `--dry-run` counts the letter once. The old code kept the duplicate: the
/// requeue took the letter once, then failed (exit 1) saying that one
/// letter stayed dead because a queued job held its unique key.
#[tokio::test]
async fn dead_requeue_of_an_id_given_twice_succeeds() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let q = client.backend();
    let msgs = [
        SendMessage::new(envelope("A", 0)),
        SendMessage::new(envelope("A", 1)),
    ];
    Backend::send(&q, "mail", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    dead_letter_due(&client, &["gave up".into(), "gave up".into()]).await;
    let dead = cli(&url, &["dead", "list", "mail", "--json"]).await.json();
    let ids: Vec<String> = dead["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().into())
        .collect();
    let (a, b) = (&ids[0], &ids[1]);
    let dry = cli(
        &url,
        &["dead", "requeue", "mail", a, a, "--dry-run", "--json"],
    )
    .await
    .json();
    assert_eq!(dry["count"], 1, "{dry}");
    let run = cli(&url, &["dead", "requeue", "mail", a, a]).await;
    assert_eq!(run.code, 0, "stdout: {}\nstderr: {}", run.out, run.err);
    assert!(run.out.contains("requeued 1"), "{}", run.out);
    let c = client.counts("mail").await.unwrap();
    assert_eq!((c.dead, c.ready), (1, 1));
    let run = cli(&url, &["dead", "delete", "mail", b, b]).await;
    assert_eq!(run.code, 0, "stdout: {}\nstderr: {}", run.out, run.err);
    assert!(run.out.contains("deleted 1"), "{}", run.out);
    assert_eq!(client.counts("mail").await.unwrap().dead, 0);
}

/// `redjob topic list` reads its topics together, 50 a script call, the
/// calls and then the subscribers' dead letters' lengths pipelined: the old
/// command read each topic in three round trips of its own (`EXISTS`,
/// `XINFO GROUPS`, then topic_info.lua), 120 script calls for 120 topics.
#[tokio::test]
async fn topic_list_reads_its_topics_together() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    for i in 0..120 {
        client
            .subscribe(&format!("t{i:03}"), "s", Start::Beginning)
            .await
            .unwrap();
    }
    let mut con = server.raw().await;
    common::reset_stats(&mut con).await;
    let v = topic_json(&url, &["topic", "list"]).await;
    let listed: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["topic"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 120, "{v}");
    assert_eq!((listed[0], listed[119]), ("t000", "t119"));
    let calls = common::command_calls(&mut con).await;
    let n = |name: &str| calls.get(name).copied().unwrap_or(0);
    // three script calls (loaded first by the pipeline: SCRIPT LOAD is no
    // call), an XINFO GROUPS of each topic inside them, an XLEN of each
    // subscriber's dead letters
    assert_eq!((n("evalsha"), n("xinfo|groups"), n("xlen")), (3, 120, 120));
}
