//! `queue settings`: a queue's settings in force (stored with the queue, else
//! the defaults), and changing them for every worker at once.

use std::time::Duration;

use clap::Args;
use redjob::ops::{
    Admin, Change, Concurrency, ConcurrencyPart, HistoryPart, LimitUsage, MAX_RETAINED,
    MAX_RETENTION_AGE, QueueSettings, RateLimit, RetentionPart, Setting, duration_text,
};
use serde_json::{Value, json};

use crate::show;
use crate::{Ctx, Outcome};

#[derive(Args)]
pub struct SettingsArgs {
    /// The queue.
    queue: String,
    /// The most dead letters the queue keeps, or `none` for no limit.
    #[arg(long, value_parser = limit)]
    dead_max_count: Option<Limit<u64>>,
    /// The oldest a dead letter gets (`30d`, `12h`...), or `none` for no limit.
    #[arg(long, value_parser = age)]
    dead_max_age: Option<Limit<Duration>>,
    /// Keep finished jobs in the queue's history (`on`) or not (`off`).
    #[arg(long, value_parser = on_off)]
    history: Option<bool>,
    /// The most finished jobs the history keeps, or `none` for no limit.
    #[arg(long, value_parser = limit)]
    history_max_count: Option<Limit<u64>>,
    /// The oldest a history entry gets (`24h`, `7d`...), or `none` for no limit.
    #[arg(long, value_parser = age)]
    history_max_age: Option<Limit<Duration>>,
    /// How long an entry keeps the job's arguments: `0s` never keeps them,
    /// `none` as long as the entry.
    #[arg(long, value_parser = args_age)]
    history_args_max_age: Option<Limit<Duration>>,
    /// The most of the queue's jobs each worker runs at once, or `none` for
    /// no limit of the queue's own (the worker's concurrency applies). Every
    /// worker follows at once (one that missed the change, within two
    /// minutes).
    #[arg(long, value_parser = per_worker)]
    concurrency: Option<Limit<u32>>,
    /// The most of the queue's jobs running at once across every worker, or
    /// `none` for no such limit. A job's place is held by its lease.
    #[arg(long, value_parser = per_worker)]
    global_concurrency: Option<Limit<u32>>,
    /// The most of the queue's jobs starting in any window of a period
    /// (`50/1s`, `100/1m`, `1000/1h`), across every worker, or `none`.
    #[arg(long, value_parser = rate)]
    rate_limit: Option<RateLimit>,
    /// Removes the stored setting (`dead-letters`, `history`, `concurrency`
    /// or `rate-limit`; again for more): the workers' builder value is
    /// stored again by the first worker that reads the settings (every
    /// worker is told at once), else the built-in default is in force.
    #[arg(long, value_name = "SETTING", value_parser = setting)]
    reset: Vec<Setting>,
}

fn setting(s: &str) -> Result<Setting, String> {
    s.parse().map_err(|e: redjob::Error| e.to_string())
}

fn rate(s: &str) -> Result<RateLimit, String> {
    s.parse().map_err(|e: redjob::Error| e.to_string())
}

fn per_worker(s: &str) -> Result<Limit<u32>, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    match s.parse::<u32>() {
        Ok(n) if (1..=redjob::ops::MAX_CONCURRENCY).contains(&n) => Ok(Limit(Some(n))),
        _ => Err(format!(
            "{s:?}: give a count from 1 to {}, or none",
            redjob::ops::MAX_CONCURRENCY
        )),
    }
}

/// Where a setting in force comes from: who stored it and when, or the
/// default.
fn origin(stored: bool, change: Option<&Change>) -> String {
    match (stored, change) {
        (false, _) => "default".into(),
        (true, None) => "stored with the queue".into(),
        (true, Some(c)) => format!("set by {} {}", c.by, show::when(c.at_ms)),
    }
}

/// Who stored a setting and when, as JSON (null when not recorded).
fn change_json(c: Option<&Change>) -> Value {
    c.map_or(Value::Null, |c| json!({"by": c.by, "at_ms": c.at_ms}))
}

fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: give on or off")),
    }
}

fn args_age(s: &str) -> Result<Limit<Duration>, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    within(s, show::duration(s)?).map(|d| Limit(Some(d)))
}

/// A limit given on the command line: a value, or `none`.
#[derive(Clone, Copy)]
pub struct Limit<T>(Option<T>);

fn limit(s: &str) -> Result<Limit<u64>, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    match s.parse::<u64>() {
        Ok(0) | Err(_) => Err(format!("{s:?}: give a count from 1, or none")),
        Ok(n) if n > MAX_RETAINED => Err(format!(
            "{s:?}: at most {MAX_RETAINED} (the most a queue keeps), or none"
        )),
        Ok(n) => Ok(Limit(Some(n))),
    }
}

/// An age up to [`MAX_RETENTION_AGE`]: a longer one is refused, not cut.
fn within(s: &str, d: Duration) -> Result<Duration, String> {
    if d > MAX_RETENTION_AGE {
        return Err(format!(
            "{s:?}: at most {} (50 years), or none",
            duration_text(MAX_RETENTION_AGE)
        ));
    }
    Ok(d)
}

fn age(s: &str) -> Result<Limit<Duration>, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    match show::duration(s)? {
        d if d.is_zero() => Err(format!("{s:?}: give an age above 0, or none")),
        d => within(s, d).map(|d| Limit(Some(d))),
    }
}

/// The settings in force as JSON: each value, and whether it is stored with
/// the queue or the default.
pub fn json(s: &QueueSettings) -> Value {
    let dead = s.in_force().dead_letters;
    let h = s.in_force().history;
    let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
    let rate = s.in_force().rate_limit;
    json!({
        "dead_letters": {
            "max_count": dead.max_count,
            "max_age_ms": ms(dead.max_age),
            "stored": s.dead_letters.is_some(),
            "set_by": change_json(s.set_by.dead_letters.as_ref()),
        },
        "history": {
            "enabled": h.enabled,
            "max_count": h.max_count,
            "max_age_ms": ms(h.max_age),
            "args_max_age_ms": ms(h.args_max_age),
            "stored": s.history.is_some(),
            "set_by": change_json(s.set_by.history.as_ref()),
        },
        "concurrency": {
            "per_worker": s.in_force().concurrency.per_worker,
            "global": s.in_force().concurrency.global,
            "stored": s.concurrency.is_some(),
            "set_by": change_json(s.set_by.concurrency.as_ref()),
        },
        "rate_limit": {
            "max": rate.is_limited().then_some(rate.max),
            "period_ms": rate.is_limited().then_some(rate.period.as_millis() as u64),
            "stored": s.rate_limit.is_some(),
            "set_by": change_json(s.set_by.rate_limit.as_ref()),
        }
    })
}

/// The settings in force as lines of text.
pub fn lines(s: &QueueSettings) -> Vec<String> {
    let dead = s.in_force().dead_letters;
    let from = origin(s.dead_letters.is_some(), s.set_by.dead_letters.as_ref());
    let count = dead.max_count.map_or("none".into(), |n| n.to_string());
    let age = dead.max_age.map_or("none".into(), duration_text);
    let h = s.in_force().history;
    let hfrom = origin(s.history.is_some(), s.set_by.history.as_ref());
    let cfrom = origin(s.concurrency.is_some(), s.set_by.concurrency.as_ref());
    let per_worker = s
        .in_force()
        .concurrency
        .per_worker
        .map_or("none".into(), |n| n.to_string());
    let global = s
        .in_force()
        .concurrency
        .global
        .map_or("none".into(), |n| n.to_string());
    let rate = s.in_force().rate_limit.to_string();
    let rfrom = origin(s.rate_limit.is_some(), s.set_by.rate_limit.as_ref());
    let on = if h.enabled { "on" } else { "off" };
    let hcount = h.max_count.map_or("none".into(), |n| n.to_string());
    let hage = h.max_age.map_or("none".into(), duration_text);
    let args = h
        .args_max_age
        .map_or("as long as the entry".into(), duration_text);
    let rows = [
        ("dead letters: at most", count, &from),
        ("dead letters: for", age, &from),
        ("history", on.to_string(), &hfrom),
        ("history: at most", hcount, &hfrom),
        ("history: for", hage, &hfrom),
        ("history: arguments for", args, &hfrom),
        ("concurrency per worker", per_worker, &cfrom),
        ("concurrency, all workers", global, &cfrom),
        ("rate limit", rate, &rfrom),
    ];
    // the values in one column, as wide as the widest and two spaces
    let width = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0) + 2;
    rows.iter()
        .map(|(label, value, from)| format!("{label:<LABEL$}{value:<width$}{from}"))
        .collect()
}

/// The width of the labels' column of [`lines`] and [`usage_lines`]: the
/// longest, "concurrency, all workers", and two spaces.
const LABEL: usize = 26;

pub async fn settings(ctx: &Ctx, args: SettingsArgs) -> Outcome {
    let c = &ctx.client;
    // the fields given alone: the others are kept as stored, in the same
    // step (a read here and a write of the whole would put back a field
    // another operator changed in between); every setting given in one
    // call, one operator action
    let mut change = QueueSettings::default();
    let dead: Vec<RetentionPart> = [
        args.dead_max_count.map(|l| RetentionPart::MaxCount(l.0)),
        args.dead_max_age.map(|l| RetentionPart::MaxAge(l.0)),
    ]
    .into_iter()
    .flatten()
    .collect();
    change = change.and(QueueSettings::dead_letters_parts(dead));
    let history: Vec<HistoryPart> = [
        args.history.map(HistoryPart::Enabled),
        args.history_max_count.map(|l| HistoryPart::MaxCount(l.0)),
        args.history_max_age.map(|l| HistoryPart::MaxAge(l.0)),
        args.history_args_max_age
            .map(|l| HistoryPart::ArgsMaxAge(l.0)),
    ]
    .into_iter()
    .flatten()
    .collect();
    change = change.and(QueueSettings::history_parts(history));
    // one part given: the other is kept as stored, in the same step
    let concurrency = match (args.concurrency, args.global_concurrency) {
        (Some(Limit(pw)), Some(Limit(g))) => {
            let mut both = Concurrency::UNLIMITED;
            (both.per_worker, both.global) = (pw, g);
            QueueSettings::concurrency(both)
        }
        (Some(Limit(n)), None) => QueueSettings::concurrency_part(ConcurrencyPart::PerWorker, n),
        (None, Some(Limit(n))) => QueueSettings::concurrency_part(ConcurrencyPart::Global, n),
        (None, None) => QueueSettings::default(),
    };
    change = change.and(concurrency);
    if let Some(r) = args.rate_limit {
        change = change.and(QueueSettings::rate_limit(r));
    }
    for setting in &args.reset {
        let given = match setting {
            Setting::DeadLetters => args.dead_max_count.is_some() || args.dead_max_age.is_some(),
            Setting::History => {
                args.history.is_some()
                    || args.history_max_count.is_some()
                    || args.history_max_age.is_some()
                    || args.history_args_max_age.is_some()
            }
            Setting::Concurrency => args.concurrency.is_some() || args.global_concurrency.is_some(),
            _ => args.rate_limit.is_some(),
        };
        if given {
            return Err(crate::Failure(format!(
                "--reset {setting} and a value of it: give one or the other"
            )));
        }
        change = change.and(QueueSettings::reset(*setting));
    }
    let s = if change.is_empty() {
        c.settings(&args.queue).await?
    } else {
        c.set_settings(&args.queue, &change).await?
    };
    let usage = c.limit_usage(&args.queue).await?;
    if ctx.json {
        let mut v = json(&s);
        v["queue"] = json!(args.queue);
        v["usage"] = usage_json(&usage);
        return show::json(&v);
    }
    for line in lines(&s).into_iter().chain(usage_lines(&usage)) {
        println!("{}", show::escaped(&line));
    }
    Ok(())
}

/// How much of the limits across the fleet is in use, as JSON.
pub fn usage_json(u: &LimitUsage) -> Value {
    json!({
        "in_flight": u.in_flight,
        "started_in_window": u.started_in_window,
        "held_until_ms": u.held_until_ms,
        "throttled_until_ms": u.throttled_until_ms,
    })
}

/// How much of the limits across the fleet is in use, as lines of text (none
/// without such limits).
pub fn usage_lines(u: &LimitUsage) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(g) = u.concurrency.global {
        out.push(format!(
            "{:<LABEL$}{} of {g} running",
            "in use, all workers", u.in_flight
        ));
    }
    if u.rate_limit.is_limited() {
        out.push(format!(
            "{:<LABEL$}{} of {} started in the last {}",
            "in use, rate",
            u.started_in_window,
            u.rate_limit.max,
            duration_text(u.rate_limit.period)
        ));
    }
    if let Some(at) = u.held_until_ms {
        out.push(format!(
            "{:<LABEL$}{}",
            "next start held until",
            show::when(at)
        ));
    }
    if let Some(at) = u.throttled_until_ms {
        out.push(format!("{:<LABEL$}{}", "throttled until", show::when(at)));
    }
    out
}
