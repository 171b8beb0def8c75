//! The live-worker registry on Redis (`workers.lua`), the layout version and
//! the clock.

use std::time::Duration;

use redis::Value;

use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts::{self, Reply};
use crate::contract::admin::{Beat, BeatReply, Control, Paused, Ticks, WorkerControl, WorkerInfo};
use crate::contract::queues::validate;
use crate::{Error, Result};

impl Rsmq {
    /// Redis's clock, Unix ms.
    pub(crate) async fn now_ms(&self) -> Result<u64> {
        let (mut con, ..) = self.ns_parts();
        let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await?;
        Ok(s * 1000 + us / 1000)
    }

    /// The layout version of the namespace's data: stored as this release's
    /// where none is (`HSETNX`), refused when later than this release reads.
    /// A Redis out of memory (noeviction) cannot store it: then none is
    /// stored, which is this release's, and the worker goes on (to drain).
    pub(crate) async fn check_layout(&self) -> Result<u32> {
        use crate::contract::backend::LAYOUT_VERSION;
        let (mut con, ns, _) = self.ns_parts();
        let meta = ns.meta();
        let read = |found: Option<String>| {
            let found = found.unwrap_or_default();
            match found.parse::<u32>() {
                Ok(v) if (1..=LAYOUT_VERSION).contains(&v) => Ok(v),
                _ => Err(Error::LayoutUnsupported {
                    found,
                    supported: LAYOUT_VERSION,
                }),
            }
        };
        let found: Option<String> = redis::cmd("HGET")
            .arg(&meta)
            .arg("layout")
            .query_async(&mut con)
            .await?;
        if found.is_some() {
            return read(found);
        }
        let stored: Result<(i64, Option<String>)> = redis::pipe()
            .cmd("HSETNX")
            .arg(&meta)
            .arg("layout")
            .arg(LAYOUT_VERSION)
            .cmd("HGET")
            .arg(&meta)
            .arg("layout")
            .query_async(&mut con)
            .await
            .map_err(Error::from);
        match stored {
            // another worker may have stored one first: read what is there
            Ok((_, found)) => read(found),
            Err(Error::OutOfMemory(_)) => Ok(LAYOUT_VERSION),
            Err(e) => Err(e),
        }
    }

    /// workers.lua with `args`.
    async fn registry(&self, args: &[&[u8]]) -> Result<Value> {
        let (mut con, ns, _) = self.ns_parts();
        let mut cmd = scripts::eval(&scripts::WORKERS, &ns.workers());
        cmd.arg(args);
        scripts::run(&mut con, &scripts::WORKERS, &cmd).await
    }

    /// Registers or refreshes worker `id` (an empty `beat` removes it); the
    /// control set on it and the settings' version, and the workers whose
    /// entries ran out, for the caller to drop (see [`Gone`]).
    pub(crate) async fn beat(
        &self,
        id: &str,
        beat: &[u8],
        ttl: Duration,
    ) -> Result<(BeatReply, Vec<Gone>)> {
        let ttl = crate::contract::backend::clamped_ms(ttl).max(1).to_string();
        if beat.is_empty() {
            let v = self
                .registry(&[b"leave", id.as_bytes(), ttl.as_bytes(), beat])
                .await?;
            let gone = match Reply::status(&v) {
                Ok((_now, r)) => Gone::read(r.rest()),
                // a script from before it said what it dropped
                Err(_) => Vec::new(),
            };
            return Ok((BeatReply::default(), gone));
        }
        let v = self
            .registry(&[b"beat", id.as_bytes(), ttl.as_bytes(), beat])
            .await?;
        let (_now, mut r) = Reply::status(&v)?;
        let control = Control::parse(r.bytes()?);
        // a reply of a script from before the version: none
        let settings = r.opt_bytes().ok().flatten().map_or(0, version);
        Ok((BeatReply::new(control, settings), Gone::read(r.rest())))
    }

    /// Drops the registry entries of `gone` that are still run out (their
    /// notes dropped, see [`Gone`]).
    pub(crate) async fn drop_gone(&self, gone: &[Gone]) -> Result<()> {
        if gone.is_empty() {
            return Ok(());
        }
        let mut args: Vec<&[u8]> = vec![b"drop"];
        args.extend(gone.iter().map(|g| g.id.as_bytes()));
        self.registry(&args).await.map(drop)
    }

    /// Moves worker `id`'s registration on by `by`, the time since its last
    /// beat or touch: one `ZADD XX INCR`, no script. False when it has no
    /// entry (`XX`: then nothing is written). Its control and the settings'
    /// version come with notices on the listener's connection, and with the
    /// full beats.
    pub(crate) async fn touch(&self, id: &str, by: Duration) -> Result<bool> {
        let (mut con, ns, _) = self.ns_parts();
        let [set, ..] = ns.workers();
        let until: Option<f64> = redis::cmd("ZADD")
            .arg(&set)
            .arg("XX")
            .arg("INCR")
            .arg(crate::contract::backend::clamped_ms(by))
            .arg(id)
            .query_async(&mut con)
            .await?;
        Ok(until.is_some())
    }

    /// Tells every worker that a queue's settings changed: the version moves
    /// on, and a notice on `ns:@settings` has each worker beat in full, which
    /// reads it, and then its queues' settings. A worker whose listener missed
    /// the notice reads the version at its next full beat (at a reconnection,
    /// or within two minutes), as does a worker of a release that reads it
    /// with every beat. The version never expires (one small hash per
    /// namespace), so it never comes back to a value a worker saw.
    pub(crate) async fn settings_changed(&self) -> Result<()> {
        let (mut con, ns, _) = self.ns_parts();
        crate::backend::redis::queues::settings_changed(&mut con, ns).await
    }

    /// Sets (or clears) the control on live worker `id`, as this client's
    /// actor, and wakes it; false when no live worker has that id.
    pub(crate) async fn control(&self, id: &str, control: Option<WorkerControl>) -> Result<bool> {
        let what = control.map_or("", WorkerControl::as_str);
        let channel = self.ns_parts().1.handoff(id);
        let v = self
            .registry(&[
                b"control",
                id.as_bytes(),
                what.as_bytes(),
                self.actor.as_bytes(),
                channel.as_bytes(),
            ])
            .await?;
        // 2: stopping, which a stop keeps
        Ok(scripts::int(&v)? >= 1)
    }

    /// Stores what the workers of one build serve, under its digest.
    pub(crate) async fn serve(&self, digest: &str, serves: &[u8]) -> Result<()> {
        self.registry(&[b"serve", digest.as_bytes(), serves])
            .await
            .map(drop)
    }

    /// The live workers, by id.
    pub(crate) async fn live_workers(&self) -> Result<Vec<WorkerInfo>> {
        let v = self.registry(&[b"list"]).await?;
        let (_now, mut r) = Reply::status(&v)?;
        let n = r.int()?.max(0);
        let mut beats = Vec::new();
        for _ in 0..n {
            let _id = r.bytes()?;
            let expires = r.int()?.max(0) as u64;
            let beat = r.bytes()?;
            let control = Some(r.bytes()?).filter(|c| !c.is_empty());
            beats.push((beat, expires, control));
        }
        let mut served = std::collections::HashMap::new();
        while !r.is_empty() {
            let digest = String::from_utf8_lossy(r.bytes()?).into_owned();
            served.insert(digest, r.bytes()?.to_vec());
        }
        let mut out: Vec<WorkerInfo> = beats
            .into_iter()
            .filter_map(|(beat, expires, control)| {
                Beat::decode(beat, expires, None, &served, control)
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// The recorded ticks of `names` on `queue`.
    pub(crate) async fn schedule_ticks(&self, queue: &str, names: &[&str]) -> Result<Vec<Ticks>> {
        let mut one = self.schedule_ticks_of(&[(queue, names.to_vec())]).await?;
        Ok(one.pop().unwrap_or_default())
    }

    /// The recorded ticks of each queue's `names`, in the order asked: an
    /// `HMGET` a queue, all in one pipeline (one round trip) on one server,
    /// all at once on a Cluster (where a pipeline holds one slot).
    pub(crate) async fn schedule_ticks_of(
        &self,
        asked: &[(&str, Vec<&str>)],
    ) -> Result<Vec<Vec<Ticks>>> {
        let (mut con, ns, _) = self.ns_parts();
        let mut cmds = Vec::new();
        for (queue, names) in asked {
            validate::queue_name(queue)?;
            if names.is_empty() {
                continue;
            }
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(&ns.queue(queue).periodic);
            for n in names {
                cmd.arg(*n)
                    .arg(format!("{n}:next"))
                    .arg(format!("{n}:paused"));
            }
            cmds.push(cmd);
        }
        let replies: Vec<Vec<Option<String>>> = if cmds.is_empty() {
            Vec::new()
        } else if con.is_cluster() {
            let reads: Vec<_> = cmds
                .into_iter()
                .map(|cmd| {
                    let mut con = con.clone();
                    async move { cmd.query_async::<Vec<Option<String>>>(&mut con).await }
                })
                .collect();
            futures::future::try_join_all(reads).await?
        } else {
            let mut pipe = redis::pipe();
            for cmd in cmds {
                pipe.add_command(cmd);
            }
            pipe.query_async(&mut con).await?
        };
        let mut replies = replies.into_iter();
        let ms = |v: &Option<String>| v.as_deref().and_then(|s| s.parse().ok());
        let mut out = Vec::with_capacity(asked.len());
        for (_, names) in asked {
            if names.is_empty() {
                out.push(Vec::new());
                continue;
            }
            let v = replies.next().ok_or_else(|| {
                crate::Error::Protocol(format!("the ticks of {} queues read", out.len()))
            })?;
            out.push(
                v.chunks(3)
                    .map(|c| Ticks {
                        last_ms: ms(&c[0]),
                        next_ms: c.get(1).and_then(ms),
                        paused: c.get(2).and_then(|p| p.as_deref()).and_then(Paused::parse),
                    })
                    .collect(),
            );
        }
        Ok(out)
    }

    /// schedule.lua: pauses (or resumes) schedule `name` of `queue`, as `by`;
    /// whether that changed anything.
    pub(crate) async fn schedule(&self, queue: &str, name: &str, pause: bool) -> Result<bool> {
        validate::queue_name(queue)?;
        crate::contract::admin::schedule_name(name)?;
        let (mut con, ns, _) = self.ns_parts();
        let k = ns.queue(queue);
        let mut cmd = scripts::eval(&scripts::SCHEDULE, &[&k.periodic]);
        cmd.arg(name)
            .arg(if pause { "pause" } else { "resume" })
            .arg(&*self.actor);
        Ok(scripts::int(&scripts::run(&mut con, &scripts::SCHEDULE, &cmd).await?)? > 0)
    }
}

/// A settings' version as stored (0 for anything else).
fn version(v: &[u8]) -> u64 {
    std::str::from_utf8(v)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A worker whose registry entry ran out (it died, or lost Redis for longer
/// than its lease), returned by another worker's beat or leave: its id and
/// the queues its last beat named. The queues' hashes may still hold the
/// notes of what sends handed it (see reclaim.lua), which only it dropped
/// before: that worker drops them, then the entry ([`Rsmq::drop_gone`]).
#[derive(Debug, PartialEq)]
pub(crate) struct Gone {
    pub id: String,
    pub queues: Vec<String>,
}

impl Gone {
    /// The (id, queues) pairs after a beat's or a leave's reply, the queues as
    /// the beat's JSON wrote them (`"a","b"`); a name that is not valid is
    /// left out (its keys are not built).
    fn read(rest: &[Value]) -> Vec<Gone> {
        rest.chunks_exact(2)
            .filter_map(|pair| {
                let text = |v: &Value| match v {
                    Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
                    _ => None,
                };
                let id = text(&pair[0])?;
                let queues = text(&pair[1])
                    .unwrap_or_default()
                    .split(',')
                    .map(|q| q.trim().trim_matches('"').to_owned())
                    .filter(|q| validate::queue_name(q).is_ok())
                    .collect();
                Some(Gone { id, queues })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_gone_workers_queues_come_from_its_last_beat_and_garbage_names_none() {
        let rest = [
            text("w1"),
            text(r#""a","b c","d""#),
            text("w2"),
            text("not a list"),
            text("w3"),
            text(""),
            Value::Nil,
            text(r#""e""#),
            // an odd one out: no queues
            text("w4"),
        ];
        let gone = Gone::read(&rest);
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            gone,
            vec![
                Gone {
                    id: "w1".into(),
                    queues: names(&["a", "d"]),
                },
                Gone {
                    id: "w2".into(),
                    queues: vec![],
                },
                Gone {
                    id: "w3".into(),
                    queues: vec![],
                },
            ]
        );
    }
}
