//! A queue's settings, stored with the queue and in force for every worker:
//! read and changed by an operator, a worker's builder value stored only where
//! none is, and the dead-letter retention a settle applies taken from them.

use std::time::Duration;

use redjob::backend::Backend;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, Concurrency, QueueSettings, Retention};
use redjob::queue::{QueueOptions, Queues};
use redjob::{Error, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use super::ops::kill;
use crate::common::{start_serving, wait_for};

fn keep(n: u64) -> Retention {
    Retention {
        max_count: Some(n),
        max_age: None,
    }
}

/// Dies at once.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "settings_doomed", queue = "settings")]
struct Doomed {
    key: u64,
}

impl Job for Doomed {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Err(JobError::fatal(format!("account {} closed", self.key)))
    }
}

pub async fn settings_are_stored_with_the_queue_and_go_with_it(env: &Env) {
    let q = env.client.backend();
    for queue in ["nope", "bad name"] {
        let r = q.settings(queue).await;
        assert!(
            matches!(
                r,
                Err(Error::QueueNotFound { .. } | Error::InvalidQueueName { .. })
            ),
            "{queue}: {r:?}"
        );
        let r = q
            .set_settings(queue, &QueueSettings::dead_letters(keep(3)))
            .await;
        assert!(r.is_err(), "{queue}: {r:?}");
        let r = q
            .init_settings(queue, &QueueSettings::dead_letters(keep(3)), "worker w")
            .await;
        assert!(r.is_err(), "{queue}: {r:?}");
    }
    q.create_queue("s", QueueOptions::default()).await.unwrap();
    let none = q.settings("s").await.unwrap();
    assert!(none.is_empty());
    assert_eq!(none.in_force().dead_letters, Retention::default());

    // a worker's value is stored where none is, and only there
    let first = q
        .init_settings("s", &QueueSettings::dead_letters(keep(7)), "worker w1")
        .await
        .unwrap();
    assert_eq!(first.dead_letters, Some(keep(7)));
    let by = first.set_by.dead_letters.clone().expect("who stored it");
    assert_eq!(by.by, "worker w1");
    assert!(by.at_ms > 1_700_000_000_000, "{by:?}");
    let second = q
        .init_settings(
            "s",
            &QueueSettings::dead_letters(Retention::UNBOUNDED),
            "worker w2",
        )
        .await
        .unwrap();
    assert_eq!(second.dead_letters, Some(keep(7)), "the first stays");
    assert_eq!(second.set_by.dead_letters, Some(by), "and who stored it");
    assert_eq!(second.set_by.history, None, "nothing stored, no one");

    // an operator's change goes over it; unbounded and ages survive storage
    for r in [
        Retention::UNBOUNDED,
        Retention {
            max_count: None,
            max_age: Some(Duration::from_secs(3600)),
        },
        keep(2),
    ] {
        let set = q
            .set_settings("s", &QueueSettings::dead_letters(r))
            .await
            .unwrap();
        assert_eq!(set.dead_letters, Some(r));
        assert_eq!(q.settings("s").await.unwrap().dead_letters, Some(r));
    }
    // who: the operator's actor
    let ops = env.client.clone().acting_as("ops alice");
    let set = ops
        .set_settings("s", &QueueSettings::concurrency(Concurrency::per_worker(3)))
        .await
        .unwrap();
    assert_eq!(set.concurrency, Some(Concurrency::per_worker(3)));
    assert_eq!(set.set_by.concurrency.unwrap().by, "ops alice");
    assert_eq!(set.dead_letters, Some(keep(2)), "the others stay");
    let set = ops
        .set_settings("s", &QueueSettings::concurrency(Concurrency::UNLIMITED))
        .await
        .unwrap();
    assert_eq!(
        set.concurrency,
        Some(Concurrency::UNLIMITED),
        "stored: no limit"
    );
    assert_eq!(set.in_force().concurrency.per_worker, None);
    for bad in [0, redjob::ops::MAX_CONCURRENCY + 1] {
        let err = q
            .set_settings(
                "s",
                &QueueSettings::concurrency(Concurrency::per_worker(bad)),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidValue { .. }), "{bad}: {err}");
    }
    // storing nothing changes nothing; a limit of 0 is refused
    let same = q
        .set_settings("s", &QueueSettings::default())
        .await
        .unwrap();
    assert_eq!(same.dead_letters, Some(keep(2)));
    let err = q
        .set_settings("s", &QueueSettings::dead_letters(keep(0)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidValue { .. }), "{err}");

    // deleted with the queue
    q.delete_queue("s").await.unwrap();
    q.create_queue("s", QueueOptions::default()).await.unwrap();
    assert!(q.settings("s").await.unwrap().is_empty());
}

/// A change of some fields of the history or the dead-letter retention
/// (`QueueSettings::history_parts`, `dead_letters_parts`) keeps the others
/// as stored, records its own actor, and is checked as a whole change is.
pub async fn a_change_of_some_retention_fields_keeps_the_others_as_stored(env: &Env) {
    use redjob::ops::{History, HistoryPart, RetentionPart};
    let q = env.client.backend();
    q.create_queue("p", QueueOptions::default()).await.unwrap();
    let (bob, alice) = (
        env.client.clone().acting_as("cli bob"),
        env.client.clone().acting_as("dashboard alice"),
    );
    let week = Some(Duration::from_secs(7 * 86_400));
    let day = Some(Duration::from_secs(86_400));

    // nothing stored: the others are the defaults
    let s = alice
        .set_settings(
            "p",
            &QueueSettings::history_parts([HistoryPart::MaxCount(Some(5))]),
        )
        .await
        .unwrap();
    let five = History {
        max_count: Some(5),
        ..History::default()
    };
    assert_eq!(s.history, Some(five));
    assert_eq!(s.set_by.history.unwrap().by, "dashboard alice");
    let s = alice
        .set_settings(
            "p",
            &QueueSettings::dead_letters_parts([RetentionPart::MaxAge(day)]),
        )
        .await
        .unwrap();
    assert_eq!(
        s.dead_letters,
        Some(Retention {
            max_age: day,
            ..Retention::default()
        })
    );

    // another operator's whole value, then a change of one field of it
    let h = History {
        enabled: false,
        max_count: None,
        max_age: week,
        args_max_age: None,
    };
    bob.set_settings("p", &QueueSettings::history(h))
        .await
        .unwrap();
    bob.set_settings("p", &QueueSettings::dead_letters(keep(9)))
        .await
        .unwrap();
    for (part, want) in [
        (
            HistoryPart::MaxCount(Some(7)),
            History {
                max_count: Some(7),
                ..h
            },
        ),
        (
            HistoryPart::Enabled(true),
            History {
                enabled: true,
                max_count: Some(7),
                ..h
            },
        ),
        (
            HistoryPart::ArgsMaxAge(Some(Duration::ZERO)),
            History {
                enabled: true,
                max_count: Some(7),
                args_max_age: Some(Duration::ZERO),
                ..h
            },
        ),
        (
            HistoryPart::MaxAge(None),
            History {
                enabled: true,
                max_count: Some(7),
                max_age: None,
                args_max_age: Some(Duration::ZERO),
            },
        ),
    ] {
        let s = alice
            .set_settings("p", &QueueSettings::history_parts([part]))
            .await
            .unwrap();
        assert_eq!(s.history, Some(want), "{part:?}");
        assert_eq!(s.set_by.history.unwrap().by, "dashboard alice");
    }
    // two fields at once, the later of one field winning; the other
    // setting's fields stay
    let s = alice
        .set_settings(
            "p",
            &QueueSettings::dead_letters_parts([
                RetentionPart::MaxAge(Some(Duration::from_secs(60))),
                RetentionPart::MaxAge(day),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(
        s.dead_letters,
        Some(Retention {
            max_count: Some(9),
            max_age: day
        })
    );
    assert_eq!(s.set_by.dead_letters.unwrap().by, "dashboard alice");
    let s = alice
        .set_settings(
            "p",
            &QueueSettings::dead_letters_parts([RetentionPart::MaxCount(None)]),
        )
        .await
        .unwrap();
    assert_eq!(
        s.dead_letters,
        Some(Retention {
            max_count: None,
            max_age: day
        })
    );
    assert_eq!(s.history.unwrap().max_count, Some(7), "the history stays");

    // checked as a whole change is: nothing stored
    for bad in [
        QueueSettings::history_parts([HistoryPart::MaxCount(Some(0))]),
        QueueSettings::history_parts([HistoryPart::MaxAge(Some(Duration::ZERO))]),
        QueueSettings::dead_letters_parts([RetentionPart::MaxCount(Some(0))]),
    ] {
        let err = alice.set_settings("p", &bad).await.unwrap_err();
        assert!(matches!(err, Error::InvalidValue { .. }), "{err}");
    }
    // no part given: nothing changes
    assert!(QueueSettings::history_parts([]).is_empty());
    let same = bob
        .set_settings("p", &QueueSettings::dead_letters_parts([]))
        .await
        .unwrap();
    assert_eq!(same.set_by.dead_letters.unwrap().by, "dashboard alice");
    // a worker's parts are stored only where nothing is
    let kept = q
        .init_settings(
            "p",
            &QueueSettings::history_parts([HistoryPart::MaxCount(Some(3))]),
            "worker w",
        )
        .await
        .unwrap();
    assert_eq!(kept.history.unwrap().max_count, Some(7));
    assert_eq!(
        q.settings("p").await.unwrap().in_force().history,
        History {
            enabled: true,
            max_count: Some(7),
            max_age: None,
            args_max_age: Some(Duration::ZERO)
        }
    );
}

pub async fn the_stored_retention_is_in_force_over_the_workers(env: &Env) {
    let q = env.client.backend();
    q.create_queue("ret", QueueOptions::default())
        .await
        .unwrap();
    q.set_settings("ret", &QueueSettings::dead_letters(keep(3)))
        .await
        .unwrap();
    // the settle asks for no limit; the queue's three are in force
    let sent = kill(env, "ret", &vec![("A", "e"); 8], 0, Retention::UNBOUNDED).await;
    let kept = q.counts("ret").await.unwrap().dead;
    assert_eq!(kept, 3);
    let page = q
        .dead_page("ret", redjob::ops::DeadOrder::OldestFirst, None, 10)
        .await
        .unwrap();
    let ids: Vec<_> = page.jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, sent[5..], "the newest three stay");
}

pub async fn a_workers_retention_is_stored_only_where_none_is(env: &Env) {
    let client = env.client.clone();
    let q = client.backend();
    // an operator lowered the queue's retention to 2 before this deploy
    q.create_queue("settings", QueueOptions::default())
        .await
        .unwrap();
    q.set_settings("settings", &QueueSettings::dead_letters(keep(2)))
        .await
        .unwrap();
    // ... and a queue that appears only after the worker starts
    let w = Worker::builder(q.clone())
        .queue("settings")
        .queue("later")
        .lease(Duration::from_secs(1))
        .handle_signals(false)
        .dead_letter_retention(keep(4))
        .build()
        .unwrap();
    let w = start_serving(w).await;
    for key in 0..6 {
        client.enqueue(&Doomed { key }).await.unwrap();
    }
    assert!(
        wait_for(Duration::from_secs(10), || async {
            let c = client.counts("settings").await.unwrap();
            c.ready + c.in_flight == 0 && client.stats("settings").await.unwrap().dead == 6
        })
        .await
    );
    q.create_queue("later", QueueOptions::default())
        .await
        .unwrap();
    let stored = wait_for(Duration::from_secs(10), || async {
        q.settings("later").await.unwrap().dead_letters == Some(keep(4))
    })
    .await;
    w.stop().await;
    // a worker without a builder value stores nothing: the default stays a default
    q.create_queue("plain", QueueOptions::default())
        .await
        .unwrap();
    let plain = Worker::builder(q.clone())
        .queue("plain")
        .handle_signals(false)
        .build()
        .unwrap();
    let plain = start_serving(plain).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    plain.stop().await;
    assert!(q.settings("plain").await.unwrap().is_empty());
    assert_eq!(
        q.settings("settings").await.unwrap().dead_letters,
        Some(keep(2)),
        "the deploy did not undo the operator's change"
    );
    assert_eq!(client.counts("settings").await.unwrap().dead, 2);
    assert!(
        stored,
        "the worker stored its value once the queue appeared"
    );
}

/// Sleeps 150 ms, counting how many run at once (the most seen is kept).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "settings_counted", queue = "limited")]
struct Counted;

/// Runs at once now, and the most seen.
#[derive(Default)]
struct AtOnce {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl AtOnce {
    fn take_most(&self) -> usize {
        self.most.swap(0, std::sync::atomic::Ordering::SeqCst)
    }
}

impl Job for Counted {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        use std::sync::atomic::Ordering::SeqCst;
        let at = ctx.data::<std::sync::Arc<AtOnce>>()?;
        let n = at.now.fetch_add(1, SeqCst) + 1;
        at.most.fetch_max(n, SeqCst);
        tokio::time::sleep(Duration::from_millis(150)).await;
        at.now.fetch_sub(1, SeqCst);
        Ok(())
    }
}

/// Enqueues `n` jobs and waits (20 s at most) until all ran.
async fn run_batch(env: &Env, n: usize) {
    let before = env.client.stats("limited").await.map_or(0, |s| s.processed);
    for _ in 0..n {
        env.client.enqueue(&Counted).await.unwrap();
    }
    assert!(
        wait_for(Duration::from_secs(20), || async {
            env.client.stats("limited").await.unwrap().processed >= before + n as u64
        })
        .await,
        "the batch ran"
    );
}

/// A worker of `Counted` with `builder` as its limit for the queue, 10 in
/// all, beating every second (a change is followed within one).
fn counted_worker(env: &Env, builder: usize, at: &std::sync::Arc<AtOnce>) -> Worker {
    leased_counted_worker(env, builder, at, Duration::from_secs(3))
}

/// [`counted_worker`] with a lease of `lease` (it beats every third of it).
fn leased_counted_worker(
    env: &Env,
    builder: usize,
    at: &std::sync::Arc<AtOnce>,
    lease: Duration,
) -> Worker {
    Worker::builder(env.client.backend())
        .register::<Counted>()
        .queue_concurrency("limited", builder)
        .concurrency(10)
        .lease(lease)
        .data(at.clone())
        .handle_signals(false)
        .build()
        .unwrap()
}

/// Whether queue "limited" has `n` per worker stored within 10 s.
async fn stored_per_worker(env: &Env, n: u32) -> bool {
    let q = env.client.backend();
    wait_for(Duration::from_secs(10), || async {
        q.settings("limited")
            .await
            .is_ok_and(|s| s.concurrency == Some(Concurrency::per_worker(n)))
    })
    .await
}

/// Stores the concurrency `c` as `ops`, waits past the workers' next beat,
/// runs `n` jobs and returns the most seen at once.
async fn set_then_run(
    env: &Env,
    ops: &redjob::Client,
    c: Concurrency,
    n: usize,
    at: &AtOnce,
) -> usize {
    ops.set_settings("limited", &QueueSettings::concurrency(c))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    run_batch(env, n).await;
    at.take_most()
}

pub async fn a_queues_concurrency_is_stored_and_followed_by_running_workers(env: &Env) {
    let q = env.client.backend();
    q.create_queue("limited", QueueOptions::default())
        .await
        .unwrap();
    let at = std::sync::Arc::new(AtOnce::default());
    // the builder's 3 per worker becomes the queue's, with who stored it
    let w = counted_worker(env, 3, &at);
    let id = w.id().to_string();
    let w = start_serving(w).await;
    assert!(
        stored_per_worker(env, 3).await,
        "the builder's value is stored"
    );
    let s = q.settings("limited").await.unwrap();
    assert_eq!(s.set_by.concurrency.unwrap().by, format!("worker {id}"));
    run_batch(env, 12).await;
    assert_eq!(at.take_most(), 3, "the limit was reached, and held");

    // an operator lowers it, raises it past the builder's value, lifts it:
    // the running worker follows each at its next beat
    let ops = env.client.clone().acting_as("ops bob");
    assert_eq!(
        set_then_run(env, &ops, Concurrency::per_worker(1), 6, &at).await,
        1
    );
    assert_eq!(
        set_then_run(env, &ops, Concurrency::per_worker(5), 20, &at).await,
        5
    );
    assert_eq!(
        set_then_run(env, &ops, Concurrency::UNLIMITED, 20, &at).await,
        10,
        "the worker's own concurrency"
    );
    w.stop().await;

    // a worker started later with another builder value follows the stored one
    let w = start_serving(counted_worker(env, 2, &at)).await;
    run_batch(env, 20).await;
    assert_eq!(
        at.take_most(),
        10,
        "the stored no-limit, not the builder's 2"
    );
    w.stop().await;
    let by = q
        .settings("limited")
        .await
        .unwrap()
        .set_by
        .concurrency
        .unwrap();
    assert_eq!(by.by, "ops bob");

    // stored below a starting worker's builder value, with jobs already
    // waiting: the stored one holds from the first job on
    ops.set_settings(
        "limited",
        &QueueSettings::concurrency(Concurrency::per_worker(1)),
    )
    .await
    .unwrap();
    let before = env.client.stats("limited").await.unwrap().processed;
    for _ in 0..8 {
        env.client.enqueue(&Counted).await.unwrap();
    }
    let w = start_serving(counted_worker(env, 5, &at)).await;
    assert!(
        wait_for(Duration::from_secs(20), || async {
            env.client.stats("limited").await.unwrap().processed >= before + 8
        })
        .await
    );
    w.stop().await;
    assert_eq!(at.take_most(), 1, "the stored 1, not the builder's 5");
}

/// A change is heard at once, not at the worker's next beat: with a one-minute
/// lease the worker beats every 20 s, yet it follows a lowered concurrency
/// within seconds, from the first job of the next batch.
pub async fn a_settings_change_reaches_a_worker_between_its_beats(env: &Env) {
    let q = env.client.backend();
    q.create_queue("limited", QueueOptions::default())
        .await
        .unwrap();
    let at = std::sync::Arc::new(AtOnce::default());
    let w = leased_counted_worker(env, 4, &at, Duration::from_secs(60));
    let w = start_serving(w).await;
    assert!(
        stored_per_worker(env, 4).await,
        "the builder's value is stored"
    );
    run_batch(env, 12).await;
    assert_eq!(at.take_most(), 4, "the builder's limit was reached");
    // the batch's last runs brought beats forward: let them pass, so that
    // the next regular beat is 20 s away
    tokio::time::sleep(Duration::from_millis(1500)).await;
    env.client
        .set_settings(
            "limited",
            &QueueSettings::concurrency(Concurrency::per_worker(1)),
        )
        .await
        .unwrap();
    // a notice, a full beat, a read of the settings: well within 3 s (the
    // next regular beat is over 15 s away)
    tokio::time::sleep(Duration::from_millis(3000)).await;
    run_batch(env, 6).await;
    assert_eq!(
        at.take_most(),
        1,
        "the change was followed from the first job"
    );
    w.stop().await;
}

/// A value past a setting's bound is refused with an error naming the field
/// and the bound, never cut to a cap (nothing stored): an age past 50 years
/// (`99999999999d` was stored as 2^52 ms), a part of a millisecond (an
/// arguments' age of 1.5 ms was stored as 1 ms, of 0.5 ms as "never kept"),
/// a count past a billion.
pub async fn settings_past_their_bounds_are_refused_not_cut(env: &Env) {
    use redjob::ops::{History, HistoryPart, RetentionPart};
    let q = env.client.backend();
    q.create_queue("b", QueueOptions::default()).await.unwrap();
    let years_50 = Duration::from_secs(50 * 365 * 86_400);
    let absurd = Duration::from_secs(99_999_999_999 * 86_400);
    let refused = [
        (
            QueueSettings::history_parts([HistoryPart::MaxAge(Some(absurd))]),
            "max age",
            "18250d",
        ),
        (
            QueueSettings::history_parts([HistoryPart::MaxAge(Some(
                years_50 + Duration::from_millis(1),
            ))]),
            "max age",
            "18250d",
        ),
        (
            QueueSettings::history_parts([HistoryPart::ArgsMaxAge(Some(absurd))]),
            "arguments",
            "18250d",
        ),
        (
            QueueSettings::history_parts([HistoryPart::ArgsMaxAge(Some(Duration::from_micros(
                1500,
            )))]),
            "arguments",
            "whole milliseconds",
        ),
        (
            QueueSettings::history_parts([HistoryPart::ArgsMaxAge(Some(Duration::from_micros(
                500,
            )))]),
            "arguments",
            "whole milliseconds",
        ),
        (
            QueueSettings::history_parts([HistoryPart::MaxCount(Some(u64::MAX))]),
            "max count",
            "1000000000",
        ),
        (
            QueueSettings::dead_letters_parts([RetentionPart::MaxAge(Some(absurd))]),
            "max age",
            "18250d",
        ),
        (
            QueueSettings::dead_letters(Retention {
                max_count: Some(1_000_000_001),
                max_age: None,
            }),
            "max count",
            "1000000000",
        ),
        (
            QueueSettings::dead_letters(Retention {
                max_count: None,
                max_age: Some(Duration::from_micros(86_400_000_500)),
            }),
            "max age",
            "whole milliseconds",
        ),
    ];
    for (s, field, bound) in refused {
        let err = q.set_settings("b", &s).await.unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, Error::InvalidValue { .. })
                && text.contains(field)
                && text.contains(bound),
            "{s:?}: {text}"
        );
        // a worker's builder value is checked alike
        assert!(q.init_settings("b", &s, "worker w").await.is_err(), "{s:?}");
    }
    assert!(q.settings("b").await.unwrap().is_empty(), "nothing stored");
    // the bounds themselves are stored as given
    let h = History {
        max_count: Some(1_000_000_000),
        max_age: Some(years_50),
        args_max_age: Some(years_50),
        ..History::default()
    };
    let r = Retention {
        max_count: Some(1_000_000_000),
        max_age: Some(years_50),
    };
    let s = q
        .set_settings(
            "b",
            &QueueSettings::history(h).and(QueueSettings::dead_letters(r)),
        )
        .await
        .unwrap();
    assert_eq!((s.history, s.dead_letters), (Some(h), Some(r)));
}

/// The beat's settings version: it moves on when the workers are told the
/// settings changed.
async fn settings_version(env: &Env) -> u64 {
    env.client
        .backend()
        .beat("settings-watch", b"{}", Duration::from_secs(60))
        .await
        .unwrap()
        .settings
}

/// A change that changes nothing (nothing given, or each value given as
/// stored) records no `settings` event, tells no worker and keeps who set
/// the values, on both backends.
pub async fn a_change_that_changes_nothing_records_nothing_and_wakes_no_one(env: &Env) {
    use redjob::ops::{HistoryPart, RetentionPart};
    let q = env.client.backend();
    q.create_queue("n", QueueOptions::default()).await.unwrap();
    let (alice, bob) = (
        env.client.clone().acting_as("cli alice"),
        env.client.clone().acting_as("dashboard bob"),
    );
    alice
        .set_settings(
            "n",
            &QueueSettings::dead_letters(keep(5))
                .and(QueueSettings::history_parts([HistoryPart::MaxCount(Some(
                    9,
                ))]))
                .and(QueueSettings::concurrency(Concurrency::per_worker(2))),
        )
        .await
        .unwrap();
    let settings_events = || async {
        q.history_events("n")
            .await
            .unwrap()
            .iter()
            .filter(|e| e.what == "settings")
            .count()
    };
    assert_eq!(settings_events().await, 1);
    let version = settings_version(env).await;
    for same in [
        QueueSettings::default(),
        QueueSettings::dead_letters(keep(5)),
        QueueSettings::dead_letters_parts([RetentionPart::MaxCount(Some(5))]),
        QueueSettings::history_parts([HistoryPart::MaxCount(Some(9)), HistoryPart::Enabled(true)]),
        QueueSettings::concurrency_part(redjob::ops::ConcurrencyPart::PerWorker, Some(2)),
    ] {
        let s = bob.set_settings("n", &same).await.unwrap();
        assert_eq!(
            s.set_by.dead_letters.as_ref().unwrap().by,
            "cli alice",
            "{same:?}"
        );
        assert_eq!(
            s.set_by.history.as_ref().unwrap().by,
            "cli alice",
            "{same:?}"
        );
        assert_eq!(settings_events().await, 1, "{same:?}: no event");
        assert_eq!(settings_version(env).await, version, "{same:?}: no notice");
    }
    // a real change still records and tells
    bob.set_settings("n", &QueueSettings::dead_letters(keep(6)))
        .await
        .unwrap();
    assert_eq!(settings_events().await, 2);
    assert!(settings_version(env).await > version);
}

/// A stored setting reset (`QueueSettings::reset`) is stored no more: the
/// built-in default is in force, and a worker stores its builder value again
/// at its next read (as for a new queue), which the reset's notice brings
/// at once. Recorded as a change; a reset of a setting not stored changes
/// nothing.
pub async fn a_reset_setting_goes_back_to_the_workers_value_or_the_default(env: &Env) {
    use redjob::ops::{HistoryPart, RateLimit, Setting};
    let client = env.client.clone();
    let q = client.backend();
    q.create_queue("settings", QueueOptions::default())
        .await
        .unwrap();
    let alice = client.clone().acting_as("cli alice");
    alice
        .set_settings(
            "settings",
            &QueueSettings::dead_letters(keep(3))
                .and(QueueSettings::rate_limit(RateLimit::per_second(5)))
                .and(QueueSettings::history_parts([HistoryPart::MaxCount(Some(
                    9,
                ))])),
        )
        .await
        .unwrap();
    let events = || async { q.history_events("settings").await.unwrap().len() };
    let (before, version) = (events().await, settings_version(env).await);
    let s = alice
        .set_settings(
            "settings",
            &QueueSettings::reset(Setting::DeadLetters)
                .and(QueueSettings::reset(Setting::RateLimit)),
        )
        .await
        .unwrap();
    assert_eq!((s.dead_letters, s.rate_limit), (None, None));
    assert_eq!(
        (&s.set_by.dead_letters, &s.set_by.rate_limit),
        (&None, &None)
    );
    assert_eq!(s.in_force().dead_letters, Retention::default());
    assert_eq!(s.history.unwrap().max_count, Some(9), "the others stay");
    assert_eq!(q.settings("settings").await.unwrap(), s);
    let last = &q.history_events("settings").await.unwrap()[0];
    assert_eq!(
        (last.what.as_str(), last.by.as_deref()),
        ("settings", Some("cli alice"))
    );
    assert_eq!(events().await, before + 1);
    assert!(
        settings_version(env).await > version,
        "the workers are told"
    );
    // nothing stored: a reset changes nothing
    let version = settings_version(env).await;
    alice
        .set_settings("settings", &QueueSettings::reset(Setting::Concurrency))
        .await
        .unwrap();
    assert_eq!(events().await, before + 1);
    assert_eq!(settings_version(env).await, version);
    // of a reset and a value of the same setting, the later goes
    let s = QueueSettings::dead_letters(keep(4)).and(QueueSettings::reset(Setting::DeadLetters));
    assert_eq!(s.dead_letters, None);
    let s = QueueSettings::reset(Setting::DeadLetters).and(QueueSettings::dead_letters(keep(4)));
    assert_eq!(s.dead_letters, Some(keep(4)));

    // a running worker stores its builder value again at once
    let w = Worker::builder(q.clone())
        .queue("settings")
        .handle_signals(false)
        .dead_letter_retention(keep(7))
        .build()
        .unwrap();
    let w = start_serving(w).await;
    let stored = |n: u64| {
        let q = q.clone();
        async move {
            let s = q.settings("settings").await.unwrap();
            s.dead_letters == Some(keep(n))
                && s.set_by
                    .dead_letters
                    .is_some_and(|c| c.by.starts_with("worker "))
        }
    };
    assert!(
        wait_for(Duration::from_secs(5), || stored(7)).await,
        "stored at start"
    );
    alice
        .set_settings("settings", &QueueSettings::dead_letters(keep(2)))
        .await
        .unwrap();
    alice
        .set_settings("settings", &QueueSettings::reset(Setting::DeadLetters))
        .await
        .unwrap();
    // a notice and a read: well within the two minutes of the recheck
    let again = wait_for(Duration::from_secs(5), || stored(7)).await;
    w.stop().await;
    assert!(again, "{:?}", q.settings("settings").await.unwrap());
}
