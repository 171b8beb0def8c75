//! The memory backend's clock takes any advance without a panic.

use std::time::Duration;

use redjob::backend::memory::{Clock, MemoryBackend};
use redjob::queue::{QueueOptions, Queues, SendMessage};

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn clock_advanced_by_duration_max_stops_at_its_end_and_queues_keep_working() {
    let clock = Clock::new();
    let q = MemoryBackend::with_clock(clock.clone());
    q.create_queue("q", QueueOptions::default()).await.unwrap();
    clock.advance(Duration::MAX);
    clock.advance(Duration::MAX);
    let end = clock.now_us();
    assert!(end > 1_000_000_000_000_000_000, "far ahead: {end}");
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(clock.now_us(), end, "stays at its end");
    let id = q.send("q", SendMessage::new("late")).await.unwrap();
    let m = q
        .receive("q", Some(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((m.id, m.rc), (id, 1));
    assert!(q.change_visibility("q", &id, Duration::ZERO).await.unwrap());
    assert_eq!(q.attributes("q").await.unwrap().msgs, 1);
}

/// Past the year 2096 due scores would reach the leased ones': they are kept
/// below, so a fetch never hands a job out twice and inspection answers.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_clock_past_2096_runs_each_job_once_and_inspection_answers() {
    use redjob::backend::Backend;
    use redjob::inspect::{Inspect, JobState};
    let clock = Clock::new();
    let q = MemoryBackend::with_clock(clock.clone());
    q.create_queue("q", QueueOptions::default()).await.unwrap();
    clock.advance(Duration::from_secs(80 * 365 * 86_400));
    let ids = q
        .send_batch("q", &[SendMessage::new("a"), SendMessage::new("b")])
        .await
        .unwrap();
    let c = q.counts("q").await.unwrap();
    assert_eq!((c.ready, c.scheduled, c.in_flight), (2, 0, 0));
    let got = q
        .fetch("q", 10, Duration::from_secs(30))
        .await
        .unwrap()
        .jobs;
    let mut fetched: Vec<_> = got.iter().map(|d| d.id).collect();
    fetched.sort();
    assert_eq!(fetched, ids, "each once");
    assert!(
        q.fetch("q", 10, Duration::from_secs(30))
            .await
            .unwrap()
            .jobs
            .is_empty()
    );
    let c = q.counts("q").await.unwrap();
    assert_eq!((c.ready, c.scheduled, c.in_flight), (0, 0, 2));
    assert!(q.peek("q", 10).await.unwrap().is_empty());
    for state in [JobState::Ready, JobState::Scheduled, JobState::InFlight] {
        q.list("q", state, None, 10).await.unwrap();
    }
    // and at the clock's very end
    clock.advance(Duration::MAX);
    q.counts("q").await.unwrap();
    q.peek("q", 10).await.unwrap();
    q.fetch("q", 10, Duration::from_secs(30)).await.unwrap();
}
