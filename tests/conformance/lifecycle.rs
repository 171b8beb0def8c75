//! A queue's life: created, listed, deleted with everything redjob kept for it,
//! and created again from nothing.

use std::time::Duration;

use redjob::Error;
use redjob::backend::any::AnyBackend;
use redjob::backend::{Backend, DeadLetterEntry, QueueStats, Reschedule, Settle};
use redjob::queue::{QueueOptions, Queues, SendMessage};

use super::Env;

pub async fn create_list_delete_queue(env: &Env) {
    let rsmq = env.queues();
    rsmq.create_queue("a", QueueOptions::default())
        .await
        .unwrap();
    rsmq.create_queue(
        "b-2_x",
        QueueOptions {
            vt: 5,
            delay: 1,
            maxsize: -1,
        },
    )
    .await
    .unwrap();
    let mut names = rsmq.list_queues().await.unwrap();
    names.sort();
    assert_eq!(names, ["a", "b-2_x"]);
    assert!(matches!(
        rsmq.create_queue("a", QueueOptions::default()).await,
        Err(Error::QueueExists { name }) if name == "a"
    ));
    rsmq.delete_queue("a").await.unwrap();
    assert_eq!(rsmq.list_queues().await.unwrap(), ["b-2_x"]);
    assert!(matches!(
        rsmq.delete_queue("a").await,
        Err(Error::QueueNotFound { .. })
    ));
}

/// Deleting a queue also deletes redjob's own keys of it (dead letters and
/// counters): a queue created again under the same name starts from zero.
pub async fn delete_queue_removes_dead_letters_and_stats(env: &Env) {
    let rsmq = env.queues();
    let backend = env.client.backend();
    rsmq.create_queue("life", QueueOptions::default())
        .await
        .unwrap();
    let msgs: Vec<_> = (0..3).map(|i| SendMessage::new(format!("m{i}"))).collect();
    rsmq.send_batch("life", &msgs).await.unwrap();
    let fetched = backend
        .fetch("life", 10, Duration::from_secs(30))
        .await
        .unwrap();
    let [a, b, c] = fetched.jobs.as_slice() else {
        panic!("fetched {} jobs", fetched.jobs.len());
    };
    let settle = Settle {
        acks: vec![(a.id, a.token)],
        reschedules: vec![Reschedule {
            id: b.id,
            token: b.token,
            delay: Duration::from_secs(60),
            deliveries: 1,
            release: false,
            error: None,
        }],
        dead: vec![DeadLetterEntry {
            id: c.id,
            token: c.token,
            error: "boom".into(),
        }],
        retention: Default::default(),
        ..Settle::default()
    };
    backend.settle("life", &settle).await.unwrap();
    let before = backend.stats("life").await.unwrap();
    assert_eq!((before.processed, before.retried, before.dead), (1, 1, 1));
    assert_eq!(backend.dead_letters("life", 10).await.unwrap().len(), 1);

    rsmq.delete_queue("life").await.unwrap();
    assert_eq!(backend.stats("life").await.unwrap(), QueueStats::default());
    assert!(backend.dead_letters("life", 10).await.unwrap().is_empty());
    rsmq.create_queue("life", QueueOptions::default())
        .await
        .unwrap();
    assert_eq!(backend.stats("life").await.unwrap(), QueueStats::default());
    assert!(backend.dead_letters("life", 10).await.unwrap().is_empty());
    let a = rsmq.attributes("life").await.unwrap();
    assert_eq!((a.msgs, a.totalsent, a.totalrecv), (0, 0, 0));
}

/// Each settle call adds its runs to its minute; [`Backend::minutes`] reads the
/// last hour, minute by minute, and the counters beside it stay readable. A
/// minute older than the hour neither shows nor adds to the minute that takes its
/// place in the ring.
pub async fn settled_runs_are_counted_per_minute_over_the_last_hour(env: &Env) {
    use redjob::backend::MINUTES;
    let rsmq = env.queues();
    let backend = &env.client.backend();
    rsmq.create_queue("rate", QueueOptions::default())
        .await
        .unwrap();
    let empty = backend.minutes("rate").await.unwrap();
    assert_eq!(empty.len(), MINUTES);
    assert!(empty.iter().all(|m| m.processed + m.failed == 0));
    let settle_some = |acks: usize, fails: usize| async move {
        let msgs: Vec<_> = (0..acks + fails)
            .map(|i| SendMessage::new(format!("m{i}")))
            .collect();
        rsmq.send_batch("rate", &msgs).await.unwrap();
        let fetched = backend
            .fetch("rate", 100, Duration::from_secs(30))
            .await
            .unwrap();
        let (a, f) = fetched.jobs.split_at(acks);
        let settle = Settle {
            acks: a.iter().map(|j| (j.id, j.token)).collect(),
            reschedules: f[1..]
                .iter()
                .map(|j| Reschedule {
                    id: j.id,
                    token: j.token,
                    delay: Duration::from_secs(3 * 3600),
                    deliveries: 1,
                    release: false,
                    error: None,
                })
                .collect(),
            dead: vec![DeadLetterEntry {
                id: f[0].id,
                token: f[0].token,
                error: "boom".into(),
            }],
            retention: Default::default(),
            ..Settle::default()
        };
        backend.settle("rate", &settle).await.unwrap();
    };

    // a stale entry where this minute's goes: what a ring left from an hour ago
    let now_ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
    };
    let minute = now_ms(env.now().await) / 60_000;
    if env.is_redis() {
        let mut con = env.raw().await;
        let stale = minute - MINUTES as u64;
        let ago = minute - 30;
        let _: () = redis::cmd("HSET")
            .arg(env.key("rate", ":stats"))
            .arg(format!("m{}", stale % MINUTES as u64))
            .arg(format!("{stale} 7 7"))
            .arg(format!("m{}", ago % MINUTES as u64))
            .arg(format!("{ago} 4 5"))
            .query_async(&mut con)
            .await
            .unwrap();
    } else if let AnyBackend::Memory(m) = rsmq {
        // this minute's slot, 61 minutes before the last settle: replaced, not added to
        settle_some(7, 7).await;
        m.clock().advance_exact(Duration::from_secs(31 * 60));
        settle_some(4, 5).await; // lands 30 minutes before the next settle
        m.clock().advance_exact(Duration::from_secs(30 * 60));
    }
    settle_some(2, 3).await;

    let at = now_ms(env.now().await);
    let minutes = backend.minutes("rate").await.unwrap();
    assert_eq!(minutes.len(), MINUTES);
    for pair in minutes.windows(2) {
        assert_eq!(pair[1].start_ms, pair[0].start_ms + 60_000);
    }
    let last = minutes[MINUTES - 1];
    assert!(last.start_ms <= at && at < last.start_ms + 60_000);
    let counted: Vec<(usize, u64, u64)> = minutes
        .iter()
        .enumerate()
        .filter(|(_, m)| m.processed + m.failed > 0)
        .map(|(i, m)| (i, m.processed, m.failed))
        .collect();
    // the settle ran in the last minute, or (past a minute's turn) the one before
    let (newest, older) = counted.split_last().unwrap();
    assert!(newest.0 >= MINUTES - 2, "{counted:?}");
    assert_eq!((newest.1, newest.2), (2, 3), "{counted:?}");
    assert_eq!(older.len(), 1, "{counted:?}");
    assert!(
        (29..=31).contains(&(MINUTES - 1 - older[0].0)),
        "{counted:?}"
    );
    assert_eq!((older[0].1, older[0].2), (4, 5));

    let stats = backend.stats("rate").await.unwrap();
    let want = if env.is_redis() { (2, 3) } else { (13, 15) };
    assert_eq!((stats.processed, stats.failed), want);
}

pub async fn settled_runs_are_counted_per_hour_over_the_last_week(env: &Env) {
    use redjob::backend::HOURS;
    use redjob::ops::{Admin, OverviewQuery};
    let rsmq = env.queues();
    let backend = &env.client.backend();
    rsmq.create_queue("week", QueueOptions::default())
        .await
        .unwrap();
    let empty = backend.hours("week").await.unwrap();
    assert_eq!(empty.len(), HOURS);
    assert!(empty.iter().all(|h| h.processed + h.failed == 0));
    let settle_some = |acks: usize, fails: usize| async move {
        let msgs: Vec<_> = (0..acks + fails)
            .map(|i| SendMessage::new(format!("h{i}")))
            .collect();
        rsmq.send_batch("week", &msgs).await.unwrap();
        let fetched = backend
            .fetch("week", 100, Duration::from_secs(30))
            .await
            .unwrap();
        let (a, f) = fetched.jobs.split_at(acks);
        let settle = Settle {
            acks: a.iter().map(|j| (j.id, j.token)).collect(),
            dead: f
                .iter()
                .map(|j| DeadLetterEntry {
                    id: j.id,
                    token: j.token,
                    error: "boom".into(),
                })
                .collect(),
            ..Settle::default()
        };
        backend.settle("week", &settle).await.unwrap();
    };
    let now_ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
    };
    let hour = now_ms(env.now().await) / 3_600_000;
    if env.is_redis() {
        // what a ring left from a week ago, where this hour's goes, and an
        // entry of 30 hours ago
        let mut con = env.raw().await;
        let stale = hour - HOURS as u64;
        let ago = hour - 30;
        let _: () = redis::cmd("HSET")
            .arg(env.key("week", ":stats"))
            .arg(format!("h{}", stale % HOURS as u64))
            .arg(format!("{stale} 7 7"))
            .arg(format!("h{}", ago % HOURS as u64))
            .arg(format!("{ago} 4 5"))
            .query_async(&mut con)
            .await
            .unwrap();
    } else if let AnyBackend::Memory(m) = rsmq {
        // this hour's slot, 169 hours before the last settle: replaced
        settle_some(7, 7).await;
        m.clock().advance_exact(Duration::from_secs(139 * 3600));
        settle_some(4, 5).await; // lands 30 hours before the next settle
        m.clock().advance_exact(Duration::from_secs(30 * 3600));
    }
    settle_some(2, 3).await;
    settle_some(1, 0).await;

    let at = now_ms(env.now().await);
    let hours = backend.hours("week").await.unwrap();
    assert_eq!(hours.len(), HOURS);
    for pair in hours.windows(2) {
        assert_eq!(pair[1].start_ms, pair[0].start_ms + 3_600_000);
    }
    let last = hours[HOURS - 1];
    assert!(last.start_ms <= at && at < last.start_ms + 3_600_000);
    let counted: Vec<(usize, u64, u64)> = hours
        .iter()
        .enumerate()
        .filter(|(_, h)| h.processed + h.failed > 0)
        .map(|(i, h)| (i, h.processed, h.failed))
        .collect();
    // the settles ran in the last hour, or (past an hour's turn) across it
    let (p, f) = counted
        .iter()
        .filter(|c| c.0 >= HOURS - 2)
        .fold((0, 0), |(p, f), c| (p + c.1, f + c.2));
    assert_eq!((p, f), (3, 3), "{counted:?}");
    let older: Vec<_> = counted.iter().filter(|c| c.0 < HOURS - 2).collect();
    assert_eq!(older.len(), 1, "{counted:?}");
    assert!((29..=31).contains(&(HOURS - 1 - older[0].0)), "{counted:?}");
    assert_eq!((older[0].1, older[0].2), (4, 5));
    // the overview reads the same ring, beside the minutes'
    let query = OverviewQuery::default()
        .filter("week")
        .with_minutes()
        .with_hours();
    let o = env.client.overview(&query).await.unwrap();
    let line = o.lines.iter().find(|l| l.name == "week").unwrap();
    assert_eq!(line.hours.len(), HOURS);
    assert_eq!(line.minutes.len(), redjob::backend::MINUTES);
    let week: u64 = line.hours.iter().map(|h| h.processed).sum();
    assert_eq!(week, 4 + 3, "{:?}", line.hours);
    let minutes: u64 = line.minutes.iter().map(|m| m.processed).sum();
    assert_eq!(minutes, 3);
    let only = OverviewQuery::default().filter("week").with_hours();
    let o = env.client.overview(&only).await.unwrap();
    assert_eq!(o.lines[0].hours, line.hours);
    assert!(o.lines[0].minutes.is_empty());
}
