//! Looking into a queue: counts by state, the next jobs to run, one job by id,
//! every job of a state page by page, and cancelling a job.
//!
//! Every state is a range of scores in the queue's sorted sets (a leased job's
//! score sits far above the others), so counts are `ZCOUNT`s and a page costs
//! its own rows, on a queue of any size. [`Inspect`] is implemented by
//! [`Rsmq`](crate::queue::Rsmq), the backends and [`Client`](crate::Client).
//!
//! ```
//! use redjob::inspect::{Inspect, JobState};
//! use redjob::queue::{Queues, SendMessage};
//! use redjob::backend::memory::MemoryBackend;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
//! let q = MemoryBackend::new();
//! q.create_queue("mail", Default::default()).await?;
//! let id = q.send("mail", SendMessage::new("hi")).await?;
//! assert_eq!(q.counts("mail").await?.ready, 1);
//! let job = q.job("mail", &id).await?.expect("queued");
//! assert_eq!((job.state, job.attempts), (JobState::Ready, 0));
//! # Ok(()) }
//! ```

pub use crate::contract::attempts::{Attempt, AttemptOutcome, MAX_ERROR, MAX_RECORDS};
pub use crate::contract::history::{Finish, Finished, HistoryEvent, HistoryQuery, MAX_EVENTS};
pub use crate::contract::inspect::{
    Cancelled, Cursor, HISTORY_SCAN, Inspect, JobInfo, JobState, LOCATE_AT_ONCE, Located, MAX_PAGE,
    Page, StateCounts,
};
