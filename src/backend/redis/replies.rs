//! The worker scripts' replies, parsed without trusting them: whatever Redis (or
//! something posing as it) answers, the result is a value or an error, never a
//! panic.

use redis::Value;

use super::scripts::{self, Reply};
use crate::contract::leases::{Delivery, Fetched, Settled, Token};
use crate::{Error, JobId, Result};

/// What fetch.lua asks for before it leases anything: to be called again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Again {
    /// With the queue's priority level keys (its reply's -2).
    Levels,
    /// Once adopt.lua has picked up what an RSMQ client's deleteQueue of the
    /// name left (-4): an RSMQ client made the queue.
    Adopt,
}

/// fetch.lua's reply: `{now µs, next due µs or "", lease ms, maxsize, orphans,
/// the limits that held it back (bits: 1 concurrency, 2 rate, 4 throttle, 8
/// stale batches; 16 × the due jobs they held back), then groups of
/// jobs: meta, n, n × (id, body), ...}` where a group's meta, shared by its
/// jobs, is the delivery count + 1000 × (priority + 10) + 21000 × the ms the
/// jobs had been due, negated when the group's own lease end (ms) follows it
/// (a released job's, later than the call's); an [`Again`] when the script
/// asks to be called again. Taken by value: each job's body moves out of the
/// reply, not copied.
pub(crate) fn fetched(v: Value, max: usize) -> Result<std::result::Result<Fetched, Again>> {
    let Value::Array(mut items) = v else {
        return Err(Error::Protocol(format!("expected an array, got {v:?}")));
    };
    let (now, mut r) = Reply::status_of(&items)?;
    let next = r.bytes()?;
    let next_due_us = std::str::from_utf8(next)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|f| f.is_finite())
        .map(|f| f.max(0.0).ceil() as u64);
    let lease_ms = r.int()?.max(0) as u64;
    let max_body = usize::try_from(r.int()?).ok();
    let orphans = r.int()?;
    if orphans == -2 {
        return Ok(Err(Again::Levels));
    }
    if orphans == -4 {
        return Ok(Err(Again::Adopt));
    }
    let bits = r.int()?;
    let held = crate::contract::leases::Held::from_bits(bits);
    let mut jobs = Vec::with_capacity(max.min(1024));
    let mut at = items.len() - r.left();
    while at < items.len() {
        // a group's head: its meta, its own lease end when negated, its size
        let mut r = Reply::of(&items[at..]);
        let meta = r.int()?;
        let lease_ms = if meta < 0 {
            r.int()?.max(0) as u64
        } else {
            lease_ms
        };
        let n = usize::try_from(r.int()?).unwrap_or(0);
        at = items.len() - r.left();
        if n == 0 || n > (items.len() - at) / 2 {
            return Err(Error::Protocol(format!(
                "a fetch's group of {n} jobs with {} items left",
                items.len() - at
            )));
        }
        let meta = meta.saturating_abs();
        let token = Token::new(lease_ms, (meta % 1000).max(1) as u32)
            .at_priority(((meta / 1000) % 21 - 10) as i8);
        let waited_ms = (meta / 21000) as u64;
        for _ in 0..n {
            let id = match &items[at] {
                Value::BulkString(b) => {
                    JobId::from_bytes(b).map_err(|_| String::from_utf8_lossy(b).into_owned())
                }
                v => return Err(Error::Protocol(format!("expected an id, got {v:?}"))),
            };
            // the body moves out of the reply
            let body = match std::mem::replace(&mut items[at + 1], Value::Nil) {
                Value::BulkString(b) => b,
                Value::SimpleString(s) => s.into_bytes(),
                v => return Err(Error::Protocol(format!("expected a body, got {v:?}"))),
            };
            at += 2;
            // an id no RSMQ client writes (a raw ZADD): skipped, so the jobs
            // fetched with it still run; it stays leased and comes back after
            // the lease
            let id = match id {
                Ok(id) => id,
                Err(raw) => {
                    tracing::error!(id = %raw, "skipped a message whose id is not an RSMQ id; delete it");
                    continue;
                }
            };
            jobs.push(Delivery {
                id,
                body,
                token,
                waited_ms,
            });
        }
    }
    Ok(Ok(Fetched {
        jobs,
        now_us: now.max(0) as u64,
        next_due_us,
        max_body,
        orphans: usize::try_from(orphans).unwrap_or(0),
        missing: orphans == -1,
        paused: orphans == -3,
        held,
        stale_batches: bits & 8 != 0,
    }))
}

/// extend.lua's reply: per lease, its new token, or 0 where it was lost.
pub(crate) fn tokens(v: &Value) -> Result<Vec<Option<Token>>> {
    let Value::Array(items) = v else {
        return Err(Error::Protocol(format!("extend reply {v:?}")));
    };
    Ok(items
        .iter()
        .map(|t| match t {
            Value::BulkString(b) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
            _ => None,
        })
        .collect())
}

/// complete.lua's reply: `{acked, rescheduled, dead, gone ids..., batch
/// finishes...}` (a finish has spaces, an id none).
pub(crate) fn settled(v: &Value) -> Result<Settled> {
    let Value::Array(items) = v else {
        return Err(Error::Protocol(format!("settle reply {v:?}")));
    };
    let n = |i: usize| {
        items
            .get(i)
            .map(scripts::int)
            .transpose()
            .map(|o| o.unwrap_or(0).max(0) as u64)
    };
    let gone = items
        .iter()
        .skip(3)
        .filter_map(|v| match v {
            Value::BulkString(b) => crate::JobId::from_bytes(b).ok(),
            _ => None,
        })
        .collect();
    let batched = items
        .iter()
        .skip(3)
        .filter_map(|v| match v {
            Value::BulkString(b) if b.contains(&b' ') => String::from_utf8(b.clone()).ok(),
            _ => None,
        })
        .collect();
    Ok(Settled {
        acked: n(0)?,
        rescheduled: n(1)?,
        dead: n(2)?,
        gone,
        batched,
    })
}

/// One entry of the per-minute ring complete.lua keeps, `"<minute> <processed>
/// <failed>"`; `None` for anything else.
pub(crate) fn minute(v: &str) -> Option<(u64, u64, u64)> {
    let mut it = v.split(' ').map(|n| n.parse::<u64>().ok());
    let m = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(m)
}

#[cfg(test)]
mod tests {
    use redis::Value;

    #[test]
    fn minute_entries_parse_or_are_skipped() {
        assert_eq!(super::minute("29456789 12 3"), Some((29456789, 12, 3)));
        for bad in ["", "1 2", "1 2 3 4", "1 x 3", "-1 2 3", "1  2 3"] {
            assert_eq!(super::minute(bad), None, "{bad:?}");
        }
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// A fetch reply of `jobs` (its groups' items), leased until
    /// 1_700_000_030_000, held back by the limits `bits`.
    fn fetch_reply(bits: i64, jobs: Vec<Value>) -> Value {
        let mut v = vec![
            Value::Int(1_700_000_000_000_000),
            bulk(""),
            Value::Int(1_700_000_030_000),
            Value::Int(-1),
            Value::Int(0),
            Value::Int(bits),
        ];
        v.extend(jobs);
        Value::Array(v)
    }

    #[test]
    fn a_fetch_reply_unpacks_count_priority_and_wait_from_one_integer() {
        let id = "mabcdef1234567890abcdef123456789";
        let meta = |count: i64, priority: i64, waited: i64| {
            Value::Int(count + 1000 * (priority + 10) + 21000 * waited)
        };
        let reply = fetch_reply(
            1,
            vec![
                meta(499, -10, 100_000_000_000),
                Value::Int(1),
                bulk(id),
                bulk("{}"),
                meta(1, 10, 0),
                Value::Int(1),
                bulk(id),
                bulk("{}"),
                meta(7, 0, 1234),
                Value::Int(1),
                bulk(id),
                bulk("{}"),
            ],
        );
        let f = super::fetched(reply.clone(), 10).unwrap().unwrap();
        let got: Vec<_> = f
            .jobs
            .iter()
            .map(|d| (d.token.attempt(), d.token.priority(), d.waited_ms))
            .collect();
        assert_eq!(got, [(499, -10, 100_000_000_000), (1, 10, 0), (7, 0, 1234)]);
        assert!(
            f.held.concurrency && !f.held.rate,
            "held back by the concurrency"
        );
    }

    #[test]
    fn each_fetched_job_keeps_its_own_body_and_lease() {
        let ids = [
            "mabcdef1234567890abcdef123456780",
            "mabcdef1234567890abcdef123456781",
            "mabcdef1234567890abcdef123456782",
            "mabcdef1234567890abcdef123456783",
        ];
        // the second is a released job's: its own lease end follows its
        // group's meta; the third and fourth share theirs
        let reply = fetch_reply(
            0,
            vec![
                Value::Int(10_001),
                Value::Int(1),
                bulk(ids[0]),
                bulk(r#"{"a":1}"#),
                Value::Int(-10_002),
                Value::Int(1_700_000_045_000),
                Value::Int(1),
                bulk(ids[1]),
                bulk(r#"{"b":22}"#),
                Value::Int(10_003 + 21_000 * 5),
                Value::Int(2),
                bulk(ids[2]),
                bulk(r#"{"c":333}"#),
                bulk(ids[3]),
                bulk(r#"{"d":4444}"#),
            ],
        );
        let f = super::fetched(reply, 10).unwrap().unwrap();
        let got: Vec<_> = f
            .jobs
            .iter()
            .map(|d| {
                let body = String::from_utf8(d.body.clone()).unwrap();
                (
                    d.id.to_string(),
                    body,
                    d.token.attempt(),
                    d.token.to_string(),
                    d.waited_ms,
                )
            })
            .collect();
        let want = [
            (ids[0], r#"{"a":1}"#, 1, "1700000030000.501", 0),
            (ids[1], r#"{"b":22}"#, 2, "1700000045000.502", 0),
            (ids[2], r#"{"c":333}"#, 3, "1700000030000.503", 5),
            (ids[3], r#"{"d":4444}"#, 3, "1700000030000.503", 5),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(i, b, n, t, w)| (i.to_string(), b.to_string(), *n, t.to_string(), *w))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_fetch_group_that_does_not_fit_its_reply_is_an_error() {
        let id = "mabcdef1234567890abcdef123456789";
        let with = |tail: Vec<Value>| super::fetched(fetch_reply(0, tail), 10);
        // a group of none, one of more jobs than follow, a size missing, an
        // id that is not a string, a lease end missing, a negative size
        let bad = [
            vec![Value::Int(10_001), Value::Int(0)],
            vec![Value::Int(10_001), Value::Int(2), bulk(id), bulk("{}")],
            vec![Value::Int(10_001)],
            vec![Value::Int(10_001), Value::Int(1), Value::Int(7), bulk("{}")],
            vec![Value::Int(-10_001)],
            vec![Value::Int(10_001), Value::Int(-1), bulk(id), bulk("{}")],
        ];
        for tail in bad {
            assert!(with(tail.clone()).is_err(), "{tail:?}");
        }
        // a well-formed group parses
        let ok = with(vec![
            Value::Int(10_001),
            Value::Int(1),
            bulk(id),
            bulk("{}"),
        ]);
        assert_eq!(ok.unwrap().unwrap().jobs.len(), 1);
    }
}

#[cfg(test)]
mod fuzz {
    //! Arbitrary replies, and replies shaped almost like the real ones: every
    //! parser returns a value or an error, never panics.

    use proptest::prelude::*;
    use redis::Value;

    fn text() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..40),
            "[0-9a-z:]{32}".prop_map(String::into_bytes),
            "-?[0-9]{1,22}(\\.[0-9]{0,4})?".prop_map(String::into_bytes),
            Just(b"inf".to_vec()),
            Just(b"NaN".to_vec()),
        ]
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Nil),
            Just(Value::Okay),
            any::<i64>().prop_map(Value::Int),
            text().prop_map(Value::BulkString),
            "[ -~]{0,12}".prop_map(Value::SimpleString),
            any::<f64>().prop_map(Value::Double),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(3, 64, 12, |inner| {
            prop::collection::vec(inner, 0..12).prop_map(Value::Array)
        })
    }

    /// An array that starts like a real reply: ints, then anything.
    fn shaped() -> impl Strategy<Value = Value> {
        (
            prop::collection::vec(any::<i64>(), 0..5),
            prop::collection::vec(leaf(), 0..16),
        )
            .prop_map(|(ints, rest)| {
                Value::Array(ints.into_iter().map(Value::Int).chain(rest).collect())
            })
    }

    fn id() -> impl Strategy<Value = Value> {
        prop_oneof![
            "[0-9a-z]{32}".prop_map(|s| Value::BulkString(s.into_bytes())),
            leaf(),
        ]
    }

    /// Shaped like receive.lua's replies (and fetch.lua's before its jobs
    /// came in groups), with wild values.
    fn record_shaped() -> impl Strategy<Value = Value> {
        (
            any::<i64>(),
            leaf(),
            any::<i64>(),
            any::<i64>(),
            prop::collection::vec((id(), leaf(), any::<i64>(), any::<i64>()), 0..4),
        )
            .prop_map(|(now, next, lease, max, recs)| {
                let mut v = vec![Value::Int(now), next, Value::Int(lease), Value::Int(max)];
                for (id, body, a, b) in recs {
                    v.extend([id, body, Value::Int(a), Value::Int(b)]);
                }
                Value::Array(v)
            })
    }

    /// Shaped like fetch.lua's reply (six header items, then groups of jobs:
    /// meta, its lease end when negative, a size, ids and bodies), with wild
    /// sizes and values.
    fn group_shaped() -> impl Strategy<Value = Value> {
        (
            any::<i64>(),
            prop_oneof![Just(Value::BulkString(Vec::new())), leaf()],
            prop::collection::vec(any::<i64>(), 4),
            prop::collection::vec(
                (
                    any::<i64>(),
                    any::<i64>(),
                    prop_oneof![-2i64..6, any::<i64>()],
                    prop::collection::vec((id(), leaf()), 0..4),
                ),
                0..4,
            ),
        )
            .prop_map(|(now, next, head, groups)| {
                let mut v = vec![Value::Int(now), next];
                v.extend(head.into_iter().map(Value::Int));
                for (meta, lease, n, jobs) in groups {
                    v.push(Value::Int(meta));
                    if meta < 0 {
                        v.push(Value::Int(lease));
                    }
                    v.push(Value::Int(n));
                    for (id, body) in jobs {
                        v.extend([id, body]);
                    }
                }
                Value::Array(v)
            })
    }

    fn any_reply() -> impl Strategy<Value = Value> {
        prop_oneof![value(), shaped(), record_shaped(), group_shaped()]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn worker_replies_never_panic(v in any_reply(), max in 0usize..5000) {
            let _ = super::fetched(v.clone(), max);
            let _ = super::tokens(&v);
            let _ = super::settled(&v);
        }

        #[test]
        fn queue_replies_never_panic(v in any_reply()) {
            let _ = crate::backend::redis::queues::parse_messages("q", &v);
            let _ = crate::backend::redis::queues::parse_attributes("q", &v);
            let _ = crate::backend::redis::scripts::int(&v);
        }

        #[test]
        fn tokens_and_ids_never_panic(s in "[0-9a-z.:]{0,40}|\\PC{0,40}") {
            let _ = s.parse::<crate::contract::leases::Token>();
            if let Ok(id) = crate::JobId::from_bytes(s.as_bytes()) {
                let _ = (id.sent_ms(), id.sent_at());
            }
        }

        #[test]
        fn the_envelope_decoder_never_panics_on_bytes(b in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = crate::job::decode(&b);
        }

        #[test]
        fn the_envelope_decoder_never_panics_on_json(v in json(), name in "[a-z_]{0,12}") {
            let _ = crate::job::decode(v.to_string().as_bytes());
            // and as the args of an envelope with a known-looking or random name
            for ty in [name.as_str(), "fuzz_probe"] {
                let env = serde_json::json!({ "type": ty, "args": v.clone() });
                let _ = crate::job::decode(env.to_string().as_bytes());
            }
        }
    }

    fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            any::<f64>().prop_map(|f| serde_json::json!(f)),
            "\\PC{0,16}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(4, 48, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("type|args|[a-z]{1,6}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A job registered for the fuzzer: decoding into it must fail cleanly too.
    #[derive(serde::Serialize, serde::Deserialize, redjob_macros::Job)]
    #[job(name = "fuzz_probe")]
    #[allow(dead_code)]
    struct FuzzProbe {
        n: u32,
        s: String,
        v: Vec<i8>,
    }

    impl crate::job::Job for FuzzProbe {
        async fn perform(&self, _: &crate::job::JobContext) -> Result<(), crate::job::JobError> {
            Ok(())
        }
    }
}
