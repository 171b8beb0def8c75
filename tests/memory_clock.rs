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
