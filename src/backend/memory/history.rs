//! A memory queue's history of finished jobs, kept as complete.lua and
//! history.lua keep Redis's (see history.rs): entries by finish time, each
//! with its stored text and, while kept, its body.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound::{Excluded, Unbounded};
use std::time::Duration;

use crate::JobId;
use crate::contract::attempts;
use crate::contract::history::{
    Entry, Finish, Finished, History, HistoryEvent, actor_line, body_type,
};
use crate::contract::inspect::{Cursor, JobInfo, Page};
use crate::contract::leases::score_count;

#[derive(Default)]
pub(super) struct MemHistory {
    /// (finish ms, entered, id), as `ns:q:history:ids`, which orders the jobs
    /// of one ms as they were entered (so the count keeps the same ones).
    order: BTreeSet<Key>,
    /// Each entry's place in `order` and stored text (its body at its end
    /// while kept), as `ns:q:history:Q`.
    entries: HashMap<JobId, (Key, Vec<u8>)>,
    /// The entries whose body is kept (Redis reads them by finish time past a
    /// mark instead).
    args: BTreeSet<Key>,
    /// The places of entries entered again since (a dead letter requeued
    /// that finished again), as the list keeps a dead job's `~<ms> <id>`:
    /// a page that ended on one goes on from there. Those older than the
    /// oldest entry go at a trim.
    left: BTreeSet<Key>,
    /// How many entries were entered: the next one's place among its ms's.
    entered: u64,
    /// The events, as the field `~events` holds them.
    events: String,
}

/// An entry's place: its finish ms, when it was entered, its id.
type Key = (u64, u64, JobId);

fn ms(d: Duration) -> u64 {
    d.as_millis().min(1 << 52) as u64
}

impl MemHistory {
    /// Enters job `id`, finished at `at` ms, with `body` unless `h` keeps none.
    pub fn record(&mut self, id: JobId, at: u64, entry: &Entry, body: Option<Vec<u8>>, h: History) {
        if let Some((old, _)) = self.entries.remove(&id) {
            self.order.remove(&old);
            self.args.remove(&old);
            self.left.insert(old);
        }
        self.entered += 1;
        let key = (at, self.entered, id);
        let body = body.filter(|_| h.args_max_age != Some(Duration::ZERO));
        if body.is_some() && h.args_max_age.is_some() {
            self.args.insert(key);
        }
        self.order.insert(key);
        let text = entry.encode(body.as_deref().unwrap_or_default());
        self.entries.insert(id, (key, text));
    }

    /// Adds an event's stored line, keeping the last ones.
    pub fn push_event(&mut self, line: &str) {
        self.events = crate::contract::history::push_event(Some(&self.events), line);
    }

    /// The events, newest first.
    pub fn events(&self) -> Vec<crate::contract::history::HistoryEvent> {
        crate::contract::history::HistoryEvent::parse_all(&self.events)
    }

    /// Drops the entries past their age and the oldest beyond the count
    /// (once over it, down to a twentieth under it), and the bodies past
    /// theirs, at most `budget` of each (trim_history in lib.lua).
    pub fn trim(&mut self, now: u64, budget: usize, h: History) {
        let mut old: Vec<Key> = Vec::new();
        if let Some(age) = h.max_age {
            let before = now.saturating_sub(ms(age));
            old.extend(
                self.order
                    .iter()
                    .take_while(|(at, ..)| *at < before)
                    .take(budget),
            );
        }
        if let Some(keep) = h.max_count {
            // once over the count, down to a twentieth under it in one step
            // (as Redis's settles, which trim once in many)
            let over = (self.order.len() - old.len()).saturating_sub(keep as usize);
            let over = if over > 0 {
                over + keep as usize / 20
            } else {
                0
            };
            let more = over.min(budget.saturating_sub(old.len()));
            old.extend(self.order.iter().skip(old.len()).take(more));
        }
        for key in old {
            self.order.remove(&key);
            self.args.remove(&key);
            self.entries.remove(&key.2);
        }
        // places left before the oldest entry: a page from one lists what
        // a page from the oldest would
        match self.order.first() {
            Some(first) => self.left = self.left.split_off(first),
            None => self.left.clear(),
        }
        if let Some(args) = h.args_max_age {
            let before = now.saturating_sub(ms(args));
            let expired: Vec<Key> = self
                .args
                .iter()
                .take_while(|(at, ..)| *at < before)
                .take(budget)
                .copied()
                .collect();
            for key in expired {
                self.args.remove(&key);
                if let Some(e) = self.entries.get_mut(&key.2)
                    && let Some((entry, _)) = Entry::decode(&e.1)
                {
                    e.1 = entry.encode(&[]);
                }
            }
        }
    }

    /// Whether an entry finished at `at` is still shown at `now`, and its body.
    fn shown(at: u64, now: u64, h: History) -> (bool, bool) {
        let within = |d: Option<Duration>| d.is_none_or(|d| at >= now.saturating_sub(ms(d)));
        (within(h.max_age), within(h.args_max_age))
    }

    /// Job `id` as its entry says, unless past its age.
    pub fn get(&self, id: &JobId, now: u64, h: History) -> Option<JobInfo> {
        let ((at, ..), text) = self.entries.get(id)?;
        let (entry, body_shown) = Self::shown(*at, now, h);
        if !entry {
            return None;
        }
        let (entry, body) = Entry::decode(text)?;
        Some(crate::contract::inspect::finished_info(
            entry,
            *id,
            body.filter(|_| body_shown),
        ))
    }

    /// A page of the entries, newest first, after `after`.
    pub fn page(&self, now: u64, h: History, after: Option<&Cursor>, n: usize) -> Page {
        // after an entry still kept, or the place of one entered again
        // since: the entries before it; after one trimmed since, those of
        // earlier ms
        let upper = match after {
            Some(c) => {
                let ms = c.score / 1000;
                let place = match self.entries.get(&c.id) {
                    Some((key, _)) if key.0 == ms => Some(*key),
                    _ => self
                        .left
                        .range((ms, 0, JobId::MIN)..=(ms, u64::MAX, JobId::MAX))
                        .rev()
                        .find(|k| k.2 == c.id)
                        .copied(),
                };
                Excluded(place.unwrap_or((ms, 0, JobId::MIN)))
            }
            None => Unbounded,
        };
        let mut jobs = Vec::new();
        let mut rows = 0;
        for (at, _, id) in self.order.range((Unbounded, upper)).rev().take(n) {
            if !Self::shown(*at, now, h).0 {
                break;
            }
            rows += 1;
            if let Some(job) = self.get(id, now, h) {
                jobs.push(job);
            }
        }
        crate::contract::inspect::dead_page(jobs, n > 0 && rows >= n)
    }
}

impl super::state::MemQueue {
    /// The history setting in force: the stored one, else the default.
    fn history_setting(&self) -> History {
        crate::contract::settings::QueueSettings::decode(&self.settings, &[])
            .history
            .unwrap_or_default()
    }

    /// Enters job `id`, just taken out of the queue as `m`, as finished `how`
    /// (cancelled, deleted) by `by` at `now`, with its concurrency key `key`
    /// (as `enter_history` in lib.lua).
    pub fn enter_removed(
        &mut self,
        id: JobId,
        m: &super::state::Msg,
        how: Finish,
        by: &str,
        now: u64,
        key: Option<crate::contract::keyed::Keyed>,
    ) {
        let mut log = m.log.clone();
        if crate::contract::leases::is_lease(m.score) {
            // the run under way, as cancelled_run in lib.lua records it; or,
            // its lease ran out (its worker died), the run a fetch would
            // record as lost had it delivered the job again
            let count = score_count(m.score);
            let in_flight = crate::contract::inspect::state_of(m.score, now)
                == crate::inspect::JobState::InFlight;
            let run = if in_flight {
                attempts::Attempt::cancelled(count, now)
            } else {
                attempts::Attempt::lease_lost(count, Some(m.score / 1000))
            };
            log = Some(attempts::append(log.as_deref(), &run.line()));
        }
        let runs = attempts::parse(log.as_deref().unwrap_or("").as_bytes());
        let done = (how, by, now);
        self.enter(
            id,
            &m.body,
            done,
            (score_count(m.score), m.priority),
            runs,
            key,
        );
    }

    /// Enters job `id`, never sent, as finished `how` by `by` at `now`.
    pub fn enter_failed(&mut self, id: JobId, body: &[u8], how: Finish, by: &str, now: u64) {
        self.enter(id, body, (how, by, now), (0, 0), Vec::new(), None);
    }

    /// Enters job `id` with `body`, finished (how, by whom, when), after
    /// `deliveries` at `priority` with `runs`, then trims the history by count.
    fn enter(
        &mut self,
        id: JobId,
        body: &[u8],
        (how, by, now): (Finish, &str, u64),
        (deliveries, priority): (u32, i8),
        runs: Vec<attempts::Attempt>,
        key: Option<crate::contract::keyed::Keyed>,
    ) {
        let h = self.history_setting();
        if !h.enabled {
            return;
        }
        let entry = Entry {
            finished: Finished {
                how,
                at_ms: now,
                by: Some(actor_line(by)).filter(|b| !b.is_empty()),
                job_type: body_type(body),
            },
            deliveries,
            runs,
            key,
            result: None,
            priority,
        };
        self.history.record(id, now, &entry, Some(body.to_vec()), h);
        self.history.trim(now, 1001, h);
    }

    /// Adds an event to the history (as `add_history_event` in lib.lua).
    pub fn add_event(&mut self, what: &str, count: u64, by: &str, now: u64) {
        if !self.history_setting().enabled {
            return;
        }
        let event = HistoryEvent {
            at_ms: now,
            what: what.into(),
            count,
            by: Some(by.to_string()),
        };
        self.history.push_event(&event.line());
    }
}
