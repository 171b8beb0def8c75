//! The overview of every queue: each line as the per-queue calls answer,
//! filtered by name, sorted, paged, with totals; on one Redis server, read in
//! one script call per 100 queues and one `HMGET` a queue for the rings
//! asked for, pipelined.

use std::time::Duration;

use redjob::backend::{Backend, MINUTES};
use redjob::inspect::{Inspect, StateCounts};
use redjob::ops::{Admin, OverviewQuery, OverviewSort};
use redjob::queue::{Keyed, QueueOptions, Queues, SendMessage};

use super::Env;

/// `cmdstat_<name>`'s calls on the env's server.
async fn calls(env: &Env, name: &str) -> u64 {
    crate::common::command_calls(&mut env.raw().await)
        .await
        .get(name)
        .copied()
        .unwrap_or(0)
}

/// Script calls and `HMGET`s so far on the env's server ((0, 0) without one).
async fn counted(env: &Env) -> (u64, u64) {
    match env.server {
        Some(_) => (calls(env, "evalsha").await, calls(env, "hmget").await),
        None => (0, 0),
    }
}

pub async fn the_overview_reads_every_queue_filters_sorts_and_pages(env: &Env) {
    let q = env.client.backend();
    for name in ["ov-a", "ov-b", "ov-c", "other"] {
        q.create_queue(name, QueueOptions::default()).await.unwrap();
    }
    for i in 0..3 {
        Queues::send(
            &q,
            "ov-a",
            SendMessage::new(format!("a{i}")).priority(i as i8),
        )
        .await
        .unwrap();
    }
    Queues::send(
        &q,
        "ov-a",
        SendMessage::new("later").delay(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    Queues::send(&q, "ov-b", SendMessage::new("b"))
        .await
        .unwrap();
    q.pause("ov-b").await.unwrap();
    super::ops::kill(env, "ov-c", &[("A", "down")], 0, Default::default()).await;
    let o = q
        .overview(&OverviewQuery::default().filter("ov-"))
        .await
        .unwrap();
    assert_eq!(o.matched, 3);
    let names: Vec<&str> = o.lines.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["ov-a", "ov-b", "ov-c"], "by name by default");
    for l in &o.lines {
        assert_eq!(l.counts, q.counts(&l.name).await.unwrap(), "{}", l.name);
        assert_eq!(l.stats, q.stats(&l.name).await.unwrap(), "{}", l.name);
        assert_eq!(l.paused, l.name == "ov-b");
        assert_eq!(l.latency.is_some(), l.counts.ready > 0, "{l:?}");
        assert!(l.minutes.is_empty(), "not asked for");
    }
    assert_eq!(o.lines[0].counts.ready, 3);
    assert_eq!(o.lines[0].counts.scheduled, 1);
    assert_eq!((o.lines[2].counts.dead, o.lines[2].stats.dead), (1, 1));
    assert_eq!(o.total.counts.ready, 4);
    assert_eq!((o.total.queues, o.total.paused), (3, 1));
    // sorted by a column, largest first, a page of it; the totals are all pages'
    let o = q
        .overview(
            &OverviewQuery::default()
                .filter("ov-")
                .sort(OverviewSort::Dead)
                .descending()
                .page(0, 1),
        )
        .await
        .unwrap();
    assert_eq!(o.lines.len(), 1);
    assert_eq!((o.lines[0].name.as_str(), o.matched), ("ov-c", 3));
    assert_eq!(o.total.counts.dead, 1);
    let o = q
        .overview(
            &OverviewQuery::default()
                .sort(OverviewSort::Ready)
                .page(3, 10),
        )
        .await
        .unwrap();
    assert_eq!(o.matched, 4);
    assert_eq!(o.lines.len(), 1);
    assert_eq!(o.lines[0].name, "ov-a", "the most ready last");
    // the last hour, when asked for
    let o = q
        .overview(&OverviewQuery::default().filter("ov-c").with_minutes())
        .await
        .unwrap();
    let hour = &o.lines[0].minutes;
    assert_eq!(hour.len(), MINUTES);
    assert_eq!(hour, &q.minutes("ov-c").await.unwrap());
    assert_eq!(hour.iter().map(|m| m.failed).sum::<u64>(), 1);
    // nothing matches: no lines, no error
    let o = q
        .overview(&OverviewQuery::default().filter("nope"))
        .await
        .unwrap();
    assert_eq!((o.matched, o.lines.len()), (0, 0));
    if env.server.is_some() {
        // one server: the set of queues, then one script call for them all
        let (smembers, evalsha) = (calls(env, "smembers").await, calls(env, "evalsha").await);
        q.overview(&OverviewQuery::default()).await.unwrap();
        assert_eq!(calls(env, "smembers").await - smembers, 1);
        assert_eq!(calls(env, "evalsha").await - evalsha, 1);
    }
    // 120 queues with both rings: each line as the per-queue calls answer,
    // across the calls' boundary (100 queues a call on one server, the rings
    // read beside the calls)
    for i in 0..120 {
        q.create_queue(&format!("wk-{i:03}"), QueueOptions::default())
            .await
            .unwrap();
    }
    for name in ["wk-037", "wk-111"] {
        Queues::send(&q, name, SendMessage::new("x")).await.unwrap();
        let job = q
            .fetch(name, 1, Duration::from_secs(30))
            .await
            .unwrap()
            .jobs;
        let settle = redjob::backend::Settle {
            acks: job.iter().map(|d| (d.id, d.token)).collect(),
            ..Default::default()
        };
        q.settle(name, &settle).await.unwrap();
    }
    let wk = OverviewQuery::default().filter("wk-");
    let before = counted(env).await;
    q.overview(&wk).await.unwrap();
    let plain = counted(env).await;
    let o = q
        .overview(&wk.clone().with_minutes().with_hours())
        .await
        .unwrap();
    let with_rings = counted(env).await;
    if env.server.is_some() {
        // the same two calls either way, and one HMGET more a queue for its
        // rings, outside the calls
        assert_eq!(plain.0 - before.0, 2);
        assert_eq!(with_rings.0 - plain.0, 2);
        assert_eq!(
            (with_rings.1 - plain.1) - (plain.1 - before.1),
            120,
            "one HMGET a queue for the rings"
        );
    }
    assert_eq!(o.lines.len(), 120);
    for (i, line) in o.lines.iter().enumerate() {
        let name = format!("wk-{i:03}");
        assert_eq!(line.name, name);
        assert_eq!(line.minutes, q.minutes(&name).await.unwrap(), "{name}");
        assert_eq!(line.hours, q.hours(&name).await.unwrap(), "{name}");
        let ran = u64::from(i == 37 || i == 111);
        assert_eq!(
            line.minutes.iter().map(|m| m.processed).sum::<u64>(),
            ran,
            "{name}"
        );
        assert_eq!(
            line.hours.iter().map(|h| h.processed).sum::<u64>(),
            ran,
            "{name}"
        );
    }
}

/// The totals are the lines added up in every state, blocked jobs (waiting
/// for their concurrency key's place) among them: `Totals` summed ready,
/// scheduled, in flight and dead, and left `total.counts.blocked` at 0.
pub async fn the_overviews_totals_are_its_lines_added_up_in_every_state(env: &Env) {
    let q = env.client.backend();
    for name in ["tot-a", "tot-b", "tot-c"] {
        q.create_queue(name, QueueOptions::default()).await.unwrap();
    }
    let keyed = |i: usize| SendMessage::new(format!("k{i}")).keyed(Keyed::new("acct"));
    // tot-a: 1 ready and 2 blocked behind it, 1 scheduled
    let msgs: Vec<SendMessage> = (0..3).map(keyed).collect();
    Backend::send(&q, "tot-a", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    Queues::send(
        &q,
        "tot-a",
        SendMessage::new("later").delay(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    // tot-b: 1 in flight, 1 ready
    for i in 0..2 {
        Queues::send(&q, "tot-b", SendMessage::new(format!("b{i}")))
            .await
            .unwrap();
    }
    assert_eq!(
        q.fetch("tot-b", 1, Duration::from_secs(60))
            .await
            .unwrap()
            .jobs
            .len(),
        1
    );
    // tot-c: 1 dead, then 1 ready and 1 blocked behind it
    super::ops::kill(env, "tot-c", &[("A", "down")], 0, Default::default()).await;
    let msgs: Vec<SendMessage> = (0..2).map(keyed).collect();
    Backend::send(&q, "tot-c", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let o = q
        .overview(&OverviewQuery::default().filter("tot-"))
        .await
        .unwrap();
    assert_eq!(o.matched, 3);
    for l in &o.lines {
        assert_eq!(l.counts, q.counts(&l.name).await.unwrap(), "{}", l.name);
    }
    let sum = |f: fn(&StateCounts) -> u64| o.lines.iter().map(|l| f(&l.counts)).sum();
    let lines = StateCounts {
        ready: sum(|c| c.ready),
        scheduled: sum(|c| c.scheduled),
        in_flight: sum(|c| c.in_flight),
        dead: sum(|c| c.dead),
        blocked: sum(|c| c.blocked),
    };
    let want = StateCounts {
        ready: 3,
        scheduled: 1,
        in_flight: 1,
        dead: 1,
        blocked: 3,
    };
    assert_eq!(lines, want, "the lines: {:?}", o.lines);
    assert_eq!(o.total.counts, want, "the totals: {:?}", o.total);
    assert_eq!(o.total.counts.total(), 9);
    // a page of one line: the totals are still every matching line's
    let o = q
        .overview(&OverviewQuery::default().filter("tot-").page(0, 1))
        .await
        .unwrap();
    assert_eq!((o.lines.len(), o.total.counts), (1, want));
}
