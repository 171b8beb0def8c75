//! `redjob topic`: a topic's length, ids and memory with its subscribers'
//! offsets, pending events, lag and dead letters; a subscriber's replay
//! (rewind) and its dead letters.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use redjob::topic::{EventId, RewindPlan, Start};
use serde_json::{Value, json};

use crate::show::{self, table, when};
use crate::{Ctx, Failure, Outcome};

#[derive(Subcommand)]
pub enum TopicCommand {
    /// Every topic: its length, subscribers, the largest lag and dead letters.
    List,
    /// A topic's length, first and last event, memory, and each subscriber's
    /// offset, pending events, lag (events not taken yet; "more than 100" when
    /// Redis did not know it and 100 were counted, `"lag_exact": false` in
    /// JSON) and dead letters.
    Show {
        /// The topic.
        topic: String,
    },
    /// Moves a subscriber's offset: replay from the beginning, an event id or a
    /// time, or skip to the end. Running workers read from there next.
    Rewind(RewindArgs),
    /// A subscriber's newest dead letters, with why each was given up.
    Dead {
        /// The topic.
        topic: String,
        /// The subscriber.
        subscriber: String,
        /// How many, newest first, 1 to 1000.
        #[arg(short, default_value_t = 50, value_parser = show::page_size())]
        n: usize,
    },
    /// Requeues a subscriber's dead letters (by dead id, or --all): each goes
    /// to the end of the topic again for this subscriber alone, with a fresh
    /// count of attempts.
    Requeue(DeadArgs),
    /// Deletes a subscriber's dead letters (by dead id, or --all).
    DeleteDead(DeadArgs),
}

#[derive(Args)]
pub struct DeadArgs {
    /// The topic.
    topic: String,
    /// The subscriber.
    subscriber: String,
    /// The dead letters' ids (the DEAD ID column of `redjob topic dead`).
    ids: Vec<EventId>,
    /// Every dead letter of the subscriber (those counted when it asks).
    #[arg(long, conflicts_with = "ids")]
    all: bool,
    #[command(flatten)]
    confirm: show::Confirm,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("to").required(true).multiple(false)))]
pub struct RewindArgs {
    /// The topic.
    topic: String,
    /// The subscriber.
    subscriber: String,
    /// From the oldest event the topic holds.
    #[arg(long, group = "to")]
    beginning: bool,
    /// To the end: skip every event not taken yet (those counted when it
    /// asks; none when the topic holds none).
    #[arg(long, group = "to")]
    end: bool,
    /// From this event id (`<ms>-<seq>`), included.
    #[arg(long, group = "to")]
    id: Option<EventId>,
    /// From the events published this long ago (e.g. `1h`).
    #[arg(long, group = "to", value_parser = show::duration)]
    ago: Option<Duration>,
    /// From the events published at or after this Unix time in ms.
    #[arg(long, group = "to")]
    at_ms: Option<u64>,
    /// Do not ask (it says how many events it replays or skips first).
    #[arg(long)]
    yes: bool,
    /// Say what it would do, and do nothing.
    #[arg(long)]
    dry_run: bool,
}

pub async fn topic(ctx: &Ctx, c: TopicCommand) -> Outcome {
    match c {
        TopicCommand::List => list(ctx).await,
        TopicCommand::Show { topic } => show_topic(ctx, &topic).await,
        TopicCommand::Rewind(a) => rewind(ctx, a).await,
        TopicCommand::Dead {
            topic,
            subscriber,
            n,
        } => dead(ctx, &topic, &subscriber, n).await,
        TopicCommand::Requeue(a) => dead_action(ctx, a, true).await,
        TopicCommand::DeleteDead(a) => dead_action(ctx, a, false).await,
    }
}

async fn dead_action(ctx: &Ctx, a: DeadArgs, requeue: bool) -> Outcome {
    let c = &ctx.client;
    let verb = if requeue { "requeue" } else { "delete" };
    let n = if a.all {
        // counted, then confirmed: the action takes the letters up to the
        // newest counted, none that died since
        let n = c.count_dead_events(&a.topic, &a.subscriber).await?;
        let what = format!(
            "{verb} {} of subscriber {:?} of {:?}",
            show::count(n.count, "dead letter", "dead letters"),
            a.subscriber,
            a.topic
        );
        let v = json!({"topic": a.topic, "subscriber": a.subscriber, "count": n.count,
                       "upto": n.upto.map(|u| u.to_string())});
        if !a.confirm.ask(ctx, &what, v)? {
            return Ok(());
        }
        match (n.upto, requeue) {
            (None, _) => 0,
            (Some(upto), true) => {
                c.requeue_dead_events_upto(&a.topic, &a.subscriber, upto)
                    .await?
            }
            (Some(upto), false) => {
                c.delete_dead_events_upto(&a.topic, &a.subscriber, upto)
                    .await?
            }
        }
    } else {
        if a.ids.is_empty() {
            return Err(Failure(format!("{verb} what? give dead ids, or --all")));
        }
        let mut ids = a.ids.clone();
        // oldest first, each once, as the library takes a list
        ids.sort_unstable();
        ids.dedup();
        // an error when the subscriber does not exist (a delete would count 0)
        c.count_dead_events(&a.topic, &a.subscriber).await?;
        let what = format!(
            "{verb} the dead letters of subscriber {:?} of {:?} among {}",
            a.subscriber,
            a.topic,
            show::count(ids.len() as u64, "id", "ids")
        );
        if a.confirm.dry_run {
            let given: Vec<String> = a.ids.iter().map(EventId::to_string).collect();
            let v = json!({"topic": a.topic, "subscriber": a.subscriber, "ids": given});
            a.confirm.ask(ctx, &what, v)?;
            return Ok(());
        }
        // one id at a time: one the action did not take is no dead letter of
        // the subscriber, named after the others are done (as `dead requeue`)
        let (mut n, mut missing) = (0, Vec::new());
        for id in &ids {
            let one = std::slice::from_ref(id);
            let took = if requeue {
                c.requeue_dead_events(&a.topic, &a.subscriber, one).await?
            } else {
                c.delete_dead_events(&a.topic, &a.subscriber, one).await?
            };
            if took == 0 {
                missing.push(id.to_string());
            }
            n += took;
        }
        if !missing.is_empty() {
            let done = if requeue { "requeued" } else { "deleted" };
            return Err(Failure(format!(
                "{done} {n}; not dead letters of subscriber {:?} of {:?}: {}",
                a.subscriber,
                a.topic,
                missing.join(", ")
            )));
        }
        n
    };
    let key = if requeue { "requeued" } else { "deleted" };
    crate::queues::done(
        ctx,
        json!({"topic": a.topic, "subscriber": a.subscriber, key: n}),
        &format!("{key} {n}"),
    )
}

async fn list(ctx: &Ctx) -> Outcome {
    let mut rows = Vec::new();
    let mut out = Vec::new();
    let names = ctx.client.topics().await?;
    // read together, a thousand topics at a time: two round trips each
    // (three a topic until now)
    let mut infos = Vec::with_capacity(names.len());
    for page in names.chunks(redjob::inspect::MAX_PAGE) {
        infos.extend(ctx.client.topic_infos(page).await?);
    }
    for (name, t) in names.into_iter().zip(infos) {
        // deleted since it was listed: skipped
        let Some(t) = t else {
            continue;
        };
        // of equal counts, one counted only up to the cap is further behind
        let furthest = t.subscribers.iter().max_by_key(|s| (s.lag, !s.lag_exact));
        let lag = furthest.map_or(0, |s| s.lag);
        let dead: u64 = t.subscribers.iter().map(|s| s.dead).sum();
        let mut o = json!({"topic": name, "length": t.length, "subscribers": t.subscribers.len(),
                        "max_lag": lag, "dead": dead, "memory": t.memory});
        if furthest.is_some_and(|s| !s.lag_exact) {
            o["max_lag_exact"] = json!(false);
        }
        out.push(o);
        rows.push(vec![
            name,
            t.length.to_string(),
            t.subscribers.len().to_string(),
            furthest.map_or_else(|| "0".into(), |s| s.lag_text()),
            dead.to_string(),
            t.memory.to_string(),
        ]);
    }
    if ctx.json {
        return show::json(&Value::Array(out));
    }
    table(
        &["TOPIC", "LENGTH", "SUBSCRIBERS", "MAX LAG", "DEAD", "BYTES"],
        &rows,
    );
    Ok(())
}

fn id(i: Option<EventId>) -> String {
    i.map_or_else(|| "-".into(), |i| i.to_string())
}

async fn show_topic(ctx: &Ctx, topic: &str) -> Outcome {
    let Some(t) = ctx.client.topic(topic).await? else {
        return Err(Failure(format!("topic {topic:?} not found")));
    };
    if ctx.json {
        let subs: Vec<Value> = t
            .subscribers
            .iter()
            .map(|s| {
                let mut o = json!({"name": s.name, "offset": s.offset.to_string(),
                       "pending": s.pending, "lag": s.lag, "consumers": s.consumers,
                       "dead": s.dead});
                if !s.lag_exact {
                    o["lag_exact"] = json!(false);
                }
                o
            })
            .collect();
        return show::json(&json!({
            "topic": topic, "length": t.length, "published": t.published,
            "first": t.first.map(|i| i.to_string()), "last": t.last.map(|i| i.to_string()),
            "memory": t.memory, "subscribers": subs,
        }));
    }
    println!(
        "topic {topic}: {} events ({} published), {} bytes",
        t.length, t.published, t.memory
    );
    println!(
        "first {} ({}), last {} ({})",
        id(t.first),
        t.first.map_or("-".into(), |i| when(i.ms())),
        id(t.last),
        t.last.map_or("-".into(), |i| when(i.ms())),
    );
    println!();
    let rows: Vec<Vec<String>> = t
        .subscribers
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.offset.to_string(),
                s.pending.to_string(),
                s.lag_text(),
                s.consumers.to_string(),
                s.dead.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "SUBSCRIBER",
            "OFFSET",
            "PENDING",
            "LAG",
            "CONSUMERS",
            "DEAD",
        ],
        &rows,
    );
    Ok(())
}

async fn rewind(ctx: &Ctx, a: RewindArgs) -> Outcome {
    let to = if a.beginning {
        Start::Beginning
    } else if a.end {
        Start::End
    } else if let Some(i) = a.id {
        Start::At(i)
    } else if let Some(d) = a.ago {
        Start::Time(SystemTime::now().checked_sub(d).unwrap_or(UNIX_EPOCH))
    } else if let Some(ms) = a.at_ms {
        Start::Time(UNIX_EPOCH + Duration::from_millis(ms))
    } else {
        return Err(Failure(
            "say where to: --beginning, --end, --id, --ago or --at-ms".into(),
        ));
    };
    // counted first, and confirmed: a skip to the end skips only the events
    // counted (its cutoff is the topic's last event then)
    let info = ctx
        .client
        .topic_for(&a.topic, &a.subscriber)
        .await?
        .ok_or_else(|| Failure(format!("no topic {:?}", a.topic)))?;
    let plan = RewindPlan::new(&info, &a.subscriber, to)
        .ok_or_else(|| Failure(format!("no subscriber {:?} of {:?}", a.subscriber, a.topic)))?;
    // a point in the future would skip every event until then: the rewind
    // refuses it, and so does its dry run
    let now = redjob::backend::Backend::now_ms(&ctx.client.backend()).await?;
    if plan.too_late(now) {
        return Err(redjob::Error::InvalidValue {
            what: "rewind",
            reason: format!(
                "{to:?} is later than the topic's newest event and over a minute past now: it would skip every event published until then (--end skips to the end)"
            ),
        }
        .into());
    }
    let what = plan.describe(&a.subscriber);
    if a.dry_run {
        let v = json!({"dry_run": true, "events": plan.events, "exact": plan.exact,
                       "skips": plan.skips, "upto": plan.upto.map(|u| u.to_string())});
        return crate::queues::done(ctx, v, &format!("would {what}"));
    }
    show::confirm(a.yes, &what)?;
    let mut rewound = true;
    match (plan.to, plan.upto) {
        // up to what was counted, and never back: a subscriber that read
        // past it since the count stays where it is
        (Start::End, Some(upto)) => {
            ctx.client.skip_to(&a.topic, &a.subscriber, upto).await?;
        }
        // nothing counted (the topic held no event): nothing skipped, where
        // a skip to the end as it is now would skip events published since
        (Start::End, None) => rewound = false,
        _ => {
            ctx.client
                .rewind(&a.topic, &a.subscriber, plan.start())
                .await?;
        }
    }
    let s = ctx
        .client
        .topic_for(&a.topic, &a.subscriber)
        .await?
        .and_then(|t| t.subscribers.into_iter().find(|s| s.name == a.subscriber))
        .unwrap_or_default();
    if ctx.json {
        let mut o = json!({"rewound": rewound, "lag": s.lag});
        if !s.lag_exact {
            o["lag_exact"] = json!(false);
        }
        return show::json(&o);
    }
    let none = if rewound {
        ""
    } else {
        "no events counted, none skipped: "
    };
    println!(
        "subscriber {} of {}: {none}{} events to take",
        a.subscriber,
        a.topic,
        s.lag_text()
    );
    Ok(())
}

async fn dead(ctx: &Ctx, topic: &str, subscriber: &str, n: usize) -> Outcome {
    // a subscriber (or topic) that does not exist is an error, not an empty
    // list (as the dashboard's page is a 404)
    ctx.client.count_dead_events(topic, subscriber).await?;
    let dead = ctx.client.dead_events(topic, subscriber, n).await?;
    if ctx.json {
        let v: Vec<Value> = dead
            .iter()
            .map(|d| {
                json!({"dead_id": d.dead_id.to_string(), "id": d.id.to_string(), "type": d.event_type, "data": d.data,
                       "error": d.error, "deliveries": d.deliveries, "died_at_ms": d.at_ms,
                       "runs": d.runs.iter().map(show::attempt_json).collect::<Vec<_>>()})
            })
            .collect();
        return show::json(&Value::Array(v));
    }
    let rows: Vec<Vec<String>> = dead
        .iter()
        .map(|d| {
            vec![
                d.dead_id.to_string(),
                d.id.to_string(),
                d.event_type.clone(),
                d.deliveries.to_string(),
                when(d.at_ms),
                d.error.clone(),
            ]
        })
        .collect();
    table(
        &["DEAD ID", "EVENT ID", "TYPE", "DELIVERIES", "DIED", "ERROR"],
        &rows,
    );
    // each letter's attempts, oldest first
    for d in dead.iter().filter(|d| !d.runs.is_empty()) {
        println!("\nruns of {} (event {}):", d.dead_id, d.id);
        show::runs(&d.runs);
    }
    Ok(())
}
