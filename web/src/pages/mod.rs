//! The dashboard's pages: each reads through redjob's inspection and
//! operations APIs (never Redis directly) and renders with maud.

pub(crate) mod batches;
pub(crate) mod dead;
pub(crate) mod job;
pub(crate) mod live;
pub(crate) mod overview;
pub(crate) mod queue;
pub(crate) mod topics;
