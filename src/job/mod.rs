//! Job definitions: the [`Job`] trait, its options and the stored envelope.
//!
//! A job is a serde struct with `#[derive(Job)]` (its name, queue and limits) and
//! an `impl Job` with the async handler:
//!
//! ```
//! use redjob::{Job, JobContext, JobError};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Job)]
//! #[job(name = "deliver_email", queue = "emails", max_attempts = 5, timeout = "30s")]
//! struct SendEmail {
//!     to: String,
//! }
//!
//! impl Job for SendEmail {
//!     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
//!         println!("job {} (attempt {}): mail to {}", ctx.id(), ctx.attempt(), self.to);
//!         Ok(())
//!     }
//! }
//!
//! use redjob::job::JobSpec;
//! assert_eq!(SendEmail::NAME, "deliver_email");
//! assert_eq!(SendEmail::OPTIONS.queue, "emails");
//! ```

mod batch;
pub(crate) mod cancel;
mod context;
pub(crate) mod data;
pub(crate) mod depth;
pub(crate) mod envelope;
mod error;
mod finite;
mod output;
pub(crate) mod trace;
mod unique;

use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

pub(crate) use batch::{BatchAccess, BatchOps, Results, batch_member, refuse_unique_or_keyed};
pub use context::JobContext;
pub use envelope::{decode, encode};
pub(crate) use envelope::{decode_as, decode_linked, encode_untraced, linked};
pub(crate) use error::panic_message;
pub use error::{JobError, Outcome};
pub use output::{MAX_RESULT, encode_output};
#[doc(hidden)]
pub use unique::key_of_value;
pub use unique::{is_unique_until_start, unique_key, unique_key_of, with_unique_until_start};

use crate::contract::queues::{OnDuplicate, UniqueUntil};

/// A job's handler. Implement it for a type that has `#[derive(Job)]`.
///
/// See the [module docs](self) for an example.
#[diagnostic::on_unimplemented(
    message = "`{Self}` derives Job but has no handler",
    label = "add `impl redjob::Job for {Self} {{ async fn perform(..) }}`"
)]
pub trait Job: JobSpec + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Runs the job. `Err` retries it with backoff or, for [`JobError::fatal`] and
    /// after the last attempt, moves it to the dead-letter queue. `Ok` holds
    /// the job's result, of the type `#[job(output = "T")]` declares (`()`
    /// without one): the history keeps it with the job's entry, where
    /// [`Client::result`](crate::Client::result) reads it.
    fn perform(
        &self,
        ctx: &JobContext,
    ) -> impl Future<Output = Result<Self::Output, JobError>> + Send;
}

/// A job type's name and options, implemented by `#[derive(Job)]` alone:
/// the derive also registers the type for the workers, so an impl written by
/// hand (which could never run) does not compile.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no job definition",
    label = "add `#[derive(Job)]` to `{Self}`"
)]
pub trait JobSpec {
    /// What the handler returns on success (`#[job(output = "T")]`; `()`
    /// without one), kept as JSON with the job's history entry (at most
    /// [`MAX_RESULT`] bytes).
    ///
    /// ```
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(output = "Vec<u64>")]
    /// struct Primes { below: u64 }
    ///
    /// impl Job for Primes {
    ///     async fn perform(&self, _: &JobContext) -> Result<Vec<u64>, JobError> {
    ///         Ok((2..self.below).filter(|n| (2..*n).all(|d| n % d != 0)).collect())
    ///     }
    /// }
    /// ```
    type Output: Serialize + DeserializeOwned + Send + 'static;
    /// The stable name stored in the envelope's `type` field.
    ///
    /// Defaults to the bare type name, without its module path: `struct Cleanup`
    /// is `"Cleanup"` in any module (`struct r#gen` is `"gen"`). Set it with
    /// `#[job(name = "...")]` so that renaming or moving the type keeps stored
    /// jobs decodable; a name holds no `"`, `\` or control character (the
    /// derive refuses them: JSON would escape them in the envelope, where the
    /// history reads the type). Names must be
    /// unique among the job types linked into a program: a worker refuses to
    /// build ([`Error::DuplicateJobName`](crate::Error::DuplicateJobName)) when
    /// two share one.
    const NAME: &'static str;
    /// Queue, attempts, timeout and backoff from `#[job(...)]`.
    const OPTIONS: JobOptions;

    /// The job's concurrency key, from the field
    /// `#[job(concurrency_key = "field")]` names: a string field's value as it
    /// is, any other's as its JSON (`42`, `true`). Jobs of any type in a queue
    /// that share a key share its places (see [`Keyed`](crate::queue::Keyed)).
    /// An error when the field is `None`. Defaults to `Ok(None)`: no key.
    ///
    /// ```
    /// use redjob::{Job, JobContext, JobError};
    /// use redjob::job::JobSpec;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "charge", concurrency_key = "account")]
    /// struct Charge { account: u64, cents: u64 }
    /// # impl Job for Charge {
    /// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// # }
    ///
    /// let job = Charge { account: 7, cents: 100 };
    /// assert_eq!(job.concurrency_key()?.as_deref(), Some("7"));
    /// assert_eq!(Charge::OPTIONS.per_key, 1);
    /// # Ok::<(), redjob::Error>(())
    /// ```
    fn concurrency_key(&self) -> crate::Result<Option<String>> {
        Ok(None)
    }

    /// Set by `#[derive(Job)]` alone (see the trait's docs).
    #[doc(hidden)]
    const __DERIVE_JOB: crate::__private::Derived;
}

/// The largest `max_attempts` a job type may have.
///
/// A job's delivery count is kept in the thousandths of its score (see
/// [`Token`](crate::backend::Token)), where it stops at 499 (the thousandths
/// from 500 on mark a lease): a count of 499 means "499 or more". With a limit
/// of 499 or above, a job whose runs never finish (its worker killed each time)
/// would be delivered forever, its count stuck at 499. With at most 498, a count
/// of 499 is always over the limit, and such a
/// delivery is dead-lettered without running, however often it recurs.
/// `#[derive(Job)]` rejects `max_attempts` above this (and 0) at compile time.
///
/// ```
/// use redjob::job::{JobSpec, MAX_ATTEMPTS};
/// # use redjob::{Job, JobContext, JobError};
/// # use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(max_attempts = 498)] // the most; 499 does not compile
/// struct Patient;
/// # impl Job for Patient {
/// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
/// # }
/// assert_eq!(Patient::OPTIONS.max_attempts, MAX_ATTEMPTS);
/// ```
pub const MAX_ATTEMPTS: u32 = 498;

/// A job type's settings, from `#[job(...)]` attributes.
///
/// ```
/// use std::time::Duration;
/// use redjob::job::JobOptions;
///
/// let o = JobOptions::DEFAULT;
/// assert_eq!(o.queue, "default");
/// assert_eq!(o.max_attempts, 25);
/// assert_eq!(o.timeout, Duration::from_secs(1800));
/// assert_eq!(o.backoff, Duration::from_secs(1));
/// assert_eq!(o.priority, 0);
/// assert_eq!(o.unique, None);
/// assert_eq!(o.unique_until, redjob::queue::UniqueUntil::Done);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobOptions {
    /// Queue the job is sent to (`queue = "..."`). Defaults to `default`.
    pub queue: &'static str,
    /// Deliveries before the job is dead-lettered (`max_attempts = N`), from 1 to
    /// [`MAX_ATTEMPTS`] (498; the derive rejects other values). Defaults to 25.
    pub max_attempts: u32,
    /// Longest a run may take before it is cancelled and counted as failed
    /// (`timeout = "30s"`). Defaults to 30 minutes.
    pub timeout: Duration,
    /// Base of the exponential backoff between attempts (`backoff = "1s"`). Defaults to 1 s.
    pub backoff: Duration,
    /// Priority among the due jobs of its queue (`priority = 5`), from
    /// [`MIN_PRIORITY`](crate::queue::MIN_PRIORITY) (-10) to
    /// [`MAX_PRIORITY`](crate::queue::MAX_PRIORITY) (10); higher runs first.
    /// Defaults to 0.
    pub priority: i8,
    /// Unique while queued, by a key derived from the job's name and arguments
    /// (`unique`, `unique = "keep"`, `"replace_delay"` or `"replace"`: what a
    /// duplicate enqueue does). Defaults to `None`: not unique.
    pub unique: Option<OnDuplicate>,
    /// The longest a unique job holds its key (`unique_for = "1h"`; implies
    /// `unique`). Defaults to `None`: until the job leaves its queue.
    pub unique_for: Option<Duration>,
    /// How long a unique job holds its key (`unique_until = "start"` or
    /// `"done"`; implies `unique`): until it is done, or until its first run
    /// starts (see [`UniqueUntil`]). Defaults to [`UniqueUntil::Done`].
    pub unique_until: UniqueUntil,
    /// The field of the job's arguments whose value is its concurrency key
    /// (`concurrency_key = "account_id"`), by the name serde writes it under
    /// (its `rename`, or its struct's `rename_all` applied to it), whichever
    /// name the attribute gives: at most [`per_key`](Self::per_key)
    /// jobs with the same key run at once across the fleet (see
    /// [`Keyed`](crate::queue::Keyed) and [`JobSpec::concurrency_key`]). Defaults to
    /// `None`: no key.
    pub concurrency_key: Option<&'static str>,
    /// How many jobs of one concurrency key may run at once (`per_key = 2`), 1
    /// to [`MAX_PER_KEY`](crate::queue::MAX_PER_KEY). Defaults to 1.
    pub per_key: u32,
}

impl JobOptions {
    /// The defaults listed on each field.
    pub const DEFAULT: JobOptions = JobOptions {
        queue: "default",
        max_attempts: 25,
        timeout: Duration::from_secs(30 * 60),
        backoff: Duration::from_secs(1),
        priority: 0,
        unique: None,
        unique_for: None,
        unique_until: UniqueUntil::Done,
        concurrency_key: None,
        per_key: 1,
    };
}

impl Default for JobOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A job type linked into this program, recorded by `#[derive(Job)]`.
#[derive(Debug)]
pub struct Registration {
    /// The job's stable name.
    pub name: &'static str,
    /// The Rust type's path (`my_app::billing::Cleanup`), for error messages.
    pub type_path: &'static str,
    /// Its default queue.
    pub queue: &'static str,
    /// Its options, as `#[job(...)]` declares them.
    pub options: JobOptions,
}

inventory::collect!(Registration);

/// Every job type linked into this program (each `#[derive(Job)]`).
///
/// ```
/// # use redjob::{Job, JobContext, JobError};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(name = "listed", queue = "q1")]
/// struct Listed;
/// # impl Job for Listed {
/// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
/// # }
/// assert!(redjob::job::registered().any(|r| r.name == "listed" && r.queue == "q1"));
/// ```
pub fn registered() -> impl Iterator<Item = &'static Registration> {
    inventory::iter::<Registration>.into_iter()
}

/// Fails with [`Error::DuplicateJobName`](crate::Error::DuplicateJobName) when two
/// registered job types share a name: typetag then refuses to decode either.
pub(crate) fn check_unique_names() -> crate::Result<()> {
    let mut all: Vec<&Registration> = registered().collect();
    all.sort_unstable_by_key(|r| (r.name, r.type_path));
    for group in all.chunk_by(|a, b| a.name == b.name) {
        if let [first, _, ..] = group {
            return Err(crate::Error::DuplicateJobName {
                name: first.name.into(),
                types: group.iter().map(|r| r.type_path).collect(),
            });
        }
    }
    Ok(())
}

/// The object-safe face of every job, registered with typetag by `#[derive(Job)]`.
///
/// Not for users: it is how a stored envelope becomes a runnable job again.
#[doc(hidden)]
#[typetag::serde(tag = "type", content = "args")]
pub trait DynJob: Send + Sync {
    /// The job's stable name.
    fn job_name(&self) -> &'static str;
    /// The job type's options.
    fn job_options(&self) -> JobOptions;
    /// Runs the handler; its result encoded (`None` for `()`).
    fn perform_dyn<'a>(
        &'a self,
        ctx: &'a JobContext,
    ) -> futures::future::BoxFuture<'a, Result<Option<Vec<u8>>, JobError>>;
}
