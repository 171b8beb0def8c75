//! Target 5's floor: enqueue → start with nothing around the sockets. A
//! producer process and a worker process, as the peer harness's latency phase
//! runs them (`bench start-floor worker …`, then `bench start-floor produce
//! …`; `start_floor.py` alternates them with the harness's binaries), each a
//! bare tokio socket on a multi-threaded runtime. The worker stamps a job as
//! it reads it off its socket (no task, no decoding, no lease kept), so what
//! is measured is Redis's part, the two wake-ups and the sockets: the least
//! any client of the layout could take. Kinds:
//!
//! - `stream`: chasquimq's commands, `XADD` and `XREADGROUP … BLOCK`;
//! - `layout`: the fewest commands of a hand-off in RSMQ's layout with
//!   redjob's guarantees, in one `FCALL` (the queue's hash, `TIME`, the
//!   worker's subscriber counted, `PUBLISH`, the lease count, the leased
//!   member, the body and the counts), the worker subscribed;
//! - `plain`: RSMQ's layout with nothing of redjob's (no subscriber counted,
//!   no lease count);
//! - `settled`: `layout`, and the worker settles each job once it has
//!   stamped it (the fewest commands: the member, the body's fields, the
//!   lease count, the history's index and entry), as a worker must.
//!
//! The producer pipelines a `TIME` before each `FCALL`, as redjob's client
//! does while a worker waits, so that Redis writes the worker's message
//! before the producer's reply (BENCHMARKS.md, Speed II part 14).
//! BENCHMARKS.md, Speed II part 27.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::bare::{pack, read_more, reply_end};

const LIBRARY: &str = r#"#!lua name=redjob_start_floor
local function send(keys, args, guarded)
  local a = redis.call("HMGET", keys[2], "vt", "delay", "totalsent", "floor:worker", "floor:paused")
  local t = redis.call("TIME")
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ch = a[4]
  if ch and not a[5] and (not guarded or redis.call("PUBSUB", "NUMSUB", ch)[2] > 0) then
    local ends = ms + tonumber(a[1]) * 1000
    -- Redis's clock at the send, in µs, for the worker to split its lag at
    redis.call("PUBLISH", ch, "T" .. t[1] .. string.sub("00000" .. t[2], -6) .. " " ..
      args[1] .. " " .. args[2])
    if guarded then redis.call("HINCRBY", keys[3], math.floor(ends / 1000), 1) end
    redis.call("ZADD", keys[1], ends, args[1])
    redis.call("HSET", keys[2], args[1], args[2], "totalsent", (tonumber(a[3]) or 0) + 1,
      args[1] .. ":rc", 1, "floor:handed", args[1])
  else
    redis.call("ZADD", keys[1], ms + (tonumber(a[2]) or 0) * 1000, args[1])
    redis.call("HSET", keys[2], args[1], args[2], "totalsent", (tonumber(a[3]) or 0) + 1)
  end
  return {1, t[2]}
end
-- a handed job's settle, with the history: the fewest commands
redis.register_function('redjob_start_floor_ack', function(keys, args)
  local id = args[1]
  redis.call("ZREM", keys[1], id)
  redis.call("HDEL", keys[2], id, id .. ":rc", "floor:handed")
  redis.call("HINCRBY", keys[3], args[2], -1)
  redis.call("LPUSH", keys[4], id)
  redis.call("HSET", keys[5], id, '{"at":' .. args[3] .. ',"state":"done"}')
  return 1
end)
redis.register_function('redjob_start_floor_layout', function(k, a) return send(k, a, true) end)
redis.register_function('redjob_start_floor_plain', function(k, a) return send(k, a, false) end)
"#;

const ZSET: &str = "rsmq:floor";
const HASH: &str = "rsmq:floor:Q";
const COUNTS: &str = "rsmq:floor:leases";
const CHANNEL: &str = "rsmq:floor:worker";
const STREAM: &str = "floor:stream";
const HISTORY: &str = "rsmq:floor:history:ids";
const HISTORY_HASH: &str = "rsmq:floor:history:Q";

/// `bench start-floor worker|produce --kind stream|layout|plain|settled …`: see the
/// module's header; the flags are the peer harness's (`--n`, `--rate`,
/// `--out`, `--ready-file`, `--deadline-s`), the server is `REDIS_HOST` and
/// `REDIS_PORT`.
pub fn main(args: &[String]) {
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let num = |name: &str, or: f64| flag(name).and_then(|v| v.parse().ok()).unwrap_or(or);
    let kind = flag("--kind").unwrap_or_else(|| "layout".into());
    if !["stream", "layout", "plain", "settled"].contains(&kind.as_str()) {
        eprintln!("--kind is stream, layout, plain or settled");
        std::process::exit(2);
    }
    let addr = format!(
        "{}:{}",
        std::env::var("REDIS_HOST").unwrap_or_else(|_| "127.0.0.1".into()),
        std::env::var("REDIS_PORT").unwrap_or_else(|_| "6390".into())
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let n = num("--n", 2000.0) as usize;
    let out = match args.first().map(String::as_str) {
        Some("worker") => rt.block_on(worker(
            &addr,
            &kind,
            n,
            flag("--ready-file"),
            Duration::from_secs_f64(num("--deadline-s", 30.0)),
        )),
        Some("produce") => rt.block_on(produce(&addr, &kind, n, num("--rate", 400.0))),
        _ => Err("start-floor worker|produce".into()),
    };
    match out {
        Ok(json) => match flag("--out") {
            Some(path) => std::fs::write(path, json).expect("write --out"),
            None => println!("{json}"),
        },
        Err(e) => {
            eprintln!("bench start-floor: {e}");
            std::process::exit(1);
        }
    }
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// A socket and what it read that is not yet taken.
struct Conn {
    socket: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(addr: &str) -> Result<Conn, String> {
        let socket = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        socket.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Conn {
            socket,
            buf: Vec::new(),
        })
    }

    async fn send(&mut self, commands: &[&[&[u8]]]) -> Result<(), String> {
        let mut out = Vec::new();
        for args in commands {
            pack(&mut out, args);
        }
        self.socket.write_all(&out).await.map_err(|e| e.to_string())
    }

    /// The next whole reply (RESP2), as it came; an error reply is `Err`.
    async fn reply(&mut self) -> Result<Vec<u8>, String> {
        loop {
            if let Some(end) = reply_end(&self.buf, 0) {
                let r: Vec<u8> = self.buf.drain(..end).collect();
                if r.first() == Some(&b'-') {
                    return Err(String::from_utf8_lossy(&r).trim_end().to_owned());
                }
                return Ok(r);
            }
            read_more(&mut self.socket, &mut self.buf).await?;
        }
    }

    async fn call(&mut self, args: &[&[u8]]) -> Result<Vec<u8>, String> {
        self.send(&[args]).await?;
        self.reply().await
    }
}

/// The producer's stamps (`"t":<ms>`) in a reply, each job's once.
fn stamps(reply: &[u8]) -> Vec<f64> {
    let mut out = Vec::new();
    let mut rest = reply;
    while let Some(p) = rest.windows(4).position(|w| w == b"\"t\":") {
        rest = &rest[p + 4..];
        let end = rest
            .iter()
            .position(|c| !(c.is_ascii_digit() || *c == b'.'))
            .unwrap_or(rest.len());
        if let Some(t) = std::str::from_utf8(&rest[..end])
            .ok()
            .and_then(|s| s.parse().ok())
        {
            out.push(t);
        }
    }
    out
}

/// Settles the job of a handed message (`T<µs> <id> <body>`) as a worker
/// would once it ran: `redjob_start_floor_ack`.
async fn settle(c: &mut Conn, reply: &[u8]) -> Result<(), String> {
    let Some((us, id)) = handed(reply) else {
        return Err("a message without its send's time".into());
    };
    // the lease's second, as the send counted it (a lease of 30 s)
    let second = (us / 1000 + 30_000) / 1000;
    c.call(&[
        b"FCALL",
        b"redjob_start_floor_ack",
        b"5",
        ZSET.as_bytes(),
        HASH.as_bytes(),
        COUNTS.as_bytes(),
        HISTORY.as_bytes(),
        HISTORY_HASH.as_bytes(),
        id,
        second.to_string().as_bytes(),
        (us / 1000).to_string().as_bytes(),
    ])
    .await
    .map(drop)
}

/// Redis's clock at the send (µs) and the job's id, which a message in
/// the layout carries (`T<µs> <id> <body>`).
fn handed(reply: &[u8]) -> Option<(u64, &[u8])> {
    // the payload's first byte: the only one at the start of a RESP line
    let at = reply.windows(3).position(|w| w == b"\r\nT")? + 3;
    let mut words = reply[at..].splitn(3, |c| *c == b' ');
    let us = std::str::from_utf8(words.next()?).ok()?.parse().ok()?;
    Some((us, words.next()?))
}

async fn worker(
    addr: &str,
    kind: &str,
    n: usize,
    ready: Option<String>,
    deadline: Duration,
) -> Result<String, String> {
    let mut c = Conn::open(addr).await?;
    let mut sub = Conn::open(addr).await?;
    if kind == "stream" {
        c.call(&[
            b"XGROUP",
            b"CREATE",
            STREAM.as_bytes(),
            b"g",
            b"$",
            b"MKSTREAM",
        ])
        .await?;
    } else {
        c.call(&[b"FUNCTION", b"LOAD", b"REPLACE", LIBRARY.as_bytes()])
            .await?;
        sub.call(&[b"SUBSCRIBE", CHANNEL.as_bytes()]).await?;
        let mut hset: Vec<&[u8]> = vec![b"HSET", HASH.as_bytes()];
        hset.extend([
            &b"vt"[..],
            b"30",
            b"delay",
            b"0",
            b"maxsize",
            b"65536",
            b"totalsent",
            b"0",
            b"floor:worker",
            CHANNEL.as_bytes(),
        ]);
        c.call(&hset).await?;
    }
    if let Some(f) = ready {
        std::fs::write(f, "ready").map_err(|e| e.to_string())?;
    }
    let mut samples = Vec::with_capacity(n);
    // (the producer's stamp → Redis's clock at the send, that → the worker's
    // read), for the layout's messages
    let mut split = Vec::new();
    let end = Instant::now() + deadline;
    while samples.len() < n {
        let left = end.saturating_duration_since(Instant::now());
        let read = async {
            if kind == "stream" {
                c.call(&[
                    b"XREADGROUP",
                    b"GROUP",
                    b"g",
                    b"c",
                    b"COUNT",
                    b"64",
                    b"BLOCK",
                    b"0",
                    b"STREAMS",
                    STREAM.as_bytes(),
                    b">",
                ])
                .await
            } else {
                sub.reply().await
            }
        };
        let reply = match tokio::time::timeout(left, read).await {
            Ok(r) => r?,
            Err(_) => break,
        };
        let at = now_ms();
        if kind == "settled" {
            settle(&mut c, &reply).await?;
        }
        let stamped = stamps(&reply);
        if let (Some(&t), Some((us, _))) = (stamped.first(), handed(&reply)) {
            let redis = us as f64 / 1000.0;
            split.push((redis - t, at - redis));
        }
        samples.extend(stamped.into_iter().map(|t| at - t));
    }
    Ok(
        serde_json::json!({"kind": kind, "n": n, "received": samples.len(),
        "samples_ms": samples, "split_ms": split})
        .to_string(),
    )
}

async fn produce(addr: &str, kind: &str, n: usize, rate: f64) -> Result<String, String> {
    let mut c = Conn::open(addr).await?;
    let name = format!(
        "redjob_start_floor_{}",
        if kind == "settled" { "layout" } else { kind }
    );
    let t0 = Instant::now();
    for i in 0..n {
        let target = t0 + Duration::from_secs_f64(i as f64 / rate);
        let now = Instant::now();
        if target > now {
            tokio::time::sleep(target - now).await;
        }
        let body = format!(r#"{{"i":{i},"t":{}}}"#, now_ms());
        if kind == "stream" {
            c.call(&[b"XADD", STREAM.as_bytes(), b"*", b"d", body.as_bytes()])
                .await?;
        } else {
            let id = format!("floor{i:027}");
            c.send(&[
                &[b"TIME"],
                &[
                    b"FCALL",
                    name.as_bytes(),
                    b"3",
                    ZSET.as_bytes(),
                    HASH.as_bytes(),
                    COUNTS.as_bytes(),
                    id.as_bytes(),
                    body.as_bytes(),
                ],
            ])
            .await?;
            c.reply().await?;
            c.reply().await?;
        }
    }
    Ok(
        serde_json::json!({"kind": kind, "n": n, "elapsed_s": t0.elapsed().as_secs_f64()})
            .to_string(),
    )
}
