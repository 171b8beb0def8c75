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

/// Keyed by a field serde renames: the key's field is published as serde
/// writes it in the job's JSON arguments, where `redjob enqueue` and
/// non-Rust senders find it.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "keyed_by_renamed_field", concurrency_key = "account")]
struct KeyedByRenamedField {
    #[serde(rename = "acct")]
    account: u64,
}

/// Renamed for serializing alone (deserializing reads another name).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "keyed_by_serialize_rename", concurrency_key = "account")]
struct KeyedBySerializeRename {
    #[serde(rename(serialize = "accountRef", deserialize = "account_ref"))]
    account: String,
}

/// A container rename rule, and a field rename that overrides it.
#[derive(Serialize, Deserialize, Job)]
#[serde(rename_all = "camelCase")]
#[job(name = "keyed_by_camel_case", concurrency_key = "account_id")]
struct KeyedByCamelCase {
    account_id: u64,
    #[serde(rename = "CENTS")]
    amount_in_cents: u64,
}

/// A deserialize-only rename changes nothing in the JSON a job is sent as.
#[derive(Serialize, Deserialize, Job)]
#[serde(rename_all(deserialize = "UPPERCASE"))]
#[job(name = "keyed_by_deserialize_rename", concurrency_key = "tenant_id")]
struct KeyedByDeserializeRename {
    #[serde(rename(deserialize = "tenant"))]
    tenant_id: u32,
}

/// Named by its serialized name rather than its Rust one.
#[derive(Serialize, Deserialize, Job)]
#[serde(rename_all = "kebab-case")]
#[job(name = "keyed_by_serialized_name", concurrency_key = "shard-key")]
struct KeyedBySerializedName {
    shard_key: String,
}

macro_rules! keyed_by_rule {
    ($ty:ident, $rule:literal) => {
        #[derive(Serialize, Deserialize, Job)]
        #[serde(rename_all = $rule)]
        #[job(name = $rule, queue = "keyed_rules", concurrency_key = "the_account_id")]
        struct $ty {
            the_account_id: u64,
            r#type: u8,
        }

        impl Job for $ty {
            async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
                Ok(())
            }
        }
    };
}

keyed_by_rule!(RuleLower, "lowercase");
keyed_by_rule!(RuleUpper, "UPPERCASE");
keyed_by_rule!(RulePascal, "PascalCase");
keyed_by_rule!(RuleCamel, "camelCase");
keyed_by_rule!(RuleSnake, "snake_case");
keyed_by_rule!(RuleScreamingSnake, "SCREAMING_SNAKE_CASE");
keyed_by_rule!(RuleKebab, "kebab-case");
keyed_by_rule!(RuleScreamingKebab, "SCREAMING-KEBAB-CASE");

impl Job for KeyedByRenamedField {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for KeyedBySerializeRename {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for KeyedByCamelCase {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for KeyedByDeserializeRename {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for KeyedBySerializedName {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// The field a type publishes as its key's, looked up in the JSON its job
/// is sent as, as `redjob enqueue` does: it holds the key the app derives.
fn key_in_json<T: JobSpec + Serialize>(job: &T) -> serde_json::Value {
    let field = T::OPTIONS.concurrency_key.expect("a keyed type");
    let args = serde_json::to_value(job).unwrap();
    let found = args.get(field).cloned().unwrap_or_else(|| {
        panic!(
            "{}: the published field {field:?} is not in its arguments {args}",
            T::NAME
        )
    });
    let key = job.concurrency_key().unwrap().unwrap();
    let text = match &found {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    assert_eq!(text, key, "{}", T::NAME);
    found
}

#[test]
fn a_concurrency_key_field_serde_renames_is_published_by_its_serialized_name() {
    assert_eq!(key_in_json(&KeyedByRenamedField { account: 7 }), 7);
    assert_eq!(KeyedByRenamedField::OPTIONS.concurrency_key, Some("acct"));
    let job = KeyedBySerializeRename {
        account: "a-1".into(),
    };
    assert_eq!(key_in_json(&job), "a-1");
    assert_eq!(
        KeyedBySerializeRename::OPTIONS.concurrency_key,
        Some("accountRef")
    );
    let job = KeyedByCamelCase {
        account_id: 3,
        amount_in_cents: 100,
    };
    assert_eq!(key_in_json(&job), 3);
    assert_eq!(KeyedByCamelCase::OPTIONS.concurrency_key, Some("accountId"));
    assert_eq!(key_in_json(&KeyedByDeserializeRename { tenant_id: 9 }), 9);
    let job = KeyedBySerializedName {
        shard_key: "eu".into(),
    };
    assert_eq!(key_in_json(&job), "eu");
    assert_eq!(
        KeyedBySerializedName::OPTIONS.concurrency_key,
        Some("shard-key")
    );
}

#[test]
fn a_concurrency_key_follows_every_rename_all_rule_of_serde() {
    macro_rules! check {
        ($($ty:ident => $field:literal),* $(,)?) => {$(
            assert_eq!(key_in_json(&$ty { the_account_id: 5, r#type: 1 }), 5);
            assert_eq!($ty::OPTIONS.concurrency_key, Some($field), stringify!($ty));
        )*};
    }
    check!(
        RuleLower => "the_account_id",
        RuleUpper => "THE_ACCOUNT_ID",
        RulePascal => "TheAccountId",
        RuleCamel => "theAccountId",
        RuleSnake => "the_account_id",
        RuleScreamingSnake => "THE_ACCOUNT_ID",
        RuleKebab => "the-account-id",
        RuleScreamingKebab => "THE-ACCOUNT-ID",
    );
}

/// Field names with odd underscores under the rules that drop them.
#[allow(non_snake_case)]
#[derive(Serialize, Deserialize, Job)]
#[serde(rename_all = "camelCase")]
#[job(name = "keyed_by_odd_camel", concurrency_key = "_odd__name_1")]
struct KeyedByOddCamel {
    _odd__name_1: u64,
}

#[allow(non_snake_case)]
#[derive(Serialize, Deserialize, Job)]
#[serde(rename_all = "PascalCase")]
#[job(name = "keyed_by_odd_pascal", concurrency_key = "x9__y_")]
struct KeyedByOddPascal {
    x9__y_: u64,
}

/// A field name not in snake case, under a rule that upper-cases.
#[allow(non_snake_case)]
#[derive(Serialize, Deserialize, Job)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
#[job(name = "keyed_by_mixed_case", concurrency_key = "ab_cD")]
struct KeyedByMixedCase {
    ab_cD: u64,
}

impl Job for KeyedByMixedCase {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

impl Job for KeyedByOddCamel {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
impl Job for KeyedByOddPascal {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[test]
fn a_concurrency_key_with_odd_underscores_is_published_as_serde_writes_it() {
    assert_eq!(key_in_json(&KeyedByOddCamel { _odd__name_1: 4 }), 4);
    assert_eq!(key_in_json(&KeyedByOddPascal { x9__y_: 6 }), 6);
    assert_eq!(key_in_json(&KeyedByMixedCase { ab_cD: 1 }), 1);
    assert_eq!(KeyedByMixedCase::OPTIONS.concurrency_key, Some("AB-CD"));
}

/// A rename under `cfg_attr`: the compiler applies it before the derive
/// reads the attributes.
#[derive(Serialize, Deserialize, Job)]
#[cfg_attr(all(), serde(rename_all = "PascalCase"))]
#[job(name = "keyed_under_cfg_attr", concurrency_key = "account_id")]
struct KeyedUnderCfgAttr {
    #[cfg_attr(not(any()), serde(rename = "acct"))]
    account_id: u64,
}

impl Job for KeyedUnderCfgAttr {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[test]
fn a_concurrency_key_renamed_under_cfg_attr_is_published_renamed() {
    assert_eq!(key_in_json(&KeyedUnderCfgAttr { account_id: 2 }), 2);
    assert_eq!(KeyedUnderCfgAttr::OPTIONS.concurrency_key, Some("acct"));
}
