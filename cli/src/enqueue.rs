//! `enqueue`: a job from its JSON envelope, with the options its type declares
//! as the live workers that know it say (the worker registry): its priority,
//! for a unique type the same unique key the app computes, and for a keyed
//! type the same concurrency key the app derives from the arguments.

use std::time::Duration;

use clap::Args;
use redjob::ops::{Admin, JobTypeInfo, WorkerInfo};
use redjob::queue::{
    Keyed, MAX_PRIORITY, MIN_PRIORITY, OnDuplicate, Queues, SendMessage, SendOutcome, Unique,
};
use serde_json::{Value, json};

use crate::queues::done;
use crate::show;
use crate::{Ctx, Failure, Outcome};

#[derive(Args)]
pub struct EnqueueArgs {
    /// The queue (it must exist).
    queue: String,
    /// The envelope: `{"type": "<job name>", "args": {...}}`.
    envelope: String,
    /// Run after this long (e.g. 30s, 5m).
    #[arg(long, value_parser = show::duration)]
    delay: Option<Duration>,
    /// Priority, -10 to 10 (higher runs first). Defaults to the type's, as
    /// the live workers that know it declare it, else 0.
    #[arg(long, allow_negative_numbers = true, value_parser = priority())]
    priority: Option<i8>,
    /// The concurrency key, instead of the one the type derives from the
    /// arguments (as the live workers that know it declare the type's key
    /// and its places, else 1 place).
    #[arg(long, value_name = "KEY")]
    concurrency_key: Option<String>,
    /// Refuse (exit 1) when no live worker knows the job type, rather than
    /// warn and enqueue.
    #[arg(long)]
    strict: bool,
}

/// A priority, [`MIN_PRIORITY`]..=[`MAX_PRIORITY`], as clap parses it: out of
/// range is a usage error before anything is read.
fn priority() -> clap::builder::RangedI64ValueParser<i8> {
    clap::value_parser!(i8).range(i64::from(MIN_PRIORITY)..=i64::from(MAX_PRIORITY))
}

/// The envelope's type and arguments.
fn envelope(text: &str) -> Result<(String, Value), Failure> {
    let bad = |why: &str| Failure(format!("not a job envelope: {why}"));
    let v: Value = serde_json::from_str(text).map_err(|e| bad(&e.to_string()))?;
    let obj = v.as_object().ok_or_else(|| bad("not a JSON object"))?;
    let name = match obj.get("type") {
        Some(Value::String(t)) if !t.is_empty() => t.clone(),
        _ => return Err(bad(r#"needs "type": "<job name>""#)),
    };
    let args = obj.get("args").ok_or_else(|| bad(r#"needs "args""#))?;
    Ok((name, args.clone()))
}

/// The body `redjob enqueue` stores for the envelope `text` (a JSON object,
/// checked by [`envelope`]). One whose last member says
/// `"unique_until": "start"`, in any JSON spacing, gets it written as the
/// app writes it, once ([`redjob::job::with_unique_until_start`]); one
/// without the member gets it when its type is held unique until its run
/// starts (`until_start`, as the live workers declare it). A
/// `"unique_until": "start"` elsewhere, where no worker reads it, is refused;
/// a member of another value (`"done"`) is the envelope's own say and is
/// kept as written.
fn stored_body(text: &str, until_start: bool) -> Result<String, Failure> {
    let bytes = text.as_bytes();
    let member = serde_json::from_str::<serde_json::Map<String, Value>>(text)
        .ok()
        .and_then(|mut o| o.remove("unique_until"));
    let last = redjob::job::is_unique_until_start(bytes);
    if !last && member.as_ref().is_some_and(|v| v == "start") {
        return Err(Failure(
            r#"not a job envelope: "unique_until": "start" is read as its last member only: put it last, or leave it out"#.into(),
        ));
    }
    if last || (until_start && member.is_none()) {
        let body = redjob::job::with_unique_until_start(bytes);
        return String::from_utf8(body).map_err(|e| Failure(e.to_string()));
    }
    Ok(text.to_string())
}

/// A worker as a warning names it.
fn who(w: &WorkerInfo) -> String {
    let id = w.id.get(..8).unwrap_or(&w.id);
    format!("{} (pid {}, {id})", w.host, w.pid)
}

/// A type's options as a warning prints them.
fn options(t: &JobTypeInfo) -> String {
    let ms = |ms: u64| redjob::ops::duration_text(Duration::from_millis(ms));
    format!(
        "queue {:?}, priority {}, unique {}{}{}{}, max attempts {}, timeout {}, backoff {}",
        t.queue,
        t.priority,
        t.unique.as_deref().unwrap_or("no"),
        t.unique_for_ms
            .map_or(String::new(), |m| format!(" for {}", ms(m))),
        t.unique_until
            .as_deref()
            .map_or(String::new(), |u| format!(" until {u}")),
        t.concurrency_key
            .as_deref()
            .map_or(String::new(), |f| format!(
                ", concurrency key {f:?} ({} per key)",
                t.per_key
            )),
        t.max_attempts,
        ms(t.timeout_ms),
        ms(t.backoff_ms)
    )
}

/// The concurrency key a job of type `t` with arguments `args` is sent with,
/// as the app derives it ([`JobSpec::concurrency_key`](redjob::job::JobSpec::concurrency_key)):
/// the argument the type names, a string as it is, a number or a boolean as
/// its JSON; `given` instead when set. Refused when the app's key cannot be
/// told from the arguments: the argument missing or null (the app refuses a
/// null key too), an object or an array (its JSON follows the field order of
/// the app's types and build).
fn keyed(
    given: Option<&str>,
    t: Option<&JobTypeInfo>,
    name: &str,
    args: &Value,
) -> Result<Option<Keyed>, Failure> {
    let per = t.map_or(1, |t| t.per_key.max(1));
    if let Some(key) = given {
        return Ok(Some(Keyed::new(key).per_key(per)));
    }
    let Some(field) = t.and_then(|t| t.concurrency_key.as_deref()) else {
        return Ok(None);
    };
    let refuse = |why: &str| {
        Failure(format!(
            "job type {name:?} takes its concurrency key from its argument {field:?}, which {why}: \
             give the key with --concurrency-key"
        ))
    };
    let key = match args.get(field) {
        None => return Err(refuse(r#"the envelope's "args" lack"#)),
        Some(Value::Null) => return Err(refuse("is null (the app refuses a null key too)")),
        Some(Value::String(s)) => s.clone(),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
        Some(_) => {
            return Err(refuse(
                "is an object or an array (its key's text follows the app's field order)",
            ));
        }
    };
    Ok(Some(Keyed::new(key).per_key(per)))
}

/// What the live workers say of job type `name`: the options to apply (the
/// ones most of them declare), with warnings when none knows it or they
/// disagree.
fn declared(workers: &[WorkerInfo], name: &str) -> (Option<JobTypeInfo>, Vec<String>) {
    let mut variants: Vec<(JobTypeInfo, Vec<String>)> = Vec::new();
    for w in workers {
        if let Some(t) = w.job_types.iter().find(|t| t.name == name) {
            match variants.iter_mut().find(|(v, _)| v == t) {
                Some((_, ws)) => ws.push(who(w)),
                None => variants.push((t.clone(), vec![who(w)])),
            }
        }
    }
    let mut warnings = Vec::new();
    // the variant most workers run first (of equal counts, the first seen)
    variants.sort_by_key(|(_, ws)| std::cmp::Reverse(ws.len()));
    if variants.len() > 1 {
        let mut text = format!("live workers disagree on job type {name:?}'s options:");
        for (t, ws) in &variants {
            text += &format!("\n  {}: {}", options(t), ws.join(", "));
        }
        text += "\n  the first (the one most of them run) is applied";
        warnings.push(text);
    }
    (variants.into_iter().next().map(|(t, _)| t), warnings)
}

pub async fn enqueue(ctx: &Ctx, a: EnqueueArgs) -> Outcome {
    let (name, args) = envelope(&a.envelope)?;
    // a producer's ACL may not list workers: then it enqueues as is
    let (workers, listed) = match ctx.client.workers().await {
        Ok(w) => (w, true),
        Err(e) => {
            if a.strict {
                return Err(Failure(format!(
                    "cannot list the live workers to check job type {name:?}: {e}"
                )));
            }
            eprintln!(
                "warning: cannot list the live workers ({e}): enqueued without the type's declared options"
            );
            (Vec::new(), false)
        }
    };
    let (declared, mut warnings) = declared(&workers, &name);
    match &declared {
        None if a.strict => {
            return Err(Failure(format!(
                "no live worker knows job type {name:?} (without --strict it is enqueued, and waits for one)"
            )));
        }
        None if !listed => {}
        None => warnings.push(format!(
            "no live worker knows job type {name:?}: it waits for a worker that does (a worker that does not puts it back, then dead-letters it); enqueued without its declared options"
        )),
        Some(t) if t.queue != a.queue => warnings.push(format!(
            "job type {name:?} is declared for queue {:?}, not {:?}",
            t.queue, a.queue
        )),
        Some(_) => {}
    }
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let priority = a
        .priority
        .or(declared.as_ref().map(|t| t.priority))
        .unwrap_or(0);
    // a type unique until its run starts: its envelope says so last, as the
    // app's enqueue writes it, for the worker to free the key as it starts
    let until_start = declared
        .as_ref()
        .is_some_and(|t| t.unique.is_some() && t.unique_until.as_deref() == Some("start"));
    let body = stored_body(&a.envelope, until_start)?;
    let mut msg = SendMessage::new(body).priority(priority);
    if let Some(d) = a.delay {
        msg = msg.delay(d);
    }
    // a unique type: the app's key for the same arguments, whatever their order
    let unique = declared
        .as_ref()
        .and_then(|t| t.unique.as_deref().map(|p| (t, p)));
    if let Some((t, policy)) = unique {
        let on: OnDuplicate = policy.parse()?;
        let mut u = Unique::new(redjob::job::unique_key_of(&name, &args)?).on_duplicate(on);
        if let Some(ms) = t.unique_for_ms {
            u = u.ttl(Duration::from_millis(ms));
        }
        msg = msg.unique(u);
    }
    // a keyed type: the app's key from the same arguments, waiting for its place
    let keyed = keyed(
        a.concurrency_key.as_deref(),
        declared.as_ref(),
        &name,
        &args,
    )?;
    if let Some(k) = &keyed {
        msg = msg.keyed(k.clone());
    }
    let sent = ctx
        .client
        .queues()
        .send_outcomes(&a.queue, std::slice::from_ref(&msg))
        .await?;
    let s = sent
        .first()
        .ok_or_else(|| Failure("the send returned nothing".into()))?;
    let id = s.id.to_string();
    // what the send did: a unique key held, the id is the queued job's, left
    // as it was, its due time moved or the job replaced, as its type's policy
    // says ("duplicate" in JSON: the key was held, no job was added)
    let held = "the job already queued under the same unique key";
    let (outcome, what) = match s.outcome {
        SendOutcome::Added => ("added", None),
        SendOutcome::Duplicate => ("duplicate", Some(format!("a duplicate: {held}"))),
        SendOutcome::Moved => ("moved", Some(format!("{held}, its due time moved"))),
        SendOutcome::Replaced => (
            "replaced",
            Some(format!(
                "{held}, replaced by this one (body, priority, due time)"
            )),
        ),
        _ => ("other", Some(held.to_string())),
    };
    let text = match &what {
        Some(what) => format!("{id} ({what})"),
        None => id.clone(),
    };
    let mut v = json!({ "queue": a.queue, "id": id, "priority": priority,
                        "duplicate": what.is_some(), "outcome": outcome });
    if let Some(k) = &keyed {
        v["concurrency_key"] = json!(k.key);
    }
    if !warnings.is_empty() {
        v["warnings"] = json!(warnings);
    }
    done(ctx, v, &text)
}
