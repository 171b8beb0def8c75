//! A worker's run started: each queue's dispatcher and settler, the
//! listener, the poll, the registry's beats, the tickers, the subscribers and
//! the sampler, wired together.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::dispatch::Dispatcher;
use super::leases::{self, Leases};
use super::listener::{Handoff, Wakes, listen, poll, warn_about_backend, withdraw_when_full};
use super::settle::{self, Settler};
use super::shutdown::Running;
use super::{Worker, execute, limit, metrics, per_queue, periodic, registry, settings, ticks};
use crate::contract::backend::Backend;
use crate::contract::settings::QueueSettings;

/// What the queues' tasks share, filled in as each queue's are started.
struct Wiring<B> {
    stop: CancellationToken,
    abort: CancellationToken,
    tracker: TaskTracker,
    worker: Arc<str>,
    follow: Arc<settings::Follow>,
    limits: HashMap<String, (Arc<limit::Limit>, QueueSettings)>,
    /// Runs starting and ending: the registry beats soon after.
    changed: Arc<leases::Changes>,
    wakes: HashMap<String, Arc<Notify>>,
    handoffs: HashMap<String, Handoff>,
    renews: HashMap<String, mpsc::UnboundedSender<settle::Event>>,
    held: Vec<(Arc<str>, Arc<Leases>)>,
    registering: Vec<Arc<Dispatcher<B>>>,
    dispatchers: JoinSet<()>,
    settlers: JoinSet<()>,
    settler_txs: Vec<mpsc::UnboundedSender<settle::Event>>,
    /// Last: dropped (a launch cut short) after the tasks above are aborted,
    /// it cancels the runs, as `Running`'s does.
    abort_runs: leases::AbortRuns,
}

impl<B: Backend> Worker<B> {
    /// Starts every task of the worker's run (`infra` holds the signal
    /// watcher already), after reading each queue's stored settings.
    pub(super) async fn launch(&mut self, mut infra: JoinSet<()>) -> Running {
        let stop = self.shutdown.child_token();
        let abort = CancellationToken::new();
        // made first: dropped with the run, it cancels the runs (see `Running`)
        let abort_runs = leases::AbortRuns::new(abort.clone());
        let limits = self.limits();
        let follow = Arc::new(self.follow(&limits));
        follow.first_pass(&self.backend).await;
        let mut w = Wiring {
            stop,
            abort,
            tracker: TaskTracker::new(),
            worker: self.id.as_str().into(),
            follow,
            limits,
            changed: Arc::new(leases::Changes::default()),
            wakes: HashMap::new(),
            handoffs: HashMap::new(),
            renews: HashMap::new(),
            held: Vec::new(),
            registering: Vec::new(),
            dispatchers: JoinSet::new(),
            settlers: JoinSet::new(),
            settler_txs: Vec::new(),
            abort_runs,
        };
        for (name, _) in &self.queues {
            self.start_queue(name, &mut w);
        }
        let stop = w.stop.clone();
        let tickers: Vec<Arc<periodic::Ticker>> = std::mem::take(&mut self.periodic)
            .into_iter()
            .map(|p| Arc::new(periodic::Ticker::new(p)))
            .collect();
        // (their ticks due together go in one call a queue)
        let ticks = (!tickers.is_empty()).then(|| ticks::Ticks::start(self.backend.clone()));
        for t in &tickers {
            if let Some(ticks) = &ticks {
                infra.spawn(periodic::run(
                    self.backend.clone(),
                    ticks.clone(),
                    t.clone(),
                    stop.clone(),
                ));
            }
        }
        let serves = self.serves(&tickers);
        // the subscribers' running events, by their index in `subscriptions`
        let served = self.subscriptions.iter().map(|s| {
            let mut types: Vec<&'static str> = s.handlers.keys().copied().collect();
            types.sort_unstable();
            super::subscriber::Served {
                topic: s.topic.clone(),
                name: s.sub.name.clone(),
                types,
            }
        });
        let events = Arc::new(super::subscriber::RunningEvents::new(
            served.collect(),
            w.changed.clone(),
        ));
        let registry = Arc::new(registry::Registry {
            id: self.id.clone(),
            host: crate::contract::admin::host_name(),
            queues: self.queues.iter().map(|(q, _)| q.clone()).collect(),
            concurrency: self.concurrency,
            leases: std::mem::take(&mut w.held),
            tickers,
            every: self.shared.lease / 3,
            started: tokio::time::Instant::now(),
            changed: w.changed.clone(),
            events: events.clone(),
            serves,
            controls: self.shared.controls.clone(),
        });
        // (a set, so that dropping the worker's future aborts it)
        let mut beats = JoinSet::new();
        beats.spawn(registry.clone().run(self.backend.clone(), stop.clone()));
        infra.spawn(settings::init(
            self.backend.clone(),
            w.follow.clone(),
            self.shared.controls.settings.subscribe(),
            self.shared.lease / 3,
            stop.clone(),
        ));
        infra.spawn(withdraw_when_full(
            self.backend.clone(),
            self.shared.clone(),
            std::mem::take(&mut w.registering),
            stop.clone(),
        ));
        let readers = TaskTracker::new();
        let drained = CancellationToken::new();
        let mut subscribers = JoinSet::new();
        if let Some(start) = self.starter {
            for (index, spec) in std::mem::take(&mut self.subscriptions)
                .into_iter()
                .enumerate()
            {
                let env = super::subscriber::Env {
                    shared: self.shared.clone(),
                    consumer: self.id.as_str().into(),
                    stop: stop.clone(),
                    abort: w.abort.clone(),
                    tracker: w.tracker.clone(),
                    reading: readers.token(),
                    drained: drained.clone(),
                    events: events.clone(),
                    index,
                };
                subscribers.spawn(start(self.backend.clone(), spec, env));
            }
        }
        readers.close();
        infra.spawn(warn_about_backend(self.backend.clone()));
        infra.spawn(sweep_batches(
            self.backend.clone(),
            self.shared.lease,
            stop.clone(),
        ));
        if self.shared.metrics {
            self.shared.sink.with(metrics::describe);
        }
        // (a set, so that dropping the worker's future aborts it)
        let mut sampler = JoinSet::new();
        let sampled = CancellationToken::new();
        if let Some(every) = self.shared.sample_every {
            let queues = self.queues.iter().map(|(q, _)| q.clone()).collect();
            sampler.spawn(metrics::sample(
                self.backend.clone(),
                self.shared.sink.clone(),
                queues,
                every,
                sampled.clone(),
            ));
        }
        let names: Vec<String> = self.queues.iter().map(|(q, _)| q.clone()).collect();
        infra.spawn(poll(
            self.backend.clone(),
            names.clone(),
            w.wakes.clone(),
            self.shared.poll_interval,
            stop.clone(),
        ));
        let mut listener = JoinSet::new();
        listener.spawn(listen(
            self.backend.clone(),
            names,
            Wakes {
                worker: w.worker.clone(),
                wakes: w.wakes,
                handoffs: w.handoffs,
                renews: w.renews,
                follow: w.follow.clone(),
            },
            self.shared.clone(),
            stop.clone(),
        ));
        Running {
            listener,
            sampler,
            beats,
            subscribers,
            infra,
            settlers: w.settlers,
            dispatchers: w.dispatchers,
            settler_txs: w.settler_txs,
            tracker: w.tracker,
            readers,
            drained,
            sampled,
            registry,
            stop,
            abort_runs: w.abort_runs,
        }
    }

    /// Each queue's limit per worker (no more than the worker holds), which
    /// the settings stored with the queue set: read (and the builder's stored
    /// where none is) before any job is taken.
    fn limits(&self) -> HashMap<String, (Arc<limit::Limit>, QueueSettings)> {
        let unlimited = self.shared.slots.available_permits();
        self.queues
            .iter()
            .map(|(name, values)| {
                let own = values.concurrency.and_then(|c| c.per_worker);
                let size = own.map_or(unlimited, |n| (n as usize).min(unlimited));
                let l = limit::Limit::new(size);
                l.set_fleet_limited(settings::fleet_limited(values));
                (name.clone(), (Arc::new(l), values.clone()))
            })
            .collect()
    }

    /// What follows the queues' stored settings, for `limits`.
    fn follow(
        &self,
        limits: &HashMap<String, (Arc<limit::Limit>, QueueSettings)>,
    ) -> settings::Follow {
        let bodies = self.shared.history.keeps_bodies();
        settings::Follow {
            read: limits
                .keys()
                .map(|q| (q.clone(), AtomicBool::new(false)))
                .collect(),
            limits: limits.clone(),
            unlimited: self.shared.slots.available_permits(),
            base: self.settings.clone(),
            by: format!("worker {}", self.id),
            told: Default::default(),
            wakes: limits
                .keys()
                .map(|q| (q.clone(), Arc::new(Notify::new())))
                .collect(),
            seen: Default::default(),
            bodies: limits
                .keys()
                .map(|q| (q.clone(), Arc::new(AtomicBool::new(bodies))))
                .collect(),
        }
    }

    /// Starts a queue's settler and dispatcher, and wires them to the rest.
    fn start_queue(&self, name: &str, w: &mut Wiring<B>) {
        let queue: Arc<str> = name.into();
        let wake = w.follow.wakes[name].clone();
        w.wakes.insert(name.to_string(), wake.clone());
        let (tx, rx) = mpsc::unbounded_channel();
        let leases = Arc::new(Leases::watched(w.changed.clone()));
        w.abort_runs.watch(leases.clone());
        let by = crate::contract::attempts::RunBy {
            worker: self.id.clone(),
            host: crate::contract::admin::host_name(),
        };
        w.held.push((queue.clone(), leases.clone()));
        let hold = Arc::new(per_queue::Hold::default());
        let settler = Settler::new(
            self.backend.clone(),
            queue.clone(),
            self.shared.lease,
            wake.clone(),
            leases.clone(),
            settle::Keeping {
                retention: self.shared.retention,
                history: self.shared.history,
                by,
                throttle_limit: self.throttle_limit,
                hold: hold.clone(),
                bodies: w.follow.bodies[name].clone(),
            },
        );
        w.settlers.spawn(settler.run(rx));
        w.settler_txs.push(tx.clone());
        w.renews.insert(name.to_string(), tx.clone());
        let qm = metrics::QueueMetrics::new(
            queue.clone(),
            self.shared.metrics,
            self.shared.sink.clone(),
        );
        let per_queue = Arc::new(per_queue::PerQueue::new(
            w.stop.clone(),
            w.abort.clone(),
            qm,
            hold,
        ));
        let env = Arc::new(execute::RunEnv {
            queue,
            shared: self.shared.clone(),
            tx,
            per_queue,
            leases,
            queue_slots: w.limits[name].0.clone(),
            tracker: w.tracker.clone(),
        });
        let d = Arc::new(Dispatcher {
            backend: self.backend.clone(),
            env,
            worker: w.worker.clone(),
            follow: w.follow.clone(),
            wake,
            tracker: w.tracker.clone(),
            clock: std::sync::Mutex::new(None),
            registered: AtomicU32::new(0),
            in_place: AtomicBool::new(false),
            recovering: Arc::default(),
        });
        w.registering.push(d.clone());
        let to = d.clone();
        let take: Handoff = Arc::new(move |h| to.take_handed(h));
        w.handoffs.insert(name.to_string(), take);
        w.dispatchers.spawn(d.run());
    }

    /// What this worker serves beyond its queues, for the registry: every job
    /// type linked into the program with its declared options, its topic
    /// subscribers, how long it waits for a worker that knows a type, its
    /// periodic schedules (without their next ticks); `None`
    /// when it cannot be encoded.
    fn serves(&self, tickers: &[Arc<periodic::Ticker>]) -> Option<(String, Vec<u8>)> {
        let mut job_types: Vec<_> = crate::job::registered()
            .map(|r| registry::job_type(r.name, &r.options))
            .collect();
        job_types.sort_by(|a, b| a.name.cmp(&b.name));
        let mut subscribers: Vec<_> = self
            .subscriptions
            .iter()
            .map(|s| crate::contract::admin::ServedSubscriber {
                topic: s.topic.clone(),
                subscriber: s.sub.name.clone(),
            })
            .collect();
        subscribers.sort_by(|a, b| (&a.topic, &a.subscriber).cmp(&(&b.topic, &b.subscriber)));
        let serves = crate::contract::admin::Serves {
            job_types,
            subscribers,
            unknown_ms: Some(crate::contract::backend::clamped_ms(
                self.shared.unknown_jobs_retry_for,
            )),
            schedules: tickers.iter().map(|t| t.served()).collect(),
        };
        serves.encode().ok()
    }
}

/// Every third of the lease, has the batch finishes counted that a dead
/// worker left with their queues (see `Backend::batch_sweep`).
async fn sweep_batches<B: Backend>(backend: B, lease: Duration, stop: CancellationToken) {
    let every = lease / 3;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        if let Err(e) = backend.batch_sweep().await {
            tracing::warn!(error = %e, "sweeping batch finishes failed");
        }
    }
}
