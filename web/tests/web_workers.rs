//! The workers page: a worker's "Busy" counts the topic events it runs beside
//! its jobs, with the jobs it prefetched, and a table lists the running events.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::sync::Arc;
use std::time::Duration;

use common::{start_serving, wait_for};
use http::get;
use redjob::backend::memory::MemoryBackend;
use redjob::ops::Admin;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "web_quick", queue = "web_busy")]
struct Quick;

impl Job for Quick {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Waits for a permit of the worker's semaphore.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "web_gated", queue = "web_busy")]
struct Gated;

impl Job for Gated {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gate = ctx.data::<Arc<Semaphore>>()?;
        gate.acquire().await.map_err(JobError::fatal)?.forget();
        Ok(())
    }
}

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "web_gated_event", topic = "web_events")]
struct GatedEvent;

/// A worker of concurrency 2 running one event and one job, with jobs leased
/// waiting for a slot: "Busy" says `2 of 2 (1 with events), <n> prefetched`
/// and the page lists the event in its table of running events.
#[tokio::test]
async fn the_workers_page_counts_running_events_and_lists_them() {
    let client = Client::memory(MemoryBackend::new());
    client
        .subscribe("web_events", "web_sub", redjob::topic::Start::Beginning)
        .await
        .unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let event_gate = gate.clone();
    let worker = Worker::builder(client.backend())
        .queue("web_busy")
        .concurrency(2)
        .subscribe("web_sub", move |_: GatedEvent, _| {
            let gate = event_gate.clone();
            async move {
                gate.acquire().await.map_err(JobError::fatal)?.forget();
                Ok(())
            }
        })
        .data(gate.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let w = start_serving(worker).await;
    // quick runs first: the queue's jobs are short, so it is prefetched
    for _ in 0..3 {
        client.enqueue(&Quick).await.unwrap();
    }
    assert!(
        wait_for(Duration::from_secs(10), || async {
            client.stats("web_busy").await.unwrap().processed == 3
        })
        .await
    );
    // one at a time, so that the quick jobs cannot take the slot the event
    // is to hold (and be done before they could be seen prefetched)
    client.publish(&GatedEvent).await.unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || async {
            client.workers().await.unwrap()[0].events.len() == 1
        })
        .await
    );
    client.enqueue(&Gated).await.unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || async {
            client.workers().await.unwrap()[0].running.len() == 1
        })
        .await
    );
    client
        .enqueue_batch(&[Quick, Quick, Quick, Quick, Quick])
        .await
        .unwrap();
    let app = redjob_web::router(client.clone());
    // the page as the registry says then (read twice, alike: no beat between)
    let mut seen = None;
    for _ in 0..300 {
        let ws = client.workers().await.unwrap();
        let page = get(&app, "/workers").await.body;
        let again = client.workers().await.unwrap();
        let one = |w: &redjob::ops::WorkerInfo| {
            (
                w.running.len(),
                w.events.len(),
                w.prefetched,
                w.events.first().map(|e| e.id.clone()),
            )
        };
        if ws.len() == 1
            && again.len() == 1
            && one(&ws[0]) == one(&again[0])
            && ws[0].running.len() == 1
            && ws[0].events.len() == 1
            && ws[0].prefetched > 0
        {
            seen = Some((page, ws[0].prefetched, ws[0].events[0].id.clone()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gate.add_permits(100);
    w.stop().await;
    let (page, prefetched, event) = seen.expect("one event, one job, prefetched jobs");
    let busy = format!("2 of 2 (1 with events), {prefetched} prefetched");
    assert!(page.contains(&busy), "no {busy:?} in:\n{page}");
    assert!(
        page.contains("<th>Subscriber</th><th>Event</th>"),
        "no table of running events:\n{page}"
    );
    assert!(
        page.contains(&format!("<code>{event}</code>")) && page.contains("web_gated_event"),
        "the running event {event} not listed:\n{page}"
    );
}

/// Read events Redis has processed (`total_reads_processed`): about one a
/// round trip of a client.
async fn reads(server: &common::RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The periodic page reads the recorded ticks of every queue's schedules
/// in one round trip: the old page read them one queue after another, a
/// round trip each (60 queues with a schedule each: 60 round trips a
/// render, every 5 s while the page is open).
#[tokio::test]
async fn the_periodic_page_reads_the_ticks_of_every_queue_in_one_round_trip() {
    let server = common::RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let schedules: Vec<String> = (0..60)
        .map(|i| {
            format!(
                r#"{{"name":"tick","queue":"pq-{i:02}","job":"tick","schedule":"every 3600s","next_ms":null}}"#
            )
        })
        .collect();
    let beat = format!(
        r#"{{"id":"w1","host":"h","pid":1,"version":"0","queues":[],"concurrency":1,"ttl_ms":60000,"up_ms":0,"schedules":[{}]}}"#,
        schedules.join(",")
    );
    redjob::backend::Backend::beat(
        &client.backend(),
        "w1",
        beat.as_bytes(),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(client.schedules().await.unwrap().len(), 60);
    let app = redjob_web::router(client.clone());
    let page = get(&app, "/periodic").await;
    assert!(page.body.contains("pq-59"), "{}", page.body);
    let before = reads(&server).await;
    let page = get(&app, "/periodic").await;
    let after = reads(&server).await;
    assert!(page.body.contains("pq-00"), "{}", page.body);
    // the live workers, the ticks, the clock, and the INFO of `after`
    let trips = after - before;
    assert!(trips <= 6, "{trips} round trips");
}

/// Unique until its run starts.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "web_until_start", queue = "web_start", unique_until = "start")]
struct UntilStart;

impl Job for UntilStart {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A worker's job types say how long a unique type holds its key when it
/// holds it only until its run starts (the default, until done, says nothing
/// more than before).
#[tokio::test]
async fn the_workers_page_says_a_type_is_unique_until_its_run_starts() {
    let client = Client::memory(MemoryBackend::new());
    let worker = Worker::builder(client.backend())
        .register::<UntilStart>()
        .register::<Quick>()
        .handle_signals(false)
        .build()
        .unwrap();
    let w = start_serving(worker).await;
    let app = redjob_web::router(client.clone());
    let page = get(&app, "/workers").await.body;
    w.stop().await;
    assert!(
        page.contains("queue web_start, priority 0, unique keep until start, max attempts 25"),
        "{page}"
    );
    assert!(
        page.contains("queue web_busy, priority 0, unique no, max attempts 25"),
        "{page}"
    );
}

/// A running job's page reads the live workers once (to name the worker
/// that runs it and to tell whether a live worker knows its type): the old
/// page listed the whole registry twice, every worker's last beat with its
/// running jobs, for one job (`workers.lua` list: one `ZRANGEBYSCORE` of
/// the registry each).
#[tokio::test]
async fn a_running_jobs_page_reads_the_live_workers_once() {
    let server = common::RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.backend();
    redjob::queue::Queues::create_queue(&q, "wq", redjob::queue::QueueOptions::default())
        .await
        .unwrap();
    redjob::backend::Backend::send(
        &q,
        "wq",
        &[redjob::queue::SendMessage::new(
            r#"{"type":"wt","args":{}}"#,
        )],
        &redjob::queue::QueueOptions::default(),
    )
    .await
    .unwrap();
    let leased = redjob::backend::Backend::fetch(&q, "wq", 1, Duration::from_secs(60))
        .await
        .unwrap();
    let id = leased.jobs[0].id.to_string();
    for w in 0..20 {
        let beat = format!(
            r#"{{"id":"w{w}","host":"h","pid":{w},"version":"0","queues":["wq"],"concurrency":1,"ttl_ms":60000,"up_ms":0,"running":[{{"queue":"wq","id":"{}","job":"wt","for_ms":5}}],"schedules":[]}}"#,
            if w == 7 {
                id.as_str()
            } else {
                "0000000000abcdefghijklmnopqrstuv"
            }
        );
        redjob::backend::Backend::beat(
            &q,
            &format!("w{w}"),
            beat.as_bytes(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    }
    let app = redjob_web::router(client.clone());
    let path = format!("/queues/wq/jobs/{id}");
    let page = get(&app, &path).await;
    assert!(page.body.contains("h (pid 7)"), "{}", page.body);
    let mut con = server.raw().await;
    common::reset_stats(&mut con).await;
    let page = get(&app, &path).await;
    assert!(page.body.contains("h (pid 7)"), "{}", page.body);
    let calls = common::command_calls(&mut con).await;
    // one listing of the registry: one ZRANGEBYSCORE of it, an HGET of
    // each of the 20 workers' beats and controls
    assert_eq!(
        calls.get("zrangebyscore").copied().unwrap_or(0),
        1,
        "{calls:?}"
    );
}
