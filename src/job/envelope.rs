//! The JSON envelope a job is stored as: `{"type": "<job name>", "args": {...}}`,
//! with `"trace"` after them when the `opentelemetry` feature has a trace to
//! carry (see `trace.rs`).

use serde::{Deserialize, Serialize};

use super::{DynJob, Job};
use crate::contract::envelope::Head;
use crate::contract::inspect::JobInfo;
use crate::{Error, Result};

#[derive(Serialize)]
struct EnvelopeRef<'a, T> {
    #[serde(rename = "type")]
    name: &'a str,
    args: &'a T,
    /// The trace context of the span that encoded it (see `trace.rs`); left
    /// out when there is none, as always without the feature.
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: Option<std::collections::BTreeMap<String, String>>,
}

/// Encodes a job as its envelope. With the `opentelemetry` feature, inside a
/// span with a trace context, the envelope also carries that context as
/// `"trace"` (the application's propagator's fields, W3C's `traceparent`),
/// which the worker's span of the job continues.
///
/// ```
/// use redjob::{Job, JobContext, JobError};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(name = "resize")]
/// struct Resize { width: u32 }
///
/// impl Job for Resize {
///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
/// }
///
/// let body = redjob::job::encode(&Resize { width: 64 }).unwrap();
/// assert_eq!(body, br#"{"type":"resize","args":{"width":64}}"#);
/// let job = redjob::job::decode(&body).unwrap();
/// assert_eq!(job.job_name(), "resize");
/// ```
pub fn encode<J: Job>(job: &J) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(&EnvelopeRef {
        name: J::NAME,
        args: job,
        trace: super::trace::current(),
    })?)
}

/// [`encode`] without a trace context: for bodies stored once and sent many
/// times (a periodic job's), which no one span enqueues.
pub(crate) fn encode_untraced<J: Job>(job: &J) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(&EnvelopeRef {
        name: J::NAME,
        args: job,
        trace: None,
    })?)
}

/// Decodes an envelope of job type `J`: [`Error::InvalidValue`] for a body of
/// another type, [`Error::Decode`] for one that is no envelope or whose args are
/// not a `J`.
pub(crate) fn decode_as<J: Job>(body: &[u8]) -> Result<J> {
    #[derive(Deserialize)]
    struct Envelope<T> {
        args: T,
    }
    let head: Head<'_> = serde_json::from_slice(body)?;
    if head.name != J::NAME {
        return Err(Error::InvalidValue {
            what: "job type",
            reason: format!("the body is a {:?} job, not a {:?}", head.name, J::NAME),
        });
    }
    Ok(serde_json::from_slice::<Envelope<J>>(body)?.args)
}

/// Decodes an envelope into the job type its `type` names.
///
/// A name no linked job type has gives [`Error::UnknownJob`]; anything else that
/// is not a valid envelope for its type gives [`Error::Decode`]. Never panics.
///
/// ```
/// use redjob::Error;
///
/// let err = redjob::job::decode(br#"{"type":"nobody_has_this","args":{}}"#).err().unwrap();
/// assert!(matches!(err, Error::UnknownJob { name } if name == "nobody_has_this"));
/// assert!(matches!(redjob::job::decode(b"not json"), Err(Error::Decode(_))));
/// ```
pub fn decode(body: &[u8]) -> Result<Box<dyn DynJob>> {
    match serde_json::from_slice::<Box<dyn DynJob>>(body) {
        Ok(job) => Ok(job),
        Err(e) => {
            if let Ok(head) = serde_json::from_slice::<Head<'_>>(body) {
                // serde's wording for an unregistered tag
                if e.to_string()
                    .contains(&format!("unknown variant `{}`", head.name))
                {
                    return Err(Error::UnknownJob {
                        name: head.name.into_owned(),
                    });
                }
            }
            Err(Error::Decode(e))
        }
    }
}

impl JobInfo {
    /// The job decoded as `J` (an error when it is another type).
    pub fn decode<J: Job>(&self) -> Result<J> {
        decode_as(&self.body)
    }
}
