//! Leases, fencing, crashes, shutdown and garbage bodies.

use std::time::Duration;

use redjob::backend::{Backend, DeadLetterEntry, Reschedule, Settle};
use redjob::inspect::{AttemptOutcome, Inspect};
use redjob::queue::{Queues, SendMessage};
use redjob::{Client, Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

use super::Env;
use super::worker::worker;
use crate::common::{Recorder, start, wait_for, wait_until};

/// Hangs on its first attempt when `hang_first`, or for `ms` on every attempt.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "sleepy", queue = "work")]
struct Sleepy {
    key: u64,
    ms: u64,
    hang_first: bool,
}

impl Job for Sleepy {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        if self.hang_first && ctx.attempt() == 1 {
            std::future::pending::<()>().await;
        }
        if !ctx.data::<Fast>().is_ok_and(|f| f.0) {
            tokio::time::sleep(Duration::from_millis(self.ms)).await;
        }
        Ok(())
    }
}

/// `n` jobs keyed 0..n, each sleeping `ms`.
fn sleepy_jobs(n: u64, ms: u64) -> Vec<Sleepy> {
    (0..n)
        .map(|key| Sleepy {
            key,
            ms,
            hang_first: false,
        })
        .collect()
}

/// When present and true, Sleepy does not sleep.
struct Fast(bool);

/// A worker with a 1 s lease, for the lease and crash tests.
fn builder(client: &Client, rec: &Recorder) -> redjob::worker::WorkerBuilder {
    worker(client, rec).lease(Duration::from_secs(1))
}

/// `dead_letters` reads at most a page, whatever limit it is given (the test
/// kit passes `usize::MAX`): one call over a large dead-letter queue held
/// Redis for all of it.
pub async fn dead_letters_reads_a_page_at_most(env: &Env) {
    let backend = env.client.backend();
    let msgs: Vec<SendMessage> = (0..1001).map(|i| SendMessage::new(i.to_string())).collect();
    Backend::send(&backend, "pages", &msgs, &Default::default())
        .await
        .unwrap();
    let mut dead = Vec::new();
    while dead.len() < 1001 {
        let killed = env.kill_due("pages", 500).await;
        assert!(!killed.is_empty(), "every job leased");
        dead.extend(killed);
    }
    assert_eq!(env.client.counts("pages").await.unwrap().dead, 1001);
    let letters = env.client.dead_letters("pages", usize::MAX).await.unwrap();
    assert_eq!(letters.len(), redjob::inspect::MAX_PAGE);
    assert_eq!(letters[0].id, dead[0], "the oldest first");
    assert_eq!(env.client.dead_letters("pages", 3).await.unwrap().len(), 3);
}

/// An RSMQ-style receive of a job redjob delivered and retried keeps its
/// delivery count (in the score's thousandths on Redis), as a change of
/// visibility does: the next fetch counts on (it was the receive count plus
/// one, the retries forgotten, so `max_attempts` could be slipped).
pub async fn an_rsmq_style_receive_keeps_the_delivery_count(env: &Env) {
    let backend = env.client.backend();
    let q = env.queues();
    q.create_queue("rcv", Default::default()).await.unwrap();
    let id = Queues::send(q, "rcv", SendMessage::new("x")).await.unwrap();
    for _ in 0..3 {
        let d = backend
            .fetch("rcv", 1, Duration::from_secs(30))
            .await
            .unwrap()
            .jobs
            .remove(0);
        let retry = Settle {
            reschedules: vec![Reschedule {
                id,
                token: d.token,
                delay: Duration::ZERO,
                deliveries: d.token.attempt(),
                release: false,
                error: Some("boom".into()),
            }],
            ..Settle::default()
        };
        backend.settle("rcv", &retry).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let m = Queues::receive(q, "rcv", Some(Duration::ZERO))
        .await
        .unwrap()
        .expect("received");
    assert_eq!(m.rc, 1);
    tokio::time::sleep(Duration::from_millis(2)).await;
    let d = backend
        .fetch("rcv", 1, Duration::from_secs(30))
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert!(d.token.attempt() >= 4, "attempt {}", d.token.attempt());
}

pub async fn crashed_worker_job_runs_again_exactly_once_more(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    client
        .enqueue(&Sleepy {
            key: 1,
            ms: 0,
            hang_first: true,
        })
        .await
        .unwrap();
    let a = tokio::spawn(builder(&client, &rec).build().unwrap().run());
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    a.abort(); // killed: no shutdown, nothing settled
    let _ = a.await;
    let b = builder(&client, &rec).build().unwrap();
    let b = start(b);
    assert!(
        wait_until(Duration::from_secs(5), || rec.len() == 2).await,
        "re-run after the lease"
    );
    // three more lease periods: no third run
    tokio::time::sleep(Duration::from_secs(3)).await;
    b.stop().await;
    let runs = rec.runs();
    assert_eq!(runs.len(), 2);
    assert_eq!((runs[0].attempt, runs[1].attempt), (1, 2));
    let gap = runs[1].at.duration_since(runs[0].at);
    assert!(
        gap >= Duration::from_millis(900),
        "not before the lease ran out: {gap:?}"
    );
    assert_eq!(client.stats("work").await.unwrap().processed, 1);
    assert_eq!(client.queues().attributes("work").await.unwrap().msgs, 0);
}

pub async fn job_running_three_leases_is_never_delivered_twice(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let workers: Vec<_> = (0..2)
        .map(|_| builder(&client, &rec).build().unwrap())
        .collect();
    let running: Vec<_> = workers.into_iter().map(start).collect();
    client
        .enqueue(&Sleepy {
            key: 1,
            ms: 3500,
            hang_first: false,
        })
        .await
        .unwrap();
    let backend = client.backend();
    assert!(
        wait_for(Duration::from_secs(10), || async {
            backend.stats("work").await.unwrap().processed == 1
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for w in running {
        w.stop().await;
    }
    assert_eq!(rec.len(), 1, "one delivery while its worker lived");
}

/// A delivery carries its queue wait: how long the job had been due when it was
/// leased (for a job whose lease ran out, since it ran out).
pub async fn a_delivery_says_how_long_it_was_due(env: &Env) {
    let client = env.client.clone();
    let backend = client.backend();
    let job = Sleepy {
        key: 1,
        ms: 0,
        hang_first: false,
    };
    client.enqueue(&job).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let first = backend
        .fetch("work", 10, Duration::from_millis(200))
        .await
        .unwrap();
    let waited = first.jobs[0].waited_ms;
    assert!((400..2000).contains(&waited), "waited {waited} ms");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = backend
        .fetch("work", 10, Duration::from_secs(30))
        .await
        .unwrap();
    let waited = again.jobs[0].waited_ms;
    assert!((250..2000).contains(&waited), "lease over for {waited} ms");
    client.enqueue(&job).await.unwrap();
    let fresh = backend
        .fetch("work", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(fresh.jobs[0].waited_ms < 300, "{:?}", fresh.jobs[0]);
}

/// A job sent with a delay is due at its send's microsecond plus the delay
/// (a delayed send marks its id with the delay, see docs/layout.md): a fetch
/// before then names that microsecond as the next due, and a fetch once the
/// backend's clock has reached it leases the job, rather than waiting for the
/// whole ms its score is rounded up to. The memory backend rounded the due
/// time up (`Clock::advance` says "a delay runs from the next whole
/// millisecond after the send ... on Redis too"), so a job enqueued in a test
/// on memory started up to 1 ms later than on Redis, and a test that moves
/// the clock by exactly the delay found nothing due.
pub async fn a_delayed_send_is_due_at_its_microsecond_plus_the_delay(env: &Env) {
    let backend = env.client.backend();
    let delay = Duration::from_millis(300);
    if let redjob::backend::any::AnyBackend::Memory(m) = env.client.queues() {
        // a send a quarter into a ms, as most sends on Redis are
        let into = m.clock().now_us() % 1000;
        m.clock()
            .advance_exact(Duration::from_micros((1250 - into) % 1000));
    }
    let msg = SendMessage::new("later").delay(delay);
    let sent = Backend::send(&backend, "exact", &[msg], &Default::default())
        .await
        .unwrap();
    let id = sent[0].id;
    let sent_us = u64::from_str_radix(&id.as_str()[..10], 36).unwrap();
    let due_us = sent_us + delay.as_micros() as u64;
    let early = backend
        .fetch("exact", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(early.jobs.is_empty(), "leased before its due");
    assert!(early.now_us < due_us);
    // the due time lands inside a ms on this send (else the check says nothing)
    if !due_us.is_multiple_of(1000) {
        assert_eq!(
            early.next_due_us,
            Some(due_us),
            "the next due is the send's µs plus the delay ({} µs into its ms)",
            due_us % 1000
        );
    }
    // the backend's clock reaches the exact due (tokio's paused clock moves
    // the memory backend's by exactly this much)
    tokio::time::sleep(Duration::from_micros(due_us - early.now_us)).await;
    let got = backend
        .fetch("exact", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(got.now_us >= due_us);
    assert_eq!(
        got.jobs.iter().map(|d| d.id).collect::<Vec<_>>(),
        [id],
        "due at {due_us} µs, fetched at {} µs",
        got.now_us
    );
}

/// A delayed keyed job is leased at the whole ms its score says (its exact
/// due is in no index a fetch reads), and a fetch before then names that ms
/// as the next due, on both backends. Redis's fetch named the exact due its
/// id marks, so a worker woke then, found nothing, and was told the same
/// passed due again for up to 1 ms.
pub async fn a_delayed_keyed_jobs_next_due_is_when_a_fetch_takes_it(env: &Env) {
    let backend = env.client.backend();
    let delay = Duration::from_millis(300);
    if let redjob::backend::any::AnyBackend::Memory(m) = env.client.queues() {
        let into = m.clock().now_us() % 1000;
        m.clock()
            .advance_exact(Duration::from_micros((1250 - into) % 1000));
    }
    let msg = SendMessage::new("later")
        .keyed(redjob::queue::Keyed::new("acct"))
        .delay(delay);
    let sent = Backend::send(&backend, "kexact", &[msg], &Default::default())
        .await
        .unwrap();
    let id = sent[0].id;
    let due_ms = backend.job("kexact", &id).await.unwrap().unwrap().due_ms;
    let early = backend
        .fetch("kexact", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(early.jobs.is_empty(), "leased before its due");
    assert_eq!(early.next_due_us, Some(due_ms * 1000));
    // at that ms it is taken
    tokio::time::sleep(Duration::from_micros(due_ms * 1000 - early.now_us)).await;
    let got = backend
        .fetch("kexact", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(got.jobs.iter().map(|d| d.id).collect::<Vec<_>>(), [id]);
}

/// A delayed job moved by redjob onto the very ms its send's score rounded
/// its exact due up to (here a unique send's new due time) is due at that
/// ms, as asked, on both backends: its exact due no longer counts. Redis
/// moved it a ms later (`rescore` in lib.lua, so that its id's mark would
/// not let a fetch take it before that ms), where memory kept the ms asked.
pub async fn a_delayed_job_moved_onto_its_sends_ms_is_due_then(env: &Env) {
    use redjob::queue::{OnDuplicate, Unique};
    let backend = env.client.backend();
    let delay = Duration::from_millis(300);
    if let redjob::backend::any::AnyBackend::Memory(m) = env.client.queues() {
        let into = m.clock().now_us() % 1000;
        m.clock()
            .advance_exact(Duration::from_micros((1250 - into) % 1000));
    }
    let unique = || Unique::new("one").on_duplicate(OnDuplicate::ReplaceDelay);
    let msg = SendMessage::new("later").unique(unique()).delay(delay);
    let sent = Backend::send(&backend, "umove", &[msg], &Default::default())
        .await
        .unwrap();
    let id = sent[0].id;
    let sent_us = u64::from_str_radix(&id.as_str()[..10], 36).unwrap();
    let due_us = sent_us + delay.as_micros() as u64;
    if due_us.is_multiple_of(1000) {
        // a due on a whole ms has no exact due to drop
        return;
    }
    let ms = due_us.div_ceil(1000);
    assert_eq!(backend.job("umove", &id).await.unwrap().unwrap().due_ms, ms);
    // a unique send moves it to that very ms
    let moved = SendMessage::new("again").unique(unique()).at_unix_ms(ms);
    let again = Backend::send(&backend, "umove", &[moved], &Default::default())
        .await
        .unwrap();
    assert_eq!(again[0].id, id);
    assert_eq!(
        backend.job("umove", &id).await.unwrap().unwrap().due_ms,
        ms,
        "moved to {ms}"
    );
    let early = backend
        .fetch("umove", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(early.jobs.is_empty(), "leased before its due");
    assert_eq!(early.next_due_us, Some(ms * 1000));
}

pub async fn stale_delivery_cannot_touch_the_newer_one(env: &Env) {
    let client = env.client.clone();
    let backend = client.backend();
    client
        .enqueue(&Sleepy {
            key: 1,
            ms: 0,
            hang_first: false,
        })
        .await
        .unwrap();
    let lease = Duration::from_millis(200);
    let first = backend
        .fetch("work", 10, lease)
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert_eq!(first.token.attempt(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = backend
        .fetch("work", 10, Duration::from_secs(30))
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert_eq!((second.id, second.token.attempt()), (first.id, 2));

    let stale = |s: Settle| s;
    let acked = backend
        .settle(
            "work",
            &stale(Settle {
                acks: vec![(first.id, first.token)],
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    assert_eq!(acked.acked, 0);
    assert!(acked.gone.is_empty(), "delivered again, not gone");
    let retry = Reschedule {
        id: first.id,
        token: first.token,
        delay: Duration::ZERO,
        deliveries: 1,
        release: false,
        error: None,
    };
    let r = backend
        .settle(
            "work",
            &Settle {
                reschedules: vec![retry],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(r.rescheduled, 0);
    let dead = DeadLetterEntry {
        id: first.id,
        token: first.token,
        error: "stale".into(),
    };
    let d = backend
        .settle(
            "work",
            &Settle {
                dead: vec![dead],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(d.dead, 0);
    assert_eq!(
        backend
            .extend("work", &[(first.id, first.token)], lease)
            .await
            .unwrap(),
        [None]
    );
    assert!(backend.dead_letters("work", 10).await.unwrap().is_empty());
    // the newer delivery is untouched: still hidden, and its own token works
    assert!(
        backend
            .fetch("work", 10, lease)
            .await
            .unwrap()
            .jobs
            .is_empty()
    );
    let renewed = backend
        .extend(
            "work",
            &[(second.id, second.token)],
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let t = renewed[0].expect("held");
    assert_eq!(t.attempt(), 2);
    assert!(t.lease_until_ms() >= second.token.lease_until_ms());
    let ack = Settle {
        acks: vec![(second.id, t)],
        ..Default::default()
    };
    let done = backend.settle("work", &ack).await.unwrap();
    assert_eq!(done.acked, 1);
    assert!(done.gone.is_empty());
    assert_eq!(client.queues().attributes("work").await.unwrap().msgs, 0);
    // settling a job that is gone (deleted while it ran, or settled already) names it
    let again = backend.settle("work", &ack).await.unwrap();
    assert_eq!(
        (again.acked, again.gone.as_slice()),
        (0, [second.id].as_slice())
    );
}

pub async fn shutdown_with_100_in_flight_loses_none_and_hides_none(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    client
        .enqueue_batch(&sleepy_jobs(100, 60_000))
        .await
        .unwrap();
    let w = builder(&client, &rec)
        .lease(Duration::from_secs(30))
        .concurrency(100)
        .grace_period(Duration::from_millis(300))
        .build()
        .unwrap();
    let w = start(w);
    assert!(wait_until(Duration::from_secs(10), || rec.len() == 100).await);
    w.stop().await;
    // all 100 are back and visible now, not after their 30 s lease
    let visible = env.visible_now("work").await;
    assert_eq!(visible, 100);
    assert_eq!(client.queues().attributes("work").await.unwrap().msgs, 100);
    let stats = client.stats("work").await.unwrap();
    assert_eq!(
        (stats.processed, stats.retried, stats.failed),
        (0, 0, 0),
        "a release is no failure"
    );

    // the next worker runs them all, and the interrupted attempt was not counted
    let again = Recorder::default();
    let w = builder(&client, &again).data(Fast(true)).build().unwrap();
    let w = start(w);
    assert!(wait_until(Duration::from_secs(10), || again.len() == 100).await);
    let backend = client.backend();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            backend.stats("work").await.unwrap().processed == 100
        })
        .await
    );
    w.stop().await;
    assert!(again.runs().iter().all(|r| r.attempt == 1));
    assert_eq!(again.counts().len(), 100);
}

pub async fn shutdown_lets_running_jobs_finish_within_grace(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let jobs: Vec<Sleepy> = (0..50)
        .map(|key| Sleepy {
            key,
            ms: 300,
            hang_first: false,
        })
        .collect();
    client.enqueue_batch(&jobs).await.unwrap();
    let w = builder(&client, &rec)
        .concurrency(50)
        .grace_period(Duration::from_secs(10))
        .build()
        .unwrap();
    let w = start(w);
    assert!(wait_until(Duration::from_secs(10), || rec.len() == 50).await);
    w.stop().await;
    assert_eq!(
        client.stats("work").await.unwrap().processed,
        50,
        "acks flushed before exit"
    );
    assert_eq!(client.queues().attributes("work").await.unwrap().msgs, 0);
}

pub async fn garbage_bodies_are_dead_lettered_with_reasons_and_good_jobs_run(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let rsmq = client.queues();
    client
        .enqueue(&Sleepy {
            key: 0,
            ms: 0,
            hang_first: false,
        })
        .await
        .unwrap();
    let bad: Vec<(&[u8], &str)> = vec![
        (b"not json", "cannot decode job"),
        (br#"{"hello":"world"}"#, "cannot decode job"),
        (
            br#"{"type":"no_such_job","args":{}}"#,
            "unknown job type \"no_such_job\"",
        ),
        (
            br#"{"type":"sleepy","args":{"key":"one"}}"#,
            "cannot decode job",
        ),
        (b"", "cannot decode job"),
        (b"\xff\xfe\xfd", "cannot decode job"),
    ];
    let mut batch = Vec::new();
    for (i, (body, _)) in bad.iter().enumerate() {
        batch.push(SendMessage::new(*body));
        let good = redjob::job::encode(&Sleepy {
            key: i as u64 + 1,
            ms: 0,
            hang_first: false,
        })
        .unwrap();
        batch.push(SendMessage::new(good));
    }
    let ids = rsmq.send_batch("work", &batch).await.unwrap();
    // unknown types dead-lettered at once (by default a newer worker gets an hour)
    let w = builder(&client, &rec)
        .unknown_jobs_retry_for(Duration::ZERO)
        .build()
        .unwrap();
    let w = start(w);
    assert!(wait_until(Duration::from_secs(10), || rec.len() == 7).await);
    let backend = client.backend();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            backend.dead_letters("work", 100).await.unwrap().len() == 6
        })
        .await
    );
    w.stop().await;
    let dead = backend.dead_letters("work", 100).await.unwrap();
    for (i, (body, reason)) in bad.iter().enumerate() {
        let d = dead
            .iter()
            .find(|d| d.id == ids[2 * i])
            .unwrap_or_else(|| panic!("bad body {i} not dead-lettered"));
        assert_eq!(d.body, *body, "body kept as it was");
        assert!(d.error.contains(reason), "{i}: {}", d.error);
    }
    let stats = backend.stats("work").await.unwrap();
    assert_eq!((stats.processed, stats.dead), (7, 6));
    assert_eq!(rsmq.attributes("work").await.unwrap().msgs, 0);
}

pub async fn long_jobs_are_not_prefetched_away_from_an_idle_worker(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let workers: Vec<_> = (0..2)
        .map(|_| builder(&client, &rec).concurrency(2).build().unwrap())
        .collect();
    let running: Vec<_> = workers.into_iter().map(start).collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // two rounds: the second comes after the workers have timed these jobs as long
    for round in 0..2u64 {
        let jobs: Vec<Sleepy> = (0..4)
            .map(|i| Sleepy {
                key: round * 10 + i,
                ms: 400,
                hang_first: false,
            })
            .collect();
        client.enqueue_batch(&jobs).await.unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || rec.len() as u64
                == 4 * (round + 1))
            .await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for w in running {
        w.stop().await;
    }
    // each round's four jobs started together: two per worker, none held back
    let runs = rec.runs();

    for round in runs.chunks(4) {
        let first = round.iter().map(|r| r.at).min().unwrap();
        let last = round.iter().map(|r| r.at).max().unwrap();
        assert!(
            last - first < Duration::from_millis(200),
            "a job waited {:?} behind another while a worker was free",
            last - first
        );
    }
}

/// A worker of 2 slots first times `learn` jobs of `ms` each; then two slow
/// jobs hold both slots and 40 more of `ms` wait behind them. After 400 ms an
/// RSMQ client pops what is still visible, so the leased count is what the
/// worker took; returns it once the leased ones ran and all settled.
async fn leased_behind_two_slow_jobs(env: &Env, learn: u64, ms: u64) -> usize {
    let client = env.client.clone();
    let rec = Recorder::default();
    let w = start(worker(&client, &rec).concurrency(2).build().unwrap());
    let rsmq = client.queues();
    let sleepy = |key, ms| Sleepy {
        key,
        ms,
        hang_first: false,
    };
    let timed: Vec<Sleepy> = (0..learn).map(|i| sleepy(i, ms)).collect();
    client.enqueue_batch(&timed).await.unwrap();
    let n = learn as usize;
    assert!(
        wait_until(Duration::from_secs(10), || rec.len() == n).await,
        "the jobs to time ran"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut jobs = vec![sleepy(1000, 1500), sleepy(1001, 1500)];
    jobs.extend((0..40).map(|i| sleepy(2000 + i, ms)));
    client.enqueue_batch(&jobs).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut popped = 0;
    while rsmq.pop("work").await.unwrap().is_some() {
        popped += 1;
    }
    let leased = 42 - popped;
    assert!(
        wait_until(Duration::from_secs(20), || rec.len() == n + leased).await,
        "the leased ones ran"
    );
    assert!(
        wait_for(Duration::from_secs(20), || async {
            rsmq.attributes("work").await.unwrap().msgs == 0
        })
        .await,
        "all settled"
    );
    w.stop().await;
    leased
}

/// The default prefetch is 7 × the concurrency for quick jobs (well under
/// 1 ms; less as their average nears 10 ms / 7): a worker of 2 slots leases
/// up to 16 at once, so one fetch carries many (4 before, when the prefetch
/// was the concurrency).
pub async fn quick_jobs_are_prefetched_seven_per_slot(env: &Env) {
    let leased = leased_behind_two_slow_jobs(env, 24, 0).await;
    assert!(
        (5..=16).contains(&leased),
        "2 running and up to 14 prefetched, got {leased} leased"
    );
}

/// Jobs of 20 ms are prefetched no deeper than the concurrency, the default
/// 7 × notwithstanding (a prefetched job would wait longer than 10 ms): a
/// worker of 2 slots behind two slow jobs holds at most 4.
pub async fn slower_jobs_are_prefetched_no_deeper_than_the_concurrency(env: &Env) {
    let leased = leased_behind_two_slow_jobs(env, 16, 20).await;
    assert!(
        (2..=4).contains(&leased),
        "2 running and at most 2 prefetched, got {leased} leased"
    );
}

/// A release gives its delivery count back (it was no attempt), yet the next
/// delivery's token is never an earlier one's: a settle of the released delivery
/// (a retried call whose first reply was lost) must not touch the new one. Each
/// round releases and fetches again at once, mostly within one ms (always on the
/// memory backend's paused clock), where the old encoding repeated the token.
pub async fn a_release_never_lets_the_next_delivery_reuse_a_token(env: &Env) {
    let client = env.client.clone();
    let backend = client.backend();
    let lease = Duration::from_secs(30);
    client
        .enqueue(&Sleepy {
            key: 1,
            ms: 0,
            hang_first: false,
        })
        .await
        .unwrap();
    let release = |d: &redjob::backend::Delivery| Settle {
        reschedules: vec![Reschedule {
            id: d.id,
            token: d.token,
            delay: Duration::ZERO,
            deliveries: d.token.attempt().saturating_sub(1),
            release: true,
            error: None,
        }],
        ..Default::default()
    };
    let mut seen = Vec::new();
    let mut last = None;
    for round in 0..20 {
        let d = backend
            .fetch("work", 10, lease)
            .await
            .unwrap()
            .jobs
            .remove(0);
        assert_eq!(
            d.token.attempt(),
            1,
            "round {round}: a release is no attempt"
        );
        assert!(
            !seen.contains(&d.token),
            "round {round}: token {} of an earlier delivery again",
            d.token
        );
        seen.push(d.token);
        // the earlier delivery's release, sent again: must not apply to this one
        if let Some(old) = &last {
            let r = backend.settle("work", &release(old)).await.unwrap();
            assert_eq!(r.rescheduled, 0, "round {round}: a stale release applied");
        }
        let r = backend.settle("work", &release(&d)).await.unwrap();
        assert_eq!(r.rescheduled, 1);
        last = Some(d);
    }
    // renewals never move a lease end back either, and the job runs as attempt 1
    let d = backend
        .fetch("work", 10, lease)
        .await
        .unwrap()
        .jobs
        .remove(0);
    let short = backend
        .extend("work", &[(d.id, d.token)], Duration::from_secs(1))
        .await
        .unwrap()[0]
        .expect("held");
    assert!(short.lease_until_ms() >= d.token.lease_until_ms());
    assert!(!seen.contains(&short));
    let done = backend
        .settle(
            "work",
            &Settle {
                acks: vec![(d.id, short)],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(done.acked, 1);
}

/// A retry is due at the time inspection reports for it, not a ms later: every
/// fetch whose clock had reached that time leases it, and none before.
pub async fn a_retry_is_fetchable_at_the_due_time_inspection_reports(env: &Env) {
    use redjob::inspect::{Inspect, JobState};
    let client = env.client.clone();
    let backend = client.backend();
    let lease = Duration::from_secs(30);
    let id = client
        .enqueue(&Sleepy {
            key: 1,
            ms: 0,
            hang_first: false,
        })
        .await
        .unwrap();
    for attempt in 1..=3u32 {
        let d = backend
            .fetch("work", 10, lease)
            .await
            .unwrap()
            .jobs
            .remove(0);
        assert_eq!(d.token.attempt(), attempt);
        let retry = Settle {
            reschedules: vec![Reschedule {
                id: d.id,
                token: d.token,
                delay: Duration::from_millis(20),
                deliveries: d.token.attempt(),
                release: false,
                error: Some("again".into()),
            }],
            ..Default::default()
        };
        assert_eq!(backend.settle("work", &retry).await.unwrap().rescheduled, 1);
        let info = backend.job("work", &id).await.unwrap().expect("queued");
        assert_eq!(info.state, JobState::Scheduled);
        assert_eq!(info.attempts, attempt);
        let due = info.due_ms;
        let mut empty = 0;
        let got = loop {
            let f = backend.fetch("work", 10, lease).await.unwrap();
            let now = f.now_us / 1000;
            if let Some(j) = f.jobs.first() {
                assert!(now >= due, "leased at {now}, before its due {due}");
                break j.clone();
            }
            assert!(
                now < due,
                "attempt {attempt}: a fetch at {now} found nothing though inspection said due at {due}"
            );
            empty += 1;
            assert!(empty < 100_000, "never fetched");
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        assert_eq!(got.token.attempt(), attempt + 1);
        // back in the queue for the next round, as a retry due now
        let again = Settle {
            reschedules: vec![Reschedule {
                id: got.id,
                token: got.token,
                delay: Duration::ZERO,
                deliveries: got.token.attempt() - 1,
                release: true,
                error: None,
            }],
            ..Default::default()
        };
        assert_eq!(backend.settle("work", &again).await.unwrap().rescheduled, 1);
    }
}

/// Jobs due at one score are leased together (one group of fetch.lua's
/// reply, one meta for all), and jobs whose leases ran out at one score
/// each keep their own count and the record of their lost lease; every
/// token the fetch hands out passes its fence.
pub async fn a_fetch_gives_each_job_its_count_among_jobs_that_share_a_score(env: &Env) {
    let client = env.client.clone();
    let backend = client.backend();
    client.enqueue_batch(&sleepy_jobs(6, 0)).await.unwrap();
    // two leased briefly: their leases run out together
    let first = backend
        .fetch("work", 2, Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(first.jobs.len(), 2);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let all = backend
        .fetch("work", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(all.jobs.len(), 6, "every job due again or never leased");
    let lost: Vec<_> = first.jobs.iter().map(|d| d.id).collect();
    let mut fresh_waits = Vec::new();
    for d in &all.jobs {
        if lost.contains(&d.id) {
            assert_eq!(d.token.attempt(), 2, "a lost lease counts: {}", d.id);
        } else {
            assert_eq!(d.token.attempt(), 1, "{}", d.id);
            fresh_waits.push(d.waited_ms);
        }
    }
    assert_eq!(fresh_waits.len(), 4);
    assert!(
        fresh_waits
            .iter()
            .all(|w| *w == fresh_waits[0] && *w >= 400),
        "sent together, due as long: {fresh_waits:?}"
    );
    for d in &first.jobs {
        let job = backend
            .job("work", &d.id)
            .await
            .unwrap()
            .expect("in flight");
        let outcomes: Vec<_> = job.runs.iter().map(|a| (a.number, a.outcome)).collect();
        assert_eq!(outcomes, [(1, AttemptOutcome::LeaseLost)], "{}", d.id);
    }
    // settled together in an order where their tokens alternate (a settle
    // sends its acks in runs of one token)
    let (lost_acks, fresh_acks): (Vec<_>, Vec<_>) = all
        .jobs
        .iter()
        .map(|d| (d.id, d.token))
        .partition(|(id, _)| lost.contains(id));
    let mut acks = Vec::new();
    for (i, a) in fresh_acks.into_iter().enumerate() {
        acks.push(a);
        if let Some(l) = lost_acks.get(i) {
            acks.push(*l);
        }
    }
    assert_eq!(acks.len(), 6);
    settle_all(&client, acks, 6).await;
}

/// Jobs sent together share a score; a fetch leases such groups, lone jobs
/// and lost leases among them each once, in the order they are due: by due
/// time, then by id (a batch's ids sort in send order), a fetch's size cutting
/// through a group.
pub async fn a_fetch_leases_large_groups_lone_jobs_and_lost_leases_in_due_order(env: &Env) {
    let client = env.client.clone();
    let backend = client.backend();
    let pause = || tokio::time::sleep(Duration::from_millis(3));
    let a = client.enqueue_batch(&sleepy_jobs(40, 0)).await.unwrap();
    pause().await;
    let b = client.enqueue_batch(&sleepy_jobs(40, 0)).await.unwrap();
    let mut lone = Vec::new();
    for job in sleepy_jobs(3, 0) {
        pause().await;
        lone.push(client.enqueue(&job).await.unwrap());
    }
    pause().await;
    let c = client.enqueue_batch(&sleepy_jobs(20, 0)).await.unwrap();
    let ids = |f: &redjob::backend::Fetched| f.jobs.iter().map(|d| d.id).collect::<Vec<_>>();
    // the first 30 of a group, leased briefly
    let f1 = backend
        .fetch("work", 30, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(ids(&f1), a[..30]);
    // the group's rest, then the next group's first 20
    let f2 = backend
        .fetch("work", 30, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(ids(&f2), [&a[30..], &b[..20]].concat());
    // the first 30's leases run out: due after every job sent
    tokio::time::sleep(Duration::from_millis(500)).await;
    let f3 = backend
        .fetch("work", 200, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(ids(&f3), [&b[20..], &lone, &c, &a[..30]].concat());
    for d in &f3.jobs {
        let lost = a[..30].contains(&d.id);
        assert_eq!(d.token.attempt(), if lost { 2 } else { 1 }, "{}", d.id);
    }
    let more = backend
        .fetch("work", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(more.jobs.is_empty(), "each job leased once");
    let acks = f2
        .jobs
        .iter()
        .chain(&f3.jobs)
        .map(|d| (d.id, d.token))
        .collect();
    settle_all(&client, acks, 103).await;
}

/// Acks `acks` on "work" in one settle: each passes its fence, and the queue
/// is left empty.
async fn settle_all(client: &Client, acks: Vec<(redjob::JobId, redjob::backend::Token)>, n: u64) {
    let done = client
        .backend()
        .settle(
            "work",
            &Settle {
                acks,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(done.acked, n, "every token passed its fence");
    assert_eq!(client.queues().attributes("work").await.unwrap().msgs, 0);
}

/// An id given twice to `delete_batch` or `extend` is one job: a running
/// job's lease is counted off once (a queue's global limit still holds) and
/// extended once, both answers alike.
pub async fn an_id_given_twice_is_one_job_to_delete_and_to_extend(env: &Env) {
    use redjob::ops::{Admin, Concurrency, QueueSettings};
    const HOUR: Duration = Duration::from_secs(3600);
    let b = env.client.backend();
    b.create_queue("twice", redjob::queue::QueueOptions::default())
        .await
        .unwrap();
    Admin::set_settings(
        &b,
        "twice",
        &QueueSettings::concurrency(Concurrency::global(2)),
    )
    .await
    .unwrap();
    for i in 0..6 {
        Queues::send(&b, "twice", SendMessage::new(format!("{i}")))
            .await
            .unwrap();
    }
    let first = b.fetch("twice", 10, HOUR).await.unwrap().jobs;
    assert_eq!(first.len(), 2, "the limit of 2");
    let a = first[0].id;
    assert_eq!(b.delete_batch("twice", &[a, a]).await.unwrap(), 1);
    assert_eq!(b.counts("twice").await.unwrap().in_flight, 1);
    assert_eq!(b.limit_usage("twice").await.unwrap().in_flight, 1);
    let second = b.fetch("twice", 10, HOUR).await.unwrap().jobs;
    assert_eq!(second.len(), 1, "one place was free, not two");
    let (c, t) = (second[0].id, second[0].token);
    let got = b.extend("twice", &[(c, t), (c, t)], HOUR).await.unwrap();
    assert!(got[0].is_some() && got[0] == got[1], "{got:?}");
    assert_eq!(b.counts("twice").await.unwrap().in_flight, 2);
    assert_eq!(b.limit_usage("twice").await.unwrap().in_flight, 2);
    assert!(b.fetch("twice", 10, HOUR).await.unwrap().jobs.is_empty());
    // a lease of 2 s extended twice at once: once its first second is past,
    // the limit still counts it once, not twice
    b.create_queue("twice2", redjob::queue::QueueOptions::default())
        .await
        .unwrap();
    Admin::set_settings(
        &b,
        "twice2",
        &QueueSettings::concurrency(Concurrency::global(2)),
    )
    .await
    .unwrap();
    for i in 0..3 {
        Queues::send(&b, "twice2", SendMessage::new(format!("{i}")))
            .await
            .unwrap();
    }
    let d = b
        .fetch("twice2", 1, Duration::from_secs(2))
        .await
        .unwrap()
        .jobs;
    let (d, t) = (d[0].id, d[0].token);
    let got = b.extend("twice2", &[(d, t), (d, t)], HOUR).await.unwrap();
    assert!(got[0].is_some() && got[0] == got[1], "{got:?}");
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(b.limit_usage("twice2").await.unwrap().in_flight, 1);
    let more = b.fetch("twice2", 10, HOUR).await.unwrap().jobs;
    assert_eq!(more.len(), 1, "one place of two is held");
}
