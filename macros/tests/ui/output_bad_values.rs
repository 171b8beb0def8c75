use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(output = "Vec<")]
struct NotAType;

#[derive(Serialize, Deserialize, Job)]
#[job(output = "u64")]
struct WrongReturn;

impl Job for NotAType {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

impl Job for WrongReturn {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
