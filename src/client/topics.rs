//! The topic calls of [`Client`].

use crate::Result;
use crate::client::Client;
use crate::contract::topics::{
    DeadEvent, DeadEventCount, DeadEvents, EventId, Start, TopicInfo, Topics, check_name,
};
use crate::topic::Event;

/// Checks a topic's and a subscriber's names.
fn check_names(topic: &str, subscriber: &str) -> Result<()> {
    check_name("topic name", topic)?;
    check_name("subscriber name", subscriber)
}

impl Client {
    /// Publishes an event to its type's topic, applying the type's retention.
    /// Returns its id. See the [`topic`](crate::topic) module for an example.
    pub async fn publish<E: Event>(&self, event: &E) -> Result<EventId> {
        let ids = self.publish_all(std::slice::from_ref(event)).await?;
        ids.into_iter()
            .next()
            .ok_or_else(|| crate::Error::Protocol("publish returned no id".into()))
    }

    /// Publishes events of one type in one round trip (all or, when the topic
    /// is full and refuses, none). Returns their ids in order.
    ///
    /// One round trip takes at most [`MAX_PUBLISH`](crate::topic::MAX_PUBLISH)
    /// (16,000) events and [`MAX_PUBLISH_BYTES`](crate::topic::MAX_PUBLISH_BYTES)
    /// (64 MiB): a larger call is refused with
    /// [`Error::InvalidValue`](crate::Error::InvalidValue), nothing published,
    /// so that its reply comes within the response timeout (a call that timed
    /// out with its events stored would be sent again, each event twice).
    /// Publish more in parts of that size, each all or none.
    ///
    /// ```
    /// # use redjob::topic::Event;
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Serialize, Deserialize, Event)]
    /// #[event(topic = "clicks")]
    /// struct Click { x: u32 }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(Default::default());
    /// let ids = client.publish_all(&[Click { x: 1 }, Click { x: 2 }]).await?;
    /// assert!(ids[0] < ids[1]);
    /// assert_eq!(client.topic("clicks").await?.unwrap().length, 2);
    /// # Ok(()) }
    /// ```
    pub async fn publish_all<E: Event>(&self, events: &[E]) -> Result<Vec<EventId>> {
        check_name("topic name", E::OPTIONS.topic)?;
        let data = events
            .iter()
            .map(|e| {
                let data = crate::job::depth::to_vec(e)?;
                // serde_json writes UTF-8
                String::from_utf8(data).map_err(|e| crate::Error::Protocol(e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        let pairs: Vec<(&str, &str)> = data.iter().map(|d| (E::NAME, d.as_str())).collect();
        self.queues()
            .publish(E::OPTIONS.topic, &pairs, &E::OPTIONS)
            .await
    }

    /// Creates a subscriber (a consumer group) on `topic` starting at `start`;
    /// one that exists keeps its offset. Returns whether it was created. A
    /// worker creates its subscribers when it starts (at the
    /// [`Subscription`](crate::topic::Subscription)'s start); create one beforehand
    /// to not miss events published before then.
    pub async fn subscribe(&self, topic: &str, subscriber: &str, start: Start) -> Result<bool> {
        check_names(topic, subscriber)?;
        self.queues().subscribe(topic, subscriber, start).await
    }

    /// Moves a subscriber's offset: to [`Start::Beginning`] to replay everything
    /// the topic holds, to an id or a time to replay from there, or to
    /// [`Start::End`] to skip what is waiting. Running workers take the new
    /// offset with their next read.
    ///
    /// ```
    /// # use redjob::topic::{Event, Start};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize, Event)]
    /// # #[event(topic = "clicks")]
    /// # struct Click { x: u32 }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(Default::default());
    /// client.subscribe("clicks", "stats", Start::End).await?;
    /// client.publish(&Click { x: 1 }).await?;
    /// client.rewind("clicks", "stats", Start::End).await?;
    /// let stats = &client.topic("clicks").await?.unwrap().subscribers[0];
    /// assert_eq!(stats.lag, 0);
    /// # Ok(()) }
    /// ```
    pub async fn rewind(&self, topic: &str, subscriber: &str, to: Start) -> Result<()> {
        check_names(topic, subscriber)?;
        self.queues().rewind(topic, subscriber, to).await
    }

    /// Skips a subscriber forward to just after event `upto` (a skip to the
    /// end as an operator saw it counted, up to its newest event then), and
    /// never back: a subscriber that took `upto` already stays where it is.
    /// Returns whether it moved.
    ///
    /// ```
    /// # use redjob::topic::{Event, Start};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize, Event)]
    /// # #[event(topic = "clicks")]
    /// # struct Click { x: u32 }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(Default::default());
    /// client.subscribe("clicks", "stats", Start::Beginning).await?;
    /// let first = client.publish(&Click { x: 1 }).await?;
    /// client.publish(&Click { x: 2 }).await?;
    /// assert!(client.skip_to("clicks", "stats", first).await?);
    /// let stats = &client.topic("clicks").await?.unwrap().subscribers[0];
    /// assert_eq!(stats.lag, 1);
    /// // back to `first` is no skip: it stays
    /// client.rewind("clicks", "stats", Start::End).await?;
    /// assert!(!client.skip_to("clicks", "stats", first).await?);
    /// # Ok(()) }
    /// ```
    pub async fn skip_to(&self, topic: &str, subscriber: &str, upto: EventId) -> Result<bool> {
        check_names(topic, subscriber)?;
        self.queues().skip_to(topic, subscriber, upto).await
    }

    /// Deletes a subscriber with its pending events and dead letters. Returns
    /// whether it existed.
    pub async fn unsubscribe(&self, topic: &str, subscriber: &str) -> Result<bool> {
        check_names(topic, subscriber)?;
        self.queues().unsubscribe(topic, subscriber).await
    }

    /// Deletes a topic, its subscribers and their dead letters. Returns whether
    /// it existed. Workers consuming it keep running and recreate their
    /// subscribers on an empty topic.
    pub async fn delete_topic(&self, topic: &str) -> Result<bool> {
        check_name("topic name", topic)?;
        self.queues().delete_topic(topic).await
    }

    /// The names of the topics that exist (published to or subscribed to, and
    /// not deleted), sorted. A stream under the topics' key pattern whose name
    /// is no valid topic name (made by another program, as `ns:t:{orders.v2}`)
    /// is left out: every name listed can be passed to the other topic calls.
    ///
    /// ```
    /// # use redjob::topic::Start;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(Default::default());
    /// client.subscribe("clicks", "stats", Start::End).await?;
    /// assert_eq!(client.topics().await?, ["clicks"]);
    /// # Ok(()) }
    /// ```
    pub async fn topics(&self) -> Result<Vec<String>> {
        let mut names = self.queues().topic_names().await?;
        names.retain(|name| check_name("topic name", name).is_ok());
        Ok(names)
    }

    /// The topic's length, first and last ids, memory, and per subscriber its
    /// offset, pending events, lag and dead letters. `None` for no such topic.
    pub async fn topic(&self, topic: &str) -> Result<Option<TopicInfo>> {
        check_name("topic name", topic)?;
        self.queues().topic_info(topic).await
    }

    /// [`topic`](Self::topic) with `subscriber` alone among its subscribers
    /// (none when the topic has no subscriber of that name): the topic's
    /// facts and this subscriber's offset, pending events, lag and dead
    /// letters, the others' lags not counted (one round trip on Redis). A
    /// subscriber's dead-letter page and its actions read so. `None` for no
    /// such topic.
    ///
    /// ```
    /// # use redjob::topic::Start;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(Default::default());
    /// client.subscribe("clicks", "stats", Start::End).await?;
    /// client.subscribe("clicks", "audit", Start::End).await?;
    /// let t = client.topic_for("clicks", "stats").await?.unwrap();
    /// assert_eq!(t.subscribers.len(), 1);
    /// assert!(client.topic_for("clicks", "nobody").await?.unwrap().subscribers.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn topic_for(&self, topic: &str, subscriber: &str) -> Result<Option<TopicInfo>> {
        check_names(topic, subscriber)?;
        self.queues().topic_info_for(topic, subscriber).await
    }

    /// [`topic`](Self::topic) of each of `topics`, in their order (`None` for
    /// one that does not exist, as one deleted since it was listed): a page
    /// of [`topics`](Self::topics) read together, in two round trips on one
    /// Redis server whatever the number of topics (see
    /// [`Topics::topic_infos`]). The dashboard's topic list and `redjob
    /// topic list` read their topics so.
    ///
    /// ```
    /// # use redjob::topic::Start;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(Default::default());
    /// client.subscribe("clicks", "stats", Start::End).await?;
    /// let names = client.topics().await?;
    /// let page = client.topic_infos(&names[..names.len().min(50)]).await?;
    /// assert_eq!(page[0].as_ref().unwrap().subscribers[0].name, "stats");
    /// let gone = client.topic_infos(&["nope".to_string()]).await?;
    /// assert!(gone[0].is_none());
    /// # Ok(()) }
    /// ```
    pub async fn topic_infos(&self, topics: &[String]) -> Result<Vec<Option<TopicInfo>>> {
        for topic in topics {
            check_name("topic name", topic)?;
        }
        self.queues().topic_infos(topics).await
    }

    /// A subscriber's newest `limit` dead letters, newest first.
    pub async fn dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        limit: usize,
    ) -> Result<Vec<DeadEvent>> {
        check_names(topic, subscriber)?;
        self.queues().dead_events(topic, subscriber, limit).await
    }

    /// Requeues a subscriber's dead letters with these
    /// [`dead_id`](DeadEvent::dead_id)s (others are skipped): each goes to the
    /// end of the topic again for this subscriber alone (see the entry format in
    /// [the topics chapter](crate::guide::topics)), with a new id and a fresh count of attempts. Returns how many
    /// were requeued.
    ///
    /// ```
    /// # use redjob::topic::Start;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(Default::default());
    /// client.subscribe("clicks", "stats", Start::End).await?;
    /// let dead = client.dead_events("clicks", "stats", 100).await?;
    /// let ids: Vec<_> = dead.iter().map(|d| d.dead_id).collect();
    /// assert_eq!(client.requeue_dead_events("clicks", "stats", &ids).await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn requeue_dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        ids: &[EventId],
    ) -> Result<u64> {
        check_names(topic, subscriber)?;
        // (no ids: the backend still checks the subscriber exists)
        self.queues()
            .requeue_dead_events(topic, subscriber, DeadEvents::Ids(ids))
            .await
    }

    /// Requeues all of a subscriber's dead letters, oldest first (see
    /// [`requeue_dead_events`](Self::requeue_dead_events)): those there when
    /// it starts, each once (one that fails again meanwhile is left for the
    /// next call); returns how many.
    pub async fn requeue_all_dead_events(&self, topic: &str, subscriber: &str) -> Result<u64> {
        check_names(topic, subscriber)?;
        self.queues()
            .requeue_dead_events(topic, subscriber, DeadEvents::All)
            .await
    }

    /// How many dead letters a subscriber has, and the newest's id: the
    /// cutoff that keeps a requeue or delete confirmed after the count to the
    /// letters counted ([`requeue_dead_events_upto`](Self::requeue_dead_events_upto),
    /// [`delete_dead_events_upto`](Self::delete_dead_events_upto)).
    ///
    /// ```
    /// # use redjob::topic::Start;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(Default::default());
    /// client.subscribe("clicks", "stats", Start::End).await?;
    /// let dead = client.count_dead_events("clicks", "stats").await?;
    /// assert_eq!((dead.count, dead.upto), (0, None));
    /// # Ok(()) }
    /// ```
    pub async fn count_dead_events(&self, topic: &str, subscriber: &str) -> Result<DeadEventCount> {
        check_names(topic, subscriber)?;
        // the newest first, then the count: any letter up to the newest is
        // counted, so an action up to it takes no letter uncounted
        let newest = self.dead_events(topic, subscriber, 1).await?;
        let upto = newest.first().map(|d| d.dead_id);
        let info = self.queues().topic_info_for(topic, subscriber).await?;
        let count = info
            .and_then(|t| t.subscribers.into_iter().find(|s| s.name == subscriber))
            .ok_or_else(|| crate::Error::SubscriberNotFound {
                topic: topic.into(),
                subscriber: subscriber.into(),
            })?
            .dead;
        Ok(DeadEventCount { count, upto })
    }

    /// Requeues a subscriber's dead letters up to `upto` (a
    /// [`count_dead_events`](Self::count_dead_events)' newest), oldest first;
    /// returns how many.
    pub async fn requeue_dead_events_upto(
        &self,
        topic: &str,
        subscriber: &str,
        upto: EventId,
    ) -> Result<u64> {
        check_names(topic, subscriber)?;
        self.queues()
            .requeue_dead_events(topic, subscriber, DeadEvents::UpTo(upto))
            .await
    }

    /// Deletes a subscriber's dead letters up to `upto` (a
    /// [`count_dead_events`](Self::count_dead_events)' newest); returns how
    /// many there were.
    pub async fn delete_dead_events_upto(
        &self,
        topic: &str,
        subscriber: &str,
        upto: EventId,
    ) -> Result<u64> {
        check_names(topic, subscriber)?;
        self.queues()
            .delete_dead_events(topic, subscriber, DeadEvents::UpTo(upto))
            .await
    }

    /// Deletes a subscriber's dead letters with these
    /// [`dead_id`](DeadEvent::dead_id)s; returns how many there were.
    pub async fn delete_dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        ids: &[EventId],
    ) -> Result<u64> {
        check_names(topic, subscriber)?;
        if ids.is_empty() {
            return Ok(0);
        }
        self.queues()
            .delete_dead_events(topic, subscriber, DeadEvents::Ids(ids))
            .await
    }

    /// Deletes all of a subscriber's dead letters, those there when it starts;
    /// returns how many there were.
    pub async fn purge_dead_events(&self, topic: &str, subscriber: &str) -> Result<u64> {
        check_names(topic, subscriber)?;
        self.queues()
            .delete_dead_events(topic, subscriber, DeadEvents::All)
            .await
    }
}
