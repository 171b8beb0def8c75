//! The one error type of the crate.

use std::fmt;

/// Everything that can go wrong in redjob, outside a job handler's own outcome
/// (that is [`JobError`](crate::JobError)).
///
/// ```
/// use redjob::Error;
///
/// let err = Error::InvalidQueueName { name: "no spaces".into() };
/// assert_eq!(err.to_string(), "invalid queue name \"no spaces\": use 1 to 160 characters of A-Z, a-z, 0-9, _ and -");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Redis failed or could not be reached.
    Redis(redis::RedisError),
    /// Redis could not be reached, or refused the connection (a wrong password).
    Connect {
        /// The URL, its password replaced by `***`.
        url: String,
        /// What failed.
        error: redis::RedisError,
    },
    /// The queue does not exist.
    QueueNotFound {
        /// The queue's name.
        name: String,
    },
    /// A queue of that name exists already.
    QueueExists {
        /// The queue's name.
        name: String,
    },
    /// The queue name breaks RSMQ's rules.
    InvalidQueueName {
        /// The rejected name.
        name: String,
    },
    /// The message id is not 32 characters of `A-Z`, `a-z`, `0-9` and `:`.
    InvalidMessageId {
        /// The rejected id.
        id: String,
    },
    /// A queue attribute or call option is out of range.
    InvalidValue {
        /// Which value, e.g. `vt`.
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// The message body is larger than the queue's `maxsize`.
    MessageTooLarge {
        /// The body's size in bytes.
        size: usize,
        /// The queue's limit in bytes.
        max: usize,
    },
    /// A stored job could not be turned back into its type, or a job could not be encoded.
    Decode(serde_json::Error),
    /// A stored job names a job type that this program does not know.
    UnknownJob {
        /// The job name in the envelope.
        name: String,
    },
    /// Two or more job types linked into the program store the same job name, so
    /// no stored job of that name could be decoded (give each its own
    /// `#[job(name = "...")]`). Refused by [`Worker`](crate::Worker)'s `build` and
    /// the [test kit](crate::testing::TestKit) before any job runs.
    DuplicateJobName {
        /// The shared job name.
        name: String,
        /// The Rust types that use it, by path, sorted.
        types: Vec<&'static str>,
    },
    /// Redis answered a script with something the client did not expect.
    Protocol(String),
    /// A handler asked its context for a value the worker was not given with `.data()`.
    MissingData {
        /// The requested type.
        type_name: &'static str,
        /// The types of the values the worker does hold, in no particular order.
        held: Vec<&'static str>,
    },
    /// A job failed: in inline mode (tests), the job run at enqueue; from
    /// [`Client::result`](crate::Client::result) or
    /// [`wait_result`](crate::Client::wait_result), the awaited job finished
    /// without success (dead-lettered, cancelled or deleted), `error` saying
    /// how and why.
    JobFailed {
        /// The job's name.
        name: String,
        /// Its error.
        error: String,
    },
    /// The operation was refused because the worker or client is shutting down.
    ShuttingDown,
    /// The namespace's stored data is in a layout this release does not read
    /// (written by a later release, see
    /// [`LAYOUT_VERSION`](crate::backend::LAYOUT_VERSION)): the worker does not
    /// start. Upgrade redjob, or point it at another namespace.
    LayoutUnsupported {
        /// The layout version the namespace says it is in, as stored.
        found: String,
        /// The latest this release reads.
        supported: u32,
    },
    /// A task of the worker panicked (a bug in redjob or in a backend): the worker
    /// stopped; jobs it held run again after their leases.
    Crashed {
        /// Which task.
        task: &'static str,
        /// The panic's message.
        reason: String,
    },
    /// The [test kit](crate::testing::TestKit) waited its whole `wait_limit` of
    /// real time and jobs were still due or running (a handler that never returns,
    /// or jobs that keep enqueueing jobs).
    NotIdle {
        /// How long it waited.
        waited: std::time::Duration,
        /// Per queue, the jobs still running and due, counted by job name.
        pending: Vec<String>,
    },
    /// Redis is at its `maxmemory` and refuses writes that would grow it
    /// (with nothing it may evict, as under the policy `noeviction`): nothing
    /// of the refused call was written. Workers keep draining the queues
    /// meanwhile. A send of several calls refused part way is
    /// [`PartlySent`](Self::PartlySent).
    OutOfMemory(redis::RedisError),
    /// A send of several calls (over 1,000 jobs or 4 MiB, or jobs of several
    /// kinds or priorities) was refused part way by `error` (Redis out of
    /// memory, say): the jobs of the calls that went through are stored and
    /// run; send the others again, not these. A send of over 16 calls goes
    /// in round trips of 16 calls: when one after the first
    /// fails with a timeout or a lost connection, the jobs of those before it
    /// are `stored`, and its own may or may not be (as with any call that
    /// fails so). (A batch or a flow enqueued part
    /// way is cancelled whole instead, and fails with the refusal itself.)
    /// With [`WaitForReplicas`](crate::connection::WaitForReplicas), a round
    /// trip that stored jobs but was not confirmed by enough replicas is said
    /// in `not_replicated`.
    ///
    /// ```
    /// use redjob::{Error, JobId};
    ///
    /// let id: JobId = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
    /// let e = Error::PartlySent {
    ///     stored: vec![(0, id)],
    ///     of: 3,
    ///     error: Box::new(Error::ShuttingDown),
    ///     not_replicated: None,
    /// };
    /// assert!(e.to_string().starts_with("1 of 3 jobs were stored"));
    /// // the jobs to send again: those not stored
    /// let Error::PartlySent { stored, of, .. } = &e else { unreachable!() };
    /// let again: Vec<usize> = (0..*of).filter(|i| !stored.iter().any(|(at, _)| at == i)).collect();
    /// assert_eq!(again, [1, 2]);
    /// ```
    PartlySent {
        /// Each job stored: its place among the jobs given, and its id (a
        /// unique job whose key another job held: that job's id).
        stored: Vec<(usize, crate::JobId)>,
        /// How many jobs the send had.
        of: usize,
        /// What refused the others.
        error: Box<Error>,
        /// With [`WaitForReplicas`](crate::connection::WaitForReplicas):
        /// [`NotReplicated`](Self::NotReplicated) with the fewest replicas that
        /// confirmed a round trip that stored some of `stored`, when fewer than
        /// wanted (a failover now could lose those); `None` when every one
        /// that stored them was confirmed, or the client does not wait.
        not_replicated: Option<Box<Error>>,
    },
    /// A publish was refused: the topic holds its event type's `max_len` events
    /// and its policy is [`WhenFull::Refuse`](crate::topic::WhenFull::Refuse).
    /// Nothing of the refused call was written.
    TopicFull {
        /// The topic.
        topic: String,
        /// Its limit.
        max_len: u64,
    },
    /// An enqueue with [`WaitForReplicas`](crate::connection::WaitForReplicas)
    /// is stored on the master, but fewer replicas than wanted confirmed it in
    /// time: a failover now could lose it. Enqueueing again would add it twice
    /// (unless it has a unique key).
    NotReplicated {
        /// The replicas that confirmed it.
        replicas: u32,
        /// The replicas wanted.
        wanted: u32,
    },
    /// The Redis (ACL) user may not run a command redjob sends or its scripts
    /// call, or may not touch the namespace's keys or channels. The "Redis
    /// ACL" section of the [scale-out chapter](crate::guide::scale_out) lists
    /// what redjob needs.
    NoPermission {
        /// What was refused: Redis's words for a command, key or channel, or
        /// the command a script called (Redis does not name it then).
        refused: String,
        /// Redis's error.
        error: redis::RedisError,
    },
    /// The Redis server is older than a feature needs (topics need Redis 7.0
    /// for their consumer-group lag and `ENTRIESREAD`; queues need 6.2).
    ServerTooOld {
        /// The feature, e.g. `topics`.
        feature: &'static str,
        /// The oldest version it works on, e.g. `7.0`.
        needs: &'static str,
        /// The server's `redis_version`.
        found: String,
    },
    /// The topic has no subscriber (consumer group) of that name.
    SubscriberNotFound {
        /// The topic.
        topic: String,
        /// The subscriber asked for.
        subscriber: String,
    },
}

/// `Result` with [`Error`] as its default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "redis error: {e}"),
            Error::NoPermission { refused, .. } => write!(
                f,
                "the Redis user lacks a permission redjob needs (docs/scale-out.md, \"Redis ACL\", lists them): {refused}"
            ),
            Error::ServerTooOld {
                feature,
                needs,
                found,
            } => write!(
                f,
                "{feature} need Redis {needs} or newer; this server is Redis {found}"
            ),
            Error::Connect { url, error } => {
                write!(f, "cannot connect to Redis at {url}: {error}")
            }
            Error::QueueNotFound { name } => write!(f, "queue {name:?} not found"),
            Error::QueueExists { name } => write!(f, "queue {name:?} exists already"),
            Error::InvalidQueueName { name } => write!(
                f,
                "invalid queue name {name:?}: use 1 to 160 characters of A-Z, a-z, 0-9, _ and -"
            ),
            Error::InvalidMessageId { id } => write!(
                f,
                "invalid message id {id:?}: expected 32 characters of A-Z, a-z, 0-9 and :"
            ),
            Error::InvalidValue { what, reason } => write!(f, "invalid {what}: {reason}"),
            Error::MessageTooLarge { size, max } => {
                write!(
                    f,
                    "message of {size} bytes exceeds the queue's maxsize of {max} bytes"
                )
            }
            Error::Decode(e) => write!(f, "cannot decode job: {e}"),
            Error::UnknownJob { name } => write!(f, "unknown job type {name:?}"),
            Error::DuplicateJobName { name, types } => write!(
                f,
                "job name {name:?} is used by {} types ({}): give each its own #[job(name = \"...\")]",
                types.len(),
                types.join(", ")
            ),
            Error::Protocol(m) => write!(f, "unexpected reply from redis: {m}"),
            Error::MissingData { type_name, held } => {
                let (wanted, held) = missing_data_names(type_name, held);
                let held = if held.is_empty() {
                    "it holds no values".to_string()
                } else {
                    format!("it holds: {}", held.join(", "))
                };
                write!(
                    f,
                    "no value of type {wanted} was given to the worker ({held}): add it with `Worker::builder(..).data(value)`"
                )
            }
            Error::JobFailed { name, error } => write!(f, "job {name} failed: {error}"),
            Error::ShuttingDown => write!(f, "shutting down"),
            Error::LayoutUnsupported { found, supported } => write!(
                f,
                "this namespace's Redis layout is version {found:?}, and this redjob reads versions up to {supported}: upgrade redjob (or use another namespace)"
            ),
            Error::Crashed { task, reason } => write!(f, "worker {task} task crashed: {reason}"),
            Error::NotIdle { waited, pending } => write!(
                f,
                "jobs still pending after waiting {waited:?} of real time for the test kit to be idle: {}",
                pending.join(" | ")
            ),
            Error::OutOfMemory(e) => write!(
                f,
                "redis is out of memory (maxmemory reached): the call was refused, nothing of it written: {e}"
            ),
            Error::PartlySent {
                stored,
                of,
                error,
                not_replicated,
            } => {
                write!(
                    f,
                    "{} of {of} jobs were stored (their calls went through) and the others refused: {error}",
                    stored.len()
                )?;
                match not_replicated.as_deref() {
                    Some(Error::NotReplicated { replicas, wanted }) => write!(
                        f,
                        "; the stored are on the master, but only {replicas} of {wanted} replicas confirmed them in time: a failover could lose them"
                    ),
                    Some(other) => write!(f, "; of the stored: {other}"),
                    None => Ok(()),
                }
            }
            Error::TopicFull { topic, max_len } => write!(
                f,
                "topic {topic:?} is full ({max_len} events) and refuses new ones: nothing published"
            ),
            Error::NotReplicated { replicas, wanted } => write!(
                f,
                "the enqueue is stored on the master, but only {replicas} of {wanted} replicas confirmed it in time: a failover could lose it"
            ),
            Error::SubscriberNotFound { topic, subscriber } => {
                write!(f, "topic {topic:?} has no subscriber {subscriber:?}")
            }
        }
    }
}

/// No variant returns a [`source`](std::error::Error::source): each one's
/// Display already holds its cause's text (and redis's errors repeat their own io
/// error), so a report would print the cause twice. The cause itself is in the
/// variant's fields.
impl std::error::Error for Error {}

/// The names [`Error::MissingData`] shows, sorted: without module paths, unless
/// that makes a held type look like the one wanted.
fn missing_data_names(wanted: &str, held: &[&str]) -> (String, Vec<String>) {
    let short = short_type_name(wanted);
    let mut names: Vec<String> = held.iter().map(|h| short_type_name(h)).collect();
    if names.contains(&short) {
        names = held.iter().map(|h| h.to_string()).collect();
        names.sort();
        return (wanted.to_string(), names);
    }
    names.sort();
    (short, names)
}

/// `type_name` without module paths: `alloc::sync::Arc<app::db::Pool>` is
/// `Arc<Pool>`.
fn short_type_name(type_name: &str) -> String {
    let last = |path: &str| path.rsplit("::").next().unwrap_or(path).to_string();
    let mut out = String::with_capacity(type_name.len());
    let mut start = 0;
    for (i, c) in type_name.char_indices() {
        if !(c.is_alphanumeric() || c == '_' || c == ':') {
            out += &last(&type_name[start..i]);
            out.push(c);
            start = i + c.len_utf8();
        }
    }
    out + &last(&type_name[start..])
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Decode(e)
    }
}

#[cfg(test)]
mod tests {
    use super::{missing_data_names, short_type_name};

    #[test]
    fn type_names_lose_their_module_paths_unless_two_then_look_alike() {
        for (full, short) in [
            ("alloc::sync::Arc<app::db::Pool>", "Arc<Pool>"),
            ("u64", "u64"),
            (
                "std::collections::hash::map::HashMap<alloc::string::String, (u8, &str)>",
                "HashMap<String, (u8, &str)>",
            ),
            ("[core::option::Option<a::B>; 2]", "[Option<B>; 2]"),
        ] {
            assert_eq!(short_type_name(full), short);
        }
        let (wanted, held) =
            missing_data_names("app::Pool", &["u64", "alloc::sync::Arc<app::Pool>"]);
        assert_eq!(
            (wanted.as_str(), held.join(", ")),
            ("Pool", "Arc<Pool>, u64".into())
        );
        // another module's Pool: full paths, or the message would name the same type twice
        let (wanted, held) = missing_data_names("app::Pool", &["other::Pool"]);
        assert_eq!(
            (wanted.as_str(), held.join(", ")),
            ("app::Pool", "other::Pool".into())
        );
    }
}
