//! Message ids: the source that hands them out, in send order.

use crate::JobId;
use crate::id::{sorted_random_suffixes, suffixes_above};

/// Hands out message ids; remembers the largest, by any queue's send.
#[derive(Default)]
pub(in crate::backend::memory) struct IdSource {
    last: Option<JobId>,
}

impl IdSource {
    /// Ids for the `n` messages of one send call at `now_us`, as Redis's send
    /// gives them: one prefix (the time) and ascending suffixes. Redis's `TIME`
    /// moves on between calls, so a later call's ids sort after an earlier one's;
    /// this clock may not (paused, or within one microsecond), so a call in the
    /// microsecond of the last continues above the last id's suffix. The prefix
    /// stays the time, so a message's `sent` is exact.
    pub fn next(&mut self, now_us: u64, n: usize) -> Vec<JobId> {
        let last = self
            .last
            .and_then(|id| Some((id.prefix_us()?, id.suffix())))
            .filter(|(us, _)| *us >= now_us);
        let (us, suffixes) = match last {
            Some((us, suffix)) => match suffixes_above(&suffix, n) {
                Some(s) => (us, s),
                // no room left in this microsecond: take the next
                None => (us + 1, sorted_random_suffixes(n)),
            },
            None => (now_us, sorted_random_suffixes(n)),
        };
        let ids: Vec<_> = suffixes.iter().map(|s| JobId::make(us, s)).collect();
        if let Some(id) = ids.last() {
            self.last = Some(*id);
        }
        ids
    }
}
