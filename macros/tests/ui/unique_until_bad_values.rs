use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(unique_until = "executed")]
struct UnknownUntil;

#[derive(Serialize, Deserialize, Job)]
#[job(concurrency_key = "account", unique_until = "start")]
struct KeyedUntilStart {
    account: u64,
}

impl Job for UnknownUntil {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for KeyedUntilStart {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
