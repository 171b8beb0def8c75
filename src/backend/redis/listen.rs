//! The worker's notification connection: wake-ups on the queues' realtime
//! channels, changes of the queues' settings on `ns:@settings`, and jobs
//! handed over (and controls' notices) on the worker's own channel.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;

use super::connection::Subscription;
use super::{LISTEN_PING_EVERY, LISTEN_TIMEOUT, RedisBackend};
use crate::contract::leases::{Delivery, Handed, Token};
use crate::{Error, JobId, Result};

/// How long a stopping listener waits for Redis to confirm it no longer takes
/// hand-offs (a healthy Redis answers in well under a millisecond; a stalled
/// one holds up the worker's shutdown this long at most).
const UNSUBSCRIBE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The worker's own channel: the name to wake when a control's notice comes
/// on it (see `Admin::control_worker`), and what to do with each job handed
/// on it (`None` on a Cluster, where sends hand off nothing).
pub(super) struct Own<'a> {
    pub channel: String,
    pub control: String,
    pub handed: Option<&'a (dyn Fn(Handed) + Send + Sync)>,
}

impl RedisBackend {
    /// Subscribes to the queues' realtime channels, the settings' channel
    /// (and the worker's own channel, `handoffs`),
    /// then wakes and hands over until the connection fails, or until `stop`:
    /// then it unsubscribes from the hand-off channel first and hands over what
    /// came before (a send checks for the subscriber and publishes in one
    /// script, so no job is handed after that).
    pub(super) async fn listen_on(
        &self,
        queues: &[String],
        handoffs: Option<Own<'_>>,
        wake: &(dyn Fn(&str) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
        stop: &CancellationToken,
    ) -> Result<()> {
        let channels: HashMap<String, &str> = queues
            .iter()
            .map(|q| (self.ns.queue(q).realtime, q.as_str()))
            .collect();
        let timed_out = || Error::Protocol("notification connection timed out".into());
        // taken before the master is: a replacement meanwhile moves it at once
        let mut replaced = self.target.replaced();
        let client = tokio::time::timeout(LISTEN_TIMEOUT, self.target.pubsub())
            .await
            .map_err(|_| timed_out())??;
        let mut sub = tokio::time::timeout(LISTEN_TIMEOUT, Subscription::open(&client))
            .await
            .map_err(|_| timed_out())??;
        let own = handoffs.as_ref().map(|o| o.channel.as_str());
        // the channel takes hand-offs (not only control notices)
        let handing = own.filter(|_| handoffs.as_ref().is_some_and(|o| o.handed.is_some()));
        // the settings' channel first, and not required: an ACL rule that
        // names its channels one by one (written before it existed) may
        // refuse it, and the worker then follows a change with its full
        // beats, within two minutes
        let settings = self.ns.settings_channel();
        match tokio::time::timeout(LISTEN_TIMEOUT, sub.subscribe(&settings))
            .await
            .map_err(|_| timed_out())?
        {
            Ok(()) => {}
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => {
                tracing::warn!(channel = %settings, error = %e, "cannot hear changes of the queues' settings on this channel (the ACL rule needs it: &ns:*); the worker follows them within two minutes")
            }
            Err(e) => return Err(e.into()),
        }
        for ch in channels.keys().map(String::as_str).chain(own) {
            tokio::time::timeout(LISTEN_TIMEOUT, sub.subscribe(ch))
                .await
                .map_err(|_| timed_out())??;
        }
        // a job handed before this connection whose message may have been lost
        // with the one before: the answers come on this connection, after every
        // hand-off that came on it (see reclaim.lua)
        if let Some(ch) = handing {
            self.reclaim(&on(queues, ch), true).await?;
        }
        subscribed();
        // anything sent before the subscription took effect
        for q in queues {
            wake(q);
        }
        let on_message = |msg: redis::Msg| {
            let channel = msg.get_channel_name();
            if let Some(q) = channels.get(channel) {
                wake(q);
            } else if channel == settings {
                // "gone <queue>": running jobs of it were removed (see
                // tell_gone); else the queues' settings changed
                match msg.get_payload_bytes().strip_prefix(b"gone ") {
                    Some(q) => {
                        if let Ok(q) = std::str::from_utf8(q) {
                            wake(&crate::contract::admin::gone_wake(q));
                        }
                    }
                    None => wake(crate::contract::admin::SETTINGS_WAKE),
                }
            } else if let Some(o) = &handoffs
                && o.channel == channel
            {
                let payload = msg.get_payload_bytes();
                if payload.starts_with(b"! ") {
                    // a control set on this worker (workers.lua)
                    wake(&o.control);
                    return;
                }
                let Some(handed) = o.handed else { return };
                let read = match payload.strip_prefix(b"? ") {
                    Some(note) => lost_job(note),
                    None => handed_job(payload),
                };
                match read {
                    Ok(h) => handed(h),
                    // leased to this worker, but unreadable: it comes back when
                    // the lease runs out
                    Err(e) => {
                        tracing::error!(error = %e, "a job handed to this worker could not be read")
                    }
                }
            }
        };
        // what the connection read before it failed or stopped
        let drain = |sub: &mut Subscription| {
            while let Some(msg) = sub.read_already() {
                on_message(msg);
            }
        };
        // a half-open connection delivers nothing and reports nothing: ping it
        let mut ping = tokio::time::interval(LISTEN_PING_EVERY);
        ping.tick().await;
        loop {
            tokio::select! {
                msg = sub.next() => match msg {
                    Ok(msg) => on_message(msg),
                    Err(e) => {
                        drain(&mut sub);
                        return Err(Error::Protocol(format!("notification connection closed: {e}")));
                    }
                },
                // on the master Sentinel replaced: sends on the new one publish
                // where this connection does not hear
                _ = master_replaced(replaced.as_mut()) => {
                    drain(&mut sub);
                    return Err(Error::Protocol("the Sentinels replaced the master: the notification connection moves to the new one".into()));
                }
                _ = ping.tick() => {
                    let pong = tokio::time::timeout(LISTEN_TIMEOUT, sub.ping()).await;
                    drain(&mut sub);
                    pong.map_err(|_| timed_out())??;
                }
                _ = stop.cancelled() => {
                    if let Some(ch) = handing {
                        // once Redis confirms, every job handed before is read
                        match tokio::time::timeout(UNSUBSCRIBE_WAIT, sub.unsubscribe(ch)).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => tracing::warn!(error = %Error::from(e), "could not stop taking hand-offs (the worker's ACL rule needs +unsubscribe): a job handed to this worker as it stops waits out its lease"),
                            Err(_) => tracing::warn!("Redis did not confirm in time that this worker takes no more hand-offs: a job handed to it as it stops may wait out its lease"),
                        }
                    }
                    drain(&mut sub);
                    // what was handed to this worker is read (or released): the
                    // notes of it go with the worker
                    if let Some(ch) = handing {
                        let _ = tokio::time::timeout(UNSUBSCRIBE_WAIT, self.reclaim(&on(queues, ch), false)).await;
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Drops the notes of what sends handed to workers whose registry entries
    /// ran out (see [`Gone`](super::live::Gone)), then their entries:
    /// reclaim.lua without publishing for each queue each one's last beat
    /// named, in one round trip. Their jobs still leased are not touched:
    /// their leases run out and they are delivered again. A failure (a queue
    /// this client's ACL user may not touch) leaves those notes, and is
    /// logged; a call cut off before the entries are dropped leaves them to
    /// the next beat.
    pub(super) async fn forget_handed(&self, gone: &[super::live::Gone]) {
        if gone.is_empty() {
            return;
        }
        // a Cluster's sends hand nothing off, so nothing is noted
        if !self.ns.is_cluster() {
            let channels: Vec<String> = gone.iter().map(|g| self.ns.handoff(&g.id)).collect();
            let at: Vec<(&str, &str)> = gone
                .iter()
                .zip(&channels)
                .flat_map(|(g, ch)| g.queues.iter().map(move |q| (q.as_str(), ch.as_str())))
                .collect();
            if let Err(e) = self.reclaim(&at, false).await {
                tracing::warn!(workers = gone.len(), error = %e, "dropping the hand-off notes of workers gone failed");
            }
        }
        if let Err(e) = self.rsmq.drop_gone(gone).await {
            tracing::warn!(error = %e, "dropping the registry entries of workers gone failed");
        }
    }

    /// reclaim.lua for each (queue, channel) of `at`, in one round trip: the
    /// jobs handed to the worker on the channel, published there when
    /// `publish` (to be released unless the worker holds them), and forgotten.
    async fn reclaim(&self, at: &[(&str, &str)], publish: bool) -> Result<()> {
        use super::pipelines::run_pipeline;
        use super::scripts::{RECLAIM, eval};
        if at.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (q, channel) in at {
            let mut cmd = eval(&RECLAIM, &self.ns.queue(q).all_levels());
            cmd.arg(*channel)
                .arg(*q)
                .arg(if publish { "1" } else { "0" });
            pipe.add_command(cmd);
        }
        let loaded = [(&*RECLAIM, &self.shared.reclaim_loaded)];
        tokio::time::timeout(
            LISTEN_TIMEOUT,
            run_pipeline(&mut self.con.clone(), &loaded, pipe),
        )
        .await
        .map_err(|_| Error::Protocol("asking for jobs handed before timed out".into()))??;
        Ok(())
    }
}

/// Each of `queues` with the worker's hand-off `channel`, for [`reclaim`](RedisBackend::reclaim).
fn on<'a>(queues: &'a [String], channel: &'a str) -> Vec<(&'a str, &'a str)> {
    queues.iter().map(|q| (q.as_str(), channel)).collect()
}

/// The answer of reclaim.lua, `<queue> <id> <token> <priority>`: a job handed to
/// this worker before its listener connected, which it must release unless it
/// holds it (see [`Handed::lost`]).
pub(super) fn lost_job(note: &[u8]) -> Result<Handed> {
    let bad = |what: &str| Error::Protocol(format!("note of a hand-off: bad {what}"));
    let text = std::str::from_utf8(note).map_err(|_| bad("text"))?;
    let mut parts = text.split(' ');
    let mut next = |what: &str| parts.next().ok_or_else(|| bad(what));
    let queue = next("queue")?.to_owned();
    let id: JobId = next("id")?.parse().map_err(|_| bad("id"))?;
    let token: Token = next("token")?.parse()?;
    let priority: i8 = next("priority")?.parse().map_err(|_| bad("priority"))?;
    Ok(Handed {
        queue,
        delivery: Delivery {
            id,
            body: Vec::new(),
            token: token.at_priority(priority),
            waited_ms: 0,
        },
        now_us: 0,
        lost: true,
    })
}

/// A hand-off message: `<queue> <priority> <id> <token> <now µs> <body>` (see
/// `hand_off` in lib.lua).
pub(super) fn handed_job(msg: &[u8]) -> Result<Handed> {
    let bad = |what: &str| Error::Protocol(format!("hand-off message: bad {what}"));
    let mut parts = msg.splitn(6, |b| *b == b' ');
    let mut next = |what: &str| parts.next().ok_or_else(|| bad(what));
    // (each read in place: only the queue's name and the body are kept)
    let text = |b, what: &str| std::str::from_utf8(b).map_err(|_| bad(what));
    let queue = text(next("queue")?, "queue")?.to_owned();
    let priority: i8 = text(next("priority")?, "priority")?
        .parse()
        .map_err(|_| bad("priority"))?;
    let id = JobId::from_bytes(next("id")?).map_err(|_| bad("id"))?;
    let token: Token = text(next("token")?, "token")?.parse()?;
    let now_us: u64 = text(next("time")?, "time")?
        .parse()
        .map_err(|_| bad("time"))?;
    let body = next("body")?.to_vec();
    Ok(Handed {
        queue,
        delivery: Delivery {
            id,
            body,
            token: token.at_priority(priority),
            waited_ms: 0,
        },
        now_us,
        lost: false,
    })
}

/// Completes when the Sentinels replace the master (never without Sentinel, or
/// once the link is gone).
async fn master_replaced(replaced: Option<&mut tokio::sync::watch::Receiver<u64>>) {
    if let Some(r) = replaced
        && r.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::handed_job;

    #[test]
    fn a_hand_off_message_is_read_whole_and_a_bad_one_refused() {
        let msg = b"emails -3 mhx3k0vz1qabcdefghijklmnopqrstuv 1790000000123.501 1790000000000123 {\"a\": 1 2}";
        let h = handed_job(msg).unwrap();
        assert_eq!(h.queue, "emails");
        assert_eq!(h.delivery.id.as_str(), "mhx3k0vz1qabcdefghijklmnopqrstuv");
        assert_eq!(h.delivery.token.priority(), -3);
        assert_eq!(h.delivery.token.attempt(), 1);
        assert_eq!(h.delivery.token.lease_until_ms(), 1_790_000_000_123);
        assert_eq!(h.now_us, 1_790_000_000_000_123);
        assert_eq!(h.delivery.body, b"{\"a\": 1 2}");
        assert!(handed_job(b"emails 0 short 1.501 1 x").is_err());
        assert!(
            handed_job(b"emails 0 mhx3k0vz1qabcdefghijklmnopqrstuv 1790000000123.501").is_err()
        );
        assert!(handed_job(b"emails x mhx3k0vz1qabcdefghijklmnopqrstuv 1.501 1 x").is_err());
    }
}
