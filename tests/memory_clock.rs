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

/// A job whose lease ran out, taken by an RSMQ-style receive or pop, keeps
/// its lease's place under a global concurrency until the second the lease
/// ends in has passed, as on Redis (whose receives, an RSMQ client's too,
/// leave the lease counts as they are; see lease_counts in lib.lua). The
/// memory backend freed the place at once, and the model test caught the
/// two backends disagreeing on the fetch after.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_lease_a_receive_or_pop_took_holds_its_place_until_its_second_passes() {
    use redjob::backend::Backend;
    use redjob::ops::{Admin, Concurrency, QueueSettings};
    for pop in [false, true] {
        // 100 ms into a second
        let clock =
            Clock::frozen_at(std::time::UNIX_EPOCH + Duration::from_millis(1_800_000_000_100));
        let q = MemoryBackend::with_clock(clock.clone());
        q.create_queue("q", QueueOptions::default()).await.unwrap();
        q.set_settings("q", &QueueSettings::concurrency(Concurrency::global(1)))
            .await
            .unwrap();
        let a = Queues::send(&q, "q", SendMessage::new("a")).await.unwrap();
        let got = q
            .fetch("q", 10, Duration::from_millis(200))
            .await
            .unwrap()
            .jobs;
        assert_eq!(got.iter().map(|d| d.id).collect::<Vec<_>>(), [a]);
        // its lease ran out at .300; an RSMQ-style read takes it at .350
        clock.advance(Duration::from_millis(250));
        if pop {
            assert_eq!(q.pop_due("q", 10).await.unwrap().len(), 1);
        } else {
            assert_eq!(q.receive_batch("q", 10, None).await.unwrap().len(), 1);
        }
        let b = Queues::send(&q, "q", SendMessage::new("b")).await.unwrap();
        let held = q
            .fetch("q", 10, Duration::from_secs(30))
            .await
            .unwrap()
            .jobs;
        assert!(held.is_empty(), "pop {pop}: the place is held: {held:?}");
        // the next second: the place is free
        clock.advance(Duration::from_millis(700));
        let got = q
            .fetch("q", 10, Duration::from_secs(30))
            .await
            .unwrap()
            .jobs;
        assert_eq!(
            got.iter().map(|d| d.id).collect::<Vec<_>>(),
            [b],
            "pop {pop}"
        );
    }
}
