//! Phase 8: inspection on a big queue beside a small one: counts by state, peek,
//! one job by id, a page of a state at the start and deep in the listing. Each
//! figure is the median time of one call (ms); the target is that the big queue's
//! figure stays near the small one's (no call scans the queue). Then a job
//! found by id without its queue, among 10 and 1,000 queues.

use std::time::{Duration, Instant};

use redjob::backend::Backend;
use redjob::client::EnqueueOptions;
use redjob::inspect::{Cursor, Inspect, JobState};
use redjob::queue::{Queues, SendMessage};
use redjob::{Client, JobId};

use crate::jobs::Noop;
use crate::phases::Figures;
use crate::redis::Server;

/// Page size of the listing figures.
const PAGE: usize = 100;
/// Calls per figure.
const CALLS: usize = 20;

/// The median duration of `CALLS` calls of `f`, in ms.
async fn median_ms<F, Fut>(mut f: F) -> f64
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut t = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        let start = Instant::now();
        f(i).await;
        t.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    t.sort_by(f64::total_cmp);
    t[CALLS / 2]
}

/// A queue of `n` jobs: 90 % ready (at priorities 0 and 3, by chunks of 1000),
/// 10 % scheduled an hour ahead, and 1000 of the ready ones leased.
async fn fill(client: &Client, n: usize) {
    let jobs: Vec<Noop> = (0..n).map(|i| Noop { i: i as u64 }).collect();
    for (k, chunk) in jobs.chunks(1000).enumerate() {
        let mut opts = EnqueueOptions::new().priority(if k % 2 == 0 { 0 } else { 3 });
        if k % 10 == 9 {
            opts = opts.delay(Duration::from_secs(3600));
        }
        client
            .enqueue_batch_with(chunk, opts)
            .await
            .expect("bulk enqueue");
    }
    let backend = client.backend();
    backend
        .fetch("bench", 1000, Duration::from_secs(3600))
        .await
        .expect("lease");
}

/// Measures every inspection call on a queue of `n` jobs.
async fn measure(n: usize, f: &mut Figures) {
    let server = Server::start();
    let client = Client::connect(&server.url).await.expect("connect");
    fill(&client, n).await;
    let q = client.backend();
    let counts = q.counts("bench").await.expect("counts");
    assert_eq!(counts.total() as usize, n, "{counts:?}");
    let ids: Vec<_> = q
        .peek("bench", 1000)
        .await
        .expect("peek")
        .iter()
        .map(|j| j.id)
        .collect();
    let mut put = |op: &str, ms: f64| f.inspect.push((op.to_owned(), n, ms));
    put(
        "counts",
        median_ms(|_| async {
            q.counts("bench").await.expect("counts");
        })
        .await,
    );
    put(
        "peek",
        median_ms(|_| async {
            q.peek("bench", PAGE).await.expect("peek");
        })
        .await,
    );
    put(
        "job",
        median_ms(|i| {
            let id = ids[i * 37 % ids.len()];
            let q = &q;
            async move {
                q.job("bench", &id).await.expect("job").expect("there");
            }
        })
        .await,
    );
    for (op, state) in [
        ("list_ready", JobState::Ready),
        ("list_scheduled", JobState::Scheduled),
    ] {
        put(
            op,
            median_ms(|_| async {
                q.list("bench", state, None, PAGE).await.expect("list");
            })
            .await,
        );
        // deep: half way through the state
        let total = if state == JobState::Ready {
            counts.ready
        } else {
            counts.scheduled
        };
        let mut after: Option<Cursor> = None;
        for _ in 0..(total as usize / 2 / 1000) {
            after = q
                .list("bench", state, after.as_ref(), 1000)
                .await
                .expect("list")
                .next;
        }
        let deep = format!("{op}_deep");
        put(
            &deep,
            median_ms(|_| {
                let after = after.clone();
                let q = &q;
                async move {
                    q.list("bench", state, after.as_ref(), PAGE)
                        .await
                        .expect("list");
                }
            })
            .await,
        );
    }
}

/// A job looked up by id without its queue among `queues` queues, the worst
/// case: an id none holds, so every queue is asked (a found job ends the
/// search early, wherever the set's order puts its queue). The median time of
/// a call, the calls it sends and the commands Redis runs.
async fn locate(queues: usize, f: &mut Figures) {
    let server = Server::start();
    let client = Client::connect(&server.url).await.expect("connect");
    let q = client.queues();
    for i in 0..queues {
        q.create_queue(&format!("q{i:05}"), Default::default())
            .await
            .expect("create");
    }
    let id = Queues::send(q, &format!("q{:05}", queues - 1), SendMessage::new("x"))
        .await
        .expect("send");
    client.locate(&id).await.expect("locate").expect("found");
    let none: JobId = "0000000000abcdefghijklmnopqrstuv".parse().expect("an id");
    let ms = median_ms(|_| async {
        assert!(client.locate(&none).await.expect("locate").is_none());
    })
    .await;
    let mut con = server.con().await;
    crate::redis::reset(&mut con).await;
    assert!(client.locate(&none).await.expect("locate").is_none());
    let cost = crate::redis::cost(&mut con).await;
    f.locate
        .push((queues, ms, cost.calls as f64, cost.commands as f64));
}

/// Phase 8 on a queue of 10k and of the largest backlog asked for (1M by
/// default), and a job found without its queue among 10 and 1,000 queues.
pub async fn inspection(f: &mut Figures, backlogs: &[usize]) {
    let big = backlogs.iter().copied().max().unwrap_or(1_000_000);
    for n in [10_000, big] {
        measure(n, f).await;
    }
    for queues in [10, 1000] {
        locate(queues, f).await;
    }
}
