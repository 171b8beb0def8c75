//! How long each job type's runs take in a queue (public at
//! `redjob::backend`): a fixed-size histogram per type, added to by every
//! settle (one command per type and bucket in the call, not per job), never
//! computed by reading the history.

use std::time::Duration;

/// The upper bounds of the run-time buckets, ms, in a 1-2-5 series from 1 ms
/// to 1,000 s; the last bucket holds every longer run.
///
/// ```
/// use redjob::backend::RUN_TIME_BUCKETS_MS;
///
/// assert_eq!(RUN_TIME_BUCKETS_MS[0], 1);
/// assert_eq!(RUN_TIME_BUCKETS_MS.len(), 20);
/// ```
pub const RUN_TIME_BUCKETS_MS: [u64; 20] = [
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    u64::MAX,
];

/// The bucket a run of `ms` falls in.
pub(crate) fn bucket_of(ms: u64) -> usize {
    RUN_TIME_BUCKETS_MS
        .iter()
        .position(|b| ms <= *b)
        .unwrap_or(RUN_TIME_BUCKETS_MS.len() - 1)
}

/// One job type's runs in a queue: how many took up to each bound of
/// [`RUN_TIME_BUCKETS_MS`], with the quantiles they give.
///
/// ```
/// use redjob::backend::RunTimes;
/// use std::time::Duration;
///
/// let mut t = RunTimes::new("SendEmail");
/// t.counts[3] = 98; // up to 10 ms
/// t.counts[9] = 2; // up to 1 s
/// assert_eq!(t.count(), 100);
/// assert_eq!(t.quantile(0.5), Some(Duration::from_millis(10)));
/// assert_eq!(t.quantile(0.99), Some(Duration::from_secs(1)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTimes {
    /// The job type.
    pub job_type: String,
    /// Runs per bucket, as [`RUN_TIME_BUCKETS_MS`].
    pub counts: [u64; RUN_TIME_BUCKETS_MS.len()],
}

impl RunTimes {
    /// No runs yet of `job_type`.
    pub fn new(job_type: impl Into<String>) -> Self {
        RunTimes {
            job_type: job_type.into(),
            counts: [0; RUN_TIME_BUCKETS_MS.len()],
        }
    }

    /// How many runs.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The bound of the bucket holding the `q` quantile (0..=1) of the runs,
    /// `None` without runs; [`Duration::MAX`] past the last bound.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // the smallest bucket whose cumulative count reaches q of them
        let want = ((total as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= want {
                let b = RUN_TIME_BUCKETS_MS[i];
                return Some(if b == u64::MAX {
                    Duration::MAX
                } else {
                    Duration::from_millis(b)
                });
            }
        }
        Some(Duration::MAX)
    }
}

/// The run times from stored fields `rt:<bucket>:<type>` and their counts
/// (complete.lua writes them), by type name; fields of another form are
/// passed over.
pub(crate) fn collect<'a>(fields: impl IntoIterator<Item = (&'a str, u64)>) -> Vec<RunTimes> {
    let mut by: std::collections::BTreeMap<&str, RunTimes> = std::collections::BTreeMap::new();
    for (field, n) in fields {
        let Some((bucket, job_type)) = field
            .strip_prefix("rt:")
            .and_then(|rest| rest.split_once(':'))
        else {
            continue;
        };
        let Some(bucket) = bucket
            .parse::<usize>()
            .ok()
            .filter(|b| *b < RUN_TIME_BUCKETS_MS.len())
        else {
            continue;
        };
        let t = by
            .entry(job_type)
            .or_insert_with(|| RunTimes::new(job_type));
        t.counts[bucket] = t.counts[bucket].saturating_add(n);
    }
    by.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_fall_in_their_bucket() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(3), 2);
        assert_eq!(bucket_of(1_000_001), RUN_TIME_BUCKETS_MS.len() - 1);
        assert_eq!(RunTimes::new("x").quantile(0.5), None);
        let all = collect([
            ("rt:3:Mail", 4),
            ("rt:0:Mail", 1),
            ("rt:x:Mail", 9),
            ("m5", 1),
            ("rt:99:Sms", 1),
        ]);
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].job_type.as_str(), all[0].count()), ("Mail", 5));
    }
}
