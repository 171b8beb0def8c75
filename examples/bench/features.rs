//! Phase 7: the queue features on the hot path, each beside the plain figure
//! measured the same way on the same server: a backlog at mixed priorities, the
//! same backlog with metrics off and with a Prometheus recorder (plain: metrics
//! on, no recorder, the default), and unique jobs enqueued one by one.

use std::sync::Arc;
use std::time::Instant;

use redjob::Client;
use redjob::client::EnqueueOptions;
use redjob::queue::{QueueOptions, Queues};

use crate::jobs::{Noop, Tally, UniqueNoop};
use crate::metered::{self, Metered};
use crate::phases::{Figures, Settings, drain, worker};
use crate::redis::Server;

/// The priorities of the mixed backlog: one per chunk of 1000, in turn.
const PRIORITIES: [i8; 5] = [-5, 0, 3, -1, 8];

/// Enqueues `n` jobs in bulk, at `priorities` by chunk of 1000 (`[0]`: plain).
async fn backlog(client: &Client, n: usize, priorities: &[i8]) {
    let jobs: Vec<Noop> = (0..n).map(|i| Noop { i: i as u64 }).collect();
    for (k, chunk) in jobs.chunks(1000).enumerate() {
        let p = priorities[k % priorities.len()];
        client
            .enqueue_batch_with(chunk, EnqueueOptions::new().priority(p))
            .await
            .expect("bulk enqueue");
    }
}

/// Processes a backlog of `n` enqueued at `priorities`; jobs/s.
async fn process(client: &Client, s: &Settings, f: &mut Figures, priorities: &[i8]) -> f64 {
    backlog(client, s.n, priorities).await;
    let tally = Arc::new(Tally::new(s.n));
    let t = Instant::now();
    let (secs, _) = drain(worker(client, "bench", &tally, s.concurrency), &tally, t).await;
    f.check(&tally);
    s.n as f64 / secs
}

/// Enqueues `n` jobs one awaited call at a time into an empty queue, unique by
/// their derived keys or plain; jobs/s. The queue is emptied afterwards.
async fn enqueue_single(client: &Client, n: usize, unique: bool) -> f64 {
    const QUEUE: &str = "bench_enqueue";
    let q = client.queues();
    let _ = q.delete_queue(QUEUE).await;
    q.create_queue(QUEUE, QueueOptions::default())
        .await
        .expect("create");
    let plain = EnqueueOptions::new().queue(QUEUE);
    let t = Instant::now();
    for i in 0..n as u64 {
        let r = if unique {
            client.enqueue(&UniqueNoop { i }).await
        } else {
            client.enqueue_with(&Noop { i }, plain.clone()).await
        };
        r.expect("enqueue");
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    q.delete_queue(QUEUE).await.expect("delete");
    rate
}

/// Phase 7: a backlog of `n` at five priorities against the same backlog plain,
/// and `n` unique jobs enqueued one by one against `n` plain ones; twice each,
/// alternating.
pub async fn features(s: &Settings, f: &mut Figures) {
    let server = Server::start();
    let client = Client::connect(&server.url).await.expect("connect");
    // warm up: the queues exist and the scripts are loaded
    process(&client, s, f, &[0]).await;
    enqueue_single(&client, 1000, true).await;
    for _ in 0..2 {
        let plain = process(&client, s, f, &[0]).await;
        f.backlog_plain.push(plain);
        let mixed = process(&client, s, f, &PRIORITIES).await;
        f.backlog_priorities.push(mixed);
        let off = metered::process(&client, s, f, Metered::Off).await;
        f.backlog_metrics_off.push(off);
        let prometheus = metered::process(&client, s, f, Metered::Prometheus).await;
        f.backlog_prometheus.push(prometheus);
    }
    for _ in 0..2 {
        f.enqueue_single_plain
            .push(enqueue_single(&client, s.n, false).await);
        f.enqueue_single_unique
            .push(enqueue_single(&client, s.n, true).await);
    }
}
