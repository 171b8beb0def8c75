//! Typed background jobs for Rust on Redis. A job is a serde struct with
//! `#[derive(Job)]` and an async handler; the client enqueues it now, later or
//! in batches of thousands per round trip; queues live in Redis in
//! [RSMQ](https://github.com/smrchy/rsmq)'s exact layout, so RSMQ clients in
//! other languages can send to redjob's queues and read them. Every timestamp
//! comes from Redis `TIME`. Workers embed in your own binary; the in-memory
//! backend runs the same code in tests and without Redis.
//!
//! ```no_run
//! use redjob::{Client, Job, JobContext, JobError, Worker};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Job)]
//! #[job(name = "crate_send_email", queue = "emails", max_attempts = 5)]
//! struct SendEmail {
//!     to: String,
//! }
//!
//! impl Job for SendEmail {
//!     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
//!         println!("attempt {}: mailing {}", ctx.attempt(), self.to);
//!         Ok(())
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> redjob::Result<()> {
//!     let client = Client::connect("redis://127.0.0.1:6379").await?;
//!     client.enqueue(&SendEmail { to: "ada@example.com".into() }).await?;
//!     // an embedded worker, until ctrl-c, SIGTERM or an operator's stop
//!     let stopped = Worker::builder(client.backend())
//!         .register::<SendEmail>()
//!         .build()?
//!         .run_until_stopped()
//!         .await?;
//!     println!("worker {stopped}");
//!     Ok(())
//! }
//! ```
//!
//! # The guide
//!
//! Each chapter is a module of [`guide`], and every example in it is a doc
//! test:
//!
//! - [Getting started](guide::getting_started): set-up, a first job, a worker
//!   in your app, a first test.
//! - [Jobs and queues](guide::jobs): `#[job(...)]` options, results,
//!   batches and flows (jobs that wait for other jobs), enqueueing and
//!   delays, priorities, unique jobs, inspecting and cancelling, limits,
//!   renaming a job type.
//! - [Handlers and the worker](guide::handlers): leases, errors, retries and
//!   backoff, timeouts, cancellation, blocking work, shared data.
//! - [Job history and tracing](guide::history): what happened to job X.
//! - [Operating](guide::operating): pause, dead letters, periodic jobs, live
//!   workers and their controls, the CLI, the dashboard, access, metrics and
//!   hooks.
//! - [Topics](guide::topics): publish once, every subscriber handles it.
//! - [Testing](guide::testing): the in-memory backend and the test kit.
//! - [Scale-out](guide::scale_out): servers, Cluster, Sentinel, ACL, TLS.
//! - [Redis layout and interop](guide::layout): the keys, the envelope, the
//!   layout version.
//! - [Reliability and benchmarks](guide::reliability): the guarantees, the
//!   figures, what is not built.
#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

//! # Layout
//!
//! The crate is built in floors. A module imports only from its own floor or
//! the floors below (within a floor, in the order listed), and no two modules
//! import each other, even through others: `scripts/floors` (run by `.ci/run`)
//! checks it with `../shared/tools/layers.py`, which prints every module at the
//! lowest layer its imports allow (so one floor may print on two layers).
//!
//! | floor | modules | holds | imports |
//! |---|---|---|---|
//! | ground | `error`, `id` | [`Error`], [`Result`], [`JobId`] | nothing of the crate |
//! | contract | `contract/` (private) | the types that cross the storage boundary and the traits the backends implement, one module each: `forward` (`forward!`, which writes an impl of a trait from the trait's method list, kept beside it), `envelope` (a job's JSON, untyped), `keyed` (concurrency keys), `time`, `attempts` (the record of each attempt), `batches`, `history` (finished jobs), `leases` (score marks, tokens, deliveries, settles), `queues` ([`Queues`](queue::Queues) and RSMQ's rules), `runtimes` (run times per job type), `stats`, `stored` (stored numbers as the scripts read them), `settings` (a queue's settings, stored with it), `inspect`, `admin`, `topics`, `backend` ([`Backend`](backend::Backend)) | the ground |
//! | typed | [`job`], then [`topic`] | jobs and events as Rust types: [`Job`], [`JobContext`] and the data handlers share, the envelope's trace context; [`topic::Event`], [`topic::EventContext`], [`topic::Subscription`] | the ground and the contract |
//! | storage | [`backend`] | the implementations side by side, `backend/redis/` and `backend/memory/`, with one module per part of the contract under the same name in each: `queues` ([`Queues`](queue::Queues); Redis's is the [`Rsmq`](queue::Rsmq) handle, with its send path in `queues/send`), `leases` ([`Backend`](backend::Backend): sends, fetches, hand-offs, renewals, settles, counters), `inspect` ([`Inspect`](inspect::Inspect)), `admin` ([`Admin`](ops::Admin)), `settings` (a queue's stored settings), `live` (periodic ticks and worker heartbeats, under `Backend` and `Admin`), `topics` ([`Topics`](topic::Topics)), `batches` and `batch_adds` (batches, and jobs added to them). Redis alone has `connection/`, `keys` (the key names), `scripts`, `functions` and `lua/`, `pipelines` and `packed` (sending script calls), `replies` (reading script replies), `convert` (Redis errors as ours, a job id as an argument), `listen` and `poll` (wake-ups, which memory gets from its own channels), and the callers of its other scripts (`complete`, `periodic`, `overview`, `results`, `parents`, `waiters`, `batch_index`); memory alone has `state`, `clock`, `probe` (for the test kit) and its own forms of what those scripts do (`keys`, the concurrency keys; `exact`, `flows`, `history`, `streams`, `topic_claim`, `topic_info`). [`backend::any`] is either | the ground and the contract (only a fuzz test of Redis replies decodes jobs) |
//! | runtime | [`client`], then [`worker`], then [`testing`] | enqueueing and inspecting; running jobs; the test kit | everything below |
//! | paths | [`queue`], [`inspect`], [`ops`], [`connection`] | public paths only: re-exports of the contract's and the Redis backend's items, which no module inside imports | what they re-export |
//!
//! Inside the crate, the runtime's types are imported from the module that
//! defines them (`crate::client::Client`, not the root's `crate::Client`; the
//! ground's `crate::Error`, `crate::Result` and `crate::JobId` may come through
//! the root), and nothing through `super::super::`: both would hide which way an
//! import points.
//!
//! ```
//! // every public path still names the same item
//! let _: Option<redjob::queue::QueueOptions> = None;
//! let _: Option<redjob::backend::Token> = None;
//! ```

// lets the derive's `::redjob::...` paths resolve inside this crate (its own tests)
#[cfg(test)]
extern crate self as redjob;

mod contract;
mod error;
mod id;

pub mod job;
pub mod topic;

pub mod backend;

pub mod client;
pub mod testing;
pub mod worker;

pub mod connection;
// the README's examples are doc tests too (its links are the repository's)
#[doc = include_str!("../README.md")]
mod readme {}

/// The guide: one module per chapter (the files of `docs/` in the
/// repository, their links to each other made intra-doc links by `build.rs`),
/// each opening with what it answers; every example in them is a doc test.
pub mod guide {
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/getting-started.md"))]
    pub mod getting_started {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/jobs.md"))]
    pub mod jobs {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/handlers.md"))]
    pub mod handlers {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/history.md"))]
    pub mod history {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/operating.md"))]
    pub mod operating {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/topics.md"))]
    pub mod topics {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/testing.md"))]
    pub mod testing {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/scale-out.md"))]
    pub mod scale_out {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/layout.md"))]
    pub mod layout {}
    #[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/reliability.md"))]
    pub mod reliability {}
}
pub mod inspect;
pub mod ops;
pub mod queue;

pub use client::Client;
pub use error::{Error, Result};
pub use id::JobId;
pub use job::{Job, JobContext, JobError};
/// Derives [`JobSpec`](job::JobSpec) and registers the type so stored jobs decode
/// back into it. Attributes, all optional: `#[job(name = "...", queue = "...",
/// max_attempts = N, timeout = "30s", backoff = "1s", priority = 0, unique, unique_for = "1h",
/// concurrency_key = "field", per_key = N, output = "T")]`; durations take `ms`,
/// `s`, `m`, `h` or `d`.
///
/// - `name` defaults to the bare type name, without its module path, so two
///   `struct Cleanup` in different modules would both be `"Cleanup"`: a worker
///   refuses to build then ([`Error::DuplicateJobName`]). Set a name to keep it
///   stable across renames and unique across modules.
/// - `max_attempts` takes 1 to [`job::MAX_ATTEMPTS`] (498): the delivery count
///   stops at 499, so a higher limit could never be reached.
/// - `unique` (or `unique = "keep" | "replace_delay" | "replace"`) keeps one job
///   per key derived from the arguments ([`job::unique_key`]) in the queue; see
///   [`queue::OnDuplicate`]. `unique_for` bounds how long the key is held, and
///   alone implies `unique`; so does `unique_until = "start"`, which frees
///   the key as the job's run starts rather than when it is done (see
///   [`queue::UniqueUntil`]). `unique_until = "done"` (the default) without
///   `unique` or `unique_for` is refused: it would make nothing unique.
/// - `concurrency_key` names the field whose value keys the job's places
///   (`per_key`, 1 without it, run at once per key); a keyed job cannot be
///   unique nor have a priority other than 0. `output` is the type the
///   handler returns (see [`job::JobSpec::Output`]).
pub use redjob_macros::Job;
pub use worker::{RetryPolicy, Worker};

/// Used by `#[derive(Job)]`'s expansion. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::job::DynJob;
    pub use crate::job::encode_output;
    pub use crate::job::envelope::{Decoder, decode_dyn};
    pub use futures::future::BoxFuture;
    pub use inventory;
    pub use typetag;

    /// What `#[derive(Job)]` alone sets in `JobSpec` (a hand-written impl
    /// would never be registered for the workers).
    pub struct Derived(());

    /// The one value of [`Derived`].
    pub const DERIVED: Derived = Derived(());
}
