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

use tokio::sync::Notify;

/// The dispatchers waiting for a share, in the order they came.
#[derive(Default)]
pub(crate) struct Turns {
    line: Mutex<VecDeque<u64>>,
    next: AtomicU64,
}

impl Turns {
    /// A dispatcher's number in the line, one for each.
    pub fn ticket(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether `who` may lease now: no one waits, or it is the first.
    pub fn may_go(&self, who: u64) -> bool {
        self.lock().front().is_none_or(|&f| f == who)
    }

    /// Puts `who` at the end of the line (where it stays while `Place` lives);
    /// `told` is notified when it leaves, for the next to look.
    pub fn join<'a>(&'a self, who: u64, told: &'a Notify) -> Place<'a> {
        let mut line = self.lock();
        if !line.contains(&who) {
            line.push_back(who);
        }
        Place {
            turns: self,
            who,
            told,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<u64>> {
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
        self.turns.lock().retain(|&w| w != self.who);
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
}
