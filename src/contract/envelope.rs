//! The JSON envelope a job is stored as, `{"type": "<job name>", "args": {...}}`,
//! read without knowing the job's type (the typed side is `crate::job`).

use serde::Deserialize;

#[derive(Deserialize)]
pub(crate) struct Head<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) name: std::borrow::Cow<'a, str>,
}

/// The job name a stored body's envelope gives, if it has one.
pub(crate) fn job_name(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<Head<'_>>(body)
        .ok()
        .map(|h| h.name.into_owned())
}
