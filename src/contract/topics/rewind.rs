//! What a rewind would do, counted before it is confirmed, and the start that
//! makes it act on what was counted only.

use super::types::{EventId, Start, TopicInfo};

/// What rewinding a subscriber to a [`Start`] does, as a topic's
/// [`TopicInfo`] says when it is read: how many events it replays or skips,
/// and up to which event, so that a confirmation can state it and the action
/// keep to it: a skip to the end with
/// [`Client::skip_to`](crate::Client::skip_to) up to [`upto`](Self::upto)
/// (forward only: a subscriber that read on since stays), or not at all when
/// `upto` is `None` (the topic held no event: nothing was counted, and a
/// rewind to the end as it is then would skip events published since), any
/// other with `rewind` to [`start`](Self::start).
///
/// ```
/// use redjob::topic::{EventId, RewindPlan, Start, SubscriberInfo, TopicInfo};
///
/// let mut info = TopicInfo::default();
/// info.length = 10;
/// info.first = Some(EventId::new(1, 0));
/// info.last = Some(EventId::new(10, 0));
/// let mut s = SubscriberInfo::default();
/// s.name = "billing".into();
/// s.lag = 4;
/// info.subscribers.push(s);
/// let skip = RewindPlan::new(&info, "billing", Start::End).expect("a subscriber");
/// assert_eq!((skip.skips, skip.events), (true, 4));
/// // events published after the count are not skipped
/// assert_eq!(skip.start(), Start::At(EventId::new(10, 1)));
/// let replay = RewindPlan::new(&info, "billing", Start::Beginning).unwrap();
/// assert_eq!((replay.skips, replay.events, replay.exact), (false, 10, true));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RewindPlan {
    /// Where to.
    pub to: Start,
    /// Whether it skips events (a skip to the end), rather than replaying them.
    pub skips: bool,
    /// How many events it replays or skips: exact when [`exact`](Self::exact),
    /// else at most this many (a rewind to an id or a time counts the topic's
    /// events, not those after the point; a subscriber's lag Redis does not
    /// know is counted up to [`LAG_COUNTED`](super::LAG_COUNTED)).
    pub events: u64,
    /// Whether [`events`](Self::events) is the exact count.
    pub exact: bool,
    /// The topic's newest event when it was counted: the last one a skip to
    /// the end skips; `None` when it held none (a skip then skips nothing).
    pub upto: Option<EventId>,
}

impl RewindPlan {
    /// The plan for `subscriber` of the topic `info` describes; `None` when it
    /// has no such subscriber.
    pub fn new(info: &TopicInfo, subscriber: &str, to: Start) -> Option<RewindPlan> {
        let s = info.subscribers.iter().find(|s| s.name == subscriber)?;
        let (skips, events, exact) = match to {
            Start::End => (true, s.lag, s.lag_exact),
            Start::Beginning => (false, info.length, true),
            // from a point: the topic's events after it, at most all of them
            Start::At(id) => (false, info.length, info.first.is_none_or(|f| id <= f)),
            Start::Time(t) => {
                let all = info.first.is_none_or(|f| t <= f.time());
                (false, info.length, all)
            }
        };
        Some(RewindPlan {
            to,
            skips,
            events,
            exact,
            upto: info.last,
        })
    }

    /// The start that does what was counted: a skip to the end stops after
    /// [`upto`](Self::upto), so that events published since are taken; the
    /// others start where asked. A skip is better done with
    /// [`Client::skip_to`](crate::Client::skip_to) up to `upto`: a rewind to
    /// this start moves a subscriber that read on since the count back. With
    /// nothing counted (`upto` is `None`) a skip's start is [`Start::End`],
    /// the end as it is when rewound: a skip that keeps to what was counted
    /// does nothing instead.
    pub fn start(&self) -> Start {
        match (self.to, self.upto) {
            (Start::End, Some(last)) => Start::At(last.after()),
            (to, _) => to,
        }
    }

    /// Whether a backend refuses it when its clock reads `now_ms`: its start
    /// is past the topic's newest event (as counted) and over a minute past
    /// `now_ms`, so it would skip every event published until then (see
    /// [`Topics::rewind`](super::Topics::rewind)).
    ///
    /// ```
    /// use redjob::topic::{EventId, RewindPlan, Start, SubscriberInfo, TopicInfo};
    ///
    /// let mut info = TopicInfo::default();
    /// info.last = Some(EventId::new(10, 0));
    /// let mut s = SubscriberInfo::default();
    /// s.name = "billing".into();
    /// info.subscribers.push(s);
    /// let now = 1_000_000;
    /// let at = |ms| RewindPlan::new(&info, "billing", Start::At(EventId::new(ms, 0))).unwrap();
    /// assert!(!at(5).too_late(now));
    /// assert!(!at(now + 1_000).too_late(now));
    /// assert!(at(now + 3_600_000).too_late(now));
    /// assert!(!RewindPlan::new(&info, "billing", Start::End).unwrap().too_late(now));
    /// ```
    pub fn too_late(&self, now_ms: u64) -> bool {
        let Some(offset) = self.start().offset() else {
            return false;
        };
        super::too_far_ahead(offset, self.upto, now_ms)
    }

    /// The plan as a sentence: "skip the 4 events billing has not taken (up
    /// to 10-0)", "replay the topic's 10 events".
    pub fn describe(&self, subscriber: &str) -> String {
        let n = if self.exact {
            self.events.to_string()
        } else {
            format!("up to {}", self.events)
        };
        let upto = self.upto.map_or(String::new(), |u| format!(" (up to {u})"));
        match self.to {
            Start::End => format!("skip the {n} events {subscriber} has not taken{upto}"),
            Start::Beginning => format!("replay the topic's {n} events for {subscriber}"),
            Start::At(id) => format!("replay {n} events for {subscriber}, from {id}"),
            Start::Time(t) => {
                let ms = t
                    .duration_since(std::time::SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis());
                format!("replay {n} events for {subscriber}, from those of {ms} ms (Unix)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::topics::SubscriberInfo;

    #[test]
    fn plans_count_what_they_touch() {
        let mut info = TopicInfo {
            length: 5,
            first: Some(EventId::new(10, 0)),
            last: Some(EventId::new(14, 0)),
            ..TopicInfo::default()
        };
        info.subscribers.push(SubscriberInfo {
            name: "s".into(),
            lag: 100,
            lag_exact: false,
            ..SubscriberInfo::default()
        });
        let end = RewindPlan::new(&info, "s", Start::End).unwrap();
        assert_eq!((end.events, end.exact), (100, false));
        assert!(end.describe("s").contains("up to 100"));
        let from = RewindPlan::new(&info, "s", Start::At(EventId::new(12, 0))).unwrap();
        assert_eq!((from.events, from.exact), (5, false));
        assert_eq!(from.start(), Start::At(EventId::new(12, 0)));
        let all = RewindPlan::new(&info, "s", Start::At(EventId::new(1, 0))).unwrap();
        assert!(all.exact);
        assert!(RewindPlan::new(&info, "nobody", Start::End).is_none());
        let empty = TopicInfo {
            subscribers: info.subscribers.clone(),
            ..TopicInfo::default()
        };
        let end = RewindPlan::new(&empty, "s", Start::End).unwrap();
        assert_eq!(end.start(), Start::End, "nothing counted: the end");
    }
}
