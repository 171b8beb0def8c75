//! A queue's settings on Redis: fields of its hash, read and written by
//! `settings.lua` in one call; `complete.lua` reads the dead-letter retention
//! from them as it dead-letters.

use super::queues::Rsmq;
use super::scripts::{self, Reply};
use crate::contract::queues::validate;
use crate::contract::settings::{LimitUsage, QueueSettings};
use crate::{Error, Result};

/// What a `settings.lua` call does.
#[derive(Clone, Copy)]
pub(super) enum Mode {
    /// Reads only.
    Get,
    /// Stores over what is stored.
    Set,
    /// Stores only where nothing is stored.
    Default,
}

/// `settings.lua`: the queue's settings after storing `settings` by `mode`,
/// as `by`, and whether that changed any.
pub(super) async fn call(
    rsmq: &Rsmq,
    queue: &str,
    mode: Mode,
    settings: &QueueSettings,
    by: &str,
) -> Result<(QueueSettings, bool)> {
    validate::queue_name(queue)?;
    settings.check()?;
    let (mut con, k) = rsmq.parts(queue);
    let mut cmd = scripts::eval(&scripts::SETTINGS, &[&k.hash]);
    cmd.arg(match mode {
        Mode::Get => "get",
        Mode::Set => "set",
        Mode::Default => "default",
    })
    .arg(QueueSettings::FIELDS.len())
    .arg(&QueueSettings::FIELDS[..]);
    for v in settings.encode() {
        cmd.arg(v.unwrap_or_default());
    }
    cmd.arg(&QueueSettings::BY_FIELDS[..]).arg(by);
    let v = scripts::run(&mut con, &scripts::SETTINGS, &cmd).await?;
    let (code, mut r) = Reply::status(&v)?;
    if code == -1 {
        return Err(Error::QueueNotFound { name: queue.into() });
    }
    let changed = r.int()? > 0;
    let mut values = Vec::with_capacity(2 * QueueSettings::FIELDS.len());
    for _ in 0..2 * QueueSettings::FIELDS.len() {
        values.push(
            r.opt_bytes()?
                .map(|b| String::from_utf8_lossy(b).into_owned()),
        );
    }
    let by = values.split_off(QueueSettings::FIELDS.len());
    Ok((QueueSettings::decode(&values, &by), changed))
}

/// `limits.lua`: how much of the queue's limits across the fleet is in use.
pub(super) async fn usage(rsmq: &Rsmq, queue: &str) -> Result<LimitUsage> {
    validate::queue_name(queue)?;
    let (stored, _) = call(rsmq, queue, Mode::Get, &QueueSettings::default(), "").await?;
    let (mut con, k) = rsmq.parts(queue);
    let cmd = scripts::eval(&scripts::LIMITS, &[&k.hash, &k.leases, &k.starts]);
    let v = scripts::run(&mut con, &scripts::LIMITS, &cmd).await?;
    let (code, mut r) = Reply::status(&v)?;
    if code == -1 {
        return Err(Error::QueueNotFound { name: queue.into() });
    }
    let in_flight = r.int()?.max(0) as u64;
    let started_in_window = r.int()?.max(0) as u64;
    let at = r.int()?.max(0) as u64;
    let throttled = r.int()?.max(0) as u64;
    let now = stored.in_force();
    Ok(LimitUsage {
        concurrency: now.concurrency,
        rate_limit: now.rate_limit,
        in_flight,
        started_in_window,
        held_until_ms: (at > 0).then_some(at),
        throttled_until_ms: (throttled > 0).then_some(throttled),
    })
}

/// `held.lua`: wakes the queue's workers if a fetch waits for a place under
/// its global concurrency, after an operator's cancel or purge (which may
/// have freed some; a delete wakes them in its own script). The action stands whatever this does: a worker not
/// woken looks again when the first lease in flight ends.
pub(super) async fn wake_held(rsmq: &Rsmq, queue: &str) {
    let (mut con, k) = rsmq.parts(queue);
    let mut cmd = scripts::eval(&scripts::HELD, &[&k.zset, &k.hash]);
    cmd.arg(&k.realtime);
    if let Err(e) = scripts::run(&mut con, &scripts::HELD, &cmd).await {
        tracing::debug!(queue = %queue, error = %e, "could not wake the workers a limit held");
    }
}
