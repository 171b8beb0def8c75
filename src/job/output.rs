//! A job's result: what its handler returns, kept with its history entry.

use serde::Serialize;

use super::JobError;

/// The largest result a job may return, encoded as JSON: a larger one
/// dead-letters the job with the reason (a result lives in Redis with the
/// job's history entry).
pub const MAX_RESULT: usize = 512 * 1024;

/// A handler's result as the history keeps it: JSON, at most
/// [`MAX_RESULT`] bytes. Called by `#[derive(Job)]`'s code.
///
/// ```
/// use redjob::job::{MAX_RESULT, encode_output};
///
/// assert_eq!(encode_output(&vec![1, 2]).unwrap(), b"[1,2]");
/// assert!(encode_output(&"x".repeat(MAX_RESULT)).is_err());
/// // nested deeper than a reader reads back
/// let deep = (1..200).fold(serde_json::json!([]), |v, _| serde_json::json!([v]));
/// assert!(encode_output(&deep).is_err());
/// ```
pub fn encode_output<T: Serialize>(out: &T) -> Result<Vec<u8>, JobError> {
    // no deeper than a reader reads back (see depth.rs)
    let bytes = super::depth::to_vec(out)
        .map_err(|e| JobError::fatal(format!("its result could not be encoded: {e}")))?;
    if bytes.len() > MAX_RESULT {
        return Err(JobError::fatal(format!(
            "its result of {} bytes is over the {MAX_RESULT} a job may return",
            bytes.len()
        )));
    }
    Ok(bytes)
}
