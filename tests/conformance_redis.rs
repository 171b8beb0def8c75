//! The conformance suite on Redis (a private redis-server per test).

mod common;
mod conformance;

conformance_suite!(conformance::Env::redis, #[tokio::test]);
