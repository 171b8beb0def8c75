//! Backoff between attempts.

use std::time::Duration;

use crate::{Error, Result};

/// How long a failed job waits before its next attempt: exponential from the job's
/// `backoff` attribute (1 s by default), doubled per attempt, capped, with full jitter.
///
/// The delay before attempt `n + 1` is drawn uniformly from
/// `[0, min(max_delay, backoff * 2^(n-1))]`; without jitter it is exactly the upper bound.
///
/// ```
/// use std::time::Duration;
/// use redjob::RetryPolicy;
///
/// let p = RetryPolicy::exponential(Duration::from_secs(60)).unwrap().jitter(false);
/// let base = Duration::from_secs(1);
/// assert_eq!(p.delay(base, 1), Duration::from_secs(1));
/// assert_eq!(p.delay(base, 3), Duration::from_secs(4));
/// assert_eq!(p.delay(base, 30), Duration::from_secs(60));
/// assert!(RetryPolicy::exponential(Duration::ZERO).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    max_delay: Duration,
    jitter: bool,
}

impl Default for RetryPolicy {
    /// Capped at one hour, with jitter.
    fn default() -> Self {
        RetryPolicy {
            max_delay: Duration::from_secs(3600),
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// Exponential backoff capped at `max_delay` (must be positive; a cap over
    /// [`MAX_DELAY`](crate::contract::queues::MAX_DELAY) is cut to it), with jitter.
    pub fn exponential(max_delay: Duration) -> Result<Self> {
        if max_delay.is_zero() {
            return Err(Error::InvalidValue {
                what: "max_delay",
                reason: "must be positive".into(),
            });
        }
        Ok(RetryPolicy {
            max_delay: max_delay.min(crate::contract::queues::MAX_DELAY),
            jitter: true,
        })
    }

    /// Draw each delay uniformly below its bound ("full jitter"). Defaults to `true`.
    pub fn jitter(mut self, on: bool) -> Self {
        self.jitter = on;
        self
    }

    /// The delay after failed attempt `attempt` (1-based) of a job whose backoff is `base`.
    pub fn delay(&self, base: Duration, attempt: u32) -> Duration {
        let max = self.max_delay.min(crate::contract::queues::MAX_DELAY);
        let exp = attempt.saturating_sub(1).min(63);
        let bound = base.checked_mul(1u32 << exp.min(31));
        let bound = match bound {
            Some(b) if exp <= 31 => b.min(max),
            _ => max,
        };
        if self.jitter {
            // at most MAX_DELAY, so neither the millis nor the + 1 can overflow
            let ms = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX - 1);
            Duration::from_millis(crate::id::random_u64() % (ms + 1))
        } else {
            bound
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_below_the_bound() {
        let p = RetryPolicy::default();
        let base = Duration::from_millis(100);
        let delays: Vec<_> = (0..200).map(|_| p.delay(base, 4)).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(800)));
        assert!(delays.iter().any(|d| *d != delays[0]), "jitter varies");
        assert_eq!(p.jitter(false).delay(base, 100), Duration::from_secs(3600));
    }
}
