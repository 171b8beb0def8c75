//! `#[job(...)]` values that reach the derive through `macro_rules!` fragments,
//! which wrap them in invisible groups.

use std::time::Duration;

use redjob::job::JobSpec;
use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

/// Defines a job type from `:literal` fragments.
macro_rules! job_from_literals {
    ($ty:ident, $n:literal, $q:literal, $m:literal, $t:literal) => {
        #[derive(Serialize, Deserialize, Job)]
        #[job(name = $n, queue = $q, max_attempts = $m, timeout = $t)]
        struct $ty;

        impl Job for $ty {
            async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
                Ok(())
            }
        }
    };
}

/// Defines a job type from `:expr` fragments.
macro_rules! job_from_exprs {
    ($ty:ident, $n:expr, $q:expr, $m:expr, $t:expr) => {
        #[derive(Serialize, Deserialize, Job)]
        #[job(name = $n, queue = $q, max_attempts = $m, timeout = $t)]
        struct $ty;

        impl Job for $ty {
            async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
                Ok(())
            }
        }
    };
}

/// Passes its `:expr` on as another `:expr`: groups nested in groups.
macro_rules! job_through_two_macros {
    ($ty:ident, $n:expr, $q:expr, $m:expr, $t:expr) => {
        job_from_exprs!($ty, $n, $q, $m, $t);
    };
}

job_from_literals!(FromLiterals, "from_literals", "lit_queue", 7, "45s");
job_from_exprs!(FromExprs, "from_exprs", "expr_queue", 9, "2m");
job_through_two_macros!(Nested, "nested", "nested_queue", 11, "750ms");

#[test]
fn attribute_values_from_macro_rules_literal_fragments_are_accepted() {
    assert_eq!(FromLiterals::NAME, "from_literals");
    let o = FromLiterals::OPTIONS;
    assert_eq!(
        (o.queue, o.max_attempts, o.timeout),
        ("lit_queue", 7, Duration::from_secs(45))
    );
}

#[test]
fn attribute_values_from_macro_rules_expr_fragments_are_accepted() {
    assert_eq!(FromExprs::NAME, "from_exprs");
    let o = FromExprs::OPTIONS;
    assert_eq!(
        (o.queue, o.max_attempts, o.timeout),
        ("expr_queue", 9, Duration::from_secs(120))
    );
    assert_eq!(Nested::NAME, "nested");
    let o = Nested::OPTIONS;
    assert_eq!(
        (o.queue, o.max_attempts, o.timeout),
        ("nested_queue", 11, Duration::from_millis(750))
    );
}

/// A job keyed by a field whose name is a keyword (a raw identifier), named
/// as serde names it.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "keyed_by_raw_field", concurrency_key = "type")]
struct KeyedByRawField {
    r#type: String,
}

/// The same, the field named as it is written.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "keyed_by_raw_field_as_written", concurrency_key = "r#type")]
struct KeyedByRawFieldAsWritten {
    r#type: u32,
}

impl Job for KeyedByRawField {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

impl Job for KeyedByRawFieldAsWritten {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[test]
fn a_concurrency_key_may_name_a_raw_identifier_field() {
    let job = KeyedByRawField {
        r#type: "pdf".into(),
    };
    assert_eq!(job.concurrency_key().unwrap().as_deref(), Some("pdf"));
    let job = KeyedByRawFieldAsWritten { r#type: 7 };
    assert_eq!(job.concurrency_key().unwrap().as_deref(), Some("7"));
    // the field's name in the job's JSON arguments, where `redjob enqueue`
    // looks for the key
    assert_eq!(KeyedByRawField::OPTIONS.concurrency_key, Some("type"));
    assert_eq!(
        KeyedByRawFieldAsWritten::OPTIONS.concurrency_key,
        Some("type")
    );
    let args = serde_json::to_value(&job).unwrap();
    assert_eq!(args["type"], 7);
}

/// A job type whose name is a keyword, written as a raw identifier.
#[allow(non_camel_case_types)]
#[derive(Serialize, Deserialize, Job)]
struct r#gen;

impl Job for r#gen {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// An event type named so.
#[allow(non_camel_case_types)]
#[derive(Serialize, Deserialize, redjob::topic::Event)]
struct r#try;

#[test]
fn a_raw_identifier_type_is_named_as_written_without_its_prefix() {
    assert_eq!(r#gen::NAME, "gen");
    assert_eq!(<r#try as redjob::topic::Event>::NAME, "try");
}
