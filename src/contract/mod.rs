//! The contract between the runtime and the storage: the types that cross it
//! and the traits each backend implements, in terms of those types only.
//!
//! Nothing here imports a backend, the client or the worker. The files,
//! roughly from the ground up (`history` reads `stored`'s numbers, and
//! `topics` a helper of `backend`):
//!
//! - [`forward`]: `forward!`, one impl of a trait by calling another's, which
//!   each trait's method list (beside the trait) expands to.
//! - [`envelope`]: the JSON a job is stored as, read without its type.
//! - [`keyed`]: concurrency keys, and how many jobs of one run at once.
//! - [`time`]: Unix ms that print as UTC dates.
//! - [`attempts`]: the record of each attempt at a job.
//! - [`batches`]: batches (and the flows built on them): ids, specs,
//!   callbacks, status.
//! - [`history`]: finished jobs kept for a while, and how long.
//! - [`leases`]: score marks, tokens, deliveries, hand-offs, settles, retention.
//! - [`queues`]: [`Queues`](queues::Queues), RSMQ's operations, with their
//!   messages, options and validation rules.
//! - [`runtimes`]: per job type, a histogram of run times.
//! - [`stats`]: counters, the last hour by minute, dead letters.
//! - [`stored`]: the numbers of settings stored in Redis, read as the
//!   scripts read them.
//! - [`settings`]: [`QueueSettings`](settings::QueueSettings), stored with a
//!   queue, in force for every worker.
//! - [`inspect`]: [`Inspect`](inspect::Inspect), what is in a queue.
//! - [`admin`]: [`Admin`](admin::Admin), acting on queues and dead letters;
//!   periodic ticks and worker heartbeats.
//! - [`topics`]: [`Topics`](topics::Topics), streams with subscribers.
//! - [`backend`]: [`Backend`](backend::Backend), what a worker needs.
//!
//! The public paths of these items are `redjob::backend`, `redjob::queue`,
//! `redjob::inspect`, `redjob::ops` and `redjob::topic`, which re-export them.

pub(crate) mod admin;
pub(crate) mod attempts;
pub(crate) mod backend;
pub(crate) mod batches;
pub(crate) mod envelope;
pub(crate) mod forward;
pub(crate) mod history;
pub(crate) mod inspect;
pub(crate) mod keyed;
pub(crate) mod leases;
pub(crate) mod queues;
pub(crate) mod runtimes;
pub(crate) mod settings;
pub(crate) mod stats;
pub(crate) mod stored;
pub(crate) mod time;
pub(crate) mod topics;
