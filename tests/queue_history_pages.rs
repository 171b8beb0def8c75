//! Paging through a queue's history while it changes: jobs that died in one
//! settle (one ms) are each listed once however the page's last job (the
//! cursor's) is requeued and finished again between two pages, on Redis and
//! on memory alike.

mod common;

use std::time::Duration;

use common::RedisServer;
use redjob::JobId;
use redjob::backend::memory::{Clock, MemoryBackend};
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::inspect::{Cursor, Inspect, JobState};
use redjob::ops::{Admin, History, QueueSettings, Spread};
use redjob::queue::{QueueOptions, Queues, SendMessage};

const LONG: Duration = Duration::from_secs(60);

/// What a backend under test needs, and how it lets time pass.
trait Under: Backend + Inspect + Admin + Sync {
    fn q(&self) -> &impl Queues;
    fn pass(&self, d: Duration) -> impl Future<Output = ()> + Send;
}

impl Under for redjob::backend::redis::RedisBackend {
    fn q(&self) -> &impl Queues {
        self.rsmq()
    }
    async fn pass(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

impl Under for MemoryBackend {
    fn q(&self) -> &impl Queues {
        self
    }
    async fn pass(&self, d: Duration) {
        self.clock().advance(d);
    }
}

async fn make_queue(b: &impl Under, keep: u64) {
    b.q()
        .create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let h = History {
        max_count: Some(keep),
        ..History::default()
    };
    Admin::set_settings(b, "q", &QueueSettings::history(h))
        .await
        .unwrap();
}

/// Sends `n` jobs and dead-letters them all in one settle (one ms).
async fn die_together(b: &impl Under, n: usize) -> Vec<JobId> {
    for i in 0..n {
        let body = format!(r#"{{"type":"Mail","args":{{"i":{i}}}}}"#);
        b.q().send("q", SendMessage::new(body)).await.unwrap();
    }
    let jobs = b.fetch("q", n, LONG).await.unwrap().jobs;
    assert_eq!(jobs.len(), n);
    let settle = Settle {
        dead: jobs
            .iter()
            .map(|d| DeadLetterEntry {
                id: d.id,
                token: d.token,
                error: "fatal".into(),
            })
            .collect(),
        ..Settle::default()
    };
    b.settle("q", &settle).await.unwrap();
    jobs.iter().map(|d| d.id).collect()
}

/// Requeues dead letter `id`, runs it again and settles it: acked, or dead
/// again.
async fn again(b: &impl Under, id: JobId, ack: bool) {
    b.pass(Duration::from_millis(3)).await;
    assert_eq!(b.requeue_dead("q", &[id], Spread::NOW).await.unwrap(), 1);
    b.pass(Duration::from_millis(3)).await;
    let d = b.fetch("q", 1, LONG).await.unwrap().jobs.remove(0);
    assert_eq!(d.id, id);
    let settle = if ack {
        Settle {
            acks: vec![(id, d.token)],
            ..Settle::default()
        }
    } else {
        Settle {
            dead: vec![DeadLetterEntry {
                id,
                token: d.token,
                error: "fatal again".into(),
            }],
            ..Settle::default()
        }
    };
    b.settle("q", &settle).await.unwrap();
}

/// Pages of one through 6 jobs that died in one ms, the shown job requeued
/// and finished again (acked, or dead again: `ack`) before the next page,
/// with `extra` more jobs dying meanwhile (a count of `keep` trims the
/// oldest): every job listed at first and kept throughout is listed once,
/// in the order of the first listing.
async fn pages_while_the_shown_jobs_finish_again(
    b: &impl Under,
    keep: u64,
    ack: bool,
    extra: usize,
) {
    make_queue(b, keep).await;
    let ids = die_together(b, 6).await;
    let first: Vec<JobId> = b
        .list("q", JobState::Finished, None, 100)
        .await
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(first.len(), 6);
    let mut shown = Vec::new();
    let mut cursor: Option<Cursor> = None;
    let mut extras = Vec::new();
    loop {
        let page = b
            .list("q", JobState::Finished, cursor.as_ref(), 1)
            .await
            .unwrap();
        shown.extend(page.jobs.iter().map(|j| j.id));
        let Some(next) = page.next else { break };
        // the cursor's job, if it is one of the six, finishes again
        if let Some(j) = page.jobs.first()
            && ids.contains(&j.id)
        {
            again(b, j.id, ack).await;
        }
        if extra > 0 {
            b.pass(Duration::from_millis(2)).await;
            extras.extend(die_together(b, extra).await);
        }
        cursor = Some(next);
        assert!(shown.len() < 100, "pages without end: {shown:?}");
    }
    // the jobs kept throughout: each of the six still in the history
    let now: Vec<JobId> = b
        .list("q", JobState::Finished, None, 1000)
        .await
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.id)
        .collect();
    let kept: Vec<JobId> = first
        .iter()
        .copied()
        .filter(|id| now.contains(id))
        .collect();
    let listed: Vec<JobId> = shown
        .iter()
        .copied()
        .filter(|id| ids.contains(id))
        .collect();
    for id in &kept {
        assert!(
            listed.contains(id),
            "{id} kept throughout but skipped: first {first:?}, listed {listed:?}, now {now:?}"
        );
    }
    for id in &ids {
        assert!(
            listed.iter().filter(|x| *x == id).count() <= 1,
            "{id} twice: {listed:?}"
        );
    }
}

async fn redis(server: &RedisServer) -> redjob::backend::redis::RedisBackend {
    redjob::backend::redis::RedisBackend::connect(
        &redjob::connection::RedisConfig::from_url(server.url()),
        "rsmq",
        false,
    )
    .await
    .unwrap()
}

fn memory() -> MemoryBackend {
    MemoryBackend::with_clock(Clock::new())
}

#[tokio::test]
async fn pages_list_each_job_of_one_ms_once_while_shown_ones_succeed_again_on_redis() {
    let server = RedisServer::start();
    let b = redis(&server).await;
    pages_while_the_shown_jobs_finish_again(&b, 1000, true, 0).await;
}

#[tokio::test]
async fn pages_list_each_job_of_one_ms_once_while_shown_ones_succeed_again_on_memory() {
    pages_while_the_shown_jobs_finish_again(&memory(), 1000, true, 0).await;
}

#[tokio::test]
async fn pages_list_each_job_of_one_ms_once_while_shown_ones_die_again_on_redis() {
    let server = RedisServer::start();
    let b = redis(&server).await;
    pages_while_the_shown_jobs_finish_again(&b, 1000, false, 0).await;
}

#[tokio::test]
async fn pages_list_each_job_of_one_ms_once_while_shown_ones_die_again_on_memory() {
    pages_while_the_shown_jobs_finish_again(&memory(), 1000, false, 0).await;
}

#[tokio::test]
async fn pages_list_each_job_kept_once_while_the_count_trims_on_redis() {
    for keep in [6, 7, 8, 9] {
        for ack in [true, false] {
            let server = RedisServer::start();
            let b = redis(&server).await;
            pages_while_the_shown_jobs_finish_again(&b, keep, ack, 3).await;
        }
    }
}

#[tokio::test]
async fn pages_list_each_job_kept_once_while_the_count_trims_on_memory() {
    for keep in [6, 7, 8, 9] {
        for ack in [true, false] {
            pages_while_the_shown_jobs_finish_again(&memory(), keep, ack, 3).await;
        }
    }
}
