//! Concurrency keys' usage on Redis: `keys.lua`'s calls and replies.

use super::not_found;
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts;
use crate::contract::admin::{KeyPage, KeyUsage};
use crate::contract::queues::validate;
use crate::{Error, Result};

/// keys.lua's reply as a page.
pub(super) async fn read_keys(rsmq: &Rsmq, queue: &str, args: &[&str]) -> Result<KeyPage> {
    validate::queue_name(queue)?;
    let (mut con, k) = rsmq.parts(queue);
    let mut cmd = scripts::eval(&scripts::KEYS, &[&k.zset, &k.hash, &k.keyed, &k.keys]);
    cmd.arg(args);
    let v = scripts::run(&mut con, &scripts::KEYS, &cmd).await?;
    parse_keys(queue, &v)
}

/// keys.lua's reply: the next cursor, then six values per key.
fn parse_keys(queue: &str, v: &redis::Value) -> Result<KeyPage> {
    let redis::Value::Array(items) = v else {
        return Err(Error::Protocol(format!("keys reply {v:?}")));
    };
    if matches!(items.first(), Some(redis::Value::Int(-1))) {
        return Err(not_found(queue));
    }
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Ok(s.clone()),
        v => Err(Error::Protocol(format!("keys reply item {v:?}"))),
    };
    let int = |v: &redis::Value| match v {
        redis::Value::Int(n) => Ok((*n).max(0) as u64),
        v => Err(Error::Protocol(format!("keys reply item {v:?}"))),
    };
    let next = items
        .first()
        .map(text)
        .transpose()?
        .filter(|s| !s.is_empty());
    let mut keys = Vec::new();
    for row in items[1..].chunks(6) {
        let [key, per, running, holding, blocked, until] = row else {
            return Err(Error::Protocol(format!("keys reply row {row:?}")));
        };
        keys.push(KeyUsage {
            key: text(key)?,
            per_key: int(per)? as u32,
            running: int(running)?,
            holding: int(holding)?,
            blocked: int(blocked)?,
            throttled_until_ms: Some(int(until)?).filter(|t| *t > 0),
        });
    }
    Ok(KeyPage { keys, next })
}
