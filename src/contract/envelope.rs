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

/// A copy of `body` that names `id` as the job it retries: an envelope (a JSON
/// object) gets a last member `"retry_of": "<id>"` (written at its end, so its
/// `"type"` stays first); any other body is copied as it is.
pub(crate) fn with_retry_of(body: &[u8], id: &crate::JobId) -> Vec<u8> {
    let is_object =
        serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body).is_ok();
    let trimmed = body.trim_ascii_end();
    match trimmed.strip_suffix(b"}") {
        Some(open) if is_object => {
            let empty = open.trim_ascii_end().ends_with(b"{");
            let mut out = open.to_vec();
            if !empty {
                out.push(b',');
            }
            out.extend_from_slice(format!(r#""retry_of":"{id}"}}"#).as_bytes());
            out
        }
        _ => body.to_vec(),
    }
}

/// The job an envelope says it retries (see [`with_retry_of`]).
pub(crate) fn retry_of(body: &[u8]) -> Option<crate::JobId> {
    #[derive(serde::Deserialize)]
    struct Link {
        retry_of: Option<String>,
    }
    serde_json::from_slice::<Link>(body)
        .ok()?
        .retry_of?
        .parse()
        .ok()
}

#[cfg(test)]
mod retry_tests {
    use super::*;

    #[test]
    fn a_copy_names_the_job_it_retries_and_keeps_its_type_first() {
        let id: crate::JobId = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
        let copy = with_retry_of(br#"{"type":"Mail","args":{"to":1}} "#, &id);
        assert!(copy.starts_with(br#"{"type":"Mail""#));
        assert_eq!(retry_of(&copy), Some(id));
        assert_eq!(job_name(&copy).as_deref(), Some("Mail"));
        assert_eq!(retry_of(&with_retry_of(b"{}", &id)), Some(id));
        assert_eq!(with_retry_of(b"plain text", &id), b"plain text");
        assert_eq!(retry_of(b"[1]"), None);
    }
}
