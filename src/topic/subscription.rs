//! A subscriber's settings and its typed handlers, as the worker keeps them.

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::contract::topics::{EventOptions, Start};
use crate::job::JobError;
use crate::topic::{Event, EventContext};

/// A subscriber a worker serves: its name (the consumer group) and how it reads.
/// A plain name converts into one with the defaults.
///
/// ```
/// use redjob::topic::{Start, Subscription};
///
/// let s = Subscription::new("billing")  // the subscriber's name
///     .start(Start::Beginning)           // where a new subscriber starts; defaults to the end
///     .concurrency(8)                    // its events in flight; defaults to the worker's limit
///     .ordered();                        // one at a time, retried in place; defaults to off
/// let plain: Subscription = "audit".into();
/// # let _ = (s, plain);
/// ```
#[derive(Debug, Clone)]
pub struct Subscription {
    pub(crate) name: String,
    pub(crate) start: Start,
    pub(crate) concurrency: Option<usize>,
    pub(crate) ordered: bool,
}

impl Subscription {
    /// The subscriber `name` with the defaults.
    pub fn new(name: impl Into<String>) -> Self {
        Subscription {
            name: name.into(),
            start: Start::End,
            concurrency: None,
            ordered: false,
        }
    }

    /// Where the subscriber starts when the worker creates it (one that exists
    /// keeps its offset). Defaults to [`Start::End`]. A start over a minute
    /// ahead is refused (the worker's `build` fails): it would skip every
    /// event until then.
    pub fn start(mut self, start: Start) -> Self {
        self.start = start;
        self
    }

    /// The most of its events running or read ahead at once in this worker,
    /// within the worker's own limit: with `n` running it reads none ahead
    /// (the others wait in the topic for any worker of the subscriber).
    /// Defaults to none of its own: up to the worker's limit run, and up to
    /// 256 more (or the worker's fetch size, if larger) are read ahead.
    /// 1 to [`MAX_CONCURRENCY`](crate::ops::MAX_CONCURRENCY) (1,000,000),
    /// else the worker's `build` fails with
    /// [`Error::InvalidValue`](crate::Error::InvalidValue).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// Runs one event of the subscriber at a time, across all its worker
    /// processes, and retries a failed one in place (after its backoff) before
    /// taking the next, so events are handled in topic order. One worker owns
    /// the subscriber (an entry renewed every third of the lease); the others
    /// stand by and take over when it stops, or a lease after it died, starting
    /// with the events it held (which may run again). Defaults to off.
    pub fn ordered(mut self) -> Self {
        self.ordered = true;
        self
    }
}

impl From<&str> for Subscription {
    fn from(name: &str) -> Self {
        Subscription::new(name)
    }
}

impl From<String> for Subscription {
    fn from(name: String) -> Self {
        Subscription::new(name)
    }
}

/// One event type's handler, its type erased.
pub(crate) trait Handler: Send + Sync {
    fn options(&self) -> EventOptions;
    /// Decodes `data` and starts the handler; `Err` says why it does not decode.
    fn start(
        &self,
        data: &str,
        ctx: EventContext,
    ) -> Result<BoxFuture<'static, Result<(), JobError>>, String>;
}

pub(crate) struct Typed<E, F>(pub F, pub PhantomData<fn() -> E>);

impl<E, F, Fut> Handler for Typed<E, F>
where
    E: Event,
    F: Fn(E, EventContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    fn options(&self) -> EventOptions {
        E::OPTIONS
    }

    fn start(
        &self,
        data: &str,
        ctx: EventContext,
    ) -> Result<BoxFuture<'static, Result<(), JobError>>, String> {
        let event: E = serde_json::from_str(data)
            .map_err(|e| format!("cannot decode event {:?}: {e}", E::NAME))?;
        Ok(Box::pin((self.0)(event, ctx)))
    }
}

/// A topic's subscriber with every handler registered for it.
pub(crate) struct Spec {
    pub topic: String,
    pub sub: Subscription,
    pub handlers: HashMap<&'static str, Arc<dyn Handler>>,
}
