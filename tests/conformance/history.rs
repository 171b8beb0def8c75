//! Finished jobs kept for a while: succeeded and dead-lettered jobs entered
//! in their queue's history by the settle, with their attempts, type and
//! arguments; found by id (with or without their queue) and listed newest
//! first; trimmed by count and age, their arguments by a shorter age, as the
//! queue's stored setting says; none when it is off.

use std::time::Duration;

use redjob::JobId;
use redjob::backend::{Backend, DeadLetterEntry, Reschedule, Settle};
use redjob::inspect::{
    AttemptOutcome, Cancelled, Finish, HistoryQuery, Inspect, JobInfo, JobState,
};
use redjob::ops::{Admin, History, QueueSettings};
use redjob::queue::{QueueOptions, Queues, SendMessage};

use super::Env;

const LONG: Duration = Duration::from_secs(60);

fn mail(i: u32) -> String {
    format!(r#"{{"type":"Mail","args":{{"i":{i}}}}}"#)
}

/// Sends a job and acks it on its first delivery.
async fn run_ok(env: &Env, queue: &str, body: &str) -> JobId {
    let q = env.client.backend();
    let id = Queues::send(&q, queue, SendMessage::new(body))
        .await
        .unwrap();
    let d = q.fetch(queue, 1, LONG).await.unwrap().jobs.remove(0);
    assert_eq!(d.id, id);
    let ack = Settle {
        acks: vec![(id, d.token)],
        ..Settle::default()
    };
    assert_eq!(q.settle(queue, &ack).await.unwrap().acked, 1);
    id
}

async fn finished(env: &Env, queue: &str) -> Vec<JobInfo> {
    let q = env.client.backend();
    q.list(queue, JobState::Finished, None, 100)
        .await
        .unwrap()
        .jobs
}

pub async fn finished_jobs_are_kept_with_their_attempts_and_found_by_id(env: &Env) {
    let q = env.client.backend();
    q.create_queue("h", QueueOptions::default()).await.unwrap();
    let a = Queues::send(&q, "h", SendMessage::new(mail(1)))
        .await
        .unwrap();
    for n in 1..=2 {
        let d = q.fetch("h", 1, LONG).await.unwrap().jobs.remove(0);
        let retry = Settle {
            reschedules: vec![Reschedule {
                id: a,
                token: d.token,
                delay: Duration::ZERO,
                deliveries: d.token.attempt(),
                release: false,
                error: Some(format!("smtp refused {n}")),
            }],
            ..Settle::default()
        };
        q.settle("h", &retry).await.unwrap();
    }
    let d = q.fetch("h", 1, LONG).await.unwrap().jobs.remove(0);
    let ack = Settle {
        acks: vec![(a, d.token)],
        ..Settle::default()
    };
    assert_eq!(q.settle("h", &ack).await.unwrap().acked, 1);
    // replayed after it landed: fenced off, entered once
    assert_eq!(q.settle("h", &ack).await.unwrap().acked, 0);

    let job = q.job("h", &a).await.unwrap().expect("kept in the history");
    assert_eq!((job.state, job.attempts), (JobState::Finished, 3));
    let f = job.finished.as_ref().unwrap();
    assert_eq!((f.how, f.by.as_deref()), (Finish::Succeeded, None));
    assert_eq!(job.job_name().as_deref(), Some("Mail"));
    assert_eq!(job.args().unwrap()["i"], 1);
    let seen: Vec<(u32, AttemptOutcome)> = job.runs.iter().map(|r| (r.number, r.outcome)).collect();
    assert_eq!(
        seen,
        [
            (1, AttemptOutcome::Error),
            (2, AttemptOutcome::Error),
            (3, AttemptOutcome::Ok)
        ]
    );
    assert_eq!(job.runs[1].error.as_deref(), Some("smtp refused 2"));
    assert_eq!(job.last_error.as_deref(), Some("smtp refused 2"));
    assert_eq!(job.due_ms, f.at_ms);
    // found without its queue
    let found = q.locate(&a).await.unwrap().expect("located");
    assert_eq!(
        (found.queue.as_str(), found.job.state),
        ("h", JobState::Finished)
    );

    // a dead letter is entered too (and looked up as the dead letter it is)
    let b = Queues::send(&q, "h", SendMessage::new("not an envelope"))
        .await
        .unwrap();
    let d = q.fetch("h", 1, LONG).await.unwrap().jobs.remove(0);
    let dead = Settle {
        dead: vec![DeadLetterEntry {
            id: b,
            token: d.token,
            error: "fatal: no such mailbox".into(),
        }],
        ..Settle::default()
    };
    assert_eq!(q.settle("h", &dead).await.unwrap().dead, 1);
    assert_eq!(q.job("h", &b).await.unwrap().unwrap().state, JobState::Dead);
    let list = finished(env, "h").await;
    let ids: Vec<JobId> = list.iter().map(|j| j.id).collect();
    assert_eq!(ids, [b, a], "newest first");
    let entry = &list[0];
    assert_eq!(entry.finished.as_ref().unwrap().how, Finish::Dead);
    assert_eq!(entry.body, b"not an envelope");
    assert_eq!(
        entry.runs[0].error.as_deref(),
        Some("fatal: no such mailbox")
    );
    // once the letter is deleted, its entry is what a lookup finds
    q.delete_dead("h", &[b]).await.unwrap();
    let gone = q.job("h", &b).await.unwrap().unwrap();
    assert_eq!(gone.finished.unwrap().how, Finish::Dead);

    // pages: one at a time, newest first, without gaps
    let first = q.list("h", JobState::Finished, None, 1).await.unwrap();
    assert_eq!(first.jobs[0].id, b);
    let second = q
        .list("h", JobState::Finished, first.next.as_ref(), 1)
        .await
        .unwrap();
    assert_eq!(second.jobs[0].id, a);
    // the queue's deletion takes its history
    q.delete_queue("h").await.unwrap();
    q.create_queue("h", QueueOptions::default()).await.unwrap();
    assert!(finished(env, "h").await.is_empty());
    assert!(q.job("h", &a).await.unwrap().is_none());
}

pub async fn history_is_trimmed_by_count_and_age_and_arguments_sooner(env: &Env) {
    let q = env.client.backend();
    q.create_queue("t", QueueOptions::default()).await.unwrap();
    let h = History {
        max_count: Some(3),
        max_age: Some(Duration::from_millis(1500)),
        args_max_age: Some(Duration::from_millis(700)),
        ..History::default()
    };
    q.set_settings("t", &QueueSettings::history(h))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(run_ok(env, "t", &mail(i)).await);
    }
    let kept: Vec<JobId> = finished(env, "t").await.iter().map(|j| j.id).collect();
    assert_eq!(kept, [ids[4], ids[3], ids[2]], "the newest 3");
    assert!(q.job("t", &ids[0]).await.unwrap().is_none());
    let job = q.job("t", &ids[4]).await.unwrap().unwrap();
    assert_eq!(job.args().unwrap()["i"], 4);

    // past the arguments' age: the entry stays, its arguments go
    tokio::time::sleep(Duration::from_millis(900)).await;
    let job = q.job("t", &ids[4]).await.unwrap().unwrap();
    assert!(job.body.is_empty(), "arguments past their age");
    assert_eq!(job.job_name().as_deref(), Some("Mail"), "the type stays");
    assert_eq!(finished(env, "t").await.len(), 3);
    if env.is_redis() {
        // not only hidden: gone from Redis, by that read's trim
        let stored: String = redis::cmd("HGET")
            .arg(env.key("t", ":history:Q"))
            .arg(ids[4].as_ref())
            .query_async(&mut env.raw().await)
            .await
            .unwrap();
        assert!(!stored.contains(r#""i":4"#), "{stored}");
        assert!(stored.contains(r#""outcome":"ok""#), "{stored}");
    }

    // past the entries' age: trimmed with no settle nor read since, by the
    // call a worker makes every two minutes; none shown
    tokio::time::sleep(Duration::from_millis(800)).await;
    q.trim_history("t").await.unwrap();
    if env.is_redis() {
        let mut con = env.raw().await;
        let left: u64 = redis::cmd("ZCARD")
            .arg(env.key("t", ":history"))
            .query_async(&mut con)
            .await
            .unwrap();
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(env.key("t", ":history:Q"))
            .query_async(&mut con)
            .await
            .unwrap();
        // "~args": up to when bodies were dropped
        let entries = fields.iter().filter(|f| !f.starts_with('~')).count();
        assert_eq!((left, entries), (0, 0), "trimmed");
    }
    assert!(q.job("t", &ids[4]).await.unwrap().is_none());
    assert!(finished(env, "t").await.is_empty());
    assert!(matches!(
        q.trim_history("nope").await,
        Err(redjob::Error::QueueNotFound { .. })
    ));
}

/// Jobs settled in one call finish in one ms: they are listed, and kept by
/// the count, in the order they were entered (its acks as given, then its
/// dead letters), not by id, on both backends.
pub async fn jobs_finished_in_one_ms_keep_the_order_they_were_entered(env: &Env) {
    let q = env.client.backend();
    q.create_queue("ms", QueueOptions::default()).await.unwrap();
    let h = History {
        max_count: Some(3),
        ..History::default()
    };
    q.set_settings("ms", &QueueSettings::history(h))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            Queues::send(&q, "ms", SendMessage::new(mail(i)))
                .await
                .unwrap(),
        );
    }
    let f = q.fetch("ms", 10, LONG).await.unwrap();
    let token = |id: &JobId| f.jobs.iter().find(|d| d.id == *id).unwrap().token;
    // acks in reverse order, then two dead letters, in one call
    let s = Settle {
        acks: ids[..4].iter().rev().map(|id| (*id, token(id))).collect(),
        dead: ids[4..]
            .iter()
            .map(|id| DeadLetterEntry {
                id: *id,
                token: token(id),
                error: "gone".into(),
            })
            .collect(),
        history: h,
        ..Settle::default()
    };
    let r = q.settle("ms", &s).await.unwrap();
    assert_eq!((r.acked, r.dead), (4, 2));
    // entered 3, 2, 1, 0, 4, 5: the newest 3 kept, newest first
    let kept: Vec<JobId> = finished(env, "ms").await.iter().map(|j| j.id).collect();
    assert_eq!(kept, [ids[5], ids[4], ids[0]]);
    // a page at a time
    let first = q
        .history("ms", &HistoryQuery::default(), None, 2)
        .await
        .unwrap();
    let ids_of = |p: &redjob::inspect::Page| p.jobs.iter().map(|j| j.id).collect::<Vec<_>>();
    assert_eq!(ids_of(&first), [ids[5], ids[4]]);
    let next = q
        .history("ms", &HistoryQuery::default(), first.next.as_ref(), 2)
        .await
        .unwrap();
    assert_eq!(ids_of(&next), [ids[0]]);
    assert!(q.job("ms", &ids[1]).await.unwrap().is_none());
}

pub async fn history_off_keeps_nothing_and_arguments_can_be_left_out(env: &Env) {
    let q = env.client.backend();
    q.create_queue("o", QueueOptions::default()).await.unwrap();
    q.set_settings("o", &QueueSettings::history(History::OFF))
        .await
        .unwrap();
    let id = run_ok(env, "o", &mail(1)).await;
    assert!(q.job("o", &id).await.unwrap().is_none());
    assert!(finished(env, "o").await.is_empty());

    let private = History {
        args_max_age: Some(Duration::ZERO),
        ..History::default()
    };
    q.set_settings("o", &QueueSettings::history(private))
        .await
        .unwrap();
    let id = run_ok(env, "o", &mail(2)).await;
    let job = q.job("o", &id).await.unwrap().unwrap();
    assert!(job.body.is_empty(), "no arguments kept");
    assert_eq!(job.job_name().as_deref(), Some("Mail"));
    assert_eq!(job.runs.len(), 1);
    // a worker's default is in force where the queue stores none
    q.create_queue("d", QueueOptions::default()).await.unwrap();
    let id = run_ok(env, "d", "plain").await;
    let job = q.job("d", &id).await.unwrap().unwrap();
    assert_eq!((job.body.as_slice(), job.job_name()), (&b"plain"[..], None));
}

pub async fn a_cancelled_job_is_kept_with_who_cancelled_it(env: &Env) {
    let q = env.client.backend();
    q.create_queue("c", QueueOptions::default()).await.unwrap();
    let a = Queues::send(&q, "c", SendMessage::new(mail(1)))
        .await
        .unwrap();
    let d = q.fetch("c", 1, LONG).await.unwrap().jobs.remove(0);
    let retry = Settle {
        reschedules: vec![Reschedule {
            id: a,
            token: d.token,
            delay: LONG,
            deliveries: 1,
            release: false,
            error: Some("smtp refused".into()),
        }],
        ..Settle::default()
    };
    q.settle("c", &retry).await.unwrap();
    assert_eq!(
        q.cancel_by("c", &a, "cli alice").await.unwrap(),
        Cancelled::Removed
    );
    let job = q.job("c", &a).await.unwrap().expect("kept in the history");
    let f = job.finished.as_ref().unwrap();
    assert_eq!(
        (job.state, f.how, f.by.as_deref()),
        (JobState::Finished, Finish::Cancelled, Some("cli alice"))
    );
    assert_eq!(job.attempts, 1);
    assert_eq!(job.runs.len(), 1, "its attempt records");
    assert_eq!(job.runs[0].error.as_deref(), Some("smtp refused"));
    assert_eq!(job.args().unwrap()["i"], 1);
    // a running job, cancelled through the plain call: by the API
    let b = Queues::send(&q, "c", SendMessage::new(mail(2)))
        .await
        .unwrap();
    q.fetch("c", 1, LONG).await.unwrap();
    assert_eq!(q.cancel("c", &b).await.unwrap(), Cancelled::Cancelling);
    let job = q.job("c", &b).await.unwrap().unwrap();
    let f = job.finished.unwrap();
    assert_eq!((f.how, f.by.as_deref()), (Finish::Cancelled, Some("api")));
    // a second cancel finds nothing to cancel and enters nothing again
    assert_eq!(q.cancel("c", &b).await.unwrap(), Cancelled::NotFound);
    assert_eq!(finished(env, "c").await.len(), 2);
}

pub async fn the_history_is_filtered_by_outcome_type_and_time_and_paged(env: &Env) {
    let q = env.client.backend();
    q.create_queue("f", QueueOptions::default()).await.unwrap();
    let mut mails = Vec::new();
    for i in 0..3 {
        mails.push(run_ok(env, "f", &mail(i)).await);
    }
    let sms = Queues::send(&q, "f", SendMessage::new(r#"{"type":"Sms","args":{}}"#))
        .await
        .unwrap();
    let d = q.fetch("f", 1, LONG).await.unwrap().jobs.remove(0);
    let dead = Settle {
        dead: vec![DeadLetterEntry {
            id: sms,
            token: d.token,
            error: "fatal".into(),
        }],
        ..Settle::default()
    };
    q.settle("f", &dead).await.unwrap();
    let cancelled = Queues::send(&q, "f", SendMessage::new(mail(9)))
        .await
        .unwrap();
    q.cancel("f", &cancelled).await.unwrap();

    let ids = |p: &redjob::inspect::Page| p.jobs.iter().map(|j| j.id).collect::<Vec<_>>();
    let all = HistoryQuery::default();
    assert_eq!(q.history("f", &all, None, 100).await.unwrap().jobs.len(), 5);
    let only_dead = all.clone().how(Finish::Dead);
    assert_eq!(
        ids(&q.history("f", &only_dead, None, 100).await.unwrap()),
        [sms]
    );
    let mail_jobs = all.clone().job_type("Mail");
    let page = q.history("f", &mail_jobs, None, 100).await.unwrap();
    assert_eq!(page.jobs.len(), 4, "three succeeded, one cancelled");
    let ok_mail = mail_jobs.clone().how(Finish::Succeeded);
    // pages of two, newest first, without gaps or repeats
    let first = q.history("f", &ok_mail, None, 2).await.unwrap();
    let second = q
        .history("f", &ok_mail, first.next.as_ref(), 2)
        .await
        .unwrap();
    let mut seen = ids(&first);
    seen.extend(ids(&second));
    seen.sort();
    let mut want = mails.clone();
    want.sort();
    assert_eq!(seen, want);
    // since: a time after every finish selects none; one before, all
    let last = page.jobs[0].finished.as_ref().unwrap().at_ms;
    let later = all.clone().since_ms(last + 1);
    assert!(
        q.history("f", &later, None, 100)
            .await
            .unwrap()
            .jobs
            .is_empty()
    );
    let earlier = all.since_ms(mails[0].sent_ms());
    assert_eq!(
        q.history("f", &earlier, None, 100)
            .await
            .unwrap()
            .jobs
            .len(),
        5
    );
}

pub async fn a_finished_job_is_run_again_as_a_copy_that_names_it(env: &Env) {
    let q = env.client.backend();
    q.create_queue("r", QueueOptions::default()).await.unwrap();
    let done = run_ok(env, "r", &mail(7)).await;
    let copy = q.retry_finished("r", &done).await.unwrap();
    assert_ne!(copy, done);
    let job = q.job("r", &copy).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Ready);
    assert_eq!(job.retry_of(), Some(done));
    assert_eq!(job.job_name().as_deref(), Some("Mail"));
    assert_eq!(job.args().unwrap()["i"], 7);
    // the copy runs and finishes like any job, still naming the one it copies
    let d = q.fetch("r", 1, LONG).await.unwrap().jobs.remove(0);
    let ack = Settle {
        acks: vec![(copy, d.token)],
        ..Settle::default()
    };
    q.settle("r", &ack).await.unwrap();
    let finished_copy = q.job("r", &copy).await.unwrap().unwrap();
    assert_eq!(finished_copy.retry_of(), Some(done));
    // not in the history, or its arguments gone: a clear error, nothing sent
    let waiting = Queues::send(&q, "r", SendMessage::new(mail(8)).delay(LONG))
        .await
        .unwrap();
    for id in [waiting, "0000000000abcdefghijklmnopqrstuv".parse().unwrap()] {
        let r = q.retry_finished("r", &id).await;
        assert!(
            matches!(&r, Err(redjob::Error::InvalidValue { reason, .. }) if reason.contains("not in the history")),
            "{r:?}"
        );
    }
    let private = History {
        args_max_age: Some(Duration::ZERO),
        ..History::default()
    };
    q.set_settings("r", &QueueSettings::history(private))
        .await
        .unwrap();
    let bare = run_ok(env, "r", &mail(9)).await;
    let r = q.retry_finished("r", &bare).await;
    assert!(
        matches!(&r, Err(redjob::Error::InvalidValue { reason, .. }) if reason.contains("no longer kept")),
        "{r:?}"
    );
    let n = q.counts("r").await.unwrap();
    assert_eq!((n.ready, n.scheduled), (0, 1), "only the waiting one");
}

pub async fn a_purge_is_one_event_with_its_count_and_who(env: &Env) {
    let q = env.client.backend();
    q.create_queue("p", QueueOptions::default()).await.unwrap();
    for i in 0..7 {
        Queues::send(&q, "p", SendMessage::new(mail(i)))
            .await
            .unwrap();
    }
    assert_eq!(q.purge_queue_by("p", "cli bob", None).await.unwrap(), 7);
    assert_eq!(q.purge_queue("p").await.unwrap(), 0);
    let events = q.history_events("p").await.unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        (
            events[1].what.as_str(),
            events[1].count,
            events[1].by.as_deref()
        ),
        ("purged", 7, Some("cli bob")),
        "the oldest last"
    );
    assert_eq!((events[0].count, events[0].by.as_deref()), (0, Some("api")));
    assert!(finished(env, "p").await.is_empty(), "no entry per job");
    assert!(matches!(
        q.history_events("nope").await,
        Err(redjob::Error::QueueNotFound { .. })
    ));
    // the last 100 are kept
    for _ in 0..105 {
        q.purge_queue("p").await.unwrap();
    }
    assert_eq!(
        q.history_events("p").await.unwrap().len(),
        redjob::inspect::MAX_EVENTS
    );
}

pub async fn a_deleted_job_is_kept_and_a_bulk_delete_is_one_event(env: &Env) {
    let q = env.client.backend();
    q.create_queue("d", QueueOptions::default()).await.unwrap();
    let one = Queues::send(&q, "d", SendMessage::new(mail(1)))
        .await
        .unwrap();
    assert!(Queues::delete(&q, "d", &one).await.unwrap());
    let job = q.job("d", &one).await.unwrap().expect("in the history");
    let f = job.finished.as_ref().unwrap();
    assert_eq!((f.how, f.by.as_deref()), (Finish::Deleted, Some("api")));
    assert_eq!(job.args().unwrap()["i"], 1);
    // deleting it again deletes nothing and enters nothing
    assert!(!Queues::delete(&q, "d", &one).await.unwrap());
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            Queues::send(&q, "d", SendMessage::new(mail(i)))
                .await
                .unwrap(),
        );
    }
    assert_eq!(Queues::delete_batch(&q, "d", &ids).await.unwrap(), 3);
    let events = q.history_events("d").await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!((events[0].what.as_str(), events[0].count), ("deleted", 3));
    assert_eq!(
        finished(env, "d").await.len(),
        1,
        "no entry per job of a bulk delete"
    );
    // a bulk delete that deletes none records nothing
    assert_eq!(Queues::delete_batch(&q, "d", &ids).await.unwrap(), 0);
    assert_eq!(q.history_events("d").await.unwrap().len(), 1);
}

pub async fn every_action_names_who_took_it_in_the_history(env: &Env) {
    let q = env.client.backend().acting_as("ops bob");
    assert_eq!(q.actor(), "ops bob");
    q.create_queue("w", QueueOptions::default()).await.unwrap();
    // a delete by id: the entry names who
    let one = Queues::send(&q, "w", SendMessage::new(mail(1)))
        .await
        .unwrap();
    assert!(Queues::delete(&q, "w", &one).await.unwrap());
    let f = q.job("w", &one).await.unwrap().unwrap().finished.unwrap();
    assert_eq!((f.how, f.by.as_deref()), (Finish::Deleted, Some("ops bob")));
    // a cancel and a purge by this handle
    let two = Queues::send(&q, "w", SendMessage::new(mail(2)))
        .await
        .unwrap();
    q.cancel("w", &two).await.unwrap();
    let f = q.job("w", &two).await.unwrap().unwrap().finished.unwrap();
    assert_eq!(f.by.as_deref(), Some("ops bob"));
    // the queue's operations, each one event
    q.pause("w").await.unwrap();
    q.resume("w").await.unwrap();
    q.set_settings("w", &QueueSettings::history(History::default()))
        .await
        .unwrap();
    let later = Queues::send(&q, "w", SendMessage::new(mail(3)).delay(LONG))
        .await
        .unwrap();
    assert_eq!(
        q.run_now("w", &later).await.unwrap(),
        Some(JobState::Scheduled)
    );
    // a run now of a job that is due already does nothing and records nothing
    assert_eq!(q.run_now("w", &later).await.unwrap(), Some(JobState::Ready));
    let retried = q.retry_finished("w", &one).await.unwrap();
    q.purge_queue("w").await.unwrap();
    let dead = super::ops::kill(
        env,
        "w",
        &[("A", "x"), ("A", "y"), ("B", "z")],
        0,
        Default::default(),
    )
    .await;
    assert_eq!(
        q.requeue_dead("w", &dead[..1], redjob::ops::Spread::NOW)
            .await
            .unwrap(),
        1
    );
    assert_eq!(q.delete_dead("w", &dead[1..2]).await.unwrap(), 1);
    // none of these: no event
    assert_eq!(q.delete_dead("w", &dead[1..2]).await.unwrap(), 0);
    assert_eq!(q.purge_dead("w").await.unwrap(), 1);
    // by filter: one event each, whatever the pages (the one requeued above
    // deleted first: an entry, not an event)
    assert!(Queues::delete(&q, "w", &dead[0]).await.unwrap());
    super::ops::kill(env, "w", &[("A", "x"), ("B", "y")], 0, Default::default()).await;
    let a = redjob::ops::DeadQuery::default().job_type("A");
    assert_eq!(q.requeue_dead_matching("w", &a, None).await.unwrap(), 1);
    let all = redjob::ops::DeadQuery::default();
    assert_eq!(q.delete_dead_matching("w", &all).await.unwrap(), 1);
    q.add_event("w", "migrated", 12).await.unwrap();
    assert!(matches!(
        q.add_event("w", "two words", 1).await,
        Err(redjob::Error::InvalidValue { .. })
    ));
    // a count the scripts' doubles cannot hold exactly (Redis dropped the
    // event it could not read back, memory listed it)
    assert!(matches!(
        q.add_event("w", "huge", u64::MAX).await,
        Err(redjob::Error::InvalidValue { .. })
    ));
    // the queue's name is checked first, on both backends
    assert!(matches!(
        q.add_event("bad name", "two words", 1).await,
        Err(redjob::Error::InvalidQueueName { .. })
    ));
    let events = q.history_events("w").await.unwrap();
    let seen: Vec<(&str, u64, Option<&str>)> = events
        .iter()
        .rev()
        .map(|e| (e.what.as_str(), e.count, e.by.as_deref()))
        .collect();
    let bob = Some("ops bob");
    assert_eq!(
        seen,
        [
            ("paused", 0, bob),
            ("resumed", 0, bob),
            ("settings", 0, bob),
            ("run_now", 1, bob),
            ("retried", 1, bob),
            ("purged", 2, bob),
            ("dead_requeued", 1, bob),
            ("dead_deleted", 1, bob),
            ("dead_deleted", 1, bob),
            ("dead_requeued", 1, bob),
            ("dead_deleted", 1, bob),
            ("migrated", 12, bob),
        ],
        "{events:?} (retried {retried})"
    );
    // a plain handle is the API
    let plain = env.client.backend();
    plain.pause("w").await.unwrap();
    let last = &plain.history_events("w").await.unwrap()[0];
    assert_eq!(
        (last.what.as_str(), last.by.as_deref()),
        ("paused", Some("api"))
    );
    // with the history off, nothing is recorded
    q.set_settings("w", &QueueSettings::history(History::OFF))
        .await
        .unwrap();
    q.resume("w").await.unwrap();
    q.add_event("w", "migrated", 1).await.unwrap();
    assert_eq!(plain.history_events("w").await.unwrap()[0].what, "paused");
}

/// A page ending on a dead job goes on from it when the job, requeued, finishes
/// again before the next page is read: the jobs that died before it in the
/// same ms are listed next, once. The memory backend lost the cursor's place
/// once the job's entry moved to its new finish and went on after the jobs
/// of that ms, skipping them.
pub async fn a_page_goes_on_after_its_last_job_finished_again_meanwhile(env: &Env) {
    let q = env.client.backend();
    q.create_queue("hp", QueueOptions::default()).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(
            Queues::send(&q, "hp", SendMessage::new(mail(i)))
                .await
                .unwrap(),
        );
    }
    let f = q.fetch("hp", 10, LONG).await.unwrap();
    let token = |id: &JobId| f.jobs.iter().find(|d| d.id == *id).unwrap().token;
    // all four die in one settle: one ms, entered 0, 1, 2, 3
    let s = Settle {
        dead: ids
            .iter()
            .map(|id| DeadLetterEntry {
                id: *id,
                token: token(id),
                error: "gone".into(),
            })
            .collect(),
        ..Settle::default()
    };
    assert_eq!(q.settle("hp", &s).await.unwrap().dead, 4);
    let ids_of = |p: &redjob::inspect::Page| p.jobs.iter().map(|j| j.id).collect::<Vec<_>>();
    for paged in [false, true] {
        let first = if paged {
            q.history("hp", &HistoryQuery::default(), None, 2).await
        } else {
            q.list("hp", JobState::Finished, None, 2).await
        }
        .unwrap();
        let x = first.jobs[1].id;
        // the page ends on x; x runs again and finishes meanwhile
        tokio::time::sleep(Duration::from_millis(5)).await;
        let n = q
            .requeue_dead("hp", &[x], redjob::ops::Spread::NOW)
            .await
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(kill_due(env, "hp").await, x);
        let next = if paged {
            q.history("hp", &HistoryQuery::default(), first.next.as_ref(), 10)
                .await
        } else {
            q.list("hp", JobState::Finished, first.next.as_ref(), 10)
                .await
        }
        .unwrap();
        let newest = finished(env, "hp").await;
        let at = newest.iter().position(|j| j.id == x).unwrap();
        let before: Vec<JobId> = newest[at + 1..]
            .iter()
            .map(|j| j.id)
            .filter(|id| !ids_of(&first).contains(id))
            .collect();
        assert_eq!(ids_of(&next), before, "paged {paged}: the rest after x");
    }
}

/// Fetches the one due job of `queue` and dead-letters it.
async fn kill_due(env: &Env, queue: &str) -> JobId {
    let q = env.client.backend();
    let d = q.fetch(queue, 1, LONG).await.unwrap().jobs.remove(0);
    let dead = Settle {
        dead: vec![DeadLetterEntry {
            id: d.id,
            token: d.token,
            error: "gave up".into(),
        }],
        ..Settle::default()
    };
    assert_eq!(q.settle(queue, &dead).await.unwrap().dead, 1);
    d.id
}

/// A copy of a copy (the dashboard's "Run again" on a job that was itself
/// run again) names the copy it was made from, in one `"retry_of"` member: a
/// second member was appended, which `retry_of()` could not read (it named
/// none) and RSMQ clients saw as a duplicated key.
pub async fn a_copy_of_a_copy_names_the_copy_it_was_made_from(env: &Env) {
    let q = env.client.backend();
    q.create_queue("rr", QueueOptions::default()).await.unwrap();
    let first = run_ok(env, "rr", &mail(1)).await;
    let copy = q.retry_finished("rr", &first).await.unwrap();
    let d = q.fetch("rr", 1, LONG).await.unwrap().jobs.remove(0);
    assert_eq!(d.id, copy);
    let ack = Settle {
        acks: vec![(copy, d.token)],
        ..Settle::default()
    };
    q.settle("rr", &ack).await.unwrap();
    let again = q.retry_finished("rr", &copy).await.unwrap();
    let job = q.job("rr", &again).await.unwrap().unwrap();
    let body = String::from_utf8_lossy(&job.body).into_owned();
    assert_eq!(job.retry_of(), Some(copy), "{body}");
    assert_eq!(body.matches("\"retry_of\"").count(), 1, "{body}");
    assert_eq!(job.args().unwrap()["i"], 1);
}

/// A finished job run again is sent at the priority it ran at, due now
/// whatever the queue's delay (as a dead letter's requeue): its copy went
/// at priority 0 (the history kept no priority), behind the queue's
/// ordinary work, and waited out the queue's delay.
pub async fn a_finished_job_run_again_keeps_its_priority_and_is_due_now(env: &Env) {
    let q = env.client.backend();
    let delayed = QueueOptions {
        delay: 3600,
        ..QueueOptions::default()
    };
    q.create_queue("rp", delayed).await.unwrap();
    for (i, priority) in [(1, 5i8), (2, -3), (3, 0)] {
        let id = Queues::send(
            &q,
            "rp",
            SendMessage::new(mail(i))
                .priority(priority)
                .delay(Duration::ZERO),
        )
        .await
        .unwrap();
        let d = q.fetch("rp", 1, LONG).await.unwrap().jobs.remove(0);
        assert_eq!(d.id, id);
        let settle = Settle {
            acks: vec![(id, d.token)],
            ..Settle::default()
        };
        q.settle("rp", &settle).await.unwrap();
        let done = q.job("rp", &id).await.unwrap().unwrap();
        assert_eq!((done.state, done.priority), (JobState::Finished, priority));
        let copy = q.retry_finished("rp", &id).await.unwrap();
        let job = q.job("rp", &copy).await.unwrap().unwrap();
        assert_eq!(
            (job.state, job.priority),
            (JobState::Ready, priority),
            "the copy of a job of priority {priority}"
        );
        Queues::delete(&q, "rp", &copy).await.unwrap();
    }
}

/// The history keeps the last `max_count` finished jobs however often one of
/// them died: a dead letter requeued and dead again is one job. On Redis the
/// element of its first death stayed in the history's list (its entry then
/// the second's) and counted against the count: with a count of 3, B, A dead
/// twice and C kept only C and A.
pub async fn a_dead_letter_requeued_and_dead_again_counts_once_against_the_count(env: &Env) {
    let q = env.client.backend();
    q.create_queue("hc", QueueOptions::default()).await.unwrap();
    let three = History {
        max_count: Some(3),
        ..History::default()
    };
    q.set_settings("hc", &QueueSettings::history(three))
        .await
        .unwrap();
    let b = run_ok(env, "hc", &mail(1)).await;
    Queues::send(&q, "hc", SendMessage::new(mail(2)))
        .await
        .unwrap();
    let a = kill_due(env, "hc").await;
    for _ in 0..2 {
        // (a letter is requeued once a ms has passed since it died)
        tokio::time::sleep(Duration::from_millis(5)).await;
        let n = q
            .requeue_dead("hc", &[a], redjob::ops::Spread::NOW)
            .await
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(kill_due(env, "hc").await, a);
    }
    let c = run_ok(env, "hc", &mail(3)).await;
    let ids: Vec<JobId> = finished(env, "hc").await.iter().map(|j| j.id).collect();
    assert_eq!(ids, [c, a, b], "the last 3 finished: c, a, b");
    // and the count goes on trimming to 3 once the stale elements are gone
    let d = run_ok(env, "hc", &mail(4)).await;
    let e = run_ok(env, "hc", &mail(5)).await;
    let ids: Vec<JobId> = finished(env, "hc").await.iter().map(|j| j.id).collect();
    assert_eq!(ids, [e, d, c]);
}

/// A job cancelled or deleted while it runs keeps a record of that run
/// (outcome `cancelled`, when it ended) beside those before it: its entry
/// counted the delivery but showed no record of it (the worker's settle of
/// the run is fenced off), where a worker that dies gets a `lease_lost` one.
pub async fn a_job_cancelled_or_deleted_while_it_runs_keeps_a_record_of_that_run(env: &Env) {
    let q = env.client.backend();
    q.create_queue("cr", QueueOptions::default()).await.unwrap();
    for delete in [false, true] {
        let id = Queues::send(&q, "cr", SendMessage::new(mail(1)))
            .await
            .unwrap();
        // a first run failed, then the second runs
        let d = q.fetch("cr", 1, LONG).await.unwrap().jobs.remove(0);
        let retry = Settle {
            reschedules: vec![Reschedule {
                id,
                token: d.token,
                delay: Duration::ZERO,
                deliveries: 1,
                release: false,
                error: Some("boom".into()),
            }],
            ..Settle::default()
        };
        q.settle("cr", &retry).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let d = q.fetch("cr", 1, LONG).await.unwrap().jobs.remove(0);
        assert_eq!(d.id, id);
        if delete {
            assert!(Queues::delete(&q, "cr", &id).await.unwrap());
        } else {
            assert_eq!(q.cancel("cr", &id).await.unwrap(), Cancelled::Cancelling);
        }
        let job = q.job("cr", &id).await.unwrap().unwrap();
        let runs: Vec<(u32, AttemptOutcome)> =
            job.runs.iter().map(|r| (r.number, r.outcome)).collect();
        assert_eq!(
            (job.state, job.attempts, runs),
            (
                JobState::Finished,
                2,
                vec![(1, AttemptOutcome::Error), (2, AttemptOutcome::Cancelled)]
            ),
            "deleted: {delete}"
        );
        assert!(job.runs[1].ended_ms.is_some());
        // the worker's settle of the run is turned away and records nothing
        let ack = Settle {
            acks: vec![(id, d.token)],
            ..Settle::default()
        };
        assert_eq!(q.settle("cr", &ack).await.unwrap().acked, 0);
        assert_eq!(q.job("cr", &id).await.unwrap().unwrap().runs.len(), 2);
    }
    // a job cancelled while it waits has no run to record
    let waiting = Queues::send(&q, "cr", SendMessage::new(mail(2)).delay(LONG))
        .await
        .unwrap();
    q.cancel("cr", &waiting).await.unwrap();
    assert!(
        q.job("cr", &waiting)
            .await
            .unwrap()
            .unwrap()
            .runs
            .is_empty()
    );
}

pub async fn a_job_cancelled_or_deleted_after_its_lease_ran_out_keeps_a_record_of_that_run(
    env: &Env,
) {
    let q = env.client.backend();
    q.create_queue("cl", QueueOptions::default()).await.unwrap();
    for delete in [false, true] {
        let id = Queues::send(&q, "cl", SendMessage::new(mail(1)))
            .await
            .unwrap();
        let d = q
            .fetch("cl", 1, Duration::from_secs(1))
            .await
            .unwrap()
            .jobs
            .remove(0);
        assert_eq!(d.id, id);
        // its worker died mid-run: the lease runs out, and no fetch delivers
        // the job again before an operator removes it
        tokio::time::sleep(Duration::from_millis(1200)).await;
        if delete {
            assert!(Queues::delete(&q, "cl", &id).await.unwrap());
        } else {
            assert_eq!(q.cancel("cl", &id).await.unwrap(), Cancelled::Removed);
        }
        let job = q.job("cl", &id).await.unwrap().unwrap();
        let runs: Vec<(u32, AttemptOutcome)> =
            job.runs.iter().map(|r| (r.number, r.outcome)).collect();
        assert_eq!(
            (job.state, job.attempts, runs),
            (JobState::Finished, 1, vec![(1, AttemptOutcome::LeaseLost)]),
            "deleted: {delete}: the run its dead worker made is in the history"
        );
    }
}

/// A dead letter is requeued in a later ms than it died, on both backends
/// (Redis's history list marks a dead job by its ms, so a requeue in that ms
/// waits for the next): a letter requeued at once runs again, and finishes,
/// after the ms it died in. The memory backend requeued it due in that very
/// ms, so that it could die and finish again within one ms.
pub async fn a_dead_letter_requeued_at_once_finishes_again_after_the_ms_it_died(env: &Env) {
    let q = env.client.backend();
    q.create_queue("hd", QueueOptions::default()).await.unwrap();
    let id = Queues::send(&q, "hd", SendMessage::new(mail(1)))
        .await
        .unwrap();
    assert_eq!(kill_due(env, "hd").await, id);
    let letter = q.job("hd", &id).await.unwrap().unwrap();
    assert_eq!(letter.state, JobState::Dead);
    let died = letter.due_ms;
    let n = q
        .requeue_dead("hd", &[id], redjob::ops::Spread::NOW)
        .await
        .unwrap();
    assert_eq!(n, 1);
    // fetched as soon as it is due
    let mut got = None;
    for _ in 0..1000 {
        got = q.fetch("hd", 1, LONG).await.unwrap().jobs.pop();
        if got.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let d = got.expect("the requeued letter runs again");
    assert_eq!(d.id, id);
    let ack = Settle {
        acks: vec![(id, d.token)],
        ..Settle::default()
    };
    assert_eq!(q.settle("hd", &ack).await.unwrap().acked, 1);
    let done = q.job("hd", &id).await.unwrap().unwrap();
    let at = done.finished.expect("kept in the history").at_ms;
    assert!(at > died, "died at {died}, finished again at {at}");
}
