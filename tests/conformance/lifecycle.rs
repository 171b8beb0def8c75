//! A queue's life: created, listed, deleted with everything redjob kept for it,
//! and created again from nothing.

use std::time::Duration;

use redjob::Error;
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
