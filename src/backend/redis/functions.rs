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
use std::sync::atomic::{AtomicU8, Ordering};

use redis::{Cmd, ToRedisArgs};

use super::connection::Connection;
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
    /// line plus one (see `scripts::refused_call`). Their code runs in a
    /// function defined once, `run`; `KEYS` and `ARGV`, globals in a script,
    /// are the library's locals, set for each call and dropped after it (a
    /// batch's arguments are not kept until the next call).
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
            code.push_str(line);
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
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(&self.name).arg(keys.len()).arg(keys);
        cmd
    }
}

/// The function this script's file is loaded as, if any.
pub(crate) fn named(name: &str) -> Option<&'static Function> {
    (SEND.name == name).then_some(&*SEND)
}

const UNKNOWN: u8 = 0;
const LOADED: u8 = 1;
const UNAVAILABLE: u8 = 2;

/// Whether a handle's Redis has a function: unknown until the handle's first
/// call loads it; then loaded, or unavailable (the handle calls the script).
#[derive(Debug, Default)]
pub(crate) struct Loaded(AtomicU8);

impl Loaded {
    /// Whether calls may go through `f`, loading it on the first ask. A server
    /// that refuses the load (no `FUNCTION` command, an ACL rule without it,
    /// a library it cannot take) makes this handle use the script from then
    /// on; a connection that fails is an error.
    pub async fn usable(&self, con: &mut Connection, f: &Function) -> Result<bool> {
        match self.0.load(Ordering::Relaxed) {
            LOADED => return Ok(true),
            UNAVAILABLE => return Ok(false),
            _ => {}
        }
        let loaded: redis::RedisResult<String> = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&f.library)
            .query_async(con)
            .await;
        match loaded {
            Ok(_) => {
                self.0.store(LOADED, Ordering::Relaxed);
                Ok(true)
            }
            // no such command (6.2), refused by the ACL, or a library this
            // server cannot take; others (a busy or loading server, a replica,
            // memory) pass
            Err(e) if matches!(e.code(), Some("ERR" | "NOPERM")) => {
                tracing::debug!(function = %f.name, error = %e, "Redis refused the function: calling the script");
                self.0.store(UNAVAILABLE, Ordering::Relaxed);
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Redis lost the function (a restart without persistence, `FUNCTION
    /// FLUSH`, a failover to a server without it): the next ask loads it again.
    pub fn forget(&self) {
        let _ = self
            .0
            .compare_exchange(LOADED, UNKNOWN, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// Whether `e` says the function called is not loaded.
pub(crate) fn is_not_found(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Redis(e) if e.to_string().contains("Function not found"))
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
        for (i, line) in script.lines().enumerate() {
            assert!(
                lib[i + 1].ends_with(line),
                "line {}: {:?} against {:?}",
                i + 1,
                lib[i + 1],
                line
            );
        }
        assert_eq!(named(&f.name).map(|f| f.file), Some("send.lua"));
        assert!(named("redjob_send_0000000000000000").is_none());
    }
}
