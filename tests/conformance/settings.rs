//! A queue's settings, stored with the queue and in force for every worker:
//! read and changed by an operator, a worker's builder value stored only where
//! none is, and the dead-letter retention a settle applies taken from them.

use std::time::Duration;

use redjob::backend::Backend;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, QueueSettings, Retention};
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
            .init_settings(queue, &QueueSettings::dead_letters(keep(3)))
            .await;
        assert!(r.is_err(), "{queue}: {r:?}");
    }
    q.create_queue("s", QueueOptions::default()).await.unwrap();
    let none = q.settings("s").await.unwrap();
    assert!(none.is_empty());
    assert_eq!(none.in_force().dead_letters, Retention::default());

    // a worker's value is stored where none is, and only there
    let first = q
        .init_settings("s", &QueueSettings::dead_letters(keep(7)))
        .await
        .unwrap();
    assert_eq!(first.dead_letters, Some(keep(7)));
    let second = q
        .init_settings("s", &QueueSettings::dead_letters(Retention::UNBOUNDED))
        .await
        .unwrap();
    assert_eq!(second.dead_letters, Some(keep(7)), "the first stays");

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
