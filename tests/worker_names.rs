//! Two job types with the same stored name are refused before any job runs.
//!
//! In a test binary of its own: every test of a binary shares the registered job
//! types, so the duplicate below would make every other worker refuse to build.

use redjob::backend::memory::MemoryBackend;
use redjob::testing::TestKit;
use redjob::{Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

mod billing {
    use super::*;

    /// Named `Cleanup` by default, like the other module's.
    #[derive(Serialize, Deserialize, Job)]
    pub struct Cleanup;

    impl Job for Cleanup {
        async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }
}

mod uploads {
    use super::*;

    #[derive(Serialize, Deserialize, Job)]
    pub struct Cleanup {
        pub dir: String,
    }

    impl Job for Cleanup {
        async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }
}

/// The error names the shared job name and both Rust types.
fn assert_names_both(err: &redjob::Error) {
    let msg = err.to_string();
    for part in [
        "\"Cleanup\"",
        "worker_names::billing::Cleanup",
        "worker_names::uploads::Cleanup",
    ] {
        assert!(msg.contains(part), "{part} missing from: {msg}");
    }
}

#[test]
fn worker_build_refuses_two_job_types_with_the_same_name() {
    let built = Worker::builder(MemoryBackend::new())
        .handle_signals(false)
        .build();
    let Err(err) = built else {
        panic!("build must refuse two job types named Cleanup");
    };
    assert!(
        matches!(&err, redjob::Error::DuplicateJobName { name, .. } if name == "Cleanup"),
        "{err:?}"
    );
    assert_names_both(&err);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn test_kit_refuses_two_job_types_with_the_same_name() {
    let kit = TestKit::new();
    kit.client()
        .enqueue(&billing::Cleanup)
        .await
        .expect("enqueue only encodes");
    let report = kit.run_until_idle().await;
    let err = report.expect_err("the kit must refuse two job types named Cleanup");
    assert_names_both(&err);
}
