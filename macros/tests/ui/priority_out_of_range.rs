use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(priority = 11)]
struct TooHigh;

#[derive(Serialize, Deserialize, Job)]
#[job(priority = -11)]
struct TooLow;

#[derive(Serialize, Deserialize, Job)]
#[job(priority = "high")]
struct Named;

impl Job for TooHigh {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for TooLow {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for Named {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
