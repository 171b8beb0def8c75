//! Phase 18: the floor of processing in RSMQ's layout, in Redis CPU per job.
//! The commands any fetch and settle must run for a job (and the history's
//! writes), sent as plain pipelined commands in batches of 256, with no
//! script and no worker: what is left of Redis's share once nothing else
//! is paid. A fetch reads the due ids (`ZRANGEBYSCORE … LIMIT`) then their
//! bodies (`HMGET`) and re-scores them to their lease end (`ZADD`); an ack
//! checks their tokens (`ZMSCORE`), removes them (`ZREM`, `HDEL`). With the
//! history, the ack also enters each job (`RPUSH` to the history's list of
//! ids, `HSET` of an entry with the body) and trims as many old entries
//! (`LPOP`, `HDEL`), the history held at 1,000 entries. Then the
//! same work by two minimal Lua scripts (one call per fetch and per ack, as
//! the worker's): what scripting itself adds, before any of redjob's logic.

use crate::phases::{Figures, Settings};
use crate::redis::{Server, cpu_us};

const BATCH: usize = 256;

/// Fills queue `q` with `n` due jobs in RSMQ's layout; returns the bodies' length.
async fn fill(con: &mut redis::aio::MultiplexedConnection, q: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut z = redis::cmd("ZADD");
        z.arg(format!("rsmq:{q}"));
        let mut h = redis::cmd("HSET");
        h.arg(format!("rsmq:{q}:Q"));
        for &i in chunk {
            let id = format!("{:032}", i);
            z.arg(1000 + i as u64).arg(&id);
            h.arg(&id)
                .arg(format!(r#"{{"type":"bench","args":{{"i":{i}}}}}"#));
        }
        let _: () = redis::pipe()
            .add_command(z)
            .ignore()
            .add_command(h)
            .ignore()
            .query_async(con)
            .await
            .expect("fill");
    }
}

/// Drains queue `q` by the floor's commands; `history` adds its writes.
/// Returns Redis CPU µs per job.
async fn drain(
    con: &mut redis::aio::MultiplexedConnection,
    q: &str,
    n: usize,
    history: bool,
) -> f64 {
    let (zq, hq) = (format!("rsmq:{q}"), format!("rsmq:{q}:Q"));
    let (zh, hh) = (
        format!("rsmq:{q}:history:ids"),
        format!("rsmq:{q}:history:Q"),
    );
    let lease = 10_000_000_000u64;
    let cpu0 = cpu_us(con).await;
    let mut done = 0;
    let mut at = 0u64;
    while done < n {
        // fetch: the due ids, then their bodies and their lease
        let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&zq)
            .arg("-inf")
            .arg(1_000_000_000u64)
            .arg("LIMIT")
            .arg(0)
            .arg(BATCH)
            .query_async(con)
            .await
            .expect("range");
        if ids.is_empty() {
            break;
        }
        let mut z = redis::cmd("ZADD");
        z.arg(&zq);
        for id in &ids {
            z.arg(lease + 1).arg(id);
        }
        let (bodies,): (Vec<String>,) = redis::pipe()
            .cmd("HMGET")
            .arg(&hq)
            .arg(&ids)
            .add_command(z)
            .ignore()
            .query_async(con)
            .await
            .expect("fetch");
        // ack: the fence, then the removal
        let mut p = redis::pipe();
        p.cmd("ZMSCORE").arg(&zq).arg(&ids).ignore();
        p.cmd("ZREM").arg(&zq).arg(&ids).ignore();
        p.cmd("HDEL").arg(&hq).arg(&ids).ignore();
        if history {
            at += 1;
            let mut z = redis::cmd("RPUSH");
            z.arg(&zh);
            let mut h = redis::cmd("HSET");
            h.arg(&hh);
            for (id, body) in ids.iter().zip(&bodies) {
                z.arg(id);
                h.arg(id).arg(format!(
                    "h1 succeeded {at} 1 {}\n\n\n{{\"n\":1,\"start\":{at},\"end\":{at},\"outcome\":\"ok\",\"worker\":\"w\",\"host\":\"h\"}}\n{body}",
                    body.len()
                ));
            }
            p.add_command(z).ignore().add_command(h).ignore();
        }
        let () = p.query_async(con).await.expect("ack");
        if history {
            // trim to 1,000 entries
            let len: usize = redis::cmd("LLEN")
                .arg(&zh)
                .query_async(con)
                .await
                .expect("len");
            if len > 1000 {
                let old: Vec<String> = redis::cmd("LPOP")
                    .arg(&zh)
                    .arg(len - 1000)
                    .query_async(con)
                    .await
                    .expect("oldest");
                let () = redis::pipe()
                    .cmd("HDEL")
                    .arg(&hh)
                    .arg(&old)
                    .ignore()
                    .query_async(con)
                    .await
                    .expect("trim");
            }
        }
        done += ids.len();
    }
    (cpu_us(con).await - cpu0) / n as f64
}

/// The least a fetch script does: lease up to ARGV[1] due jobs (re-scored to
/// ARGV[2]) and return them with their bodies.
const FETCH: &str = r#"
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[3], "LIMIT", 0, ARGV[1])
if #ids == 0 then return {} end
local bodies = redis.call("HMGET", KEYS[2], unpack(ids))
local z, out = {}, {}
for i, id in ipairs(ids) do
  z[2 * i - 1] = ARGV[2]; z[2 * i] = id
  out[2 * i - 1] = id; out[2 * i] = bodies[i]
end
redis.call("ZADD", KEYS[1], unpack(z))
return out
"#;

/// The least an ack script does: the fence (each job still at its token),
/// the removal, and with ARGV[2] = "1" the history's entry (the body read
/// back, an attempt record around it) and its trim to 1,000.
const ACK: &str = r#"
local ids, tokens = {}, {}
for i = 3, #ARGV, 2 do ids[#ids + 1] = ARGV[i]; tokens[#tokens + 1] = ARGV[i + 1] end
local scores = redis.call("ZMSCORE", KEYS[1], unpack(ids))
local gone = {}
for i, id in ipairs(ids) do
  if scores[i] and tonumber(scores[i]) == tonumber(tokens[i]) then gone[#gone + 1] = id end
end
if #gone == 0 then return 0 end
local bodies = ARGV[2] == "1" and redis.call("HMGET", KEYS[2], unpack(gone))
redis.call("ZREM", KEYS[1], unpack(gone))
redis.call("HDEL", KEYS[2], unpack(gone))
if bodies then
  local at = ARGV[1]
  local hh = {}
  for i, id in ipairs(gone) do
    local body = bodies[i] or ""
    hh[2 * i - 1] = id
    hh[2 * i] = "h1 succeeded " .. at .. " 1 " .. #body .. "\n\n\n" .. '{"n":1,"start":' .. at .. ',"end":' .. at
      .. ',"outcome":"ok","worker":"w","host":"h"}\n' .. body
  end
  redis.call("RPUSH", KEYS[3], unpack(gone))
  redis.call("HSET", KEYS[4], unpack(hh))
  local over = redis.call("LLEN", KEYS[3]) - 1000
  if over > 0 then
    redis.call("HDEL", KEYS[4], unpack(redis.call("LPOP", KEYS[3], over)))
  end
end
return #gone
"#;

/// Drains queue `q` by the two minimal scripts above; Redis CPU µs per job.
async fn drain_scripted(
    con: &mut redis::aio::MultiplexedConnection,
    q: &str,
    n: usize,
    history: bool,
) -> f64 {
    let keys = [
        format!("rsmq:{q}"),
        format!("rsmq:{q}:Q"),
        format!("rsmq:{q}:history:ids"),
        format!("rsmq:{q}:history:Q"),
    ];
    let (fetch, ack) = (redis::Script::new(FETCH), redis::Script::new(ACK));
    let token = "10000000000.501";
    let cpu0 = cpu_us(con).await;
    let mut done = 0;
    let mut at = 0u64;
    while done < n {
        let got: Vec<String> = fetch
            .key(&keys[0])
            .key(&keys[1])
            .arg(BATCH)
            .arg(token)
            .arg(1_000_000_000u64)
            .invoke_async(con)
            .await
            .expect("fetch");
        if got.is_empty() {
            break;
        }
        at += 1;
        let mut inv = ack.prepare_invoke();
        for k in &keys {
            inv.key(k);
        }
        inv.arg(at).arg(if history { "1" } else { "0" });
        for pair in got.chunks(2) {
            inv.arg(&pair[0]).arg(token);
        }
        let acked: usize = inv.invoke_async(con).await.expect("ack");
        assert_eq!(acked * 2, got.len(), "every job passed its fence");
        done += acked;
    }
    (cpu_us(con).await - cpu0) / n as f64
}

pub async fn floor(s: &Settings, f: &mut Figures) {
    let server = Server::start();
    let mut con = server.con().await;
    // warm up, and the history at its count
    fill(&mut con, "floor_warm", 2000).await;
    drain(&mut con, "floor_warm", 2000, true).await;
    for _ in 0..2 {
        fill(&mut con, "floor_plain", s.n).await;
        f.floor_plain_us
            .push(drain(&mut con, "floor_plain", s.n, false).await);
        fill(&mut con, "floor_warm", s.n).await;
        f.floor_history_us
            .push(drain(&mut con, "floor_warm", s.n, true).await);
        fill(&mut con, "floor_plain", s.n).await;
        f.floor_scripted_us
            .push(drain_scripted(&mut con, "floor_plain", s.n, false).await);
        fill(&mut con, "floor_warm", s.n).await;
        f.floor_scripted_history_us
            .push(drain_scripted(&mut con, "floor_warm", s.n, true).await);
    }
}
