//! A queued job's state, due time and row, read from its score; pages built
//! from rows.

use super::{Cursor, JobInfo, JobState, MAX_PAGE, Page};
use crate::JobId;
use crate::contract::leases::{LEGACY_LEASED_MS, MAX_COUNT, is_lease, score_count};

/// The state of a queued job with score `k` (thousandths of a ms) at `now_ms`.
pub(crate) fn state_of(k: u64, now_ms: u64) -> JobState {
    // a score is due in its ms, whatever count its thousandths carry; a lease
    // is scored at its end, so one that ran out is due
    if due_ms(k, now_ms) <= now_ms {
        JobState::Ready
    } else if is_lease(k) || legacy(k, now_ms) {
        JobState::InFlight
    } else {
        JobState::Scheduled
    }
}

/// Whether score `k` is a lease an earlier redjob wrote (see [`LEGACY_LEASED_MS`]).
fn legacy(k: u64, now_ms: u64) -> bool {
    now_ms < LEGACY_LEASED_MS && k / 1000 >= LEGACY_LEASED_MS
}

/// When a job with score `k` becomes due at `now_ms`, Unix ms: its score's whole
/// ms (a fetch takes it in that ms; a lease's end).
pub(crate) fn due_ms(k: u64, now_ms: u64) -> u64 {
    let ms = k / 1000;
    if legacy(k, now_ms) {
        ms - LEGACY_LEASED_MS
    } else {
        ms
    }
}

/// A queued job's info from its stored parts: score `k`, the receive count an
/// RSMQ-style receive wrote (`rc`), its body and last error.
pub(crate) fn queued(
    id: JobId,
    priority: i8,
    k: u64,
    rc: u64,
    now_ms: u64,
    body: Vec<u8>,
    last_error: Option<String>,
) -> JobInfo {
    JobInfo {
        id,
        state: state_of(k, now_ms),
        priority,
        attempts: u64::from(score_count(k)).max(rc).min(u64::from(MAX_COUNT)) as u32,
        due_ms: due_ms(k, now_ms),
        body,
        last_error,
        runs: Vec::new(),
        finished: None,
        key: None,
        result: None,
        waits_for: None,
    }
}

/// A history entry of job `id` as a job's info, with `body` when it is
/// still kept.
pub(crate) fn finished_info(
    entry: crate::contract::history::Entry,
    id: JobId,
    body: Option<Vec<u8>>,
) -> JobInfo {
    let last_error = entry.runs.iter().rev().find_map(|a| a.error.clone());
    JobInfo {
        id,
        state: JobState::Finished,
        priority: entry.priority,
        attempts: entry.deliveries,
        due_ms: entry.finished.at_ms,
        body: body.unwrap_or_default(),
        last_error,
        runs: entry.runs,
        finished: Some(entry.finished),
        key: entry.key,
        result: entry.result,
        waits_for: None,
    }
}

/// A page size within bounds.
pub(crate) fn page_size(n: usize) -> usize {
    n.min(MAX_PAGE)
}

/// A page of `jobs` with their `scores`: with a cursor after its last job when
/// `full` (it read as many rows as asked, some maybe skipped as unreadable).
pub(crate) fn page(jobs: Vec<JobInfo>, scores: &[u64], full: bool) -> Page {
    let next = full
        .then(|| {
            jobs.last().zip(scores.last()).map(|(j, s)| Cursor {
                priority: j.priority,
                score: *s,
                id: j.id,
                key: None,
            })
        })
        .flatten();
    Page { jobs, next }
}

/// A page of dead letters: with a cursor after the last when `full`.
pub(crate) fn dead_page(jobs: Vec<JobInfo>, full: bool) -> Page {
    let next = full.then(|| jobs.last().map(Cursor::dead)).flatten();
    Page { jobs, next }
}

/// A flow's parent waiting for its children of `batch`, with its `body`.
pub(crate) fn waiting(id: JobId, batch: crate::contract::batches::BatchId, body: &[u8]) -> JobInfo {
    JobInfo {
        id,
        state: JobState::Waiting,
        priority: 0,
        attempts: 0,
        due_ms: id.sent_ms(),
        body: body.to_vec(),
        last_error: None,
        runs: Vec::new(),
        finished: None,
        key: None,
        result: None,
        waits_for: Some(batch),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_score_ranges_and_marks() {
        let now = 1_000;
        // a score is due in its whole ms, whatever count its thousandths carry
        assert_eq!(state_of(1_000_999, now), JobState::Ready);
        assert_eq!(state_of(1_000_501, now), JobState::Ready);
        assert_eq!(state_of(1_001_000, now), JobState::Scheduled);
        assert_eq!(state_of(1_001_499, now), JobState::Scheduled);
        // a lease is marked in its thousandths (500 + count)
        assert_eq!(state_of(1_001_500, now), JobState::InFlight);
        assert_eq!(state_of(1_001_999, now), JobState::InFlight);
        let l = LEGACY_LEASED_MS * 1000;
        assert_eq!(state_of(l + 2_000_003, now), JobState::InFlight);
        assert_eq!(state_of(l + 999_003, now), JobState::Ready);
        let (a, b) = (due_ms(1_000_001, now), due_ms(l + 2_000_003, now));
        assert_eq!((a, b), (1_000, 2_000));
        // from the year 2096 on, every score is a time
        let later = LEGACY_LEASED_MS + 5;
        assert_eq!(due_ms(l + 2_000_003, later), LEGACY_LEASED_MS + 2_000);
        assert_eq!(state_of(l + 2_000_003, later), JobState::Scheduled);
        assert_eq!(state_of(l + 10_000_501, later), JobState::InFlight);
    }
}
