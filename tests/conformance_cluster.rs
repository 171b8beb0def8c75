//! The conformance suite on a Redis Cluster: 3 masters and 3 replicas shared by
//! the tests of this process, a namespace per test.

mod common;
mod conformance;

conformance_suite!(conformance::Env::cluster, #[tokio::test]);
