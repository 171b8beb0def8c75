//! [`Topics::topic_info`](crate::contract::topics::Topics::topic_info) in
//! memory: a topic's length, ids and memory, and per subscriber its exact
//! lag, from a few events read however long the topic is (topic_info.lua
//! reads at most 101 per subscriber and samples the memory).

use crate::backend::memory::streams::MemTopic;
use crate::backend::memory::{MemoryBackend, read_entries};
use crate::contract::topics::{EventId, SubscriberInfo, TopicInfo};

impl MemTopic {
    /// The events after `offset`: the places ([`Entry::n`]) from the first
    /// after it to the last, counted by a subtraction (two events read).
    ///
    /// [`Entry::n`]: crate::backend::memory::streams::Entry::n
    pub(super) fn lag(&self, offset: EventId) -> u64 {
        let Some((_, first)) = self.after(offset).next() else {
            return 0;
        };
        let (_, last) = self.entries.last_key_value().expect("one after the offset");
        read_entries(2);
        debug_assert_eq!(
            self.entries
                .first_key_value()
                .map(|(_, e)| last.n + 1 - e.n),
            Some(self.entries.len() as u64),
            "the places of the events held run without a gap"
        );
        last.n + 1 - first.n
    }
}

impl MemoryBackend {
    /// [`Topics::topic_info`](crate::contract::topics::Topics::topic_info),
    /// at once: its memory is the total kept as events come and go.
    pub(crate) fn topic_info_now(&self, topic: &str) -> Option<TopicInfo> {
        let all = self.topics();
        let t = all.get(topic)?;
        let subscribers = t
            .groups
            .iter()
            .map(|(name, g)| SubscriberInfo {
                name: name.clone(),
                offset: g.offset,
                pending: g.pending.len() as u64,
                lag: t.lag(g.offset),
                lag_exact: true,
                consumers: g.consumers.len() as u64,
                dead: g.dead.len() as u64,
            })
            .collect();
        Some(TopicInfo {
            length: t.entries.len() as u64,
            published: t.added,
            first: t.entries.keys().next().copied(),
            last: t.entries.keys().next_back().copied(),
            memory: t.bytes,
            subscribers,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::backend::memory::MemoryBackend;
    use crate::backend::memory::tally;
    use crate::contract::topics::{
        DeadEvents, EventId, EventOptions, EventSettle, Start, SubscriberInfo, Topics,
    };

    fn options(max_len: Option<u64>, max_age: Option<Duration>) -> EventOptions {
        let mut o = EventOptions::DEFAULT;
        o.max_len = max_len;
        o.max_age = max_age;
        o
    }

    /// Publishes `n` events of `data` sizes growing from `from`.
    async fn publish(m: &MemoryBackend, n: usize, from: usize, o: &EventOptions) -> Vec<EventId> {
        let data: Vec<String> = (from..from + n).map(|i| "x".repeat(i % 37)).collect();
        let events: Vec<(&str, &str)> = data.iter().map(|d| ("e", d.as_str())).collect();
        m.publish("t", &events, o).await.unwrap()
    }

    fn lags(subs: &[SubscriberInfo]) -> Vec<(&str, u64, bool)> {
        subs.iter()
            .map(|s| (s.name.as_str(), s.lag, s.lag_exact))
            .collect()
    }

    /// What the topic's lags and memory are, counted event by event.
    fn recount(m: &MemoryBackend) -> (Vec<u64>, u64) {
        let all = m.topics();
        let t = &all["t"];
        let lags = t.groups.values().map(|g| t.after(g.offset).count() as u64);
        let memory = t.entries.values().map(|e| {
            (e.ty.len() + e.data.len() + e.to.as_ref().map_or(0, String::len) + 16) as u64
        });
        // every event's place, one after another
        let places: Vec<u64> = t.entries.values().map(|e| e.n).collect();
        assert!(places.windows(2).all(|w| w[1] == w[0] + 1), "{places:?}");
        (lags.collect(), memory.sum())
    }

    /// A topic of 1,000 events with subscribers 1,000, 600 and 0 behind:
    /// each's exact lag and the topic's memory from a few events read, not
    /// from every event (topic_info.lua reads at most 101 per subscriber).
    #[tokio::test]
    async fn topic_info_reads_a_few_events_however_long_the_topic() {
        let m = MemoryBackend::new();
        m.subscribe("t", "behind", Start::Beginning).await.unwrap();
        m.subscribe("t", "mid", Start::Beginning).await.unwrap();
        let ids = publish(&m, 1000, 0, &options(None, None)).await;
        m.subscribe("t", "end", Start::End).await.unwrap();
        let got = m.read("t", "mid", "c", 400, Duration::ZERO).await.unwrap();
        assert_eq!(got.unwrap().len(), 400);
        tally::take();
        let info = m.topic_info("t").await.unwrap().unwrap();
        let read = tally::take();
        assert_eq!(
            lags(&info.subscribers),
            [("behind", 1000, true), ("end", 0, true), ("mid", 600, true)]
        );
        assert!(read <= 6, "read {read} events");
        assert_eq!((info.first, info.last), (Some(ids[0]), Some(ids[999])));
        assert_eq!(info.memory, recount(&m).1);
    }

    /// The lag and memory stay those of the events held through trims by
    /// length and by age, rewinds, and a requeued dead letter (which has a
    /// `to`).
    #[tokio::test]
    async fn lag_and_memory_stay_right_through_trims_and_requeues() {
        let m = MemoryBackend::new();
        m.subscribe("t", "a", Start::Beginning).await.unwrap();
        m.subscribe("t", "b", Start::Beginning).await.unwrap();
        let check = async |m: &MemoryBackend| {
            let info = m.topic_info("t").await.unwrap().unwrap();
            let lags: Vec<u64> = info.subscribers.iter().map(|s| s.lag).collect();
            assert_eq!((lags, info.memory), recount(m));
            assert!(info.subscribers.iter().all(|s| s.lag_exact));
        };
        let ids = publish(&m, 100, 0, &options(None, None)).await;
        check(&m).await;
        m.read("t", "b", "c", 30, Duration::ZERO).await.unwrap();
        check(&m).await;
        // by length: b's offset is trimmed
        publish(&m, 50, 100, &options(Some(60), None)).await;
        check(&m).await;
        // by age: the first ones are a minute older
        m.clock().advance(Duration::from_secs(60));
        let last = publish(&m, 5, 150, &options(None, Some(Duration::from_secs(30)))).await;
        check(&m).await;
        assert_eq!(m.topic_info("t").await.unwrap().unwrap().length, 5);
        // before the first held, and in the middle
        m.rewind("t", "a", Start::At(ids[10])).await.unwrap();
        check(&m).await;
        m.rewind("t", "a", Start::At(last[2])).await.unwrap();
        check(&m).await;
        // a dead letter of b, requeued for it
        let got = m.read("t", "b", "c", 1, Duration::ZERO).await.unwrap();
        let dead = EventSettle {
            dead: vec![{
                let e = got.unwrap()[0].clone();
                (e.delivery(), e, "boom".into())
            }],
            ..EventSettle::default()
        };
        m.settle_events("t", "b", "c", &dead, None).await.unwrap();
        let requeued = m.requeue_dead_events("t", "b", DeadEvents::All).await;
        assert_eq!(requeued.unwrap(), 1);
        check(&m).await;
        m.read("t", "b", "c", 100, Duration::ZERO).await.unwrap();
        check(&m).await;
    }
}
