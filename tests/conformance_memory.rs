//! The conformance suite on the memory backend, on tokio's paused clock: delays,
//! leases and backoff take no real time.

mod common;
mod conformance;

conformance_suite!(conformance::Env::memory, #[tokio::test(start_paused = true)]);
