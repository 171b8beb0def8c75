//! `jobs ...`.

use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use redjob::JobId;
use redjob::inspect::{Cancelled, Cursor, Finish, HistoryQuery, Inspect, JobState};
use redjob::ops::{Admin, Unserved};
use serde_json::{Value, json};

use crate::queues::done;
use crate::show;
use crate::{Ctx, Failure, Outcome};

#[derive(Subcommand)]
pub enum JobsCommand {
    /// The next jobs that would run, without taking them.
    Peek {
        /// The queue.
        queue: String,
        /// How many, 1 to 1000.
        #[arg(short, default_value_t = 10, value_parser = show::page_size())]
        n: usize,
    },
    /// One job by id: in the queue, its dead letters or its history of
    /// finished jobs. Without the queue,
    /// every queue is asked (an id is unique across queues).
    Show {
        /// The job's id; or the queue, when the id follows (`show <id>` or
        /// `show <queue> <id>`).
        #[arg(value_name = "QUEUE|ID")]
        first: String,
        /// The job's id, after its queue.
        id: Option<JobId>,
    },
    /// Runs a finished job (in its queue's history) again: a copy under a new
    /// id that names the old one. Without the queue, every queue is asked.
    Retry {
        /// The job's id; or the queue, when the id follows.
        #[arg(value_name = "QUEUE|ID")]
        first: String,
        /// The job's id, after its queue.
        id: Option<JobId>,
    },
    /// Removes a job, waiting or running (its worker is told at once and stops
    /// the run, or at its next lease renewal if it missed the notice; it is not
    /// retried).
    Cancel {
        /// The queue.
        queue: String,
        /// The job's id.
        id: JobId,
    },
    /// Makes a scheduled job (a delayed one, or a retry waiting out its
    /// backoff) due now.
    RunNow {
        /// The queue.
        queue: String,
        /// The job's id.
        id: JobId,
    },
    /// The queue's finished jobs (its history), newest first, a page at a time.
    History {
        /// The queue.
        queue: String,
        /// Only jobs that finished so.
        #[arg(long, value_enum)]
        outcome: Option<How>,
        /// Only jobs of this type.
        #[arg(long = "type")]
        job_type: Option<String>,
        /// Only jobs that finished within this long (e.g. 30m, 2h), up to
        /// the backend's clock now.
        #[arg(long, value_parser = show::duration, conflicts_with = "since_ms")]
        since: Option<Duration>,
        /// Only jobs that finished at or after this time (Unix ms): the
        /// hint under a page of `--since` gives the cutoff that page
        /// measured, so the next pages read the same jobs.
        #[arg(long, value_name = "UNIX_MS")]
        since_ms: Option<u64>,
        /// Page size, 1 to 1000.
        #[arg(short, default_value_t = 50, value_parser = show::page_size())]
        n: usize,
        /// Start after this cursor (printed under the previous page).
        #[arg(long)]
        after: Option<Cursor>,
    },
    /// The jobs of one state, a page at a time.
    List {
        /// The queue.
        queue: String,
        /// Which jobs.
        #[arg(long, value_enum)]
        state: State,
        /// Page size, 1 to 1000.
        #[arg(short, default_value_t = 50, value_parser = show::page_size())]
        n: usize,
        /// Start after this cursor (printed under the previous page).
        #[arg(long)]
        after: Option<Cursor>,
    },
}

/// How a job finished, on the command line.
#[derive(Clone, Copy, ValueEnum)]
pub enum How {
    Succeeded,
    Dead,
    Cancelled,
    Deleted,
}

impl From<How> for Finish {
    fn from(h: How) -> Self {
        match h {
            How::Succeeded => Finish::Succeeded,
            How::Dead => Finish::Dead,
            How::Cancelled => Finish::Cancelled,
            How::Deleted => Finish::Deleted,
        }
    }
}

/// A job state on the command line.
#[derive(Clone, Copy, ValueEnum)]
pub enum State {
    Ready,
    Scheduled,
    /// Leased by a worker (also `in-flight`).
    #[value(name = "in_flight", alias = "in-flight")]
    InFlight,
    Dead,
    /// In the queue's history, newest first.
    Finished,
    /// Waiting for a place of their concurrency keys, by key then due time.
    Blocked,
}

impl From<State> for JobState {
    fn from(s: State) -> Self {
        match s {
            State::Ready => JobState::Ready,
            State::Scheduled => JobState::Scheduled,
            State::InFlight => JobState::InFlight,
            State::Dead => JobState::Dead,
            State::Finished => JobState::Finished,
            State::Blocked => JobState::Blocked,
        }
    }
}

pub async fn jobs(ctx: &Ctx, cmd: JobsCommand) -> Outcome {
    let c = &ctx.client;
    match cmd {
        JobsCommand::Peek { queue, n } => {
            let jobs = c.peek(&queue, n).await?;
            let page = redjob::inspect::Page { jobs, next: None };
            show::page(ctx, &page, "")
        }
        JobsCommand::Show { first, id } => {
            let (queue, job) = find(ctx, "show", first, id).await?;
            let unserved = match (job.state, job.job_name()) {
                (JobState::Ready | JobState::Scheduled | JobState::InFlight, Some(name)) => {
                    let workers = c.workers().await?;
                    Unserved::find(&workers, &queue, &name, job.id.sent_ms())
                }
                _ => None,
            };
            show::job(ctx, &queue, &job, unserved)
        }
        JobsCommand::Retry { first, id } => {
            let (queue, job) = find(ctx, "retry", first, id).await?;
            let copy = c.backend().retry_finished(&queue, &job.id).await?;
            let v =
                json!({ "queue": queue, "retry_of": job.id.to_string(), "id": copy.to_string() });
            done(
                ctx,
                v,
                &format!("sent {copy} to {queue}, a copy of {}", job.id),
            )
        }
        JobsCommand::Cancel { queue, id } => {
            let text = match c.cancel(&queue, &id).await? {
                Cancelled::Removed => "removed",
                Cancelled::Cancelling => "cancelling: its worker stops it now",
                _ => {
                    return Err(Failure(format!(
                        "no job {id} waiting or running in {queue:?}"
                    )));
                }
            };
            let v = json!({ "id": id.to_string(), "cancelled": text.split(':').next() });
            done(ctx, v, text)
        }
        JobsCommand::RunNow { queue, id } => {
            let text = match c.run_now(&queue, &id).await? {
                Some(JobState::Scheduled) => "due now",
                Some(JobState::Ready) => "due already",
                Some(JobState::InFlight) => "running: left to its lease",
                Some(JobState::Blocked) => {
                    "blocked: due now, runs once its concurrency key has a place"
                }
                _ => {
                    return Err(Failure(format!(
                        "no job {id} waiting or running in {queue:?}"
                    )));
                }
            };
            let v = json!({ "id": id.to_string(), "state": text.split(':').next() });
            done(ctx, v, text)
        }
        JobsCommand::History {
            queue,
            outcome,
            job_type,
            since,
            since_ms,
            n,
            after,
        } => {
            let mut query = HistoryQuery::default();
            let mut more = format!("redjob jobs history {queue} -n {n}");
            if let Some(how) = outcome {
                query = query.how(how.into());
                more.push_str(&format!(" --outcome {}", Finish::from(how).as_str()));
            }
            if let Some(t) = job_type {
                more.push_str(&format!(" --type {t}"));
                query = query.job_type(t);
            }
            let since_ms = match since {
                Some(d) => {
                    // from the backend's clock, as the finish times are
                    let now = redjob::backend::Backend::now_ms(&c.backend()).await?;
                    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                    Some(now.saturating_sub(ms))
                }
                None => since_ms,
            };
            if let Some(ms) = since_ms {
                query = query.since_ms(ms);
                // the cutoff itself: a `--since` again would measure from
                // the next run's clock, and lose the jobs between the two
                more.push_str(&format!(" --since-ms {ms}"));
            }
            let page = c.history(&queue, &query, after.as_ref(), n).await?;
            // the events (purges) with the first page
            let events = if after.is_none() {
                c.history_events(&queue).await?
            } else {
                Vec::new()
            };
            if ctx.json {
                let jobs: Vec<Value> = page.jobs.iter().map(show::job_json).collect();
                let events: Vec<Value> = events
                    .iter()
                    .map(
                        |e| json!({"at_ms": e.at_ms, "what": e.what, "count": e.count, "by": e.by}),
                    )
                    .collect();
                let next = page.next.map(|c| c.to_string());
                return show::json(
                    &json!({ "jobs": jobs, "next": next, "since_ms": since_ms, "events": events }),
                );
            }
            show::page(ctx, &page, &more)?;
            if !events.is_empty() {
                println!("\nevents:");
                for e in &events {
                    let by =
                        e.by.as_deref()
                            .map_or(String::new(), |b| format!(" by {}", show::escaped(b)));
                    // a queue's own operations (paused, settings) take no jobs
                    let jobs = match e.count {
                        0 => String::new(),
                        n => format!(" {n} jobs"),
                    };
                    let what = show::escaped(&e.what);
                    println!("  {} {what}{jobs}{by}", show::when(e.at_ms));
                }
            }
            Ok(())
        }
        JobsCommand::List {
            queue,
            state,
            n,
            after,
        } => {
            let page = c.list(&queue, state.into(), after.as_ref(), n).await?;
            let state = JobState::from(state).as_str();
            let more = format!("redjob jobs list {queue} --state {state} -n {n}");
            show::page(ctx, &page, &more)
        }
    }
}

/// The job `jobs <what> [<queue>] <id>` names, and its queue: looked up in
/// that queue, or in every queue.
async fn find(
    ctx: &Ctx,
    what: &str,
    first: String,
    id: Option<JobId>,
) -> Result<(String, redjob::inspect::JobInfo), Failure> {
    let c = &ctx.client;
    let (queue, id) = match id {
        Some(id) => (Some(first), id),
        None => match first.parse::<JobId>() {
            Ok(id) => (None, id),
            // a usage error, as a bad id after a queue is (exit code 2)
            Err(e) => crate::usage_error(
                clap::Error::raw(
                    clap::error::ErrorKind::InvalidValue,
                    format!(
                        "{first:?} is not a job id ({e}): give `jobs {what} <id>` or `jobs {what} <queue> <id>`\n"
                    ),
                ),
                ctx.json,
            ),
        },
    };
    match queue {
        Some(queue) => match c.job(&queue, &id).await? {
            Some(j) => Ok((queue, j)),
            None => Err(Failure(format!("no job {id} in {queue:?}"))),
        },
        None => match c.locate(&id).await? {
            Some(found) => Ok((found.queue, found.job)),
            None => Err(Failure(format!("no job {id} in any queue"))),
        },
    }
}
