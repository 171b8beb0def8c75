//! `admin_methods!`: the methods of the `Admin` trait, for forwarding it.

/// [`Admin`]'s methods, for [`forward!`](crate::contract::forward::forward):
/// `admin_methods! { impl Admin for Type, |self| ...; }`.
macro_rules! admin_methods {
    ($($head:tt)*) => {
        $crate::contract::forward::forward! {
            $($head)*
            async fn pause(queue: &str) -> $crate::Result<()>;
            async fn resume(queue: &str) -> $crate::Result<()>;
            async fn is_paused(queue: &str) -> $crate::Result<bool>;
            async fn end_throttle(queue: &str) -> $crate::Result<bool>;
            async fn purge_queue(queue: &str) -> $crate::Result<u64>;
            async fn purge_queue_by(queue: &str, by: &str, upto_ms: Option<u64>) -> $crate::Result<u64>;
            async fn count_purge(queue: &str) -> $crate::Result<$crate::contract::admin::BulkCount>;
            async fn purge_queue_upto(queue: &str, upto_ms: u64) -> $crate::Result<u64>;
            async fn count_dead(queue: &str, query: &$crate::contract::admin::DeadQuery) -> $crate::Result<$crate::contract::admin::BulkCount>;
            async fn run_now(queue: &str, id: &$crate::JobId) -> $crate::Result<Option<$crate::contract::inspect::JobState>>;
            async fn dead_page(queue: &str, order: $crate::contract::admin::DeadOrder, after: Option<&$crate::contract::inspect::Cursor>, n: usize) -> $crate::Result<$crate::contract::inspect::Page>;
            async fn requeue_dead(queue: &str, ids: &[$crate::JobId], spread: $crate::contract::admin::Spread) -> $crate::Result<u64>;
            async fn delete_dead(queue: &str, ids: &[$crate::JobId]) -> $crate::Result<u64>;
            async fn purge_dead(queue: &str) -> $crate::Result<u64>;
            async fn requeue_dead_matching(queue: &str, query: &$crate::contract::admin::DeadQuery, per_second: Option<u32>) -> $crate::Result<u64>;
            async fn delete_dead_matching(queue: &str, query: &$crate::contract::admin::DeadQuery) -> $crate::Result<u64>;
            async fn workers() -> $crate::Result<Vec<$crate::contract::admin::WorkerInfo>>;
            async fn ticks(queue: &str, names: &[&str]) -> $crate::Result<Vec<$crate::contract::admin::Ticks>>;
            async fn ticks_of(asked: &[(&str, Vec<&str>)]) -> $crate::Result<Vec<Vec<$crate::contract::admin::Ticks>>>;
            async fn settings(queue: &str) -> $crate::Result<$crate::contract::settings::QueueSettings>;
            async fn pause_schedule(queue: &str, name: &str) -> $crate::Result<bool>;
            async fn resume_schedule(queue: &str, name: &str) -> $crate::Result<bool>;
            async fn control_worker(id: &str, control: Option<$crate::contract::admin::WorkerControl>) -> $crate::Result<bool>;
            async fn set_settings(queue: &str, settings: &$crate::contract::settings::QueueSettings) -> $crate::Result<$crate::contract::settings::QueueSettings>;
            async fn limit_usage(queue: &str) -> $crate::Result<$crate::contract::settings::LimitUsage>;
            async fn key_usage(queue: &str, key: &str) -> $crate::Result<$crate::contract::admin::KeyUsage>;
            async fn keys(queue: &str, after: Option<&str>, n: usize) -> $crate::Result<$crate::contract::admin::KeyPage>;
            async fn add_event(queue: &str, what: &str, count: u64) -> $crate::Result<()>;
            async fn overview(query: &$crate::contract::admin::OverviewQuery) -> $crate::Result<$crate::contract::admin::Overview>;
        }
    };
}
pub(crate) use admin_methods;
