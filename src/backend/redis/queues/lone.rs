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
use super::send::{Call, Lone, queue_id, refused};
use crate::backend::redis::functions;
use crate::backend::redis::keys::QueueKeys;
use crate::backend::redis::packed::{Args, Packed};
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
        let count = call.count();
        let mut con = self.con.clone();
        // packed by hand for a lane to write; without lanes, the pipeline
        // alone
        let mut packed = con.has_lanes().then(|| call.packed());
        let bytes = packed.as_mut().map_or(&[][..], |p| p.finish(call.before()));
        let mut replies = con.packed(bytes, count, || call.pipeline()).await?;
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
            c => Err(refused(c, &mut r, queue)),
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

    /// Its commands packed by hand, as [`pipeline`](Self::pipeline) packs
    /// them: the bytes are [`Packed::finish`]'s.
    fn packed(&self) -> Packed {
        let (k, m) = (self.k, self.m);
        let keys: &[&String] = match self.lone {
            Lone::Lean => &[&k.zset, &k.hash],
            Lone::HandOff => &[&k.zset, &k.hash, &k.leases],
        };
        let name = &functions::SEND.name;
        let mut out = Packed::with_capacity(
            // the arguments' framing and short ones
            192 + name.len()
                + m.body.len()
                + keys.iter().map(|k| k.len()).sum::<usize>()
                + k.realtime.len(),
        );
        // FCALL, its name, the key count, the keys, then the ARGV
        functions::SEND.head(&mut out, keys);
        out.arg(&k.realtime).arg(&self.suffix[..]);
        match m.when {
            When::AtUnixMs(ms) => out.arg(format!("a{ms}")),
            _ => out.arg(""),
        };
        out.arg(&m.body[..]);
        if self.always {
            out.arg("1");
        }
        out
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

    /// What goes before the call: the `TIME` when it has one.
    fn before(&self) -> &'static [u8] {
        if self.time {
            b"*1\r\n$4\r\nTIME\r\n"
        } else {
            b""
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LoneCall;
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
                        call.packed().finish(call.before()) == pipe.get_packed_pipeline(),
                        "{lone:?}, time {time}, realtime {always}, body of {}",
                        m.body.len()
                    );
                }
            }
        }
    }
}
