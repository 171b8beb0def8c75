//! What waits in the kit's backend: the jobs of a type, with their queue and
//! due time, and assertions on them.

use std::time::{Duration, SystemTime};

use crate::JobId;
use crate::contract::time::UnixMs;
use crate::job::Job;

/// A job waiting in the kit's backend. Its `Debug` shows when it is due in
/// UTC.
#[derive(Clone, PartialEq)]
pub struct Enqueued<J> {
    /// The job.
    pub job: J,
    /// Its id.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// When it is due (or its lease ends).
    pub due: SystemTime,
}

impl<J: std::fmt::Debug> std::fmt::Debug for Enqueued<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let due = self
            .due
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        f.debug_struct("Enqueued")
            .field("job", &self.job)
            .field("id", &self.id)
            .field("queue", &self.queue)
            .field("due", &UnixMs(due))
            .finish()
    }
}

impl super::TestKit {
    /// Every waiting job of type `J`, in any queue, oldest first: due now or
    /// later, running, or waiting for a place of its concurrency key.
    pub fn enqueued<J: Job>(&self) -> Vec<J> {
        self.scheduled::<J>().into_iter().map(|e| e.job).collect()
    }

    /// Every waiting job of type `J` with its id, queue and due time, oldest
    /// first: in the order they were enqueued, whatever their queue, due
    /// time, priority or id (a periodic tick's id carries its tick's time,
    /// which may be before a job enqueued ahead of it; a dead letter
    /// requeued is enqueued again, after the jobs waiting then).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::testing::TestKit;
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
    /// #[job(name = "kit-scheduled-ping")]
    /// struct Ping(u32);
    /// impl Job for Ping {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let kit = TestKit::new();
    /// kit.client().enqueue_in(&Ping(1), Duration::from_secs(60)).await?;
    /// kit.client().enqueue(&Ping(2)).await?;
    /// let waiting = kit.scheduled::<Ping>();
    /// assert_eq!(waiting[0].job, Ping(1)); // due later, enqueued first
    /// assert!(waiting[0].due > waiting[1].due);
    /// # Ok(()) }
    /// ```
    pub fn scheduled<J: Job>(&self) -> Vec<Enqueued<J>> {
        let mut out = Vec::new();
        for queue in self.backend.queue_names() {
            for (id, body, due_ms, seq) in self.backend.jobs_waiting(&queue) {
                if let Ok(job) = crate::job::decode_as::<J>(&body) {
                    let due = SystemTime::UNIX_EPOCH + Duration::from_millis(due_ms);
                    out.push((
                        seq,
                        Enqueued {
                            job,
                            id,
                            queue: queue.clone(),
                            due,
                        },
                    ));
                }
            }
        }
        // in the order the jobs entered their queues
        out.sort_by_key(|(seq, _)| *seq);
        out.into_iter().map(|(_, e)| e).collect()
    }

    /// Panics unless a job of type `J` with the same arguments is waiting.
    #[track_caller]
    pub fn assert_enqueued<J: Job>(&self, job: &J) {
        let want = serde_json::to_value(job).ok();
        let found = self.enqueued::<J>();
        if !found.iter().any(|j| serde_json::to_value(j).ok() == want) {
            let seen: Vec<_> = found
                .iter()
                .filter_map(|j| serde_json::to_string(j).ok())
                .collect();
            panic!(
                "no {} job with args {} enqueued; found {}: [{}]",
                J::NAME,
                want.map(|v| v.to_string()).unwrap_or_default(),
                seen.len(),
                seen.join(", ")
            );
        }
    }

    /// Panics when a job of type `J` with the same arguments is waiting:
    /// the opposite of [`assert_enqueued`](Self::assert_enqueued) (Oban's
    /// `refute_enqueued`).
    ///
    /// ```
    /// use redjob::testing::TestKit;
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "kit-refute-welcome")]
    /// struct Welcome { user: u32 }
    /// impl Job for Welcome {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let kit = TestKit::new();
    /// kit.client().enqueue(&Welcome { user: 1 }).await?;
    /// kit.assert_enqueued(&Welcome { user: 1 });
    /// kit.assert_not_enqueued(&Welcome { user: 2 });
    /// kit.run_until_idle().await?;
    /// kit.assert_not_enqueued(&Welcome { user: 1 }); // it ran
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn assert_not_enqueued<J: Job>(&self, job: &J) {
        let want = serde_json::to_value(job).ok();
        let found = self.scheduled::<J>();
        if let Some(e) = found
            .iter()
            .find(|e| serde_json::to_value(&e.job).ok() == want)
        {
            panic!(
                "a {} job with args {} is enqueued: {} in queue {:?}",
                J::NAME,
                want.map(|v| v.to_string()).unwrap_or_default(),
                e.id,
                e.queue
            );
        }
    }
}
