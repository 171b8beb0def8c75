//! A job found by id without its queue: in whichever queue holds it, waiting,
//! running or dead, at any priority; `None` for an id no queue holds.

use std::time::Duration;

use redjob::JobId;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::inspect::{Inspect, JobState};
use redjob::queue::{QueueOptions, Queues, SendMessage};

use super::Env;

pub async fn a_job_is_found_by_id_in_whichever_queue_holds_it(env: &Env) {
    let q = env.client.backend();
    let opts = QueueOptions::default();
    // more queues than are asked at once
    for i in 0..300 {
        q.create_queue(&format!("q{i}"), opts).await.unwrap();
    }
    let ready = Queues::send(&q, "q7", SendMessage::new("a").priority(3))
        .await
        .unwrap();
    let dead = Queues::send(&q, "q31", SendMessage::new("b"))
        .await
        .unwrap();
    let leased = q.fetch("q31", 1, Duration::from_secs(60)).await.unwrap();
    let settle = Settle {
        dead: vec![DeadLetterEntry {
            id: dead,
            token: leased.jobs[0].token,
            error: "gone".into(),
        }],
        ..Settle::default()
    };
    q.settle("q31", &settle).await.unwrap();
    let running = Queues::send(&q, "q299", SendMessage::new("c"))
        .await
        .unwrap();
    q.fetch("q299", 1, Duration::from_secs(60)).await.unwrap();

    for (id, queue, state) in [
        (ready, "q7", JobState::Ready),
        (dead, "q31", JobState::Dead),
        (running, "q299", JobState::InFlight),
    ] {
        let found = q.locate(&id).await.unwrap().expect("found");
        assert_eq!((found.queue.as_str(), found.job.id), (queue, id));
        assert_eq!(found.job.state, state);
        let by_client = env.client.locate(&id).await.unwrap().expect("found");
        assert_eq!(by_client.queue, queue);
    }
    let nobody: JobId = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
    assert!(q.locate(&nobody).await.unwrap().is_none());
    // a deleted queue is passed over
    q.delete_queue("q7").await.unwrap();
    assert!(q.locate(&ready).await.unwrap().is_none());
}
