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
    Ok(super::depth::to_vec(&EnvelopeRef {
        name: J::NAME,
        args: job,
        trace: super::trace::current(),
    })?)
}

/// [`encode`] without a trace context: for bodies stored once and sent many
/// times (a periodic job's), which no one span enqueues.
pub(crate) fn encode_untraced<J: Job>(job: &J) -> Result<Vec<u8>> {
    Ok(super::depth::to_vec(&EnvelopeRef {
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
    decode_linked(linked(body), body)
}

/// [`decode`] with the direct decoder [`linked`] found for `body` (or none):
/// a worker looks it up once, when it admits the delivery.
pub(crate) fn decode_linked(
    linked: Option<&'static Decoder>,
    body: &[u8],
) -> Result<Box<dyn DynJob>> {
    // the envelope as `encode` writes it, of a type linked here: decoded
    // straight into that type; anything else (or a body that type refuses)
    // through typetag, whose verdict stands
    if let Some(decoder) = linked
        && let Ok(job) = (decoder.decode)(body)
    {
        return Ok(job);
    }
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

/// How `#[derive(Job)]` decodes its type's envelopes without typetag's
/// dynamic dispatch: one per job type, beside its typetag registration.
#[doc(hidden)]
pub struct Decoder {
    /// The job's stable name.
    pub name: &'static str,
    /// Decodes an envelope whose `type` is `name`.
    pub decode: fn(&[u8]) -> serde_json::Result<Box<dyn DynJob>>,
}

inventory::collect!(Decoder);

/// An envelope of job type `J`, boxed as a [`DynJob`]: a [`Decoder`]'s
/// `decode`. Duplicate `type` or `args` fields are refused (as typetag
/// refuses them); other fields, as `"trace"`, are skipped.
#[doc(hidden)]
pub fn decode_dyn<J>(body: &[u8]) -> serde_json::Result<Box<dyn DynJob>>
where
    J: DynJob + serde::de::DeserializeOwned + 'static,
{
    #[derive(Deserialize)]
    struct Envelope<T> {
        #[serde(rename = "type")]
        _name: serde::de::IgnoredAny,
        args: T,
    }
    // as `encode` writes it, `{"type":"<name>","args":<args>}`: the args
    // alone, parsed whole (a body they do not make up exactly, as one with
    // another field or a second "args", is parsed as a whole envelope)
    if let Some(args) = args_of(body)
        && let Ok(job) = serde_json::from_slice::<J>(args)
    {
        return Ok(Box::new(job));
    }
    Ok(Box::new(serde_json::from_slice::<Envelope<J>>(body)?.args))
}

/// The args of an envelope that reads `{"type":"<name>","args":<args>}` (the
/// name without escapes), as `encode` writes it; `None` otherwise.
fn args_of(body: &[u8]) -> Option<&[u8]> {
    let name = leading_name(body)?;
    let rest = body[br#"{"type":""#.len() + name.len()..].strip_prefix(br#"","args":"#)?;
    rest.strip_suffix(b"}")
}

/// The decoders of the job types linked here, by name; a name two types
/// share has none (typetag refuses it).
fn decoders() -> &'static std::collections::HashMap<&'static [u8], &'static Decoder> {
    static DECODERS: std::sync::OnceLock<
        std::collections::HashMap<&'static [u8], &'static Decoder>,
    > = std::sync::OnceLock::new();
    DECODERS.get_or_init(|| {
        let mut all = std::collections::HashMap::new();
        let mut shared = std::collections::HashSet::new();
        for d in inventory::iter::<Decoder> {
            if all.insert(d.name.as_bytes(), d).is_some() {
                shared.insert(d.name.as_bytes());
            }
        }
        all.retain(|name, _| !shared.contains(name));
        all
    })
}

/// The direct decoder of the job type an envelope names at its head, when it
/// starts as `encode` writes it and a job type linked here has that name.
pub(crate) fn linked(body: &[u8]) -> Option<&'static Decoder> {
    leading_name(body).and_then(|name| decoders().get(name).copied())
}

/// The `type` of an envelope that starts as `encode` writes it
/// (`{"type":"<name>"`, the name without escapes); `None` otherwise.
fn leading_name(body: &[u8]) -> Option<&[u8]> {
    let rest = body.strip_prefix(br#"{"type":""#)?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    (rest[end] == b'"').then(|| &rest[..end])
}

impl JobInfo {
    /// The job decoded as `J` (an error when it is another type).
    pub fn decode<J: Job>(&self) -> Result<J> {
        decode_as(&self.body)
    }
}

#[cfg(test)]
mod tests {
    use super::{decoders, leading_name};

    #[derive(serde::Serialize, serde::Deserialize, redjob_macros::Job)]
    #[job(name = "envelope_direct")]
    struct Direct {
        n: u32,
    }

    impl crate::job::Job for Direct {
        async fn perform(&self, _: &crate::job::JobContext) -> Result<(), crate::job::JobError> {
            Ok(())
        }
    }

    /// Two types of one name: typetag refuses the name, and so do the
    /// direct decoders.
    #[derive(serde::Serialize, serde::Deserialize, redjob_macros::Job)]
    #[job(name = "envelope_twice")]
    struct Once;

    impl crate::job::Job for Once {
        async fn perform(&self, _: &crate::job::JobContext) -> Result<(), crate::job::JobError> {
            Ok(())
        }
    }

    #[derive(serde::Serialize, serde::Deserialize, redjob_macros::Job)]
    #[job(name = "envelope_twice")]
    struct Twice;

    impl crate::job::Job for Twice {
        async fn perform(&self, _: &crate::job::JobContext) -> Result<(), crate::job::JobError> {
            Ok(())
        }
    }

    #[test]
    fn each_derived_type_has_a_direct_decoder_but_a_shared_name() {
        let direct = decoders()
            .get(&b"envelope_direct"[..])
            .expect("registered")
            .decode;
        let job = direct(br#"{"type":"envelope_direct","args":{"n":7}}"#).unwrap();
        assert_eq!(job.job_name(), "envelope_direct");
        assert!(direct(br#"{"type":"envelope_direct","args":{"n":"seven"}}"#).is_err());
        let body = br#"{"type":"envelope_direct","args":{"n":"seven"}}"#;
        assert_eq!(super::linked(body).map(|d| d.name), Some("envelope_direct"));
        assert_eq!(
            super::linked(br#"{"type":"envelope_twice","args":null}"#).map(|d| d.name),
            None
        );
        assert_eq!(
            super::linked(br#"{"type":"nobody_has_it","args":null}"#).map(|d| d.name),
            None
        );
        assert!(!decoders().contains_key(&b"envelope_twice"[..]));
        assert!(super::decode(br#"{"type":"envelope_twice","args":null}"#).is_err());
    }

    /// The direct decoder reads the args alone only where they make up the
    /// rest of the envelope exactly; its verdict is the whole envelope's.
    #[test]
    fn the_direct_decoder_reads_the_args_alone_only_as_encode_writes_them() {
        let args = |b: &[u8]| super::args_of(b).map(|a| String::from_utf8_lossy(a).into_owned());
        assert_eq!(
            args(br#"{"type":"envelope_direct","args":{"n":7}}"#).as_deref(),
            Some(r#"{"n":7}"#)
        );
        assert_eq!(
            args(br#"{"type":"x","args":null}"#).as_deref(),
            Some("null")
        );
        assert_eq!(args(br#"{"type":"x", "args":{}}"#), None);
        assert_eq!(args(br#"{"type":"x","args":{}} "#), None);
        assert_eq!(args(br#"{"args":{},"type":"x"}"#), None);
        let direct = decoders()
            .get(&b"envelope_direct"[..])
            .expect("registered")
            .decode;
        let n = |b: &[u8]| {
            direct(b).map(|job| {
                let back = serde_json::to_value(&job).expect("encodes");
                back["args"]["n"].as_u64().expect("an n")
            })
        };
        // as encode writes it, with nested values, spacing inside the args
        assert_eq!(
            n(br#"{"type":"envelope_direct","args":{"n":7}}"#).ok(),
            Some(7)
        );
        assert_eq!(
            n(br#"{"type":"envelope_direct","args":{ "n" : 8 } }"#).ok(),
            Some(8)
        );
        // another field after the args: the envelope ignores it, as before
        assert_eq!(
            n(br#"{"type":"envelope_direct","args":{"n":9},"at":{"n":1}}"#).ok(),
            Some(9)
        );
        // a second "args" or "type", args of another shape, a cut body: refused
        for bad in [
            &br#"{"type":"envelope_direct","args":{"n":1},"args":{"n":2}}"#[..],
            br#"{"type":"envelope_direct","args":{"n":1},"type":"envelope_direct"}"#,
            br#"{"type":"envelope_direct","args":{"n":-1}}"#,
            br#"{"type":"envelope_direct","args":{"n":1}"#,
            br#"{"type":"envelope_direct","args":{"n":1}}}"#,
        ] {
            assert!(n(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_leading_name_is_read_only_as_encode_writes_it() {
        let name = |b: &[u8]| leading_name(b).map(|n| String::from_utf8_lossy(n).into_owned());
        assert_eq!(
            name(br#"{"type":"resize","args":{}}"#).as_deref(),
            Some("resize")
        );
        assert_eq!(name(br#"{"type":"","args":{}}"#).as_deref(), Some(""));
        // another order, spacing or an escape: left to typetag
        assert_eq!(name(br#"{"args":{},"type":"resize"}"#), None);
        assert_eq!(name(br#"{ "type":"resize"}"#), None);
        assert_eq!(name(br#"{"type":"res\u0069ze"}"#), None);
        assert_eq!(name(br#"{"type":"resize"#), None);
        assert_eq!(name(br#"{"type":7}"#), None);
        assert_eq!(name(b""), None);
    }
}
