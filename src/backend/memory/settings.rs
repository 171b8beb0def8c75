//! A queue's settings in memory: the same field values `settings.lua` keeps in
//! the queue's hash, merged by the same code; a settle's dead-letter trim reads
//! them (leases.rs).

use super::{MemoryBackend, not_found};
use crate::Result;
use crate::contract::queues::validate;
use crate::contract::settings::{Change, QueueSettings};

impl MemoryBackend {
    /// The queue's settings after storing those `settings` gives, as `by`:
    /// over what is stored (`over`, an operator's change: the settings'
    /// version moves on if it changed anything), or only where nothing is;
    /// and whether anything changed.
    pub(super) fn store_settings(
        &self,
        queue: &str,
        settings: &QueueSettings,
        over: bool,
        by: &str,
    ) -> Result<(QueueSettings, bool)> {
        validate::queue_name(queue)?;
        settings.check()?;
        let change = Change::encode(self.clock.now_ms(), by);
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        let changed = settings.merge(&mut q.settings, &mut q.settings_by, over, &change);
        let stored = QueueSettings::decode(&q.settings, &q.settings_by);
        if over && changed {
            st.settings_version += 1;
            drop(st);
            // every worker reads them again now
            self.notify(crate::contract::admin::SETTINGS_WAKE);
        }
        Ok((stored, changed))
    }
}

impl MemoryBackend {
    /// Wakes the queue's workers if a fetch waits for a place under its
    /// global concurrency, after a delete, cancel or purge that may have freed
    /// some (as held.lua does).
    pub(super) fn wake_held(&self, queue: &str) {
        let held = {
            let mut st = self.lock_mut();
            st.queues
                .get_mut(queue)
                .is_some_and(|q| std::mem::take(&mut q.held) | std::mem::take(&mut q.promoted))
        };
        if held {
            self.notify(queue);
        }
        // a running job among them stops now (the Redis backend tells the
        // workers when it removed one that ran)
        self.notify(&crate::contract::admin::gone_wake(queue));
    }
}
