//! The least a Redis ACL user needs for redjob: the worker and producer users
//! the "Redis ACL" section of docs/scale-out.md documents, created from its very lines.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{RedisServer, wait_for, wait_until};
use redjob::backend::Backend;
use redjob::client::{ClientConfig, EnqueueOptions};
use redjob::inspect::{Inspect, JobState};
use redjob::ops::{
    Admin, Concurrency, DeadOrder, History, QueueSettings, RateLimit, Schedule, Spread,
};
use redjob::queue::Queues;
use redjob::topic::{Event, Start};
use redjob::{Client, Error, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "acl_task", queue = "acl", max_attempts = 2, backoff = "10ms")]
struct Task {
    fail: bool,
}

/// A job as big as its data.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "acl_blob", queue = "acl")]
struct Blob {
    data: String,
}

impl Job for Blob {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

impl Job for Task {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<AtomicU32>>()?.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Err("failing on purpose".into());
        }
        Ok(())
    }
}

/// A job that runs until its test lets it finish (a permit of the worker's
/// semaphore), so that its lease can be looked at while it runs.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "acl_hold", queue = "acl")]
struct Hold;

impl Job for Hold {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<AtomicU32>>()?.fetch_add(1, Ordering::SeqCst);
        let gate = ctx.data::<Arc<tokio::sync::Semaphore>>()?;
        gate.acquire().await.map_err(|e| e.to_string())?.forget();
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Event)]
#[event(name = "acl_event", topic = "acl_events")]
struct Happened {
    n: u64,
}

/// The `ACL SETUSER <user> …` line of docs/scale-out.md, as arguments after `SETUSER`.
fn readme_rule(user: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/scale-out.md"))
        .expect("docs/scale-out.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with(&format!("ACL SETUSER {user} ")))
        .unwrap_or_else(|| panic!("docs/scale-out.md has no ACL SETUSER {user} line"));
    line.split_whitespace().skip(2).map(String::from).collect()
}

/// A server with the user `rule` creates (`rule[0]` is its name).
async fn server_with(rule: &[String]) -> RedisServer {
    let server = RedisServer::start();
    add_user(&server, rule).await;
    server
}

/// `ACL SETUSER` with `rule`, as the default user.
async fn add_user(server: &RedisServer, rule: &[String]) {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(rule)
        .query_async(&mut server.raw().await)
        .await
        .unwrap_or_else(|e| panic!("ACL SETUSER {}: {e}", rule.join(" ")));
}

/// A client of namespace `app` logged in as `user` with `password`.
async fn client(server: &RedisServer, user: &str, password: &str) -> Client {
    let mut config = ClientConfig::from_url(format!(
        "redis://{user}:{password}@127.0.0.1:{}",
        server.port
    ));
    config.namespace = "app".into();
    Client::from_config(config).await.unwrap()
}

#[tokio::test]
async fn the_readme_worker_user_runs_every_feature() {
    let server = server_with(&readme_rule("redjob-worker")).await;
    let client = client(&server, "redjob-worker", "worker-secret").await;
    let runs = Arc::new(AtomicU32::new(0));
    let events = Arc::new(AtomicU32::new(0));
    client
        .subscribe("acl_events", "audit", Start::Beginning)
        .await
        .unwrap();
    let seen = events.clone();
    // a history of one: every settle trims it (ZPOPMIN)
    let one = History {
        max_count: Some(1),
        ..History::default()
    };
    let worker = Worker::builder(client.backend())
        .queue("acl")
        // limits across the fleet: fetches count starts and places
        .queue_rate_limit(
            "acl_limited",
            RateLimit::new(100, Duration::from_millis(200)),
        )
        .queue_global_concurrency("acl_limited", 5)
        .history(one)
        .data(runs.clone())
        .subscribe("audit", move |_: Happened, _| {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .periodic(
            Schedule::every(Duration::from_secs(3600)).unwrap(),
            Task { fail: false },
        )
        .handle_signals(false)
        .build()
        .unwrap();
    // fetching, subscribing, the worker registry and the schedule are allowed
    let w = common::start_serving(worker).await;
    client.enqueue(&Task { fail: false }).await.unwrap();
    client
        .enqueue_in(&Task { fail: true }, Duration::from_millis(50))
        .await
        .unwrap();
    let unique = EnqueueOptions::new().unique_key("once").priority(3);
    client
        .enqueue_with(&Task { fail: false }, unique.clone())
        .await
        .unwrap();
    client
        .enqueue_with(&Task { fail: false }, unique)
        .await
        .unwrap();
    client
        .enqueue_batch(&[Task { fail: false }, Task { fail: false }])
        .await
        .unwrap();
    client.publish(&Happened { n: 1 }).await.unwrap();
    // starts 120 ms apart: the third's fetch drops the first's from the
    // window (ZREMRANGEBYRANK)
    let limited = EnqueueOptions::new().queue("acl_limited");
    for _ in 0..3 {
        client
            .enqueue_with(&Task { fail: false }, limited.clone())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    // keyed jobs: the second waits apart until the first's settle gives it
    // the key's place
    let keyed = EnqueueOptions::new().concurrency_key("acct");
    client
        .enqueue_batch_with(&[Task { fail: false }, Task { fail: false }], keyed)
        .await
        .unwrap();
    // a batch: its job and its callback run, counted by the worker's rule
    let batch = client
        .batch()
        .job(&Task { fail: false })
        .on_complete(&Task { fail: false })
        .enqueue()
        .await
        .unwrap();
    // 11 jobs that succeed, the failing one twice
    assert!(
        wait_until(Duration::from_secs(10), || runs.load(Ordering::SeqCst)
            == 13)
        .await,
        "runs: {}",
        runs.load(Ordering::SeqCst)
    );
    assert!(
        wait_until(Duration::from_secs(10), || events.load(Ordering::SeqCst)
            == 1)
        .await
    );
    let c = client.clone();
    assert!(
        wait_for(Duration::from_secs(10), || async {
            c.stats("acl").await.unwrap().dead == 1
        })
        .await
    );
    let done = client.batch_status(&batch).await.unwrap().unwrap();
    assert!(done.is_complete() && done.succeeded == 1, "{done:?}");
    let ops = client.backend();
    assert_eq!(ops.workers().await.unwrap().len(), 1);
    assert_eq!(ops.schedules().await.unwrap().len(), 1);
    // a control set and followed (the beat reads it back)
    let id = ops.workers().await.unwrap()[0].id.clone();
    assert!(ops.quiet_worker(&id).await.unwrap());
    assert!(
        wait_for(Duration::from_secs(10), || async {
            ops.workers().await.unwrap()[0].quiet
        })
        .await
    );
    assert!(ops.resume_worker(&id).await.unwrap());
    // a setting changed, and every worker told: the version moved on
    let set = ops
        .set_settings(
            "acl",
            &QueueSettings::concurrency(Concurrency::per_worker(2)),
        )
        .await
        .unwrap();
    assert_eq!(set.set_by.concurrency.unwrap().by, "api");
    let version: Option<String> = redis::cmd("HGET")
        .arg("app:{@workers}:settings")
        .arg("v")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    assert_eq!(version.as_deref(), Some("1"));
    w.stop().await;
    // the history a worker trims every two minutes, and reads of it
    ops.trim_history("acl").await.unwrap();
    let finished = ops.list("acl", JobState::Finished, None, 10).await.unwrap();
    assert_eq!(finished.jobs.len(), 1, "a history of one");

    // operating: inspection, dead letters, pause, topics
    let stats = client.stats("acl").await.unwrap();
    assert_eq!((stats.processed, stats.retried, stats.dead), (8, 1, 1));
    assert_eq!(ops.counts("acl").await.unwrap().dead, 1);
    let dead = ops
        .dead_page("acl", DeadOrder::OldestFirst, None, 10)
        .await
        .unwrap();
    assert_eq!(dead.jobs.len(), 1);
    let ids: Vec<_> = dead.jobs.iter().map(|d| d.id).collect();
    assert_eq!(ops.requeue_dead("acl", &ids, Spread::NOW).await.unwrap(), 1);
    assert_eq!(ops.peek("acl", 10).await.unwrap().len(), 1);
    ops.pause("acl").await.unwrap();
    assert!(ops.is_paused("acl").await.unwrap());
    ops.resume("acl").await.unwrap();
    assert_eq!(ops.purge_queue("acl").await.unwrap(), 1);
    let topic = client.topic("acl_events").await.unwrap().unwrap();
    assert_eq!(topic.published, 1);
    assert_eq!(client.topics().await.unwrap().len(), 1);
    // a rewind back before the event the subscriber took bumps its epoch
    // (INCR): the rule once lacked it, and a replay was refused
    client
        .rewind("acl_events", "audit", Start::Beginning)
        .await
        .unwrap();
    assert!(client.unsubscribe("acl_events", "audit").await.unwrap());
    assert!(client.delete_topic("acl_events").await.unwrap());
}

/// The commands the scripts under src/backend/redis/lua run with literal
/// names (`redis.call("CMD", "SUB"?` and lib.lua's `many("CMD"`), as
/// (file, command, literal second word), lower case.
fn script_commands() -> Vec<(String, String, Option<String>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/backend/redis/lua");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        for opening in ["redis.call(", "redis.pcall(", "many("] {
            for (at, _) in text.match_indices(opening) {
                let words = literal_words(&text[at + opening.len()..]);
                if let Some(cmd) = words.first() {
                    found.push((file.clone(), cmd.clone(), words.get(1).cloned()));
                }
            }
        }
    }
    found
}

/// The leading upper-case string literals of a call's arguments, lower
/// case: `"XGROUP", "CREATE", key` gives xgroup and create.
fn literal_words(args: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut rest = args.trim_start();
    while let Some(after) = rest.strip_prefix('"') {
        let Some(end) = after.find('"') else { break };
        let word = &after[..end];
        if word.is_empty() || !word.chars().all(|c| c.is_ascii_uppercase()) {
            break;
        }
        words.push(word.to_ascii_lowercase());
        rest = after[end + 1..].trim_start();
        match rest.strip_prefix(',') {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    words
}

/// Every command a script runs by name is in the worker's documented rule
/// (as `+cmd`, or `+cmd|sub` for its literal subcommand): the rule once
/// lacked `+incr`, which a topic rewind's script runs, and the feature test
/// above did not rewind. A command named through a variable is not seen
/// here (nor which subcommand a variable names); the feature tests cover
/// those.
#[test]
fn every_command_the_scripts_run_by_name_is_in_the_worker_rule() {
    let rule = readme_rule("redjob-worker");
    let allowed = |cmd: &str, sub: Option<&str>| {
        rule.iter().any(|r| r == &format!("+{cmd}"))
            || match sub {
                Some(s) => rule.iter().any(|r| r == &format!("+{cmd}|{s}")),
                // a subcommand through a variable: one of the command's
                None => rule.iter().any(|r| r.starts_with(&format!("+{cmd}|"))),
            }
    };
    let found = script_commands();
    assert!(found.len() > 100, "the scan found {} calls", found.len());
    let missing: Vec<String> = found
        .iter()
        .filter(|(_, cmd, sub)| !allowed(cmd, sub.as_deref()))
        .map(|(file, cmd, sub)| format!("{file}: {cmd} {}", sub.as_deref().unwrap_or("")))
        .collect();
    assert!(missing.is_empty(), "not in the worker rule: {missing:?}");
}

/// The commands `ACL LOG` says were refused, with how often.
async fn refused(server: &RedisServer) -> Vec<(String, i64)> {
    let log: Vec<Vec<redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    log.iter()
        .filter_map(|entry| {
            let field = |k: &str| {
                entry
                    .chunks(2)
                    .find(|kv| {
                        redis::from_redis_value::<String>(kv[0].clone())
                            .ok()
                            .as_deref()
                            == Some(k)
                    })
                    .map(|kv| kv[1].clone())
            };
            let object: String = redis::from_redis_value(field("object")?).ok()?;
            let count: i64 = redis::from_redis_value(field("count")?).ok()?;
            Some((object, count))
        })
        .collect()
}

#[tokio::test]
async fn an_idle_worker_beats_takes_a_job_and_stops_with_nothing_refused() {
    idle_worker_with_nothing_refused(RedisServer::start).await;
}

/// Valkey knows `CLIENT SETINFO` (as Redis 7.2 and later do), which the redis
/// crate sent on each connection and the documented rule does not grant: each
/// connection left a refusal in the ACL LOG until redjob stopped sending it.
#[tokio::test]
async fn an_idle_worker_leaves_nothing_refused_on_valkey_either() {
    let bin = common::server_binary("valkey-server", "REDJOB_VALKEY_SERVER");
    idle_worker_with_nothing_refused(|| RedisServer::start_binary(&bin)).await;
}

/// An idle worker under the documented rule (and the one from before
/// `+unsubscribe`) on servers `start` makes beats, takes a job and stops, and
/// the ACL LOG shows nothing refused.
async fn idle_worker_with_nothing_refused(start: impl Fn() -> RedisServer) {
    // the documented rule, then the one from before `+unsubscribe`
    for rule in [
        readme_rule("redjob-worker"),
        readme_rule("redjob-worker")
            .into_iter()
            .filter(|r| r != "+unsubscribe")
            .collect(),
    ] {
        let server = start();
        add_user(&server, &rule).await;
        let client = client(&server, "redjob-worker", "worker-secret").await;
        let runs = Arc::new(AtomicU32::new(0));
        let worker = Worker::builder(client.backend())
            .queue("acl")
            // a beat every 500 ms
            .lease(Duration::from_millis(1500))
            .data(runs.clone())
            .handle_signals(false)
            .build()
            .unwrap();
        let w = common::start_serving(worker).await;
        tokio::time::sleep(Duration::from_millis(2000)).await;
        let ops = client.backend();
        let now = ops.now_ms().await.unwrap();
        let ws = ops.workers().await.unwrap();
        assert_eq!(ws.len(), 1, "{ws:?}");
        assert!(
            now.saturating_sub(ws[0].last_beat_ms) < 1000,
            "it beat within the last second: {} at {now}",
            ws[0].last_beat_ms
        );
        // handed to the idle worker
        client.enqueue(&Task { fail: false }).await.unwrap();
        assert!(wait_until(Duration::from_secs(5), || runs.load(Ordering::SeqCst) == 1).await);
        let stopping = std::time::Instant::now();
        w.stop().await;
        assert!(stopping.elapsed() < Duration::from_secs(3));
        assert!(ops.workers().await.unwrap().is_empty());
        let expected: Vec<(String, i64)> = if rule.iter().any(|r| r == "+unsubscribe") {
            vec![]
        } else {
            vec![("unsubscribe".into(), 1)]
        };
        assert_eq!(refused(&server).await, expected, "refused by the ACL");
    }
}

#[tokio::test]
async fn the_readme_producer_user_enqueues_and_publishes_and_may_not_fetch() {
    let server = server_with(&readme_rule("redjob-producer")).await;

    let producer = client(&server, "redjob-producer", "producer-secret").await;
    producer.enqueue(&Task { fail: false }).await.unwrap();
    producer
        .enqueue_in(&Task { fail: false }, Duration::from_secs(60))
        .await
        .unwrap();
    let unique = EnqueueOptions::new().unique_key("once").priority(-2);
    producer
        .enqueue_with(&Task { fail: false }, unique.clone())
        .await
        .unwrap();
    producer
        .enqueue_with(&Task { fail: false }, unique)
        .await
        .unwrap();
    // a unique key whose time ran out is cleaned up by the next enqueue (HDEL)
    let brief = EnqueueOptions::new()
        .unique_key("brief")
        .unique_for(Duration::from_millis(50))
        .delay(Duration::from_secs(60));
    for _ in 0..2 {
        producer
            .enqueue_with(&Task { fail: false }, brief.clone())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    producer
        .enqueue_batch(&[Task { fail: false }, Task { fail: false }])
        .await
        .unwrap();
    // keyed jobs: the key's first holds its place, the others wait apart
    let keyed = EnqueueOptions::new().concurrency_key("acct");
    producer
        .enqueue_batch_with(&[Task { fail: false }, Task { fail: false }], keyed.clone())
        .await
        .unwrap();
    producer
        .enqueue_with(&Task { fail: false }, keyed)
        .await
        .unwrap();
    // a batch, opened, sent and sealed, and its status read
    let batch = producer
        .batch()
        .job(&Task { fail: false })
        .on_complete(&Task { fail: false })
        .enqueue()
        .await
        .unwrap();
    assert_eq!(
        producer.batch_status(&batch).await.unwrap().unwrap().total,
        1
    );
    // an empty batch completes as it is sealed: its callback is sent then
    producer
        .batch()
        .on_complete(&Task { fail: false })
        .enqueue()
        .await
        .unwrap();
    producer.publish(&Happened { n: 1 }).await.unwrap();
    add_user(&server, &readme_rule("redjob-worker")).await;
    let worker = client(&server, "redjob-worker", "worker-secret").await;
    let counts = worker.backend().counts("acl").await.unwrap();
    assert_eq!((counts.ready, counts.scheduled), (7, 3));
    assert_eq!(
        worker.topic("acl_events").await.unwrap().unwrap().published,
        1
    );

    // a flow enqueued part way (its leaf over its queue's maxsize) is
    // cancelled, every group of it, by the producer
    worker
        .backend()
        .create_queue(
            "acl_small",
            redjob::queue::QueueOptions {
                maxsize: 1024,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let inner = redjob::client::Flow::new(&Task { fail: false }).child_in(
        "acl_small",
        &Blob {
            data: "x".repeat(2000),
        },
    );
    let e = producer
        .enqueue_flow(redjob::client::Flow::new(&Task { fail: false }).subflow(inner))
        .await
        .unwrap_err();
    assert!(!matches!(e, Error::NoPermission { .. }), "{e:?}");
    let flows: Vec<_> = worker
        .batches(None, 10)
        .await
        .unwrap()
        .into_iter()
        .filter(|b| b.parent.is_some())
        .collect();
    assert_eq!(flows.len(), 2, "{flows:?}");
    assert!(
        flows.iter().all(|b| b.cancelled_at_ms.is_some()),
        "{flows:?}"
    );

    // inspecting is a worker's (or an operator's): refused, naming what
    let e = producer.backend().counts("acl").await.unwrap_err();
    assert!(matches!(e, Error::NoPermission { .. }), "{e:?}");
    // named by the script's line (Redis 7.0), or by Redis itself (Redis 8)
    let said = e.to_string();
    assert!(
        said.contains("a script may not run Z") || said.contains("a script may not run the 'z"),
        "{e}"
    );
}

#[tokio::test]
async fn a_producer_hands_a_job_to_an_idle_worker_under_the_readme_rules() {
    let server = server_with(&readme_rule("redjob-worker")).await;
    add_user(&server, &readme_rule("redjob-producer")).await;
    let client = client(&server, "redjob-worker", "worker-secret").await;
    let producer = self::client(&server, "redjob-producer", "producer-secret").await;
    // the queue first, so the worker's first fetch registers for a hand-off
    // (sent by the worker's client: the producer's first send then knows of
    // no queue without a waiting worker, so it makes the full call, the one
    // that hands off; see send.lua's lean call)
    client.enqueue(&Task { fail: false }).await.unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let worker = Worker::builder(client.backend())
        .queue("acl")
        .data(runs.clone())
        .data(gate.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let w = common::start_serving(worker).await;
    assert!(wait_until(Duration::from_secs(5), || runs.load(Ordering::SeqCst) == 1).await);
    let con = server.raw().await;
    let registered = || {
        wait_for(Duration::from_secs(5), || {
            let mut con = con.clone();
            async move {
                let r: Option<String> = redis::cmd("HGET")
                    .arg("app:acl:Q")
                    .arg("redjob:handoff")
                    .query_async(&mut con)
                    .await
                    .unwrap();
                r.is_some_and(|r| !r.is_empty())
            }
        })
    };
    assert!(registered().await, "the idle worker registered");
    // the send checks the worker's channel (PUBSUB NUMSUB) and publishes on it
    // its lease is counted (HINCRBY) while it runs, and where its settle
    // takes it off again
    hand_one(&producer, &con, &runs, &gate, 2).await;
    // (the producer's rule has no +ping, which its connection tries once)
    let hincrby = |log: Vec<(String, i64)>| log.into_iter().find(|(c, _)| c == "hincrby");
    assert_eq!(hincrby(refused(&server).await), None);
    // a producer on the rule from before +hincrby hands off too, counting the
    // lease by HGET and HSET once its HINCRBY is refused
    let hset = producer_without(&server, "hset-producer", &["+hincrby"]).await;
    assert!(registered().await, "the idle worker registered again");
    hand_one(&hset, &con, &runs, &gate, 3).await;
    assert_eq!(
        hincrby(refused(&server).await),
        Some(("hincrby".to_string(), 1))
    );
    // a producer on the rule from before hand-offs (no PUBSUB NUMSUB) still
    // sends: its job wakes the worker instead of being handed to it
    let old = producer_without(&server, "old-producer", &["+pubsub|numsub"]).await;
    assert!(registered().await, "the idle worker registered again");
    old.enqueue(&Task { fail: false }).await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || runs.load(Ordering::SeqCst) == 4).await);
    w.stop().await;
}

/// Sends a held job as `producer` to the idle worker registered for a
/// hand-off, and checks that it was handed, that its lease is counted once
/// while it runs, and that the counts are empty once it settled; `n`: the
/// worker's runs once it started.
async fn hand_one(
    producer: &Client,
    con: &redis::aio::MultiplexedConnection,
    runs: &AtomicU32,
    gate: &tokio::sync::Semaphore,
    n: u32,
) {
    let id = producer.enqueue(&Hold).await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || runs.load(Ordering::SeqCst) == n).await);
    assert!(
        handed(con, id.as_ref()).await,
        "the job was handed to the worker"
    );
    assert_eq!(leases_counted(con).await, 1);
    gate.add_permits(1);
    assert!(leases_settle(con).await, "the lease counts were left empty");
}

/// A client of a new user `user` on `server`, whose rule is the documented
/// producer rule without `dropped` (a rule from an earlier release).
async fn producer_without(server: &RedisServer, user: &str, dropped: &[&str]) -> Client {
    let mut rule = readme_rule("redjob-producer");
    rule.retain(|a| !dropped.contains(&a.as_str()));
    rule[0] = user.into();
    add_user(server, &rule).await;
    client(server, user, "producer-secret").await
}

/// Whether the queue's hash says that job `id` was the last handed to a
/// worker (its field "redjob:handed <channel>").
async fn handed(con: &redis::aio::MultiplexedConnection, id: &str) -> bool {
    let fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg("app:acl:Q")
        .query_async(&mut con.clone())
        .await
        .unwrap();
    fields
        .iter()
        .any(|(f, v)| f.starts_with("redjob:handed ") && v.starts_with(&format!("{id} ")))
}

/// The leases the queue's lease counts hold (the sum of their seconds).
async fn leases_counted(con: &redis::aio::MultiplexedConnection) -> u64 {
    let counts: Vec<(String, u64)> = redis::cmd("HGETALL")
        .arg("app:acl:leases")
        .query_async(&mut con.clone())
        .await
        .unwrap();
    counts.iter().map(|(_, n)| n).sum()
}

/// Whether the queue's lease counts come to nothing once its jobs settled: a
/// hand-off's lease counted in a second other than the one its settle takes
/// it from would stay.
async fn leases_settle(con: &redis::aio::MultiplexedConnection) -> bool {
    wait_for(Duration::from_secs(5), || {
        let mut con = con.clone();
        async move {
            let n: u64 = redis::cmd("HLEN")
                .arg("app:acl:leases")
                .query_async(&mut con)
                .await
                .unwrap();
            n == 0
        }
    })
    .await
}

/// A producer on the rule from before sends ran as a function (no `+fcall
/// +function|load`): its first send is refused the `FCALL`, once, and it
/// sends by script from then on; the documented rule sends by the function,
/// and goes on by script when `+fcall` is taken from it while it runs.
#[tokio::test]
async fn a_producer_without_functions_in_its_rule_sends_by_script() {
    let server = server_with(&readme_rule("redjob-worker")).await;
    let old = producer_without(&server, "old-producer", &["+fcall", "+function|load"]).await;
    add_user(&server, &readme_rule("redjob-producer")).await;
    let mut con = server.raw().await;
    for _ in 0..3 {
        old.enqueue(&Task { fail: false }).await.unwrap();
    }
    // (a producer's rule has no PING, which a connection's check sends)
    let fcall_refused = async || {
        let log = refused(&server).await;
        log.into_iter()
            .filter(|(what, _)| what != "ping")
            .collect::<Vec<_>>()
    };
    assert_eq!(fcall_refused().await, [("fcall".to_string(), 1)]);
    let fcalls = async |con: &mut redis::aio::MultiplexedConnection| {
        common::command_calls(con).await.get("fcall").copied()
    };
    assert_eq!(
        fcalls(&mut con).await,
        Some(0),
        "refused calls are not counted"
    );
    let producer = client(&server, "redjob-producer", "producer-secret").await;
    producer.enqueue(&Task { fail: false }).await.unwrap();
    producer.enqueue(&Task { fail: false }).await.unwrap();
    // the first finds no function and loads it
    assert_eq!(fcalls(&mut con).await, Some(3));
    let loads = common::command_calls(&mut con)
        .await
        .get("function|load")
        .copied();
    assert_eq!(loads, Some(1));
    assert_eq!(fcall_refused().await.len(), 1, "nothing more refused");
    // `+fcall` taken away while the producer runs: its next send is refused
    // the call, and sends by script
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("redjob-producer")
        .arg("-fcall")
        .query_async(&mut con)
        .await
        .unwrap();
    producer.enqueue(&Task { fail: false }).await.unwrap();
    producer.enqueue(&Task { fail: false }).await.unwrap();
    assert_eq!(fcalls(&mut con).await, Some(3));
    let queued: u64 = redis::cmd("ZCARD")
        .arg("app:acl")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(queued, 7);
}

/// The server's major version.
async fn server_version(server: &RedisServer) -> u32 {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| v.split('.').next()?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_user_missing_a_command_keys_or_channels_gets_an_error_naming_it() {
    missing_permissions_are_named(RedisServer::start()).await;
}

#[tokio::test]
async fn missing_permissions_are_named_on_valkey_too() {
    let bin = common::server_binary("valkey-server", "REDJOB_VALKEY_SERVER");
    missing_permissions_are_named(RedisServer::start_binary(&bin)).await;
}

#[tokio::test]
async fn missing_permissions_are_named_on_redis_6_2_too() {
    let bin = common::server_binary("redis-server-6.2", "REDJOB_REDIS_6_2_SERVER");
    missing_permissions_are_named(RedisServer::start_binary(&bin)).await;
}

/// Users each missing one part of the documented worker rule enqueue on `server`.
async fn missing_permissions_are_named(server: RedisServer) {
    let mut worker = readme_rule("redjob-worker");
    // Redis 6.2 has no functions, and refuses a rule that names them; its
    // sends call their script
    if server_version(&server).await < 7 {
        worker.retain(|a| a != "+fcall" && a != "+function|load");
    }
    let without = |drop: &str, user: &str| -> Vec<String> {
        let mut rule: Vec<String> = worker.iter().filter(|a| *a != drop).cloned().collect();
        rule[0] = user.into();
        rule
    };
    for rule in [
        without("+hsetnx", "no-hsetnx"),
        without("+zadd", "no-zadd"),
        without("+evalsha", "no-evalsha"),
        without("~app:*", "no-keys"),
        without("&app:*", "no-channels"),
    ] {
        add_user(&server, &rule).await;
    }
    let refused = async |user: &str| {
        let c = client(&server, user, "worker-secret").await;
        let e = tokio::time::timeout(Duration::from_secs(10), c.enqueue(&Task { fail: false }))
            .await
            .expect("bounded")
            .expect_err(user);
        assert!(matches!(e, Error::NoPermission { .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.starts_with("the Redis user lacks a permission redjob needs"),
            "{text}"
        );
        text
    };
    // a command a script calls (Redis does not name it, redjob does; Valkey
    // names it), a command the client sends, the keys
    let text = refused("no-hsetnx").await;
    assert!(
        text.ends_with("a script may not run HSETNX (create.lua, line 16)")
            || text.ends_with("a script may not run the 'hsetnx' command"),
        "{text}"
    );
    // (while the queue does not exist: its creation is a script; a plain
    // send, where the server has functions, is not)
    let text = refused("no-evalsha").await;
    // ("… or its subcommand" on 6.2)
    assert!(text.contains("may not run the 'evalsha' command"), "{text}");
    let text = refused("no-keys").await;
    assert!(text.contains("key"), "{text}");
    // the channels: the queue's creation publishes on its channel
    let text = refused("no-channels").await;
    assert!(text.contains("channel"), "{text}");
    // a command the send calls (last: its user creates the queue first): in its function where the server has them,
    // whose lines are the script's (or in its script, on 6.2)
    let text = refused("no-zadd").await;
    // the lone call's ZADD of a message no worker is handed (a handle's
    // first send passes the lease counts, and no worker waits)
    let zadd = include_str!("../src/backend/redis/lua/send.lua")
        .lines()
        .enumerate()
        .find(|(_, l)| l.trim() == r#"redis.call("ZADD", KEYS[1], score, id)"#)
        .unwrap()
        .0
        + 1;
    assert!(
        text.ends_with(&format!(
            "a script may not run ZADD (send.lua, line {zadd})"
        )) || text.ends_with("a script may not run the 'zadd' command"),
        "{text}"
    );
}

#[tokio::test]
async fn a_user_without_scripting_gets_a_clear_error_not_a_hang() {
    let server = RedisServer::start_with(&[
        "--user",
        "ro",
        "on",
        ">ropw",
        "~*",
        "&*",
        "+@read",
        "+@connection",
    ]);
    let client = Client::connect(&format!("redis://ro:ropw@127.0.0.1:{}", server.port))
        .await
        .unwrap();
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        client.enqueue(&Task { fail: false }),
    )
    .await
    .expect("bounded")
    .unwrap_err();
    assert!(matches!(err, Error::NoPermission { .. }), "{err:?}");
    assert!(err.to_string().contains("may not run the '"), "{err}");
}

/// The worker's rule with its channels `channels` instead of `&app:*`.
fn worker_rule_with_channels(channels: &[&str]) -> Vec<String> {
    readme_rule("redjob-worker")
        .into_iter()
        .flat_map(|r| {
            if r == "&app:*" {
                channels.iter().map(|c| c.to_string()).collect()
            } else {
                vec![r]
            }
        })
        .collect()
}

/// A worker of queue "acl" beating every 500 ms, started (not waited for: its
/// listener may never subscribe); its id.
fn beating_worker(client: &Client) -> (common::Running, String) {
    let worker = Worker::builder(client.backend())
        .queue("acl")
        .lease(Duration::from_millis(1500))
        .data(Arc::new(AtomicU32::new(0)))
        .handle_signals(false)
        .build()
        .unwrap();
    let id = worker.id().to_string();
    (common::start(worker), id)
}

/// A rule written before the settings' channel, naming its channels one by
/// one: the worker still listens on the others (wake-ups, hand-offs); only
/// settings' changes wait for its full beats.
#[tokio::test]
async fn a_rule_without_the_settings_channel_still_listens_on_the_others() {
    let rule = worker_rule_with_channels(&["&app:rt:*", "&app:@handoff:*"]);
    let server = server_with(&rule).await;
    let client = client(&server, "redjob-worker", "worker-secret").await;
    let (w, _) = beating_worker(&client);
    let con = server.raw().await;
    let listening = || {
        let mut con = con.clone();
        async move {
            let n: (String, u64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg("app:rt:acl")
                .query_async(&mut con)
                .await
                .unwrap();
            n.1 == 1
        }
    };
    assert!(
        wait_for(Duration::from_secs(5), listening).await,
        "subscribed to the queue's channel"
    );
    // and stays so (a listener that failed would drop it, and try again)
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(listening().await, "still subscribed");
    }
    let log = refused(&server).await;
    assert!(
        log.iter().any(|(what, _)| what == "app:@settings"),
        "the settings' channel was refused: {log:?}"
    );
    w.stop().await;
}

/// While the worker's listener cannot subscribe (no channel at all here), no
/// notice reaches it: every beat is then a full one, and reads a control.
#[tokio::test]
async fn a_worker_whose_listener_is_down_reads_its_control_at_each_beat() {
    let server = server_with(&worker_rule_with_channels(&[])).await;
    let client = client(&server, "redjob-worker", "worker-secret").await;
    let (w, id) = beating_worker(&client);
    // an operator with every right (the control's notice is refused to the
    // worker's user, not to the operator's)
    let mut config = ClientConfig::from_url(server.url());
    config.namespace = "app".into();
    let ops = Client::from_config(config).await.unwrap().backend();
    let quiet = |q: bool| {
        let ops = ops.clone();
        async move {
            ops.workers()
                .await
                .unwrap()
                .first()
                .is_some_and(|w| w.quiet == q)
        }
    };
    assert!(wait_for(Duration::from_secs(5), || quiet(false)).await);
    assert!(ops.quiet_worker(&id).await.unwrap());
    assert!(
        wait_for(Duration::from_secs(3), || quiet(true)).await,
        "read at a beat, with no notice heard"
    );
    assert!(ops.resume_worker(&id).await.unwrap());
    assert!(wait_for(Duration::from_secs(3), || quiet(false)).await);
    w.stop().await;
}

/// A delete stands when its notice to the workers is refused (a user whose
/// channels are named one by one, before the settings' channel was): it
/// returned that error, though the queue was gone, and a retry then said
/// the queue did not exist.
#[tokio::test]
async fn a_queue_delete_stands_when_its_notice_is_refused() {
    let rule: Vec<String> = [
        "app",
        "on",
        ">pw",
        "~*",
        "resetchannels",
        "&app:rt:*",
        "+@all",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let server = server_with(&rule).await;
    let client = client(&server, "app", "pw").await;
    client
        .queues()
        .create_queue("q", redjob::queue::QueueOptions::default())
        .await
        .unwrap();
    client.queues().delete_queue("q").await.unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg("app:q:Q")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    assert!(!exists, "the queue is gone");
}

/// A producer whose rule lacks what a wait for a result needs (`+subscribe`)
/// learns it at once: the refusal is not an outage to retry. The old code
/// retried it every 500 ms and returned it only once the wait's 10 s were up.
#[tokio::test]
async fn a_wait_for_a_result_the_acl_refuses_fails_at_once() {
    let server = server_with(&readme_rule("redjob-producer")).await;
    let producer = client(&server, "redjob-producer", "producer-secret").await;
    let id = producer.enqueue(&Task { fail: false }).await.unwrap();
    let t0 = std::time::Instant::now();
    let r = producer
        .wait_result::<Task>(&id, Duration::from_secs(10))
        .await;
    let took = t0.elapsed();
    assert!(
        matches!(r, Err(Error::NoPermission { .. })),
        "a wait the ACL refuses: {r:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "the refusal came after {took:?}, not at once"
    );
}
