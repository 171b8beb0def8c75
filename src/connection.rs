//! Opening Redis connections from URLs: one server, a Redis Cluster, or the
//! master that Redis Sentinel names.

pub use crate::backend::redis::connection::{Connection, RedisConfig, WaitForReplicas};
