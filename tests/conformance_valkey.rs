//! The conformance suite on Valkey (a private valkey-server per test, as
//! `scripts/servers` installs it).

mod common;
mod conformance;

conformance_suite!(conformance::Env::valkey, #[tokio::test]);
