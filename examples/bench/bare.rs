//! Phase 1's floor rows: one command at a time on a bare tokio socket, with no
//! client library around it, awaited on the runtime the bench runs on (as a
//! producer awaits its enqueues). What a send costs there is Redis's part and
//! the runtime's wake-ups alone: chasquimq's send (`XADD`, as it sends it),
//! the fewest commands a send in RSMQ's layout can make (one `FCALL`), and
//! redjob's own send function, each beside redjob's `Client` (phase 1's
//! `enqueue_raw_send_us`). BENCHMARKS.md, Speed II part 18.

use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The fewest commands a send in RSMQ's layout with Redis's clock makes: the
/// queue's hash read (delay, maxsize, totalsent), `TIME`, the sorted set's
/// member scored by the due ms, the body and `totalsent` in the hash.
const FLOOR_LIBRARY: &str = r#"#!lua name=redjob_bench_floor
redis.register_function('redjob_bench_floor_send', function(keys, args)
  local a = redis.call("HMGET", keys[2], "delay", "maxsize", "totalsent")
  local t = redis.call("TIME")
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call("ZADD", keys[1], ms + (tonumber(a[1]) or 0) * 1000, args[1])
  redis.call("HSET", keys[2], args[1], args[2], "totalsent", (tonumber(a[3]) or 0) + 1)
  return {1, t[2]}
end)
"#;

/// A connection with nothing around its socket.
pub struct Bare {
    socket: TcpStream,
    out: Vec<u8>,
    reply: Vec<u8>,
}

impl Bare {
    /// A socket to `url`'s host and port; `None` for a URL with credentials
    /// or a database (a bare socket sends no `AUTH` or `SELECT`).
    pub async fn connect(url: &str) -> Option<Bare> {
        let rest = url.strip_prefix("redis://")?;
        if rest.contains('@') || rest.trim_end_matches('/').contains('/') {
            return None;
        }
        let socket = TcpStream::connect(rest.trim_end_matches('/')).await.ok()?;
        socket.set_nodelay(true).ok()?;
        Some(Bare {
            socket,
            out: Vec::new(),
            reply: Vec::new(),
        })
    }

    /// Sends `args` as one command and reads its whole reply (RESP2), which
    /// it returns as it came; a reply that is an error is `Err` with its text.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<&[u8], String> {
        self.out.clear();
        pack(&mut self.out, args);
        self.socket
            .write_all(&self.out)
            .await
            .map_err(|e| e.to_string())?;
        self.reply.clear();
        while reply_end(&self.reply, 0) != Some(self.reply.len()) {
            read_more(&mut self.socket, &mut self.reply).await?;
        }
        if self.reply.first() == Some(&b'-') {
            return Err(String::from_utf8_lossy(&self.reply).trim_end().to_owned());
        }
        Ok(&self.reply)
    }

    /// µs per awaited call over `calls` calls of `args(i)`; `None` (and why,
    /// on stderr) when one failed.
    async fn time(&mut self, calls: usize, args: impl Fn(usize) -> Vec<Vec<u8>>) -> Option<f64> {
        let t = Instant::now();
        for i in 0..calls {
            let a = args(i);
            let refs: Vec<&[u8]> = a.iter().map(Vec::as_slice).collect();
            if let Err(e) = self.call(&refs).await {
                eprintln!(
                    "bench: a bare {} failed: {e}",
                    String::from_utf8_lossy(&a[0])
                );
                return None;
            }
        }
        Some(t.elapsed().as_secs_f64() * 1e6 / calls as f64)
    }
}

/// Appends `args` to `out` as one command (RESP2).
pub fn pack(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// What one read of `socket` gets, appended to `buf`; an error once the
/// server closed the connection.
pub async fn read_more(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), String> {
    let mut chunk = [0u8; 16384];
    let n = socket.read(&mut chunk).await.map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("the server closed the connection".into());
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

/// Where the RESP2 reply starting at `at` ends in `b`, once it is whole.
pub fn reply_end(b: &[u8], at: usize) -> Option<usize> {
    let line = at + b.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let n = || -> Option<i64> { std::str::from_utf8(&b[at + 1..line]).ok()?.parse().ok() };
    match *b.get(at)? {
        b'+' | b'-' | b':' => Some(line + 2),
        b'$' => {
            let len = n()?;
            let end = line + 2 + if len < 0 { 0 } else { len as usize + 2 };
            (b.len() >= end).then_some(end)
        }
        b'*' => {
            let mut p = line + 2;
            for _ in 0..n()?.max(0) {
                p = reply_end(b, p)?;
            }
            Some(p)
        }
        _ => None,
    }
}

/// What phase 1's floor rows measured, µs per awaited call.
#[derive(Default)]
pub struct Floor {
    /// chasquimq's send, `XADD` (with `IDMP` from Redis 8.6, as chasquimq 1.3).
    pub xadd: Option<f64>,
    /// The fewest commands of a send in RSMQ's layout, one `FCALL` (7.0+).
    pub layout: Option<f64>,
    /// redjob's own send function with the arguments its client passes.
    pub send: Option<f64>,
}

/// The floor rows, on the server at `url`: queue `q`, which exists, gets
/// `2 x calls` messages (the caller deletes it). `None`s where the server
/// lacks what a row needs.
pub async fn floor(url: &str, q: &str, calls: usize) -> Floor {
    let mut f = Floor::default();
    let Some(mut bare) = Bare::connect(url).await else {
        return f;
    };
    let body = br#"{"type":"bench","args":{"i":1}}"#.to_vec();
    // chasquimq's payload: about this body's size, its own idempotency id
    let stream = b"{chasqui:bench}:stream".to_vec();
    let idmp = bare
        .call(&[b"XADD", &stream, b"IDMP", b"p", b"0", b"*", b"d", &body])
        .await
        .is_ok();
    f.xadd = bare
        .time(calls, |i| {
            let mut a = vec![b"XADD".to_vec(), stream.clone()];
            if idmp {
                a.extend([
                    b"IDMP".to_vec(),
                    b"p".to_vec(),
                    format!("{i:026}").into_bytes(),
                ]);
            }
            a.extend([b"MAXLEN", &b"~"[..], b"1000000", b"*", b"d"].map(<[u8]>::to_vec));
            a.push(body.clone());
            a
        })
        .await;
    let _ = bare.call(&[b"DEL", &stream]).await;
    let (zset, hash) = (format!("rsmq:{q}"), format!("rsmq:{q}:Q"));
    let ids: Vec<String> = (0..calls).map(|i| format!("bare{i:028}")).collect();
    if bare
        .call(&[b"FUNCTION", b"LOAD", b"REPLACE", FLOOR_LIBRARY.as_bytes()])
        .await
        .is_ok()
    {
        f.layout = bare
            .time(calls, |i| {
                [
                    &b"FCALL"[..],
                    b"redjob_bench_floor_send",
                    b"2",
                    zset.as_bytes(),
                    hash.as_bytes(),
                    ids[i].as_bytes(),
                    &body,
                ]
                .map(<[u8]>::to_vec)
                .to_vec()
            })
            .await;
        let _ = bare
            .call(&[b"FUNCTION", b"DELETE", b"redjob_bench_floor"])
            .await;
    }
    // redjob's send function as its client calls it for a queue no worker
    // waits on (send.lua's lean call: two keys, then the channel and the
    // message's id suffix, when and body), once a send loaded it; a server
    // that holds an earlier release's library too (`REDIS_URL`) does not say
    // which one this client calls, and the row is left out
    if let Ok(list) = bare
        .call(&[b"FUNCTION", b"LIST", b"LIBRARYNAME", b"redjob_send_*"])
        .await
    {
        let text = String::from_utf8_lossy(list);
        // (each library's name, and its one function's, which is the same)
        let mut names: Vec<&str> = text
            .split("\r\n")
            .filter(|l| l.starts_with("redjob_send_"))
            .collect();
        names.sort_unstable();
        names.dedup();
        if names.len() > 1 {
            eprintln!(
                "bare send function: {} redjob_send_* libraries on this server, not timed",
                names.len()
            );
        }
        if let [name] = names[..] {
            let name = name.to_owned();
            let keys = ["", ":Q"].map(|s| format!("rsmq:{q}{s}"));
            let channel = format!("rsmq:rt:{q}");
            f.send = bare
                .time(calls, |i| {
                    let mut a = vec![b"FCALL".to_vec(), name.clone().into_bytes(), b"2".to_vec()];
                    a.extend(keys.iter().map(|k| k.clone().into_bytes()));
                    a.push(channel.clone().into_bytes());
                    // 22 characters, as the client's suffixes
                    a.extend([
                        format!("bare{i:018}").into_bytes(),
                        Vec::new(),
                        body.clone(),
                    ]);
                    a
                })
                .await;
        }
    }
    f
}
