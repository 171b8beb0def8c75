//! RESP2 replies read from a lane's buffer into `redis::Value`s, as the
//! `redis` crate's parser reads them, without its parser combinators: a fetch
//! of 256 jobs is 768 values, and on the worker's 2-core bench that parser
//! took about a tenth of the worker's CPU.
//!
//! [`Scan`] finds where a reply ends, resuming across reads (so a reply that
//! arrives in many reads is walked once, its bulk strings skipped by their
//! lengths); [`value`] then builds the complete reply. An error reply (`-…`)
//! is handed to the `redis` crate, which alone builds its `ServerError`.

use redis::{ErrorKind, RedisError, RedisResult, Value};

/// How deep arrays may nest, as the `redis` crate allows.
const MAX_DEPTH: usize = 100;

/// Where a reply ends, found across reads.
#[derive(Default)]
pub(super) struct Scan {
    /// Where the reply being scanned starts.
    start: usize,
    /// The next element's first byte.
    pos: usize,
    /// Elements still owed by each array open around `pos`.
    open: Vec<usize>,
}

impl Scan {
    /// The end of the reply starting at `from` in `buf` (its first byte past
    /// it) once `buf` holds all of it; `None` while more bytes are needed. A
    /// call with the same `from` goes on where the last one stopped.
    pub fn end(&mut self, buf: &[u8], from: usize) -> RedisResult<Option<usize>> {
        if from != self.start || self.pos < from {
            *self = Scan {
                start: from,
                pos: from,
                open: Vec::new(),
            };
        }
        loop {
            let Some(eol) = line_end(buf, self.pos + 1)? else {
                return Ok(None);
            };
            let next = eol + 2;
            match buf[self.pos] {
                b'+' | b'-' | b':' => self.pos = next,
                b'$' => {
                    let n = int(&buf[self.pos + 1..eol])?;
                    if n < 0 {
                        self.pos = next;
                    } else {
                        let end = usize::try_from(n)
                            .ok()
                            .and_then(|n| next.checked_add(n)?.checked_add(2))
                            .ok_or_else(|| invalid("bulk string too long"))?;
                        if buf.len() < end {
                            return Ok(None);
                        }
                        if &buf[end - 2..end] != b"\r\n" {
                            return Err(invalid("bulk string not ended by CRLF"));
                        }
                        self.pos = end;
                    }
                }
                b'*' => {
                    let n = int(&buf[self.pos + 1..eol])?;
                    self.pos = next;
                    if n > 0 {
                        if self.open.len() >= MAX_DEPTH {
                            return Err(invalid("arrays nested too deep"));
                        }
                        self.open.push(usize::try_from(n).unwrap_or(usize::MAX));
                        continue;
                    }
                }
                other => return Err(invalid(&format!("unknown reply type {:?}", other as char))),
            }
            // an element ended: so do the arrays it was the last of
            loop {
                match self.open.last_mut() {
                    None => {
                        let end = self.pos;
                        self.start = end;
                        return Ok(Some(end));
                    }
                    Some(left) if *left > 1 => {
                        *left -= 1;
                        break;
                    }
                    Some(_) => {
                        self.open.pop();
                    }
                }
            }
        }
    }
}

/// The reply at `*pos` of `buf`, which [`Scan::end`] found complete; `*pos`
/// moves past it.
pub(super) fn value(buf: &[u8], pos: &mut usize) -> RedisResult<Value> {
    read(buf, pos, 0)
}

fn read(buf: &[u8], pos: &mut usize, depth: usize) -> RedisResult<Value> {
    let start = *pos;
    let eol = line_end(buf, start + 1)?.ok_or_else(|| invalid("reply cut short"))?;
    let line = &buf[start + 1..eol];
    *pos = eol + 2;
    Ok(match buf[start] {
        b'+' if line == b"OK" => Value::Okay,
        b'+' => Value::SimpleString(
            std::str::from_utf8(line)
                .map_err(|_| invalid("simple string not UTF-8"))?
                .to_owned(),
        ),
        b':' => Value::Int(int(line)?),
        b'-' => redis::parse_redis_value(&buf[start..*pos])?,
        b'$' => {
            let n = int(line)?;
            if n < 0 {
                return Ok(Value::Nil);
            }
            let end = usize::try_from(n)
                .ok()
                .and_then(|n| pos.checked_add(n))
                .filter(|end| end.checked_add(2).is_some_and(|e| e <= buf.len()))
                .ok_or_else(|| invalid("reply cut short"))?;
            let bytes = buf[*pos..end].to_vec();
            *pos = end + 2;
            Value::BulkString(bytes)
        }
        b'*' => {
            let n = int(line)?;
            if n < 0 {
                return Ok(Value::Nil);
            }
            if depth >= MAX_DEPTH {
                return Err(invalid("arrays nested too deep"));
            }
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            // each element takes 3 bytes at least: no more room than the buffer holds
            let mut items = Vec::with_capacity(n.min((buf.len() - *pos) / 3));
            for _ in 0..n {
                items.push(read(buf, pos, depth + 1)?);
            }
            Value::Array(items)
        }
        other => return Err(invalid(&format!("unknown reply type {:?}", other as char))),
    })
}

/// Where the line starting at `from` ends (its `\r`), or `None` when `buf`
/// does not hold all of it yet.
fn line_end(buf: &[u8], from: usize) -> RedisResult<Option<usize>> {
    let Some(rest) = buf.get(from..) else {
        return Ok(None);
    };
    let Some(cr) = rest.iter().position(|&b| b == b'\r') else {
        return Ok(None);
    };
    match rest.get(cr + 1) {
        None => Ok(None),
        Some(b'\n') => Ok(Some(from + cr)),
        Some(_) => Err(invalid("line not ended by CRLF")),
    }
}

fn int(line: &[u8]) -> RedisResult<i64> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("not a number"))
}

fn invalid(what: &str) -> RedisError {
    RedisError::from((ErrorKind::Parse, "invalid RESP reply", what.to_string()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use redis::Value;

    use super::{Scan, value};

    /// `v` as RESP2 bytes.
    fn encode(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Nil => out.extend_from_slice(b"$-1\r\n"),
            Value::Okay => out.extend_from_slice(b"+OK\r\n"),
            Value::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            Value::SimpleString(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            Value::BulkString(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Value::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for item in items {
                    encode(item, out);
                }
            }
            other => unreachable!("not generated: {other:?}"),
        }
    }

    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            Just(Value::Okay),
            any::<i64>().prop_map(Value::Int),
            "[a-zA-Z0-9 ]{0,12}".prop_map(Value::SimpleString),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::BulkString),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            proptest::collection::vec(inner, 0..8).prop_map(Value::Array)
        })
    }

    /// The replies in `bytes`, fed to a scan `chunk` bytes at a time.
    fn replies(bytes: &[u8], chunk: usize) -> redis::RedisResult<Vec<Value>> {
        let mut scan = Scan::default();
        let (mut out, mut start, mut have) = (Vec::new(), 0, 0);
        loop {
            have = (have + chunk).min(bytes.len());
            let buf = &bytes[..have];
            while start < have
                && let Some(end) = scan.end(buf, start)?
            {
                let mut pos = start;
                out.push(value(buf, &mut pos)?);
                assert_eq!(pos, end);
                start = end;
            }
            if have == bytes.len() {
                return Ok(out);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn replies_read_as_the_redis_crate_reads_them(
            vs in proptest::collection::vec(any_value(), 1..4),
            chunk in 1usize..64,
        ) {
            let mut bytes = Vec::new();
            for v in &vs {
                encode(v, &mut bytes);
            }
            let ours = replies(&bytes, chunk).unwrap();
            prop_assert_eq!(ours.len(), vs.len());
            let mut at = 0;
            for (i, v) in vs.iter().enumerate() {
                let mut one = Vec::new();
                encode(v, &mut one);
                prop_assert_eq!(&ours[i], &redis::parse_redis_value(&bytes[at..at + one.len()]).unwrap());
                at += one.len();
            }
        }

        #[test]
        fn garbage_is_an_error_or_a_value_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), chunk in 1usize..16) {
            let _ = replies(&bytes, chunk);
        }
    }

    #[test]
    fn server_errors_are_the_redis_crates() {
        for line in [
            &b"-ERR unknown command\r\n"[..],
            b"-NOSCRIPT No matching script\r\n",
            b"-READONLY x\r\n",
            b"-MYCODE\r\n",
        ] {
            let ours = replies(line, 5).unwrap();
            assert_eq!(ours, vec![redis::parse_redis_value(line).unwrap()]);
            assert!(matches!(ours[0], Value::ServerError(_)), "{ours:?}");
        }
    }

    #[test]
    fn a_scan_starts_afresh_for_a_reply_at_another_place() {
        let mut scan = Scan::default();
        let first = b"*2\r\n:1\r\n$3\r\nabc\r\n";
        assert_eq!(scan.end(&first[..7], 0).unwrap(), None);
        assert_eq!(scan.end(first, 0).unwrap(), Some(first.len()));
        // the buffer emptied, the next reply at its start
        let second = b":42\r\n";
        assert_eq!(scan.end(second, 0).unwrap(), Some(second.len()));
        let mut pos = 0;
        assert_eq!(value(second, &mut pos).unwrap(), Value::Int(42));
        // cut short, then the same reply whole
        let third = b"$5\r\nhello\r\n";
        assert_eq!(scan.end(&third[..9], 0).unwrap(), None);
        assert_eq!(scan.end(third, 0).unwrap(), Some(third.len()));
    }

    #[test]
    fn a_nil_array_and_deep_nesting() {
        assert_eq!(replies(b"*-1\r\n", 2).unwrap(), vec![Value::Nil]);
        let deep = "*1\r\n".repeat(101) + ":1\r\n";
        assert!(replies(deep.as_bytes(), 1000).is_err());
        let ok = "*1\r\n".repeat(100) + ":1\r\n";
        assert_eq!(replies(ok.as_bytes(), 7).unwrap().len(), 1);
    }
}
