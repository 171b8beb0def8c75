//! Every RSMQ queue operation, with its error cases.

use std::time::Duration;

use redjob::Error;
use redjob::queue::{QueueOptions, QueueUpdate, Queues, SendMessage};

use super::Env;

pub async fn create_queue_rejects_bad_input(env: &Env) {
    let rsmq = env.queues();
    for bad in ["", "has space", "QUEUES", "dot.ted"] {
        assert!(matches!(
            rsmq.create_queue(bad, QueueOptions::default()).await,
            Err(Error::InvalidQueueName { .. })
        ));
    }
    let too_long = "q".repeat(161);
    assert!(matches!(
        rsmq.create_queue(&too_long, QueueOptions::default()).await,
        Err(Error::InvalidQueueName { .. })
    ));
    for opts in [
        QueueOptions {
            vt: 10_000_000,
            ..Default::default()
        },
        QueueOptions {
            delay: 10_000_000,
            ..Default::default()
        },
        QueueOptions {
            maxsize: 1023,
            ..Default::default()
        },
        QueueOptions {
            maxsize: 65537,
            ..Default::default()
        },
    ] {
        assert!(
            matches!(
                rsmq.create_queue("q", opts).await,
                Err(Error::InvalidValue { .. })
            ),
            "{opts:?}"
        );
    }
    assert!(rsmq.list_queues().await.unwrap().is_empty());
}

pub async fn attributes_track_counts_and_updates(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let a = rsmq.attributes("q").await.unwrap();
    assert_eq!(
        (
            a.vt,
            a.delay,
            a.maxsize,
            a.msgs,
            a.hiddenmsgs,
            a.totalsent,
            a.totalrecv
        ),
        (30, 0, 65536, 0, 0, 0, 0)
    );
    assert!(a.created > 1_700_000_000 && a.created == a.modified);
    rsmq.send("q", SendMessage::new("one")).await.unwrap();
    rsmq.send("q", SendMessage::new("two")).await.unwrap();
    // RSMQ counts as hidden whatever is scored from the start of the current second on
    tokio::time::sleep(Duration::from_millis(1100)).await;
    rsmq.receive("q", None).await.unwrap().unwrap();
    let a = rsmq.attributes("q").await.unwrap();
    assert_eq!(
        (a.msgs, a.hiddenmsgs, a.totalsent, a.totalrecv),
        (2, 1, 2, 1)
    );
    let a = rsmq
        .set_attributes(
            "q",
            QueueUpdate {
                vt: Some(60),
                delay: Some(2),
                maxsize: Some(-1),
            },
        )
        .await
        .unwrap();
    assert_eq!((a.vt, a.delay, a.maxsize), (60, 2, -1));
    assert!(matches!(
        rsmq.set_attributes("q", QueueUpdate::default()).await,
        Err(Error::InvalidValue { .. })
    ));
    assert!(matches!(
        rsmq.set_attributes(
            "q",
            QueueUpdate {
                vt: Some(10_000_000),
                ..Default::default()
            }
        )
        .await,
        Err(Error::InvalidValue { what: "vt", .. })
    ));
    assert!(matches!(
        rsmq.set_attributes(
            "q",
            QueueUpdate {
                maxsize: Some(5),
                ..Default::default()
            }
        )
        .await,
        Err(Error::InvalidValue {
            what: "maxsize",
            ..
        })
    ));
    assert!(matches!(
        rsmq.set_attributes(
            "missing",
            QueueUpdate {
                vt: Some(1),
                ..Default::default()
            }
        )
        .await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(matches!(
        rsmq.attributes("missing").await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(matches!(
        rsmq.attributes("bad name").await,
        Err(Error::InvalidQueueName { .. })
    ));
}

pub async fn send_receive_delete_roundtrip(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let id = rsmq.send("q", SendMessage::new("hello")).await.unwrap();
    let m = rsmq
        .receive("q", Some(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((m.id, m.body.as_str(), m.rc), (id, "hello", 1));
    assert!(
        m.fr >= m.sent && m.fr - m.sent < 5_000,
        "fr {} sent {}",
        m.fr,
        m.sent
    );
    // hidden now
    assert!(rsmq.receive("q", None).await.unwrap().is_none());
    assert!(rsmq.delete("q", &id).await.unwrap());
    assert!(!rsmq.delete("q", &id).await.unwrap());
    assert_eq!(rsmq.attributes("q").await.unwrap().msgs, 0);
}

pub async fn receive_again_after_vt_counts_receives(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let id = rsmq.send("q", SendMessage::new("x")).await.unwrap();
    let first = rsmq
        .receive("q", Some(Duration::from_millis(50)))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let second = rsmq
        .receive("q", Some(Duration::from_millis(50)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.id, id);
    assert_eq!(second.rc, 2);
    assert_eq!(second.fr, first.fr, "first receive time is kept");
}

pub async fn send_rejects_missing_queue_bad_name_and_large_body(env: &Env) {
    let rsmq = env.queues();
    assert!(matches!(
        rsmq.send("nope", SendMessage::new("x")).await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(matches!(
        rsmq.send("bad name", SendMessage::new("x")).await,
        Err(Error::InvalidQueueName { .. })
    ));
    rsmq.create_queue(
        "q",
        QueueOptions {
            maxsize: 1024,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    rsmq.send("q", SendMessage::new(vec![b'a'; 1024]))
        .await
        .unwrap();
    assert!(matches!(
        rsmq.send("q", SendMessage::new(vec![b'a'; 1025])).await,
        Err(Error::MessageTooLarge {
            size: 1025,
            max: 1024
        })
    ));
    assert!(matches!(
        rsmq.send(
            "q",
            SendMessage::new("x").delay(redjob::queue::MAX_AHEAD + Duration::from_millis(1))
        )
        .await,
        Err(Error::InvalidValue { what: "delay", .. })
    ));
    assert_eq!(rsmq.attributes("q").await.unwrap().msgs, 1);
    // a message's own delay may pass RSMQ's 9999999 s (that bounds queue attributes)
    rsmq.send("q", SendMessage::new("x").delay(redjob::queue::MAX_AHEAD))
        .await
        .unwrap();
    assert_eq!(rsmq.attributes("q").await.unwrap().msgs, 2);
    assert!(rsmq.receive("q", None).await.unwrap().is_some());
    assert!(
        rsmq.receive("q", None).await.unwrap().is_none(),
        "due in 50 years"
    );
}

pub async fn unlimited_maxsize_takes_large_bodies(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue(
        "q",
        QueueOptions {
            maxsize: -1,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let body = "z".repeat(200_000);
    rsmq.send("q", SendMessage::new(body.clone()))
        .await
        .unwrap();
    assert_eq!(rsmq.pop("q").await.unwrap().unwrap().body, body);
}

pub async fn delayed_messages_wait(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    rsmq.send(
        "q",
        SendMessage::new("later").delay(Duration::from_millis(150)),
    )
    .await
    .unwrap();
    assert!(rsmq.receive("q", None).await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        rsmq.receive("q", None).await.unwrap().unwrap().body,
        "later"
    );
    // the queue's own delay attribute (whole seconds)
    rsmq.set_attributes(
        "q",
        QueueUpdate {
            delay: Some(1),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    rsmq.send("q", SendMessage::new("queue delay"))
        .await
        .unwrap();
    assert!(rsmq.receive("q", None).await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        rsmq.receive("q", None).await.unwrap().unwrap().body,
        "queue delay"
    );
}

pub async fn receive_batch_is_fifo_and_bounded(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let msgs: Vec<SendMessage> = (0..25).map(|i| SendMessage::new(format!("m{i}"))).collect();
    let ids = rsmq.send_batch("q", &msgs).await.unwrap();
    assert_eq!(ids.len(), 25);
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, ids, "ids sort in send order");
    let got = rsmq.receive_batch("q", 10, None).await.unwrap();
    let bodies: Vec<_> = got.iter().map(|m| m.body.clone()).collect();
    assert_eq!(bodies, (0..10).map(|i| format!("m{i}")).collect::<Vec<_>>());
    assert_eq!(rsmq.receive_batch("q", 100, None).await.unwrap().len(), 15);
    assert!(rsmq.receive_batch("q", 100, None).await.unwrap().is_empty());
    assert_eq!(rsmq.attributes("q").await.unwrap().totalrecv, 25);
    assert!(matches!(
        rsmq.receive_batch("nope", 1, None).await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(matches!(
        rsmq.receive("q", Some(Duration::from_secs(10_000_000)))
            .await,
        Err(Error::InvalidValue { what: "vt", .. })
    ));
}

pub async fn pop_removes_message(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    assert!(rsmq.pop("q").await.unwrap().is_none());
    let id = rsmq.send("q", SendMessage::new("p")).await.unwrap();
    let m = rsmq.pop("q").await.unwrap().unwrap();
    assert_eq!((m.id, m.body.as_str(), m.rc), (id, "p", 1));
    let a = rsmq.attributes("q").await.unwrap();
    assert_eq!((a.msgs, a.totalrecv), (0, 1));
    assert!(matches!(
        rsmq.pop("nope").await,
        Err(Error::QueueNotFound { .. })
    ));
}

pub async fn change_visibility_rehides_and_reveals(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let id = rsmq.send("q", SendMessage::new("v")).await.unwrap();
    rsmq.receive("q", Some(Duration::from_secs(100)))
        .await
        .unwrap()
        .unwrap();
    assert!(
        rsmq.change_visibility("q", &id, Duration::ZERO)
            .await
            .unwrap()
    );
    let again = rsmq.receive("q", None).await.unwrap().unwrap();
    assert_eq!((again.id, again.rc), (id, 2));
    rsmq.delete("q", &id).await.unwrap();
    assert!(
        !rsmq
            .change_visibility("q", &id, Duration::ZERO)
            .await
            .unwrap()
    );
    assert!(matches!(
        rsmq.change_visibility("nope", &id, Duration::ZERO).await,
        Err(Error::QueueNotFound { .. })
    ));
    assert!(matches!(
        rsmq.change_visibility("q", &id, Duration::from_secs(10_000_000))
            .await,
        Err(Error::InvalidValue { .. })
    ));
}

pub async fn delete_batch_counts_existing(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let ids = rsmq
        .send_batch(
            "q",
            &(0..5)
                .map(|i| SendMessage::new(i.to_string()))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    rsmq.delete("q", &ids[0]).await.unwrap();
    assert_eq!(rsmq.delete_batch("q", &ids).await.unwrap(), 4);
    assert_eq!(rsmq.attributes("q").await.unwrap().msgs, 0);
    assert!(matches!(
        rsmq.delete_batch("bad name", &ids).await,
        Err(Error::InvalidQueueName { .. })
    ));
}

pub async fn batch_over_maxsize_sends_nothing(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue(
        "q",
        QueueOptions {
            maxsize: 2048,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut msgs: Vec<SendMessage> = (0..2500).map(|i| SendMessage::new(i.to_string())).collect();
    msgs.push(SendMessage::new(vec![b'x'; 4096]));
    assert!(matches!(
        rsmq.send_batch("q", &msgs).await,
        Err(Error::MessageTooLarge {
            size: 4096,
            max: 2048
        })
    ));
    assert_eq!(rsmq.attributes("q").await.unwrap().msgs, 0);
}

/// Times at the ends of `u64` and `Duration`: never a panic, the same answer on
/// every backend. A send at `u64::MAX` ms is stored and never becomes visible;
/// durations over RSMQ's 9999999 s are refused as invalid.
pub async fn absurd_times_are_stored_or_refused_never_a_panic(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    // due times past the year 2096 are refused, the whole batch with them
    for at in [u64::MAX, redjob::queue::LAST_DUE_MS + 1] {
        assert!(matches!(
            rsmq.send_batch(
                "q",
                &[
                    SendMessage::new("b0"),
                    SendMessage::new("b1").at_unix_ms(at)
                ]
            )
            .await,
            Err(Error::InvalidValue {
                what: "due time",
                ..
            })
        ));
    }
    let far = rsmq
        .send(
            "q",
            SendMessage::new("far").at_unix_ms(redjob::queue::LAST_DUE_MS),
        )
        .await
        .unwrap();
    rsmq.send("q", SendMessage::new("b").delay(redjob::queue::MAX_AHEAD))
        .await
        .unwrap();
    let a = rsmq.attributes("q").await.unwrap();
    assert_eq!((a.msgs, a.hiddenmsgs, a.totalsent), (2, 2, 2));
    // scheduled, not taken for a lease that ran out
    let backend = env.client.backend();
    use redjob::inspect::Inspect;
    assert_eq!(backend.counts("q").await.unwrap().scheduled, 2);
    let got = redjob::backend::Backend::fetch(&backend, "q", 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(got.jobs.is_empty(), "nothing is due");
    assert!(rsmq.receive("q", None).await.unwrap().is_none());
    assert!(rsmq.pop("q").await.unwrap().is_none());

    for d in [Duration::MAX, Duration::from_secs(u64::MAX / 1000)] {
        assert!(matches!(
            rsmq.send("q", SendMessage::new("x").delay(d)).await,
            Err(Error::InvalidValue { what: "delay", .. })
        ));
        assert!(matches!(
            rsmq.receive_batch("q", usize::MAX, Some(d)).await,
            Err(Error::InvalidValue { what: "vt", .. })
        ));
        assert!(matches!(
            rsmq.change_visibility("q", &far, d).await,
            Err(Error::InvalidValue { what: "vt", .. })
        ));
    }
    // the far message comes back at once, and the largest count is no error
    assert!(
        rsmq.change_visibility("q", &far, Duration::ZERO)
            .await
            .unwrap()
    );
    let got = rsmq.receive_batch("q", usize::MAX, None).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].id, got[0].body.as_str()), (far, "far"));
    assert_eq!(rsmq.attributes("q").await.unwrap().totalsent, 2);
}

/// Ids sort in send order across calls too, so equal scores deliver in send
/// order: a later send sorts after every message of an earlier batch, even when
/// the backend's clock has not moved (the memory backend on a paused clock).
pub async fn later_sends_sort_after_an_earlier_batch(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let batch = |from: usize, n: usize| -> Vec<SendMessage> {
        (from..from + n)
            .map(|i| SendMessage::new(format!("m{i}")))
            .collect()
    };
    let mut ids = rsmq.send_batch("q", &batch(0, 3)).await.unwrap();
    ids.push(rsmq.send("q", SendMessage::new("m3")).await.unwrap());
    ids.extend(rsmq.send_batch("q", &batch(4, 2)).await.unwrap());
    ids.push(rsmq.send("q", SendMessage::new("m6")).await.unwrap());
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, ids, "ids sort in send order");
    let got = rsmq.receive_batch("q", 10, None).await.unwrap();
    let bodies: Vec<_> = got.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies, ["m0", "m1", "m2", "m3", "m4", "m5", "m6"]);
    let now_ms = env
        .now()
        .await
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        got.iter().all(|m| m.sent <= now_ms && m.fr >= m.sent),
        "sent is the send time: {got:?}"
    );
}

/// A queue that does not exist answers alike on every backend: a settle
/// finds each of its jobs gone, a fetch of any size finds none.
pub async fn a_missing_queue_settles_every_job_gone_and_fetches_none(env: &Env) {
    use redjob::backend::{Backend, Settle};
    let b = env.client.backend();
    let q = env.queues();
    q.create_queue("brief", QueueOptions::default())
        .await
        .unwrap();
    Queues::send(q, "brief", SendMessage::new("x"))
        .await
        .unwrap();
    let f = b
        .fetch("brief", usize::MAX, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(f.jobs.len(), 1, "a fetch of any size");
    let (id, token) = (f.jobs[0].id, f.jobs[0].token);
    q.delete_queue("brief").await.unwrap();
    let settle = Settle {
        acks: vec![(id, token)],
        ..Settle::default()
    };
    let s = b.settle("brief", &settle).await.unwrap();
    assert_eq!((s.acked, s.gone.as_slice()), (0, &[id][..]), "{s:?}");
    let f = b
        .fetch("brief", usize::MAX, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(f.jobs.is_empty());
}

/// A message with two bad values is refused for the same one on every
/// backend, checked in one order: its priority, its concurrency key, its
/// delay, its unique key (the memory backend named the delay first).
pub async fn a_message_with_two_bad_values_is_refused_for_the_same_one(env: &Env) {
    use redjob::queue::{Keyed, Unique};
    let q = env.queues();
    q.create_queue("two_bad", QueueOptions::default())
        .await
        .unwrap();
    let far = Duration::from_secs(60 * 365 * 86_400);
    let cases = [
        (SendMessage::new("x").priority(11).delay(far), "priority"),
        (
            SendMessage::new("x")
                .keyed(Keyed::new(""))
                .delay(far)
                .unique(Unique::new("")),
            "concurrency key",
        ),
        (
            SendMessage::new("x").delay(far).unique(Unique::new("")),
            "delay",
        ),
    ];
    for (m, what) in cases {
        for msgs in [vec![m.clone()], vec![SendMessage::new("ok"), m]] {
            let r = q.send_outcomes("two_bad", &msgs).await;
            assert!(
                matches!(&r, Err(Error::InvalidValue { what: w, .. }) if *w == what),
                "{what} first, with {} messages: {r:?}",
                msgs.len()
            );
        }
    }
    // nothing was sent
    assert_eq!(q.attributes("two_bad").await.unwrap().msgs, 0);
}
