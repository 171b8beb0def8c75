//! `redjob batches` and `redjob batch <id>`: batches with their progress,
//! and one batch with its dead jobs; `redjob batch <id> --cancel` cancels
//! it.

use redjob::ops::{BatchId, BatchStatus};
use serde_json::json;

use crate::show::{self, table, when};
use crate::{Ctx, Failure, Outcome};

#[derive(clap::Args)]
pub struct BatchesArgs {
    /// How many, newest first (1 to 1000).
    #[arg(long, default_value_t = 20, value_parser = show::page_size())]
    limit: usize,
    /// Only batches opened before this one (its id), to page on. An id
    /// that is none is a usage error, as a job's is.
    #[arg(long)]
    before: Option<BatchId>,
}

#[derive(clap::Args)]
pub struct BatchArgs {
    /// The batch's id (32 characters: an id that is none is a usage error).
    id: BatchId,
    /// How many of its dead jobs to list (1 to 1000).
    #[arg(long, default_value_t = 20, value_parser = show::page_size())]
    dead: usize,
    /// Cancel the batch: it takes no more jobs, and workers cancel its jobs
    /// as they fetch them rather than start them (running ones go on).
    #[arg(long)]
    cancel: bool,
}

/// `open` (its enqueue did not finish), `running NN%`, `cancelling NN%`
/// (cancelled, its jobs not all finished), or `complete`.
fn state(s: &BatchStatus) -> String {
    let pct = s.percent();
    if s.completed_ms.is_some() {
        "complete".into()
    } else if s.cancelled_at_ms.is_some() {
        format!("cancelling {pct}%")
    } else if !s.sealed {
        "open".into()
    } else {
        format!("running {pct}%")
    }
}

fn status_json(s: &BatchStatus) -> serde_json::Value {
    json!({
        "id": s.id,
        "description": s.description,
        "state": state(s).split(' ').next(),
        "total": s.total,
        "succeeded": s.succeeded,
        "dead": s.dead,
        "cancelled": s.cancelled,
        "pending": s.pending(),
        "sealed": s.sealed,
        "created_ms": s.created_ms,
        "completed_ms": s.completed_ms,
        "first_failure": s.first_failure,
        "parent": s.parent,
        "cancelled_at_ms": s.cancelled_at_ms,
    })
}

/// The batches, newest first.
pub async fn list(ctx: &Ctx, args: &BatchesArgs) -> Outcome {
    let before = match &args.before {
        None => None,
        Some(id) => match ctx.client.batch_status(id).await? {
            Some(s) => Some(s.created_ms),
            None => return Err(Failure(format!("no batch {id}"))),
        },
    };
    let batches = ctx.client.batches(before, args.limit).await?;
    if ctx.json {
        let rows: Vec<_> = batches.iter().map(status_json).collect();
        return show::json(&json!({ "batches": rows }));
    }
    let rows: Vec<Vec<String>> = batches
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                s.description.clone().unwrap_or_default(),
                state(s),
                s.total.to_string(),
                s.succeeded.to_string(),
                s.dead.to_string(),
                s.pending().to_string(),
                when(s.created_ms),
                s.completed_ms.map_or_else(String::new, when),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "DESCRIPTION",
            "STATE",
            "TOTAL",
            "SUCCEEDED",
            "DEAD",
            "PENDING",
            "CREATED",
            "COMPLETED",
        ],
        &rows,
    );
    Ok(())
}

/// One batch: its counts, then its dead jobs.
pub async fn show(ctx: &Ctx, args: &BatchArgs) -> Outcome {
    let id = args.id;
    if args.cancel {
        if !ctx.client.cancel_batch(&id).await? {
            return Err(Failure(format!(
                "batch {id} was not cancelled: unknown, completed, or cancelled already"
            )));
        }
        if !ctx.json {
            println!("cancelled batch {id}: workers cancel its jobs as they fetch them");
            println!();
        }
    }
    let Some(s) = ctx.client.batch_status(&id).await? else {
        return Err(Failure(format!(
            "no batch {id} (unknown, or past its retention)"
        )));
    };
    let dead = ctx.client.batch_dead(&id, args.dead).await?;
    if ctx.json {
        let mut v = status_json(&s);
        v["dead_jobs"] = dead
            .iter()
            .map(|(q, j)| json!({ "queue": q, "id": j.to_string() }))
            .collect();
        return show::json(&v);
    }
    println!("batch {}", s.id);
    if let Some(d) = &s.description {
        println!("description: {}", show::escaped(d));
    }
    println!("state: {}", state(&s));
    println!(
        "jobs: {} total, {} succeeded, {} dead, {} cancelled, {} pending",
        s.total,
        s.succeeded,
        s.dead,
        s.cancelled,
        s.pending()
    );
    println!("created: {}", when(s.created_ms));
    if let Some(at) = s.cancelled_at_ms {
        println!("cancelled: {}", when(at));
    }
    if let Some(at) = s.completed_ms {
        println!("completed: {}", when(at));
    }
    if let Some(p) = &s.parent {
        println!("parent (runs when all succeeded): {p}");
    }
    if let Some(f) = &s.first_failure {
        println!("first failure: {}", show::escaped(f));
    }
    if !dead.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = dead
            .iter()
            .map(|(q, j)| vec![q.clone(), j.to_string()])
            .collect();
        table(&["QUEUE", "DEAD JOB"], &rows);
    }
    Ok(())
}
