//! Job definitions: the derive's options, the envelope, and typed decoding errors.

use std::time::Duration;

use redjob::job::{JobOptions, JobSpec, decode, encode};
use redjob::{Error, Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, Job, PartialEq)]
#[job(
    name = "thumbnail",
    queue = "images",
    max_attempts = 3,
    timeout = "90s",
    backoff = "250ms"
)]
struct Thumbnail {
    path: String,
    width: u32,
}

impl Job for Thumbnail {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if self.width == 0 {
            return Err(JobError::fatal(format!("job {} has width 0", ctx.id())));
        }
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
struct Plain;

impl Job for Plain {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(timeout = "2h")]
enum Shape {
    Circle { r: f64 },
    Square(f64),
}

impl Job for Shape {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[test]
fn attributes_set_options_and_defaults_fill_the_rest() {
    assert_eq!(Thumbnail::NAME, "thumbnail");
    let o = Thumbnail::OPTIONS;
    assert_eq!(o.queue, "images");
    assert_eq!(o.max_attempts, 3);
    assert_eq!(o.timeout, Duration::from_secs(90));
    assert_eq!(o.backoff, Duration::from_millis(250));
    assert_eq!(Plain::NAME, "Plain", "the type's name by default");
    assert_eq!(Plain::OPTIONS, JobOptions::DEFAULT);
    assert_eq!(Shape::OPTIONS.timeout, Duration::from_secs(7200));
    assert_eq!(Shape::OPTIONS.queue, "default");
}

#[test]
fn envelope_round_trip() {
    let job = Thumbnail {
        path: "a.png".into(),
        width: 64,
    };
    let body = encode(&job).unwrap();
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        r#"{"type":"thumbnail","args":{"path":"a.png","width":64}}"#
    );
    let back = decode(&body).unwrap();
    assert_eq!(back.job_name(), "thumbnail");
    assert_eq!(back.job_options().max_attempts, 3);
    let enum_body = encode(&Shape::Square(2.0)).unwrap();
    assert_eq!(decode(&enum_body).unwrap().job_name(), "Shape");
    assert_eq!(
        decode(br#"{"type":"Plain","args":null}"#)
            .unwrap()
            .job_name(),
        "Plain"
    );
}

#[tokio::test]
async fn decoded_job_runs_its_handler() {
    let id = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
    let ctx = JobContext::new(id, 1, "images", std::time::SystemTime::now());
    let ok = decode(br#"{"type":"thumbnail","args":{"path":"p","width":1}}"#).unwrap();
    assert!(ok.perform_dyn(&ctx).await.is_ok());
    let bad = decode(br#"{"type":"thumbnail","args":{"path":"p","width":0}}"#).unwrap();
    let err = bad.perform_dyn(&ctx).await.unwrap_err();
    assert_eq!(err.outcome(), redjob::job::Outcome::Fatal);
    assert!(err.to_string().contains("width 0"));
}

#[test]
fn bad_bodies_are_typed_errors() {
    let unknown = decode(br#"{"type":"renamed_long_ago","args":{}}"#)
        .err()
        .unwrap();
    assert!(
        matches!(&unknown, Error::UnknownJob { name } if name == "renamed_long_ago"),
        "{unknown}"
    );
    for body in [
        &b"not json"[..],
        b"",
        b"[1,2,3]",
        b"{\"args\":{}}",
        br#"{"type":"thumbnail","args":{"path":3,"width":"wide"}}"#,
        br#"{"type":"thumbnail"}"#,
        b"\xff\xfe{}",
        br#"{"type":7,"args":{}}"#,
    ] {
        let err = decode(body)
            .err()
            .unwrap_or_else(|| panic!("{body:?} decoded"));
        assert!(matches!(err, Error::Decode(_)), "{body:?}: {err}");
    }
}

#[test]
fn job_error_from_any_error_retries() {
    fn fails() -> Result<(), JobError> {
        let n: i32 = "x".parse()?;
        let _ = n;
        Ok(())
    }
    let e = fails().unwrap_err();
    assert_eq!(e.outcome(), redjob::job::Outcome::Retry);
    assert!(e.error().to_string().contains("invalid digit"));
}

/// `decode` through typetag alone: the reference the direct decoders follow.
fn through_typetag(body: &[u8]) -> Result<String, String> {
    serde_json::from_slice::<Box<dyn redjob::__private::DynJob>>(body)
        .map(|job| serde_json::to_string(&job).unwrap())
        .map_err(|e| e.to_string())
}

#[test]
fn the_direct_decoders_agree_with_typetag() {
    let bodies: [&[u8]; 16] = [
        br#"{"type":"thumbnail","args":{"path":"a.png","width":4}}"#,
        br#"{"type":"thumbnail","args":{"path":"a.png","width":4},"trace":{"traceparent":"x"}}"#,
        br#"{"type":"thumbnail","trace":{},"args":{"path":"a.png","width":4}}"#,
        br#"{"args":{"path":"a.png","width":4},"type":"thumbnail"}"#,
        br#"{ "type":"thumbnail","args":{"path":"a.png","width":4}}"#,
        br#"{"type":"thumbn\u0061il","args":{"path":"a.png","width":4}}"#,
        br#"{"type":"thumbnail","type":"thumbnail","args":{"path":"a.png","width":4}}"#,
        br#"{"type":"thumbnail","args":{"path":"a.png","width":4},"args":{"path":"b","width":1}}"#,
        br#"{"type":"thumbnail","args":{"path":"a.png","width":4},"type":"Plain"}"#,
        br#"{"type":"thumbnail","args":{"path":"a.png"}}"#,
        br#"{"type":"thumbnail","args":{"path":"a.png","width":4}} x"#,
        br#"{"type":"Plain"}"#,
        br#"{"type":"Plain","args":null}"#,
        br#"{"type":"Shape","args":{"Circle":{"r":1.5}}}"#,
        br#"{"type":"Shape","args":{"Square":2.0}}"#,
        br#"{"type":"Shape","args":"Triangle"}"#,
    ];
    for body in bodies {
        let direct = decode(body)
            .map(|job| serde_json::to_string(&job).unwrap())
            .map_err(|e| e.to_string());
        let expected = through_typetag(body).map_err(|e| format!("cannot decode the job: {e}"));
        match (&direct, &expected) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", String::from_utf8_lossy(body)),
            (Err(_), Err(_)) => {}
            _ => panic!(
                "{}: {direct:?} against typetag's {expected:?}",
                String::from_utf8_lossy(body)
            ),
        }
    }
}

#[test]
fn extra_envelope_fields_are_accepted() {
    // room for per-job options next to type and args
    let job = decode(br#"{"type":"Plain","args":null,"opts":{"attempts":2}}"#);
    assert_eq!(job.unwrap().job_name(), "Plain");
}

#[test]
fn an_envelope_with_a_trace_field_decodes_as_without_it() {
    // a newer producer's `traceparent` (W3C trace context) is ignored by the
    // decoders of a worker without the `opentelemetry` feature
    let plain = encode(&Thumbnail {
        path: "a.png".into(),
        width: 4,
    })
    .unwrap();
    let text = String::from_utf8(plain.clone()).unwrap();
    let traced = format!(
        "{},\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}}",
        &text[..text.len() - 1]
    );
    let job = decode(traced.as_bytes()).unwrap();
    assert_eq!(job.job_name(), "thumbnail");
    let info = redjob::inspect::JobInfo {
        id: "0000000000abcdefghijklmnopqrstuv".parse().unwrap(),
        state: redjob::inspect::JobState::Ready,
        priority: 0,
        attempts: 0,
        due_ms: 0,
        body: traced.into_bytes(),
        last_error: None,
        runs: Vec::new(),
        finished: None,
        key: None,
        result: None,
        waits_for: None,
    };
    assert_eq!(info.decode::<Thumbnail>().unwrap().width, 4);
    assert_eq!(info.job_name().as_deref(), Some("thumbnail"));
}

#[test]
fn an_envelope_encoded_in_a_span_without_opentelemetry_is_unchanged() {
    // no OpenTelemetry layer (and, without the feature, no code) gives the
    // span a trace context: nothing is added to the envelope
    let span = tracing::info_span!("request");
    let _in = span.enter();
    let body = encode(&Thumbnail {
        path: "a.png".into(),
        width: 4,
    })
    .unwrap();
    assert_eq!(
        body,
        br#"{"type":"thumbnail","args":{"path":"a.png","width":4}}"#
    );
}
