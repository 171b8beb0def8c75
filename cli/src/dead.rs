//! `dead ...`: list, show, requeue, delete and purge dead letters.

use clap::{Args, Subcommand};
use redjob::JobId;
use redjob::inspect::{Cursor, Inspect, JobState};
use redjob::ops::{Admin, DeadQuery, Spread};
use serde_json::json;

use crate::queues::done;
use crate::show;
use crate::{Ctx, Failure, Outcome};

#[derive(Subcommand)]
pub enum DeadCommand {
    /// Dead letters, oldest first (or --newest), a page at a time.
    List {
        /// The queue.
        queue: String,
        #[command(flatten)]
        filter: Filter,
        /// Newest first.
        #[arg(long)]
        newest: bool,
        /// Page size, 1 to 1000.
        #[arg(short, default_value_t = 50, value_parser = show::page_size())]
        n: usize,
        /// Start after this cursor (printed under the previous page).
        #[arg(long)]
        after: Option<Cursor>,
    },
    /// One dead letter in full.
    Show {
        /// The queue.
        queue: String,
        /// The job's id.
        id: JobId,
    },
    /// Puts dead letters back in their queue as fresh jobs: by id, or --all
    /// (narrowed by --type and --error).
    Requeue {
        /// The queue.
        queue: String,
        /// The jobs' ids.
        ids: Vec<JobId>,
        #[command(flatten)]
        bulk: Bulk,
        /// Make them due at this many a second, not all at once.
        #[arg(long)]
        rate: Option<u32>,
    },
    /// Deletes dead letters: by id, or --all (narrowed by --type and --error).
    Delete {
        /// The queue.
        queue: String,
        /// The jobs' ids.
        ids: Vec<JobId>,
        #[command(flatten)]
        bulk: Bulk,
    },
    /// Deletes every dead letter of the queue (those counted when it asks).
    Purge {
        /// The queue.
        queue: String,
        #[command(flatten)]
        confirm: show::Confirm,
    },
}

/// Which dead letters.
#[derive(Args)]
pub struct Filter {
    /// Only jobs of this type.
    #[arg(long = "type")]
    job_type: Option<String>,
    /// Only jobs whose last error contains this text.
    #[arg(long)]
    error: Option<String>,
}

/// A bulk action's selection and confirmation.
#[derive(Args)]
pub struct Bulk {
    /// Every dead letter (that matches --type and --error).
    #[arg(long, conflicts_with = "ids")]
    all: bool,
    #[command(flatten)]
    filter: Filter,
    #[command(flatten)]
    confirm: show::Confirm,
}

impl Filter {
    fn query(&self) -> DeadQuery {
        DeadQuery {
            job_type: self.job_type.clone(),
            error_contains: self.error.clone(),
            ..DeadQuery::default()
        }
    }

    fn describe(&self) -> String {
        let mut s = String::new();
        if let Some(t) = &self.job_type {
            s += &format!(" of type {t:?}");
        }
        if let Some(e) = &self.error {
            s += &format!(" with an error containing {e:?}");
        }
        s
    }
}

impl Bulk {
    /// Counts the dead letters --all (with the filter) takes, says it and
    /// asks: the query to act with, its cutoff the count's (so the action
    /// takes the letters counted, none that died since); `None` after a dry
    /// run.
    async fn counted(
        &self,
        ctx: &Ctx,
        queue: &str,
        verb: &str,
    ) -> Result<Option<DeadQuery>, Failure> {
        let query = self.filter.query();
        let n = ctx.client.count_dead(queue, &query).await?;
        let what = format!(
            "{verb} {} of {queue:?}{}",
            show::count(n.count, "dead letter", "dead letters"),
            self.filter.describe()
        );
        let v = json!({"queue": queue, "count": n.count, "upto_ms": n.upto_ms});
        let go = self.confirm.ask(ctx, &what, v)?;
        Ok(go.then(|| query.died_by(n.upto_ms)))
    }

    /// For ids given: with --dry-run, says how many are dead letters and
    /// returns false.
    fn by_ids(
        &self,
        ctx: &Ctx,
        queue: &str,
        verb: &str,
        found: &[JobId],
        missing: &[JobId],
    ) -> Result<bool, Failure> {
        if !self.confirm.dry_run {
            return Ok(true);
        }
        let mut what = format!(
            "{verb} {} of {queue:?}",
            show::count(found.len() as u64, "dead letter", "dead letters")
        );
        if !missing.is_empty() {
            what += &format!(
                " ({} not)",
                show::count(missing.len() as u64, "id is", "ids are")
            );
        }
        let missing: Vec<String> = missing.iter().map(ToString::to_string).collect();
        let v = json!({"queue": queue, "count": found.len(), "not_dead": missing});
        self.confirm.ask(ctx, &what, v)
    }

    /// Checks the selection: ids, or --all; filters only with --all.
    fn check(&self, ids: &[JobId], verb: &str) -> Outcome {
        let filtered = self.filter.job_type.is_some() || self.filter.error.is_some();
        if filtered && !self.all {
            return Err(Failure("--type and --error select with --all".into()));
        }
        if ids.is_empty() && !self.all {
            return Err(Failure(format!("{verb} what? give ids, or --all")));
        }
        Ok(())
    }
}

pub async fn dead(ctx: &Ctx, cmd: DeadCommand) -> Outcome {
    let c = &ctx.client;
    match cmd {
        DeadCommand::List {
            queue,
            filter,
            newest,
            n,
            after,
        } => {
            let mut q = filter.query();
            if newest {
                q = q.newest_first();
            }
            let page = c.dead_matching(&queue, &q, after.as_ref(), n).await?;
            let mut more = format!("redjob dead list {queue} -n {n}");
            if newest {
                more += " --newest";
            }
            if let Some(t) = &filter.job_type {
                more += &format!(" --type {t:?}");
            }
            if let Some(e) = &filter.error {
                more += &format!(" --error {e:?}");
            }
            show::page(ctx, &page, &more)
        }
        DeadCommand::Show { queue, id } => match c.job(&queue, &id).await? {
            Some(j) if j.state == JobState::Dead => show::job(ctx, &queue, &j, None),
            _ => Err(Failure(format!("no dead letter {id} in {queue:?}"))),
        },
        DeadCommand::Requeue {
            queue,
            ids,
            bulk,
            rate,
        } => {
            bulk.check(&ids, "requeue")?;
            let spread = rate.map_or(Spread::NOW, Spread::per_second);
            let n = if bulk.all {
                let Some(query) = bulk.counted(ctx, &queue, "requeue").await? else {
                    return Ok(());
                };
                c.requeue_dead_matching(&queue, &query, rate).await?
            } else {
                let (found, missing) = dead_ids(ctx, &queue, &ids).await?;
                if !bulk.by_ids(ctx, &queue, "requeue", &found, &missing)? {
                    return Ok(());
                }
                let n = c.requeue_dead(&queue, &found, spread).await?;
                matched(&queue, "requeued", n, &missing)?;
                let left = found.len() as u64 - n.min(found.len() as u64);
                if left > 0 {
                    return Err(Failure(format!(
                        "requeued {n}; {left} stayed dead letters: a queued job holds their unique key (or their id is queued already)"
                    )));
                }
                n
            };
            done(
                ctx,
                json!({ "queue": queue, "requeued": n }),
                &format!("requeued {n}"),
            )
        }
        DeadCommand::Delete { queue, ids, bulk } => {
            bulk.check(&ids, "delete")?;
            let n = if bulk.all {
                let Some(query) = bulk.counted(ctx, &queue, "delete").await? else {
                    return Ok(());
                };
                c.delete_dead_matching(&queue, &query).await?
            } else {
                let (found, missing) = dead_ids(ctx, &queue, &ids).await?;
                if !bulk.by_ids(ctx, &queue, "delete", &found, &missing)? {
                    return Ok(());
                }
                let n = c.delete_dead(&queue, &found).await?;
                matched(&queue, "deleted", n, &missing)?;
                n
            };
            done(
                ctx,
                json!({ "queue": queue, "deleted": n }),
                &format!("deleted {n}"),
            )
        }
        DeadCommand::Purge { queue, confirm } => {
            let bulk = Bulk {
                all: true,
                filter: Filter {
                    job_type: None,
                    error: None,
                },
                confirm,
            };
            let Some(query) = bulk.counted(ctx, &queue, "delete").await? else {
                return Ok(());
            };
            let n = c.delete_dead_matching(&queue, &query).await?;
            done(
                ctx,
                json!({ "queue": queue, "deleted": n }),
                &format!("deleted {n}"),
            )
        }
    }
}

/// The given ids split into the dead letters of `queue` and the others (an
/// error when the queue does not exist), each id once in the order first
/// given: an id given twice is one letter, requeued or deleted once.
async fn dead_ids(
    ctx: &Ctx,
    queue: &str,
    ids: &[JobId],
) -> Result<(Vec<JobId>, Vec<JobId>), Failure> {
    let c = &ctx.client;
    c.counts(queue).await?;
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    let mut seen = std::collections::HashSet::new();
    for id in ids.iter().filter(|id| seen.insert(**id)) {
        match c.job(queue, id).await? {
            Some(j) if j.state == JobState::Dead => found.push(*id),
            _ => missing.push(*id),
        }
    }
    Ok((found, missing))
}

/// An error when some given ids were not dead letters: what was done, and
/// which they were.
fn matched(queue: &str, done: &str, n: u64, missing: &[JobId]) -> Result<(), Failure> {
    if missing.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = missing.iter().map(ToString::to_string).collect();
    Err(Failure(format!(
        "{done} {n}; not dead letters of {queue:?}: {}",
        ids.join(", ")
    )))
}
