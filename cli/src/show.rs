//! Output: aligned tables, jobs as rows or JSON, times relative to now, and
//! the confirmation of destructive commands.

use std::borrow::Cow;
use std::io::{BufRead, IsTerminal, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redjob::inspect::{Attempt, JobInfo, JobState, MAX_PAGE, Page};
use redjob::ops::Unserved;
use serde_json::{Value, json};

use crate::{Ctx, Failure, Outcome};

/// The longest cell a table prints whole, in characters, unless --wide.
pub const CELL: usize = 48;

static WIDE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// --wide: tables print every cell whole.
pub fn set_wide(wide: bool) {
    WIDE.store(wide, std::sync::atomic::Ordering::Relaxed);
}

/// `cell` cut to [`CELL`] characters, its last one `…`, unless --wide (a
/// legal queue name has up to 160 characters: whole, it pushes every other
/// column off the screen).
pub fn cut(cell: &str) -> Cow<'_, str> {
    if WIDE.load(std::sync::atomic::Ordering::Relaxed) || cell.chars().count() <= CELL {
        return cell.into();
    }
    let kept: String = cell.chars().take(CELL - 1).collect();
    format!("{kept}…").into()
}

/// `text` (from Redis: a job's type, an error, a body) as a terminal may show
/// it: each control character escaped as Rust's `escape_debug` would (`\n`,
/// `\r`, `\t`, `\0`; `\x1b` for the other ASCII ones, `\u{9b}` beyond), as
/// are the marks that reorder bidirectional text (U+202E...), so an escape
/// sequence in it neither retitles the window nor clears the screen, and a
/// newline does not break a table's row. Everything else, quotes, backslashes
/// and letters of any script, is kept as it is.
pub fn escaped(text: &str) -> Cow<'_, str> {
    fn escape(c: char) -> bool {
        c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }
    if !text.chars().any(escape) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if escape(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    out.into()
}

/// [`escaped`] line by line: `text`'s line breaks kept (a pretty-printed
/// body, an error of several lines), every other control character escaped.
pub fn escaped_lines(text: &str) -> String {
    text.split('\n').map(escaped).collect::<Vec<_>>().join("\n")
}

/// Prints `rows` under `head` with columns padded to their widest cell, each
/// cell [`escaped`] and [`cut`] short.
pub fn table(head: &[&str], rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| cut(&escaped(c)).into_owned()).collect())
        .collect();
    let rows = rows.as_slice();
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(head.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// Prints `v` as pretty JSON.
pub fn json(v: &Value) -> Outcome {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Unix ms now, by this machine's clock (for display only).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A wait in ms as people read it: `850ms`, `12.5s`, `3m 20s`, `2h 5m`.
pub fn wait(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m {}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h {}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// The UTC hour `ms` (Unix) falls in, as `2026-11-26 19:00`.
pub fn hour_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, hour) = (secs / 86_400, secs % 86_400 / 3600);
    let (y, m, d) = civil(days as i64);
    format!("{y:04}-{m:02}-{d:02} {hour:02}:00")
}

/// The proleptic Gregorian date of a count of days since 1970-01-01 (the
/// days-to-civil arithmetic on 400-year eras of 146,097 days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `ms` (Unix) relative to now: "in 5s", "3m ago", "now".
pub fn when(ms: u64) -> String {
    let now = now_ms();
    let (d, future) = if ms > now {
        (ms - now, true)
    } else {
        (now - ms, false)
    };
    if d < 1000 {
        return "now".into();
    }
    let s = d / 1000;
    let text = match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    };
    if future {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// A job as JSON: its args parsed when the body is an envelope, else the body
/// as text.
pub fn job_json(j: &JobInfo) -> Value {
    let mut v = json!({
        "id": j.id.to_string(),
        "state": j.state.as_str(),
        "priority": j.priority,
        "attempts": j.attempts,
        "due_ms": j.due_ms,
        "type": j.job_name(),
        "last_error": j.last_error,
    });
    if let Some(f) = &j.finished {
        v["finished"] = json!({"how": f.how.as_str(), "at_ms": f.at_ms, "by": f.by});
    }
    if let Some(old) = j.retry_of() {
        v["retry_of"] = old.to_string().into();
    }
    if let Some(k) = &j.key {
        v["concurrency_key"] = json!({"key": k.key, "per_key": k.per_key});
    }
    match j.args() {
        Ok(args) => v["args"] = args,
        Err(_) => v["body"] = String::from_utf8_lossy(&j.body).into(),
    }
    v
}

/// A job as a table row: id, state, priority, attempts, when (due, or died),
/// type, last error (cut to one short line).
pub fn job_row(j: &JobInfo) -> Vec<String> {
    let mut err = escaped(j.last_error.as_deref().unwrap_or("")).into_owned();
    if err.chars().count() > 60 {
        err = format!("{}…", err.chars().take(59).collect::<String>());
    }
    vec![
        j.id.to_string(),
        // a finished job: how it finished; a blocked one: its key
        match (&j.finished, &j.key) {
            (Some(f), _) => f.how.as_str().into(),
            (None, Some(k)) if j.state == JobState::Blocked => format!("blocked by {:?}", k.key),
            _ => j.state.as_str().into(),
        },
        j.priority.to_string(),
        j.attempts.to_string(),
        when(j.due_ms),
        j.job_name().unwrap_or_else(|| "?".into()),
        err,
    ]
}

pub const JOB_HEAD: [&str; 7] = [
    "ID",
    "STATE",
    "PRIO",
    "ATTEMPTS",
    "WHEN",
    "TYPE",
    "LAST ERROR",
];

/// Prints a page of jobs, then how to get the next one.
pub fn page(ctx: &Ctx, page: &Page, more: &str) -> Outcome {
    if ctx.json {
        let jobs: Vec<Value> = page.jobs.iter().map(job_json).collect();
        let next = page.next.as_ref().map(|c| c.to_string());
        return json(&json!({ "jobs": jobs, "next": next }));
    }
    let rows: Vec<Vec<String>> = page.jobs.iter().map(job_row).collect();
    table(&JOB_HEAD, &rows);
    if let Some(c) = &page.next {
        println!("\nmore: {more} --after {c}");
    }
    Ok(())
}

/// One job in full: its fields, then its body (pretty when JSON); `unserved`
/// when it waits for a worker that knows its type.
pub fn job(ctx: &Ctx, queue: &str, j: &JobInfo, unserved: Option<Unserved>) -> Outcome {
    let name = j.job_name().unwrap_or_else(|| "?".into());
    if ctx.json {
        let mut v = job_json(j);
        v["queue"] = queue.into();
        v["runs"] = j.runs.iter().map(attempt_json).collect();
        if let Some(b) = &j.waits_for {
            v["waits_for"] = b.to_string().into();
        }
        if let Some(r) = j.batch() {
            v["batch"] = json!({"id": r.batch.to_string(), "index": r.index});
        }
        if let Some(u) = unserved {
            v["waiting_for_worker"] =
                json!({"type": name, "since_ms": u.since_ms, "dead_at_ms": u.dead_at_ms});
        }
        return json(&v);
    }
    let rows = [
        ("id", j.id.to_string()),
        ("queue", queue.to_string()),
        ("state", j.state.as_str().into()),
        ("type", j.job_name().unwrap_or_else(|| "?".into())),
        ("priority", j.priority.to_string()),
        ("attempts", j.attempts.to_string()),
        ("when", format!("{} ({} ms)", when(j.due_ms), j.due_ms)),
        ("last error", j.last_error.clone().unwrap_or_default()),
    ];
    for (k, v) in rows {
        println!("{k:<11}{}", escaped(&v));
    }
    if let Some(u) = unserved {
        println!("{:<11}{}", "waiting", unserved_text(&name, &u));
    }
    if let Some(k) = &j.key {
        println!("{:<11}{:?} ({} at a time)", "key", k.key, k.per_key);
    }
    if let Some(b) = &j.waits_for {
        println!("{:<11}the jobs of batch {b} (its children)", "waits for");
    }
    if let Some(r) = j.batch() {
        println!("{:<11}{} (job {})", "batch", r.batch, r.index);
    }
    if let Some(f) = &j.finished {
        let by =
            f.by.as_deref()
                .map_or(String::new(), |b| format!(" by {}", escaped(b)));
        println!(
            "{:<11}{} {} ({} ms){by}",
            "finished",
            f.how.as_str(),
            when(f.at_ms),
            f.at_ms
        );
    }
    if !j.runs.is_empty() {
        println!("runs:");
        runs(&j.runs);
    }
    // JSON: its lines kept (its strings escape C0 controls, not DEL or C1);
    // any other body on one line
    let body = match serde_json::from_slice::<Value>(&j.body) {
        Ok(v) => escaped_lines(&serde_json::to_string_pretty(&v)?),
        Err(_) => escaped(&String::from_utf8_lossy(&j.body)).into_owned(),
    };
    println!("body:\n{body}");
    Ok(())
}

/// Prints attempts, one line each, with its error (indented) below.
pub fn runs(runs: &[Attempt]) {
    for a in runs {
        println!("{}", attempt_line(a));
        if let Some(e) = &a.error {
            println!("      {}", escaped_lines(e).replace('\n', "\n      "));
        }
    }
}

/// An attempt as JSON: its stored fields, with its duration.
pub fn attempt_json(a: &Attempt) -> Value {
    json!({
        "n": a.number,
        "outcome": a.outcome.as_str(),
        "started_ms": a.started_ms,
        "ended_ms": a.ended_ms,
        "duration_ms": a.duration().map(|d| d.as_millis() as u64),
        "lease_end_ms": a.lease_end_ms,
        "error": a.error,
        "worker": a.worker,
        "host": a.host,
    })
}

/// An attempt on one line: number, when, how long, outcome, where; what is not
/// known said so.
pub fn attempt_line(a: &Attempt) -> String {
    let at = match (a.started_ms, a.lease_end_ms) {
        (Some(s), _) => when(s),
        (None, Some(l)) => format!("lease ran out {}", when(l)),
        (None, None) => "started: unknown".into(),
    };
    let took = a
        .duration()
        .map_or_else(|| "took ?".into(), |d| format!("took {d:.1?}"));
    let place = match (&a.worker, &a.host) {
        (Some(w), Some(h)) => format!("worker {} on {}", escaped(w), escaped(h)),
        (Some(w), None) => format!("worker {}", escaped(w)),
        _ => "worker unknown".into(),
    };
    format!(
        "  #{:<3} {:<10} {at}  {took}  {place}",
        a.number,
        a.outcome.as_str()
    )
}

/// `--yes` and `--dry-run` of a bulk action, which counts what it takes first.
#[derive(clap::Args, Clone, Copy)]
pub struct Confirm {
    /// Do not ask (it says how many it takes first).
    #[arg(long)]
    pub yes: bool,
    /// Say what it would do (with how many), and do nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl Confirm {
    /// Says `what` (with its count) and asks, unless --yes: true to go on.
    /// With --dry-run, prints it (`v`, with `"dry_run": true`, in --json) and
    /// returns false.
    pub fn ask(&self, ctx: &Ctx, what: &str, mut v: Value) -> Result<bool, Failure> {
        if self.dry_run {
            v["dry_run"] = json!(true);
            if ctx.json {
                json(&v)?;
            } else {
                println!("would {what}");
            }
            return Ok(false);
        }
        confirm(self.yes, what)?;
        Ok(true)
    }
}

/// "1 dead letter", "3 dead letters": `n` and the noun for it.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// "waiting for a worker that knows `t` since …, dead-lettered at …".
pub fn unserved_text(name: &str, u: &Unserved) -> String {
    let mut s = format!(
        "for a worker that knows `{}` since {}",
        escaped(name),
        when(u.since_ms)
    );
    match u.dead_at_ms {
        Some(at) => s += &format!(", dead-lettered {} ({at} ms) unless one comes", when(at)),
        None => s += "; no live worker serves its queue",
    }
    s
}

/// Asks before a destructive bulk action, unless `yes`. Without a terminal to
/// ask on, refuses: a script must say --yes.
pub fn confirm(yes: bool, what: &str) -> Outcome {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure(format!(
            "{what}: refused without --yes (no terminal to confirm on)"
        )));
    }
    eprint!("{what}? type yes to go on: ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    if answer.trim() == "yes" {
        Ok(())
    } else {
        Err(Failure("cancelled".into()))
    }
}

/// A duration such as `500ms`, `10s`, `5m`, `2h`, `1d` (`redjob::ops::parse_duration`'s
/// form), as clap's value parser takes it.
pub fn duration(s: &str) -> Result<Duration, String> {
    redjob::ops::parse_duration(s).map_err(|e| e.to_string())
}

/// A duration in whole seconds (a queue's visibility timeout and delay, which
/// RSMQ keeps in seconds): `1500ms` is refused rather than cut to 1 s.
pub fn whole_seconds(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.subsec_nanos() != 0 {
        return Err(format!(
            "{s:?}: a queue keeps whole seconds (give 1s, 2s, 1m…)"
        ));
    }
    Ok(d)
}

/// A page size, 1 to [`MAX_PAGE`] (1000), as clap parses it: out of range is
/// a usage error naming the range, before anything is read.
pub fn page_size() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_PAGE as u64)
}

/// The time between two refreshes: at least 100 ms.
pub fn refresh(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d < Duration::from_millis(100) {
        return Err(format!("{s:?}: refresh at most every 100ms"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped_and_nothing_else() {
        use super::escaped;
        for plain in ["Été 日本 naïve", r#"C:\dir "quoted" 'it'"#, ""] {
            assert_eq!(escaped(plain), plain);
        }
        assert_eq!(
            escaped("a\u{1b}[2J\u{7}\n\r\t\0\u{7f}\u{9b}\u{202e}z"),
            r"a\x1b[2J\x07\n\r\t\0\x7f\u{9b}\u{202e}z"
        );
        assert_eq!(super::escaped_lines("a\u{1b}\nb\r"), "a\\x1b\nb\\r");
    }

    #[test]
    fn hours_print_as_utc_dates() {
        assert_eq!(super::hour_utc(0), "1970-01-01 00:00");
        assert_eq!(
            super::hour_utc(951_782_400_000 + 3_600_000),
            "2000-02-29 01:00"
        );
        assert_eq!(super::hour_utc(1_795_719_600_000), "2026-11-26 19:00");
        assert_eq!(super::hour_utc(1_798_761_599_000), "2026-12-31 23:00");
    }
}
