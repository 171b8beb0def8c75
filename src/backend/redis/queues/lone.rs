//! A lone message's send, packed by hand: the call an application makes for
//! each job it enqueues one at a time.
//!
//! It is send.lua's lone call through the send's function, as the general
//! send in send.rs makes it, with what that path builds for any batch left
//! out: no `redis` command or pipeline (their arguments, packing and reply
//! composing), no per-message tables, and the call written as RESP straight
//! into one buffer that a lane writes as it is. Where no lane takes it, the
//! same commands go to the multiplexer as a pipeline. Its replies are read as
//! the general send reads them.

use super::Rsmq;
use super::send::{Call, Lone, queue_id};
use crate::backend::redis::functions;
use crate::backend::redis::keys::QueueKeys;
use crate::backend::redis::scripts::Reply;
use crate::contract::queues::{SendMessage, Sent, When, validate};
use crate::id::random_suffix;
use crate::{Error, JobId, Result};

impl Rsmq {
    /// Sends `m` alone when it is a lone call of the send's function: a plain
    /// message (neither unique nor keyed) at priority 0, not delayed, from a
    /// handle on one server that waits for no replicas and calls the
    /// function. `None` when it is not one, or when the function was missing
    /// (loaded now) or refused (the script from now on): nothing was written
    /// then, and the general send goes.
    pub(super) async fn send_lone(&self, queue: &str, m: &SendMessage) -> Result<Option<Sent>> {
        if m.unique.is_some()
            || m.keyed.is_some()
            || m.priority != 0
            || matches!(m.when, When::After(_))
            || self.wait.is_some()
            || self.ns.is_cluster()
            || !self.send_fn.usable()
        {
            return Ok(None);
        }
        if let When::AtUnixMs(at) = m.when {
            validate::at_ms(at)?;
        }
        let k = self.ns.queue_shared(queue);
        let suffix = random_suffix();
        let queue_id = queue_id(queue);
        // as the general send: lean while the handle's last send to the queue
        // found no worker waiting, a TIME first while the last found one
        let call = LoneCall {
            k: &k,
            m,
            suffix: &suffix,
            lone: self.lone_form(queue_id),
            time: self.time_first(true),
            always: self.realtime,
        };
        let (packed, count) = (call.packed(), call.count());
        let mut con = self.con.clone();
        let mut replies = con.packed(&packed, count, || call.pipeline()).await?;
        if let Some(i) = replies
            .iter()
            .position(|v| matches!(v, redis::Value::ServerError(_)))
        {
            let error = match replies.swap_remove(i).extract_error() {
                Err(e) => Error::from(e),
                Ok(v) => Error::Protocol(format!("send: {v:?}")),
            };
            match functions::failure(&error) {
                // not loaded: loaded, and the general send calls it
                Some(functions::Failure::NotFound) => {
                    self.send_fn.load(&mut con, &functions::SEND).await?;
                    return Ok(None);
                }
                // FCALL refused: the script, from now on
                Some(functions::Failure::Refused) => {
                    self.send_fn.give_up();
                    return Ok(None);
                }
                None => return Err(error),
            }
        }
        if replies.len() != count {
            let n = replies.len();
            return Err(Error::Protocol(format!(
                "send: {n} replies to {count} commands"
            )));
        }
        let reply = replies.pop().unwrap_or(redis::Value::Nil);
        let (code, mut r) = Reply::status(&reply)?;
        match code {
            1 => {
                let id = JobId::from_parts(r.bytes()?, &suffix)?;
                // the reply ends with whether a worker waited
                if let Ok(waited) = r.int() {
                    self.note_waited(queue_id, waited == 1);
                }
                Ok(Some(Sent::added(id)))
            }
            -1 => Err(Error::QueueNotFound { name: queue.into() }),
            -2 => {
                let size = r.int()? as usize;
                let max = r.int()? as usize;
                Err(Error::MessageTooLarge { size, max })
            }
            c => Err(Error::Protocol(format!("send status {c}"))),
        }
    }
}

/// What one lone call sends: send.lua's lone call through the send's
/// function, a `TIME` before it with `time` (see `Rsmq::run_calls`).
struct LoneCall<'a> {
    k: &'a QueueKeys,
    m: &'a SendMessage,
    suffix: &'a [u8; 22],
    lone: Lone,
    time: bool,
    /// The handle's `realtime`.
    always: bool,
}

impl LoneCall<'_> {
    /// How many commands it is.
    fn count(&self) -> usize {
        1 + usize::from(self.time)
    }

    /// Its commands as RESP, as [`pipeline`](Self::pipeline) packs them.
    fn packed(&self) -> Vec<u8> {
        let (k, m) = (self.k, self.m);
        let keys: &[&String] = match self.lone {
            Lone::Lean => &[&k.zset, &k.hash],
            Lone::HandOff => &[&k.zset, &k.hash, &k.leases],
        };
        let at;
        let when: &[u8] = match m.when {
            When::AtUnixMs(ms) => {
                at = format!("a{ms}");
                at.as_bytes()
            }
            _ => b"",
        };
        let name = functions::SEND.name.as_bytes();
        let mut out = Resp(Vec::with_capacity(
            // the commands' other arguments and each argument's framing
            256 + name.len()
                + m.body.len()
                + keys.iter().map(|k| k.len()).sum::<usize>()
                + k.realtime.len(),
        ));
        if self.time {
            out.array(1);
            out.bulk(b"TIME");
        }
        // FCALL, its name, the key count, the keys, then the ARGV
        out.array(3 + keys.len() + 4 + usize::from(self.always));
        out.bulk(b"FCALL");
        out.bulk(name);
        out.bulk(Decimal::of(keys.len() as u64).bytes());
        for key in keys {
            out.bulk(key.as_bytes());
        }
        out.bulk(k.realtime.as_bytes());
        out.bulk(self.suffix);
        out.bulk(when);
        out.bulk(&m.body);
        if self.always {
            out.bulk(b"1");
        }
        out.0
    }

    /// Its commands as the general send builds them, for the multiplexer.
    fn pipeline(&self) -> redis::Pipeline {
        let call = Call {
            k: self.k,
            msgs: std::slice::from_ref(self.m),
            suffixes: std::slice::from_ref(self.suffix),
            ttls: &[0],
            maxlen: self.m.body.len(),
            always: self.always,
            function: true,
            lone: Some(self.lone),
        };
        let mut pipe = redis::pipe();
        if self.time {
            pipe.cmd("TIME");
        }
        pipe.add_command(call.cmd(0, 1, false));
        pipe
    }
}

/// Commands packed as RESP2 arrays of bulk strings, as `redis` packs them.
struct Resp(Vec<u8>);

impl Resp {
    /// An array of `n` items: the next `n` bulk strings.
    fn array(&mut self, n: usize) {
        self.0.push(b'*');
        self.0.extend_from_slice(Decimal::of(n as u64).bytes());
        self.0.extend_from_slice(b"\r\n");
    }

    fn bulk(&mut self, b: &[u8]) {
        self.0.push(b'$');
        self.0
            .extend_from_slice(Decimal::of(b.len() as u64).bytes());
        self.0.extend_from_slice(b"\r\n");
        self.0.extend_from_slice(b);
        self.0.extend_from_slice(b"\r\n");
    }
}

/// A number's decimal digits, without the formatter.
struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    fn of(mut n: u64) -> Decimal {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Decimal { digits, start }
    }

    fn bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

#[cfg(test)]
mod tests {
    use super::{Decimal, LoneCall, Resp};
    use crate::backend::redis::keys::Namespace;
    use crate::backend::redis::queues::send::Lone;
    use crate::contract::queues::SendMessage;

    #[test]
    fn a_lone_call_is_packed_as_the_general_send_builds_it() {
        let k = Namespace::new("rsmq", false).queue("mails");
        let suffix = crate::id::random_suffix();
        let bodies = [SendMessage::new(""), SendMessage::new(vec![b'x'; 70_000])];
        let at = SendMessage::new("{}").at_unix_ms(1_700_000_000_123);
        for m in bodies.iter().chain([&at]) {
            for lone in [Lone::Lean, Lone::HandOff] {
                for (time, always) in [(false, false), (true, false), (false, true), (true, true)] {
                    let call = LoneCall {
                        k: &k,
                        m,
                        suffix: &suffix,
                        lone,
                        time,
                        always,
                    };
                    let pipe = call.pipeline();
                    assert_eq!(pipe.len(), call.count());
                    assert!(
                        call.packed() == pipe.get_packed_pipeline(),
                        "{lone:?}, time {time}, realtime {always}, body of {}",
                        m.body.len()
                    );
                }
            }
        }
    }

    #[test]
    fn commands_are_packed_as_redis_packs_them() {
        for n in [0, 7, 10, 99, 12_345, u64::MAX] {
            assert_eq!(Decimal::of(n).bytes(), n.to_string().as_bytes());
        }
        let body = vec![b'x'; 1234];
        let mut out = Resp(Vec::new());
        out.array(5);
        for arg in [&b"FCALL"[..], b"f", b"1", b"", &body] {
            out.bulk(arg);
        }
        let cmd = redis::cmd("FCALL")
            .arg("f")
            .arg(1)
            .arg("")
            .arg(&body)
            .clone();
        assert_eq!(out.0, cmd.get_packed_command());
    }
}
