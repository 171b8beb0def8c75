//! Message and job ids in RSMQ's format.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{Error, Result};

/// The id of a job, which is the id of its RSMQ message.
///
/// 32 characters: the first 10 are the Unix time in microseconds (Redis time) in
/// base 36, the other 22 random, except that a message sent with a delay ends in
/// `:` and the delay in ms (8 base-36 digits), which tells a worker its exact due
/// time. RSMQ clients derive a message's `sent` time from
/// that prefix, and so does [`JobId::sent_at`]. Ids of messages sent by other RSMQ
/// clients may use upper-case letters and `:`; any 32 characters of `A-Z a-z 0-9 :`
/// are accepted.
///
/// ```
/// use redjob::JobId;
///
/// let id: JobId = "mhx3k0vz1qabcdefghijklmnopqrstuv".parse().unwrap();
/// assert_eq!(id.as_str().len(), 32);
/// assert!("too short".parse::<JobId>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId([u8; 32]);

impl JobId {
    /// Sorts after every real id (range bound for in-memory sorted sets).
    pub(crate) const MAX: JobId = JobId([u8::MAX; 32]);
    /// Sorts before every real id.
    pub(crate) const MIN: JobId = JobId([0; 32]);

    /// A new id: `us` (Unix microseconds) in base 36, zero-padded to 10, then
    /// `suffix`, as the send script builds it.
    pub(crate) fn make(us: u64, suffix: &[u8; 22]) -> JobId {
        let mut a = [b'0'; 32];
        let mut v = us;
        for c in a[..10].iter_mut().rev() {
            *c = DIGITS[(v % 36) as usize];
            v /= 36;
        }
        a[10..].copy_from_slice(suffix);
        JobId(a)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever stored.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// When the message was sent, from the id's time prefix (millisecond precision).
    ///
    /// Returns `None` when the prefix is not base-36 (an id made by a foreign client).
    pub fn sent_at(&self) -> Option<SystemTime> {
        let micros = u64::from_str_radix(self.as_str().get(..10)?, 36).ok()?;
        Some(UNIX_EPOCH + Duration::from_millis(micros / 1000))
    }

    /// The sent time in Unix milliseconds, as RSMQ clients report it (0 when unknown).
    pub fn sent_ms(&self) -> u64 {
        self.prefix_us().map_or(0, |us| us / 1000)
    }

    /// The id's 32 ASCII bytes.
    pub(crate) fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The time prefix in Unix microseconds; `None` when it is not base-36.
    pub(crate) fn prefix_us(&self) -> Option<u64> {
        u64::from_str_radix(self.as_str().get(..10)?, 36).ok()
    }

    /// The 22 characters after the time prefix.
    pub(crate) fn suffix(&self) -> [u8; 22] {
        let mut out = [0u8; 22];
        out.copy_from_slice(&self.0[10..]);
        out
    }

    /// An id from a 10-byte prefix (as the send script returns it) and its suffix.
    pub(crate) fn from_parts(prefix: &[u8], suffix: &[u8; 22]) -> Result<Self> {
        let mut a = [0u8; 32];
        if prefix.len() != 10 {
            return Err(Error::InvalidMessageId {
                id: String::from_utf8_lossy(prefix).into_owned(),
            });
        }
        a[..10].copy_from_slice(prefix);
        a[10..].copy_from_slice(suffix);
        Self::from_bytes(&a)
    }

    pub(crate) fn from_bytes(b: &[u8]) -> Result<Self> {
        /// The bytes an id may hold: ASCII letters and digits, and `:`.
        const ALLOWED: [bool; 256] = {
            let mut t = [false; 256];
            let mut c = 0;
            while c < 256 {
                let b = c as u8;
                t[c] = b.is_ascii_alphanumeric() || b == b':';
                c += 1;
            }
            t
        };
        if let Ok(a) = <[u8; 32]>::try_from(b)
            && a.iter().all(|c| ALLOWED[usize::from(*c)])
        {
            Ok(JobId(a))
        } else {
            Err(Error::InvalidMessageId {
                id: String::from_utf8_lossy(b).into_owned(),
            })
        }
    }
}

impl std::str::FromStr for JobId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        JobId::from_bytes(s.as_bytes())
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobId({})", self.as_str())
    }
}

impl AsRef<str> for JobId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// A random number: xorshift128+ per thread, seeded from the std hasher's
/// per-process random keys and the clock. Ids need uniqueness, not secrecy, so
/// no RNG crate is needed.
pub(crate) fn random_u64() -> u64 {
    use std::cell::Cell;
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    thread_local! {
        static STATE: Cell<(u64, u64)> = Cell::new({
            let mut h = RandomState::new().build_hasher();
            h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos());
            let a = h.finish();
            h.write_u64(a);
            (a | 1, h.finish() | 1)
        });
    }
    STATE.with(|st| {
        let (mut x, y) = st.get();
        x ^= x << 23;
        let b = x ^ y ^ (x >> 17) ^ (y >> 26);
        st.set((y, b));
        b.wrapping_add(y)
    })
}

/// The digits of ids, in ascending byte order.
const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// How many suffixes there are: 22 base-36 digits.
const SUFFIX_SPACE: u128 = 36u128.pow(22);

/// `n` random suffixes in ascending order: under one prefix, ids then sort in
/// the order they are handed out (how a send gives a batch its ids).
pub(crate) fn sorted_random_suffixes(n: usize) -> Vec<[u8; 22]> {
    let mut out: Vec<_> = (0..n).map(|_| random_suffix()).collect();
    out.sort_unstable();
    out
}

/// Where a delayed send's suffix marks its delay: a `:` at this index (no RSMQ
/// client's random part has one), then the delay in ms as 8 base-36 digits.
const DELAY_MARK: usize = 13;

/// The longest delay a mark holds, 36^8 - 1 ms (89 years; sends refuse more than 50).
const MARKABLE_MS: u64 = 2_821_109_907_455;

/// One send call's suffixes, ascending as [`sorted_random_suffixes`]'s, each of
/// a message sent with a delay (`delays[i]`, whole ms as the send passes it)
/// ending in its mark: fetch.lua then leases the message at the send's µs plus
/// the delay, exactly, rather than at the ms its score is rounded up to (see
/// `exact_due` in lib.lua). The 13 characters before a mark stay random and
/// strictly ascending (a tie, about 1 in 10^20 per pair, draws them again), so
/// ids stay unique and in send order.
pub(crate) fn send_suffixes(delays: &[Option<u64>]) -> Vec<[u8; 22]> {
    loop {
        let mut out = sorted_random_suffixes(delays.len());
        let mut marked = false;
        for (s, d) in out.iter_mut().zip(delays) {
            if let Some(ms) = d.filter(|ms| (1..=MARKABLE_MS).contains(ms)) {
                s[DELAY_MARK] = b':';
                let mut v = ms;
                for c in s[DELAY_MARK + 1..].iter_mut().rev() {
                    *c = DIGITS[(v % 36) as usize];
                    v /= 36;
                }
                marked = true;
            }
        }
        if !marked
            || out
                .windows(2)
                .all(|w| w[0][..DELAY_MARK] < w[1][..DELAY_MARK])
        {
            return out;
        }
    }
}

/// `n` suffixes above `last`, ascending, each above the one before by a random
/// step (so they stay unguessable enough to tell ids apart at a glance). `None`
/// when `last` is not `[0-9a-z]` or the space above it runs out, about 2^40
/// calls above a random start.
pub(crate) fn suffixes_above(last: &[u8; 22], n: usize) -> Option<Vec<[u8; 22]>> {
    let mut v = last.iter().try_fold(0u128, |v, c| {
        let d = DIGITS.iter().position(|x| x == c)?;
        Some(v * 36 + d as u128)
    })?;
    (0..n)
        .map(|_| {
            v = v
                .checked_add(1 + u128::from(random_u64() >> 16))
                .filter(|n| *n < SUFFIX_SPACE)?;
            let mut out = [0u8; 22];
            let mut rest = v;
            for c in out.iter_mut().rev() {
                *c = DIGITS[(rest % 36) as usize];
                rest /= 36;
            }
            Some(out)
        })
        .collect()
}

/// 22 random characters of `[0-9a-z]`, the random part of a new id.
pub(crate) fn random_suffix() -> [u8; 22] {
    let mut out = [0u8; 22];
    for chunk in out.chunks_mut(11) {
        // 36^11 < 2^64: eleven digits per draw
        let mut v = random_u64();
        for c in chunk {
            *c = DIGITS[(v % 36) as usize];
            v /= 36;
        }
    }
    out
}

/// 22 characters of `[0-9a-z]` derived from `seed` (SHA-1): the same seed
/// gives the same suffix in every process, as a periodic tick's id needs.
pub(crate) fn hashed_suffix(seed: &str) -> [u8; 22] {
    let digest = sha1_smol::Sha1::from(seed).digest().bytes();
    let mut out = [0u8; 22];
    for (chunk, half) in out.chunks_mut(11).zip(digest.chunks(8)) {
        let mut v = u64::from_le_bytes(half.try_into().unwrap_or_default());
        for c in chunk {
            *c = DIGITS[(v % 36) as usize];
            v /= 36;
        }
    }
    out
}

/// Hashes job ids for the worker's own tables, faster than the default SipHash:
/// an id's 22 characters after its time prefix are random (13 of them in a
/// delayed send's, which ends in its delay), so a multiply-rotate mix of its
/// 8-byte words spreads them well. (Ids a foreign RSMQ client chose could
/// collide on purpose; a worker's table holds at most its leased jobs.)
#[derive(Clone, Copy, Default)]
pub(crate) struct IdHash;

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// [`IdHash`]'s hasher.
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(26) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn finish(&self) -> u64 {
        // fold the high bits, which the multiply mixed best, into the low ones
        self.0 ^ (self.0 >> 29)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_hashes_spread_over_a_table_s_buckets() {
        use std::hash::BuildHasher;
        // ids of one send batch share their prefix; their suffixes differ
        let prefix = "hofmvgcigm";
        let ids: Vec<JobId> = sorted_random_suffixes(4096)
            .iter()
            .map(|s| {
                format!("{prefix}{}", std::str::from_utf8(s).unwrap())
                    .parse()
                    .unwrap()
            })
            .collect();
        for bits in [0, 54] {
            let mut buckets = vec![0u32; 1024];
            for id in &ids {
                buckets[((IdHash.hash_one(id) >> bits) & 1023) as usize] += 1;
            }
            // 4 per bucket on average; a poor hash piles them up
            let most = buckets.iter().max().unwrap();
            let empty = buckets.iter().filter(|&&b| b == 0).count();
            assert!(
                *most <= 16 && empty < 60,
                "bits {bits}: max {most}, empty {empty}"
            );
        }
        // ids differing in one character hash apart
        let a: JobId = "hofmvgcigmaaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
        let b: JobId = "hofmvgcigmaaaaaaaaaaaaaaaaaaaaab".parse().unwrap();
        assert_ne!(IdHash.hash_one(a), IdHash.hash_one(b));
    }

    #[test]
    fn delayed_sends_mark_their_delay_and_keep_send_order() {
        let delays: Vec<Option<u64>> = (0..2000u64)
            .map(|i| (i % 3 != 0).then_some(i * 7919 % 5000 + 1))
            .chain([Some(MARKABLE_MS), Some(MARKABLE_MS + 1), Some(0)])
            .collect();
        let out = send_suffixes(&delays);
        assert_eq!(out.len(), delays.len());
        assert!(out.windows(2).all(|w| w[0] < w[1]), "ascending and unique");
        for (s, d) in out.iter().zip(&delays) {
            let tail = std::str::from_utf8(&s[DELAY_MARK + 1..]).unwrap();
            let marked = d.filter(|ms| (1..=MARKABLE_MS).contains(ms));
            match marked {
                Some(ms) => {
                    assert_eq!(s[DELAY_MARK], b':');
                    assert_eq!(u64::from_str_radix(tail, 36).unwrap(), ms);
                }
                None => assert!(s.iter().all(u8::is_ascii_alphanumeric), "{s:?}"),
            }
            // a marked id is still an RSMQ id
            let id = format!("hofmvgcigm{}", std::str::from_utf8(s).unwrap());
            assert!(id.parse::<JobId>().is_ok());
        }
    }

    #[test]
    fn hashed_suffixes_are_stable_and_differ() {
        let a = hashed_suffix("ticks/cleanup");
        assert_eq!(a, hashed_suffix("ticks/cleanup"));
        assert_ne!(a, hashed_suffix("ticks/cleanup2"));
        assert!(
            a.iter()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
        );
        let id = JobId::make(1_700_000_000_000_000, &a);
        assert_eq!(id.sent_ms(), 1_700_000_000_000);
    }

    #[test]
    fn suffixes_differ_and_use_base36() {
        let a = random_suffix();
        let b = random_suffix();
        assert_ne!(a, b);
        assert!(
            a.iter()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
        );
    }

    #[test]
    fn suffixes_ascend_within_a_call_and_above_the_last() {
        let first = sorted_random_suffixes(5);
        assert!(first.is_sorted());
        let last = first[4];
        let more = suffixes_above(&last, 4).unwrap();
        assert!(more.is_sorted() && more[0] > last);
        let top = [b'z'; 22];
        assert_eq!(suffixes_above(&top, 1), None, "nothing above the largest");
        assert_eq!(
            suffixes_above(&[b'A'; 22], 1),
            None,
            "not base-36 lower case"
        );
        let id = JobId::make(1_700_000_000_123_456, &more[3]);
        assert_eq!(
            (id.prefix_us(), id.suffix()),
            (Some(1_700_000_000_123_456), more[3])
        );
    }

    #[test]
    fn sent_time_from_prefix() {
        // 1_700_000_000_123_456 µs in base 36
        let prefix = "gqll7vdgzk";
        assert_eq!(
            u64::from_str_radix(prefix, 36).unwrap(),
            1_700_000_000_123_456
        );
        let id: JobId = format!("{prefix}{}", "a".repeat(22)).parse().unwrap();
        assert_eq!(id.sent_ms(), 1_700_000_000_123);
        let made = JobId::make(1_700_000_000_123_456, &[b'a'; 22]);
        assert_eq!(made, id);
    }
}
