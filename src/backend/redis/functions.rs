//! The plain send as a Redis function (Redis 7.0+, Valkey): `send.lua` with what
//! it uses of `lib.lua`, loaded once (`FUNCTION LOAD`) and called by `FCALL`.
//!
//! A script runs its whole chunk on every call, `lib.lua`'s closures included;
//! a function library runs its chunk once, when it loads, so a call runs only
//! the send. Functions also run in a Lua state of their own, apart from the
//! scripts': with only this library in it, the collector step Redis takes
//! after every 50th call in a state walks a small heap rather than the one
//! the worker's large scripts fill (BENCHMARKS.md, Speed II part 17).
//!
//! Where functions are missing (Redis 6.2), refused (an ACL rule without
//! `+function|load`) or not used (a Cluster, whose nodes would each need the
//! library), the send calls its script as before.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::{Cmd, ToRedisArgs};

use super::connection::Connection;
use super::packed::Args;
use super::scripts;
use crate::Result;

/// A script as a function of a library of its own.
pub(crate) struct Function {
    /// The script's file in `lua/`.
    pub file: &'static str,
    /// The library's and its one function's name: `redjob_<file stem>_<16 hex
    /// digits of the library's SHA-1>`, so that releases that differ load
    /// libraries that differ, side by side.
    pub name: String,
    /// `FUNCTION LOAD`'s argument.
    pub library: String,
}

/// The plain send (`send.lua`).
pub(crate) static SEND: LazyLock<Function> =
    LazyLock::new(|| Function::of("send.lua", include_str!("lua/send.lua")));

impl Function {
    /// `body` (a script's own text, as `scripts.rs` takes it) as a library.
    ///
    /// Each line of the script as loaded (`lib.lua`'s kept part, then the
    /// script) keeps its text and comes one line later in the library, after
    /// the shebang, so an error's `@user_function:<line>` is the script's
    /// line plus one (see `scripts::refused_call`); a comment's line is
    /// empty. Their code runs in a function defined once, `run`; `KEYS` and
    /// `ARGV`, globals in a script, are the library's locals, set for each
    /// call and dropped after it returns.
    fn of(file: &'static str, body: &str) -> Function {
        let source = scripts::with_lib(body);
        let lib_lines = source.lines().count() - body.lines().count();
        let mut code = String::with_capacity(source.len() + 256);
        for (i, line) in source.lines().enumerate() {
            if i == 0 {
                code.push_str("local KEYS, ARGV ");
            } else if i == lib_lines {
                code.push_str("local function run() ");
            }
            // comments stay out of the library Redis keeps (a line keeps its
            // place, empty)
            if !scripts::code_of(line).trim().is_empty() {
                code.push_str(line);
            }
            code.push('\n');
        }
        code.push_str("end\n");
        let digest = redis::Script::new(&code).get_hash().to_string();
        let stem = file.trim_end_matches(".lua");
        let name = format!("redjob_{stem}_{}", &digest[..16]);
        let library = format!(
            "#!lua name={name}\n{code}redis.register_function('{name}', function(keys, args)\n  \
             KEYS, ARGV = keys, args\n  local reply = run()\n  KEYS, ARGV = nil, nil\n  \
             return reply\nend)\n"
        );
        Function {
            file,
            name,
            library,
        }
    }

    /// `FCALL` of this function with `keys`; the caller appends the ARGV.
    pub fn call<K: ToRedisArgs>(&self, keys: &[K]) -> Cmd {
        use crate::backend::redis::scripts::{ROOM_ARGS, ROOM_KEY};
        let mut cmd = Cmd::with_capacity(
            3 + keys.len() + ROOM_ARGS,
            64 + keys.len() * ROOM_KEY + ROOM_ARGS * 16,
        );
        self.head(&mut cmd, keys);
        cmd
    }

    /// A call's head, `FCALL` of this function with `keys`, written into `a`
    /// (a `redis::Cmd` or a command packed by hand); the caller appends the
    /// ARGV.
    pub fn head<A: Args, K: ToRedisArgs>(&self, a: &mut A, keys: &[K]) {
        a.arg("FCALL").arg(&self.name).arg(keys.len()).arg(keys);
    }
}

/// The function this script's file is loaded as, if any.
pub(crate) fn named(name: &str) -> Option<&'static Function> {
    (SEND.name == name).then_some(&*SEND)
}

/// Whether a handle calls the function: until a call finds it missing and
/// the server refuses to load it, or refuses `FCALL` itself; then the script.
/// The first call of a handle goes out as `FCALL`: a server that has the
/// library from an earlier process takes it without a load (`FUNCTION LOAD`
/// is a write: replicated, and appended to the AOF).
#[derive(Debug, Default)]
pub(crate) struct Loaded(AtomicBool);

impl Loaded {
    /// Whether calls go through the function.
    pub fn usable(&self) -> bool {
        !self.0.load(Ordering::Relaxed)
    }

    /// Calls go through the script from now on.
    pub fn give_up(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Loads `f` after a call found it missing. A server that refuses the
    /// load (no `FUNCTION` command, an ACL rule without `+function|load`, a
    /// library it cannot take) makes this handle use the script from then
    /// on; a busy, loading or read-only server, one out of memory, or a
    /// connection that fails is an error.
    pub async fn load(&self, con: &mut Connection, f: &Function) -> Result<()> {
        let loaded: redis::RedisResult<String> = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&f.library)
            .query_async(con)
            .await;
        match loaded {
            Ok(_) => Ok(()),
            Err(e) if e.code().is_some_and(|c| !TRANSIENT.contains(&c)) => {
                tracing::debug!(function = %f.name, error = %e, "Redis refused the function: calling the script");
                self.give_up();
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Error codes of a server that may take the load later.
const TRANSIENT: [&str; 10] = [
    "LOADING",
    "BUSY",
    "OOM",
    "READONLY",
    "MASTERDOWN",
    "TRYAGAIN",
    "NOREPLICAS",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
];

/// Why a call of a function failed, when the script would not.
pub(crate) enum Failure {
    /// The server has no such function.
    NotFound,
    /// The server refused `FCALL` itself: an unknown command (Redis 6.2, a
    /// renamed command), or an ACL rule without it.
    Refused,
}

/// Whether `e`, the error of a pipeline with `FCALL`s, is one the script
/// would not meet.
pub(crate) fn failure(e: &crate::Error) -> Option<Failure> {
    let text = e.to_string();
    if matches!(e, crate::Error::Redis(_)) && text.contains("Function not found") {
        return Some(Failure::NotFound);
    }
    let lower = text.to_ascii_lowercase();
    let unknown = lower.contains("unknown command") && lower.contains("fcall");
    // (a command the function calls is refused inside it: "@user_function")
    let refused = matches!(e, crate::Error::NoPermission { .. })
        && lower.contains("'fcall'")
        && !lower.contains("@user_function");
    (unknown || refused).then_some(Failure::Refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_functions_lines_are_its_scripts_one_later() {
        let f = &*SEND;
        let script = scripts::with_lib(include_str!("lua/send.lua"));
        let lib: Vec<&str> = f.library.lines().collect();
        assert!(lib[0].starts_with("#!lua name=redjob_send_"), "{}", lib[0]);
        let mut code = 0;
        for (i, line) in script.lines().enumerate() {
            let at = lib[i + 1];
            if scripts::code_of(line).trim().is_empty() {
                // a comment's line, empty (or only what the library adds)
                assert!(
                    ["", "local KEYS, ARGV ", "local function run() "].contains(&at),
                    "line {}: {at:?}",
                    i + 1
                );
            } else {
                assert!(
                    at.ends_with(line),
                    "line {}: {at:?} against {line:?}",
                    i + 1
                );
                code += 1;
            }
        }
        assert!(code > 50, "the send's code is there: {code} lines");
        // then `run`'s end and the registration
        assert_eq!(lib[script.lines().count() + 1], "end");
        assert!(
            lib[script.lines().count() + 2].starts_with("redis.register_function('redjob_send_")
        );
        assert_eq!(named(&f.name).map(|f| f.file), Some("send.lua"));
        assert!(named("redjob_send_0000000000000000").is_none());
    }

    #[test]
    fn a_call_refused_or_missing_is_told_from_other_errors() {
        use crate::Error;
        let redis = |code: &str, text: &str| -> Error {
            redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "x",
                format!("{code} {text}"),
            ))
            .into()
        };
        let not_found = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "Function not found".to_string(),
        ));
        assert!(matches!(
            failure(&not_found.into()),
            Some(Failure::NotFound)
        ));
        let unknown = redis("ERR", "unknown command 'FCALL', with args beginning with: ");
        assert!(
            matches!(failure(&unknown), Some(Failure::Refused)),
            "{unknown}"
        );
        let nope = Error::NoPermission {
            refused: "may not run the 'fcall' command".into(),
            error: redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "x",
                "NOPERM this user has no permissions to run the 'fcall' command".to_string(),
            )),
        };
        assert!(matches!(failure(&nope), Some(Failure::Refused)), "{nope}");
        // a command inside the function, or anything else: the send's error
        let inside = Error::NoPermission {
            refused: "a script may not run ZADD (send.lua, line 60)".into(),
            error: redis::RedisError::from((redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError), "x", "The user executing the script can't run this command or subcommand script: redjob_send_0, on @user_function:61. fcall".to_string())),
        };
        assert!(failure(&inside).is_none(), "{inside}");
        assert!(
            failure(&redis(
                "ERR",
                "wrong number of arguments for 'fcall' command"
            ))
            .is_none()
        );
        assert!(failure(&redis("LOADING", "Redis is loading the dataset in memory")).is_none());
    }
}
