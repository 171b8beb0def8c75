//! The types [`Inspect`](super::Inspect)'s answers are made of.

use super::Cursor;
use crate::{JobId, Result};

/// The most jobs one [`peek`](super::Inspect::peek) or [`list`](super::Inspect::list) page returns.
pub const MAX_PAGE: usize = 1000;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobState {
    /// Due: the next fetch may take it. Includes a job whose lease ran out
    /// without being settled (its worker died): it runs again.
    Ready,
    /// Not due yet: delayed, or waiting for a retry. A message an RSMQ client
    /// received counts here until its visibility timeout ends.
    Scheduled,
    /// Leased by a worker: running, or finished with its outcome on the way.
    /// Its score is its lease end, marked as a lease in its thousandths.
    InFlight,
    /// In the dead-letter queue.
    Dead,
    /// Finished (succeeded, dead-lettered, cancelled or deleted) and kept in
    /// the queue's history for a while (see [`History`](crate::ops::History));
    /// [`JobInfo::finished`] says how.
    Finished,
    /// Waiting for a place of its concurrency key (see
    /// [`Keyed`](crate::queue::Keyed)): it takes one when one of the key's
    /// running jobs leaves, in order of its due time within the key.
    Blocked,
    /// A flow's parent waiting for its children (see
    /// [`Flow`](crate::client::Flow)): not in its queue until they have all
    /// succeeded; [`JobInfo::waits_for`] names their batch. Found by id
    /// only: no list holds such jobs.
    Waiting,
}

impl JobState {
    /// The name used by scripts, the CLI and URLs: `ready`, `scheduled`,
    /// `in_flight`, `dead`, `finished`, `blocked`, `waiting`.
    ///
    /// ```
    /// assert_eq!(redjob::inspect::JobState::InFlight.as_str(), "in_flight");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Ready => "ready",
            JobState::Scheduled => "scheduled",
            JobState::InFlight => "in_flight",
            JobState::Dead => "dead",
            JobState::Finished => "finished",
            JobState::Blocked => "blocked",
            JobState::Waiting => "waiting",
        }
    }
}

/// How many jobs of a queue are in each state.
///
/// ```
/// let c = redjob::inspect::StateCounts { ready: 2, ..Default::default() };
/// assert_eq!(c.total(), 2);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StateCounts {
    /// Due now.
    pub ready: u64,
    /// Delayed, or waiting for a retry.
    pub scheduled: u64,
    /// Leased by workers.
    pub in_flight: u64,
    /// In the dead-letter queue.
    pub dead: u64,
    /// Waiting for a place of their concurrency key.
    pub blocked: u64,
}

impl StateCounts {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.ready + self.scheduled + self.in_flight + self.dead + self.blocked
    }

    /// Adds `other`'s counts to these, state by state (every state: a total
    /// of several queues, such as an overview's).
    ///
    /// ```
    /// use redjob::inspect::StateCounts;
    ///
    /// let mut c = StateCounts { ready: 2, blocked: 1, ..Default::default() };
    /// c.add(&StateCounts { ready: 1, blocked: 3, ..Default::default() });
    /// assert_eq!((c.ready, c.blocked, c.total()), (3, 4, 7));
    /// ```
    pub fn add(&mut self, other: &StateCounts) {
        // every field by name: a new state is a compile error here
        let StateCounts {
            ready,
            scheduled,
            in_flight,
            dead,
            blocked,
        } = *other;
        self.ready = self.ready.saturating_add(ready);
        self.scheduled = self.scheduled.saturating_add(scheduled);
        self.in_flight = self.in_flight.saturating_add(in_flight);
        self.dead = self.dead.saturating_add(dead);
        self.blocked = self.blocked.saturating_add(blocked);
    }
}

/// One job as stored.
///
/// ```
/// use redjob::inspect::{JobInfo, JobState};
///
/// let job = JobInfo {
///     id: "0000000000abcdefghijklmnopqrstuv".parse().unwrap(),
///     state: JobState::Ready,
///     priority: 0,
///     attempts: 1,
///     due_ms: 0,
///     body: br#"{"type":"Email","args":{"to":"a@b"}}"#.to_vec(),
///     last_error: Some("smtp timed out".into()),
///     runs: Vec::new(),
///     finished: None,
///     key: None,
///     result: None,
///     waits_for: None,
/// };
/// assert_eq!(job.job_name().as_deref(), Some("Email"));
/// assert_eq!(job.args().unwrap()["to"], "a@b");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The job's id.
    pub id: JobId,
    /// Its state when it was read.
    pub state: JobState,
    /// Its priority level (a dead letter keeps the one it had).
    pub priority: i8,
    /// Deliveries so far (0 before its first run; counting the current one while
    /// in flight).
    pub attempts: u32,
    /// Ready or scheduled: when it is (or was) due; in flight: when its lease ends;
    /// dead: when it died. Unix ms, backend time.
    pub due_ms: u64,
    /// The stored body (the job envelope, or whatever a foreign client wrote).
    pub body: Vec<u8>,
    /// The error of its last failed run, when one was retried (dead: why it died).
    pub last_error: Option<String>,
    /// Its recorded attempts, oldest first (the last
    /// [`MAX_RECORDS`](crate::inspect::MAX_RECORDS)): read when one job is looked
    /// up ([`job`](super::Inspect::job), [`locate`](super::Inspect::locate)); empty in lists.
    pub runs: Vec<crate::contract::attempts::Attempt>,
    /// A job found in the history ([`JobState::Finished`]): when and how it
    /// finished. `due_ms` is then its finish time, and `body` empty once its
    /// arguments are no longer kept.
    pub finished: Option<crate::contract::history::Finished>,
    /// Its concurrency key ([`Keyed`](crate::queue::Keyed)), with the key's
    /// `per_key` in force (a dead letter's and a finished job's: the one it
    /// had), which a dead letter's requeue and
    /// [`retry_finished`](crate::ops::Admin::retry_finished) keep: read when
    /// one job is looked up, and in lists of blocked and finished jobs;
    /// `None` in the other lists.
    pub key: Option<crate::contract::keyed::Keyed>,
    /// A finished job's result (JSON), when it succeeded with one (see
    /// [`JobSpec::Output`](crate::job::JobSpec::Output)); read from its
    /// history entry.
    pub result: Option<Vec<u8>>,
    /// A flow's parent waiting for its children ([`JobState::Waiting`]):
    /// their batch, whose status says how far they are (see
    /// [`Flow`](crate::client::Flow)).
    pub waits_for: Option<crate::contract::batches::BatchId>,
}

impl JobInfo {
    /// The batch (or flow) this job belongs to, as its envelope says: its
    /// status's [`parent_job`](crate::ops::BatchStatus::parent_job) is the
    /// job that waits for it, in a flow.
    ///
    /// ```
    /// # use redjob::inspect::{JobInfo, JobState};
    /// let job = JobInfo {
    ///     id: "0000000000abcdefghijklmnopqrstuv".parse().unwrap(),
    ///     state: JobState::Ready,
    ///     priority: 0,
    ///     attempts: 0,
    ///     due_ms: 0,
    ///     body: br#"{"type":"Resize","args":{},"batch":"0000000000aaaaaaaaaaaaaaaaaaaaaa:3"}"#.to_vec(),
    ///     last_error: None,
    ///     runs: Vec::new(),
    ///     finished: None,
    ///     key: None,
    ///     result: None,
    ///     waits_for: None,
    /// };
    /// assert_eq!(job.batch().map(|r| r.index), Some(3));
    /// ```
    pub fn batch(&self) -> Option<crate::contract::batches::BatchRef> {
        crate::contract::batches::BatchRef::of_body(&self.body)
    }

    /// The job type named in the envelope, if the body is one.
    pub fn job_name(&self) -> Option<String> {
        crate::contract::envelope::job_name(&self.body)
            .or_else(|| self.finished.as_ref()?.job_type.clone())
    }

    /// The finished job this one is a copy of, when it was sent by
    /// [`retry_finished`](crate::ops::Admin::retry_finished).
    pub fn retry_of(&self) -> Option<JobId> {
        crate::contract::envelope::retry_of(&self.body)
    }

    /// The envelope's arguments as JSON.
    pub fn args(&self) -> Result<serde_json::Value> {
        #[derive(serde::Deserialize)]
        struct Args {
            #[serde(default)]
            args: serde_json::Value,
        }
        Ok(serde_json::from_slice::<Args>(&self.body)?.args)
    }
}

/// One page of a [`list`](super::Inspect::list).
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// The jobs, in listing order.
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts; `None` on the last page. A page may have one
    /// and be short (see [`list`](super::Inspect::list)).
    pub next: Option<Cursor>,
}

/// What a [`cancel`](super::Inspect::cancel) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancelled {
    /// The job was waiting (ready or scheduled, or a flow's parent waiting
    /// for its children: it never runs, and its children run on) and is
    /// gone.
    Removed,
    /// The job was running: it is gone from the queue, its worker cancels the run
    /// at once (told by a notice; one that misses it at its next lease
    /// renewal), and the run's outcome is dropped (never retried).
    Cancelling,
    /// No such job in the queue: never sent, finished (succeeded or dead), or
    /// cancelled already. Cancelling it changes nothing.
    NotFound,
}
