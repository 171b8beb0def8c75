//! The unique key of a job, derived from its name and arguments, and its
//! concurrency key, from one of its fields.

use serde_json::Value;

use super::Job;
use crate::Result;

/// The unique key `#[job(unique)]` gives a job: its name, `:`, and the SHA-1 (hex)
/// of its arguments as canonical JSON (object keys sorted, no spaces), so equal
/// arguments give equal keys in any process, whatever the order of a map's entries.
///
/// ```
/// use redjob::{Job, JobContext, JobError};
/// use redjob::job::unique_key;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(name = "reindex_user", unique)]
/// struct ReindexUser { user: u64 }
/// # impl Job for ReindexUser {
/// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
/// # }
///
/// let key = unique_key(&ReindexUser { user: 7 })?;
/// assert!(key.starts_with("reindex_user:"));
/// assert_eq!(key, unique_key(&ReindexUser { user: 7 })?);
/// assert_ne!(key, unique_key(&ReindexUser { user: 8 })?);
/// # Ok::<(), redjob::Error>(())
/// ```
pub fn unique_key<J: Job>(job: &J) -> Result<String> {
    unique_key_of(J::NAME, &serde_json::to_value(job)?)
}

/// [`unique_key`] of a job named `name` with the arguments `args` (an
/// envelope's `"args"`), for a job known by its JSON alone (`redjob
/// enqueue`): the same key as the typed job's, whatever the order of the
/// arguments' fields, when `args` is the JSON the typed job serializes to
/// (an `Option` as `null` rather than left out, a float as `1.0` rather than
/// `1`, a field serde skips left out).
///
/// ```
/// use redjob::job::unique_key_of;
/// use serde_json::json;
///
/// let a = unique_key_of("reindex_user", &json!({"user": 7, "full": true}))?;
/// let b = unique_key_of("reindex_user", &json!({"full": true, "user": 7}))?;
/// assert_eq!(a, b);
/// # Ok::<(), redjob::Error>(())
/// ```
pub fn unique_key_of(name: &str, args: &Value) -> Result<String> {
    let mut text = String::new();
    canonical(args, &mut text)?;
    let hash = sha1_smol::Sha1::from(text.as_bytes()).digest().to_string();
    Ok(format!("{name}:{hash}"))
}

/// A concurrency key from the value of a job's field (see
/// [`JobSpec::concurrency_key`](super::JobSpec::concurrency_key)): a string
/// as it is, any other value as its JSON (`42`, `true`). An error for `null`
/// (a `None`): a keyed job needs a key.
#[doc(hidden)]
pub fn key_of_value<T: serde::Serialize + ?Sized>(job: &str, field: &str, v: &T) -> Result<String> {
    match serde_json::to_value(v)? {
        Value::Null => Err(crate::Error::InvalidValue {
            what: "concurrency key",
            reason: format!("job {job}'s field {field} is null: a keyed job needs a key"),
        }),
        Value::String(s) => Ok(s),
        v => Ok(v.to_string()),
    }
}

/// `v` as JSON with every object's keys in byte order.
fn canonical(v: &Value, out: &mut String) -> Result<()> {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k)?);
                out.push(':');
                canonical(v, out)?;
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out)?;
            }
            out.push(']');
        }
        v => out.push_str(&serde_json::to_string(v)?),
    }
    Ok(())
}

/// Whether a stored job body (its JSON envelope) says its job frees its
/// unique key as its run starts
/// ([`UniqueUntil::Start`](crate::queue::UniqueUntil::Start)): its last
/// member is `"unique_until":"start"`, with or without JSON whitespace around
/// the colon and before the closing brace. Only the body's last bytes are
/// read, as a worker reads them as each run starts; the member anywhere else
/// is not seen.
///
/// ```
/// use redjob::job::is_unique_until_start;
///
/// assert!(is_unique_until_start(br#"{"type":"refresh","args":{},"unique_until":"start"}"#));
/// // as Python's json.dumps writes it
/// assert!(is_unique_until_start(br#"{"type": "refresh", "args": {}, "unique_until": "start"}"#));
/// assert!(!is_unique_until_start(br#"{"type":"refresh","args":{"unique_until":"start"}}"#));
/// ```
pub fn is_unique_until_start(body: &[u8]) -> bool {
    crate::contract::envelope::unique_until_start(body)
}

/// `body`, a job's JSON envelope, with `"unique_until":"start"` as its last
/// member, as [`Client`](crate::Client)'s enqueue writes it for a job held
/// unique until its run starts: added at its end, or written so (without
/// whitespace) in place of the one it ends with in another spacing. A body
/// that is not a JSON object is returned as it is.
///
/// ```
/// use redjob::job::with_unique_until_start;
///
/// let body = with_unique_until_start(br#"{"type": "refresh", "args": {}}"#);
/// assert_eq!(body, br#"{"type": "refresh", "args": {},"unique_until":"start"}"#);
/// let spaced = br#"{"type": "refresh", "args": {}, "unique_until": "start" }"#;
/// assert_eq!(with_unique_until_start(spaced), body);
/// ```
pub fn with_unique_until_start(body: &[u8]) -> Vec<u8> {
    crate::contract::envelope::with_unique_until_start(body)
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b": [1, {"y": 2, "x": "s"}], "a": null}"#).unwrap();
        let mut out = String::new();
        canonical(&a, &mut out).unwrap();
        assert_eq!(out, r#"{"a":null,"b":[1,{"x":"s","y":2}]}"#);
    }
}
