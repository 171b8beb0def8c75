//! Flows: a parent job that runs once its children have succeeded, enqueued
//! together in one call; a child may be a flow itself, so a chain a → b → c
//! is a flow too.

use super::Client;
use super::batch::{fresh_id, send_members};
use crate::contract::backend::Backend;
use crate::contract::batches::{BatchId, BatchRef, BatchSpec, Callback, CallbackKind, with_batch};
use crate::contract::queues::{SendMessage, validate};

use crate::job::{Job, batch_member};
use crate::{Error, JobId, Result};

/// A parent job and the jobs it waits for, enqueued by
/// [`Client::enqueue_flow`]: the parent runs once every child has succeeded,
/// and reads their results with
/// [`JobContext::child_results`](crate::JobContext::child_results).
///
/// A child that dies (or a child flow whose parent failed) fails the parent
/// at once, with the reason: it is dead-lettered (its error names the child),
/// or, with [`cancel_on_failure`](Self::cancel_on_failure), entered in the
/// history as cancelled. A retried child is not finished until it succeeds or
/// dies. A child may also be a job enqueued earlier
/// ([`after`](Self::after)). Cycles cannot be built: a flow's children are
/// new jobs or jobs that exist already.
///
/// A flow is a batch underneath (see [`Client::batch`]): each parent with
/// children has one, listed by `redjob batches` as `flow <type> <parent id>`,
/// and its children's results are kept there until 7 days after its parent
/// was enqueued. The parent's id is chosen at enqueue (it names when the flow
/// was enqueued); it is enqueued at priority 0, after its queue's delay.
///
/// A flow nests at most [`MAX_DEPTH`](Self::MAX_DEPTH) (32) levels: a flow
/// of jobs is 1 level, one with a [`subflow`](Self::subflow) 2, and a chain
/// of [`then`](Self::then) one level a step, so at most 32 steps. A deeper
/// flow fails [`Client::enqueue_flow`] with
/// [`InvalidValue`](crate::Error::InvalidValue) before anything is sent
/// (the limit bounds how long a chain's failure takes to climb it, a flow
/// a step; the enqueue, and a failure's climb, go a level at a time without
/// nesting calls). A flow's width is
/// not bounded: a parent may wait for as many children as a batch holds
/// jobs.
///
/// ```
/// # use redjob::{Client, Job, JobContext, JobError};
/// # use redjob::client::Flow;
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(name = "flow_doc_resize", queue = "images", output = "u64")]
/// struct Resize { image: u32 }
/// impl Job for Resize {
///     async fn perform(&self, _: &JobContext) -> Result<u64, JobError> {
///         Ok(1024) // bytes written
///     }
/// }
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(name = "flow_doc_album", queue = "albums")]
/// struct BuildAlbum { album: u32 }
/// impl Job for BuildAlbum {
///     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
///         let sizes = ctx.child_results::<u64>().await?;
///         println!("{} images, {} bytes", sizes.len(), sizes.iter().flatten().sum::<u64>());
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let client = Client::memory(redjob::backend::memory::MemoryBackend::new());
/// let flow = (0..3).fold(Flow::new(&BuildAlbum { album: 7 }), |f, image| {
///     f.child(&Resize { image })
/// });
/// let album = client.enqueue_flow(flow).await?;
/// # let _ = album;
/// # Ok(()) }
/// ```
#[must_use = "a flow is enqueued by Client::enqueue_flow"]
pub struct Flow {
    parent: Result<(String, Vec<u8>, &'static str)>,
    children: Vec<Child>,
    cancel: bool,
}

enum Child {
    Job(Result<(String, SendMessage)>),
    Flow(Flow),
    /// A job enqueued earlier: its queue and id.
    After(String, JobId),
}

impl Flow {
    /// The most levels a flow nests, counting itself as 1: a chain of
    /// [`then`](Self::then) of at most 32 steps. [`Client::enqueue_flow`]
    /// refuses a deeper flow, before anything is sent.
    ///
    /// ```
    /// # use redjob::{Client, Job, JobContext, JobError};
    /// # use redjob::client::Flow;
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "flow_depth_doc_step")]
    /// struct Step { n: usize }
    /// # impl Job for Step {
    /// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let client = Client::memory(redjob::backend::memory::MemoryBackend::new());
    /// let chain = |steps| (1..steps).fold(Flow::new(&Step { n: 0 }), |f, n| f.then(&Step { n }));
    /// client.enqueue_flow(chain(Flow::MAX_DEPTH)).await?;
    /// let err = client.enqueue_flow(chain(Flow::MAX_DEPTH + 1)).await.unwrap_err();
    /// assert!(matches!(err, redjob::Error::InvalidValue { .. }));
    /// # Ok(()) }
    /// ```
    pub const MAX_DEPTH: usize = 32;

    /// A flow whose parent is `job`, in its type's queue.
    pub fn new<J: Job>(job: &J) -> Flow {
        Flow::new_in(J::OPTIONS.queue, job)
    }

    /// [`new`](Self::new) into `queue` instead of the job type's.
    pub fn new_in<J: Job>(queue: &str, job: &J) -> Flow {
        let parent = batch_member(queue, job).map(|(q, m)| (q, m.body, J::NAME));
        Flow {
            parent,
            children: Vec::new(),
            cancel: false,
        }
    }

    /// Adds `job` as a child: the parent waits for it. A job whose type is
    /// unique or has a concurrency key is refused at enqueue.
    pub fn child<J: Job>(mut self, job: &J) -> Flow {
        self.children
            .push(Child::Job(batch_member(J::OPTIONS.queue, job)));
        self
    }

    /// [`child`](Self::child) into `queue` instead of the job type's.
    pub fn child_in<J: Job>(mut self, queue: &str, job: &J) -> Flow {
        self.children.push(Child::Job(batch_member(queue, job)));
        self
    }

    /// Adds a flow as a child: the parent waits for that flow's parent.
    /// The flow is then one level deeper (see [`MAX_DEPTH`](Self::MAX_DEPTH)).
    pub fn subflow(mut self, flow: Flow) -> Flow {
        self.children.push(Child::Flow(flow));
        self
    }

    /// Adds job `id` of `queue`, enqueued earlier, as a child: the parent
    /// waits for it too. It may have finished already (in its dead letters
    /// or its history: its finish counts at once, its result is read; one
    /// cancelled or deleted counts as cancelled); a job not known there
    /// (never was, or past its history's retention) fails the enqueue with
    /// [`InvalidValue`](crate::Error::InvalidValue), a queue that does not
    /// exist with [`QueueNotFound`](crate::Error::QueueNotFound), before
    /// any child is sent. The check and the registration are one step on
    /// its queue: a finish between them is not missed.
    ///
    /// ```
    /// # use redjob::client::Flow;
    /// # use redjob::{Client, Job, JobContext, JobError};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "flow_after_doc_import", queue = "imports")]
    /// struct Import { file: u32 }
    /// # impl Job for Import {
    /// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// # }
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "flow_after_doc_report", queue = "reports")]
    /// struct Report;
    /// # impl Job for Report {
    /// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let client = Client::memory(redjob::backend::memory::MemoryBackend::new());
    /// let import = client.enqueue(&Import { file: 1 }).await?;
    /// // later, elsewhere: the report waits for that import
    /// let report = client.enqueue_flow(Flow::new(&Report).after("imports", &import)).await?;
    /// # let _ = report;
    /// # Ok(()) }
    /// ```
    pub fn after(mut self, queue: &str, id: &JobId) -> Flow {
        self.children.push(Child::After(queue.to_string(), *id));
        self
    }

    /// A flow whose parent is `job` and whose one child is this flow: a
    /// chain, `Flow::new(&a).then(&b).then(&c)` runs a, then b, then c. A
    /// chain is one level a step: at most [`MAX_DEPTH`](Self::MAX_DEPTH)
    /// steps are enqueued.
    pub fn then<J: Job>(self, job: &J) -> Flow {
        Flow::new(job).subflow(self)
    }

    /// When a child fails, the parent is entered in the history as
    /// cancelled rather than dead-lettered. Defaults to dead-lettered.
    pub fn cancel_on_failure(mut self) -> Flow {
        self.cancel = true;
        self
    }
}

impl Drop for Flow {
    /// Drops the flows nested in this one from a list of its own, not by
    /// recursion: a chain of any length is dropped without overflowing the
    /// stack.
    fn drop(&mut self) {
        let mut nested = Vec::new();
        take_subflows(&mut self.children, &mut nested);
        while let Some(mut flow) = nested.pop() {
            take_subflows(&mut flow.children, &mut nested);
            // `flow` is dropped here, holding no flow any more
        }
    }
}

/// Moves the flows among `children` into `into`, dropping the rest.
fn take_subflows(children: &mut Vec<Child>, into: &mut Vec<Flow>) {
    for child in children.drain(..) {
        if let Child::Flow(f) = child {
            into.push(f);
        }
    }
}

impl Client {
    /// Enqueues `flow`: its children now, its parent once they have all
    /// succeeded (see [`Flow`]); returns the parent's id, which
    /// [`wait_result`](Client::wait_result) and the inspection calls take.
    /// A flow with a job that does not encode, a queue name that is not
    /// valid, or nesting deeper than [`Flow::MAX_DEPTH`] fails with
    /// [`InvalidValue`](crate::Error::InvalidValue) before anything is sent.
    /// A flow whose enqueue failed part way never runs its parent: its
    /// groups are cancelled, as well as the failure allows, so its parents
    /// are recorded as cancelled and its jobs sent so far are cancelled
    /// when fetched. So are those of an enqueue dropped part way (by a
    /// timeout, say), from a task of their own, and on Redis those of an
    /// enqueuer that died part way, by a worker's sweep an hour after they
    /// were opened. A job 100 flows wait for already
    /// ([`after`](Flow::after)) fails the enqueue with
    /// [`InvalidValue`](crate::Error::InvalidValue); flows cancelled since
    /// take no place.
    pub async fn enqueue_flow(&self, flow: Flow) -> Result<JobId> {
        if self.inline.is_some() {
            return Err(Error::InvalidValue {
                what: "flow",
                reason: "an inline client runs jobs at once and keeps no flow".into(),
            });
        }
        check(&flow)?;
        let mut opened = Opened::new(self);
        let enqueued = self.enqueue_tree(flow, &mut opened.groups).await;
        if enqueued.is_err() {
            // a flow enqueued part way is cancelled, top group first: its
            // parents are cancelled, the jobs sent so far when fetched
            for group in &opened.groups {
                cancel_partial(self, group).await;
            }
        }
        opened.groups.clear();
        enqueued.map_err(whole)
    }

    /// Enqueues `flow` a node at a time, with a stack of its own rather
    /// than a nested call a level (a chain at [`Flow::MAX_DEPTH`] nested 32
    /// deep, about 1.1 MB of stack in a debug build): each node's group is
    /// opened (its parent's callbacks) and its parent waits, then its
    /// children are sent, a child flow's own children first, then it is
    /// sealed. Returns the top parent's id.
    async fn enqueue_tree(&self, flow: Flow, opened: &mut Vec<BatchId>) -> Result<JobId> {
        let mut stack = vec![self.open_node(flow, None, opened).await?];
        loop {
            let Some(top) = stack.last_mut() else {
                unreachable!("the stack holds the top node until it is sealed");
            };
            match top.rest.next() {
                Some((index, Child::Job(m))) => {
                    let (q, msg) = m?;
                    top.leaves.push((index, q, msg));
                }
                Some((index, Child::Flow(f))) => {
                    let r = BatchRef {
                        batch: top.group,
                        index,
                    };
                    let node = self.open_node(f, Some(r), opened).await?;
                    stack.push(node);
                }
                Some((_, Child::After(..))) => {}
                None => {
                    let Some(done) = stack.pop() else {
                        unreachable!("a node was on top");
                    };
                    send_members(self, done.group, done.leaves).await?;
                    self.backend.batch_seal(&done.group, done.total).await?;
                    if stack.is_empty() {
                        return Ok(done.parent);
                    }
                }
            }
        }
    }

    /// Opens the group of `node`'s parent (its callbacks), records the
    /// parent waiting and registers its children enqueued earlier: the node
    /// whose other children are to be sent.
    async fn open_node(
        &self,
        mut node: Flow,
        member_of: Option<BatchRef>,
        opened: &mut Vec<BatchId>,
    ) -> Result<Node> {
        // taken out: a flow is dropped by its own Drop
        let children = std::mem::take(&mut node.children);
        let (queue, body, name) = std::mem::replace(&mut node.parent, Ok(Default::default()))?;
        let body = match &member_of {
            Some(r) => with_batch(&body, r),
            None => body,
        };
        let parent = fresh_id(&self.backend);
        let group = BatchId(fresh_id(&self.backend));
        // listed before it is opened: an enqueue dropped while the open
        // is under way cancels it too (cancels go after it, on the same
        // connection; one not opened is no batch)
        opened.push(group);
        let callback = |kind| Callback {
            kind,
            queue: queue.clone(),
            body: body.clone(),
            id: Some(parent),
            cancel: kind == CallbackKind::Failed && node.cancel,
            priority: 0,
        };
        self.backend
            .batch_open(&BatchSpec {
                id: group,
                callbacks: vec![
                    callback(CallbackKind::Parent),
                    callback(CallbackKind::Failed),
                ],
                description: Some(format!("flow {name} {parent}")),
                members: children.len() as u64,
            })
            .await?;
        // found by id, and awaited, while its children run
        crate::contract::backend::creating(&self.backend, &queue, &self.queue_defaults, || {
            self.backend.flow_wait(&queue, &parent, &group, &body)
        })
        .await?;
        let total = children.len() as u64;
        // jobs enqueued earlier first: one that cannot be waited for
        // fails the enqueue before any child is sent
        let mut rest = Vec::new();
        for (index, child) in children.into_iter().enumerate() {
            let r = BatchRef {
                batch: group,
                index: index as u64,
            };
            match child {
                Child::After(q, id) => self.backend.flow_after(&q, &id, &r).await?,
                other => rest.push((r.index, other)),
            }
        }
        Ok(Node {
            group,
            parent,
            total,
            rest: rest.into_iter(),
            leaves: Vec::new(),
        })
    }
}

/// A flow's node being enqueued: its group, its parent's id, how many
/// children it has, those still to send (a child flow is enqueued before
/// the next), and its jobs to send once its child flows are enqueued.
struct Node {
    group: BatchId,
    parent: JobId,
    total: u64,
    rest: std::vec::IntoIter<(u64, Child)>,
    leaves: Vec<(u64, String, SendMessage)>,
}

/// Every job of `flow` encodes, every queue name is valid and it nests no
/// deeper than [`Flow::MAX_DEPTH`], before anything is sent: a walk with a
/// stack of its own, so a flow of any depth is refused without recursion.
fn check(flow: &Flow) -> Result<()> {
    let mut todo = vec![(flow, 1)];
    while let Some((flow, depth)) = todo.pop() {
        let max = Flow::MAX_DEPTH;
        if depth > max {
            return Err(Error::InvalidValue {
                what: "flow",
                reason: format!(
                    "it nests deeper than {max} levels: a flow nests at most {max} (a chain of then(), at most {max} steps)"
                ),
            });
        }
        match &flow.parent {
            Ok((q, _, _)) => validate::queue_name(q)?,
            Err(e) => return Err(clone_err(e)),
        }
        for c in &flow.children {
            match c {
                Child::Job(Err(e)) => return Err(clone_err(e)),
                Child::Job(Ok(_)) => {}
                Child::Flow(f) => todo.push((f, depth + 1)),
                Child::After(q, _) => validate::queue_name(q)?,
            }
        }
    }
    Ok(())
}

fn clone_err(e: &Error) -> Error {
    Error::InvalidValue {
        what: "flow job",
        reason: e.to_string(),
    }
}

/// The groups a flow's (or batch's) enqueue opened: cancelled from a task of
/// their own should the enqueue be dropped before it finished (a timeout, an
/// aborted task), as a drop cannot wait. An enqueue that returns clears
/// them, having cancelled them itself on an error (a batch whose open
/// failed is cancelled from the task too: the open may have run, its reply
/// lost). A process that dies leaves them to a worker's sweep, an hour
/// after they were opened.
pub(super) struct Opened {
    client: Client,
    pub(super) groups: Vec<BatchId>,
}

impl Opened {
    pub(super) fn new(client: &Client) -> Opened {
        Opened {
            client: client.clone(),
            groups: Vec::new(),
        }
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        if self.groups.is_empty() {
            return;
        }
        let groups = std::mem::take(&mut self.groups);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let client = self.client.clone();
                rt.spawn(async move {
                    for group in &groups {
                        cancel_partial(&client, group).await;
                    }
                });
            }
            Err(_) => {
                for group in &groups {
                    tracing::warn!(batch = %group, "an enqueue dropped part way outside a runtime cannot cancel its batch; a worker's sweep cancels it an hour after it was opened");
                }
            }
        }
    }
}

/// The error of a flow's or batch's enqueue that failed part way: a send
/// refused part way is the refusal itself, since the group was cancelled
/// whole (its jobs stored are cancelled when fetched: none is to be kept).
pub(super) fn whole(e: Error) -> Error {
    match e {
        Error::PartlySent { error, .. } => *error,
        e => e,
    }
}

/// Cancels group `id` of a flow or batch whose enqueue failed part way, as
/// well as it can (the enqueue's own error is the one returned).
pub(super) async fn cancel_partial(client: &Client, id: &BatchId) {
    if let Err(e) = client.backend.batch_cancel(id).await {
        tracing::warn!(batch = %id, error = %e, "cancelling a batch enqueued part way failed; its jobs sent so far run");
    }
}
