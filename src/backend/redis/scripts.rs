//! Every Lua script (`lua/*.lua`, each with `lua/lib.lua` prepended) and the one
//! path that calls them.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::ConnectionManager;
use redis::{Cmd, ErrorKind, Pipeline, Script, ServerErrorKind, Value};

use crate::{Error, Result};

macro_rules! scripts {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(concat!(include_str!("lua/lib.lua"), include_str!(concat!("lua/", $file)))));)*
    };
}

scripts! {
    SEND => "send.lua",
    RECEIVE => "receive.lua",
    POP => "pop.lua",
    VISIBILITY => "visibility.lua",
    DELETE => "delete.lua",
    CREATE => "create.lua",
    ATTRIBUTES => "attributes.lua",
    SET_ATTRIBUTES => "set_attributes.lua",
    FETCH => "fetch.lua",
    EXTEND => "extend.lua",
    COMPLETE => "complete.lua",
}

/// `EVALSHA` of `script` with `keys`; the caller appends the ARGV.
pub(crate) fn eval(script: &Script, keys: &[&str]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    cmd
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
        || e.code() == Some("NOSCRIPT")
        || e.to_string().contains("NOSCRIPT")
}

/// Runs one script command, loading the script once if Redis does not know it.
pub(crate) async fn run(con: &mut ConnectionManager, script: &Script, cmd: &Cmd) -> Result<Value> {
    match cmd.query_async(con).await {
        Err(e) if is_noscript(&e) => {
            script.load_async(con).await?;
            Ok(cmd.query_async(con).await?)
        }
        r => Ok(r?),
    }
}

/// Runs a pipeline of calls to `script` in one round trip.
///
/// `loaded` remembers that this connection's Redis has the script: a large
/// pipeline is not sent twice when the first attempt would meet `NOSCRIPT`.
pub(crate) async fn run_pipeline(
    con: &mut ConnectionManager,
    script: &Script,
    loaded: &AtomicBool,
    pipe: &Pipeline,
) -> Result<Vec<Value>> {
    if !loaded.load(Ordering::Relaxed) {
        script.load_async(con).await?;
        loaded.store(true, Ordering::Relaxed);
    }
    match pipe.query_async(con).await {
        Err(e) if is_noscript(&e) => {
            // Redis restarted or flushed its scripts
            script.load_async(con).await?;
            Ok(pipe.query_async(con).await?)
        }
        r => Ok(r?),
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
        let mut r = Reply {
            items: items.iter(),
        };
        let code = r.int()?;
        Ok((code, r))
    }

    pub fn is_empty(&self) -> bool {
        self.items.len() == 0
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

    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        match self.next()? {
            Value::BulkString(b) => Ok(b),
            Value::SimpleString(s) => Ok(s.as_bytes()),
            v => Err(Error::Protocol(format!("expected a string, got {v:?}"))),
        }
    }
}

/// An integer reply.
pub(crate) fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        v => Err(Error::Protocol(format!("expected an integer, got {v:?}"))),
    }
}
