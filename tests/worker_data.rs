//! Shared values (`Worker::builder(..).data(value)`, `ctx.data::<T>()`) as a
//! handler meets them: a value given in an `Arc` is found by its type, and a
//! missing one says what the worker holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use redjob::testing::TestKit;
use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

/// A connection pool, as an app shares one: given to the worker as `Arc<Pool>`.
#[derive(Default)]
struct Pool {
    queries: AtomicU32,
}

/// What no worker here is given.
struct Cache;

#[derive(Serialize, Deserialize, Job, Debug)]
#[job(name = "query", queue = "db")]
struct Query;

impl Job for Query {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Pool>()?.queries.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job, Debug)]
#[job(name = "cached", queue = "db")]
struct Cached;

impl Job for Cached {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Cache>()?;
        Ok(())
    }
}

/// `.data(Arc<Pool>)` and `ctx.data::<Pool>()` meet (the value is found through
/// its `Arc`), and a value that is not there dead-letters the job with the
/// types the worker does hold.
#[tokio::test]
async fn data_given_in_an_arc_is_found_by_its_type_and_a_miss_names_what_is_held() {
    let pool = Arc::new(Pool::default());
    let kit = TestKit::new().data(pool.clone()).data(7u64);
    kit.client().enqueue(&Query).await.unwrap();
    let report = kit.run_until_idle().await.unwrap();
    assert_eq!(
        (report.processed, report.dead),
        (1, 0),
        "{report:?}: {:?}",
        kit.dead_letters("db").await
    );
    assert_eq!(pool.queries.load(Ordering::SeqCst), 1);

    kit.client().enqueue(&Cached).await.unwrap();
    assert_eq!(kit.run_until_idle().await.unwrap().dead, 1);
    let dead = kit.dead_letters("db").await.unwrap();
    let error = &dead[0].error;
    assert!(
        error.contains("no value of type Cache was given"),
        "{error}"
    );
    assert!(error.contains("it holds: Arc<Pool>, u64"), "{error}");
}
