use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(concurrency_key = "account_id")]
struct NoSuchField {
    account: u64,
}

#[derive(Serialize, Deserialize, Job)]
#[job(per_key = 2)]
struct PerKeyWithoutKey {
    account: u64,
}

#[derive(Serialize, Deserialize, Job)]
#[job(concurrency_key = "account", per_key = 0, priority = 3, unique)]
struct Conflicting {
    account: u64,
}

impl Job for NoSuchField {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for PerKeyWithoutKey {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for Conflicting {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
