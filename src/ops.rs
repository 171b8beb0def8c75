//! Running redjob in production: pause and resume a queue, act on its dead
//! letters (list them newest or oldest first with filters, requeue, delete,
//! purge, and keep them bounded), list the live workers and the periodic
//! schedules they tick ([`Schedule`], given to
//! [`WorkerBuilder::periodic`](crate::worker::WorkerBuilder::periodic)).
//!
//! [`Admin`] is implemented by [`Rsmq`](crate::queue::Rsmq), the backends and
//! [`Client`](crate::Client), as [`Inspect`](crate::inspect::Inspect) is; the `redjob` CLI is built on
//! it.
//!
//! ```
//! use redjob::ops::{Admin, DeadQuery};
//! use redjob::backend::memory::MemoryBackend;
//! use redjob::queue::Queues;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
//! let q = MemoryBackend::new();
//! q.create_queue("mail", Default::default()).await?;
//! q.pause("mail").await?;
//! assert!(q.is_paused("mail").await?);
//! let smtp = DeadQuery::default().error_contains("smtp");
//! assert_eq!(q.requeue_dead_matching("mail", &smtp, None).await?, 0);
//! # Ok(()) }
//! ```

pub use crate::contract::admin::{
    Admin, BeatReply, BeatSchedule, BulkCount, Control, DeadOrder, DeadQuery, JobTypeInfo, KeyPage,
    KeyUsage, MAX_SCAN, Missed, Overview, OverviewQuery, OverviewSort, Paused, QueueLine,
    RunningEvent, RunningJob, Schedule, ScheduleInfo, ServedSubscriber, Spread, Tick, Ticked,
    Ticks, Totals, Unserved, WorkerControl, WorkerInfo,
};
pub use crate::contract::batches::{BatchId, BatchStatus, CallbackKind};
pub use crate::contract::history::History;
pub use crate::contract::leases::Retention;
pub use crate::contract::settings::{
    Change, Concurrency, ConcurrencyPart, HistoryPart, InForce, LimitUsage, MAX_CONCURRENCY,
    MAX_RATE_PERIOD, MAX_RETAINED, MAX_RETENTION_AGE, QueueSettings, RateLimit, RetentionPart,
    SetBy, Setting, duration_text, parse_duration,
};
