//! Sending to a queue: plain sends (`send.lua`), unique ones (`unique.lua`) and
//! keyed ones (`send_keyed.lua`),
//! chunked and pipelined in one round trip.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::Cmd;

use super::{BATCH_BYTES, BATCH_MESSAGES, Rsmq};
use crate::backend::redis::connection::WaitForReplicas;
use crate::backend::redis::keys::QueueKeys;
use crate::backend::redis::scripts::{self, Reply};
use crate::backend::redis::{functions, pipelines};
use crate::contract::queues::{
    MessageId, Queues, SendMessage, SendOutcome, Sent, When, check_send, validate,
};
use crate::id::send_suffixes;
use crate::{Error, JobId, Result};

impl Rsmq {
    /// Sends one message; returns its id.
    pub async fn send(&self, queue: &str, msg: SendMessage) -> Result<MessageId> {
        Queues::send(self, queue, msg).await
    }

    /// Sends messages in one round trip: one script call per chunk of up to 1000
    /// messages (4 MiB) of one priority (a change of priority starts a chunk: send
    /// a batch sorted by priority), all chunks pipelined (a send of over 16
    /// chunks in pipelines of 16, one after another, each within the
    /// response timeout). Either every message is
    /// sent or, when the queue is missing or a body exceeds its maxsize, none is
    /// (the maxsize as a call of the send that stored its messages found it: a
    /// send whose queue's maxsize another client changes meanwhile is still
    /// sent whole).
    /// Returns the ids in the order of `msgs`; ids sort in that order too. A
    /// [unique](crate::queue::Unique) message whose key is held returns the queued
    /// message's id (see [`send_outcomes`](Self::send_outcomes) to tell).
    pub async fn send_batch(&self, queue: &str, msgs: &[SendMessage]) -> Result<Vec<MessageId>> {
        Queues::send_batch(self, queue, msgs).await
    }

    /// [`send_batch`](Self::send_batch), telling for each message what the send
    /// did: added it, or found its [unique](crate::queue::Unique) key held and kept,
    /// moved or replaced the queued message. Unique messages are sent by another
    /// script than plain ones, in the same round trip: a switch between unique
    /// and plain messages also starts a chunk.
    pub async fn send_outcomes(&self, queue: &str, msgs: &[SendMessage]) -> Result<Vec<Sent>> {
        validate::queue_name(queue)?;
        if msgs.is_empty() {
            return Ok(Vec::new());
        }
        if let [m] = msgs
            && let Some(sent) = self.send_lone(queue, m).await?
        {
            return Ok(vec![sent]);
        }
        let mut ttls = Vec::with_capacity(msgs.len());
        for m in msgs {
            ttls.push(check_send(m)?.unwrap_or(0));
        }
        let maxlen = msgs.iter().map(|m| m.body.len()).max().unwrap_or(0);
        let chunks = chunks_of(msgs);
        // a large send goes in parts of at most PIPELINE_CALLS calls, one
        // pipeline each, one after another: each part's reply comes within the
        // response timeout however large the whole (one pipeline of 100
        // calls to a busy Cluster took longer), and a part that fails leaves
        // those before it known as stored (PartlySent)
        if chunks.len() <= PIPELINE_CALLS {
            let (sent, unconfirmed) = self.send_part(queue, msgs, &ttls, maxlen, &chunks).await?;
            return unconfirmed.map_or(Ok(sent), Err);
        }
        let mut sent: Vec<Sent> = Vec::with_capacity(msgs.len());
        // a part stored but not confirmed by enough replicas: the others go
        // too, and the send says the fewest replicas any part reached (also
        // when a later part fails: PartlySent's not_replicated)
        let mut unconfirmed: Option<Error> = None;
        for calls in chunks.chunks(PIPELINE_CALLS) {
            let (start, end) = (calls[0].0, calls[calls.len() - 1].1);
            let calls: Vec<(usize, usize)> =
                calls.iter().map(|&(a, b)| (a - start, b - start)).collect();
            // the parts after the first stored messages go without the
            // maxsize check, which the first part's calls passed for the
            // whole send's largest body (a send is sent whole, see send_batch)
            let maxlen = if sent.is_empty() { maxlen } else { 0 };
            let part = &msgs[start..end];
            match self
                .send_part(queue, part, &ttls[start..end], maxlen, &calls)
                .await
            {
                Ok((these, not_replicated)) => {
                    sent.extend(these);
                    unconfirmed = fewest(unconfirmed, not_replicated);
                }
                // whatever came before it: its places are the whole send's
                Err(Error::PartlySent {
                    stored,
                    error,
                    not_replicated,
                    ..
                }) => {
                    let unconfirmed = fewest(unconfirmed, not_replicated.map(|e| *e));
                    return Err(partly(sent, start, stored, msgs.len(), *error, unconfirmed));
                }
                Err(e) if sent.is_empty() => return Err(e),
                Err(e) => {
                    return Err(partly(sent, start, Vec::new(), msgs.len(), e, unconfirmed));
                }
            }
        }
        unconfirmed.map_or(Ok(sent), Err)
    }

    /// A part of a send (`send_outcomes`): its calls (`chunks` of `msgs`) in
    /// one pipeline. `ttls` are its messages' unique keys' lifetimes;
    /// `maxlen` the whole send's largest body (0: no maxsize check). Returns
    /// what was sent, and [`Error::NotReplicated`] when fewer replicas than
    /// the handle waits for confirmed it.
    async fn send_part(
        &self,
        queue: &str,
        msgs: &[SendMessage],
        ttls: &[u64],
        maxlen: usize,
        chunks: &[(usize, usize)],
    ) -> Result<(Vec<Sent>, Option<Error>)> {
        let k = self.ns.queue_shared(queue);
        // ascending suffixes within each call, so that a batch's ids (one prefix of
        // Redis microseconds per call) sort in send order
        let mut suffixes: Vec<[u8; 22]> = Vec::with_capacity(msgs.len());
        for &(start, end) in chunks {
            let delays: Vec<Option<u64>> = msgs[start..end]
                .iter()
                .map(|m| match m.when {
                    When::After(d) => Some(validate::whole_ms(d)),
                    _ => None,
                })
                .collect();
            suffixes.extend(send_suffixes(&delays));
        }
        // a lone message at priority 0, not delayed: send.lua's lone call,
        // which hands the message to a waiting worker when it passes the
        // queue's lease counts; it does not while the handle's last send to
        // the queue found no worker waiting (a worker that began to wait
        // since is woken, and the reply says so)
        let queue_id = queue_id(queue);
        let lone = (msgs.len() == 1
            && kind(&msgs[0]) == Kind::Plain
            && msgs[0].priority == 0
            && !matches!(msgs[0].when, When::After(_)))
        .then(|| self.lone_form(queue_id));
        let mut con = self.con.clone();
        // a send of plain messages alone, in one call, calls the send's
        // function where Redis takes it (see functions.rs): a call the
        // function's absence fails is then the pipeline's only write, so
        // sending the pipeline again writes nothing twice (a send that mixes
        // in unique or keyed messages, or needs several calls, calls scripts)
        let one_plain_call = chunks.len() == 1 && msgs.iter().all(|m| kind(m) == Kind::Plain);
        let mut attempts = 0;
        let (call, mut replies) = loop {
            let function = one_plain_call && !self.ns.is_cluster() && self.send_fn.usable();
            let call = Call {
                k: &k,
                msgs,
                suffixes: &suffixes,
                ttls,
                maxlen,
                always: self.realtime,
                function,
                lone,
            };
            let result = self.run_calls(&mut con, &call, chunks, msgs).await;
            let failure = match &result {
                Err(e) if function && attempts < 2 => functions::failure(e),
                _ => None,
            };
            match failure {
                // not loaded (the handle's first send, or Redis lost it: a
                // restart, a flush, a failover): loaded, or the script from
                // now on where the server refuses the load
                Some(functions::Failure::NotFound) => {
                    self.send_fn.load(&mut con, &functions::SEND).await?;
                }
                // FCALL itself refused (Redis 6.2, an ACL rule without it):
                // the script from now on
                Some(functions::Failure::Refused) => self.send_fn.give_up(),
                None => break (call, result?),
            }
            attempts += 1;
        };
        // the WAITs' replies, checked once the sends' own errors were
        let mut waited = Vec::new();
        if self.wait.is_some() {
            waited.push(replies.pop());
        }
        // the queue created (another producer's first use), or its maxsize
        // lowered, while the send's calls went: some calls were refused (the
        // queue missing, a body over its maxsize), and others stored their
        // messages. The refused are sent again: failing the send would have
        // the caller send the whole again, storing the others' messages twice.
        // Those that found the queue missing go with the check (the queue may
        // be another by now); those over the maxsize without it, which the
        // calls that stored passed (each checks the whole send's largest body).
        let status = |v: &redis::Value| Reply::status(v).map(|(code, _)| code).ok();
        // a call refused by Redis itself (out of memory, say), or sent again
        // and refused then, while others stored their messages: the send says
        // which were stored (PartlySent)
        let mut refused_by: Option<Error> = None;
        let mut skip = vec![false; chunks.len()];
        if replies.iter().any(|v| status(v) == Some(1)) {
            let refused = |code| -> Vec<usize> {
                (0..replies.len())
                    .filter(|&i| status(&replies[i]) == Some(code))
                    .collect()
            };
            for (calls, maxlen) in [(refused(-1), call.maxlen), (refused(-2), 0)] {
                if calls.is_empty() {
                    continue;
                }
                let again: Vec<(usize, usize)> = calls.iter().map(|&i| chunks[i]).collect();
                let these = Call { maxlen, ..call };
                let mut more = match self.run_calls(&mut con, &these, &again, msgs).await {
                    Ok(more) => more,
                    Err(e) => {
                        refused_by.get_or_insert(e);
                        calls.into_iter().for_each(|i| skip[i] = true);
                        continue;
                    }
                };
                if self.wait.is_some() {
                    waited.push(more.pop());
                }
                if more.len() != calls.len() {
                    return Err(Error::Protocol(format!(
                        "{} replies to {} calls sent again",
                        more.len(),
                        calls.len()
                    )));
                }
                for (i, v) in calls.into_iter().zip(more) {
                    replies[i] = v;
                }
            }
        }
        let mut sent = Vec::with_capacity(msgs.len());
        // each sent message's place in `msgs` (calls may fail in between)
        let mut placed = Vec::with_capacity(msgs.len());
        for (ci, (v, &(start, end))) in replies.iter().zip(chunks).enumerate() {
            if skip[ci] {
                continue;
            }
            if let redis::Value::ServerError(e) = v {
                if refused_by.is_none() {
                    refused_by = Some(redis::RedisError::from(e.clone()).into());
                }
                continue;
            }
            let again;
            let mut v = v;
            if matches!(Reply::status(v)?, (-3, _)) {
                // a key held at another priority: the call again with every
                // level (a send of one call: several pass every level at once)
                let cmd = call.cmd(start, end, true);
                let sent_again = match self.wait {
                    None => scripts::run(&mut con, &scripts::UNIQUE, &cmd).await,
                    Some(wait) => {
                        let mut pipe = redis::pipe();
                        pipe.add_command(cmd);
                        add_wait(&mut pipe, wait);
                        let used = [(&*scripts::UNIQUE, &*self.unique_loaded)];
                        pipelines::run_pipeline(&mut con, &used, pipe)
                            .await
                            .and_then(|mut r| {
                                waited.push(r.pop());
                                r.pop()
                                    .ok_or_else(|| Error::Protocol("unique send: no reply".into()))
                            })
                    }
                };
                match sent_again {
                    Ok(a) => again = a,
                    Err(e) => {
                        refused_by.get_or_insert(e);
                        continue;
                    }
                }
                v = &again;
            }
            let (code, mut r) = Reply::status(v)?;
            match code {
                1 => {
                    let prefix = r.bytes()?;
                    let these = msgs[start..end].iter().zip(&suffixes[start..end]);
                    for (j, (m, suffix)) in these.enumerate() {
                        let new = JobId::from_parts(prefix, suffix)?;
                        placed.push(start + j);
                        if m.unique.is_none() {
                            sent.push(Sent::added(new));
                            continue;
                        }
                        let outcome = SendOutcome::from_code(r.int()?)?;
                        let held = r.bytes()?;
                        let id = if outcome.is_added() {
                            new
                        } else {
                            std::str::from_utf8(held)
                                .map_err(|_| Error::Protocol(format!("unique send id {held:?}")))?
                                .parse()?
                        };
                        sent.push(Sent { id, outcome });
                    }
                    // a plain send's reply ends with whether a worker waited
                    if kind(&msgs[start]) == Kind::Plain
                        && let Ok(waited) = r.int()
                    {
                        self.note_waited(queue_id, waited == 1);
                    }
                }
                c => {
                    refused_by.get_or_insert(refused(c, &mut r, queue));
                }
            }
        }
        // the WAITs' replies: the fewest replicas one reached, when short;
        // another error (a reply that is no count) fails a send that stored
        // all, and is left behind a refusal
        let mut unconfirmed = None;
        let mut wait_failed = None;
        if let Some(wait) = self.wait {
            for reply in waited {
                match check_wait(reply, wait) {
                    Ok(()) => {}
                    Err(e @ Error::NotReplicated { .. }) => {
                        unconfirmed = fewest(unconfirmed, Some(e))
                    }
                    Err(e) => {
                        wait_failed.get_or_insert(e);
                    }
                }
            }
        }
        if let Some(error) = refused_by {
            if sent.is_empty() {
                return Err(error);
            }
            return Err(Error::PartlySent {
                stored: placed
                    .into_iter()
                    .zip(sent.into_iter().map(|s| s.id))
                    .collect(),
                of: msgs.len(),
                error: Box::new(error),
                not_replicated: unconfirmed.map(Box::new),
            });
        }
        if sent.len() != msgs.len() {
            return Err(Error::Protocol(format!(
                "send returned {} ids for {} messages",
                sent.len(),
                msgs.len()
            )));
        }
        if let Some(e) = wait_failed {
            return Err(e);
        }
        Ok((sent, unconfirmed))
    }

    /// The lone call's form for a queue (`queue_id`): lean while the
    /// handle's last send to it found no worker waiting.
    pub(super) fn lone_form(&self, queue_id: u64) -> Lone {
        if self.lean_queues[lean_slot(queue_id)].load(Ordering::Relaxed) == queue_id {
            Lone::Lean
        } else {
            Lone::HandOff
        }
    }

    /// Whether a send's pipeline starts with a `TIME` (see `run_calls`): a
    /// send with plain messages while the last plain send found a worker
    /// waiting, on one server.
    pub(super) fn time_first(&self, plain: bool) -> bool {
        plain && self.workers_wait.load(Ordering::Relaxed) && !self.ns.is_cluster()
    }

    /// Notes what a plain send's reply said of its queue (`queue_id`):
    /// whether a worker waited for it.
    pub(super) fn note_waited(&self, queue_id: u64, waited: bool) {
        if waited != self.workers_wait.load(Ordering::Relaxed) {
            self.workers_wait.store(waited, Ordering::Relaxed);
        }
        // the queue's slot: its id when no worker waited, and empty when one
        // did (another queue's id stays)
        let slot = &self.lean_queues[lean_slot(queue_id)];
        let held = slot.load(Ordering::Relaxed);
        if !waited && held != queue_id {
            slot.store(queue_id, Ordering::Relaxed);
        } else if waited && held == queue_id {
            slot.store(0, Ordering::Relaxed);
        }
    }

    /// The send's calls (`chunks` of `msgs`) in one pipeline, with a `TIME`
    /// first and a `WAIT` last as this handle needs them.
    async fn run_calls(
        &self,
        con: &mut crate::backend::redis::connection::Connection,
        call: &Call<'_>,
        chunks: &[(usize, usize)],
        msgs: &[SendMessage],
    ) -> Result<Vec<redis::Value>> {
        // a lone unique call passes its own priority's sorted set alone, and is
        // called again with every level when a key is held at another; calls of
        // a larger send pass every level at once, so that none is re-run after
        // the later ones (the last send of a key must win)
        let all_levels = chunks.len() > 1;
        let mut pipe = redis::pipe();
        let plain = msgs.iter().any(|m| kind(m) == Kind::Plain);
        let time = self.time_first(plain);
        if time {
            // a TIME first, its reply dropped: the sender's connection then
            // waits in Redis's list of replies to write before the send's
            // PUBLISH puts the waiting worker's connection there, and Redis
            // writes the last client it listed first: the hand-off (or the
            // wake-up) goes out before the reply to the send, rather than after
            // a write that wakes the sender (BENCHMARKS.md, Speed II part 14).
            // Only while the last plain send found a worker waiting (its
            // reply says so): a send to a queue no worker waits on gains
            // nothing by it. Unique and keyed sends, whose replies do not
            // say, go without. A Cluster's sends hand off nothing, and would
            // route the TIME to a node of its own.
            pipe.cmd("TIME");
        }
        for &(start, end) in chunks {
            pipe.add_command(call.cmd(start, end, all_levels));
        }
        let mut used: Vec<(&redis::Script, &AtomicBool)> = Vec::new();
        if plain && !call.function {
            used.push((&scripts::SEND, &self.send_loaded));
        }
        if msgs.iter().any(|m| kind(m) == Kind::Unique) {
            used.push((&scripts::UNIQUE, &self.unique_loaded));
        }
        if msgs.iter().any(|m| kind(m) == Kind::Keyed) {
            used.push((&scripts::SEND_KEYED, &self.keyed_loaded));
        }
        if let Some(wait) = self.wait {
            add_wait(&mut pipe, wait);
        }
        let mut replies = pipelines::run_pipeline_replies(con, &used, pipe).await?;
        let failed = |v: &redis::Value| matches!(v, redis::Value::ServerError(_));
        if replies.iter().any(failed) {
            // a call refused while others went through (Redis out of memory,
            // say) is the send's to report (PartlySent); any other error
            // fails the whole, as before
            let first = usize::from(time);
            let last = first + chunks.len();
            let calls = replies.get(first..last).unwrap_or_default();
            let some_went = calls.len() > 1 && calls.iter().any(|v| !failed(v));
            let others_failed = replies
                .iter()
                .enumerate()
                .any(|(i, v)| (i < first || i >= last) && failed(v));
            if !some_went || others_failed {
                return match redis::Value::Array(replies).extract_error() {
                    Err(e) => Err(e.into()),
                    Ok(v) => Err(Error::Protocol(format!("a send's replies: {v:?}"))),
                };
            }
        }
        if time {
            // the TIME's reply
            replies.remove(0);
        }
        Ok(replies)
    }
}

/// Most calls of a send in one pipeline (see `send_outcomes`).
const PIPELINE_CALLS: usize = 16;

/// The calls of a send: (start, end) of each one's messages in `msgs`, up
/// to [`BATCH_MESSAGES`] messages and [`BATCH_BYTES`] each, all of one
/// priority and one kind (plain, unique or keyed).
fn chunks_of(msgs: &[SendMessage]) -> Vec<(usize, usize)> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, m) in msgs.iter().enumerate() {
        bytes += m.body.len();
        let end = i + 1;
        let switch = msgs
            .get(end)
            .is_some_and(|n| n.priority != m.priority || kind(n) != kind(m));
        if end - start < BATCH_MESSAGES && bytes < BATCH_BYTES && end < msgs.len() && !switch {
            continue;
        }
        chunks.push((start, end));
        (start, bytes) = (end, 0);
    }
    chunks
}

/// A send whose part starting at `start` failed with `error`, having stored
/// `stored` of its own (their places in the part) after the earlier parts'
/// `sent`, `unconfirmed` the [`Error::NotReplicated`] of the parts that
/// stored them: [`Error::PartlySent`].
fn partly(
    sent: Vec<Sent>,
    start: usize,
    stored: Vec<(usize, JobId)>,
    of: usize,
    error: Error,
    unconfirmed: Option<Error>,
) -> Error {
    let mut all: Vec<(usize, JobId)> = sent.into_iter().map(|s| s.id).enumerate().collect();
    all.extend(stored.into_iter().map(|(at, id)| (start + at, id)));
    Error::PartlySent {
        stored: all,
        of,
        error: Box::new(error),
        not_replicated: unconfirmed.map(Box::new),
    }
}

/// Of two [`Error::NotReplicated`], the one with the fewer replicas (the
/// send says the fewest any of its round trips reached).
fn fewest(a: Option<Error>, b: Option<Error>) -> Option<Error> {
    let replicas = |e: &Option<Error>| match e {
        Some(Error::NotReplicated { replicas, .. }) => Some(*replicas),
        _ => None,
    };
    match (replicas(&a), replicas(&b)) {
        (Some(x), Some(y)) if y < x => b,
        (Some(_), _) => a,
        (None, _) => b,
    }
}

/// Appends `WAIT` to a pipeline of writes: in the same pipeline, it runs on the
/// connection (and the master) that took them, even when a broken connection
/// makes the client send the pipeline again.
fn add_wait(pipe: &mut redis::Pipeline, wait: WaitForReplicas) {
    // at least 1 ms (0 would wait for ever), at most MAX_DELAY (Redis
    // refuses a timeout past its clock's range: after the send's writes)
    let ms = validate::whole_ms(wait.timeout.min(validate::MAX_DELAY)).max(1);
    pipe.cmd("WAIT").arg(wait.replicas).arg(ms);
}

/// Checks the reply of [`add_wait`]'s `WAIT`.
fn check_wait(reply: Option<redis::Value>, wait: WaitForReplicas) -> Result<()> {
    let acked = match reply {
        Some(redis::Value::Int(n)) => u32::try_from(n).unwrap_or(0),
        v => return Err(Error::Protocol(format!("WAIT replied {v:?}"))),
    };
    if acked < wait.replicas {
        return Err(Error::NotReplicated {
            replicas: acked,
            wanted: wait.replicas,
        });
    }
    Ok(())
}

/// What a send's reply with status `code` other than 1 (`r`, the rest of
/// the reply) says went wrong with `queue`.
pub(super) fn refused(code: i64, r: &mut Reply<'_>, queue: &str) -> Error {
    match code {
        -1 => Error::QueueNotFound { name: queue.into() },
        -2 => match (r.int(), r.int()) {
            (Ok(size), Ok(max)) => Error::MessageTooLarge {
                size: size as usize,
                max: max as usize,
            },
            (Err(e), _) | (_, Err(e)) => e,
        },
        c => Error::Protocol(format!("send status {c}")),
    }
}

/// Which script sends a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Unique,
    Keyed,
}

fn kind(m: &SendMessage) -> Kind {
    match (&m.unique, &m.keyed) {
        (Some(_), _) => Kind::Unique,
        (None, Some(_)) => Kind::Keyed,
        (None, None) => Kind::Plain,
    }
}

/// A queue's name as `Rsmq::lean_queues` keeps it: a hash, never 0. Two
/// names of one hash would only make a send to the second lean while a
/// worker waits on it, which the lean call wakes.
pub(super) fn queue_id(queue: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    queue.hash(&mut h);
    h.finish() | 1
}

/// The slot of `Rsmq::lean_queues` a queue's id takes.
fn lean_slot(queue_id: u64) -> usize {
    // (the id's lowest bit is always set)
    ((queue_id >> 1) % super::LEAN_SLOTS as u64) as usize
}

/// The script calls of one send.
pub(super) struct Call<'a> {
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
pub(super) enum Lone {
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
