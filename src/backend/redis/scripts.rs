//! Every Lua script (`lua/*.lua`, each with what it uses of `lua/lib.lua`
//! prepended) and the one path that calls them.

use std::sync::LazyLock;

use crate::backend::redis::connection::Connection;
use crate::backend::redis::packed::Args;
use redis::{Cmd, ErrorKind, Pipeline, Script, ServerErrorKind, Value};

use crate::{Error, Result};

macro_rules! scripts {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(&with_lib(include_str!(concat!("lua/", $file)))));)*

        /// Every script: its file, its own text (without lib.lua) and the script.
        static ALL: &[(&str, &str, &LazyLock<Script>)] = &[
            $(($file, include_str!(concat!("lua/", $file)), &$name),)*
        ];
    };
}

const LIB: &str = include_str!("lua/lib.lua");

/// A script's source as loaded: lib.lua, then the script. Of lib.lua's
/// functions, only those the script calls (directly or through another) are
/// kept; the others' lines are left empty, so that every line keeps its number
/// (an error names a line of the whole) while a call no longer creates a
/// closure for each of lib.lua's functions (a cost Redis pays on every call,
/// since it runs the whole chunk: about 1.8 µs on Redis 8.6 when all were
/// kept). Constants and comments stay.
pub(crate) fn with_lib(body: &str) -> String {
    let lines: Vec<&str> = LIB.lines().collect();
    // each top-level function: its name and first and last lines
    let mut defs: Vec<(&str, usize, usize)> = Vec::new();
    let mut open: Option<(&str, usize)> = None;
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = line.strip_prefix("local function ") {
            let name = rest.split('(').next().unwrap_or(rest).trim();
            open = Some((name, i));
        } else if *line == "end"
            && let Some((name, first)) = open.take()
        {
            defs.push((name, first, i));
        }
    }
    // the words of the code, not of its comments: a function a comment names
    // is not kept for it
    let words = |text: &str| -> Vec<String> {
        text.lines()
            .flat_map(|line| {
                code_of(line)
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
                    .map(String::from)
            })
            .collect()
    };
    let mut keep = vec![false; defs.len()];
    let mut todo = words(body);
    while let Some(word) = todo.pop() {
        for (k, (name, first, last)) in defs.iter().enumerate() {
            if !keep[k] && *name == word {
                keep[k] = true;
                // the function's own text (its first line after the name)
                let own = lines[*first + 1..=*last].join("\n");
                todo.extend(words(&own));
            }
        }
    }
    let mut out = String::with_capacity(LIB.len() + body.len());
    let mut next = 0;
    for (k, (_, first, last)) in defs.iter().enumerate() {
        if keep[k] {
            continue;
        }
        for line in &lines[next..*first] {
            out.push_str(line);
            out.push('\n');
        }
        for _ in *first..=*last {
            out.push('\n');
        }
        next = last + 1;
    }
    for line in &lines[next..] {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(body);
    out
}

/// A line of Lua without its comment (from a `--` outside a quoted string).
pub(crate) fn code_of(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut quote = None;
    let mut i = 0;
    while i < bytes.len() {
        match (quote, bytes[i]) {
            (Some(_), b'\\') => i += 1,
            (Some(q), c) if c == q => quote = None,
            (None, b'"' | b'\'') => quote = Some(bytes[i]),
            (None, b'-') if bytes.get(i + 1) == Some(&b'-') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

scripts! {
    SEND => "send.lua",
    SEND_KEYED => "send_keyed.lua",
    KEYS => "keys.lua",
    RECEIVE => "receive.lua",
    POP => "pop.lua",
    VISIBILITY => "visibility.lua",
    DELETE => "delete.lua",
    CREATE => "create.lua",
    ADOPT => "adopt.lua",
    ATTRIBUTES => "attributes.lua",
    SET_ATTRIBUTES => "set_attributes.lua",
    FETCH => "fetch.lua",
    RECLAIM => "reclaim.lua",
    WITHDRAW => "withdraw.lua",
    POLL => "poll.lua",
    EXTEND => "extend.lua",
    COMPLETE => "complete.lua",
    UNIQUE => "unique.lua",
    UNIQUE_START => "unique_start.lua",
    COUNTS => "counts.lua",
    LATENCY => "latency.lua",
    JOB => "job.lua",
    LIST => "list.lua",
    AWAIT => "await.lua",
    BATCH_OPEN => "batch_open.lua",
    BATCH => "batch.lua",
    BATCH_ADD => "batch_add.lua",
    CANCEL_LIST => "cancel_list.lua",
    BOUT => "bout.lua",
    FLOW_FAIL => "flow_fail.lua",
    FLOW_WAIT => "flow_wait.lua",
    DEP => "dep.lua",
    MARKS => "marks.lua",
    BLOCKED => "blocked.lua",
    PEEK => "peek.lua",
    CANCEL => "cancel.lua",
    PAUSE => "pause.lua",
    SETTINGS => "settings.lua",
    LIMITS => "limits.lua",
    HELD => "held.lua",
    DEAD => "dead.lua",
    HISTORY => "history.lua",
    HISTORY_EVENT => "history_event.lua",
    DEAD_REQUEUE => "dead_requeue.lua",
    DEAD_DELETE => "dead_delete.lua",
    PURGE => "purge.lua",
    PERIODIC => "periodic.lua",
    SCHEDULE => "schedule.lua",
    WORKERS => "workers.lua",
    RUN_NOW => "run_now.lua",
    TOPIC_PUBLISH => "topic_publish.lua",
    TOPIC_GROUP => "topic_group.lua",
    TOPIC_CLAIM => "topic_claim.lua",
    TOPIC_RENEW => "topic_renew.lua",
    TOPIC_READ_EPOCH => "topic_read_epoch.lua",
    TOPIC_SETTLE => "topic_settle.lua",
    TOPIC_INFO => "topic_info.lua",
    TOPIC_REQUEUE => "topic_requeue.lua",
    TOPIC_OWN => "topic_own.lua",
}

/// What a script refused by the user's ACL tried, from Redis's error text,
/// which gives the script's sha (`script: <sha>,` or `call to f_<sha>`) and
/// line (`@user_script:<line>`) but not the command: the commands that line
/// calls and where, e.g. `HSETNX (create.lua, line 7)`. `None` without a sha
/// (Valkey names the command itself).
pub(crate) fn refused_call(text: &str) -> Option<String> {
    let sha = match text.split_once("call to f_") {
        Some((_, rest)) => rest.split(')').next()?,
        None => text.split_once(" script: ")?.1.split(',').next()?,
    };
    let line: usize = text
        .split_once("@user_script:")
        .or_else(|| text.split_once("@user_function:"))?
        .1
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    // a function's line is its script's plus one (see functions.rs)
    let (file, body, line) = match ALL.iter().find(|(_, _, s)| s.get_hash() == sha) {
        Some((file, body, _)) => (file, body, line),
        None => {
            let f = super::functions::named(sha)?;
            let (file, body, _) = ALL.iter().find(|(file, _, _)| *file == f.file)?;
            (file, body, line.checked_sub(1)?)
        }
    };
    let source = with_lib(body);
    let code = source.lines().nth(line.checked_sub(1)?)?;
    let mut commands = called(code);
    if commands.is_empty() {
        // lib.lua's many(cmd, …): one of the commands the script passes it
        commands = source
            .split("many(\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .map(String::from)
            .collect();
        commands.dedup();
    }
    // lines of the prepended lib.lua are its own
    let lib = LIB.lines().count();
    let (file, line) = match line.checked_sub(lib) {
        Some(n) if n > 0 => (*file, n),
        _ => ("lib.lua", line),
    };
    Some(match commands.as_slice() {
        [] => format!("a command of {file}, line {line}"),
        names => format!("{} ({file}, line {line})", names.join(" or ")),
    })
}

/// The commands a line of Lua calls: for each `call(`, the quoted names before
/// its first argument (both of `a and "X" or "Y"`), with the subcommand of a
/// command that has them (`XGROUP CREATE`).
pub(crate) fn called(code: &str) -> Vec<String> {
    const WITH_SUBCOMMANDS: [&str; 5] = ["XGROUP", "XINFO", "MEMORY", "SCRIPT", "CLIENT"];
    let mut out = Vec::new();
    for (i, _) in code.match_indices("call(") {
        let rest = &code[i + "call(".len()..];
        let head = rest.split(',').next().unwrap_or(rest);
        let names: Vec<&str> = head.split('"').skip(1).step_by(2).collect();
        match names.as_slice() {
            [name] if WITH_SUBCOMMANDS.contains(name) => {
                let sub = rest[head.len()..].split('"').nth(1).unwrap_or_default();
                out.push(format!("{name} {sub}").trim_end().to_string());
            }
            names => out.extend(names.iter().map(|n| n.to_string())),
        }
    }
    out
}

/// `EVALSHA` of `script` with `keys`; the caller appends the ARGV.
pub(crate) fn eval<K: redis::ToRedisArgs>(script: &Script, keys: &[K]) -> Cmd {
    eval_sized(script, keys, 0, 0)
}

/// [`eval`], with room for `args` more arguments of `bytes` bytes in all
/// beside a few short ones: a command's buffers grown an argument at a
/// time were moved a dozen times for a one-job settle (about a fifth of
/// the instructions of building and packing it, BENCHMARKS.md, Speed II
/// part 29).
pub(crate) fn eval_sized<K: redis::ToRedisArgs>(
    script: &Script,
    keys: &[K],
    args: usize,
    bytes: usize,
) -> Cmd {
    let mut cmd = Cmd::with_capacity(
        3 + keys.len() + ROOM_ARGS + args,
        64 + keys.len() * ROOM_KEY + ROOM_ARGS * 16 + bytes,
    );
    eval_head(&mut cmd, script, keys);
    cmd
}

/// A call's head, `EVALSHA` of `script` with `keys`, written into `a` (a
/// `redis::Cmd` or a command packed by hand); the caller appends the ARGV.
pub(crate) fn eval_head<A: Args, K: redis::ToRedisArgs>(a: &mut A, script: &Script, keys: &[K]) {
    a.arg("EVALSHA")
        .arg(script.get_hash())
        .arg(keys.len())
        .arg(keys);
}

/// The short arguments a script call has room for beside its keys.
pub(crate) const ROOM_ARGS: usize = 16;
/// The bytes a script call has room for by key.
pub(crate) const ROOM_KEY: usize = 48;

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
        || e.code() == Some("NOSCRIPT")
        || e.to_string().contains("NOSCRIPT")
}

/// Runs one script command, loading the script once if Redis does not know it.
pub(crate) async fn run(con: &mut Connection, script: &Script, cmd: &Cmd) -> Result<Value> {
    match cmd.query_async(con).await {
        Err(e) if is_noscript(&e) => {
            script.load_async(con).await?;
            Ok(cmd.query_async(con).await?)
        }
        r => Ok(r?),
    }
}

/// Runs one call of `script` packed by hand (`packed`, see
/// [`Connection::packed`]; `pipeline()` is the same call for the
/// multiplexer), loading the script once if Redis does not know it, as
/// [`run`] does.
pub(crate) async fn run_packed(
    con: &mut Connection,
    script: &Script,
    packed: &[u8],
    pipeline: impl Fn() -> Pipeline + Send + Sync,
) -> Result<Value> {
    let mut loaded = false;
    loop {
        let reply = con
            .packed(packed, 1, &pipeline)
            .await?
            .pop()
            .ok_or_else(|| Error::Protocol("a script call without its reply".into()))?;
        match reply.extract_error() {
            Err(e) if is_noscript(&e) && !loaded => {
                script.load_async(con).await?;
                loaded = true;
            }
            r => return Ok(r?),
        }
    }
}

/// Reads script replies without panicking on anything Redis may send.
pub(crate) struct Reply<'a> {
    items: std::slice::Iter<'a, Value>,
}

impl<'a> Reply<'a> {
    /// An array reply whose first item is a status code; returns the code and the rest.
    pub fn status(v: &'a Value) -> Result<(i64, Reply<'a>)> {
        let Value::Array(items) = v else {
            return Err(Error::Protocol(format!("expected an array, got {v:?}")));
        };
        Self::status_of(items)
    }

    /// [`status`](Self::status) of an array reply's items.
    pub fn status_of(items: &'a [Value]) -> Result<(i64, Reply<'a>)> {
        let mut r = Reply::of(items);
        let code = r.int()?;
        Ok((code, r))
    }

    /// The items of `items`, read in order.
    pub fn of(items: &'a [Value]) -> Reply<'a> {
        Reply {
            items: items.iter(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.items.len() == 0
    }

    /// How many items are left to read.
    pub fn left(&self) -> usize {
        self.items.len()
    }

    /// The items not read yet.
    pub fn rest(self) -> &'a [Value] {
        self.items.as_slice()
    }

    fn next(&mut self) -> Result<&'a Value> {
        self.items
            .next()
            .ok_or_else(|| Error::Protocol("reply too short".into()))
    }

    pub fn int(&mut self) -> Result<i64> {
        match self.next()? {
            Value::Int(i) => Ok(*i),
            Value::BulkString(b) => std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::Protocol(format!("not a number: {b:?}"))),
            Value::Nil => Ok(0),
            v => Err(Error::Protocol(format!("expected a number, got {v:?}"))),
        }
    }

    /// A number stored by any RSMQ client, read as the npm rsmq client reads one
    /// (`parseInt(s, 10)`): leading whitespace and a sign, then the digits up to
    /// the first other character, so a fractional `1.5` (as PyRSMQ stores) is 1.
    /// Text without leading digits is an error (rsmq's `NaN`).
    pub fn rsmq_int(&mut self) -> Result<i64> {
        match self.next()? {
            Value::BulkString(b) => {
                parse_int_prefix(b).ok_or_else(|| Error::Protocol(format!("not a number: {b:?}")))
            }
            Value::Int(i) => Ok(*i),
            Value::Nil => Ok(0),
            v => Err(Error::Protocol(format!("expected a number, got {v:?}"))),
        }
    }

    /// A string, or `None` for a nil (a missing field).
    pub fn opt_bytes(&mut self) -> Result<Option<&'a [u8]>> {
        match self.next()? {
            Value::Nil => Ok(None),
            Value::BulkString(b) => Ok(Some(b)),
            Value::SimpleString(s) => Ok(Some(s.as_bytes())),
            v => Err(Error::Protocol(format!("expected a string, got {v:?}"))),
        }
    }

    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        match self.next()? {
            Value::BulkString(b) => Ok(b),
            Value::SimpleString(s) => Ok(s.as_bytes()),
            v => Err(Error::Protocol(format!("expected a string, got {v:?}"))),
        }
    }
}

/// JavaScript's `parseInt(s, 10)` on bytes, saturating instead of losing precision.
fn parse_int_prefix(b: &[u8]) -> Option<i64> {
    let s = b.trim_ascii_start();
    let (neg, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, s),
    };
    let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let n = s[..digits].iter().fold(0i64, |n, c| {
        n.saturating_mul(10).saturating_add(i64::from(c - b'0'))
    });
    Some(if neg { -n } else { n })
}

/// An integer reply.
pub(crate) fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        v => Err(Error::Protocol(format!("expected an integer, got {v:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_int_prefix;

    #[test]
    fn the_scripts_lease_offset_is_the_backends() {
        use crate::contract::leases::{LEASE_MARK, LEGACY_LEASED_MS, MAX_COUNT};
        for line in [
            format!("local LEASE_MARK, MAX_COUNT = {LEASE_MARK}, {MAX_COUNT}\n"),
            format!("local LEGACY = {LEGACY_LEASED_MS}\n"),
        ] {
            assert!(
                include_str!("lua/lib.lua").contains(&line),
                "lib.lua lacks {line:?}"
            );
        }
    }

    #[test]
    fn a_script_keeps_what_it_uses_of_lib_lua_on_the_lines_it_had() {
        use super::{ALL, LIB, with_lib};
        let defined = |source: &str, name: &str| {
            source
                .lines()
                .any(|l| l.starts_with(&format!("local function {name}(")))
        };
        for (file, body, _) in ALL {
            let source = with_lib(body);
            // every line where it was: lib.lua's, then the script's
            assert_eq!(
                source.lines().count(),
                LIB.lines().count() + body.lines().count(),
                "{file}"
            );
            for (i, line) in source.lines().enumerate().skip(LIB.lines().count()) {
                assert_eq!(Some(line), body.lines().nth(i - LIB.lines().count()));
            }
            for (old, new) in LIB.lines().zip(source.lines()) {
                assert!(new == old || new.is_empty(), "{file}: {new:?}");
            }
        }
        let send = with_lib(include_str!("lua/send.lua"));
        // called by send.lua, and by what it calls (hand_off: lease_score)
        for used in ["send_start", "hand_off", "lease_score", "clock", "many"] {
            assert!(defined(&send, used), "send.lua lacks {used}");
        }
        for unused in ["concurrency_keys", "trim_history", "enter_removed"] {
            assert!(!defined(&send, unused), "send.lua keeps {unused}");
        }
        // named in their comments only: each call would make its closure
        for (file, named) in [
            ("fetch.lua", "hand_off"),
            ("fetch.lua", "index_exact"),
            ("reclaim.lua", "hand_off"),
        ] {
            let (_, body, _) = ALL.iter().find(|(f, _, _)| *f == file).unwrap();
            assert!(body.contains(named), "{file} no longer names {named}");
            assert!(!defined(&with_lib(body), named), "{file} keeps {named}");
        }
        // a script using every function keeps lib.lua whole
        let all: String = LIB
            .lines()
            .filter_map(|l| l.strip_prefix("local function "))
            .map(|l| format!("{}()\n", l.split('(').next().unwrap()))
            .collect();
        assert!(with_lib(&all).starts_with(LIB));
    }

    #[test]
    fn a_lines_code_ends_at_a_comment_outside_quotes() {
        use super::code_of;
        assert_eq!(code_of("many(x) -- hand_off"), "many(x) ");
        assert_eq!(code_of("-- all comment"), "");
        assert_eq!(code_of(r#"a = "--" .. b -- c"#), r#"a = "--" .. b "#);
        assert_eq!(code_of(r#"a = '\'--' -- c"#), r#"a = '\'--' "#);
        assert_eq!(code_of(r#"a = "x\"" - 1"#), r#"a = "x\"" - 1"#);
        // it knows one-line strings only: a long string (`[[…]]`, `[=[…]=]`)
        // holding "--" would cut the line's code short, and a function it
        // names would be left out; no script has one
        let files = super::ALL.iter().map(|(file, body, _)| (*file, *body));
        for (file, body) in files.chain([("lib.lua", super::LIB)]) {
            for line in body.lines() {
                let code = code_of(line);
                assert!(
                    !code.contains("[[") && !code.contains("[="),
                    "{file}: a long string in {line:?}"
                );
            }
        }
    }

    #[test]
    fn numbers_read_as_javascript_parse_int() {
        let cases: [(&[u8], Option<i64>); 9] = [
            (b"30", Some(30)),
            (b"1.5", Some(1)),
            (b" 2.5", Some(2)),
            (b"-1", Some(-1)),
            (b"+4x", Some(4)),
            (b"1e3", Some(1)),
            (b"99999999999999999999", Some(i64::MAX)),
            (b".5", None),
            (b"", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_int_prefix(text), want, "{:?}", text.escape_ascii());
        }
    }
}
