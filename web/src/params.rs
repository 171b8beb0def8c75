//! What pages and actions both read from a request: the dead-letter filters
//! of a query string and a job id from a path. Pages and actions import it,
//! never each other.

use redjob::JobId;
use redjob::ops::DeadQuery;
use serde::Deserialize;

use crate::error::WebError;

/// A job id from a path, or a 400.
pub(crate) fn parse_id(id: &str) -> Result<JobId, WebError> {
    id.parse()
        .map_err(|_| WebError::BadRequest(format!("{id:?} is not a job id")))
}

/// The filters of a dead-letter listing, as the page's query string has them.
#[derive(Deserialize, Default, Clone)]
pub(crate) struct DeadFilter {
    #[serde(default, rename = "type")]
    pub job_type: String,
    #[serde(default)]
    pub error: String,
    /// "oldest" for oldest first; newest first otherwise.
    #[serde(default)]
    pub order: String,
    #[serde(default)]
    pub after: String,
    /// On the confirmation page: "requeue" or "delete".
    #[serde(default, rename = "do")]
    pub action: String,
}

impl DeadFilter {
    pub fn query(&self) -> DeadQuery {
        let mut q = DeadQuery::default();
        if self.order != "oldest" {
            q = q.newest_first();
        }
        if !self.job_type.trim().is_empty() {
            q = q.job_type(self.job_type.trim());
        }
        if !self.error.is_empty() {
            q = q.error_contains(self.error.as_str());
        }
        q
    }

    pub(crate) fn filtered(&self) -> bool {
        !self.job_type.trim().is_empty() || !self.error.is_empty()
    }

    /// The filter's pairs for a query string, with `extra`.
    pub(crate) fn pairs<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut p = vec![
            ("type", self.job_type.as_str()),
            ("error", self.error.as_str()),
            ("order", self.order.as_str()),
        ];
        p.extend_from_slice(extra);
        p
    }
}
