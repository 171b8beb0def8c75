//! Inline mode ([`TestKit::inline_client`](crate::testing::TestKit::inline_client)):
//! an enqueue runs its job at once, in the caller, as a worker's first
//! attempt would run it.

use std::panic::AssertUnwindSafe;
use std::time::UNIX_EPOCH;

use futures::FutureExt;

use crate::backend::any::AnyBackend;
use crate::contract::queues::MAX_DELAY;
use crate::job::data::Data;
use crate::job::{self, Job, JobContext};
use crate::{Error, JobId, Result};

/// Runs each job once, through its stored form as a worker would (so a job
/// that does not survive encoding fails here too, and a handler may enqueue
/// its own type), within the job type's `timeout` as a worker does: a run
/// past it fails with the text a worker records, and its cancellation token
/// is cancelled. A handler that panics fails with the worker's text too
/// (`handler panicked: …`), as an error rather than a panic in the caller. Its id and enqueue time come from the backend's clock, as a
/// stored job's.
pub(super) async fn run<J: Job>(
    jobs: &[J],
    queue: &str,
    data: &Data,
    backend: &AnyBackend,
) -> Result<Vec<JobId>> {
    let mut ids = Vec::with_capacity(jobs.len());
    for j in jobs {
        let id = backend.fresh_id();
        // what a worker's context says: the id's time, in whole ms
        let sent = id.sent_at().unwrap_or(UNIX_EPOCH);
        let ctx = JobContext::new(id, 1, queue, sent).with_data_map(data.clone());
        let stored = job::decode(&job::encode(j)?)?;
        let timeout = stored.job_options().timeout.min(MAX_DELAY);
        let failed = |error| Error::JobFailed {
            name: J::NAME.into(),
            error,
        };
        let performed = AssertUnwindSafe(stored.perform_dyn(&ctx)).catch_unwind();
        match tokio::time::timeout(timeout, performed).await {
            Ok(Ok(Ok(_))) => {}
            Ok(Ok(Err(e))) => return Err(failed(e.to_string())),
            Ok(Err(panic)) => {
                let why = job::panic_message(&*panic);
                return Err(failed(format!("handler panicked: {why}")));
            }
            Err(_) => {
                // whatever the handler spawned learns of it through the token
                ctx.cancellation().cancel();
                return Err(failed(format!("timed out after {timeout:?}")));
            }
        }
        ids.push(id);
    }
    Ok(ids)
}
