//! Topic subscribers in the test kit: registered on the kit, run by it, their
//! events, lag, retries and dead letters readable.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redjob::testing::TestKit;
use redjob::topic::{Event, EventContext, Start, Subscription};
use redjob::{Client, Job, JobContext, JobError, RetryPolicy};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Event, Debug, PartialEq, Clone)]
#[event(
    name = "kit-signed-up",
    topic = "kit-users",
    max_attempts = 3,
    backoff = "10s"
)]
struct SignedUp {
    user: u64,
}

#[derive(Serialize, Deserialize, Event, Debug, PartialEq, Clone)]
#[event(name = "kit-welcomed", topic = "kit-mail")]
struct Welcomed {
    user: u64,
}

#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(name = "kit-grant-credit", queue = "kit-credit")]
struct GrantCredit {
    user: u64,
}

impl Job for GrantCredit {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<Seen>>()?
            .push(format!("credit {}", self.user));
        Ok(())
    }
}

/// What the handlers saw, in order.
#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

impl Seen {
    fn push(&self, s: String) {
        self.0.lock().unwrap().push(s);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// No jitter: a retry comes exactly its backoff later.
fn retry() -> RetryPolicy {
    RetryPolicy::exponential(Duration::from_secs(3600))
        .unwrap()
        .jitter(false)
}

/// The mailer: welcomes every user (publishing `Welcomed`) and enqueues a job.
async fn mailer(e: SignedUp, ctx: EventContext) -> Result<(), JobError> {
    ctx.data::<Arc<Seen>>()?.push(format!("mailer {}", e.user));
    let client = ctx.data::<Client>()?;
    client.publish(&Welcomed { user: e.user }).await?;
    client.enqueue(&GrantCredit { user: e.user }).await?;
    Ok(())
}

/// Fails the first two deliveries of user 2's event; user 3's always.
async fn flaky(e: SignedUp, ctx: EventContext) -> Result<(), JobError> {
    ctx.data::<Arc<Seen>>()?
        .push(format!("flaky {} #{}", e.user, ctx.attempt()));
    match (e.user, ctx.attempt()) {
        (2, 1 | 2) | (3, _) => Err(JobError::retry(format!("user {} not yet", e.user))),
        _ => Ok(()),
    }
}

fn kit(seen: &Arc<Seen>) -> TestKit {
    let kit = TestKit::new().retry(retry());
    let client = kit.client();
    kit.data(seen.clone()).data(client)
}

#[tokio::test]
async fn two_subscribers_run_their_events_and_what_they_publish_and_enqueue() {
    let seen = Arc::new(Seen::default());
    let welcomed = Arc::new(Seen::default());
    let w = welcomed.clone();
    let kit = kit(&seen)
        .subscribe("mailer", mailer)
        .subscribe("audit", |e: SignedUp, ctx: EventContext| async move {
            ctx.data::<Arc<Seen>>()?.push(format!("audit {}", e.user));
            Ok(())
        })
        .subscribe("log", move |e: Welcomed, _| {
            let w = w.clone();
            async move {
                w.push(format!("welcomed {}", e.user));
                Ok(())
            }
        });
    kit.publish(&SignedUp { user: 1 }).await.unwrap();
    kit.publish(&SignedUp { user: 4 }).await.unwrap();
    // published, not handled yet: each subscriber lags by two
    assert_eq!(kit.subscriber("kit-users", "mailer").unwrap().lag, 2);
    assert_eq!(kit.subscriber("kit-users", "audit").unwrap().lag, 2);

    let real = Instant::now();
    let run = kit.run_until_idle().await.unwrap();
    assert!(
        real.elapsed() < Duration::from_secs(1),
        "{:?}",
        real.elapsed()
    );
    // 2 × mailer, 2 × audit, 2 × log; the jobs they enqueued ran too
    assert_eq!((run.events, run.events_retried, run.events_dead), (6, 0, 0));
    assert_eq!(run.processed, 2);
    let mut got = seen.take();
    got.sort();
    assert_eq!(
        got,
        [
            "audit 1", "audit 4", "credit 1", "credit 4", "mailer 1", "mailer 4"
        ]
    );
    let mut got = welcomed.take();
    got.sort();
    assert_eq!(got, ["welcomed 1", "welcomed 4"]);
    assert_eq!(
        kit.published::<SignedUp>(),
        [SignedUp { user: 1 }, SignedUp { user: 4 }]
    );
    assert_eq!(
        kit.published::<Welcomed>(),
        [Welcomed { user: 1 }, Welcomed { user: 4 }]
    );
    for name in ["mailer", "audit"] {
        let s = kit.subscriber("kit-users", name).unwrap();
        assert_eq!((s.lag, s.pending, s.dead), (0, 0, 0), "{name}");
    }
    assert!(kit.subscriber("kit-users", "nobody").is_none());
}

#[tokio::test]
async fn retries_wait_for_the_clock_and_the_last_failure_is_a_dead_event() {
    let seen = Arc::new(Seen::default());
    let kit = kit(&seen).subscribe("flaky", flaky);
    for user in [1, 2, 3] {
        kit.publish(&SignedUp { user }).await.unwrap();
    }
    let real = Instant::now();
    let run = kit.run_until_idle().await.unwrap();
    assert_eq!((run.events, run.events_retried, run.events_dead), (1, 2, 0));
    // two wait for their retry: read, not settled
    let s = kit.subscriber("kit-users", "flaky").unwrap();
    assert_eq!((s.lag, s.pending, s.dead), (0, 2, 0));

    // not due yet: nothing runs
    let run = kit.advance(Duration::from_secs(9)).await.unwrap();
    assert_eq!(run.events + run.events_retried, 0);
    // the backoff is 10 s, then 20 s: user 2 succeeds on its third delivery,
    // user 3 fails its third and last
    let run = kit.advance(Duration::from_secs(60)).await.unwrap();
    assert_eq!((run.events, run.events_retried, run.events_dead), (1, 2, 1));
    assert!(
        real.elapsed() < Duration::from_secs(1),
        "{:?}",
        real.elapsed()
    );
    let s = kit.subscriber("kit-users", "flaky").unwrap();
    assert_eq!((s.lag, s.pending, s.dead), (0, 0, 1));

    let mut got = seen.take();
    got.sort();
    assert_eq!(
        got,
        [
            "flaky 1 #1",
            "flaky 2 #1",
            "flaky 2 #2",
            "flaky 2 #3",
            "flaky 3 #1",
            "flaky 3 #2",
            "flaky 3 #3"
        ]
    );
    let dead = kit.dead_events("kit-users", "flaky");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].event_type, "kit-signed-up");
    assert_eq!(dead[0].data, r#"{"user":3}"#);
    assert!(
        dead[0].error.contains("user 3 not yet"),
        "{}",
        dead[0].error
    );
    assert_eq!(dead[0].deliveries, 3);
    assert_eq!(dead[0].runs.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_starting_at_the_beginning_reads_what_was_published_before() {
    let seen = Arc::new(Seen::default());
    let kit = kit(&seen);
    kit.publish(&SignedUp { user: 7 }).await.unwrap();
    // registered after the publish: from the topic's end by default, from
    // its beginning when asked
    let kit = kit.subscribe("late", flaky).subscribe(
        Subscription::new("replay").start(Start::Beginning),
        |e: SignedUp, ctx: EventContext| async move {
            ctx.data::<Arc<Seen>>()?.push(format!("replay {}", e.user));
            Ok(())
        },
    );
    let run = kit.run_until_idle().await.unwrap();
    assert_eq!(run.events, 1);
    assert_eq!(seen.take(), ["replay 7"]);
}

/// A subscriber given a start past its topic's events and over a minute on
/// (it would skip every event until then): the kit's run refuses it, as a
/// worker's build and the backends refuse it (the kit made it, and it
/// skipped them).
#[tokio::test(start_paused = true)]
async fn a_subscriber_starting_a_year_ahead_is_refused_by_the_run() {
    let seen = Arc::new(Seen::default());
    let year = Duration::from_secs(365 * 86_400);
    let later = kit(&seen).clock().now() + year;
    let kit = kit(&seen).subscribe(Subscription::new("late").start(Start::Time(later)), flaky);
    match kit.run_until_idle().await {
        Err(redjob::Error::InvalidValue { what, reason }) => {
            assert_eq!(what, "subscriber start");
            assert!(reason.contains("skip every event"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(kit.subscriber("kit-users", "late").is_none());
}

#[tokio::test]
async fn a_subscriber_that_never_finishes_is_reported_not_idle() {
    let kit = TestKit::new()
        .wait_limit(Duration::from_millis(300))
        .subscribe("stuck", |_: SignedUp, _| async {
            std::future::pending::<()>().await;
            Ok(())
        });
    kit.publish(&SignedUp { user: 1 }).await.unwrap();
    match kit.run_until_idle().await {
        Err(redjob::Error::NotIdle { pending, .. }) => {
            let text = pending.join("; ");
            assert!(
                text.contains("subscriber \"stuck\" of topic \"kit-users\""),
                "{text}"
            );
        }
        other => panic!("expected NotIdle, got {other:?}"),
    }
}

#[derive(Serialize, Deserialize, Event, Debug, PartialEq, Clone)]
#[event(name = "kit-order", topic = "kit-orders-mt")]
struct Order {
    n: u64,
}

#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(name = "kit-ship", queue = "kit-ship")]
struct Ship {
    n: u64,
}

impl Job for Ship {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// On a multi-threaded runtime: an event whose handler enqueues a job is
/// never reported idle before the job ran (the handler's enqueue and its
/// event's settle fall between the kit's two looks), and stopping the
/// kit's workers never waits for a subscriber's blocked read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_many_threads_a_run_is_idle_only_when_the_jobs_events_made_ran() {
    let kit = TestKit::new();
    let client = kit.client();
    let kit = kit
        .data(client)
        .subscribe("shipper", |e: Order, ctx: EventContext| async move {
            ctx.data::<Client>()?.enqueue(&Ship { n: e.n }).await?;
            Ok(())
        });
    let real = Instant::now();
    for n in 0..500 {
        kit.publish(&Order { n }).await.unwrap();
        let run = kit.run_until_idle().await.unwrap();
        assert_eq!((run.events, run.processed), (1, 1), "cycle {n}");
    }
    // 500 cycles of a few ms each: one that waited out a 1 s blocked read
    // would show
    assert!(
        real.elapsed() < Duration::from_secs(20),
        "{:?}",
        real.elapsed()
    );
}
