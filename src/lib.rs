#![doc = include_str!("../README.md")]
#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

// lets the derive's `::redjob::...` paths resolve inside this crate (its own tests)
#[cfg(test)]
extern crate self as redjob;

pub mod backend;
pub mod client;
pub mod connection;
mod error;
#[doc = include_str!("../docs/guide.md")]
pub mod guide {}
mod id;
pub mod inspect;
pub mod job;
mod keys;
pub mod ops;
pub mod queue;
pub mod testing;
pub mod topic;
pub mod worker;

pub use client::Client;
pub use error::{Error, Result};
pub use id::JobId;
pub use job::{Job, JobContext, JobError};
/// Derives [`JobSpec`](job::JobSpec) and registers the type so stored jobs decode
/// back into it. Attributes, all optional: `#[job(name = "...", queue = "...",
/// max_attempts = N, timeout = "30s", backoff = "1s", priority = 0, unique, unique_for = "1h")]`;
/// durations take `ms`, `s`, `m`, `h` or `d`.
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
///   alone implies `unique`.
pub use redjob_macros::Job;
pub use worker::{RetryPolicy, Worker};

/// Used by `#[derive(Job)]`'s expansion. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::job::DynJob;
    pub use futures::future::BoxFuture;
    pub use inventory;
    pub use typetag;
}
