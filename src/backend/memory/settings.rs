//! A queue's settings in memory: the same field values `settings.lua` keeps in
//! the queue's hash, merged by the same code; a settle's dead-letter trim reads
//! them (leases.rs).

use super::{MemoryBackend, not_found};
use crate::Result;
use crate::contract::queues::validate;
use crate::contract::settings::QueueSettings;

impl MemoryBackend {
    /// The queue's settings after storing those `settings` gives: over what is
    /// stored (`over`), or only where nothing is.
    pub(super) fn store_settings(
        &self,
        queue: &str,
        settings: &QueueSettings,
        over: bool,
    ) -> Result<QueueSettings> {
        validate::queue_name(queue)?;
        settings.check()?;
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        settings.merge(&mut q.settings, over);
        Ok(QueueSettings::decode(&q.settings))
    }
}
