//! A batch's callbacks of a unique or keyed job type: refused at enqueue, as
//! such members and flows' parents are. A callback is sent without a unique
//! key or a concurrency key, so a keyed callback ran beside the jobs holding
//! its key's places (past its `per_key`), and a unique one beside a copy.

use redjob::testing::TestKit;
use redjob::{Error, Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

/// A batch's member.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "batch_cb_member", queue = "batch_cb")]
struct Member;

impl Job for Member {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A callback with a concurrency key: one at a time per account.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "batch_cb_keyed",
    queue = "batch_cb_notify",
    concurrency_key = "account",
    per_key = 1
)]
struct Keyed {
    account: u32,
}

impl Job for Keyed {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A unique callback.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "batch_cb_unique", queue = "batch_cb_notify", unique = "keep")]
struct Unique {
    account: u32,
}

impl Job for Unique {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_unique_or_keyed_callback_is_refused_before_anything_is_sent() {
    let kit = TestKit::new();
    let client = kit.client();
    let keyed = client
        .batch()
        .job(&Member)
        .on_complete(&Keyed { account: 7 })
        .enqueue()
        .await;
    assert!(
        matches!(&keyed, Err(Error::InvalidValue { .. })),
        "a keyed callback: {keyed:?}"
    );
    let unique = client
        .batch()
        .job(&Member)
        .on_success_in("batch_cb_other", &Unique { account: 7 })
        .enqueue()
        .await;
    assert!(
        matches!(&unique, Err(Error::InvalidValue { .. })),
        "a unique callback: {unique:?}"
    );
    let report = kit.run_until_idle().await.unwrap();
    assert_eq!(report.processed, 0, "nothing was sent");
    assert!(client.batches(None, 10).await.unwrap().is_empty());
}
