use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

// a bad attribute on a job that has its handler: only the attribute's error shows
#[derive(Serialize, Deserialize, Job)]
#[job(queue = "mail", retries = 3)]
struct Welcome {
    to: String,
}

impl Job for Welcome {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(timeout = "0s")]
struct Instant;

impl Job for Instant {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = "200d", timeout = "99999999999999999999s")]
struct Eternal;

impl Job for Eternal {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
