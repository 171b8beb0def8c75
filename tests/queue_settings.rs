//! A queue's settings as Redis holds them: one hash field per setting, which a
//! foreign or older writer may have left odd; such a value is ignored the same
//! way by the scripts and by Rust (never a half-applied settle, never an error
//! that keeps the CLI from repairing it), and RSMQ's own attributes are
//! untouched by settings; a change of one part of the concurrency, or of
//! some fields of the history or the dead-letter retention, keeps the others
//! as Rust reads them.

mod common;

use std::time::Duration;

use common::RedisServer;
use redjob::Client;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::inspect::Inspect;
use redjob::ops::{Admin, QueueSettings, Retention};
use redjob::queue::{QueueOptions, Queues, SendMessage};

/// Sends `n` jobs to "q", leases them and dead-letters them in one settle
/// asking for `retention`.
async fn kill(client: &Client, n: usize, retention: Retention) {
    let q = client.backend();
    let msgs: Vec<SendMessage> = (0..n)
        .map(|i| SendMessage::new(format!(r#"{{"type":"A","args":{{"i":{i}}}}}"#)))
        .collect();
    Backend::send(&q, "q", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let got = q.fetch("q", n, Duration::from_secs(60)).await.unwrap();
    assert_eq!(got.jobs.len(), n);
    let settle = Settle {
        dead: got
            .jobs
            .iter()
            .map(|d| DeadLetterEntry {
                id: d.id,
                token: d.token,
                error: "boom".into(),
            })
            .collect(),
        retention,
        ..Settle::default()
    };
    assert_eq!(q.settle("q", &settle).await.unwrap().dead, n as u64);
}

#[tokio::test]
async fn odd_stored_settings_are_ignored_alike_by_scripts_and_rust_and_can_be_repaired() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let raw = redis::Client::open(server.url()).unwrap();
    let mut con = raw.get_multiplexed_async_connection().await.unwrap();
    let keep3 = Retention {
        max_count: Some(3),
        max_age: None,
    };
    // (numbers past a u64: no number to Rust, nor to the scripts)
    for odd in [
        "2.5 0",
        "-1 0",
        "5",
        "x y",
        "",
        "99999999999999999999 0",
        "5 18446744073709551616",
    ] {
        let _: () = redis::cmd("HSET")
            .arg("rsmq:q:Q")
            .arg("redjob:dead_letters")
            .arg(odd)
            .query_async(&mut con)
            .await
            .unwrap();
        assert!(client.settings("q").await.unwrap().is_empty(), "{odd:?}");
        // the settle's own retention applies, the whole settle goes through
        kill(&client, 4, keep3).await;
        assert_eq!(client.counts("q").await.unwrap().dead, 3, "{odd:?}");
    }
    // repaired through the API (as the CLI and the dashboard do)
    let two = Retention {
        max_count: Some(2),
        max_age: None,
    };
    client
        .set_settings("q", &QueueSettings::dead_letters(two))
        .await
        .unwrap();
    let stored: String = redis::cmd("HGET")
        .arg("rsmq:q:Q")
        .arg("redjob:dead_letters")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(stored, "2 0");
    kill(&client, 1, keep3).await;
    assert_eq!(client.counts("q").await.unwrap().dead, 2);
    // RSMQ's attributes are what they were
    let a = client.queues().attributes("q").await.unwrap();
    assert_eq!((a.vt, a.delay, a.maxsize), (30, 0, 65536));
}

/// A server, a client of it and a raw connection.
async fn start() -> (RedisServer, Client, redis::aio::MultiplexedConnection) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let raw = redis::Client::open(server.url()).unwrap();
    let con = raw.get_multiplexed_async_connection().await.unwrap();
    (server, client, con)
}

/// Creates queue `name` and writes its hash field `field` as `value`, as
/// another client would.
async fn queue_with(
    client: &Client,
    con: &mut redis::aio::MultiplexedConnection,
    name: &str,
    field: &str,
    value: &str,
) {
    client
        .queues()
        .create_queue(name, QueueOptions::default())
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("rsmq:{name}:Q"))
        .arg(field)
        .arg(value)
        .query_async(con)
        .await
        .unwrap();
}

#[tokio::test]
async fn odd_fleet_limits_are_ignored_alike_by_scripts_and_rust() {
    // a rate or a concurrency across the fleet out of the bounds Rust reads
    // (a period over 24 h, or one Lua would write as "1e+20"; more than
    // 1,000,000; a number with more after it) limits nothing in the fetch
    // either: both jobs are leased, and the queue is not left stuck
    let (_server, client, mut con) = start().await;
    let q = client.backend();
    let odd = [
        ("redjob:rate", "1 100000000000000000000"),
        ("redjob:rate", "1 90000000"),
        ("redjob:rate", "1 0x"),
        ("redjob:rate", "2000000 1000"),
        ("redjob:rate", "+1 90000"),
        ("redjob:concurrency", "0 1x"),
        ("redjob:concurrency", "0 2000000"),
        ("redjob:concurrency", "2000000 1"),
        ("redjob:concurrency", "0 +1"),
    ];
    let mut wrong = Vec::new();
    for (i, (field, value)) in odd.into_iter().enumerate() {
        let name = format!("q{i}");
        queue_with(&client, &mut con, &name, field, value).await;
        let s = client.settings(&name).await.unwrap();
        assert!(
            s.rate_limit.is_none() && s.concurrency.is_none(),
            "{field} {value:?}: {s:?}"
        );
        let msgs = [SendMessage::new("a"), SendMessage::new("b")];
        Backend::send(&q, &name, &msgs, &QueueOptions::default())
            .await
            .unwrap();
        match q.fetch(&name, 2, Duration::from_secs(60)).await {
            Ok(got) if got.jobs.len() == 2 => {}
            Ok(got) => wrong.push(format!("{field} {value:?}: {} leased", got.jobs.len())),
            Err(e) => wrong.push(format!("{field} {value:?}: {e}")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A change of one part of the concurrency keeps the other as Rust reads the
/// stored value (an odd one: no limit), on Redis as in memory.
#[tokio::test]
async fn a_change_of_one_concurrency_part_keeps_the_other_as_rust_reads_it() {
    use redjob::ops::{Concurrency, ConcurrencyPart};
    let (_server, client, mut con) = start().await;
    let stored = [
        "2 10",
        "2",
        "0 7",
        "2 10 7",
        "0 1x",
        "0 2000000",
        "2000000 1",
        "x",
        "",
    ];
    let mut wrong = Vec::new();
    for (i, value) in stored.into_iter().enumerate() {
        for (part, n) in [
            (ConcurrencyPart::PerWorker, Some(5)),
            (ConcurrencyPart::Global, Some(3)),
            (ConcurrencyPart::Global, None),
        ] {
            let name = format!("c{i}{part:?}{n:?}").replace(['(', ')'], "");
            queue_with(&client, &mut con, &name, "redjob:concurrency", value).await;
            let mut want = client
                .settings(&name)
                .await
                .unwrap()
                .concurrency
                .unwrap_or_default();
            match part {
                ConcurrencyPart::PerWorker => want.per_worker = n,
                _ => want.global = n,
            }
            let got = client
                .set_settings(&name, &QueueSettings::concurrency_part(part, n))
                .await
                .unwrap()
                .concurrency;
            if got != Some(want) {
                wrong.push(format!("{value:?} {part:?} {n:?}: {got:?}, not {want:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // in memory: nothing stored, then each part in turn
    let mem = Client::memory(redjob::backend::memory::MemoryBackend::new());
    mem.queues()
        .create_queue("m", QueueOptions::default())
        .await
        .unwrap();
    let part = |p, n| QueueSettings::concurrency_part(p, n);
    let s = mem
        .set_settings("m", &part(ConcurrencyPart::Global, Some(10)))
        .await
        .unwrap();
    assert_eq!(s.concurrency, Some(Concurrency::global(10)));
    let s = mem
        .set_settings("m", &part(ConcurrencyPart::PerWorker, Some(2)))
        .await
        .unwrap();
    assert_eq!(
        s.concurrency,
        Some(Concurrency::per_worker(2).with_global(10))
    );
    let s = mem
        .set_settings("m", &part(ConcurrencyPart::Global, None))
        .await
        .unwrap();
    assert_eq!(s.concurrency, Some(Concurrency::per_worker(2)));
}

/// A change of some fields of the history or the dead-letter retention
/// keeps the others as Rust reads the stored value (one it does not read:
/// the defaults), a value an earlier release stored among them.
#[tokio::test]
async fn a_change_of_some_retention_fields_keeps_the_others_as_rust_reads_them() {
    use redjob::ops::{History, HistoryPart, RetentionPart};
    let (_server, client, mut con) = start().await;
    let history = [
        "1 1000 86400000 3600000",
        "0 0 0 -1",
        "1 007 00 -01",
        "1 5 5 -0",
        "1 18446744073709551615 4503599627370496 9223372036854775807",
        "1 18446744073709551616 0 0",
        "1 5 99999999999999999999 0",
        "1 5 5 9223372036854775808",
        "1 5 5 -2",
        "1 5 5 --1",
        "2 5 5 5",
        "1 5 5",
        "1 5 5 5 5",
        "1  5 5 5",
        "x",
        "",
    ];
    let mut wrong = Vec::new();
    for (i, value) in history.into_iter().enumerate() {
        for (j, part) in [
            HistoryPart::MaxCount(Some(5_000)),
            HistoryPart::Enabled(false),
            HistoryPart::ArgsMaxAge(None),
        ]
        .into_iter()
        .enumerate()
        {
            let name = format!("h{i}_{j}");
            queue_with(&client, &mut con, &name, "redjob:history", value).await;
            let mut want = client.settings(&name).await.unwrap().in_force().history;
            match part {
                HistoryPart::MaxCount(n) => want.max_count = n,
                HistoryPart::Enabled(on) => want.enabled = on,
                HistoryPart::ArgsMaxAge(d) => want.args_max_age = d,
                _ => unreachable!(),
            }
            let got = client
                .set_settings(&name, &QueueSettings::history_parts([part]))
                .await
                .unwrap()
                .history;
            if got != Some(want) {
                wrong.push(format!("{value:?} {part:?}: {got:?}, not {want:?}"));
            }
        }
    }
    let dead = [
        "10000 2592000000",
        "5 0",
        "005 010",
        "18446744073709551615 1",
        "18446744073709551616 1",
        "5 0 1",
        "5",
        "-5 0",
        "",
    ];
    for (i, value) in dead.into_iter().enumerate() {
        for (j, part) in [
            RetentionPart::MaxCount(Some(250)),
            RetentionPart::MaxAge(None),
        ]
        .into_iter()
        .enumerate()
        {
            let name = format!("d{i}_{j}");
            queue_with(&client, &mut con, &name, "redjob:dead_letters", value).await;
            let mut want = client
                .settings(&name)
                .await
                .unwrap()
                .in_force()
                .dead_letters;
            match part {
                RetentionPart::MaxCount(n) => want.max_count = n,
                RetentionPart::MaxAge(d) => want.max_age = d,
                _ => unreachable!(),
            }
            let got = client
                .set_settings(&name, &QueueSettings::dead_letters_parts([part]))
                .await
                .unwrap()
                .dead_letters;
            if got != Some(want) {
                wrong.push(format!("{value:?} {part:?}: {got:?}, not {want:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // what a whole change stores and a change of one field keeps: the
    // stored form an earlier release wrote, read back the same
    let h = History {
        max_age: None,
        ..History::default()
    };
    queue_with(
        &client,
        &mut con,
        "old",
        "redjob:history",
        "1 1000 0 3600000",
    )
    .await;
    assert_eq!(client.settings("old").await.unwrap().history, Some(h));
}

#[tokio::test]
async fn an_odd_throttle_holds_nothing() {
    // a handler's throttle is a whole number of ms; any other value (a NaN
    // compared false both ways, so the queue leased nothing, with no end a
    // reader could show, and a worker fetched again at once) holds nothing
    let (_server, client, mut con) = start().await;
    let q = client.backend();
    let odd = [
        "nan",
        "-nan",
        "inf",
        "1e400",
        "99999999999999999999",
        "12x",
        " 1",
        "",
    ];
    let mut wrong = Vec::new();
    for (i, value) in odd.into_iter().enumerate() {
        let name = format!("t{i}");
        queue_with(&client, &mut con, &name, "redjob:throttled", value).await;
        let usage = client.limit_usage(&name).await.unwrap();
        if usage.throttled_until_ms.is_some() {
            wrong.push(format!("{value:?}: read as a throttle, {usage:?}"));
        }
        let msgs = [SendMessage::new("a"), SendMessage::new("b")];
        Backend::send(&q, &name, &msgs, &QueueOptions::default())
            .await
            .unwrap();
        match q.fetch(&name, 2, Duration::from_secs(60)).await {
            Ok(got) if got.jobs.len() == 2 => {}
            Ok(got) => wrong.push(format!("{value:?}: {} leased", got.jobs.len())),
            Err(e) => wrong.push(format!("{value:?}: {e}")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test]
async fn a_queue_whose_delay_or_maxsize_is_no_number_refuses_sends_naming_it() {
    // RSMQ's own attributes, written as no number by another client: every
    // kind of send is refused with an error that says which, and stores
    // nothing
    let (_server, client, mut con) = start().await;
    let rsmq = client.queues();
    let mut wrong = Vec::new();
    let cases = [
        ("delay", "abc"),
        ("delay", ""),
        ("maxsize", "abc"),
        ("maxsize", ""),
    ];
    for (i, (field, value)) in cases.into_iter().enumerate() {
        let name = format!("q{i}");
        queue_with(&client, &mut con, &name, field, value).await;
        let lone = Queues::send(rsmq, &name, SendMessage::new("a"))
            .await
            .map(|_| ());
        let delayed = Queues::send(
            rsmq,
            &name,
            SendMessage::new("a").delay(Duration::from_secs(5)),
        )
        .await
        .map(|_| ());
        let batch =
            Queues::send_batch(rsmq, &name, &[SendMessage::new("a"), SendMessage::new("b")])
                .await
                .map(|_| ());
        let unique = Queues::send(
            rsmq,
            &name,
            SendMessage::new("a").unique(redjob::queue::Unique::new("k")),
        )
        .await
        .map(|_| ());
        let want = format!("the queue's {field} is not a number");
        for (kind, sent) in [
            ("lone", lone),
            ("delayed", delayed),
            ("batch", batch),
            ("unique", unique),
        ] {
            match sent {
                Err(e) if e.to_string().contains(&want) => {}
                other => wrong.push(format!("{field} {value:?}, {kind}: {other:?}")),
            }
        }
        let stored: u64 = redis::cmd("ZCARD")
            .arg(format!("rsmq:{name}"))
            .query_async(&mut con)
            .await
            .unwrap();
        if stored != 0 {
            wrong.push(format!("{field} {value:?}: {stored} stored"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test]
async fn an_odd_history_setting_is_ignored_alike_by_scripts_and_rust() {
    // "off" with a body age below -1, or with a number past what Rust reads
    // (a u64; an i64 for the body age): the settle's own history setting
    // applies (on), as Rust reports no setting
    let (_server, client, mut con) = start().await;
    let q = client.backend();
    let odd = [
        "0 0 0 -5",
        "0 18446744073709551616 0 -1",
        "0 0 99999999999999999999 -1",
        "0 0 0 9223372036854775808",
        "0 0 0 -9223372036854775808",
    ];
    let mut wrong = Vec::new();
    for (i, value) in odd.into_iter().enumerate() {
        let name = format!("q{i}");
        queue_with(&client, &mut con, &name, "redjob:history", value).await;
        assert!(
            client.settings(&name).await.unwrap().history.is_none(),
            "{value:?}"
        );
        let msgs = [SendMessage::new(r#"{"type":"A","args":{}}"#)];
        let id = Backend::send(&q, &name, &msgs, &QueueOptions::default())
            .await
            .unwrap()[0];
        let d = q
            .fetch(&name, 1, Duration::from_secs(60))
            .await
            .unwrap()
            .jobs
            .remove(0);
        let ack = Settle {
            acks: vec![(d.id, d.token)],
            ..Settle::default()
        };
        assert_eq!(q.settle(&name, &ack).await.unwrap().acked, 1);
        let job = client.job(&name, &id.id).await.unwrap();
        if job.is_none_or(|j| j.finished.is_none()) {
            wrong.push(format!(
                "{value:?}: no history entry, the odd setting turned history off"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
