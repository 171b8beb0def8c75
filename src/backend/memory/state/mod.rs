//! The in-memory queues: RSMQ's data model, with scores in thousandths of a ms.

mod dead;
mod flight;
mod ids;
mod queue;
mod sets;
mod unique;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::JobId;

pub(super) use ids::IdSource;
pub(super) use queue::{MemQueue, Msg, next_seq};

/// The highest score due at `now` (Unix ms): every score of its ms (as
/// `due_max` in lib.lua; no earlier redjob left leases in memory).
pub(super) fn due_score(now: u64) -> u64 {
    last_of_ms(now)
}

/// The highest score in the ms `ms`: a score is due in its ms, whatever
/// delivery count its thousandths carry (as fetch.lua's `due_max`).
pub(super) fn last_of_ms(ms: u64) -> u64 {
    ms_score(ms).saturating_add(999)
}

/// The score of a time in Unix ms. Times past the largest score (about 584,000
/// years from 1970) get the largest whole-ms score: Redis stores them as floats,
/// where they never become due either.
pub(super) fn ms_score(ms: u64) -> u64 {
    ms.min(u64::MAX / 1000) * 1000
}

/// The largest id, for range bounds.
pub(super) const MAX_ID: JobId = JobId::MAX;

/// Everything the backend stores.
#[derive(Default)]
pub(super) struct State {
    pub queues: BTreeMap<String, MemQueue>,
    pub ids: IdSource,
    /// The live-worker registry: id → (runs out at, Unix ms; last beat, JSON;
    /// when that was written, Unix ms).
    pub workers: BTreeMap<String, (u64, Vec<u8>, u64)>,
    /// Paused periodic schedules by (queue, name): when (Unix ms) and by whom.
    /// The queue need not exist yet (a schedule's first tick creates it).
    pub paused_schedules: HashMap<(String, String), (u64, String)>,
    /// The control set on each live worker (see `Admin::control_worker`).
    pub worker_controls: HashMap<String, crate::contract::admin::Control>,
    /// The version of the queues' settings, which every change of them
    /// increments (see `Admin::set_settings`); beats return it.
    pub settings_version: u64,
    /// What the workers of one build serve, by digest (see `Backend::serve`).
    pub serves: HashMap<String, Vec<u8>>,
    /// Every batch (see batches.rs).
    pub batches: super::batches::Batches,
    /// When each batch's retention began (it completed or was cancelled),
    /// Unix ms, the earliest first: the workers' sweep drops those past it.
    pub batch_ends: BTreeSet<(u64, crate::contract::batches::BatchId)>,
    /// When each open batch is checked for a seal (an hour after it was
    /// opened, Unix ms), the earliest first: the workers' sweep cancels one
    /// its enqueuer never sealed, as marks.lua's mark does on Redis.
    pub batch_opens: BTreeSet<(u64, crate::contract::batches::BatchId)>,
    /// The batches cancelled, by the score they were listed with (strictly
    /// increasing), as `ns:@cancelled` on Redis.
    pub cancel_list: Vec<(u64, crate::contract::batches::BatchId)>,
}
