//! A queue's actions: pause, resume, unthrottle, purge, its settings' forms,
//! and the overview's form that creates a queue.

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::HeaderMap;
use axum::response::Response;
use redjob::ops::{Admin, HistoryPart, QueueSettings, RateLimit, RetentionPart, Setting};

use super::{back, checked, upto};
use crate::Ctx;
use crate::error::{WebError, WebResult};
use crate::fmt::{num, parse_limit};
use crate::layout::seg;

pub(crate) async fn queue(
    ctx: Ctx,
    headers: HeaderMap,
    Path((queue, action)): Path<(String, String)>,
    body: Bytes,
) -> WebResult<Response> {
    on_queue(ctx, headers, queue, &action, body).await
}

/// The purge (its path also serves its confirmation page).
pub(crate) async fn purge(
    ctx: Ctx,
    headers: HeaderMap,
    Path(queue): Path<String>,
    body: Bytes,
) -> WebResult<Response> {
    on_queue(ctx, headers, queue, "purge", body).await
}

async fn on_queue(
    ctx: Ctx,
    headers: HeaderMap,
    queue: String,
    action: &str,
    body: Bytes,
) -> WebResult<Response> {
    match act(&ctx, &headers, &queue, action, &body).await {
        // a settings form with a value refused: the 400 says why and keeps
        // the form as it was sent, to be corrected and sent again
        Err(WebError::BadRequest(why)) if action == "settings" => {
            let sent: Vec<(String, String)> =
                serde_urlencoded::from_bytes(&body).unwrap_or_default();
            let path = format!("/queues/{}/settings", seg(&queue));
            Err(WebError::BadForm(why, kept_form(&ctx, &path, &sent)))
        }
        r => r,
    }
}

/// The settings form `sent` as it was sent, to be corrected and sent again
/// (with this page's token).
fn kept_form(ctx: &Ctx, path: &str, sent: &[(String, String)]) -> maud::Markup {
    maud::html! {
        form.inline #kept method="post" action=(ctx.link(path)) {
            (crate::layout::csrf(ctx))
            @for (name, value) in sent {
                @if name == "csrf" {
                } @else if name.ends_with("_was") || name == "reset" {
                    input type="hidden" name=(name) value=(value);
                } @else {
                    label { (name) " " input type="text" name=(name) value=(value) size="10"; }
                    " "
                }
            }
            button type="submit" { "Save" }
        }
    }
}

async fn act(
    ctx: &Ctx,
    headers: &HeaderMap,
    queue: &str,
    action: &str,
    body: &Bytes,
) -> WebResult<Response> {
    let queue = queue.to_string();
    let fields = checked(ctx, headers, body)?;
    let c = &ctx.client;
    let note = match action {
        "pause" => {
            c.pause(&queue).await?;
            "Paused: workers start none of its jobs until it is resumed.".to_string()
        }
        "resume" => {
            c.resume(&queue).await?;
            "Resumed.".to_string()
        }
        "unthrottle" => {
            if c.end_throttle(&queue).await? {
                "Throttle ended: workers start its jobs again (a pause stays).".to_string()
            } else {
                "It was not throttled.".to_string()
            }
        }
        "purge" => {
            // the confirmation's count: the jobs sent by then, none sent since
            let n = match upto(&fields)? {
                Some(upto) => c.purge_queue_upto(&queue, upto).await?,
                None => c.purge_queue(&queue).await?,
            };
            format!("Deleted {} jobs.", num(n))
        }
        "settings" if fields.forms().len() > 1 => {
            return Err(WebError::BadRequest(format!(
                "send one form at a time: this has {} fields",
                fields.forms().join(" and ")
            )));
        }
        "settings" if fields.get("reset").is_some() => {
            // the stored setting removed: a worker's builder value is stored
            // again by the first worker that reads it (every worker is told
            // at once), else the default is in force
            let setting: Setting = fields
                .get("reset")
                .unwrap_or("")
                .parse()
                .map_err(|e: redjob::Error| WebError::BadRequest(e.to_string()))?;
            c.set_settings(&queue, &QueueSettings::reset(setting))
                .await?;
            format!(
                "Reset: the {} is stored no more; the workers' own value (stored again by the first worker that reads it), else the default, is in force.",
                match setting {
                    Setting::DeadLetters => "dead-letter retention",
                    Setting::History => "history retention",
                    Setting::Concurrency => "concurrency",
                    _ => "rate limit",
                }
            )
        }
        "settings" if fields.get("concurrency").is_some() || fields.get("global").is_some() => {
            // a field left empty keeps the value in force (the form leaves a
            // value not stored empty, so saving it unchanged stores nothing),
            // as does one sent as the page showed it (`<name>_was`: the part
            // stays as stored now, which another operator may have changed
            // since); `none`: no limit
            let (per_worker, global) = (fields.changed("concurrency"), fields.changed("global"));
            if per_worker.is_none() && global.is_none() {
                return Ok(back(
                    ctx,
                    &format!("/queues/{}", seg(&queue)),
                    "Nothing changed.",
                ));
            }
            let count = |v: &str| match v {
                "none" => Ok(None),
                n => match n.parse::<u32>() {
                    Ok(n) if (1..=redjob::ops::MAX_CONCURRENCY).contains(&n) => Ok(Some(n)),
                    _ => Err(WebError::BadRequest(format!(
                        "{n:?}: give a count from 1 to {}, or none",
                        redjob::ops::MAX_CONCURRENCY
                    ))),
                },
            };
            // one field given: the other part is kept as stored, in the
            // same step (a read here and a write of both would put back a
            // part another operator changed in between)
            let change = match (
                per_worker.map(count).transpose()?,
                global.map(count).transpose()?,
            ) {
                (Some(pw), Some(g)) => {
                    let mut both = redjob::ops::Concurrency::UNLIMITED;
                    (both.per_worker, both.global) = (pw, g);
                    QueueSettings::concurrency(both)
                }
                (Some(n), None) => {
                    QueueSettings::concurrency_part(redjob::ops::ConcurrencyPart::PerWorker, n)
                }
                // (neither given: answered above)
                (None, n) => QueueSettings::concurrency_part(
                    redjob::ops::ConcurrencyPart::Global,
                    n.flatten(),
                ),
            };
            let limit = c
                .set_settings(&queue, &change)
                .await?
                .in_force()
                .concurrency;
            let text = |n: Option<u32>| n.map_or("no limit".into(), |n| n.to_string());
            format!(
                "Saved: at most {} at once in each worker, {} across all workers; every worker follows at once.",
                text(limit.per_worker),
                text(limit.global)
            )
        }
        "settings" if fields.get("rate_limit").is_some() => {
            // left empty, or sent as the page showed it (`rate_limit_was`):
            // left as stored now, which another operator may have changed
            // since the page was read
            let given = fields.changed("rate_limit").unwrap_or("");
            if given.is_empty() {
                return Ok(back(
                    ctx,
                    &format!("/queues/{}", seg(&queue)),
                    "Nothing changed.",
                ));
            }
            let rate: RateLimit = given
                .parse()
                .map_err(|e: redjob::Error| WebError::BadRequest(e.to_string()))?;
            c.set_settings(&queue, &QueueSettings::rate_limit(rate))
                .await?;
            format!("Saved: rate limit {rate} across all workers.")
        }
        "settings" if fields.any("history") => {
            // the history's form: a field left out, empty or sent as the
            // page showed it is left as stored when the change lands (which
            // another operator may have changed since the page was read): the
            // fields changed alone are stored, in one step with that read;
            // `none` is no limit, an arguments' age of 0s keeps none
            let given = |name: &str| fields.changed(name);
            let bad = |e: String| WebError::BadRequest(e);
            let mut parts = Vec::new();
            match given("history") {
                None => {}
                Some("on") => parts.push(HistoryPart::Enabled(true)),
                Some("off") => parts.push(HistoryPart::Enabled(false)),
                Some(o) => return Err(bad(format!("{o:?}: give on or off"))),
            }
            if let Some(n) = given("history_max_count") {
                parts.push(HistoryPart::MaxCount(count(n).map_err(bad)?));
            }
            if let Some(a) = given("history_max_age") {
                parts.push(HistoryPart::MaxAge(parse_limit(a).map_err(bad)?));
            }
            match given("history_args_max_age") {
                None => {}
                Some("none") => parts.push(HistoryPart::ArgsMaxAge(None)),
                Some(a) => parts.push(HistoryPart::ArgsMaxAge(Some(
                    redjob::ops::parse_duration(a).map_err(|e| bad(e.to_string()))?,
                ))),
            }
            if parts.is_empty() {
                return Ok(back(
                    ctx,
                    &format!("/queues/{}", seg(&queue)),
                    "Nothing changed.",
                ));
            }
            // the note says what is stored now (an age past 2^52 ms is kept
            // at that)
            let h = c
                .set_settings(&queue, &QueueSettings::history_parts(parts))
                .await?
                .in_force()
                .history;
            let text = |d: Option<std::time::Duration>| {
                d.map_or("none".into(), redjob::ops::duration_text)
            };
            format!(
                "Saved: history {}, at most {}, for {}, arguments for {}, for every worker.",
                if h.enabled { "on" } else { "off" },
                h.max_count.map_or("none".into(), num),
                text(h.max_age),
                text(h.args_max_age)
            )
        }
        "settings" if fields.any("dead_") => {
            // a field left out, empty or sent as the page showed it is left
            // as stored when the change lands, as in the history's form;
            // `none` is no limit
            let given = |name: &str| fields.changed(name);
            let bad = |e: String| WebError::BadRequest(e);
            let mut parts = Vec::new();
            if let Some(n) = given("dead_max_count") {
                parts.push(RetentionPart::MaxCount(count(n).map_err(bad)?));
            }
            if let Some(a) = given("dead_max_age") {
                parts.push(RetentionPart::MaxAge(parse_limit(a).map_err(bad)?));
            }
            if parts.is_empty() {
                return Ok(back(
                    ctx,
                    &format!("/queues/{}", seg(&queue)),
                    "Nothing changed.",
                ));
            }
            // the note says what is stored now (an age past 2^52 ms is kept
            // at that)
            let dead = c
                .set_settings(&queue, &QueueSettings::dead_letters_parts(parts))
                .await?
                .in_force()
                .dead_letters;
            format!(
                "Saved: dead letters at most {}, for {}, for every worker.",
                dead.max_count.map_or("none".into(), num),
                dead.max_age
                    .map_or("none".into(), redjob::ops::duration_text)
            )
        }
        "settings" => {
            return Err(WebError::BadRequest(
                "no setting given: send concurrency, global, rate_limit, history… or dead_… fields"
                    .into(),
            ));
        }
        other => return Err(WebError::NotFound(format!("no queue action {other:?}"))),
    };
    Ok(back(ctx, &format!("/queues/{}", seg(&queue)), &note))
}

/// Creates a queue from the overview's form: its name, visibility timeout,
/// delay (durations such as `30s`) and largest body (bytes, or -1).
pub(crate) async fn create_queue(ctx: Ctx, headers: HeaderMap, body: Bytes) -> WebResult<Response> {
    let f = checked(&ctx, &headers, &body)?;
    let bad = |e: String| WebError::BadRequest(e);
    let name = f.get("name").map(str::trim).unwrap_or("");
    let secs = |field: &str, default: u64| -> WebResult<u64> {
        match f.get(field).map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(default),
            Some(v) => match redjob::ops::parse_duration(v) {
                // RSMQ keeps whole seconds: 1500ms is refused, not cut to 1s
                Ok(d) if d.subsec_nanos() == 0 => Ok(d.as_secs()),
                Ok(_) => Err(bad(format!(
                    "{field}: {v:?}: a queue keeps whole seconds (give 1s, 2s, 1m…)"
                ))),
                Err(e) => Err(bad(format!("{field}: {e}"))),
            },
        }
    };
    let maxsize = match f.get("maxsize").map(str::trim).filter(|v| !v.is_empty()) {
        None => 65536,
        Some(v) => v
            .parse::<i64>()
            .map_err(|_| bad(format!("max size {v:?}: bytes, 1024 to 65536, or -1")))?,
    };
    let opts = redjob::queue::QueueOptions {
        vt: secs("vt", 30)?,
        delay: secs("delay", 0)?,
        maxsize,
    };
    redjob::queue::Queues::create_queue(ctx.client.queues(), name, opts).await?;
    Ok(back(
        &ctx,
        &format!("/queues/{}", seg(name)),
        &format!("Created queue {name:?}."),
    ))
}

/// A retention's count from a form: a count from 1, or `none` for no limit.
fn count(n: &str) -> Result<Option<u64>, String> {
    match n {
        "none" => Ok(None),
        n => match n.parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(format!("{n:?}: give a count from 1, or none")),
        },
    }
}
