//! [`Inspect`](crate::inspect::Inspect) and [`Admin`](crate::ops::Admin) on a
//! [`Client`]: the same operations on its backend.

use super::Client;
use crate::contract::admin::{Admin, admin_methods};
use crate::contract::inspect::{Inspect, Located, inspect_methods};
use crate::{JobId, Result};

inspect_methods! {
    /// ```
    /// use redjob::inspect::{Cancelled, Inspect};
    /// use redjob::{Client, Job, JobContext, JobError};
    /// use redjob::backend::memory::MemoryBackend;
    ///
    /// #[derive(Job, serde::Serialize, serde::Deserialize)]
    /// struct Digest { user: u64 }
    /// impl Job for Digest {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let client = Client::memory(MemoryBackend::new());
    /// let id = client.enqueue(&Digest { user: 7 }).await?;
    /// let job = client.job("default", &id).await?.expect("queued");
    /// assert_eq!(job.decode::<Digest>()?.user, 7);
    /// assert_eq!(client.cancel("default", &id).await?, Cancelled::Removed);
    /// # Ok(()) }
    /// ```
    impl Inspect for Client, |self| &self.backend;
}

admin_methods! { impl Admin for Client, |self| &self.backend; }

impl Client {
    /// One job by id without its queue: [`Inspect::locate`] on the client's
    /// backend (every queue asked at once; `None` when no queue holds it).
    ///
    /// ```
    /// use redjob::{Client, Job, JobContext, JobError};
    /// use redjob::backend::memory::MemoryBackend;
    ///
    /// #[derive(Job, serde::Serialize, serde::Deserialize)]
    /// #[job(queue = "reports")]
    /// struct Report { day: u32 }
    /// impl Job for Report {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let client = Client::memory(MemoryBackend::new());
    /// let id = client.enqueue(&Report { day: 3 }).await?;
    /// let found = client.locate(&id).await?.expect("queued");
    /// assert_eq!(found.queue, "reports");
    /// # Ok(()) }
    /// ```
    pub async fn locate(&self, id: &JobId) -> Result<Option<Located>> {
        self.backend.locate(id).await
    }

    /// Enqueues a run of the periodic schedule `name` of `queue` now, as its
    /// ticks do (the job its live workers say it enqueues, at its priority,
    /// due at once whatever the queue's delay attribute),
    /// with its concurrency key, beside its ticks: the next tick runs as
    /// planned. Returns the job's id.
    /// Fails with [`InvalidValue`](crate::Error::InvalidValue) when no live
    /// worker ticks it (or none says what it enqueues).
    pub async fn run_schedule_now(&self, queue: &str, name: &str) -> Result<JobId> {
        use crate::contract::queues::{QueueOptions, SendMessage};
        let s = self
            .schedules()
            .await?
            .into_iter()
            .find(|s| s.queue == queue && s.name == name)
            .ok_or_else(|| crate::Error::InvalidValue {
                what: "schedule",
                reason: format!("no live worker ticks {name:?} of {queue:?}"),
            })?;
        let body = s.body.ok_or_else(|| crate::Error::InvalidValue {
            what: "schedule",
            reason: format!("the live workers do not say what {name:?} enqueues"),
        })?;
        // due now, as a tick is, whatever the queue's delay attribute
        let mut msg = SendMessage::new(body)
            .delay(std::time::Duration::ZERO)
            .priority(s.priority);
        // its concurrency key, as a tick's
        if let Some(k) = s.key {
            msg = msg.keyed(k);
        }
        // created if no tick made it yet, as a tick would
        let sent = crate::contract::backend::Backend::send(
            &self.backend,
            queue,
            &[msg],
            &QueueOptions::default(),
        )
        .await?;
        sent.first()
            .map(|s| s.id)
            .ok_or_else(|| crate::Error::Protocol("the send returned no id".into()))
    }
}

impl Client {
    /// What job `id` of type `J` (in `J`'s queue) returned: `None` while it
    /// has not finished (queued, running, waiting for a retry), the result
    /// (`()` for a job without `#[job(output = "T")]`) once it succeeded.
    /// Fails with [`JobFailed`](crate::Error::JobFailed) when it finished
    /// otherwise (dead-lettered, cancelled, deleted), saying how and why, and
    /// with [`InvalidValue`](crate::Error::InvalidValue) when the queue
    /// knows no such job (never sent there, or past its history's
    /// retention). A result lives in the job's history entry: none is kept
    /// while the queue's history is off.
    ///
    /// ```
    /// use redjob::testing::TestKit;
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "sum", output = "u64")]
    /// struct Sum { of: Vec<u64> }
    ///
    /// impl Job for Sum {
    ///     async fn perform(&self, _: &JobContext) -> Result<u64, JobError> {
    ///         Ok(self.of.iter().sum())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let kit = TestKit::new();
    /// let client = kit.client();
    /// let id = client.enqueue(&Sum { of: vec![1, 2, 3] }).await?;
    /// assert_eq!(client.result::<Sum>(&id).await?, None, "not run yet");
    /// kit.run_until_idle().await?;
    /// assert_eq!(client.result::<Sum>(&id).await?, Some(6));
    /// # Ok(()) }
    /// ```
    pub async fn result<J: crate::job::Job>(
        &self,
        id: &JobId,
    ) -> Result<Option<<J as crate::job::JobSpec>::Output>> {
        self.result_in::<J>(J::OPTIONS.queue, id).await
    }

    /// As [`result`](Self::result), for a job sent to `queue` (not its
    /// type's, as [`EnqueueOptions::queue`](crate::client::EnqueueOptions::queue)
    /// does). A job of another type than `J` is an
    /// [`InvalidValue`](crate::Error::InvalidValue).
    ///
    /// ```
    /// use redjob::client::EnqueueOptions;
    /// use redjob::testing::TestKit;
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "len_of", output = "usize")]
    /// struct LenOf { text: String }
    ///
    /// impl Job for LenOf {
    ///     async fn perform(&self, _: &JobContext) -> Result<usize, JobError> {
    ///         Ok(self.text.len())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let kit = TestKit::new();
    /// let client = kit.client();
    /// let opts = EnqueueOptions::new().queue("fast");
    /// let id = client.enqueue_with(&LenOf { text: "four".into() }, opts).await?;
    /// # let kit = kit; // the kit's worker serves every queue it sees
    /// kit.run_until_idle().await?;
    /// assert_eq!(client.result_in::<LenOf>("fast", &id).await?, Some(4));
    /// # Ok(()) }
    /// ```
    pub async fn result_in<J: crate::job::Job>(
        &self,
        queue: &str,
        id: &JobId,
    ) -> Result<Option<<J as crate::job::JobSpec>::Output>> {
        use crate::contract::history::Finish;
        use crate::contract::inspect::JobState;
        let job = self
            .backend
            .job(queue, id)
            .await?
            .ok_or_else(|| crate::Error::InvalidValue {
                what: "job",
                reason: format!(
                    "{id} is not in {queue:?} nor in its history (past its retention?)"
                ),
            })?;
        if let Some(name) = job.job_name().filter(|n| n != J::NAME) {
            return Err(crate::Error::InvalidValue {
                what: "job",
                reason: format!("{id} is a {name:?} job, not a {:?}", J::NAME),
            });
        }
        let failed = |how: &str| crate::Error::JobFailed {
            name: J::NAME.into(),
            error: match &job.last_error {
                Some(e) => format!("{id} was {how}: {e}"),
                None => format!("{id} was {how}"),
            },
        };
        match (&job.finished, job.state) {
            (Some(f), _) if f.how == Finish::Succeeded => {
                let json = job.result.as_deref().unwrap_or(b"null");
                Ok(Some(serde_json::from_slice(json)?))
            }
            (Some(f), _) => Err(failed(f.how.as_str())),
            (None, JobState::Dead) => Err(failed("dead-lettered")),
            _ => Ok(None),
        }
    }

    /// Waits up to `timeout` for job `id` of type `J` to finish, then as
    /// [`result`](Self::result): the result once it succeeded, `None` when it
    /// had not finished within `timeout`, [`JobFailed`](crate::Error::JobFailed)
    /// when it finished otherwise. Woken when the job finishes (on Redis a
    /// subscriber of the queue's done channel, which the script that
    /// finishes an awaited job publishes to), never by polling; the job is
    /// read again after every (re)subscription, and a quiet subscriber is
    /// pinged every five minutes (one command: no re-read while it answers) and
    /// replaced when it does not, so a notice lost with a connection (even
    /// one that died silently) cannot strand the wait; the registration is
    /// renewed every 10 minutes (a wait given up leaves none for longer), and
    /// a job finished already is read without one; Redis out of reach is tried
    /// again until the time is up. A queue purge, a bulk delete or an RSMQ
    /// client's pop does not wake it (the wait then lasts its `timeout`).
    /// Each waiting call holds a subscriber connection of its own. An inline
    /// client ([`TestKit::inline_client`](crate::testing::TestKit::inline_client))
    /// keeps no results.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::testing::TestKit;
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "double", output = "u64")]
    /// struct Double { n: u64 }
    ///
    /// impl Job for Double {
    ///     async fn perform(&self, _: &JobContext) -> Result<u64, JobError> {
    ///         Ok(self.n * 2)
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let kit = TestKit::new();
    /// let client = kit.client();
    /// let id = client.enqueue(&Double { n: 21 }).await?;
    /// let (got, _) = tokio::join!(
    ///     client.wait_result::<Double>(&id, Duration::from_secs(10)),
    ///     kit.run_until_idle(),
    /// );
    /// assert_eq!(got?, Some(42));
    /// # Ok(()) }
    /// ```
    pub async fn wait_result<J: crate::job::Job>(
        &self,
        id: &JobId,
        timeout: std::time::Duration,
    ) -> Result<Option<<J as crate::job::JobSpec>::Output>> {
        Box::pin(self.wait_result_in::<J>(J::OPTIONS.queue, id, timeout)).await
    }

    /// As [`wait_result`](Self::wait_result), for a job sent to `queue` (see
    /// [`result_in`](Self::result_in)).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use redjob::testing::TestKit;
    /// # use redjob::{Job, JobContext, JobError};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "triple", output = "u64")]
    /// struct Triple { n: u64 }
    /// # impl Job for Triple {
    /// #     async fn perform(&self, _: &JobContext) -> Result<u64, JobError> { Ok(self.n * 3) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let kit = TestKit::new();
    /// let client = kit.client();
    /// let id = client.enqueue(&Triple { n: 5 }).await?;
    /// // not run: none after the timeout
    /// let none = client.wait_result_in::<Triple>("default", &id, Duration::from_millis(50));
    /// assert_eq!(none.await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn wait_result_in<J: crate::job::Job>(
        &self,
        queue: &str,
        id: &JobId,
        timeout: std::time::Duration,
    ) -> Result<Option<<J as crate::job::JobSpec>::Output>> {
        use crate::contract::backend::Backend;
        use futures::StreamExt;
        use std::time::Duration;
        use tokio::time::Instant;
        // a name no queue can have fails now, not after the timeout
        crate::contract::queues::validate::queue_name(queue)?;
        let now = Instant::now();
        // a watch is registered for at most this long, then renewed: a wait
        // given up (its future dropped) leaves no registration for longer
        const WATCH_SPAN: Duration = Duration::from_secs(600);
        let deadline = now
            .checked_add(timeout)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
        // finished already: read at once, with no registration left behind
        match self.result_in::<J>(queue, id).await {
            Ok(Some(r)) => return Ok(Some(r)),
            Err(e @ crate::Error::JobFailed { .. }) => return Err(e),
            _ => {}
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // watched first, then read: a finish between the two is not missed;
            // the backend keeps its watch alive (on Redis, a ping every five minutes)
            // and ends it when it is lost
            let span = left.min(WATCH_SPAN);
            let renew = Instant::now() + span;
            let watched = Box::pin(self.backend.watch_finish(queue, id, span));
            let mut watch = match tokio::time::timeout(left, watched).await {
                Err(_) => return self.result_in::<J>(queue, id).await,
                Ok(Ok(w)) => w,
                // what waiting again cannot change (an ACL's refusal among them)
                Ok(Err(
                    e @ (crate::Error::QueueNotFound { .. }
                    | crate::Error::InvalidQueueName { .. }
                    | crate::Error::InvalidValue { .. }
                    | crate::Error::NoPermission { .. }),
                )) => return Err(e),
                // Redis out of reach: tried again until the time is up
                Ok(Err(e)) => {
                    if Instant::now() + Duration::from_millis(500) >= deadline {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, "waiting for a result: could not subscribe; trying again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            // Redis out of reach for the read: watched again, then read again
            match self.result_in::<J>(queue, id).await {
                Ok(Some(r)) => return Ok(Some(r)),
                Ok(None) => {}
                Err(e) => {
                    pause_to_retry(deadline, e).await?;
                    continue;
                }
            }
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let to_renew = renew.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left.min(to_renew), watch.next()).await {
                    // the time is up: what the job is now
                    Err(_) if left <= to_renew => return self.result_in::<J>(queue, id).await,
                    // the registration's span is over: watch again, read again
                    Err(_) => break,
                    Ok(Some(())) => match self.result_in::<J>(queue, id).await {
                        Ok(Some(r)) => return Ok(Some(r)),
                        Ok(None) => {}
                        Err(e) => {
                            pause_to_retry(deadline, e).await?;
                            break;
                        }
                    },
                    // the connection was lost: watch again, then read again
                    Ok(None) => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        tokio::time::sleep(Duration::from_millis(100).min(left)).await;
                        break;
                    }
                }
            }
        }
    }
}

/// Pauses a wait for a result 500 ms before it watches and reads again after
/// `e`, when `e` says Redis is out of reach for now (a timeout, a connection
/// dropped or refused) and the wait's `deadline` leaves time for it; else `e`.
async fn pause_to_retry(deadline: tokio::time::Instant, e: crate::Error) -> crate::Result<()> {
    let pause = std::time::Duration::from_millis(500);
    let out_of_reach = match &e {
        crate::Error::Redis(r) => {
            r.is_timeout()
                || r.is_io_error()
                || r.is_connection_dropped()
                || r.is_connection_refusal()
        }
        crate::Error::Connect { .. } => true,
        _ => false,
    };
    if !out_of_reach || tokio::time::Instant::now() + pause >= deadline {
        return Err(e);
    }
    tracing::debug!(error = %e, "waiting for a result: could not read the job; trying again");
    tokio::time::sleep(pause).await;
    Ok(())
}
