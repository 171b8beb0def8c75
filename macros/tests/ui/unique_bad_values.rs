use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(unique = "debounce")]
struct UnknownPolicy;

#[derive(Serialize, Deserialize, Job)]
#[job(unique, unique = "replace")]
struct Twice;

#[derive(Serialize, Deserialize, Job)]
#[job(unique_for = "forever")]
struct BadTtl;

impl Job for UnknownPolicy {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for Twice {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for BadTtl {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
