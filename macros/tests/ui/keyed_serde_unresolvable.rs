use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Account {
    id: u64,
}

#[derive(Serialize, Deserialize, Job)]
#[job(concurrency_key = "account")]
struct Flattened {
    #[serde(flatten)]
    account: Account,
}

mod as_text {
    pub fn serialize<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("acct-{v}"))
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        <u64 as serde::Deserialize>::deserialize(d)
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(concurrency_key = "account")]
struct WrittenWith {
    #[serde(with = "as_text")]
    account: u64,
}

#[derive(Serialize, Deserialize, Job)]
#[job(concurrency_key = "account")]
struct SerializedWith {
    #[serde(serialize_with = "as_text::serialize")]
    account: u64,
}

#[derive(Serialize, Deserialize, Job)]
#[job(concurrency_key = "account")]
struct Skipped {
    #[serde(skip_serializing)]
    account: u64,
    cents: u64,
}

#[derive(Serialize, Deserialize, Job)]
#[serde(transparent)]
#[job(concurrency_key = "account")]
struct Transparent {
    account: u64,
}

#[derive(Serialize, Deserialize, Job)]
#[serde(rename_all = "camelCase")]
#[job(concurrency_key = "accountRef")]
struct SerializedNameOfASkippedField {
    #[serde(skip)]
    account_ref: u64,
}

impl Job for Flattened {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for WrittenWith {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for SerializedWith {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for Skipped {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for Transparent {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for SerializedNameOfASkippedField {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[serde(rename_all = "camelCase")]
#[job(concurrency_key = "account_id")]
struct Ambiguous {
    account_id: u64,
    #[serde(rename = "account_id")]
    legacy: u64,
}

impl Job for Ambiguous {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
