//! A part of a send: its calls in one pipeline, those refused as the queue
//! changed sent again, and the replies read into what was sent.

use super::pipeline::{add_wait, check_wait};
use super::{Call, Kind, fewest, kind, queue_id, refused};
use crate::backend::redis::functions;
use crate::backend::redis::pipelines;
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts::{self, Reply};
use crate::contract::queues::{SendMessage, SendOutcome, Sent, When, validate};
use crate::id::send_suffixes;
use crate::{Error, JobId, Result};

impl Rsmq {
    /// A part of a send (`send_outcomes`): its calls (`chunks` of `msgs`) in
    /// one pipeline. `ttls` are its messages' unique keys' lifetimes;
    /// `maxlen` the whole send's largest body (0: no maxsize check). Returns
    /// what was sent, and [`Error::NotReplicated`] when fewer replicas than
    /// the handle waits for confirmed it.
    pub(super) async fn send_part(
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
}
