//! A claim of a subscriber's idle pending events, as Redis's `XAUTOCLAIM`
//! makes it (see topic_claim.lua): a scan of the pending list from a cursor
//! that reads at most ten entries per event asked for, so that a claim costs
//! the same however many events are pending, and returns where the next scan
//! goes on.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::backend::memory::read_entries;
use crate::backend::memory::streams::{Entry, Group, received};
use crate::contract::attempts::Attempt;
use crate::contract::topics::{Claimed, EventId};

/// Pending entries a claim reads per event asked for (XAUTOCLAIM's
/// "attempts" factor, fixed in Redis).
const ATTEMPTS: usize = 10;

/// One claim: which events it takes, for whom, from where.
pub(super) struct Scan<'a> {
    /// The claiming consumer.
    pub consumer: &'a str,
    /// The least idle time (ms) of an event it takes.
    pub min_idle: u64,
    /// The most events it takes (at least 1).
    pub count: usize,
    /// The first pending id it reads (`0-0` for the start).
    pub from: EventId,
    /// The backend's clock, ms.
    pub now: u64,
}

impl Scan<'_> {
    /// Takes over the idle events of `g` among the next `count` × 10 pending
    /// from the cursor, until `count` are taken. An event trimmed from
    /// `entries` meanwhile leaves the pending list and counts against
    /// `count` (Redis 7's XAUTOCLAIM returns it). The cursor returned is the
    /// pending id after the last read, `0-0` when the scan reached the end.
    pub(super) fn claim(&self, g: &mut Group, entries: &BTreeMap<EventId, Entry>) -> Claimed {
        let mut left = self.count.max(1);
        let mut attempts = left.saturating_mul(ATTEMPTS);
        let mut events = Vec::new();
        let epoch = g.epoch;
        let mut at = first(g, Bound::Included(self.from));
        while let Some(id) = at.filter(|_| left > 0 && attempts > 0) {
            attempts -= 1;
            match entries.get(&id) {
                None => {
                    // trimmed from the topic: gone from the pending list, as
                    // XAUTOCLAIM does
                    g.pending.remove(&id);
                    left -= 1;
                }
                Some(e) => {
                    let p = g.pending.get_mut(&id).expect("read from the pending list");
                    if self.now.saturating_sub(p.delivered_ms) >= self.min_idle {
                        // a delivery that ended with no record: its consumer
                        // died (see topic_claim.lua); records numbered past
                        // its count are an earlier delivery's, which a
                        // rewind's read replaced: they go
                        let last = p.runs.last().map_or(0, |a| a.number);
                        if p.deliveries >= 1 && last > p.deliveries {
                            p.runs.clear();
                        }
                        if p.deliveries > p.runs.last().map_or(0, |a| a.number) {
                            p.record(Attempt::lease_lost(p.deliveries, None));
                        }
                        p.consumer = self.consumer.to_string();
                        p.delivered_ms = self.now;
                        p.deliveries = p.deliveries.saturating_add(1);
                        events.push(received(id, e, p.deliveries, epoch));
                        left -= 1;
                    }
                }
            }
            at = first(g, Bound::Excluded(id));
        }
        Claimed {
            events,
            next: at.unwrap_or(EventId::ZERO),
        }
    }
}

/// The first pending id of `g` from `start` on (one entry read).
fn first(g: &Group, start: Bound<EventId>) -> Option<EventId> {
    read_entries(1);
    g.pending
        .range((start, Bound::Unbounded))
        .next()
        .map(|(id, _)| *id)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::backend::memory::MemoryBackend;
    use crate::backend::memory::tally;
    use crate::contract::topics::{Claimed, EventId, EventOptions, Start, Topics};

    const IDLE: Duration = Duration::from_secs(600);

    /// A backend whose subscriber `s` of topic `t` holds `n` events read by
    /// `c1` and never settled; their ids, oldest first.
    async fn pending(n: usize) -> (MemoryBackend, Vec<EventId>) {
        let m = MemoryBackend::new();
        m.subscribe("t", "s", Start::Beginning).await.unwrap();
        let data: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        let events: Vec<(&str, &str)> = data.iter().map(|d| ("e", d.as_str())).collect();
        let ids = m
            .publish("t", &events, &EventOptions::DEFAULT)
            .await
            .unwrap();
        let got = m.read("t", "s", "c1", n, Duration::ZERO).await.unwrap();
        assert_eq!(got.unwrap().len(), n);
        (m, ids)
    }

    async fn claim(m: &MemoryBackend, count: usize, from: EventId) -> Claimed {
        tally::take();
        m.claim("t", "s", "c2", IDLE, count, from)
            .await
            .unwrap()
            .unwrap()
    }

    /// A claim of 10 over 1,000 pending events none idle long enough reads
    /// 100 of them (XAUTOCLAIM's ten attempts per event asked), not all, and
    /// says where the next claim goes on; the scan that reaches the end
    /// returns `0-0`.
    #[tokio::test]
    async fn a_claim_reads_ten_pending_events_per_event_asked() {
        let (m, ids) = pending(1000).await;
        let c = claim(&m, 10, EventId::ZERO).await;
        let read = tally::take();
        assert!(c.events.is_empty(), "{c:?}");
        assert!(read <= 101, "read {read} pending events");
        assert_eq!(c.next, ids[100]);
        let c = claim(&m, 10, c.next).await;
        assert_eq!(c.next, ids[200]);
        assert!(tally::take() <= 101);
        // the last 100: the scan went round
        let c = claim(&m, 10, ids[900]).await;
        assert_eq!(c.next, EventId::ZERO);
        // past the last: nothing to read
        let c = claim(&m, 10, EventId::new(u64::MAX, 0)).await;
        assert_eq!((c.events.len(), c.next), (0, EventId::ZERO));
    }

    /// Idle events: the first `count` from the cursor are claimed (a second
    /// delivery), and the cursor is the one after the last.
    #[tokio::test]
    async fn a_claim_takes_count_idle_events_from_its_cursor() {
        let (m, ids) = pending(50).await;
        m.clock().advance(IDLE);
        let c = claim(&m, 10, ids[5]).await;
        let got: Vec<(EventId, u32)> = c.events.iter().map(|e| (e.id, e.deliveries)).collect();
        let want: Vec<(EventId, u32)> = ids[5..15].iter().map(|id| (*id, 2)).collect();
        assert_eq!(got, want);
        assert_eq!(c.next, ids[15]);
        // the ones just claimed are not idle: the scan goes on past them
        let c = claim(&m, 10, ids[5]).await;
        assert_eq!(c.events[0].id, ids[15]);
    }

    /// Events trimmed from the topic leave the pending list as the scan meets
    /// them, and count against `count` as on Redis (7 and later, where
    /// XAUTOCLAIM returns them).
    #[tokio::test]
    async fn trimmed_pending_events_count_against_a_claim() {
        let (m, ids) = pending(50).await;
        let mut keep = EventOptions::DEFAULT;
        keep.max_len = Some(10);
        m.publish("t", &[("e", "new")], &keep).await.unwrap();
        let c = claim(&m, 10, EventId::ZERO).await;
        assert!(c.events.is_empty(), "{c:?}");
        assert_eq!(c.next, ids[10]);
        let s = m.topic_info("t").await.unwrap().unwrap().subscribers[0].clone();
        assert_eq!(s.pending, 40);
    }
}
