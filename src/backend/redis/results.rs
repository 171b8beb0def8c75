//! Waiting for a job to finish on Redis (`await.lua`): a subscriber of the
//! queue's done channel, registered in `ns:q:awaited`, so that the script
//! that finishes the job publishes its id.

use std::time::Duration;

use futures::StreamExt;

use super::{LISTEN_TIMEOUT, RedisBackend};
use crate::backend::redis::scripts;
use crate::contract::backend::FinishWatch;
use crate::contract::queues::validate;
use crate::{Error, JobId, Result};

/// How often a quiet result waiter's connection is pinged: ten waiters cost
/// an idle Redis 0.03 commands a second (0.17 at a ping a minute), and a
/// connection that died silently is found within five minutes (the caller's
/// own deadline bounds the wait either way).
const WAIT_PING_EVERY: Duration = Duration::from_secs(300);

impl RedisBackend {
    /// See [`Backend::watch_finish`](crate::backend::Backend::watch_finish).
    pub(super) async fn watch_finish_on(
        &self,
        queue: &str,
        id: &JobId,
        within: Duration,
    ) -> Result<FinishWatch> {
        validate::queue_name(queue)?;
        let (mut con, k) = self.rsmq.parts(queue);
        let timed_out = || Error::Protocol("notification connection timed out".into());
        let mut pubsub = tokio::time::timeout(LISTEN_TIMEOUT, async {
            let mut p = self.target.pubsub().await?.get_async_pubsub().await?;
            p.subscribe(&k.done).await?;
            Ok::<_, Error>(p)
        })
        .await
        .map_err(|_| timed_out())??;
        // registered once subscribed: a finish from now on is published to us
        let ms = u64::try_from(within.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, crate::contract::queues::LAST_DUE_MS);
        let mut cmd = scripts::eval(&scripts::AWAIT, &[&k.hash, &k.awaited]);
        cmd.arg(id.as_ref()).arg(ms);
        if scripts::int(&scripts::run(&mut con, &scripts::AWAIT, &cmd).await?)? < 0 {
            let _ = pubsub.unsubscribe(&k.done).await;
            return Err(Error::QueueNotFound { name: queue.into() });
        }
        let want = id.to_string();
        let (sink, stream) = pubsub.split();
        let finishes = stream
            .filter_map(move |m| {
                let ours = m.get_payload_bytes() == want.as_bytes();
                std::future::ready(ours.then_some(()))
            })
            .boxed();
        // a quiet connection is pinged (one command every five minutes) rather than
        // replaced: the stream ends when it does not answer, and the
        // caller watches again
        let next = tokio::time::Instant::now() + WAIT_PING_EVERY;
        Ok(
            futures::stream::unfold((sink, finishes, next), |(mut sink, mut finishes, mut next)| async move {
                loop {
                    tokio::select! {
                        m = finishes.next() => return m.map(|()| ((), (sink, finishes, next))),
                        _ = tokio::time::sleep_until(next) => {
                            let pong = tokio::time::timeout(LISTEN_TIMEOUT, sink.ping::<redis::Value>()).await;
                            if !matches!(pong, Ok(Ok(_))) {
                                return None;
                            }
                            next = tokio::time::Instant::now() + WAIT_PING_EVERY;
                        }
                    }
                }
            })
            .boxed(),
        )
    }
}
