//! Turns among the queues of a worker that wait for a share of its slots.
//!
//! A dispatcher of short jobs leases only while more slots are free than it
//! leaves to the other queues (see `dispatch.rs`). Without an order, the
//! dispatcher that happened to run first after a slot came back took it each
//! time, and a queue with a backlog could get no slot for as long as the
//! others had work. Dispatchers that wait join this line and go in the order
//! they came: only the first may lease; one that comes back from a fetch while
//! others wait goes to the end of the line.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The dispatchers waiting for a share, in the order they came.
#[derive(Default)]
pub(crate) struct Turns {
    line: Mutex<Line>,
    next: AtomicU64,
}

/// The line, and since when its first has been away taking its turn.
#[derive(Default)]
struct Line {
    order: VecDeque<u64>,
    /// The first left its wait to lease (see [`Turns::going`]): should it be
    /// held elsewhere longer than [`AWAY`] (its queue's own limit, which a
    /// hand-off took meanwhile), the others go on without it.
    away_since: Option<Instant>,
}

/// How long the first in line may be away taking its turn before the next
/// goes: a few leases' round trips.
const AWAY: Duration = Duration::from_millis(100);

impl Turns {
    /// A dispatcher's number in the line, one for each.
    pub fn ticket(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether `who` may lease now: no one waits, or it is the first, or
    /// the first has been away longer than [`AWAY`] (it goes to the end).
    pub fn may_go(&self, who: u64) -> bool {
        let mut line = self.lock();
        if line.order.front().is_some_and(|&f| f != who)
            && line.away_since.is_some_and(|t| t.elapsed() >= AWAY)
        {
            line.order.rotate_left(1);
            line.away_since = None;
        }
        line.order.front().is_none_or(|&f| f == who)
    }

    /// `who`, first in line, leaves its wait to take its turn (or, `false`,
    /// waits again).
    pub fn going(&self, who: u64, going: bool) {
        let mut line = self.lock();
        if line.order.front() == Some(&who) {
            line.away_since = going.then(Instant::now);
        }
    }

    /// Puts `who` at the end of the line (where it stays while `Place` lives);
    /// `told` is notified when it leaves, for the next to look.
    pub fn join<'a>(&'a self, who: u64, told: &'a Notify) -> Place<'a> {
        let mut line = self.lock();
        if !line.order.contains(&who) {
            line.order.push_back(who);
        }
        Place {
            turns: self,
            who,
            told,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Line> {
        // the line holds plain numbers: one a panic left is still whole
        self.line.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A dispatcher's place in the line: it leaves when this is dropped.
pub(crate) struct Place<'a> {
    turns: &'a Turns,
    who: u64,
    told: &'a Notify,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut line = self.turns.lock();
        if line.order.front() == Some(&self.who) {
            line.away_since = None;
        }
        line.order.retain(|&w| w != self.who);
        drop(line);
        self.told.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::Turns;
    use tokio::sync::Notify;

    #[test]
    fn dispatchers_go_in_the_order_they_came_and_leave_when_dropped() {
        let turns = Turns::default();
        let told = Notify::new();
        let (a, b, c) = (turns.ticket(), turns.ticket(), turns.ticket());
        assert!(turns.may_go(b), "no one waits: any may go");
        let pa = turns.join(a, &told);
        let pb = turns.join(b, &told);
        let again = turns.join(a, &told);
        assert!(turns.may_go(a) && !turns.may_go(b) && !turns.may_go(c));
        drop(again);
        // a's second place was the same place: dropping it took a out
        assert!(turns.may_go(b) && !turns.may_go(a));
        drop(pa);
        let pc = turns.join(c, &told);
        assert!(turns.may_go(b) && !turns.may_go(c));
        drop(pb);
        assert!(turns.may_go(c));
        drop(pc);
        assert!(turns.may_go(a) && turns.may_go(b));
    }

    /// The first in line held elsewhere after it left its wait (its queue's
    /// own limit taken by a hand-off meanwhile) keeps the others waiting for
    /// at most `AWAY`: then it goes to the end of the line.
    #[test]
    fn a_first_away_too_long_goes_to_the_end_of_the_line() {
        let turns = Turns::default();
        let told = Notify::new();
        let (a, b) = (turns.ticket(), turns.ticket());
        let _pa = turns.join(a, &told);
        let _pb = turns.join(b, &told);
        turns.going(a, true);
        assert!(!turns.may_go(b), "a is taking its turn");
        // back to wait: not away, however long it waits
        turns.going(a, false);
        std::thread::sleep(super::AWAY + std::time::Duration::from_millis(10));
        assert!(!turns.may_go(b), "a waits, first");
        turns.going(a, true);
        std::thread::sleep(super::AWAY + std::time::Duration::from_millis(10));
        assert!(turns.may_go(b) && !turns.may_go(a), "a went to the end");
    }
}
