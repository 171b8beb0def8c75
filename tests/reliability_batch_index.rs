//! The index of batches (`ns:@batches`) on Redis and on a Cluster: a batch
//! past its retention (its keys expired a week after it completed) leaves
//! the index in a worker's sweep, as the memory backend drops it, and a
//! page of batches reads past the entries of such batches rather than
//! coming back short (which says there are no more) while older batches
//! run.

mod common;

use std::time::Duration;

use common::RedisServer;
use common::cluster::{RedisCluster, cli};
use redjob::ops::BatchId;
use redjob::{Client, Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

/// A job nobody works here: its batch runs on.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bi_idle", queue = "bi_idle")]
struct Idle;

impl Job for Idle {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A day in ms.
const DAY: u64 = 24 * 3600 * 1000;

/// Where raw commands go: a single Redis, or a Cluster (each key to its
/// master), with the default namespace's key names of each.
enum Raw<'a> {
    One(u16),
    Cluster(&'a RedisCluster),
}

impl Raw<'_> {
    fn of(s: &RedisServer) -> Raw<'static> {
        Raw::One(s.url().rsplit(':').next().unwrap().parse().unwrap())
    }

    /// `cmd key args…` on the node that holds `key`.
    fn run(&self, cmd: &str, key: &str, args: &[&str]) -> String {
        let port = match self {
            Raw::One(p) => *p,
            Raw::Cluster(c) => c.master_of(key),
        };
        let all: Vec<&str> = [cmd, key].into_iter().chain(args.iter().copied()).collect();
        cli(port, &all).unwrap_or_else(|| panic!("redis-cli {all:?}"))
    }

    fn index(&self) -> &'static str {
        match self {
            Raw::One(_) => "rsmq:@batches",
            Raw::Cluster(_) => "rsmq:{@batches}",
        }
    }

    fn batch(&self, id: &str, suffix: &str) -> String {
        match self {
            Raw::One(_) => format!("rsmq:@batch:{id}{suffix}"),
            Raw::Cluster(_) => format!("rsmq:{{@batch:{id}}}{suffix}"),
        }
    }

    /// The index's ids, oldest first.
    fn indexed(&self) -> Vec<String> {
        self.run("zrange", self.index(), &["0", "-1"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Scores `id`'s entry `days` days before now.
    fn age(&self, id: &str, days: u64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let score = (now - days * DAY).to_string();
        self.run("zadd", self.index(), &["XX", &score, id]);
    }
}

/// One batch that runs on (a job nobody works), then three that complete
/// at once (no jobs), a few ms apart: the running one is the oldest.
async fn one_running_three_done(c: &Client) -> (BatchId, Vec<BatchId>) {
    let running = c
        .batch()
        .description("running")
        .job(&Idle)
        .enqueue()
        .await
        .unwrap();
    (running, three_done(c).await)
}

/// Three batches that complete at once, a few ms apart.
async fn three_done(c: &Client) -> Vec<BatchId> {
    let mut done = Vec::new();
    for n in 0..3 {
        tokio::time::sleep(Duration::from_millis(3)).await;
        let id = c
            .batch()
            .description(format!("done {n}"))
            .enqueue()
            .await
            .unwrap();
        done.push(id);
    }
    done
}

/// The completed batches pass their retention: the 7-day TTL their
/// completion set runs out (set to 1 ms here, which is what Redis does a
/// week on).
async fn expire_done(raw: &Raw<'_>, c: &Client, done: &[BatchId]) {
    for id in done {
        for suffix in ["", ":done", ":dead", ":adds"] {
            raw.run("pexpire", &raw.batch(&id.to_string(), suffix), &["1"]);
        }
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    for id in done {
        assert!(
            c.batch_status(id).await.unwrap().is_none(),
            "past retention"
        );
    }
}

/// The ids of the first page of `limit` batches.
async fn page(c: &Client, limit: usize) -> Vec<String> {
    c.batches(None, limit)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.id)
        .collect()
}

/// The workers' sweep, a few times.
async fn sweep(c: &Client) {
    for _ in 0..3 {
        redjob::backend::Backend::batch_sweep(&c.backend())
            .await
            .unwrap();
    }
}

/// A batch past its retention leaves nothing in Redis: its keys expire 7
/// days after it completed, and so must its entry in the index of batches
/// (`ns:@batches`), as the memory backend drops the batch in a worker's
/// sweep (`a_sweep_drops_batches_past_their_retention`); a batch that runs
/// on for over a week keeps its entry. On Redis the entry stayed for ever
/// unless an operator paged through every batch: each batch and each flow
/// node ever enqueued left 50 bytes or so behind.
#[tokio::test]
async fn a_batch_past_its_retention_leaves_the_index_of_batches() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let raw = Raw::of(&s);
        let c = Client::connect(&s.url()).await.unwrap();
        let (running, done) = one_running_three_done(&c).await;
        expire_done(&raw, &c, &done).await;
        // a week on, their entries are over a week old, and the running
        // batch's older still (it runs on: its entry stays)
        for id in &done {
            raw.age(&id.to_string(), 8);
        }
        raw.age(&running.to_string(), 30);
        sweep(&c).await;
        assert_eq!(
            raw.indexed(),
            [running.to_string()],
            "only the batch still kept is indexed"
        );
    })
    .await
    .unwrap();
}

/// A sweep's trim reads the index's oldest entries a hundred at a time: 150
/// batches that run on for over a week (older than the batches past their
/// retention) do not keep it from the entries after them.
#[tokio::test]
async fn a_trim_goes_past_batches_running_for_over_a_week() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let raw = Raw::of(&s);
        let c = Client::connect(&s.url()).await.unwrap();
        let done = three_done(&c).await;
        expire_done(&raw, &c, &done).await;
        for id in &done {
            raw.age(&id.to_string(), 8);
        }
        // 150 batches kept (their hash), 20 to 11 days old, 15 a day
        let mut kept = Vec::new();
        for n in 0..150u64 {
            let id = format!("{n:0>32}");
            raw.run("hset", &raw.batch(&id, ""), &["created", "1"]);
            raw.run("zadd", raw.index(), &["0", &id]);
            raw.age(&id, 20 - n / 15);
            kept.push(id);
        }
        sweep(&c).await;
        let mut left = raw.indexed();
        left.sort();
        let gone: Vec<String> = done.iter().map(|id| id.to_string()).collect();
        let still: Vec<&String> = left.iter().filter(|id| gone.contains(id)).collect();
        assert!(
            still.is_empty(),
            "past their retention, still indexed: {still:?}"
        );
        assert!(left == kept, "the batches kept stay indexed");
    })
    .await
    .unwrap();
}

/// A trim goes on past the entries it read and kept within one score (one
/// millisecond): 150 batches kept, opened in the same ms over a week ago,
/// do not keep it from the entries of that ms after them, of batches past
/// their retention. It went on from the score plus one once a read of 100
/// held that one score, so those entries were skipped by every trim.
#[tokio::test]
async fn a_trim_goes_past_many_batches_of_one_millisecond() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let raw = Raw::of(&s);
        let c = Client::connect(&s.url()).await.unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let score = (now - 8 * DAY).to_string();
        // 150 kept (their hash), then 3 gone, all of one score: members of
        // one score sort by name, the kept ones ("0…") first
        let mut kept = Vec::new();
        for n in 0..150u64 {
            let id = format!("{n:0>32}");
            raw.run("hset", &raw.batch(&id, ""), &["created", "1"]);
            raw.run("zadd", raw.index(), &[&score, &id]);
            kept.push(id);
        }
        for n in 0..3u64 {
            raw.run("zadd", raw.index(), &[&score, &format!("z{n:0>31}")]);
        }
        sweep(&c).await;
        let mut left = raw.indexed();
        left.sort();
        assert_eq!(
            left.len(),
            150,
            "the gone ones left the index: {:?}",
            &left[150..]
        );
        assert!(left == kept, "the batches kept stay indexed");
    })
    .await
    .unwrap();
}

/// A page of batches holds the batches kept, up to its limit, as on the
/// memory backend: on Redis a page whose index entries were all of batches
/// past their retention came back empty (shorter than its limit, which
/// says there are no more) while an older batch still ran.
#[tokio::test]
async fn a_page_of_batches_is_not_emptied_by_batches_past_their_retention() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let raw = Raw::of(&s);
        let c = Client::connect(&s.url()).await.unwrap();
        let (running, done) = one_running_three_done(&c).await;
        expire_done(&raw, &c, &done).await;
        assert_eq!(
            page(&c, 2).await,
            [running.to_string()],
            "the batch still kept is listed"
        );
        assert_eq!(raw.indexed(), [running.to_string()], "the page's read");
    })
    .await
    .unwrap();
}

/// A page reads past at most 1,000 index entries of batches past their
/// retention, as documented: it read past up to 1,999 more (the budget was
/// checked before each read of up to the page's limit, not by entry), one
/// status round trip each. Cut short so, a page says nothing of the end:
/// asked again, it goes on past the entries left, as it dropped those it
/// read past.
#[tokio::test]
async fn a_page_reads_past_at_most_a_thousand_batches_past_their_retention() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let raw = Raw::of(&s);
        let c = Client::connect(&s.url()).await.unwrap();
        let running = c
            .batch()
            .description("running")
            .job(&Idle)
            .enqueue()
            .await
            .unwrap();
        // 1,900 entries newer than it, of batches whose keys are gone
        let now = redjob::backend::Backend::now_ms(&c.backend())
            .await
            .unwrap();
        let mut add = redis::cmd("ZADD");
        add.arg(raw.index());
        for n in 0..1900u64 {
            add.arg(now + 1000 + n).arg(format!("{n:0>32}"));
        }
        let _: i64 = add.query_async(&mut s.raw().await).await.unwrap();
        // the page's reads of batches meet NOSCRIPT, and go again
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut s.raw().await)
            .await
            .unwrap();
        let first = page(&c, 1000).await;
        assert_eq!(
            raw.indexed().len(),
            901,
            "the page read past 1,000 of them (and dropped those), no more"
        );
        assert!(first.is_empty(), "cut short: {first:?}");
        assert_eq!(
            page(&c, 1000).await,
            [running.to_string()],
            "the next page goes on past the rest"
        );
        assert_eq!(raw.indexed(), [running.to_string()]);
    })
    .await
    .unwrap();
}

/// The same on the memory backend: the running batch is listed.
#[tokio::test]
async fn a_page_of_batches_is_not_emptied_by_batches_past_their_retention_in_memory() {
    let backend = redjob::backend::memory::MemoryBackend::new();
    let c = Client::memory(backend.clone());
    let (running, done) = one_running_three_done(&c).await;
    backend
        .clock()
        .advance(Duration::from_secs(7 * 24 * 3600 + 1));
    for id in &done {
        assert!(
            c.batch_status(id).await.unwrap().is_none(),
            "past retention"
        );
    }
    assert_eq!(page(&c, 2).await, [running.to_string()]);
}

/// Both on a Cluster, where the index and each batch are slots of their
/// own: a page reads past the batches past their retention, and a sweep
/// drops the entries of those over a week old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_of_batches_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(120), async {
        let raw = Raw::Cluster(&cluster);
        let c = Client::connect(&cluster.url()).await.unwrap();
        let (running, done) = one_running_three_done(&c).await;
        expire_done(&raw, &c, &done).await;
        assert_eq!(page(&c, 2).await, [running.to_string()]);
        let done = three_done(&c).await;
        expire_done(&raw, &c, &done).await;
        for id in &done {
            raw.age(&id.to_string(), 8);
        }
        raw.age(&running.to_string(), 30);
        sweep(&c).await;
        assert_eq!(raw.indexed(), [running.to_string()]);
    })
    .await
    .unwrap();
}
