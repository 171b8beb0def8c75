//! A queue's settings in memory, with the queue, as `settings.lua` keeps them
//! in its hash; a settle's dead-letter trim reads them (leases.rs).

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
        if let Some(r) = settings.dead_letters
            && (over || q.settings.dead_letters.is_none())
        {
            q.settings.dead_letters = Some(r);
        }
        Ok(q.settings)
    }
}
