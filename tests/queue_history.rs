//! The history's index in Redis (`ns:q:history:ids`, a list of ids oldest
//! first): a history indexed by the sorted set of before is moved into it and
//! trimmed, a requeued dead letter is listed once and its entry kept right
//! when its job finishes again, and pages of jobs finished in one ms have no gaps or repeats.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::RedisServer;
use redjob::JobId;
use redjob::backend::redis::RedisBackend;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::inspect::{Finish, Inspect, JobInfo, JobState};
use redjob::ops::{Admin, History, QueueSettings, Spread};
use redjob::queue::{Rsmq, SendMessage};

const LONG: Duration = Duration::from_secs(60);

async fn with_queue(server: &RedisServer, keep: u64) -> (RedisBackend, Rsmq) {
    let (backend, rsmq) = common::backend_with_queue(server).await;
    set_keep(&backend, keep).await;
    (backend, rsmq)
}

async fn set_keep(backend: &RedisBackend, keep: u64) {
    let h = History {
        max_count: Some(keep),
        ..History::default()
    };
    Admin::set_settings(backend, "q", &QueueSettings::history(h))
        .await
        .unwrap();
}

/// Sends `n` jobs and acks them, up to 256 a settle; their ids.
async fn run_ok(backend: &RedisBackend, rsmq: &Rsmq, n: usize) -> Vec<JobId> {
    let msgs: Vec<SendMessage> = (0..n)
        .map(|i| SendMessage::new(format!(r#"{{"type":"Mail","args":{{"i":{i}}}}}"#)))
        .collect();
    let mut ids = Vec::new();
    for chunk in msgs.chunks(1000) {
        ids.extend(rsmq.send_batch("q", chunk).await.unwrap());
    }
    let mut done = 0;
    while done < n {
        let jobs = backend.fetch("q", 256, LONG).await.unwrap().jobs;
        assert!(!jobs.is_empty(), "the jobs sent are due");
        let settle = Settle {
            acks: jobs.iter().map(|d| (d.id, d.token)).collect(),
            ..Settle::default()
        };
        done += backend.settle("q", &settle).await.unwrap().acked as usize;
    }
    ids
}

/// The whole history, newest first, by pages of `per`.
async fn listed(backend: &RedisBackend, per: usize) -> Vec<JobInfo> {
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let page = backend
            .list("q", JobState::Finished, cursor.as_ref(), per)
            .await
            .unwrap();
        all.extend(page.jobs);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return all,
        }
    }
}

fn ids_of(jobs: &[JobInfo]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

fn at_ms(job: &JobInfo) -> u64 {
    job.finished.as_ref().expect("finished").at_ms
}

async fn llen(con: &mut redis::aio::MultiplexedConnection, key: &str) -> usize {
    redis::cmd("LLEN").arg(key).query_async(con).await.unwrap()
}

/// A history written before the list (ids in the sorted set `ns:q:history`)
/// is listed in full, newest first, while history.lua moves it into the list
/// at most 1000 a call, behind the jobs finished since; then trimmed to the
/// count from its oldest, their entries with them. A dead letter of then,
/// requeued before the move and run after it, is listed once.
#[tokio::test]
async fn a_history_indexed_by_the_sorted_set_of_before_is_moved_into_the_list() {
    let server = RedisServer::start();
    let (backend, rsmq) = with_queue(&server, 5000).await;
    let mut con = server.raw().await;
    run_ok(&backend, &rsmq, 1500).await;
    let y = rsmq
        .send("q", SendMessage::new(r#"{"type":"Mail","args":{}}"#))
        .await
        .unwrap();
    kill(&backend, y).await;
    let before = listed(&backend, 1000).await;
    assert_eq!(before.len(), 1501);
    // as the code before wrote it: the ids by finish ms, no list
    let mut zadd = redis::cmd("ZADD");
    zadd.arg("rsmq:q:history");
    for job in &before {
        zadd.arg(at_ms(job)).arg(job.id.to_string());
    }
    let () = zadd.query_async(&mut con).await.unwrap();
    let () = redis::cmd("DEL")
        .arg("rsmq:q:history:ids")
        .query_async(&mut con)
        .await
        .unwrap();
    let legacy = before[700].id;
    let found = backend.job("q", &legacy).await.unwrap().expect("by id");
    assert_eq!(found.state, JobState::Finished);

    // jobs finished since are in the list; the sorted set's go behind them
    let since = run_ok(&backend, &rsmq, 3).await;
    assert_eq!(
        backend.requeue_dead("q", &[y], Spread::NOW).await.unwrap(),
        1
    );
    let all = listed(&backend, 100).await;
    assert_eq!(all.len(), 1504);
    let mut newest: Vec<JobId> = ids_of(&all[..3]);
    newest.sort();
    let mut want_new = since.clone();
    want_new.sort();
    assert_eq!(newest, want_new);
    // the sorted set's order: by finish ms, then id, newest first
    let mut old = before.clone();
    old.sort_by_key(|j| std::cmp::Reverse((at_ms(j), j.id.to_string())));
    assert_eq!(ids_of(&all[3..]), ids_of(&old));
    let zcard: usize = redis::cmd("ZCARD")
        .arg("rsmq:q:history")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(zcard, 0, "moved in two calls of 1000 at most");
    assert_eq!(llen(&mut con, "rsmq:q:history:ids").await, 1504);

    // the requeued letter runs again: listed once, as succeeded
    tokio::time::sleep(Duration::from_millis(5)).await;
    run_again(&backend, y).await;
    let all = listed(&backend, 100).await;
    assert_eq!(all.len(), 1504);
    assert_eq!(all[0].id, y);
    assert_eq!(how(&all[0]), Finish::Succeeded);
    assert_eq!(all.iter().filter(|j| j.id == y).count(), 1);

    // a count of 1000: the oldest go, with their entries, down to a
    // twentieth under it (950); y's old place, among the newest, stands for
    // no entry and is not counted (it was, and one fewer were kept)
    set_keep(&backend, 1000).await;
    let kept = listed(&backend, 1000).await;
    let first_diff = kept.iter().zip(&all).position(|(a, b)| a.id != b.id);
    assert_eq!((kept.len(), first_diff), (950, None));
    assert_eq!(llen(&mut con, "rsmq:q:history:ids").await, 951);
    let oldest = all[1503].id;
    let gone: bool = redis::cmd("HEXISTS")
        .arg("rsmq:q:history:Q")
        .arg(oldest.to_string())
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(!gone, "a trimmed entry leaves the hash");
    assert!(backend.job("q", &oldest).await.unwrap().is_none());
    let job = backend.job("q", &y).await.unwrap().expect("y's new entry");
    assert_eq!(how(&job), Finish::Succeeded);
}

/// Fetches `id` (due, alone) and acks it.
async fn run_again(backend: &RedisBackend, id: JobId) {
    let d = backend.fetch("q", 1, LONG).await.unwrap().jobs.remove(0);
    assert_eq!(d.id, id);
    let ack = Settle {
        acks: vec![(id, d.token)],
        ..Settle::default()
    };
    assert_eq!(backend.settle("q", &ack).await.unwrap().acked, 1);
}

/// Runs `id` (sent already) until it is dead-lettered.
async fn kill(backend: &RedisBackend, id: JobId) {
    let d = backend.fetch("q", 1, LONG).await.unwrap().jobs.remove(0);
    assert_eq!(d.id, id);
    let dead = Settle {
        dead: vec![DeadLetterEntry {
            id,
            token: d.token,
            error: "fatal".into(),
        }],
        ..Settle::default()
    };
    backend.settle("q", &dead).await.unwrap();
}

fn how(job: &JobInfo) -> Finish {
    job.finished.as_ref().expect("finished").how
}

/// A dead letter requeued keeps its entry (listed, found by id) until its job
/// finishes again; then only the new entry is listed, and trimming the old
/// one's place in the list leaves the new entry. A dead letter deleted is
/// listed once, as deleted.
#[tokio::test]
async fn a_requeued_dead_letter_is_listed_once_and_its_new_entry_outlives_the_old() {
    let server = RedisServer::start();
    let (backend, rsmq) = with_queue(&server, 3).await;
    let x = rsmq
        .send("q", SendMessage::new(r#"{"type":"Mail","args":{}}"#))
        .await
        .unwrap();
    kill(&backend, x).await;
    // (the next ms: the new entry is told apart by its time)
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        backend.requeue_dead("q", &[x], Spread::NOW).await.unwrap(),
        1
    );
    let page = listed(&backend, 10).await;
    assert_eq!(ids_of(&page), [x]);
    assert_eq!(how(&page[0]), Finish::Dead);
    // it runs again and succeeds
    run_again(&backend, x).await;
    let page = listed(&backend, 10).await;
    assert_eq!(ids_of(&page), [x]);
    assert_eq!(how(&page[0]), Finish::Succeeded);
    // two more: the list holds 4 places for a count of 3, one of them (x's
    // dead entry's) standing for no entry: it is not counted, and all 3
    // entries stay; x's new entry among them
    let more = run_ok(&backend, &rsmq, 2).await;
    let page = listed(&backend, 10).await;
    assert_eq!(page.len(), 3);
    assert!(ids_of(&page).contains(&x));
    let job = backend.job("q", &x).await.unwrap().expect("x's new entry");
    assert_eq!(job.state, JobState::Finished);
    assert_eq!(how(&job), Finish::Succeeded);
    let mut con = server.raw().await;
    assert_eq!(llen(&mut con, "rsmq:q:history:ids").await, 4);

    // a dead letter deleted: one entry, deleted
    let y = rsmq
        .send("q", SendMessage::new(r#"{"type":"Mail","args":{}}"#))
        .await
        .unwrap();
    kill(&backend, y).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(backend.delete_dead("q", &[y]).await.unwrap(), 1);
    let page = listed(&backend, 10).await;
    let ys: Vec<&JobInfo> = page.iter().filter(|j| j.id == y).collect();
    assert_eq!(ys.len(), 1, "listed once: {page:?}");
    assert!(ids_of(&page).contains(&more[1]));
}

/// A settle's jobs share their finish ms: pages of 7 through 600 of them
/// list each once.
#[tokio::test]
async fn pages_through_jobs_finished_in_one_ms_list_each_once() {
    let server = RedisServer::start();
    let (backend, rsmq) = with_queue(&server, 5000).await;
    let ids = run_ok(&backend, &rsmq, 600).await;
    let all = listed(&backend, 7).await;
    assert_eq!(all.len(), 600);
    let seen: HashSet<JobId> = ids_of(&all).into_iter().collect();
    assert_eq!(seen, ids.into_iter().collect::<HashSet<_>>());
    // newest first
    assert!(all.windows(2).all(|w| at_ms(&w[0]) >= at_ms(&w[1])));
}

/// Bodies go at their age for dead jobs too (listed as `~<ms> <id>`); a
/// requeued dead letter's old place, due first, leaves the body of its new
/// entry.
#[tokio::test]
async fn a_dead_jobs_body_goes_at_its_age_and_a_requeued_ones_new_body_stays() {
    let server = RedisServer::start();
    let (backend, rsmq) = with_queue(&server, 100).await;
    let h = History {
        max_count: Some(100),
        args_max_age: Some(Duration::from_millis(300)),
        ..History::default()
    };
    Admin::set_settings(&backend, "q", &QueueSettings::history(h))
        .await
        .unwrap();
    let body = r#"{"type":"Mail","args":{"to":"a"}}"#;
    let dead = rsmq.send("q", SendMessage::new(body)).await.unwrap();
    kill(&backend, dead).await;
    let y = rsmq.send("q", SendMessage::new(body)).await.unwrap();
    kill(&backend, y).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        backend.requeue_dead("q", &[y], Spread::NOW).await.unwrap(),
        1
    );
    run_again(&backend, y).await;
    // a read trims: `dead`'s body and y's old place are past 300 ms
    let page = listed(&backend, 10).await;
    assert_eq!(ids_of(&page), [y, dead]);
    let mut con = server.raw().await;
    let entry = |id: JobId| {
        let mut con = con.clone();
        async move {
            let e: String = redis::cmd("HGET")
                .arg("rsmq:q:history:Q")
                .arg(id.to_string())
                .query_async(&mut con)
                .await
                .unwrap();
            e
        }
    };
    let head = entry(dead).await;
    let words: Vec<&str> = head.lines().next().unwrap().split(' ').collect();
    assert_eq!((words[1], words[4]), ("dead", "0"), "{head:?}");
    assert!(!head.ends_with(body), "the body went");
    let new = entry(y).await;
    assert!(new.starts_with("h1 succeeded "), "{new:?}");
    assert!(new.ends_with(body), "y's new entry keeps its body: {new:?}");
    assert_eq!(llen(&mut con, "rsmq:q:history:ids").await, 3);
}

/// A dead letter requeued in the ms it died waits for the next: its new
/// entry is then of a later ms than its dead one, which its `~<ms> <id>`
/// place stands for only while it is the entry.
#[tokio::test]
async fn a_dead_letter_is_requeued_after_the_ms_it_died() {
    let server = RedisServer::start();
    let (backend, rsmq) = with_queue(&server, 100).await;
    for _ in 0..20 {
        let x = rsmq
            .send("q", SendMessage::new(r#"{"type":"Mail","args":{}}"#))
            .await
            .unwrap();
        kill(&backend, x).await;
        let died = backend.job("q", &x).await.unwrap().expect("dead").due_ms;
        assert_eq!(
            backend.requeue_dead("q", &[x], Spread::NOW).await.unwrap(),
            1
        );
        let due = backend.job("q", &x).await.unwrap().expect("queued").due_ms;
        assert!(due > died, "requeued at {due}, died at {died}");
        run_again(&backend, x).await;
    }
}

/// A page that ends on a requeued letter's old place (not shown) goes on from
/// it: the jobs that died in the same settle before it are listed next.
#[tokio::test]
async fn a_page_ending_on_an_old_place_goes_on_from_it() {
    let server = RedisServer::start();
    let (backend, rsmq) = with_queue(&server, 100).await;
    let ids = rsmq
        .send_batch(
            "q",
            &[
                SendMessage::new(r#"{"type":"Mail","args":{"i":1}}"#),
                SendMessage::new(r#"{"type":"Mail","args":{"i":2}}"#),
            ],
        )
        .await
        .unwrap();
    // both die in one settle: one ms, a's place before x's
    let leased = backend.fetch("q", 2, LONG).await.unwrap().jobs;
    let dead = Settle {
        dead: leased
            .iter()
            .map(|d| DeadLetterEntry {
                id: d.id,
                token: d.token,
                error: "fatal".into(),
            })
            .collect(),
        ..Settle::default()
    };
    backend.settle("q", &dead).await.unwrap();
    let mut con = server.raw().await;
    let places: Vec<String> = redis::cmd("LRANGE")
        .arg("rsmq:q:history:ids")
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await
        .unwrap();
    let a = ids
        .iter()
        .copied()
        .find(|id| places[0].ends_with(&id.to_string()))
        .unwrap();
    let x = ids.iter().copied().find(|id| *id != a).unwrap();
    assert_eq!(
        backend.requeue_dead("q", &[x], Spread::NOW).await.unwrap(),
        1
    );
    run_again(&backend, x).await;
    // pages of one: x (its new entry), then x's old place (no row), then a
    let all = listed(&backend, 1).await;
    assert_eq!(ids_of(&all), [x, a]);
    assert_eq!(how(&all[0]), Finish::Succeeded);
    assert_eq!(how(&all[1]), Finish::Dead);
}

/// A memory backend that records the page sizes `history` asks `list` for.
struct Asked {
    inner: redjob::backend::memory::MemoryBackend,
    sizes: std::sync::Mutex<Vec<usize>>,
}

impl Inspect for Asked {
    async fn counts(&self, queue: &str) -> redjob::Result<redjob::inspect::StateCounts> {
        self.inner.counts(queue).await
    }
    async fn latency(&self, queue: &str) -> redjob::Result<Option<std::time::Duration>> {
        self.inner.latency(queue).await
    }
    async fn peek(&self, queue: &str, n: usize) -> redjob::Result<Vec<JobInfo>> {
        self.inner.peek(queue, n).await
    }
    async fn job(&self, queue: &str, id: &JobId) -> redjob::Result<Option<JobInfo>> {
        self.inner.job(queue, id).await
    }
    async fn list(
        &self,
        queue: &str,
        state: redjob::inspect::JobState,
        after: Option<&redjob::inspect::Cursor>,
        n: usize,
    ) -> redjob::Result<redjob::inspect::Page> {
        self.sizes.lock().unwrap().push(n);
        self.inner.list(queue, state, after, n).await
    }
    async fn cancel_by(
        &self,
        queue: &str,
        id: &JobId,
        by: &str,
    ) -> redjob::Result<redjob::inspect::Cancelled> {
        self.inner.cancel_by(queue, id, by).await
    }
}

#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "qh_tick", queue = "qh_ticks")]
struct Tick;

impl redjob::Job for Tick {
    async fn perform(&self, _: &redjob::JobContext) -> Result<(), redjob::JobError> {
        Ok(())
    }
}

/// A history page of 50 read 1,000 entries (a whole `list` page) whatever
/// it showed; a filtered one reads in pages that grow from its size.
#[tokio::test]
async fn a_history_page_reads_as_many_entries_as_it_shows() {
    let kit = redjob::testing::TestKit::new();
    for _ in 0..300 {
        kit.client().enqueue(&Tick).await.unwrap();
    }
    assert_eq!(kit.run_until_idle().await.unwrap().processed, 300);
    let asked = Asked {
        inner: kit.backend().clone(),
        sizes: Default::default(),
    };
    let all = redjob::inspect::HistoryQuery::default();
    let page = asked.history("qh_ticks", &all, None, 50).await.unwrap();
    assert_eq!(page.jobs.len(), 50);
    assert_eq!(*asked.sizes.lock().unwrap(), [50], "one page of its size");
    // a filter that matches nothing reads on, in growing pages, to the end
    asked.sizes.lock().unwrap().clear();
    let none = redjob::inspect::HistoryQuery::default().job_type("no_such_type");
    let page = asked.history("qh_ticks", &none, None, 50).await.unwrap();
    assert!(page.jobs.is_empty() && page.next.is_none());
    let sizes = asked.sizes.lock().unwrap().clone();
    assert_eq!(sizes.first(), Some(&50), "{sizes:?}");
    assert!(sizes.windows(2).all(|w| w[1] >= w[0]), "{sizes:?}");
}
