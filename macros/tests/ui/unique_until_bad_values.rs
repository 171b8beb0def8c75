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

#[derive(Serialize, Deserialize, Job)]
#[job(unique_until = "done")]
struct DoneAlone;

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

impl Job for DoneAlone {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
