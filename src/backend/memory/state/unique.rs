//! Unique keys of one queue: who holds one, and taking one.

use super::MemQueue;
use crate::JobId;

impl MemQueue {
    /// The message holding unique `key` at `now` (ms), if the key is held: its
    /// holder still exists and the key has not expired.
    pub fn unique_holder(&self, key: &str, now: u64) -> Option<JobId> {
        let (id, expires) = self.unique.get(key)?;
        (self.msgs.contains_key(id) && (*expires == 0 || now < *expires)).then_some(*id)
    }

    /// Gives unique `key` to `id` until `expires` (0: while it exists).
    pub fn hold_unique(&mut self, key: &str, id: JobId, expires: u64) {
        if let Some((old, _)) = self.unique.insert(key.into(), (id, expires))
            && old != id
        {
            self.unique_of.remove(&old);
        }
        self.unique_of.insert(id, key.into());
    }

    /// Frees the unique key `id` holds, if it still holds it (a key another
    /// message took over stays with it): its run started
    /// (`UniqueUntil::Start`).
    pub fn release_unique(&mut self, id: &JobId) {
        if let Some(key) = self.unique_of.remove(id)
            && self
                .unique
                .get(&key)
                .is_some_and(|(holder, _)| holder == id)
        {
            self.unique.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_keys_leave_with_their_holder_unless_taken_over() {
        let mut q = MemQueue::new(30, 0, -1, 0);
        let (a, b) = (JobId::make(1, &[b'a'; 22]), JobId::make(2, &[b'b'; 22]));
        q.insert(a, b"a".to_vec(), 1000, 0);
        q.hold_unique("k", a, 0);
        assert_eq!(q.unique_holder("k", 5), Some(a));
        q.remove(&a);
        assert!(q.unique.is_empty() && q.unique_of.is_empty());
        // a key with a ttl: expired, then taken over by b; a leaving keeps it b's
        q.insert(a, b"a".to_vec(), 1000, 0);
        q.hold_unique("k", a, 10);
        assert_eq!(q.unique_holder("k", 10), None);
        q.insert(b, b"b".to_vec(), 1000, 3);
        q.hold_unique("k", b, 0);
        q.remove(&a);
        assert_eq!(q.unique_holder("k", 20), Some(b));
        assert_eq!(q.unique_of.len(), 1);
    }

    #[test]
    fn a_started_run_frees_its_holders_key_but_not_one_taken_over() {
        let mut q = MemQueue::new(30, 0, -1, 0);
        let (a, b) = (JobId::make(1, &[b'a'; 22]), JobId::make(2, &[b'b'; 22]));
        q.insert(a, b"a".to_vec(), 1000, 0);
        q.hold_unique("k", a, 10);
        q.release_unique(&a);
        assert_eq!(q.unique_holder("k", 5), None);
        assert!(q.unique.is_empty() && q.unique_of.is_empty());
        // a's key expired and b took it over: a's start leaves it b's
        q.hold_unique("k", a, 10);
        q.insert(b, b"b".to_vec(), 1000, 3);
        q.hold_unique("k", b, 0);
        q.release_unique(&a);
        assert_eq!(q.unique_holder("k", 20), Some(b));
    }
}
