//! The live-worker registry: what each worker process tells about itself at
//! every heartbeat, and how it is read back.

use serde::{Deserialize, Serialize};

use crate::Result;

/// A live worker process, as its last heartbeat described it. Listed by
/// [`Admin::workers`](super::Admin::workers).
///
/// A worker registers when it starts, refreshes its entry at every heartbeat
/// (every third of its lease), and removes it when it stops; the entry of a
/// worker that died runs out three heartbeats after its last one. All times are
/// backend time (Unix ms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// A random id (UUID v4), new at each start.
    pub id: String,
    /// The host name (`HOSTNAME`, else the kernel's), `?` when unknown.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// The redjob version it runs.
    pub version: String,
    /// The queues it serves.
    pub queues: Vec<String>,
    /// How many jobs it runs at once.
    pub concurrency: usize,
    /// When it started.
    pub started_at_ms: u64,
    /// Its last heartbeat.
    pub last_beat_ms: u64,
    /// When its entry runs out unless it beats again.
    pub expires_at_ms: u64,
    /// The jobs it was running at its last heartbeat (each holding one of
    /// its [`concurrency`](Self::concurrency) running slots).
    pub running: Vec<RunningJob>,
    /// The topic events it was running at its last heartbeat: they take
    /// running slots as jobs do, so the worker is busy with
    /// `running.len() + events.len()` of its `concurrency`. Empty from a
    /// worker before this field.
    pub events: Vec<RunningEvent>,
    /// How many jobs it held leased at its last heartbeat while they waited
    /// for a running slot (prefetched: see `WorkerBuilder::prefetch`); 0 from
    /// a worker before this field.
    pub prefetched: usize,
    /// The periodic schedules it ticks.
    pub schedules: Vec<BeatSchedule>,
    /// The job types it knows (every `#[derive(Job)]` linked into it), with
    /// their declared options; empty from a worker before this field.
    pub job_types: Vec<JobTypeInfo>,
    /// The topic subscribers it serves.
    pub subscribers: Vec<ServedSubscriber>,
    /// How long it puts back a job of a type it does not know before it
    /// dead-letters it (`WorkerBuilder::unknown_jobs_retry_for`); `None` from
    /// a worker before this field.
    pub unknown_jobs_retry_for_ms: Option<u64>,
    /// The control an operator set on it ([`Admin::control_worker`](super::Admin::control_worker)),
    /// with when and by whom; `None`: none.
    pub control: Option<super::Control>,
    /// Whether it said at its last beat that it is quiet (takes no work): a
    /// quiet [`control`](Self::control) it has not yet seen, or a resume it
    /// has not yet seen, shows as the two disagreeing.
    pub quiet: bool,
}

/// A job type a worker knows, with the options its `#[job(...)]` declares:
/// what `redjob enqueue` applies to a job of that type.
///
/// ```
/// use redjob::ops::JobTypeInfo;
///
/// let t = JobTypeInfo::default();
/// assert_eq!((t.priority, t.unique.as_deref()), (0, None));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JobTypeInfo {
    /// The job's name, the envelope's `"type"`.
    pub name: String,
    /// The queue it is sent to by default.
    pub queue: String,
    /// Its priority.
    pub priority: i8,
    /// Deliveries before it is dead-lettered.
    pub max_attempts: u32,
    /// The longest a run may take, in ms.
    pub timeout_ms: u64,
    /// The base of its backoff between attempts, in ms.
    pub backoff_ms: u64,
    /// `keep`, `replace_delay` or `replace` for a unique job (what a
    /// duplicate enqueue does; the key is the name and all the arguments, see
    /// `redjob::job::unique_key_of`); `None` when not unique.
    pub unique: Option<String>,
    /// The longest a unique job holds its key, in ms; `None`: until it leaves
    /// its queue.
    pub unique_for_ms: Option<u64>,
    /// `start` for a unique job that holds its key only until its run starts
    /// (`#[job(unique_until = "start")]`, see
    /// [`UniqueUntil`](crate::queue::UniqueUntil)); `None` when it holds it
    /// until it is done (the default), when not unique, or when the worker
    /// that wrote the entry is older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_until: Option<String>,
    /// The argument its concurrency key comes from
    /// (`#[job(concurrency_key = "account")]`, see
    /// [`JobSpec::concurrency_key`](crate::job::JobSpec::concurrency_key)): a
    /// string's value as it is, any other's as its JSON. `None` when the type
    /// has no key, or the worker that wrote the entry is older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    /// How many jobs of one concurrency key may run at once, 1 to 1000; 0
    /// when the type has no key (or the entry says nothing of it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub per_key: u32,
}

/// A waiting job of a type no live worker knows: since when it waits for one
/// that does, and when a worker serving its queue dead-letters it (after
/// putting it back for its `unknown_jobs_retry_for`).
///
/// ```
/// use redjob::ops::Unserved;
///
/// // no worker listed: nothing is known of who knows what
/// assert_eq!(Unserved::find(&[], "mail", "send_email", 0), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unserved {
    /// When it was sent (Unix ms): it has waited since.
    pub since_ms: u64,
    /// When a live worker serving its queue dead-letters it (Unix ms);
    /// `None` when no live worker serves the queue.
    pub dead_at_ms: Option<u64>,
}

impl Unserved {
    /// Whether a job of type `job_type` sent at `sent_ms` to `queue` waits
    /// for a worker that knows its type: `None` when a live worker serving
    /// `queue` knows it, or when one of them does not say which types it knows
    /// (older than the registry's job types), or when no live worker says
    /// anything of types. With no live worker serving `queue` it waits with no
    /// end in sight ([`dead_at_ms`](Self::dead_at_ms) `None`).
    pub fn find(workers: &[WorkerInfo], queue: &str, job_type: &str, sent_ms: u64) -> Option<Self> {
        // the workers that would take it: those serving its queue
        let serving: Vec<&WorkerInfo> = workers
            .iter()
            .filter(|w| w.queues.iter().any(|q| q == queue))
            .collect();
        // one that does not say which types it knows (an older worker) may
        // know it
        if serving.iter().any(|w| w.job_types.is_empty()) {
            return None;
        }
        if serving.is_empty() && workers.iter().all(|w| w.job_types.is_empty()) {
            return None;
        }
        if serving
            .iter()
            .any(|w| w.job_types.iter().any(|t| t.name == job_type))
        {
            return None;
        }
        let dead_at_ms = serving
            .iter()
            .filter_map(|w| w.unknown_jobs_retry_for_ms)
            .min()
            .map(|ms| sent_ms.saturating_add(ms));
        Some(Unserved {
            since_ms: sent_ms,
            dead_at_ms,
        })
    }
}

/// A topic subscriber a worker serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ServedSubscriber {
    /// The topic.
    pub topic: String,
    /// The subscriber's name.
    pub subscriber: String,
}

/// What a worker serves beyond its queues, the same for every worker of one
/// build and settings: stored once per distinct content (by its digest),
/// apart from the beats, which name it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Serves {
    #[serde(default)]
    pub job_types: Vec<JobTypeInfo>,
    #[serde(default)]
    pub subscribers: Vec<ServedSubscriber>,
    #[serde(default)]
    pub unknown_ms: Option<u64>,
    /// The periodic schedules it ticks, without their next ticks (the
    /// queues' periodic hashes hold those once a schedule ticked; a beat
    /// carries the next tick of one that has not yet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<BeatSchedule>,
}

impl Serves {
    /// Its JSON and the digest (SHA-1, hex) that names it: of the JSON with
    /// the schedules' bodies' keys in order, since a map in a job's fields (a
    /// `HashMap`) comes in another order in each process, and the workers of
    /// one build must name one entry (whichever of them writes it last, its
    /// bodies as they are).
    pub fn encode(&self) -> Result<(String, Vec<u8>)> {
        let json = serde_json::to_vec(self)?;
        let named = if self.schedules.iter().any(|s| s.body.is_some()) {
            let mut c = self.clone();
            for s in &mut c.schedules {
                if let Some(body) = &s.body
                    && let Ok(v) = serde_json::from_str::<serde_json::Value>(body)
                {
                    s.body = Some(in_order(&v));
                }
            }
            serde_json::to_vec(&c)?
        } else {
            json.clone()
        };
        let digest = sha1_smol::Sha1::from(&named).digest().to_string();
        Ok((digest, json))
    }
}

/// `v` as JSON with every object's keys in order (whatever order the
/// `serde_json` build keeps them in).
fn in_order(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut entries: Vec<_> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let inner: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), in_order(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(a) => {
            let inner: Vec<String> = a.iter().map(in_order).collect();
            format!("[{}]", inner.join(","))
        }
        other => other.to_string(),
    }
}

/// Whether a number is zero (a field left out of the registry's JSON).
fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// A worker's schedules: those of what it serves, each with the next tick
/// its beat carries for it (none once it ticked), and any the beat alone
/// names (a worker of an earlier release lists them all there).
pub(super) fn merged(beat: Vec<BeatSchedule>, served: Vec<BeatSchedule>) -> Vec<BeatSchedule> {
    if served.is_empty() {
        return beat;
    }
    let mut next: std::collections::BTreeMap<(String, String), BeatSchedule> = beat
        .into_iter()
        .map(|s| ((s.queue.clone(), s.name.clone()), s))
        .collect();
    let mut all: Vec<BeatSchedule> = served
        .into_iter()
        .map(|s| match next.remove(&(s.queue.clone(), s.name.clone())) {
            Some(b) => BeatSchedule {
                next_ms: b.next_ms,
                ..s
            },
            None => s,
        })
        .collect();
    all.extend(next.into_values());
    all
}

/// A job a worker was running at its last heartbeat: it holds one of the
/// worker's running slots (a job leased and waiting for one, prefetched, is
/// counted in [`WorkerInfo::prefetched`] instead).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RunningJob {
    /// Its queue.
    pub queue: String,
    /// Its id.
    pub id: String,
    /// Its job type, once known (read from its envelope's head, or its
    /// envelope decoded).
    pub job: Option<String>,
    /// When its run started on this worker (took a running slot); from a
    /// worker of an earlier release, which listed prefetched jobs too, when
    /// it leased it.
    pub started_at_ms: u64,
}

/// A topic event a worker was running at its last heartbeat: it holds one of
/// the worker's running slots, as a job does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RunningEvent {
    /// Its topic.
    pub topic: String,
    /// The subscriber it runs for.
    pub subscriber: String,
    /// Its id in the topic (`<ms>-<seq>`).
    pub id: String,
    /// Its event type.
    pub event: String,
    /// When its run started (its current attempt's, for an ordered
    /// subscriber retrying it in place).
    pub started_at_ms: u64,
}

/// A periodic schedule a worker ticks, as its heartbeat tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BeatSchedule {
    /// The schedule's name.
    pub name: String,
    /// The queue its jobs go to.
    pub queue: String,
    /// The job type.
    #[serde(default)]
    pub job: String,
    /// The schedule as printed (`cron */5 * * * *`).
    #[serde(default)]
    pub schedule: String,
    /// Its next tick, Unix ms, as the worker knows it before the schedule's
    /// first tick; `None` when it never ticks again, or once it ticked (the
    /// tick after is then stored: see [`ScheduleInfo`](super::ScheduleInfo)).
    pub next_ms: Option<u64>,
    /// The job each tick enqueues, as its envelope (to enqueue one now);
    /// `None` from a worker before this field, or for a job that did not encode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The priority its jobs are sent at.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i8,
    /// The concurrency key its jobs are sent with; `None` from a worker
    /// before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<crate::contract::keyed::Keyed>,
}

/// This machine's host name: `HOSTNAME`, else the kernel's, else `?`.
pub(crate) fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::admin::beat::Beat;

    fn worker(queues: &[&str], types: &[&str], unknown_ms: Option<u64>) -> WorkerInfo {
        let beat = Beat {
            id: "w".into(),
            host: "h".into(),
            pid: 1,
            version: "0".into(),
            queues: queues.iter().map(|q| q.to_string()).collect(),
            concurrency: 1,
            ttl_ms: 1,
            up_ms: 0,
            at_ms: None,
            running: Vec::new(),
            prefetched: 0,
            events: Vec::new(),
            schedules: Vec::new(),
            serves: None,
            quiet: false,
        };
        let serves = Serves {
            job_types: types
                .iter()
                .map(|t| JobTypeInfo {
                    name: t.to_string(),
                    ..JobTypeInfo::default()
                })
                .collect(),
            subscribers: Vec::new(),
            unknown_ms,
            schedules: Vec::new(),
        };
        beat.info(1, Some(0), Some(serves), None)
    }

    fn schedule(name: &str, job: &str, next_ms: Option<u64>) -> BeatSchedule {
        BeatSchedule {
            name: name.into(),
            queue: "q".into(),
            job: job.into(),
            schedule: if job.is_empty() { "" } else { "every 1s" }.into(),
            next_ms,
            body: None,
            priority: 0,
            key: None,
        }
    }

    #[test]
    fn bodies_whose_maps_differ_in_order_name_one_entry_and_are_stored_as_they_are() {
        let serves = |body: &str| Serves {
            schedules: vec![BeatSchedule {
                body: Some(body.into()),
                ..schedule("a", "j", None)
            }],
            ..Serves::default()
        };
        let a = serves(r#"{"type":"t","args":{"m":{"b":[{"z":1,"a":"x\"y"}],"a":null}}}"#);
        let b = serves(r#"{"type":"t","args":{"m":{"a":null,"b":[{"a":"x\"y","z":1}]}}}"#);
        let (da, ja) = a.encode().unwrap();
        let (db, jb) = b.encode().unwrap();
        assert_eq!(da, db);
        assert_ne!(ja, jb);
        assert!(
            String::from_utf8(ja)
                .unwrap()
                .contains(r#"\"b\":[{\"z\":1"#)
        );
        let c = serves(r#"{"type":"t","args":{"m":{"a":1}}}"#);
        assert_ne!(c.encode().unwrap().0, da);
    }

    #[test]
    fn a_workers_schedules_are_what_it_serves_with_the_next_ticks_its_beat_names() {
        // an earlier release's beat: every schedule inline, nothing served
        let inline = vec![schedule("a", "j", Some(5)), schedule("b", "j", Some(6))];
        assert_eq!(merged(inline.clone(), Vec::new()), inline);
        // this release's: "b" has not ticked, its next tick alone in the beat
        let served = vec![schedule("a", "j", None), schedule("b", "j", None)];
        let beat = vec![schedule("b", "", Some(9))];
        assert_eq!(
            merged(beat, served),
            vec![schedule("a", "j", None), schedule("b", "j", Some(9))]
        );
        // a beat's entry leaves out what it need not (a reader of an
        // earlier release needs the job and the schedule)
        let text = serde_json::to_string(&schedule("b", "j", Some(9))).unwrap();
        assert_eq!(
            text,
            r#"{"name":"b","queue":"q","job":"j","schedule":"every 1s","next_ms":9}"#
        );
    }

    #[test]
    fn a_type_is_unserved_when_no_worker_of_its_queue_knows_it() {
        let a = worker(&["mail"], &["send"], Some(60_000));
        let b = worker(&["sms"], &["text"], Some(1_000));
        // known where it waits
        assert_eq!(
            Unserved::find(&[a.clone(), b.clone()], "mail", "send", 5),
            None
        );
        // known only by a worker of another queue: unserved, dead-lettered by
        // the mail worker
        let u = Unserved::find(&[a.clone(), b.clone()], "mail", "text", 5).unwrap();
        assert_eq!((u.since_ms, u.dead_at_ms), (5, Some(60_005)));
        // an older worker of the queue says nothing of types: it may know it
        let old = worker(&["mail"], &[], None);
        assert_eq!(Unserved::find(&[a.clone(), old], "mail", "text", 5), None);
        // no worker serves the queue: waits with no end
        let u = Unserved::find(&[a, b], "push", "ping", 5).unwrap();
        assert_eq!(u.dead_at_ms, None);
        // nobody says anything of types
        assert_eq!(
            Unserved::find(&[worker(&["mail"], &[], None)], "push", "x", 5),
            None
        );
    }

    #[test]
    fn a_types_concurrency_key_is_published_and_an_older_entry_still_reads() {
        let keyed = JobTypeInfo {
            name: "charge".into(),
            concurrency_key: Some("account".into()),
            per_key: 2,
            ..JobTypeInfo::default()
        };
        let text = serde_json::to_string(&keyed).unwrap();
        assert!(
            text.contains(r#""concurrency_key":"account","per_key":2"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<JobTypeInfo>(&text).unwrap(), keyed);
        // a type without a key writes what an older worker wrote, and reads back
        let plain = JobTypeInfo {
            name: "send".into(),
            ..JobTypeInfo::default()
        };
        // held until its run starts: said; until done: left out, as before
        let start = JobTypeInfo {
            name: "refresh".into(),
            unique: Some("keep".into()),
            unique_until: Some("start".into()),
            ..JobTypeInfo::default()
        };
        let text = serde_json::to_string(&start).unwrap();
        assert!(text.contains(r#""unique_until":"start""#), "{text}");
        assert_eq!(serde_json::from_str::<JobTypeInfo>(&text).unwrap(), start);
        let older = r#"{"name":"send","queue":"","priority":0,"max_attempts":0,"timeout_ms":0,"backoff_ms":0,"unique":null,"unique_for_ms":null}"#;
        assert_eq!(serde_json::to_string(&plain).unwrap(), older);
        assert_eq!(serde_json::from_str::<JobTypeInfo>(older).unwrap(), plain);
    }
}
