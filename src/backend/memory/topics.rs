//! [`Topics`] in memory, with Redis Streams' semantics: ids from the backend's
//! clock, consumer groups with an offset and a pending list, claims by idle time.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::backend::memory::MemoryBackend;
use crate::backend::memory::streams::{Group, Pending, group, next_id, not_found, received};
use crate::backend::memory::topic_claim::Scan;
use crate::contract::attempts::Attempt;
use crate::contract::topics::{
    Claimed, DeadEvent, DeadEvents, EventId, EventOptions, EventSettle, Received, Renewed, Start,
    TopicInfo, Topics, WhenFull,
};
use crate::{Error, Result};
impl Topics for MemoryBackend {
    async fn publish(
        &self,
        topic: &str,
        events: &[(&str, &str)],
        options: &EventOptions,
    ) -> Result<Vec<EventId>> {
        crate::contract::topics::check_publish(events)?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.clock().now_ms();
        let ids = {
            let mut all = self.topics();
            let refuse = options.when_full == WhenFull::Refuse;
            // expired events go first, so they never keep a topic full
            let oldest = options.max_age.map(|age| {
                EventId::new(
                    now.saturating_sub(crate::contract::backend::clamped_ms(age)),
                    0,
                )
            });
            if let (Some(oldest), Some(t)) = (oldest, all.get_mut(topic)) {
                t.trim_before(oldest);
            }
            // refused before the topic is made: a first publish refused
            // leaves none, as on Redis
            let held = all.get(topic).map_or(0, |t| t.entries.len() as u64);
            if let Some(max) = options.max_len.filter(|_| refuse)
                && held + events.len() as u64 > max
            {
                return Err(Error::TopicFull {
                    topic: topic.into(),
                    max_len: max,
                });
            }
            let t = all.entry(topic.to_string()).or_default();
            let mut ids = Vec::with_capacity(events.len());
            for (ty, data) in events {
                ids.push(t.append(now, ty.to_string(), data.to_string(), None));
            }
            if let Some(max) = options.max_len.filter(|_| !refuse) {
                t.trim_to(max);
            }
            ids
        };
        self.streams().published.notify_waiters();
        self.changed();
        Ok(ids)
    }

    async fn subscribe(&self, topic: &str, subscriber: &str, start: Start) -> Result<bool> {
        self.subscribe_now(topic, subscriber, start)
    }

    async fn skip_to(&self, topic: &str, subscriber: &str, upto: EventId) -> Result<bool> {
        let to = Start::At(upto.after());
        self.with_group(topic, subscriber, |t, now| {
            let offset = t.offset(to);
            if crate::contract::topics::too_far_ahead(offset, Some(t.last), now) {
                return Err(crate::contract::topics::rewind_too_late(to));
            }
            // never back: a subscriber that read past it stays
            let g = group(t, subscriber);
            if g.offset >= offset {
                return Ok(false);
            }
            g.offset = offset;
            Ok(true)
        })
        .ok_or_else(|| not_found(topic, subscriber))?
    }

    async fn rewind(&self, topic: &str, subscriber: &str, to: Start) -> Result<()> {
        self.with_group(topic, subscriber, |t, now| {
            let offset = t.offset(to);
            // past the last event and over a minute past now (as on Redis,
            // where the minute is a client's clock a little ahead): it would
            // skip every event published until then
            if crate::contract::topics::too_far_ahead(offset, Some(t.last), now) {
                return Err(crate::contract::topics::rewind_too_late(to));
            }
            let g = group(t, subscriber);
            // moved back: events it took may be delivered anew, so the
            // deliveries made before are settled no more (as topic_group.lua)
            if offset < g.offset {
                g.epoch += 1;
            }
            g.offset = offset;
            Ok(())
        })
        .ok_or_else(|| not_found(topic, subscriber))?
    }

    async fn unsubscribe(&self, topic: &str, subscriber: &str) -> Result<bool> {
        let removed = {
            let mut all = self.topics();
            all.get_mut(topic)
                .is_some_and(|t| t.groups.remove(subscriber).is_some())
        };
        self.changed();
        Ok(removed)
    }

    async fn delete_topic(&self, topic: &str) -> Result<bool> {
        let removed = self.topics().remove(topic).is_some();
        self.changed();
        Ok(removed)
    }

    async fn read(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<Option<Vec<Received>>> {
        let count = count.clamp(1, crate::contract::topics::MAX_TAKE);
        // (a block past what the clock can add waits as long as it can)
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(block)
            .unwrap_or_else(|| now + crate::contract::queues::MAX_AHEAD);
        let mut jumps = self.clock().subscribe();
        loop {
            let published = self.streams().published.notified();
            tokio::pin!(published);
            published.as_mut().enable();
            let got = self.with_group(topic, subscriber, |t, now| {
                let (offset, epoch) = {
                    let g = group(t, subscriber);
                    (g.offset, g.epoch)
                };
                let new: Vec<Received> = t
                    .after(offset)
                    .take(count)
                    .map(|(id, e)| received(*id, e, 1, epoch))
                    .collect();
                let g = group(t, subscriber);
                g.consumers.insert(consumer.to_string(), now);
                for e in &new {
                    let id = e.id;
                    g.offset = id;
                    // one pending already (a rewind replays it) is delivered
                    // anew with a count of 1, as XREADGROUP does; its records
                    // stay until its first run's (see settle_events)
                    let runs = g.pending.remove(&id).map(|p| p.runs).unwrap_or_default();
                    g.pending.insert(
                        id,
                        Pending {
                            consumer: consumer.to_string(),
                            delivered_ms: now,
                            deliveries: 1,
                            runs,
                        },
                    );
                }
                new
            });
            match got {
                Some(events) if events.is_empty() && tokio::time::Instant::now() < deadline => {
                    tokio::select! {
                        _ = published => {}
                        _ = tokio::time::sleep_until(deadline) => return Ok(Some(events)),
                        // the clock moved on (or was nudged): a claim may be
                        // due, or the worker is stopping
                        _ = jumps.changed() => return Ok(Some(events)),
                    }
                }
                other => return Ok(other),
            }
        }
    }

    async fn claim(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        min_idle: Duration,
        count: usize,
        from: EventId,
    ) -> Result<Option<Claimed>> {
        let gone = crate::contract::topics::gone_after_ms(min_idle);
        let min_idle = crate::contract::backend::clamped_ms(min_idle);
        Ok(self.with_group(topic, subscriber, |t, now| {
            let g = t.groups.get_mut(subscriber).expect("checked by with_group");
            g.consumers.insert(consumer.to_string(), now);
            let scan = Scan {
                consumer,
                min_idle,
                count: count.clamp(1, crate::contract::topics::MAX_TAKE),
                from,
                now,
            };
            let claimed = scan.claim(g, &t.entries);
            // consumers gone for long that hold nothing leave (see topic_claim.lua)
            let holding: BTreeSet<&str> = g.pending.values().map(|p| p.consumer.as_str()).collect();
            let mut left = 1000;
            g.consumers.retain(|name, seen| {
                let gone = left > 0
                    && !holding.contains(name.as_str())
                    && now.saturating_sub(*seen) >= gone;
                left -= usize::from(gone);
                !gone
            });
            claimed
        }))
    }

    async fn renew(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        ids: &[EventId],
    ) -> Result<Vec<Renewed>> {
        Ok(self
            .with_group(topic, subscriber, |t, now| {
                let g = group(t, subscriber);
                // the consumer is seen (as XCLAIM sees it on Redis)
                g.consumers.insert(consumer.to_string(), now);
                ids.iter()
                    .map(|id| match g.pending.get_mut(id) {
                        Some(p) if p.consumer == consumer => {
                            p.delivered_ms = now;
                            Renewed::Held
                        }
                        Some(_) => Renewed::Claimed,
                        None => Renewed::Gone,
                    })
                    .collect()
            })
            .unwrap_or_else(|| vec![Renewed::Gone; ids.len()]))
    }

    async fn settle_events(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        batch: &EventSettle,
        keep_dead: Option<u64>,
    ) -> Result<()> {
        let at = Instant::now();
        self.with_group(topic, subscriber, |t, now| {
            let g = group(t, subscriber);
            // each outcome applies to the delivery it names alone (see
            // Delivery), as topic_settle.lua: an acknowledgement in its
            // epoch, whoever holds the event now (it was handled), but a
            // claimed delivery's not once a read delivered it anew (its
            // count went back below)
            for d in &batch.acks {
                let anew = || g.pending.get(&d.id).is_none_or(|p| p.deliveries < d.count);
                if g.epoch == d.epoch && (d.count <= 1 || !anew()) {
                    g.pending.remove(&d.id);
                }
            }
            let mut runs: HashMap<EventId, Vec<Attempt>> = HashMap::new();
            for r in &batch.runs {
                let a = r.attempt(at, now, batch.by.as_ref());
                runs.entry(r.id).or_default().push(a);
            }
            // the runs of an event's delivery from its first on replace its
            // records (an earlier delivery's, which a rewind replaced; or
            // these runs sent again), as topic_settle.lua does
            let record = |p: &mut Pending, runs: Vec<Attempt>| {
                if runs.first().is_some_and(|a| a.number == 1) {
                    p.runs.clear();
                }
                for a in runs {
                    p.record_run(a);
                }
            };
            for (d, idle, count) in &batch.retries {
                let id = &d.id;
                if !g.holds(consumer, d) {
                    continue;
                }
                if let Some(p) = g.pending.get_mut(id) {
                    p.delivered_ms =
                        now.saturating_sub(crate::contract::backend::clamped_ms(*idle));
                    if let Some(n) = count {
                        p.deliveries = *n;
                    }
                    record(p, runs.remove(id).unwrap_or_default());
                }
            }
            for (d, e, error) in &batch.dead {
                // one another consumer claimed meanwhile is left to it
                if g.holds(consumer, d)
                    && let Some(mut p) = g.pending.remove(&d.id)
                {
                    record(&mut p, runs.remove(&e.id).unwrap_or_default());
                    g.last_dead = next_id(g.last_dead, now);
                    g.dead.push_back(DeadEvent {
                        dead_id: g.last_dead,
                        id: e.id,
                        event_type: e.event_type.clone().unwrap_or_default(),
                        data: e.data.clone().unwrap_or_default(),
                        error: error.clone(),
                        deliveries: e.deliveries,
                        at_ms: now,
                        runs: p.runs,
                    });
                    if let Some(keep) = keep_dead {
                        while g.dead.len() as u64 > keep {
                            g.dead.pop_front();
                        }
                    }
                }
            }
        });
        Ok(())
    }

    async fn own(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        lease: Option<Duration>,
    ) -> Result<bool> {
        let now = self.clock().now_ms();
        let mut owners = self
            .streams()
            .owners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (topic.to_string(), subscriber.to_string());
        let taken = owners
            .get(&key)
            .is_some_and(|(who, until)| *until > now && who != consumer);
        Ok(match lease {
            None => {
                if !taken {
                    owners.remove(&key);
                }
                false
            }
            Some(_) if taken => false,
            Some(lease) => {
                let until = now + crate::contract::backend::clamped_ms(lease).max(1);
                owners.insert(key, (consumer.to_string(), until));
                true
            }
        })
    }

    async fn leave(&self, topic: &str, subscriber: &str, consumer: &str) -> Result<()> {
        self.with_group(topic, subscriber, |t, _| {
            let g = group(t, subscriber);
            if !g.pending.values().any(|p| p.consumer == consumer) {
                g.consumers.remove(consumer);
            }
        });
        Ok(())
    }

    async fn topic_names(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self.topics().keys().cloned().collect();
        names.sort_unstable();
        Ok(names)
    }

    async fn topic_info(&self, topic: &str) -> Result<Option<TopicInfo>> {
        Ok(self.topic_info_now(topic))
    }

    async fn dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        limit: usize,
    ) -> Result<Vec<DeadEvent>> {
        Ok(self
            .with_group(topic, subscriber, |t, _| {
                group(t, subscriber)
                    .dead
                    .iter()
                    .rev()
                    .take(limit.min(crate::contract::inspect::MAX_PAGE))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn requeue_dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        which: DeadEvents<'_>,
    ) -> Result<u64> {
        let n = self
            .with_group(topic, subscriber, |t, now| {
                let letters = take_dead(group(t, subscriber), which);
                for d in &letters {
                    let to = Some(subscriber.to_string());
                    t.append(now, d.event_type.clone(), d.data.clone(), to);
                }
                letters.len() as u64
            })
            .ok_or_else(|| not_found(topic, subscriber))?;
        if n > 0 {
            self.streams().published.notify_waiters();
        }
        Ok(n)
    }

    async fn delete_dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        which: DeadEvents<'_>,
    ) -> Result<u64> {
        Ok(self
            .with_group(topic, subscriber, |t, _| {
                take_dead(group(t, subscriber), which).len() as u64
            })
            .unwrap_or(0))
    }
}

/// Removes and returns the group's dead letters `which` selects, oldest first.
fn take_dead(g: &mut Group, which: DeadEvents<'_>) -> Vec<DeadEvent> {
    match which {
        DeadEvents::All => g.dead.drain(..).collect(),
        DeadEvents::Ids(ids) => {
            let ids: BTreeSet<EventId> = ids.iter().copied().collect();
            let (taken, kept): (VecDeque<_>, VecDeque<_>) =
                g.dead.drain(..).partition(|d| ids.contains(&d.dead_id));
            g.dead = kept;
            taken.into()
        }
        DeadEvents::UpTo(upto) => {
            let (taken, kept): (VecDeque<_>, VecDeque<_>) =
                g.dead.drain(..).partition(|d| d.dead_id <= upto);
            g.dead = kept;
            taken.into()
        }
    }
}
