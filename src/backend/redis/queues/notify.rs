//! Notices to the workers on `ns:@settings`: settings changed, running jobs gone.

use crate::Result;
use crate::backend::redis::connection::Connection;
use crate::backend::redis::keys::Namespace;

/// Tells every worker that queues' settings changed (see
/// `RedisBackend::settings_changed`): the version moves on and a notice goes
/// out on `ns:@settings`.
pub(crate) async fn settings_changed(con: &mut Connection, ns: &Namespace) -> Result<()> {
    let [_, _, _, _, settings] = ns.workers();
    let _: i64 = redis::cmd("HINCRBY")
        .arg(&settings)
        .arg("v")
        .arg(1)
        .query_async(con)
        .await?;
    // a command of its own: no key, so a Cluster takes it on any node
    let _: i64 = redis::cmd("PUBLISH")
        .arg(ns.settings_channel())
        .arg("")
        .query_async(con)
        .await?;
    Ok(())
}

/// Tells every worker that running jobs of `queue` may have been cancelled
/// or deleted (`gone <queue>` on `ns:@settings`): one holding jobs of the
/// queue renews their leases now, which finds those gone and stops their
/// runs, rather than at its next renewal. The action stands whatever this
/// does: a worker that misses it learns at that renewal.
pub(crate) async fn tell_gone(con: &mut Connection, ns: &Namespace, queue: &str) {
    let told: redis::RedisResult<i64> = redis::cmd("PUBLISH")
        .arg(ns.settings_channel())
        .arg(format!("gone {queue}"))
        .query_async(con)
        .await;
    if let Err(e) = told {
        tracing::debug!(queue = %queue, error = %e, "could not tell the workers of jobs removed while they ran");
    }
}
