//! Parsing `#[job(...)]`, collecting every error before failing.

use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, Lit, LitInt, LitStr};

/// The parsed attributes; `None` means the default.
#[derive(Default)]
pub struct JobAttrs {
    pub name: Option<LitStr>,
    pub queue: Option<LitStr>,
    pub max_attempts: Option<u32>,
    pub timeout_ms: Option<u64>,
    pub backoff_ms: Option<u64>,
    pub priority: Option<i8>,
    /// The variant of `redjob::queue::OnDuplicate`.
    pub unique: Option<&'static str>,
    pub unique_for_ms: Option<u64>,
    /// The variant of `redjob::queue::UniqueUntil`.
    pub unique_until: Option<&'static str>,
    /// Where `unique_until` was given.
    pub unique_until_at: Option<proc_macro2::Span>,
    /// The field whose value is the job's concurrency key.
    pub concurrency_key: Option<LitStr>,
    pub per_key: Option<u32>,
    /// The handler's result type (`output = "T"`).
    pub output: Option<syn::Type>,
}

/// Collects errors so that a user sees all of them at once.
#[derive(Default)]
pub struct Errors(Option<syn::Error>);

impl Errors {
    pub fn push(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    pub fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

pub fn parse(attrs: &[Attribute], errors: &mut Errors) -> JobAttrs {
    let mut out = JobAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("job")) {
        let res = attr.parse_nested_meta(|meta| {
            let key = meta
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default();
            // `unique` alone keeps the first job
            if key == "unique" && !meta.input.peek(syn::Token![=]) {
                let at = Expr::Path(syn::ExprPath {
                    attrs: Vec::new(),
                    qself: None,
                    path: meta.path.clone(),
                });
                set(&mut out.unique, Ok("Keep"), &at, errors);
                return Ok(());
            }
            let value: Expr = meta.value()?.parse()?;
            match key.as_str() {
                "name" => set(&mut out.name, string(&value).and_then(job_name), &value, errors),
                "queue" => set(&mut out.queue, string(&value).and_then(queue), &value, errors),
                "max_attempts" => set(&mut out.max_attempts, attempts(&value), &value, errors),
                "timeout" => set(&mut out.timeout_ms, string(&value).and_then(|s| duration(&s)), &value, errors),
                "backoff" => set(&mut out.backoff_ms, string(&value).and_then(|s| duration(&s)), &value, errors),
                "priority" => set(&mut out.priority, priority(&value), &value, errors),
                "unique" => set(&mut out.unique, string(&value).and_then(unique), &value, errors),
                "unique_for" => set(&mut out.unique_for_ms, string(&value).and_then(|s| duration(&s)), &value, errors),
                "unique_until" => {
                    out.unique_until_at = Some(value.span());
                    set(&mut out.unique_until, string(&value).and_then(unique_until), &value, errors)
                }
                "concurrency_key" => set(&mut out.concurrency_key, string(&value), &value, errors),
                "per_key" => set(&mut out.per_key, per_key(&value), &value, errors),
                "output" => set(&mut out.output, string(&value).and_then(|s| s.parse::<syn::Type>()), &value, errors),
                _ => errors.push(syn::Error::new(
                    meta.path.span(),
                    format!(
                        "unknown job attribute `{key}`; expected one of `name`, `queue`, `max_attempts`, `timeout`, `backoff`, `priority`, `unique`, `unique_for`, `unique_until`, `concurrency_key`, `per_key`, `output`"
                    ),
                )),
            }
            Ok(())
        });
        if let Err(e) = res {
            errors.push(e);
        }
    }
    // "done" is the default of a unique type: spelt out alone it would make
    // the type unique (it did), or quietly do nothing; it is refused
    if let (Some("Done"), None, None, Some(at)) = (
        out.unique_until,
        out.unique,
        out.unique_for_ms,
        out.unique_until_at,
    ) {
        errors.push(syn::Error::new(
            at,
            "`unique_until = \"done\"` alone makes nothing unique: \"done\" is how long a unique job holds its key by default; add `unique` (or `unique_for`) to make the type unique, or leave it out",
        ));
    }
    out
}

pub fn set<T>(slot: &mut Option<T>, value: syn::Result<T>, expr: &Expr, errors: &mut Errors) {
    match value {
        Ok(_) if slot.is_some() => {
            errors.push(syn::Error::new(expr.span(), "duplicate job attribute"))
        }
        Ok(v) => *slot = Some(v),
        Err(e) => errors.push(e),
    }
}

/// The expression inside invisible groups: a `macro_rules!` fragment (`$x:literal`,
/// `$x:expr`) reaches the derive wrapped in one group per macro it went through.
pub fn ungroup(e: &Expr) -> &Expr {
    match e {
        Expr::Group(g) => ungroup(&g.expr),
        _ => e,
    }
}

pub fn string(e: &Expr) -> syn::Result<LitStr> {
    match ungroup(e) {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s.clone()),
        _ => Err(syn::Error::new(e.span(), "expected a string literal")),
    }
}

pub fn name(s: LitStr) -> syn::Result<LitStr> {
    if s.value().is_empty() {
        return Err(syn::Error::new(s.span(), "job name must not be empty"));
    }
    Ok(s)
}

/// A job's name: not empty, and written in its envelope's JSON as it is
/// (no `"`, `\` or control character, which JSON escapes): the history reads
/// a job's type from the envelope's text (`body_type` in lib.lua and
/// history.rs), and an escaped name would be no type there.
fn job_name(s: LitStr) -> syn::Result<LitStr> {
    let s = name(s)?;
    if let Some(c) = s
        .value()
        .chars()
        .find(|c| *c == '"' || *c == '\\' || c.is_control())
    {
        return Err(syn::Error::new(
            s.span(),
            format!(
                "job name must not hold {c:?}: quotes, backslashes and control characters are escaped in the stored job, where the history cannot read its type"
            ),
        ));
    }
    Ok(s)
}

pub fn queue(s: LitStr) -> syn::Result<LitStr> {
    let v = s.value();
    let ok = (1..=160).contains(&v.len())
        && v.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        && v != "QUEUES";
    if ok {
        Ok(s)
    } else {
        Err(syn::Error::new(
            s.span(),
            "invalid queue name: use 1 to 160 characters of A-Z, a-z, 0-9, _ and -",
        ))
    }
}

/// The most jobs of one key that may run at once (MAX_PER_KEY in keyed.rs).
const MAX_PER_KEY: u32 = 1000;

pub fn per_key(e: &Expr) -> syn::Result<u32> {
    int_within(e, "`per_key = 2`", 1..=MAX_PER_KEY, || {
        format!("per_key must be between 1 and {MAX_PER_KEY}")
    })
}

/// An integer literal within `range`; `example` shows one, `out` says why
/// another is refused.
fn int_within(
    e: &Expr,
    example: &str,
    range: std::ops::RangeInclusive<u32>,
    out: impl FnOnce() -> String,
) -> syn::Result<u32> {
    let lit: LitInt = match ungroup(e) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i.clone(),
        _ => {
            return Err(syn::Error::new(
                e.span(),
                format!("expected an integer, e.g. {example}"),
            ));
        }
    };
    match lit.base10_parse::<u32>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(syn::Error::new(lit.span(), out())),
    }
}

pub fn attempts(e: &Expr) -> syn::Result<u32> {
    int_within(e, "`max_attempts = 5`", 1..=MAX_ATTEMPTS, || {
        format!(
            "max_attempts must be between 1 and {MAX_ATTEMPTS}: a job's delivery count is kept in the thousandths of its score and stops at 499"
        )
    })
}

/// `unique = "keep" | "replace_delay" | "replace"` as an `OnDuplicate` variant.
fn unique(s: LitStr) -> syn::Result<&'static str> {
    match s.value().as_str() {
        "keep" => Ok("Keep"),
        "replace_delay" => Ok("ReplaceDelay"),
        "replace" => Ok("Replace"),
        v => Err(syn::Error::new(
            s.span(),
            format!(
                "unknown unique policy {v:?}: expected \"keep\" (the default), \"replace_delay\" or \"replace\""
            ),
        )),
    }
}

/// `unique_until = "done" | "start"` as a `UniqueUntil` variant.
fn unique_until(s: LitStr) -> syn::Result<&'static str> {
    match s.value().as_str() {
        "done" => Ok("Done"),
        "start" => Ok("Start"),
        v => Err(syn::Error::new(
            s.span(),
            format!(
                "unknown unique_until {v:?}: expected \"done\" (the default: the key is held until the job is done) or \"start\" (until its run starts)"
            ),
        )),
    }
}

/// `redjob::queue::MIN_PRIORITY..=MAX_PRIORITY` (the expansion asserts that they agree).
const PRIORITIES: std::ops::RangeInclusive<i8> = -10..=10;

fn priority(e: &Expr) -> syn::Result<i8> {
    let err = || {
        syn::Error::new(
            e.span(),
            format!(
                "priority must be an integer from {} to {} (higher runs first), e.g. `priority = 5`",
                PRIORITIES.start(),
                PRIORITIES.end()
            ),
        )
    };
    let (negative, lit) = match ungroup(e) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => (false, i),
        Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            expr,
            ..
        }) => match ungroup(expr) {
            Expr::Lit(ExprLit {
                lit: Lit::Int(i), ..
            }) => (true, i),
            _ => return Err(err()),
        },
        _ => return Err(err()),
    };
    let v = lit.base10_parse::<i64>().map_err(|_| err())?;
    let v = if negative { -v } else { v };
    i8::try_from(v)
        .ok()
        .filter(|p| PRIORITIES.contains(p))
        .ok_or_else(err)
}

/// `redjob::job::MAX_ATTEMPTS` (a proc-macro crate cannot use redjob's items; the
/// expansion asserts that the two agree).
const MAX_ATTEMPTS: u32 = 498;

/// `redjob::worker::MAX_DELAY` in milliseconds, RSMQ's longest delay.
const MAX_DURATION_MS: u64 = 9_999_999_000;

/// `"500ms"`, `"30s"`, `"5m"`, `"2h"`, `"1d"` in milliseconds.
pub fn duration(s: &LitStr) -> syn::Result<u64> {
    let v = s.value();
    let err = || {
        syn::Error::new(
            s.span(),
            format!(
                "invalid duration {v:?}: expected a number with a unit of ms, s, m, h or d, e.g. \"30s\""
            ),
        )
    };
    let split = v.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?;
    let (num, unit) = v.split_at(split);
    if num.is_empty() {
        return Err(err());
    }
    let mult = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(err()),
    };
    let refuse = |why: &str| {
        Err(syn::Error::new(
            s.span(),
            format!("invalid duration {v:?}: {why}"),
        ))
    };
    let Ok(n) = num.parse::<u64>() else {
        return refuse("the number is too large");
    };
    match n.checked_mul(mult) {
        Some(0) => refuse("it must be more than zero; leave the attribute out for the default"),
        Some(ms) if ms > MAX_DURATION_MS => {
            refuse("it is above redjob's limit of 9999999 s (about 115 days)")
        }
        Some(ms) => Ok(ms),
        None => refuse("the number is too large"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(s: &str) -> String {
        let lit = LitStr::new(s, proc_macro2::Span::call_site());
        duration(&lit).unwrap_err().to_string()
    }

    #[test]
    fn a_job_name_json_would_escape_is_refused() {
        let check = |s: &str| {
            let lit = LitStr::new(s, proc_macro2::Span::call_site());
            let attr: Attribute = syn::parse_quote!(#[job(name = #lit)]);
            let mut errors = Errors::default();
            let parsed = parse(&[attr], &mut errors);
            errors.finish().map(|()| parsed.name.map(|n| n.value()))
        };
        for bad in ["say \"hi\"", "a\\b", "tab\there", "line\n"] {
            let e = check(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad:?} was accepted"));
            assert!(e.to_string().starts_with("job name must not hold"), "{e}");
        }
        for ok in ["send_email", "billing.charge/v2", "café", "a b:c"] {
            assert_eq!(check(ok).unwrap().as_deref(), Some(ok));
        }
    }

    #[test]
    fn a_duration_without_a_number_says_so() {
        for s in ["s", "ms", " 30s", "-5s"] {
            assert_eq!(
                message(s),
                format!(
                    "invalid duration {s:?}: expected a number with a unit of ms, s, m, h or d, e.g. \"30s\""
                )
            );
        }
        assert!(message("99999999999999999999s").ends_with("the number is too large"));
        assert_eq!(
            duration(&LitStr::new("30s", proc_macro2::Span::call_site())).unwrap(),
            30_000
        );
    }
}
