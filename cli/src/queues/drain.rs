//! `drain`: wait until a queue has no jobs left.

use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use redjob::inspect::{Inspect, StateCounts};
use redjob::ops::Admin;
use serde_json::json;
use tokio::time::Instant;

use super::done;
use crate::show;
use crate::{Ctx, Failure, Outcome};

#[derive(Args)]
pub struct DrainArgs {
    /// The queue.
    queue: String,
    /// Give up (exit code 1) after this long.
    #[arg(long, value_parser = show::duration)]
    timeout: Option<Duration>,
    /// Wait on a paused queue too (else a paused queue is an error: its jobs
    /// would wait until it is resumed).
    #[arg(long)]
    even_if_paused: bool,
    /// Exit 0 even when some jobs were dead-lettered meanwhile (else 1).
    #[arg(long)]
    allow_dead: bool,
}

pub async fn drain(ctx: &Ctx, args: DrainArgs) -> Outcome {
    let c = &ctx.client;
    let left = |n: StateCounts| n.ready + n.scheduled + n.in_flight + n.blocked;
    let start = Instant::now();
    let mut total = left(c.counts(&args.queue).await?);
    if c.is_paused(&args.queue).await? && !args.even_if_paused && total > 0 {
        return Err(Failure(format!(
            "{:?} is paused: its {total} jobs wait until it is resumed (redjob queue resume {}); --even-if-paused waits anyway",
            args.queue, args.queue
        )));
    }
    // what became of them: the queue's counters from now
    let before = c.stats(&args.queue).await?;
    let bar = if ctx.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {pos}/{len} jobs out of the queue, {per_sec}, {elapsed} {msg}",
        )
        .map_err(|e| Failure(e.to_string()))?,
    );
    loop {
        let remaining = left(c.counts(&args.queue).await?);
        // jobs sent meanwhile count as more to do
        total = total.max(remaining + bar.position());
        bar.set_length(total);
        bar.set_position(total - remaining);
        if remaining == 0 {
            bar.finish();
            let secs = start.elapsed().as_secs_f64();
            let after = c.stats(&args.queue).await?;
            let succeeded = after.processed.saturating_sub(before.processed);
            let dead = after.dead.saturating_sub(before.dead);
            let v = json!({ "queue": args.queue, "drained": total, "succeeded": succeeded,
                            "dead": dead, "seconds": secs });
            done(
                ctx,
                v,
                &format!(
                    "{:?} is empty: {succeeded} succeeded, {dead} dead-lettered",
                    args.queue
                ),
            )?;
            if dead > 0 && !args.allow_dead {
                return Err(Failure(format!(
                    "{dead} jobs of {:?} were dead-lettered (redjob dead list {}); --allow-dead exits 0 all the same",
                    args.queue, args.queue
                )));
            }
            return Ok(());
        }
        if args.timeout.is_some_and(|t| start.elapsed() >= t) {
            bar.abandon();
            return Err(Failure(format!(
                "{remaining} jobs left in {:?} after {:?}",
                args.queue,
                args.timeout.unwrap_or_default()
            )));
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = tokio::signal::ctrl_c() => {
                bar.abandon();
                return Err(Failure(format!("interrupted with {remaining} jobs left")));
            }
        }
    }
}
