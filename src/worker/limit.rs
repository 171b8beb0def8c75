//! A limit on how many of a queue's jobs (or a subscriber's events) a worker
//! holds at once, which an operator can change while it runs: a semaphore
//! whose size moves. Growing adds permits; shrinking forgets the free ones
//! and owes the rest, which runs that end pay back before any permit is free
//! again.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Semaphore;

/// A resizable limit. Take permits from [`sem`](Self::sem) and forget them;
/// give them back with [`release`](Self::release).
pub(crate) struct Limit {
    sem: Semaphore,
    /// Permits held beyond the size after a shrink, paid back by releases
    /// (changed under the size's lock).
    owed: AtomicUsize,
    /// The size; changed under its lock.
    size: Mutex<usize>,
    /// The queue is limited across the fleet (a global concurrency or a rate
    /// limit): its jobs are leased only as they can start, never prefetched.
    fleet: AtomicBool,
}

impl Limit {
    pub fn new(size: usize) -> Self {
        Limit {
            sem: Semaphore::new(size),
            owed: AtomicUsize::new(0),
            size: Mutex::new(size),
            fleet: AtomicBool::new(false),
        }
    }

    /// Whether the queue is limited across the fleet (see
    /// [`set_fleet_limited`](Self::set_fleet_limited)).
    pub fn fleet_limited(&self) -> bool {
        self.fleet.load(Ordering::Relaxed)
    }

    /// Says whether the queue is limited across the fleet.
    pub fn set_fleet_limited(&self, limited: bool) {
        self.fleet.store(limited, Ordering::Relaxed);
    }

    /// The semaphore to take permits from.
    pub fn sem(&self) -> &Semaphore {
        &self.sem
    }

    /// The size.
    pub fn size(&self) -> usize {
        *self.size.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives back `n` permits taken and forgotten: first to what a shrink is
    /// owed, the rest to the semaphore. Without a debt (the common case: no
    /// shrink under way) it takes no lock; a shrink that lands between its
    /// look and its give-back is settled from the free permits right after,
    /// so at most that one permit is free for that moment.
    pub fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        if self.owed.load(Ordering::SeqCst) == 0 {
            self.sem.add_permits(n);
            if self.owed.load(Ordering::SeqCst) == 0 {
                return;
            }
            let _size = self.size.lock().unwrap_or_else(|e| e.into_inner());
            let owed = self.owed.load(Ordering::SeqCst);
            let forgot = self.sem.forget_permits(owed);
            self.owed.fetch_sub(forgot, Ordering::SeqCst);
            return;
        }
        let _size = self.size.lock().unwrap_or_else(|e| e.into_inner());
        let owed = self.owed.load(Ordering::SeqCst);
        let pay = n.min(owed);
        self.owed.fetch_sub(pay, Ordering::SeqCst);
        if n > pay {
            self.sem.add_permits(n - pay);
        }
    }

    /// Moves the size to `to`.
    pub fn resize(&self, to: usize) {
        let mut size = self.size.lock().unwrap_or_else(|e| e.into_inner());
        if to > *size {
            let grow = to - *size;
            let owed = self.owed.load(Ordering::SeqCst);
            let pay = grow.min(owed);
            self.owed.fetch_sub(pay, Ordering::SeqCst);
            self.sem.add_permits(grow - pay);
        } else if to < *size {
            let shrink = *size - to;
            let forgot = self.sem.forget_permits(shrink);
            self.owed.fetch_add(shrink - forgot, Ordering::SeqCst);
        }
        *size = to;
    }
}

#[cfg(test)]
mod tests {
    use super::Limit;

    /// Takes every free permit; how many.
    fn take_all(l: &Limit) -> usize {
        let mut n = 0;
        while let Ok(p) = l.sem().try_acquire() {
            p.forget();
            n += 1;
        }
        n
    }

    #[test]
    fn a_shrink_below_what_is_held_frees_nothing_until_runs_end() {
        let l = Limit::new(3);
        assert_eq!(take_all(&l), 3);
        l.resize(1);
        l.release(1);
        assert_eq!(take_all(&l), 0, "2 held, limit 1: none free");
        l.release(1);
        assert_eq!(take_all(&l), 0, "1 held, limit 1: none free");
        l.release(1);
        assert_eq!(take_all(&l), 1);
        l.resize(4);
        assert_eq!(take_all(&l), 3);
        assert_eq!(l.size(), 4);
    }

    #[test]
    fn growing_pays_what_a_shrink_is_owed_first() {
        let l = Limit::new(2);
        assert_eq!(take_all(&l), 2);
        l.resize(0);
        l.resize(1);
        assert_eq!(take_all(&l), 0, "2 held, limit 1");
        l.release(2);
        assert_eq!(take_all(&l), 1);
    }

    /// Two threads take and give back permits while a third resizes: no
    /// permit is created or lost.
    #[test]
    fn releases_racing_resizes_keep_the_count() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let l = Arc::new(Limit::new(8));
        let held = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (l, held) = (l.clone(), held.clone());
                std::thread::spawn(move || {
                    for i in 0..20_000 {
                        if let Ok(p) = l.sem().try_acquire() {
                            p.forget();
                            held.fetch_add(1, Ordering::SeqCst);
                        }
                        if i % 3 == 0
                            && held
                                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
                                    h.checked_sub(1)
                                })
                                .is_ok()
                        {
                            l.release(1);
                        }
                    }
                })
            })
            .collect();
        let resizer = {
            let l = l.clone();
            std::thread::spawn(move || {
                for i in 0..20_000 {
                    l.resize([1, 5, 2, 8, 3][i % 5]);
                }
            })
        };
        for w in workers {
            w.join().unwrap();
        }
        resizer.join().unwrap();
        l.resize(3);
        // give back all that is held: then exactly the size is free
        let n = held.swap(0, Ordering::SeqCst);
        l.release(n);
        assert_eq!(take_all(&l), 3);
    }
}
