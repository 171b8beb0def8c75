//! The POSTed actions: each checks the CSRF token (and read-only mode), acts
//! through redjob's operations API, and redirects to the page it came from
//! with a note of what it did.

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use redjob::JobId;
use redjob::inspect::{Cancelled, Inspect, JobState};
use redjob::ops::{Admin, History, QueueSettings, RateLimit, Retention, Spread};
use redjob::topic::{EventId, Start};

use crate::Ctx;
use crate::ctx::{NOTE_COOKIE, allowed};
use crate::error::{WebError, WebResult};
use crate::fmt::{num, parse_limit};
use crate::layout::seg;
use crate::params::{DeadFilter, parse_id};

/// A form's fields, in order (a name may repeat: the selected ids).
struct Fields(Vec<(String, String)>);

impl Fields {
    /// Whether a field whose name starts with `prefix` was sent.
    fn any(&self, prefix: &str) -> bool {
        self.0.iter().any(|(k, _)| k.starts_with(prefix))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The queue settings' forms whose fields were sent (each form saves
    /// its own; one post saves one).
    fn forms(&self) -> Vec<&'static str> {
        let mut forms = Vec::new();
        if self.get("concurrency").is_some() || self.get("global").is_some() {
            forms.push("concurrency");
        }
        if self.get("rate_limit").is_some() {
            forms.push("rate limit");
        }
        if self.any("history") {
            forms.push("history");
        }
        if self.any("dead_") {
            forms.push("dead-letter");
        }
        forms
    }

    fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The form, once the request may act.
fn checked(ctx: &Ctx, headers: &HeaderMap, body: &Bytes) -> WebResult<Fields> {
    if ctx.read_only {
        return Err(WebError::Forbidden("this dashboard is read-only".into()));
    }
    let fields = Fields(
        serde_urlencoded::from_bytes(body)
            .map_err(|e| WebError::BadRequest(format!("bad form: {e}")))?,
    );
    if !allowed(headers, fields.get("csrf")) {
        return Err(WebError::Forbidden(
            "the form's token does not match this dashboard's cookie, or it came from another site: reload the page and try again".into(),
        ));
    }
    Ok(fields)
}

/// Back to `path` with `note` shown on top (once, through a cookie).
fn back(ctx: &Ctx, path: &str, note: &str) -> Response {
    let mut response = Redirect::to(&ctx.link(path)).into_response();
    let encoded = serde_urlencoded::to_string([("n", note)]).unwrap_or_default();
    ctx.set_cookie(
        &mut response,
        NOTE_COOKIE,
        encoded.strip_prefix("n=").unwrap_or(""),
    );
    response
}

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
    let fields = checked(&ctx, &headers, &body)?;
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
        "settings" if fields.get("concurrency").is_some() || fields.get("global").is_some() => {
            // a field left empty keeps the value in force (the form leaves a
            // value not stored empty, so saving it unchanged stores nothing);
            // `none`: no limit
            let given = |name| fields.get(name).map(str::trim).filter(|v| !v.is_empty());
            let (per_worker, global) = (given("concurrency"), given("global"));
            if per_worker.is_none() && global.is_none() {
                return Ok(back(
                    &ctx,
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
            let given = fields.get("rate_limit").map(str::trim).unwrap_or("");
            if given.is_empty() {
                return Ok(back(
                    &ctx,
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
            // the history's form: a field left out or empty keeps the value
            // in force; `none` is no limit, an arguments' age of 0s keeps none
            let now = c.settings(&queue).await?.in_force().history;
            let bad = |e: String| WebError::BadRequest(e);
            let given = |name| fields.get(name).map(str::trim).filter(|v| !v.is_empty());
            let enabled = match given("history") {
                None => now.enabled,
                Some("on") => true,
                Some("off") => false,
                Some(o) => return Err(bad(format!("{o:?}: give on or off"))),
            };
            let max_count = match given("history_max_count") {
                None => now.max_count,
                Some("none") => None,
                Some(n) => match n.parse::<u64>() {
                    Ok(n) if n > 0 => Some(n),
                    _ => return Err(bad(format!("{n:?}: give a count from 1, or none"))),
                },
            };
            let max_age = match given("history_max_age") {
                None => now.max_age,
                Some(a) => parse_limit(a).map_err(bad)?,
            };
            let args_max_age = match given("history_args_max_age") {
                None => now.args_max_age,
                Some("none") => None,
                Some(a) => Some(redjob::ops::parse_duration(a).map_err(|e| bad(e.to_string()))?),
            };
            let h = History {
                enabled,
                max_count,
                max_age,
                args_max_age,
            };
            // the note says what was stored (an age past 2^52 ms is kept at that)
            let h = c
                .set_settings(&queue, &QueueSettings::history(h))
                .await?
                .history
                .unwrap_or(h);
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
            // a field left out or empty keeps the value in force; `none` is no limit
            let now = c.settings(&queue).await?.in_force().dead_letters;
            let bad = |e: String| WebError::BadRequest(e);
            let given = |name| fields.get(name).map(str::trim).filter(|v| !v.is_empty());
            let count = match given("dead_max_count") {
                None => now.max_count,
                Some("none") => None,
                Some(n) => match n.parse::<u64>() {
                    Ok(n) if n > 0 => Some(n),
                    _ => return Err(bad(format!("{n:?}: give a count from 1, or none"))),
                },
            };
            let age = match given("dead_max_age") {
                None => now.max_age,
                Some(a) => parse_limit(a).map_err(bad)?,
            };
            let dead = Retention {
                max_count: count,
                max_age: age,
            };
            // the note says what was stored (an age past 2^52 ms is kept at that)
            let dead = c
                .set_settings(&queue, &QueueSettings::dead_letters(dead))
                .await?
                .dead_letters
                .unwrap_or(dead);
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
    Ok(back(&ctx, &format!("/queues/{}", seg(&queue)), &note))
}

pub(crate) async fn job(
    ctx: Ctx,
    headers: HeaderMap,
    Path((queue, id, action)): Path<(String, String, String)>,
    body: Bytes,
) -> WebResult<Response> {
    checked(&ctx, &headers, &body)?;
    let c = &ctx.client;
    let id = parse_id(&id)?;
    let qpath = format!("/queues/{}", seg(&queue));
    let jpath = format!("{qpath}/jobs/{id}");
    Ok(match action.as_str() {
        "run-now" => {
            let note = match c.run_now(&queue, &id).await? {
                Some(JobState::Scheduled) => "Due now: the next free worker runs it.",
                Some(JobState::Ready) => "It was due already.",
                Some(JobState::InFlight) => "It is running: left to its lease.",
                Some(JobState::Blocked) => "Due now: it runs once its concurrency key has a place.",
                _ => {
                    return Err(WebError::NotFound(format!(
                        "no job {id} waiting in {queue:?}"
                    )));
                }
            };
            back(&ctx, &jpath, note)
        }
        "cancel" => match c.cancel(&queue, &id).await? {
            Cancelled::Removed => back(&ctx, &qpath, &format!("Job {id} deleted.")),
            Cancelled::Cancelling => back(
                &ctx,
                &qpath,
                &format!("Job {id} deleted: its worker stops it now."),
            ),
            _ => {
                return Err(WebError::NotFound(format!(
                    "no job {id} waiting or running in {queue:?}"
                )));
            }
        },
        "requeue" => match c.requeue_dead(&queue, &[id], Spread::NOW).await? {
            0 if c
                .job(&queue, &id)
                .await?
                .is_some_and(|j| j.state == JobState::Dead) =>
            {
                return Err(WebError::BadRequest(format!(
                    "{id} stays a dead letter: a queued job holds its unique key (or its id is queued already)"
                )));
            }
            0 => {
                return Err(WebError::NotFound(format!(
                    "no dead letter {id} in {queue:?}"
                )));
            }
            _ => back(&ctx, &jpath, "Requeued: back in its queue as a fresh job."),
        },
        "delete" => match c.delete_dead(&queue, &[id]).await? {
            0 => {
                return Err(WebError::NotFound(format!(
                    "no dead letter {id} in {queue:?}"
                )));
            }
            _ => back(
                &ctx,
                &format!("{qpath}/dead"),
                &format!("Dead letter {id} deleted."),
            ),
        },
        "retry" => match c.backend().retry_finished(&queue, &id).await {
            Ok(copy) => back(
                &ctx,
                &format!("{qpath}/jobs/{copy}"),
                &format!("Sent again as {copy}, a copy of {id}."),
            ),
            Err(redjob::Error::InvalidValue { reason, .. }) => {
                return Err(WebError::NotFound(reason));
            }
            Err(e) => return Err(e.into()),
        },
        other => return Err(WebError::NotFound(format!("no job action {other:?}"))),
    })
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

/// A confirmation's cutoff (its hidden `upto`, Unix ms), when it carries one.
fn upto(f: &Fields) -> WebResult<Option<u64>> {
    match f.get("upto").map(str::trim).filter(|u| !u.is_empty()) {
        None => Ok(None),
        Some(u) => u
            .parse()
            .map(Some)
            .map_err(|_| WebError::BadRequest(format!("upto {u:?}: a time in Unix ms"))),
    }
}

pub(crate) async fn dead(
    ctx: Ctx,
    headers: HeaderMap,
    Path((queue, action)): Path<(String, String)>,
    body: Bytes,
) -> WebResult<Response> {
    let f = checked(&ctx, &headers, &body)?;
    let c = &ctx.client;
    let requeue = match action.as_str() {
        "requeue" => true,
        "delete" => false,
        other => {
            return Err(WebError::NotFound(format!(
                "no dead-letter action {other:?}"
            )));
        }
    };
    let rate = match f.get("rate").map(str::trim).filter(|r| !r.is_empty()) {
        None => None,
        Some(r) => Some(r.parse::<u32>().ok().filter(|r| *r > 0).ok_or_else(|| {
            WebError::BadRequest(format!("rate {r:?}: a number of jobs a second, at least 1"))
        })?),
    };
    // ids selected that are no dead letters of this queue, said in the note
    let mut not_dead = Vec::new();
    // letters requeue_dead left dead (a queued job holds their unique key)
    let mut stayed = 0;
    let n = if f.get("all") == Some("1") {
        // in the page's order (newest first unless it listed the oldest
        // first): at a rate, the first requeued is due first
        let filter = DeadFilter {
            job_type: f.get("type").unwrap_or("").into(),
            error: f.get("error").unwrap_or("").into(),
            order: f.get("order").unwrap_or("").into(),
            ..DeadFilter::default()
        };
        let mut q = filter.query();
        // the confirmation's count: the action takes the letters it counted,
        // none that died since
        if let Some(upto) = upto(&f)? {
            q = q.died_by(upto);
        }
        match requeue {
            true => c.requeue_dead_matching(&queue, &q, rate).await?,
            false => c.delete_dead_matching(&queue, &q).await?,
        }
    } else {
        let ids = f
            .all("id")
            .map(parse_id)
            .collect::<Result<Vec<JobId>, _>>()?;
        if ids.is_empty() {
            return Err(WebError::BadRequest("no dead letter selected".into()));
        }
        // which are dead letters of this queue (as `redjob dead requeue`
        // tells them apart): the others, of another queue or not dead, are
        // left alone and named
        let jobs = futures::future::try_join_all(ids.iter().map(|id| c.job(&queue, id))).await?;
        let mut found = Vec::with_capacity(ids.len());
        for (id, job) in ids.iter().zip(jobs) {
            match job {
                Some(j) if j.state == JobState::Dead => found.push(*id),
                _ => not_dead.push(*id),
            }
        }
        match (requeue, found.is_empty()) {
            (_, true) => 0,
            (true, false) => {
                let spread = rate.map_or(Spread::NOW, Spread::per_second);
                let n = c.requeue_dead(&queue, &found, spread).await?;
                stayed = found.len() as u64 - n.min(found.len() as u64);
                n
            }
            (false, false) => c.delete_dead(&queue, &found).await?,
        }
    };
    let verb = if requeue { "Requeued" } else { "Deleted" };
    let mut note = format!("{verb} {} dead letters", num(n));
    if stayed > 0 {
        note += &format!(
            "; {} stayed dead: a queued job holds their unique key (or their id is queued already)",
            num(stayed)
        );
    }
    if !not_dead.is_empty() {
        let ids: Vec<String> = not_dead.iter().map(ToString::to_string).collect();
        let what = match ids.len() {
            1 => "1 id selected is not a dead letter".to_string(),
            n => format!("{} ids selected are not dead letters", num(n as u64)),
        };
        note += &format!("; {what} of {queue:?} (not found): {}", ids.join(", "));
    }
    note.push('.');
    Ok(back(&ctx, &format!("/queues/{}/dead", seg(&queue)), &note))
}

/// A subscriber replays its topic from the beginning, or skips to the end:
/// up to the event its confirmation counted up to, and nothing when it
/// counted none.
pub(crate) async fn rewind(
    ctx: Ctx,
    headers: HeaderMap,
    Path((topic, sub)): Path<(String, String)>,
    body: Bytes,
) -> WebResult<Response> {
    let f = checked(&ctx, &headers, &body)?;
    // a skip stops at the event its confirmation counted up to, when it did
    let upto = match f.get("upto").filter(|u| !u.is_empty()) {
        Some(u) => Some(
            u.parse::<EventId>()
                .map_err(|e| WebError::BadRequest(e.to_string()))?,
        ),
        None => None,
    };
    let c = &ctx.client;
    // whether the backend was asked, and so refused a subscriber gone
    let mut asked = true;
    let what = match (f.get("to"), upto) {
        (Some("beginning"), _) => {
            c.rewind(&topic, &sub, Start::Beginning).await?;
            "replays the topic from its oldest event"
        }
        // up to what was counted, and never back: a subscriber that read
        // past it since stays where it is
        (Some("end"), Some(upto)) => {
            if c.skip_to(&topic, &sub, upto).await? {
                "skipped to the end"
            } else {
                "had read past the end counted, and stays where it is"
            }
        }
        // nothing counted (the topic held no event): nothing to skip, and a
        // skip to the end as it is now would skip events published since
        (Some("end"), None) => {
            asked = false;
            "had no events counted to skip, and stays where it is"
        }
        (other, _) => {
            return Err(WebError::BadRequest(format!(
                "rewind to {other:?}: beginning or end"
            )));
        }
    };
    let s = c
        .topic(&topic)
        .await?
        .and_then(|t| t.subscribers.into_iter().find(|s| s.name == sub));
    if s.is_none() && !asked {
        return Err(redjob::Error::SubscriberNotFound {
            topic,
            subscriber: sub,
        }
        .into());
    }
    let lag = s.map_or(0, |s| s.lag);
    let note = format!("{sub} {what}: {} events to take.", num(lag));
    Ok(back(&ctx, &format!("/topics/{}", seg(&topic)), &note))
}

/// Requeues or deletes a subscriber's dead letters: the selected, or all.
pub(crate) async fn topic_dead(
    ctx: Ctx,
    headers: HeaderMap,
    Path((topic, sub, action)): Path<(String, String, String)>,
    body: Bytes,
) -> WebResult<Response> {
    let f = checked(&ctx, &headers, &body)?;
    let requeue = match action.as_str() {
        "requeue" => true,
        "delete" => false,
        other => {
            return Err(WebError::NotFound(format!(
                "no dead-letter action {other:?}"
            )));
        }
    };
    let c = &ctx.client;
    // 404 when the subscriber does not exist (a delete would count 0, and
    // say it did)
    c.count_dead_events(&topic, &sub).await?;
    // ids selected that are no dead letters of the subscriber, said in the note
    let mut not_dead = Vec::new();
    let n = if f.get("all") == Some("1") {
        // the confirmation's count: up to the newest letter it counted
        // (empty when it counted none: none is taken)
        let upto = match f.get("upto") {
            None => None,
            Some("") => Some(None),
            Some(u) => Some(Some(u.parse::<EventId>().map_err(|_| {
                WebError::BadRequest(format!("{u:?} is not a dead letter's id"))
            })?)),
        };
        match (upto, requeue) {
            (None, true) => c.requeue_all_dead_events(&topic, &sub).await?,
            (None, false) => c.purge_dead_events(&topic, &sub).await?,
            (Some(None), _) => 0,
            (Some(Some(u)), true) => c.requeue_dead_events_upto(&topic, &sub, u).await?,
            (Some(Some(u)), false) => c.delete_dead_events_upto(&topic, &sub, u).await?,
        }
    } else {
        let mut ids = f
            .all("id")
            .map(|i| {
                i.parse::<EventId>()
                    .map_err(|_| WebError::BadRequest(format!("{i:?} is not a dead letter's id")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if ids.is_empty() {
            return Err(WebError::BadRequest("no dead letter selected".into()));
        }
        // oldest first, each once, as the library takes a list
        ids.sort_unstable();
        ids.dedup();
        // one id at a time (as `redjob topic requeue` does): one the action
        // did not take is no dead letter of the subscriber, and is named
        let mut n = 0;
        for id in &ids {
            let one = std::slice::from_ref(id);
            let took = match requeue {
                true => c.requeue_dead_events(&topic, &sub, one).await?,
                false => c.delete_dead_events(&topic, &sub, one).await?,
            };
            if took == 0 {
                not_dead.push(*id);
            }
            n += took;
        }
        n
    };
    let verb = if requeue { "Requeued" } else { "Deleted" };
    let mut note = format!("{verb} {} dead letters", num(n));
    if !not_dead.is_empty() {
        let ids: Vec<String> = not_dead.iter().map(ToString::to_string).collect();
        let what = match ids.len() {
            1 => "1 id selected is not a dead letter".to_string(),
            n => format!("{} ids selected are not dead letters", num(n as u64)),
        };
        note += &format!(
            "; {what} of subscriber {sub:?} of {topic:?} (not found): {}",
            ids.join(", ")
        );
    }
    note.push('.');
    let path = format!("/topics/{}/{}/dead", seg(&topic), seg(&sub));
    Ok(back(&ctx, &path, &note))
}

pub(crate) async fn periodic(
    ctx: Ctx,
    headers: HeaderMap,
    Path(action): Path<String>,
    body: Bytes,
) -> WebResult<Response> {
    let f = checked(&ctx, &headers, &body)?;
    let (queue, name) = (f.get("queue").unwrap_or(""), f.get("name").unwrap_or(""));
    let c = &ctx.client;
    let note = match action.as_str() {
        "run" => {
            let id = c.run_schedule_now(queue, name).await.map_err(|e| match e {
                redjob::Error::InvalidValue { reason, .. } => WebError::NotFound(reason),
                e => e.into(),
            })?;
            format!("Enqueued a run of {name:?} now (job {id}).")
        }
        "pause" => {
            // a name no live worker ticks (a crafted form, a schedule since
            // removed) pauses nothing that runs: say so, as the CLI does
            let live = c.schedules().await?;
            let ticked = live.iter().any(|s| s.queue == queue && s.name == name);
            c.pause_schedule(queue, name).await?;
            if ticked {
                format!("Paused {name:?}: every worker skips its ticks until it is resumed.")
            } else {
                format!(
                    "Paused {name:?}, which no live worker ticks: paused all the same, for workers to come."
                )
            }
        }
        "resume" => {
            if c.resume_schedule(queue, name).await? {
                format!("Resumed {name:?}: its next tick runs.")
            } else {
                format!("{name:?} was not paused: nothing changed.")
            }
        }
        other => return Err(WebError::NotFound(format!("no schedule action {other:?}"))),
    };
    Ok(back(&ctx, "/periodic", &note))
}

/// Quiet, resume or stop a live worker (`id`), through Redis.
pub(crate) async fn worker(
    ctx: Ctx,
    headers: HeaderMap,
    Path(action): Path<String>,
    body: Bytes,
) -> WebResult<Response> {
    use redjob::ops::WorkerControl;
    let f = checked(&ctx, &headers, &body)?;
    let id = f.get("id").unwrap_or("");
    let (control, note) = match action.as_str() {
        "quiet" => (
            Some(WorkerControl::Quiet),
            "Quiet: it takes no more work and finishes what it runs.",
        ),
        "resume" => (None, "Resumed: it takes work again."),
        "stop" => (
            Some(WorkerControl::Stop),
            "Stopping: it finishes what it runs and leaves.",
        ),
        other => return Err(WebError::NotFound(format!("no worker action {other:?}"))),
    };
    if !ctx.client.control_worker(id, control).await? {
        return Err(WebError::NotFound(format!("no live worker {id:?}")));
    }
    let short = id.get(..8).unwrap_or(id);
    Ok(back(&ctx, "/workers", &format!("Worker {short}: {note}")))
}

/// Cancels a batch: it takes no more jobs, and workers cancel its jobs as
/// they fetch them.
pub(crate) async fn batch_cancel(
    ctx: Ctx,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> WebResult<Response> {
    checked(&ctx, &headers, &body)?;
    let id: redjob::ops::BatchId = id
        .parse()
        .map_err(|_| WebError::NotFound(format!("{id:?} is not a batch id")))?;
    if !ctx.client.cancel_batch(&id).await? {
        return Err(WebError::NotFound(format!(
            "batch {id} was not cancelled: unknown, completed, or cancelled already"
        )));
    }
    Ok(back(
        &ctx,
        &format!("/batches/{id}"),
        &format!("Batch {id} cancelled: workers cancel its jobs as they fetch them."),
    ))
}
