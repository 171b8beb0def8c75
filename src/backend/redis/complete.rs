//! complete.lua's call: a settle part's keys and arguments, written by one
//! builder into a `redis::Cmd` (for the multiplexer or a pipeline) or into a
//! command packed by hand (see [`super::packed`]), the same either way.

use std::fmt::Write as _;

use super::convert::push_decimal;
use super::keys::QueueKeys;
use super::packed::{Args, Packed};
use super::scripts;
use crate::JobId;
use crate::contract::attempts::{Attempt, RunBy, bound_error};
use crate::contract::leases::{Settle, Token};
use redis::Cmd;

/// complete.lua's call for `part` (at priority `p`) as a `redis` command,
/// for the multiplexer or a pipeline.
pub(super) fn complete_cmd(k: &QueueKeys, p: i8, part: &Settle) -> Cmd {
    let level = k.level(p);
    let (args, bytes) = complete_room(part);
    let mut cmd = scripts::eval_sized(&scripts::COMPLETE, &complete_keys(k, &level), args, bytes);
    complete_args(&mut cmd, k, p, part);
    cmd
}

/// The same call packed by hand, for a lane to write as it is.
pub(super) fn complete_packed(k: &QueueKeys, p: i8, part: &Settle) -> Packed {
    let level = k.level(p);
    let keys = complete_keys(k, &level);
    let mut packed = Packed::with_capacity(64 + 48 * keys.len() + complete_room(part).1);
    scripts::eval_head(&mut packed, &scripts::COMPLETE, &keys);
    complete_args(&mut packed, k, p, part);
    packed
}

/// complete.lua's keys for a part whose sorted set is `level`.
fn complete_keys<'a>(k: &'a QueueKeys, level: &'a String) -> [&'a String; 16] {
    [
        level,
        &k.hash,
        &k.dead,
        &k.dead_hash,
        &k.stats,
        &k.unique,
        &k.leases,
        &k.history,
        &k.history_hash,
        &k.keyed,
        &k.keys,
        &k.kwake,
        &k.awaited,
        &k.bout,
        &k.bres,
        &k.deps,
    ]
}

/// Room for a settle part's arguments beside its keys and a few short ones:
/// how many more, and their bytes (an ack's id, span and body; a retry's
/// seven, with its record), so that its command is not grown an argument at
/// a time.
fn complete_room(part: &Settle) -> (usize, usize) {
    let others = part.reschedules.len() + part.throttles.len() + part.dead.len();
    let args = 3 * part.acks.len() + 7 * others + 2 * part.results.len();
    // (an ack's id and span take 88 bytes packed, its run-time code a few)
    let bytes = 96 * part.acks.len()
        + part.ack_bodies.iter().map(|b| b.1.len()).sum::<usize>()
        + 384 * others
        + part.results.iter().map(|r| 40 + r.1.len()).sum::<usize>();
    (args, bytes)
}

/// complete.lua's arguments for `part` (at priority `p`), after its keys,
/// written into `a`: a command for the multiplexer or one packed by hand,
/// the same arguments either way.
fn complete_args<A: Args>(a: &mut A, k: &QueueKeys, p: i8, part: &Settle) {
    let (keep, max_age) = part.retention.limits();
    // "<acks>b": each ack carries its body (complete.lua)
    let bodies = !part.ack_bodies.is_empty();
    let acks = part.acks.len().to_string();
    a.arg(if bodies { acks + "b" } else { acks })
        .arg(part.reschedules.len() + part.throttles.len())
        .arg(part.dead.len())
        .arg(p)
        .arg(keep)
        .arg(max_age)
        .arg(&k.realtime)
        .arg(part.by.as_ref().map_or(String::new(), RunBy::members))
        .arg(part.history.encode());
    let runs = part.runs();
    // the run-time codes: the types named once, the codes
    // counted after every entry (see complete.lua)
    let codes = RunTimeCodes::of(part, &runs);
    a.arg(codes.types.len()).arg(&codes.types);
    // the acks in runs of one token (a fetch's jobs share theirs:
    // each token is sent once for its run), each ack with its
    // span: its run's times as its attempt record's members,
    // written into one buffer; then, when the caller passed
    // bodies, its body as delivered (in the acks' order), else ""
    // (complete.lua reads it)
    let mut token_runs: Vec<(Token, usize)> = Vec::new();
    for (_, t) in &part.acks {
        match token_runs.last_mut() {
            Some((last, n)) if last == t => *n += 1,
            _ => token_runs.push((*t, 1)),
        }
    }
    if !part.acks.is_empty() {
        a.arg(token_runs.len());
    }
    let mut span = String::new();
    let mut sent = part.ack_bodies.iter().peekable();
    let mut acks = part.acks.iter();
    for (token, n) in &token_runs {
        a.arg(token).arg(*n);
        for (id, _) in acks.by_ref().take(*n) {
            span.clear();
            if let Some(r) = runs.get(id) {
                span.push_str(r#","start":"#);
                push_decimal(&mut span, r.started_ms);
                span.push_str(r#","end":"#);
                push_decimal(&mut span, r.ended_ms);
            }
            a.arg(id).arg(span.as_str());
            if bodies {
                let body = sent.next_if(|(b, _)| b == id).map_or(&[][..], |b| &b.1[..]);
                a.arg(body);
            }
        }
    }
    let by = part.by.as_ref();
    let record = |id: &JobId, token: Token, error: Option<&str>| {
        Attempt::settled(token.attempt(), runs.get(id).copied(), error, by).line()
    };
    for r in &part.reschedules {
        let error = r.error.as_deref().map(bound_error);
        // a release is recorded when its handler ran (its run is known),
        // else it was no attempt
        let rec = if r.release {
            runs.get(&r.id).copied().map_or(String::new(), |ran| {
                Attempt::released(r.token.attempt(), Some(ran), by).line()
            })
        } else {
            record(&r.id, r.token, Some(error.as_deref().unwrap_or("")))
        };
        a.arg(r.id)
            .arg(r.token)
            .arg(crate::contract::backend::clamped_ms(r.delay))
            .arg(r.deliveries.min(crate::contract::leases::MAX_COUNT))
            .arg(if r.release { "l" } else { "r" })
            .arg(error.as_deref().unwrap_or(""))
            .arg(rec);
    }
    // a throttle: "t<limit>", its deliveries given back unless the
    // job was throttled that many times in a row (complete.lua)
    // ("k<limit>" for a key's throttle)
    let (throttle, key_throttle) = if part.throttles.is_empty() {
        Default::default()
    } else {
        let allowed = part.throttles_allowed();
        (format!("t{allowed}"), format!("k{allowed}"))
    };
    for t in &part.throttles {
        let error = bound_error(&t.error);
        a.arg(t.id)
            .arg(t.token)
            .arg(crate::contract::backend::clamped_ms(t.delay))
            .arg(t.deliveries.min(crate::contract::leases::MAX_COUNT))
            .arg(if t.key { &key_throttle } else { &throttle })
            .arg(&error)
            .arg(
                Attempt::throttled(t.token.attempt(), runs.get(&t.id).copied(), &error, by).line(),
            );
    }
    for d in &part.dead {
        let error = bound_error(&d.error);
        a.arg(d.id)
            .arg(d.token)
            .arg(&error)
            .arg(record(&d.id, d.token, Some(&error)));
    }
    let counted = codes.counted();
    a.arg(counted.len());
    for (code, n) in counted {
        a.arg(code).arg(n);
    }
    a.arg(codes.each());
    // the acks' results, when some returned one; then the
    // entries' batches, when some belong to one
    if !part.results.is_empty() || !part.batched.is_empty() {
        a.arg(part.results.len());
        for (id, r) in &part.results {
            a.arg(id).arg(&r[..]);
        }
    }
    if !part.batched.is_empty() {
        let groups = batch_groups(part);
        a.arg(groups.len());
        for (b, finishes, places) in &groups {
            a.arg(b.as_str()).arg(finishes).arg(places);
        }
    }
}

/// A settle's batch finishes for complete.lua, by batch in order of first
/// finish: (batch, `<index>a,<index>r,<index>d<id>,...` ("r": an ack with a
/// result), the entries' places among
/// all the call's entries, from 1, `<k>,<k>,...`).
fn batch_groups(part: &Settle) -> Vec<(crate::contract::batches::BatchId, String, String)> {
    let refs: std::collections::HashMap<JobId, crate::contract::batches::BatchRef> =
        part.batched.iter().copied().collect();
    let mut groups: Vec<(crate::contract::batches::BatchId, String, String)> = Vec::new();
    let with_result: std::collections::HashSet<JobId> =
        part.results.iter().map(|(id, _)| *id).collect();
    let dead_from = part.acks.len() + part.reschedules.len() + part.throttles.len();
    let entries = part
        .acks
        .iter()
        .enumerate()
        .map(|(k, (id, _))| (k + 1, *id, None))
        .chain(
            part.dead
                .iter()
                .enumerate()
                .map(|(k, d)| (dead_from + k + 1, d.id, Some(d.id))),
        );
    for (place, id, dead) in entries {
        let Some(r) = refs.get(&id) else { continue };
        let i = match groups.iter().position(|g| g.0 == r.batch) {
            Some(i) => i,
            None => {
                groups.push((r.batch, String::new(), String::new()));
                groups.len() - 1
            }
        };
        let (_, finishes, places) = &mut groups[i];
        if !finishes.is_empty() {
            finishes.push(',');
            places.push(',');
        }
        let _ = match dead {
            None if with_result.contains(&id) => write!(finishes, "{}r", r.index),
            None => write!(finishes, "{}a", r.index),
            Some(id) => write!(finishes, "{}d{id}", r.index),
        };
        let _ = write!(places, "{place}");
    }
    groups
}

/// A settle's run-time codes for complete.lua: the job types it names, and
/// per entry (acks, reschedules, throttles, dead letters, in order) `32 x
/// (type index from 1) + bucket`, or none for a release or a run whose type or
/// times are not known.
struct RunTimeCodes<'a> {
    types: Vec<&'a str>,
    /// Each entry's code, `None` (sent as "-") when unknown or a release.
    codes: Vec<Option<usize>>,
}

impl<'a> RunTimeCodes<'a> {
    fn of(
        part: &'a Settle,
        runs: &std::collections::HashMap<
            JobId,
            &'a crate::contract::attempts::Ran,
            crate::id::IdHash,
        >,
    ) -> Self {
        let mut types: Vec<&'a str> = Vec::new();
        let mut code = |id: &JobId, counted: bool| -> Option<usize> {
            let r = runs.get(id).filter(|_| counted)?;
            let t = r.job_type.as_deref()?;
            let at = match types.iter().position(|x| *x == t) {
                Some(i) => i,
                None => {
                    types.push(t);
                    types.len() - 1
                }
            };
            let bucket =
                crate::contract::runtimes::bucket_of(r.ended_ms.saturating_sub(r.started_ms));
            Some((at + 1) * 32 + bucket)
        };
        let mut codes = Vec::with_capacity(
            part.acks.len() + part.reschedules.len() + part.throttles.len() + part.dead.len(),
        );
        for (id, _) in &part.acks {
            codes.push(code(id, true));
        }
        for r in &part.reschedules {
            codes.push(code(&r.id, !r.release));
        }
        // a throttle's run is timed as any other
        for t in &part.throttles {
            codes.push(code(&t.id, true));
        }
        for d in &part.dead {
            codes.push(code(&d.id, true));
        }
        RunTimeCodes { types, codes }
    }

    /// The distinct codes and how many entries have each, in first-seen order.
    fn counted(&self) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        for code in self.codes.iter().flatten() {
            match out.iter_mut().find(|(c, _)| c == code) {
                Some((_, n)) => *n += 1,
                None => out.push((*code, 1)),
            }
        }
        out
    }

    /// Every entry's code in order, separated by spaces, "-" for none.
    fn each(&self) -> String {
        let mut out = String::with_capacity(self.codes.len() * 4);
        for (k, code) in self.codes.iter().enumerate() {
            if k > 0 {
                out.push(' ');
            }
            match code {
                Some(c) => {
                    let _ = write!(out, "{c}");
                }
                None => out.push('-'),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{complete_cmd, complete_packed};
    use crate::backend::redis::keys::Namespace;
    use crate::contract::attempts::{Ran, RunBy};
    use crate::contract::batches::BatchRef;
    use crate::contract::history::History;
    use crate::contract::leases::{
        DeadLetterEntry, Reschedule, Retention, Settle, Throttle, Token,
    };
    use crate::inspect::AttemptOutcome;

    /// A settle's call packed by hand and built as a `redis` command.
    fn both(p: i8, part: &Settle) -> (Vec<u8>, Vec<u8>) {
        let k = Namespace::new("rsmq", false).queue("mails");
        let mut packed = complete_packed(&k, p, part);
        let cmd = complete_cmd(&k, p, part);
        (packed.finish(b"").to_vec(), cmd.get_packed_command())
    }

    #[test]
    fn a_settle_packed_by_hand_is_the_command_redis_packs() {
        let id = |i: u32| {
            format!("mhx3k0vz1qabcdefghijklmnopqr{i:04}")
                .parse()
                .unwrap()
        };
        let token = Token::new(1_790_000_000_123, 2);
        let other = Token::new(1_790_000_000_456, 1);
        let one = Settle {
            acks: vec![(id(1), token)],
            ..Settle::default()
        };
        let (packed, cmd) = both(0, &one);
        assert_eq!(packed, cmd);
        let many = Settle {
            // two fetches' tokens, in runs
            acks: (0..40)
                .map(|i| (id(i), if i % 7 < 3 { token } else { other }))
                .collect(),
            ack_bodies: (0..20).map(|i| (id(i), b"{\"i\":1}".to_vec())).collect(),
            // (1 and 2 are batched too)
            results: vec![(id(1), b"{\"ok\":true}".to_vec()), (id(3), b"7".to_vec())],
            reschedules: vec![
                Reschedule {
                    id: id(100),
                    token,
                    delay: Duration::from_millis(1500),
                    deliveries: 3,
                    release: false,
                    error: Some("boom".into()),
                },
                Reschedule {
                    id: id(101),
                    token,
                    delay: Duration::ZERO,
                    deliveries: 1,
                    release: true,
                    error: None,
                },
            ],
            dead: vec![DeadLetterEntry {
                id: id(102),
                token,
                error: "é".repeat(5000),
            }],
            throttles: vec![
                Throttle {
                    id: id(103),
                    token,
                    deliveries: token.attempt().saturating_sub(1),
                    delay: Duration::from_secs(2),
                    error: "slow down".into(),
                    key: true,
                },
                Throttle {
                    id: id(104),
                    token: other,
                    deliveries: other.attempt().saturating_sub(1),
                    delay: Duration::from_millis(10),
                    error: String::new(),
                    key: false,
                },
            ],
            throttle_limit: 3,
            retention: Retention {
                max_count: Some(5),
                max_age: None,
            },
            history: History {
                enabled: true,
                max_count: None,
                max_age: Some(Duration::from_secs(60)),
                args_max_age: None,
            },
            ran: (0..5)
                .map(|i| Ran {
                    id: id(i),
                    started_ms: 1_790_000_000_000,
                    ended_ms: 1_790_000_000_250,
                    outcome: AttemptOutcome::Ok,
                    job_type: Some("mail".into()),
                })
                .collect(),
            by: Some(RunBy {
                worker: "w-1".into(),
                host: "web \"3\"".into(),
            }),
            batched: [1, 2, 102]
                .iter()
                .map(|i| {
                    let batch = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
                    (
                        id(*i),
                        BatchRef {
                            batch,
                            index: u64::from(*i),
                        },
                    )
                })
                .collect(),
        };
        for p in [0, -3, 10] {
            let (packed, cmd) = both(p, &many);
            assert!(packed == cmd, "priority {p}");
        }
    }
}
