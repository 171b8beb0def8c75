//! Pipelines of script calls, each call run once whatever scripts Redis
//! loses while they go.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::{Cmd, Pipeline, Script, Value};

use crate::backend::redis::connection::{Connection, command_name as name};
use crate::{Error, Result};

/// How many times the calls that met `NOSCRIPT` are sent again before its
/// error is the pipeline's (each time only those, once their scripts are
/// loaded: a script can be lost again in between, `SCRIPT FLUSH` run from
/// another client).
const ROUNDS: usize = 3;

/// Runs a pipeline of calls to `scripts` (and of other commands) in one
/// round trip; the replies in the commands' order, or the first server
/// error among them.
///
/// Each script's flag remembers that this connection's Redis has it: one
/// not known yet is loaded first (all at once), so that a large pipeline
/// is not sent only to meet `NOSCRIPT`. Redis can still have lost a script
/// since (a restart, a failover, `SCRIPT FLUSH`, even from another client
/// between two calls of this pipeline). A call that met `NOSCRIPT` ran
/// nothing, while the others ran: so only the calls that met it are sent
/// again once their scripts are loaded, never one that ran, with the
/// commands after the first of them that call nothing (the reads and the
/// `WAIT` callers put around their calls: a `WAIT` must come after the
/// writes it waits for). Their replies take their commands' places (of
/// two `WAIT`s, the lower count: see [`merged`]).
///
/// A call sent again runs after the pipeline's later calls when those
/// found their script (another client loaded it in between): each call
/// still runs once, but its writes come after theirs. For a send, its
/// messages' ids then sort after the later calls' messages, and of two
/// unique messages of one key in different calls the earlier one may
/// win (RELIABILITY.md, known limits). Failing the send instead would
/// leave the later calls' messages stored and tell the caller none was.
///
/// The pipeline ignores no reply ([`Pipeline::ignore`]): each reply's place
/// is its command's.
pub(crate) async fn run_pipeline(
    con: &mut Connection,
    scripts: &[(&Script, &AtomicBool)],
    pipe: Pipeline,
) -> Result<Vec<Value>> {
    match Value::Array(run_pipeline_replies(con, scripts, pipe).await?).extract_error()? {
        Value::Array(replies) => Ok(replies),
        v => Err(Error::Protocol(format!("a pipeline's replies: {v:?}"))),
    }
}

/// [`run_pipeline`], each command's error kept as its reply (a
/// [`Value::ServerError`]) rather than failing the whole.
pub(crate) async fn run_pipeline_replies(
    con: &mut Connection,
    scripts: &[(&Script, &AtomicBool)],
    mut pipe: Pipeline,
) -> Result<Vec<Value>> {
    let unknown: Vec<_> = scripts
        .iter()
        .filter(|(_, loaded)| !loaded.load(Ordering::Relaxed))
        .copied()
        .collect();
    load(con, &unknown).await?;
    pipe.ignore_errors();
    let mut replies: Vec<Value> = pipe.query_async(con).await?;
    for _ in 0..ROUNDS {
        // (no vector made while no call met NOSCRIPT, the common case)
        let Some(first) = replies.iter().position(is_noscript) else {
            break;
        };
        let missed: Vec<bool> = replies.iter().map(is_noscript).collect();
        if replies.len() != pipe.len() {
            return Err(Error::Protocol(format!(
                "{} replies to a pipeline of {} commands",
                replies.len(),
                pipe.len()
            )));
        }
        let cmds: Vec<&Cmd> = pipe.cmd_iter().collect();
        // the scripts the calls missed, loaded again
        let lost: Vec<_> = scripts
            .iter()
            .filter(|(script, _)| {
                let sha = script.get_hash().as_bytes();
                (first..cmds.len()).any(|i| missed[i] && script_of(cmds[i]) == Some(sha))
            })
            .copied()
            .collect();
        load(con, &lost).await?;
        let again: Vec<usize> = (first..cmds.len())
            .filter(|&i| missed[i] || !is_call(cmds[i]))
            .collect();
        let mut resent = redis::pipe();
        resent.ignore_errors();
        for &i in &again {
            resent.add_command(cmds[i].clone());
        }
        let new: Vec<Value> = resent.query_async(con).await?;
        if new.len() != again.len() {
            return Err(Error::Protocol(format!(
                "{} replies to {} commands sent again",
                new.len(),
                again.len()
            )));
        }
        for (i, v) in again.into_iter().zip(new) {
            let old = std::mem::replace(&mut replies[i], Value::Nil);
            replies[i] = merged(cmds[i], old, v);
        }
    }
    Ok(replies)
}

/// A command's reply once it was sent again (`new`; `old` the first's): the
/// new one, but of two `WAIT`s the lower count. The first counted the
/// replicas that have the writes that ran, the second those that have the
/// calls sent again, perhaps on another connection (a lane) whose last write
/// is older; the writes are on as many replicas as the lower says.
fn merged(cmd: &Cmd, old: Value, new: Value) -> Value {
    match (&old, &new) {
        (Value::Int(a), Value::Int(b)) if name(cmd) == b"WAIT" && a < b => old,
        (Value::ServerError(_), _) if name(cmd) == b"WAIT" => old,
        _ => new,
    }
}

/// Loads `scripts`, all at once, and notes that Redis has them.
async fn load(con: &mut Connection, scripts: &[(&Script, &AtomicBool)]) -> Result<()> {
    let loads = scripts.iter().map(|(script, loaded)| {
        let mut con = con.clone();
        async move {
            script.load_async(&mut con).await?;
            loaded.store(true, Ordering::Relaxed);
            Ok::<_, Error>(())
        }
    });
    futures::future::try_join_all(loads).await?;
    Ok(())
}

/// Whether a reply is the error of a script Redis does not have.
fn is_noscript(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// Whether the command calls a script or a function (a write, perhaps: it
/// is sent again only when it ran nothing).
fn is_call(cmd: &Cmd) -> bool {
    [
        &b"EVALSHA"[..],
        b"EVALSHA_RO",
        b"EVAL",
        b"EVAL_RO",
        b"FCALL",
        b"FCALL_RO",
    ]
    .contains(&name(cmd).as_slice())
}

/// The SHA1 an `EVALSHA` calls.
fn script_of(cmd: &Cmd) -> Option<&[u8]> {
    let n = name(cmd);
    if n != b"EVALSHA" && n != b"EVALSHA_RO" {
        return None;
    }
    match cmd.args_iter().nth(1)? {
        redis::Arg::Simple(sha) => Some(sha),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_two_waits_the_lower_count_stands() {
        let wait = redis::cmd("WAIT");
        assert_eq!(merged(&wait, Value::Int(0), Value::Int(2)), Value::Int(0));
        assert_eq!(merged(&wait, Value::Int(2), Value::Int(1)), Value::Int(1));
        assert_eq!(
            merged(&redis::cmd("wait"), Value::Int(1), Value::Int(3)),
            Value::Int(1)
        );
        // a first WAIT refused stays refused
        let refused =
            redis::parse_redis_value(b"-ERR WAIT cannot be used with replica instances\r\n")
                .unwrap();
        assert!(matches!(refused, Value::ServerError(_)), "{refused:?}");
        assert_eq!(merged(&wait, refused.clone(), Value::Int(1)), refused);
        // any other command's reply is the new one
        let read = redis::cmd("ZRANGE");
        assert_eq!(merged(&read, Value::Int(0), Value::Int(2)), Value::Int(2));
        let mut call = redis::cmd("EVALSHA");
        call.arg("0123").arg(0);
        assert_eq!(merged(&call, Value::Int(1), Value::Int(5)), Value::Int(5));
    }

    #[test]
    fn calls_are_told_from_other_commands_and_name_their_script() {
        let script = Script::new("return 1");
        let mut call = redis::cmd("evalsha");
        call.arg(script.get_hash()).arg(0);
        assert!(is_call(&call));
        assert_eq!(script_of(&call), Some(script.get_hash().as_bytes()));
        let mut f = redis::cmd("FCALL");
        f.arg("send").arg(0);
        assert!(is_call(&f));
        assert_eq!(script_of(&f), None);
        for other in ["TIME", "WAIT", "ZRANGE"] {
            assert!(!is_call(&redis::cmd(other)), "{other}");
            assert_eq!(script_of(&redis::cmd(other)), None);
        }
    }
}
