//! Which queues a worker serves, and which linked job types it leaves unserved.

use redjob::backend::memory::MemoryBackend;
use redjob::{Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "wq_email", queue = "emails")]
struct Email;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "wq_invoice", queue = "billing")]
struct Invoice;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "wq_refund", queue = "billing")]
struct Refund;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "wq_ping")]
struct Ping;

macro_rules! noop {
    ($($t:ty),*) => {$(
        impl Job for $t {
            async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
                Ok(())
            }
        }
    )*};
}
noop!(Email, Invoice, Refund, Ping);

#[test]
fn with_no_queue_named_every_linked_types_queue_is_served() {
    let worker = Worker::builder(MemoryBackend::new()).build().unwrap();
    assert_eq!(
        worker.queues().collect::<Vec<_>>(),
        ["billing", "default", "emails"]
    );
    assert!(worker.unserved_jobs().is_empty());
}

#[test]
fn register_serves_one_queue_and_the_rest_are_reported_unserved() {
    let worker = Worker::builder(MemoryBackend::new())
        .register::<Invoice>()
        .build()
        .unwrap();
    assert_eq!(worker.queues().collect::<Vec<_>>(), ["billing"]);
    // Refund shares Invoice's queue, so it is served without being registered
    assert_eq!(
        worker.unserved_jobs(),
        [("wq_email", "emails"), ("wq_ping", "default")]
    );
}

#[test]
fn a_queue_no_type_names_serves_no_type_by_default() {
    let worker = Worker::builder(MemoryBackend::new())
        .queue("urgent")
        .build()
        .unwrap();
    assert_eq!(worker.unserved_jobs().len(), 4);
}
