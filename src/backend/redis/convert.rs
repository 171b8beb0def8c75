//! Between Redis's types and redjob's: Redis's errors as ours (a refused write
//! for lack of memory, what an ACL refused named in the user's words), and a
//! [`JobId`] and a lease's [`Token`] as command arguments.

use crate::JobId;
use crate::contract::leases::Token;
use crate::error::Error;

/// What the user's ACL refused, when `e` says so: a command, key or channel
/// the client sent (`NOPERM this user has no permissions to …`), or something a
/// script called (Redis 7.0: `The user executing the script can't …`; 6.2:
/// the same inside `Error running script …`; Valkey and 7.2+: `ACL failure in
/// script: … no permissions to …`).
fn refused(e: &redis::RedisError) -> Option<String> {
    refused_text(&e.to_string())
}

fn refused_text(text: &str) -> Option<String> {
    // what Redis says, without the script's trailer (` script: <sha>, on …`)
    let said = |from: usize| {
        let rest = &text[from..];
        rest.split(" script:")
            .next()
            .unwrap_or(rest)
            .trim_end_matches([')', ']', '.', ' '])
            .to_string()
    };
    const UNNAMED: &str = "The user executing the script can't ";
    let what = if let Some(i) = text.to_ascii_lowercase().find("no permissions to ") {
        format!("may not {}", said(i + "no permissions to ".len()))
    } else {
        format!("can't {}", said(text.find(UNNAMED)? + UNNAMED.len()))
    };
    if !text.contains("@user_script") && !text.contains("@user_function") {
        return Some(what);
    }
    // Redis names no command a script was refused: the script's line does
    let call = super::scripts::refused_call(text);
    Some(match call {
        Some(call) if what.starts_with("can't run this command") => {
            format!("a script may not run {call}")
        }
        Some(call) => format!("a script {what}: {call}"),
        None => format!("a script {what}"),
    })
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        // a script's refused write carries the OOM code, or only its text
        if e.code() == Some("OOM")
            || e.to_string()
                .contains("command not allowed when used memory > 'maxmemory'")
        {
            Error::OutOfMemory(e)
        } else if let Some(refused) = refused(&e) {
            Error::NoPermission { refused, error: e }
        } else {
            Error::Redis(e)
        }
    }
}

impl redis::ToRedisArgs for JobId {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        out.write_arg(self.as_bytes())
    }
}

/// The score `"<ms>.<thousandths>"`, as `Token`'s `Display` writes it, without a
/// `String` per token (a settle passes one per job).
impl redis::ToRedisArgs for Token {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        out.write_arg(self.write_digits(&mut [0; 24]))
    }
}

/// Appends `n` in decimal to `out`, without the formatting machinery.
pub(super) fn push_decimal(out: &mut String, n: u64) {
    let mut buf = [0u8; 20];
    let at = crate::contract::leases::digits_before(&mut buf, 20, n);
    // ASCII digits
    out.push_str(std::str::from_utf8(&buf[at..]).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::refused_text;

    #[test]
    fn a_token_argument_is_its_display() {
        use crate::contract::leases::Token;
        use redis::ToRedisArgs;
        for t in [
            Token::new(0, 1),
            Token::new(1_764_579_600_123, 7),
            Token::new(u64::MAX / 1000 - 1, 499),
            Token::new(999, 1),
            Token::new(1000, 0),
        ] {
            assert_eq!(t.to_redis_args(), vec![t.to_string().into_bytes()], "{t}");
        }
    }

    #[test]
    fn a_decimal_is_its_display() {
        for n in [0, 7, 10, 999, 1000, 1_764_579_600_123, u64::MAX] {
            let mut s = String::from("x");
            super::push_decimal(&mut s, n);
            assert_eq!(s, format!("x{n}"));
        }
    }
    use crate::backend::redis::scripts::{CREATE, UNIQUE};

    #[test]
    fn acl_refusals_are_named_in_every_servers_words() {
        let create = CREATE.get_hash();
        let lib = include_str!("lua/lib.lua");
        // a line of create.lua as Redis numbers it (lib.lua comes first)
        let line = |n: usize| lib.lines().count() + n;
        let (l16, l31) = (line(16), line(31));
        // the client's own command, and the keys (Redis 6.2 to 7.0; Valkey)
        assert_eq!(
            refused_text("NoPerm: this user has no permissions to run the 'evalsha' command")
                .as_deref(),
            Some("may not run the 'evalsha' command")
        );
        assert_eq!(
            refused_text("NOPERM No permissions to access a key").as_deref(),
            Some("may not access a key")
        );
        // a script's command: Redis 7.0, 6.2, Valkey
        let v7 = format!(
            "The user executing the script can't run this command or subcommand script: {create}, on @user_script:{l16}."
        );
        let v6 = format!(
            "Error running script (call to f_{create}): @user_script:{l16}: @user_script: {l16}: The user executing the script can't run this command or subcommand"
        );
        for text in [v7, v6] {
            assert_eq!(
                refused_text(&text).as_deref(),
                Some("a script may not run HSETNX (create.lua, line 16)"),
                "{text}"
            );
        }
        assert_eq!(
            refused_text("ACL failure in script: User u has no permissions to run the 'hsetnx' command script: on @user_script:239.").as_deref(),
            Some("a script may not run the 'hsetnx' command")
        );
        // a channel, on a line with two commands
        let channel = format!(
            "The user executing the script can't publish to the channel mentioned in the command script: {create}, on @user_script:{l31}."
        );
        assert_eq!(
            refused_text(&channel).as_deref(),
            Some(
                "a script can't publish to the channel mentioned in the command: PUBLISH (create.lua, line 31)"
            )
        );
        // lib.lua's many(): the commands the script passes it
        let many = lib
            .lines()
            .position(|l| l.contains("redis.call(cmd"))
            .unwrap()
            + 1;
        let text = format!(
            "The user executing the script can't run this command or subcommand script: {}, on @user_script:{many}.",
            UNIQUE.get_hash()
        );
        let named = refused_text(&text).unwrap();
        assert!(
            named.contains("HDEL") && named.ends_with(&format!("(lib.lua, line {many})")),
            "{named}"
        );
        // the send's function (Redis 7.0): a line of its library is the
        // script's plus one (its shebang comes first)
        let zadd = include_str!("lua/send.lua")
            .lines()
            .position(|l| l.trim() == r#"redis.call("ZADD", KEYS[1], score, id)"#)
            .unwrap()
            + 1;
        let text = format!(
            "The user executing the script can't run this command or subcommand script: {}, on @user_function:{}.",
            crate::backend::redis::functions::SEND.name,
            lib.lines().count() + zadd + 1
        );
        assert_eq!(
            refused_text(&text),
            Some(format!("a script may not run ZADD (send.lua, line {zadd})"))
        );
        // no sha known, other errors
        let unknown = "The user executing the script can't run this command or subcommand script: 00, on @user_script:3.";
        assert_eq!(
            refused_text(unknown).as_deref(),
            Some("a script can't run this command or subcommand")
        );
        assert_eq!(refused_text("ERR wrong number of arguments"), None);
    }

    #[test]
    fn a_lines_commands_and_subcommands_are_read_off_it() {
        use crate::backend::redis::scripts::called;
        assert_eq!(called(r#"local t = redis.call("TIME")"#), ["TIME"]);
        assert_eq!(
            called(r#"redis.call("PUBLISH", ARGV[1], redis.call("ZCARD", KEYS[1]))"#),
            ["PUBLISH", "ZCARD"]
        );
        assert_eq!(
            called(
                r#"local t = redis.call(desc and "ZREVRANGE" or "ZRANGE", key, 0, 1, "WITHSCORES")"#
            ),
            ["ZREVRANGE", "ZRANGE"]
        );
        assert_eq!(
            called(r#"redis.call("XGROUP", "CREATE", key, group, offset, "MKSTREAM")"#),
            ["XGROUP CREATE"]
        );
        assert!(called("local r = redis.call(cmd, key, unpack(list))").is_empty());
    }
}
