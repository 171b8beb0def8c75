//! A setting reset: stored no more, so that the workers' builder values (or
//! the built-in defaults) apply again, as on a queue none was ever stored
//! for.

use std::str::FromStr;

use super::QueueSettings;
use crate::{Error, Result};

/// One of a queue's settings, as a whole: what
/// [`QueueSettings::reset`] takes.
///
/// ```
/// use redjob::ops::Setting;
///
/// let s: Setting = "rate-limit".parse()?;
/// assert_eq!((s, s.name()), (Setting::RateLimit, "rate-limit"));
/// assert!("speed".parse::<Setting>().is_err());
/// # Ok::<(), redjob::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Setting {
    /// The dead-letter retention ([`QueueSettings::dead_letters`](QueueSettings#structfield.dead_letters)).
    DeadLetters,
    /// The history retention ([`QueueSettings::history`](QueueSettings#structfield.history)).
    History,
    /// The concurrency, both parts ([`QueueSettings::concurrency`](QueueSettings#structfield.concurrency)).
    Concurrency,
    /// The rate limit ([`QueueSettings::rate_limit`](QueueSettings#structfield.rate_limit)).
    RateLimit,
}

impl Setting {
    /// Every setting, in the order of [`QueueSettings`]' fields.
    pub const ALL: [Setting; 4] = [
        Setting::DeadLetters,
        Setting::History,
        Setting::Concurrency,
        Setting::RateLimit,
    ];

    /// Its name as the CLI's `--reset` and the dashboard take it:
    /// `dead-letters`, `history`, `concurrency`, `rate-limit`.
    pub fn name(self) -> &'static str {
        match self {
            Setting::DeadLetters => "dead-letters",
            Setting::History => "history",
            Setting::Concurrency => "concurrency",
            Setting::RateLimit => "rate-limit",
        }
    }

    /// Its place among the stored fields ([`QueueSettings::FIELDS`]).
    pub(crate) fn place(self) -> usize {
        match self {
            Setting::DeadLetters => 0,
            Setting::History => 1,
            Setting::Concurrency => 2,
            Setting::RateLimit => 3,
        }
    }
}

impl FromStr for Setting {
    type Err = Error;

    /// A setting by its [`name`](Setting::name).
    fn from_str(s: &str) -> Result<Setting> {
        Setting::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| Error::InvalidValue {
                what: "setting",
                reason: format!("{s:?}: give dead-letters, history, concurrency or rate-limit"),
            })
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The value a reset sends in place of a setting's (settings.lua removes the
/// field and who set it; no stored value starts so).
pub(crate) const RESET: &str = "-";

impl QueueSettings {
    /// Settings that remove the stored `setting` (both parts of the
    /// concurrency; the fields of a retention all): the built-in default
    /// is in force again, and every worker is told at once, as for a
    /// change ([`Admin::set_settings`](crate::ops::Admin::set_settings)
    /// records a `settings` event). A worker serving the queue then stores
    /// its builder value again (as it does on a queue created after it
    /// started: its next read of the settings, which the notice brings at
    /// once), the first worker's value going in; with no worker's value,
    /// the default stays. A setting not stored is left so: nothing changes.
    /// Combined with [`and`](Self::and), the later of a reset and a value of
    /// the same setting goes.
    ///
    /// ```
    /// use redjob::ops::{Admin, QueueSettings, RateLimit, Setting};
    /// use redjob::queue::{QueueOptions, Queues};
    ///
    /// # async fn demo() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(redjob::backend::memory::MemoryBackend::new());
    /// client.queues().create_queue("api", QueueOptions::default()).await?;
    /// client.set_settings("api", &QueueSettings::rate_limit(RateLimit::per_second(5))).await?;
    /// let stored = client.set_settings("api", &QueueSettings::reset(Setting::RateLimit)).await?;
    /// assert_eq!(stored.rate_limit, None);
    /// assert!(!stored.in_force().rate_limit.is_limited());
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn reset(setting: Setting) -> Self {
        QueueSettings {
            reset: 1 << setting.place(),
            ..QueueSettings::default()
        }
    }

    /// Whether these settings reset `setting`.
    pub(crate) fn resets(&self, setting: Setting) -> bool {
        self.reset & (1 << setting.place()) != 0
    }
}
