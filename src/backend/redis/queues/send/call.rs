//! The script calls of one send: send.lua's (or the send's function),
//! unique.lua's and send_keyed.lua's, with their keys and arguments.

use redis::Cmd;

use crate::backend::redis::functions;
use crate::backend::redis::keys::QueueKeys;
use crate::backend::redis::scripts;
use crate::contract::queues::{SendMessage, When, validate};

/// The script calls of one send.
pub(crate) struct Call<'a> {
    pub k: &'a QueueKeys,
    pub msgs: &'a [SendMessage],
    /// Per message, as `msgs`.
    pub suffixes: &'a [[u8; 22]],
    /// Per message: a unique key's ttl in ms (0: none, or not unique).
    pub ttls: &'a [u64],
    pub maxlen: usize,
    pub always: bool,
    /// Plain messages go through the send's function (`FCALL`), not its
    /// script.
    pub function: bool,
    /// The lone plain message goes by send.lua's lone call, in this form.
    pub lone: Option<Lone>,
}

/// The form of send.lua's lone call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lone {
    /// Without the lease counts: no hand-off (the handle's last send to the
    /// queue found no worker waiting), a fifth fewer instructions.
    Lean,
    /// With the lease counts: a waiting worker is handed the message.
    HandOff,
}

impl Call<'_> {
    /// The call sending `msgs[start..end]`, all of one priority, plain or
    /// unique; a unique call takes every level's key with `all_levels`, else its
    /// priority's alone.
    pub fn cmd(&self, start: usize, end: usize, all_levels: bool) -> Cmd {
        let (k, first) = (self.k, &self.msgs[start]);
        let mut cmd = match (&first.unique, all_levels) {
            (None, _) if first.keyed.is_some() => {
                scripts::eval(&scripts::SEND_KEYED, &[&k.zset, &k.hash, &k.keyed, &k.keys])
            }
            (None, _) if let Some(lone) = self.lone => {
                let keys: &[&String] = match lone {
                    Lone::Lean => &[&k.zset, &k.hash],
                    Lone::HandOff => &[&k.zset, &k.hash, &k.leases],
                };
                let mut cmd = if self.function {
                    functions::SEND.call(keys)
                } else {
                    scripts::eval(&scripts::SEND, keys)
                };
                cmd.arg(&k.realtime).arg(&self.suffixes[start][..]);
                add_when(&mut cmd, first.when);
                cmd.arg(&first.body[..]);
                if self.always {
                    cmd.arg("1");
                }
                return cmd;
            }
            (None, _) => {
                let keys = [&k.level(first.priority), &k.hash, &k.leases, &k.exact];
                if self.function {
                    functions::SEND.call(&keys)
                } else {
                    scripts::eval(&scripts::SEND, &keys)
                }
            }
            (Some(_), true) => {
                let mut keys = k.all_levels_unique();
                keys.push(k.exact.clone());
                scripts::eval(&scripts::UNIQUE, &keys)
            }
            (Some(_), false) => scripts::eval(
                &scripts::UNIQUE,
                &[
                    &k.zset,
                    &k.hash,
                    &k.unique,
                    &k.level(first.priority),
                    &k.exact,
                ],
            ),
        };
        cmd.arg(&k.realtime)
            .arg(if self.always { "1" } else { "0" })
            .arg(self.maxlen)
            .arg(first.priority);
        for i in start..end {
            let m = &self.msgs[i];
            cmd.arg(&self.suffixes[i][..]);
            add_when(&mut cmd, m.when);
            cmd.arg(&m.body[..]);
            if let Some(u) = &m.unique {
                cmd.arg(&u.key).arg(u.on_duplicate.code()).arg(self.ttls[i]);
            } else if let Some(key) = &m.keyed {
                cmd.arg(&key.key).arg(key.per_key);
            }
        }
        cmd
    }
}

/// A message's due as the send scripts take it: "" for the queue's delay,
/// "d<ms>" for a delay, "a<ms>" for a Unix time.
fn add_when(cmd: &mut Cmd, when: When) {
    match when {
        When::QueueDelay => cmd.arg(""),
        When::After(d) => cmd.arg(format!("d{}", validate::whole_ms(d))),
        When::AtUnixMs(ms) => cmd.arg(format!("a{ms}")),
    };
}
