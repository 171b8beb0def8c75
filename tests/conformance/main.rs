//! One conformance suite for every backend: the same cases run on the memory
//! backend (tokio's paused clock), Redis, Valkey and Redis 6.2 (a private server
//! per test) and a Redis Cluster (one per process, a namespace per test), each
//! backend a module of this one test binary (`on_memory`, `on_redis`,
//! `on_valkey`, `on_redis_6_2`, `on_cluster`), so that the cases compile once.
//! `cargo test --test conformance on_memory::` runs one backend's.
#![allow(dead_code)]

#[path = "../common/mod.rs"]
mod common;
mod on_redis_6_2;

mod attempts;
mod batch_adds;
mod batches;
mod bulk;
mod control;
mod flows;
mod history;
mod inspect;
mod keys;
mod leases;
mod lifecycle;
mod limits;
mod live;
mod locate;
mod ops;
mod overview;
mod priorities;
mod queues;
mod releases;
mod results;
mod schedules;
mod settings;
mod throttles;
mod topic_renewals;
mod topic_replays;
mod topic_rewinds;
mod topics;
mod unique;
mod worker;

use std::sync::atomic::{AtomicUsize, Ordering};

use redjob::Client;
use redjob::backend::any::AnyBackend;
use redjob::client::ClientConfig;
use redjob::connection::{Connection, RedisConfig};

use crate::common::RedisServer;
use crate::common::cluster::RedisCluster;

/// A client's configuration for `url`: a call may take 15 s (5 by default),
/// as a bulk send of 100,000 jobs to a Cluster took over 5 s with the suite's
/// other tests running beside it on a 2-core machine.
fn config(url: &str) -> ClientConfig {
    let mut cfg = ClientConfig::from_url(url);
    cfg.redis.response_timeout = std::time::Duration::from_secs(15);
    cfg
}

/// What a test runs against.
pub struct Env {
    /// The client under test, on this test's backend.
    pub client: Client,
    /// Kept alive for the test; `None` for the memory backend and a Cluster.
    pub server: Option<RedisServer>,
    /// The Redis URL (a server's or a Cluster's) and the namespace; `None` for
    /// the memory backend.
    redis: Option<(String, String)>,
}

impl Env {
    /// A Redis backend on a private server.
    pub async fn redis() -> Env {
        Env::on(RedisServer::start()).await
    }

    /// A Redis backend on a private Valkey server (`scripts/servers` installs it).
    pub async fn valkey() -> Env {
        let bin = crate::common::server_binary("valkey-server", "REDJOB_VALKEY_SERVER");
        Env::on(RedisServer::start_binary(&bin)).await
    }

    /// A Redis backend on a private Redis 6.2 server, the oldest redjob
    /// supports (`scripts/servers` installs it).
    pub async fn redis_6_2() -> Env {
        let bin = crate::common::server_binary("redis-server-6.2", "REDJOB_REDIS_6_2_SERVER");
        Env::on(RedisServer::start_binary(&bin)).await
    }

    async fn on(server: RedisServer) -> Env {
        let client = Client::from_config(config(&server.url())).await.unwrap();
        Env {
            client,
            redis: Some((server.url(), "rsmq".into())),
            server: Some(server),
        }
    }

    /// A Redis backend on the process's shared Cluster, in a namespace of its own.
    pub async fn cluster() -> Env {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let url = tokio::task::spawn_blocking(|| RedisCluster::shared().url())
            .await
            .unwrap();
        let ns = format!("c{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let env = Env {
            client: Client::memory(redjob::backend::memory::MemoryBackend::new()),
            server: None,
            redis: Some((url, ns)),
        };
        Env {
            client: env.another_client().await,
            ..env
        }
    }

    /// A memory backend.
    pub async fn memory() -> Env {
        Env {
            client: Client::memory(redjob::backend::memory::MemoryBackend::new()),
            server: None,
            redis: None,
        }
    }

    /// Whether this runs on Redis (a server or a Cluster).
    pub fn is_redis(&self) -> bool {
        self.redis.is_some()
    }

    /// A client of its own on the same backend: a new connection on Redis.
    pub async fn another_client(&self) -> Client {
        match &self.redis {
            Some((url, ns)) => Client::from_config(ClientConfig {
                namespace: ns.clone(),
                ..config(url)
            })
            .await
            .unwrap(),
            None => self.client.clone(),
        }
    }

    /// A plain connection for checks the API under test does not offer.
    pub async fn raw(&self) -> Connection {
        let (url, _) = self.redis.as_ref().expect("a Redis env");
        RedisConfig::from_url(url).connect().await.unwrap()
    }

    /// The Redis key of `queue` with `suffix` (`""`, `":Q"`, `":p3"`, …): `ns:q…`,
    /// or on a Cluster `ns:{q}…`.
    pub fn key(&self, queue: &str, suffix: &str) -> String {
        let (url, ns) = self.redis.as_ref().expect("a Redis env");
        if url.starts_with("redis+cluster://") {
            format!("{ns}:{{{queue}}}{suffix}")
        } else {
            format!("{ns}:{queue}{suffix}")
        }
    }

    /// The backend under the client, for calls the client does not make.
    pub fn queues(&self) -> &AnyBackend {
        self.client.queues()
    }

    /// The backend's time now.
    pub async fn now(&self) -> std::time::SystemTime {
        if self.is_redis() {
            let (secs, micros) = self.redis_time().await;
            return std::time::UNIX_EPOCH
                + std::time::Duration::from_micros(secs * 1_000_000 + micros);
        }
        match self.client.queues() {
            AnyBackend::Memory(m) => m.clock().now(),
            _ => unreachable!("a Redis client always has its URL"),
        }
    }

    /// The Redis namespace (`ns` of `ns:q`).
    pub fn namespace(&self) -> &str {
        &self.redis.as_ref().expect("a Redis env").1
    }

    /// The Redis key of batch `id`'s hash: `ns:@batch:<id>`, or on a
    /// Cluster `ns:{@batch:<id>}`.
    pub fn batch_key(&self, id: &str) -> String {
        let (url, ns) = self.redis.as_ref().expect("a Redis env");
        if url.starts_with("redis+cluster://") {
            format!("{ns}:{{@batch:{id}}}")
        } else {
            format!("{ns}:@batch:{id}")
        }
    }

    /// The Redis key of `topic` with `suffix` (`""`, `":dead:<sub>"`, …):
    /// `ns:t:{topic}…`.
    pub fn topic_key(&self, topic: &str, suffix: &str) -> String {
        let (_, ns) = self.redis.as_ref().expect("a Redis env");
        format!("{ns}:t:{{{topic}}}{suffix}")
    }

    /// The backend's time now, Unix ms.
    pub async fn clock_ms(&self) -> u64 {
        self.now()
            .await
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    }

    async fn redis_time(&self) -> (u64, u64) {
        redis::cmd("TIME")
            .query_async(&mut self.raw().await)
            .await
            .unwrap()
    }

    /// Messages of `queue` visible now (read without receiving them).
    pub async fn visible_now(&self, queue: &str) -> u64 {
        if self.is_redis() {
            let (secs, micros) = self.redis_time().await;
            let now_ms = secs * 1000 + micros / 1000;
            return redis::cmd("ZCOUNT")
                .arg(self.key(queue, ""))
                .arg("-inf")
                .arg(now_ms)
                .query_async(&mut self.raw().await)
                .await
                .unwrap();
        }
        match self.client.queues() {
            AnyBackend::Memory(m) => {
                let now = m.clock().now_ms();
                m.messages(queue)
                    .iter()
                    .filter(|(_, _, due)| *due <= now)
                    .count() as u64
            }
            _ => unreachable!("a Redis client always has its URL"),
        }
    }
}

impl Env {
    /// Every message of `queue` at any priority, due or not: (id, body, due ms),
    /// in due order.
    pub async fn all_messages(&self, queue: &str) -> Vec<(redjob::JobId, String, u64)> {
        let mut all = match self.client.queues() {
            _ if self.is_redis() => {
                let mut con = self.raw().await;
                let mut keys = vec![self.key(queue, "")];
                keys.extend(
                    (-10..=10)
                        .filter(|p| *p != 0)
                        .map(|p| self.key(queue, &format!(":p{p}"))),
                );
                let mut out = Vec::new();
                for key in keys {
                    let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    for (id, score) in members {
                        let body: String = redis::cmd("HGET")
                            .arg(self.key(queue, ":Q"))
                            .arg(&id)
                            .query_async(&mut con)
                            .await
                            .unwrap();
                        out.push((id.parse().unwrap(), body, score as u64));
                    }
                }
                out
            }
            AnyBackend::Memory(m) => m
                .messages(queue)
                .into_iter()
                .map(|(id, body, due)| (id, String::from_utf8_lossy(&body).into_owned(), due))
                .collect(),
            _ => unreachable!("a Redis client always has its URL"),
        };
        all.sort_by_key(|(id, _, due)| (*due, *id));
        all
    }
}

impl Env {
    /// Fetches up to `max` due jobs of `queue` and dead-letters them all;
    /// their ids, in the fetch's order.
    pub async fn kill_due(&self, queue: &str, max: usize) -> Vec<redjob::JobId> {
        use redjob::backend::{Backend, DeadLetterEntry, Settle};
        let backend = self.client.backend();
        let leased = backend
            .fetch(queue, max, std::time::Duration::from_secs(60))
            .await
            .unwrap()
            .jobs;
        let dead = Settle {
            dead: leased
                .iter()
                .map(|d| DeadLetterEntry {
                    id: d.id,
                    token: d.token,
                    error: "gave up".into(),
                })
                .collect(),
            ..Settle::default()
        };
        let settled = backend.settle(queue, &dead).await.unwrap().dead;
        assert_eq!(settled as usize, leased.len(), "every leased job died");
        leased.iter().map(|d| d.id).collect()
    }

    /// Fields of the queue's unique-key hash (`ns:q:unique` on Redis).
    pub async fn unique_entries(&self, queue: &str) -> usize {
        match self.client.queues() {
            _ if self.is_redis() => redis::cmd("HLEN")
                .arg(self.key(queue, ":unique"))
                .query_async(&mut self.raw().await)
                .await
                .unwrap(),
            AnyBackend::Memory(m) => m.unique_entries(queue),
            _ => unreachable!("a Redis client always has its URL"),
        }
    }
}

/// Instantiates every conformance test with `$setup` (an async fn returning
/// [`Env`]) under the test attribute given; with `without_topics`, all but the
/// topics' (for a server older than topics need).
#[macro_export]
macro_rules! conformance_suite {
    ($setup:path, #[$attr:meta]) => {
        $crate::conformance_suite!($setup, #[$attr], without_topics);
        $crate::conformance_suite!(@topics $setup, #[$attr],
            subscribers_start_at_the_beginning_the_end_an_id_or_a_time,
            a_rewind_replays_from_the_beginning_an_id_or_skips_to_the_end,
            consumers_of_one_subscriber_share_its_events_and_each_subscriber_gets_all,
            events_of_a_dead_consumer_are_claimed_after_the_lease,
            a_failing_event_is_retried_with_backoff_then_dead_lettered_with_its_error,
            an_event_handler_that_cancels_its_own_token_keeps_its_outcome,
            a_dead_event_keeps_its_attempts_with_a_dead_consumers_as_lease_lost,
            dead_letters_are_requeued_for_their_subscriber_alone_or_deleted,
            retention_trims_by_length_and_age_or_refuses_when_full,
            entries_that_are_not_events_are_dead_lettered_and_other_types_skipped,
            an_ordered_subscriber_retries_in_place_before_the_next_event,
            an_ordered_subscriber_stopped_between_retries_in_place_counts_them,
            a_settle_sent_twice_records_its_runs_once,
            an_event_trimmed_while_it_waits_for_a_retry_leaves_no_records,
            an_ordered_subscriber_runs_one_event_at_a_time_across_workers,
            a_topic_deleted_under_a_worker_is_recreated_and_served,
            a_subscriber_at_the_end_takes_the_events_of_its_topic_made_anew,
            a_max_len_beyond_any_topic_keeps_every_event,
            a_shutdown_releases_events_read_ahead_without_counting_an_attempt,
            a_subscriber_made_past_its_topic_and_over_a_minute_on_is_refused,
            topic_reads_of_any_size_read_what_there_is,
            an_event_trimmed_while_it_runs_then_retried_leaves_no_records,
            an_event_trimmed_while_it_runs_after_a_renewal_leaves_no_records,
            a_settles_keep_dead_bounds_the_subscribers_dead_letters,
            a_dead_event_requeue_for_a_missing_subscriber_fails_even_with_no_ids,
            a_skip_moves_a_subscriber_forward_and_never_back,
            consumers_gone_for_long_are_removed_by_a_claim,
            topic_infos_and_topic_for_read_as_the_topics_own_read);
        $crate::conformance_suite!(@topic_renewals $setup, #[$attr],
            a_renewal_tells_held_claimed_and_gone_and_a_settle_for_a_removed_subscriber_is_no_error);
        $crate::conformance_suite!(@topic_rewinds $setup, #[$attr],
            an_event_running_when_rewound_runs_again_once_it_ended,
            an_event_replayed_while_it_waits_for_a_retry_starts_its_count_and_records_over,
            a_late_outcome_of_a_delivery_a_rewind_replaced_is_not_applied_to_the_replay,
            a_late_outcome_of_a_delivery_another_consumer_claimed_is_left_to_it_but_an_ack,
            a_claimed_deliverys_late_ack_is_not_applied_to_a_read_that_delivered_it_anew);
        $crate::conformance_suite!(@topic_replays $setup, #[$attr],
            a_replay_whose_first_run_died_starts_its_records_over,
            a_claim_across_a_rewind_keeps_the_records_of_the_count_it_continues,
            a_replay_whose_lone_recorded_run_died_keeps_that_record);
        $crate::conformance_suite!(@control $setup, #[$attr],
            a_quiet_worker_reads_no_topic_event_until_resumed);
        $crate::conformance_suite!(@bulk $setup, #[$attr],
            topic_requeue_all_takes_each_letter_once_while_the_subscriber_fails_them,
            a_confirmed_topic_requeue_takes_only_the_letters_counted);
    };
    ($setup:path, #[$attr:meta], without_topics) => {
        $crate::conformance_suite!(@lifecycle $setup, #[$attr],
            create_list_delete_queue, delete_queue_removes_dead_letters_and_stats,
            settled_runs_are_counted_per_minute_over_the_last_hour,
            settled_runs_are_counted_per_hour_over_the_last_week);
        $crate::conformance_suite!(@queues $setup, #[$attr],
            create_queue_rejects_bad_input, attributes_track_counts_and_updates,
            a_missing_queue_settles_every_job_gone_and_fetches_none,
            send_receive_delete_roundtrip, receive_again_after_vt_counts_receives,
            send_rejects_missing_queue_bad_name_and_large_body, unlimited_maxsize_takes_large_bodies,
            a_message_with_two_bad_values_is_refused_for_the_same_one,
            delayed_messages_wait, receive_batch_is_fifo_and_bounded, pop_removes_message,
            change_visibility_rehides_and_reveals, delete_batch_counts_existing, batch_over_maxsize_sends_nothing,
            absurd_times_are_stored_or_refused_never_a_panic, later_sends_sort_after_an_earlier_batch);
        $crate::conformance_suite!(@worker $setup, #[$attr],
            processes_every_job_once_and_counts, delayed_jobs_start_on_time_never_early,
            retry_after_then_success_counts_attempts, backoff_schedule_then_dead_letter_with_error,
            fatal_goes_straight_to_dead_letter, panics_and_timeouts_are_retried_and_the_worker_keeps_serving,
            a_handler_that_cancels_its_own_token_keeps_its_outcome,
            a_panic_decoding_or_dropping_a_job_is_no_loop,
            a_running_job_cancelled_stops_at_once_not_at_the_next_renewal,
            per_queue_concurrency_is_respected, missing_data_is_dead_lettered_at_once_naming_the_type,
            invalid_settings_are_rejected_at_build,
            a_listener_wakes_each_of_its_queues_once_subscribed);
        $crate::conformance_suite!(@priorities $setup, #[$attr],
            fetch_takes_higher_priorities_first_and_fifo_within_one,
            a_delivery_whose_job_moved_to_another_priority_is_not_gone,
            one_fetch_takes_the_highest_up_to_its_limit, a_delayed_high_priority_job_never_starts_early,
            leases_retries_and_dead_letters_keep_a_job_at_its_priority, rsmq_receive_sees_priority_zero_only_delete_sees_all,
            a_priority_out_of_range_is_refused_and_sends_nothing,
            a_backlog_of_10k_low_jobs_delays_a_high_one_by_one_batch_at_most,
            pop_due_takes_every_due_message_at_once_highest_first,
            concurrent_pop_due_consumers_never_share_or_lose_a_message,
            typed_pop_due_decodes_and_keeps_what_is_not_its_type);
        $crate::conformance_suite!(@unique $setup, #[$attr],
            keep_returns_the_queued_job_and_changes_nothing, a_duplicate_in_one_batch_meets_the_first,
            replace_delay_moves_a_waiting_job_earlier_and_later,
            replace_swaps_body_due_time_and_priority_keeping_the_id,
            a_delivered_job_blocks_duplicates_until_it_succeeds,
            dead_letters_deletes_pops_and_queue_deletes_free_keys, a_key_with_a_ttl_is_free_after_it,
            bad_unique_input_is_refused_and_sends_nothing, eight_producers_racing_on_one_key_make_one_job,
            typed_unique_jobs_hold_their_key_through_a_retry_until_success,
            a_dead_letter_requeued_takes_its_key_again_unless_another_job_holds_it,
            a_job_unique_until_start_enqueues_its_next_run_from_its_handler,
            a_retry_of_a_job_unique_until_start_lets_a_new_job_of_its_key_in,
            a_job_unique_until_start_whose_worker_died_before_it_started_frees_its_key_at_the_next_start,
            a_job_whose_envelope_spaces_its_unique_until_member_frees_its_key_at_start);
        $crate::conformance_suite!(@inspect $setup, #[$attr],
            counts_and_job_follow_a_job_through_every_state,
            a_running_job_cancelled_deleted_or_made_visible_leaves_the_in_flight_count,
            peek_shows_the_next_jobs_in_run_order_and_leases_none,
            peeked_scheduled_jobs_of_one_ms_go_by_priority_retries_too,
            list_pages_through_each_state_in_order_without_gaps_or_repeats,
            a_page_of_one_kind_among_many_of_the_other_ends_early_with_a_cursor,
            cancel_removes_waiting_jobs_and_stops_running_ones_for_good,
            finished_and_unknown_jobs_and_bad_input_are_clear,
            a_retry_without_a_message_keeps_the_last_error,
            latency_is_the_wait_of_the_oldest_ready_job_at_any_priority,
            a_scheduled_page_that_reads_its_whole_budget_to_the_end_is_the_last);
        $crate::conformance_suite!(@ops $setup, #[$attr],
            pause_holds_fetches_until_resume_and_sends_still_go_in,
            a_paused_worker_runs_nothing_and_a_resume_wakes_it_at_once,
            dead_letters_page_oldest_or_newest_first_and_filter,
            requeue_puts_a_dead_letter_back_fresh_at_its_priority,
            a_requeue_at_a_rate_spreads_the_jobs_due_times,
            a_requeue_spread_past_the_longest_delay_is_due_at_most_that_far,
            a_filter_reads_a_bounded_run_of_dead_letters_a_call,
            requeue_and_delete_by_filter_page_past_their_own_changes,
            retention_caps_dead_letters_by_count_and_age,
            a_worker_keeps_its_dead_letters_within_its_retention,
            dead_letter_operations_on_a_missing_queue_or_bad_name_are_clear,
            purge_deletes_every_job_but_keeps_dead_letters_and_the_queue,
            run_now_makes_a_scheduled_job_due_keeping_its_attempts_and_wakes_a_worker);
        $crate::conformance_suite!(@attempts $setup, #[$attr],
            attempts_are_recorded_with_their_settle_and_a_dead_letter_keeps_them,
            a_job_keeps_its_last_attempts_and_an_ack_or_delete_leaves_none,
            a_worker_records_each_attempt_with_its_error_chain_and_itself,
            run_times_are_counted_per_type_once_per_settled_run,
            a_settle_naming_one_delivery_twice_settles_it_once);
        $crate::conformance_suite!(@releases $setup, #[$attr],
            a_run_released_at_shutdown_is_recorded_not_counted,
            a_release_records_its_run_and_an_unstarted_one_none,
            a_job_released_onto_its_sends_ms_is_not_taken_before_it);
        $crate::conformance_suite!(@history $setup, #[$attr],
            finished_jobs_are_kept_with_their_attempts_and_found_by_id,
            history_is_trimmed_by_count_and_age_and_arguments_sooner,
            jobs_finished_in_one_ms_keep_the_order_they_were_entered,
            history_off_keeps_nothing_and_arguments_can_be_left_out,
            a_cancelled_job_is_kept_with_who_cancelled_it,
            the_history_is_filtered_by_outcome_type_and_time_and_paged,
            a_finished_job_is_run_again_as_a_copy_that_names_it,
            a_purge_is_one_event_with_its_count_and_who,
            a_deleted_job_is_kept_and_a_bulk_delete_is_one_event,
            every_action_names_who_took_it_in_the_history,
            a_copy_of_a_copy_names_the_copy_it_was_made_from,
            a_finished_job_run_again_keeps_its_priority_and_is_due_now,
            a_dead_letter_requeued_and_dead_again_counts_once_against_the_count,
            a_page_goes_on_after_its_last_job_finished_again_meanwhile,
            a_dead_letter_requeued_at_once_finishes_again_after_the_ms_it_died,
            a_job_cancelled_or_deleted_while_it_runs_keeps_a_record_of_that_run,
            a_job_cancelled_or_deleted_after_its_lease_ran_out_keeps_a_record_of_that_run);
        $crate::conformance_suite!(@locate $setup, #[$attr],
            a_job_is_found_by_id_in_whichever_queue_holds_it);
        $crate::conformance_suite!(@overview $setup, #[$attr],
            the_overview_reads_every_queue_filters_sorts_and_pages,
            the_overviews_totals_are_its_lines_added_up_in_every_state);
        $crate::conformance_suite!(@settings $setup, #[$attr],
            settings_are_stored_with_the_queue_and_go_with_it,
            a_change_of_some_retention_fields_keeps_the_others_as_stored,
            the_stored_retention_is_in_force_over_the_workers,
            a_workers_retention_is_stored_only_where_none_is,
            a_queues_concurrency_is_stored_and_followed_by_running_workers,
            a_settings_change_reaches_a_worker_between_its_beats,
            settings_past_their_bounds_are_refused_not_cut,
            a_change_that_changes_nothing_records_nothing_and_wakes_no_one,
            a_reset_setting_goes_back_to_the_workers_value_or_the_default);
        $crate::conformance_suite!(@limits $setup, #[$attr],
            a_global_concurrency_holds_across_workers,
            a_rate_limit_holds_in_every_sliding_window,
            a_hand_off_never_bypasses_a_global_concurrency,
            a_place_held_by_a_dead_worker_frees_when_its_lease_ends,
            a_workers_limits_hold_from_the_first_job_of_a_queue_created_later,
            a_workers_limits_hold_for_a_queue_deleted_and_created_again,
            lifting_a_limit_wakes_the_workers_it_held,
            the_usage_of_limits_is_read_as_a_fetch_counts_it,
            cancelling_a_running_job_wakes_a_worker_its_place_held,
            deleting_a_running_job_wakes_a_worker_its_place_held);
        $crate::conformance_suite!(@keys $setup, #[$attr],
            one_job_per_key_runs_at_once_across_workers_in_order,
            per_key_two_runs_two_of_a_key_at_once,
            a_hot_key_holds_back_no_other_key,
            within_a_key_an_earlier_due_job_goes_first,
            deletes_cancels_dead_letters_and_purges_free_a_keys_place,
            a_periodic_jobs_ticks_and_a_run_now_wait_for_its_key,
            a_run_now_makes_a_job_waiting_for_its_key_due_within_the_keys_wait,
            a_running_job_deleted_or_cancelled_keeps_its_place_until_its_lease_ends,
            operators_read_each_keys_places_running_and_blocked_jobs,
            a_keys_throttle_holds_its_key_alone,
            throttled_jobs_keep_their_keys_places_and_a_send_waits_out_the_throttle,
            a_waiting_worker_wakes_when_a_deleted_running_jobs_place_frees,
            a_requeued_dead_letter_and_a_rerun_wait_for_their_keys_again,
            blocked_jobs_are_listed_by_key_then_due_a_page_at_a_time,
            a_running_job_whose_lease_ends_during_its_keys_throttle_waits_it_out,
            a_send_that_lowers_a_keys_places_takes_none_beyond_them,
            a_key_throttle_settled_beside_a_dead_letter_sends_the_keys_retry_back_to_wait,
            dead_letters_of_one_key_requeued_together_take_the_first_ones_places,
            a_keys_throttle_end_wakes_it_though_a_ghosts_lease_ended_first,
            key_reads_refuse_a_bad_name_first_and_a_cursor_no_page_gave_clearly);
        $crate::conformance_suite!(@batches $setup, #[$attr],
            a_batch_counts_its_jobs_and_enqueues_each_callback_once_with_its_status,
            three_workers_finishing_a_batch_together_enqueue_each_callback_once,
            an_empty_batch_completes_at_once_and_an_unknown_one_has_no_status,
            a_callback_is_enqueued_at_its_job_types_priority,
            a_finish_a_dead_worker_left_uncounted_is_counted_by_a_later_fetch,
            a_settle_enters_only_the_batch_finishes_that_passed_the_fence,
            a_sweep_counts_the_finishes_of_a_marked_queue_and_drops_its_mark,
            batches_are_listed_newest_first_and_their_dead_jobs_read,
            callbacks_a_sealer_left_due_are_sent_by_a_sweep_and_an_oversized_one_dropped,
            a_batchs_dead_jobs_are_read_with_a_limit_of_1_to_1000,
            a_callback_priority_out_of_range_is_refused_at_batch_open,
            a_batch_never_sealed_is_cancelled_by_the_sweep_an_hour_on,
            pages_of_batches_show_each_batch_once_however_many_share_a_millisecond);
        $crate::conformance_suite!(@flows $setup, #[$attr],
            a_parent_runs_once_after_its_children_and_reads_their_results,
            a_chain_runs_in_order_each_step_reading_the_one_before,
            a_dead_child_fails_its_parent_and_the_chain_above_it_with_the_reason,
            a_dead_parent_requeued_runs_and_reads_its_childrens_results,
            a_parent_cancelled_while_it_waits_never_runs_and_its_waiters_learn_it,
            a_cancelled_parent_never_runs_though_its_queue_is_deleted_and_created_again,
            a_flow_does_not_create_again_its_parents_deleted_queue,
            a_failed_flow_does_not_create_again_its_parents_deleted_queue,
            a_flow_above_a_parent_gone_with_its_deleted_queue_fails,
            a_parent_gone_with_its_queue_created_again_is_not_dead_lettered_there,
            failed_parents_once_marks_go_7_days_on,
            a_cancelled_child_fails_its_parent_and_a_batch_counts_its_cancelled_jobs,
            a_parent_too_big_for_its_queue_is_dead_lettered_and_fails_its_chain,
            a_flow_waits_for_jobs_enqueued_earlier_finished_or_not,
            a_flow_after_a_waiting_parent_runs_after_it_and_one_after_a_cancelled_job_fails,
            deleted_jobs_count_as_cancelled_in_their_batches_and_flows,
            purged_jobs_count_as_cancelled_in_their_batches_and_flows,
            many_flows_wait_for_one_job_and_all_run_once_it_succeeds,
            flows_cancelled_while_they_wait_for_a_job_make_room_for_more,
            a_popped_job_counts_as_succeeded_in_its_batch_and_flow);
        $crate::conformance_suite!(@batch_adds $setup, #[$attr],
            jobs_added_while_a_batch_runs_are_waited_for_counted_and_read,
            a_job_a_flow_waits_for_with_after_adds_nothing_to_the_flow,
            a_cancelled_batch_cancels_its_jobs_rather_than_start_them_and_takes_no_more,
            jobs_an_adder_left_unsent_are_sent_by_a_sweep,
            jobs_added_whose_group_was_refused_are_not_sent_by_a_sweep,
            an_enqueue_that_fails_part_way_cancels_its_batch_or_flow);
        $crate::conformance_suite!(@results $setup, #[$attr],
            a_jobs_result_is_read_typed_once_it_succeeded,
            a_job_that_did_not_succeed_says_how_it_ended,
            without_a_history_no_result_is_kept,
            a_waiter_is_woken_when_its_job_finishes_however_it_ends,
            a_wait_for_a_result_in_an_invalid_queue_fails_at_once,
            a_result_is_not_read_past_the_historys_count);
        $crate::conformance_suite!(@throttles $setup, #[$attr],
            rate_limited_counts_no_attempt_and_holds_the_queue,
            a_throttle_and_a_pause_are_apart,
            throttles_in_a_row_past_the_limit_count_an_attempt,
            a_throttled_job_runs_again_when_its_throttle_ends,
            prefetched_jobs_wait_out_a_throttle,
            an_operator_ends_a_throttle_and_a_pause_stays,
            ending_a_throttle_wakes_the_workers_it_held);
        $crate::conformance_suite!(@bulk $setup, #[$attr],
            requeue_all_takes_each_letter_once_while_a_worker_kills_them_again,
            delete_matching_leaves_the_letters_that_die_after_it_starts,
            purge_leaves_the_jobs_sent_after_it_starts,
            a_confirmed_dead_letter_action_takes_only_the_letters_counted,
            a_confirmed_purge_takes_only_the_jobs_counted,
            a_purge_cutoff_is_exact_to_the_millisecond_and_never_past_now,
            a_dead_count_keeps_the_querys_own_cutoff,
            a_purge_takes_a_keyed_job_that_goes_back_to_wait_while_it_runs);
        $crate::conformance_suite!(@live $setup, #[$attr],
            a_tick_is_enqueued_once_however_many_try,
            ticks_due_together_each_get_their_own_outcome,
            periodic_workers_enqueue_each_tick_once_and_list_the_schedule,
            a_restarted_schedule_skips_missed_ticks_or_runs_the_last,
            periodic_settings_are_checked_at_build,
            a_schedule_name_none_could_have_is_refused_by_pause_and_resume,
            workers_are_listed_with_their_jobs_and_gone_when_stopped_or_dead,
            each_run_starting_or_ending_shows_before_the_next_heartbeat,
            an_idle_worker_stays_listed_as_it_was_and_comes_back_when_its_entry_is_lost,
            ticks_of_reads_each_queue_as_its_own_ticks);
        $crate::conformance_suite!(@schedules $setup, #[$attr],
            a_schedule_changed_between_deploys_lists_the_next_tick_of_its_new_schedule,
            after_a_downtime_the_listing_shows_the_next_tick_to_come,
            a_run_now_is_due_at_once_on_a_queue_with_a_delay,
            a_pause_of_a_queue_never_created_goes_with_its_delete,
            a_tick_under_a_name_no_schedule_may_have_is_refused);
        $crate::conformance_suite!(@control $setup, #[$attr],
            a_worker_is_quieted_resumed_and_stopped_through_the_backend,
            a_quiet_worker_puts_back_what_it_prefetched_unstarted);
        $crate::conformance_suite!(@leases $setup, #[$attr],
            crashed_worker_job_runs_again_exactly_once_more,
            dead_letters_reads_a_page_at_most,
            an_rsmq_style_receive_keeps_the_delivery_count,
            job_running_three_leases_is_never_delivered_twice, stale_delivery_cannot_touch_the_newer_one,
            a_release_never_lets_the_next_delivery_reuse_a_token,
            a_retry_is_fetchable_at_the_due_time_inspection_reports,
            a_delivery_says_how_long_it_was_due,
            a_delayed_send_is_due_at_its_microsecond_plus_the_delay,
            a_delayed_keyed_jobs_next_due_is_when_a_fetch_takes_it,
            a_delayed_job_moved_onto_its_sends_ms_is_due_then,
            a_fetch_gives_each_job_its_count_among_jobs_that_share_a_score,
            a_fetch_leases_large_groups_lone_jobs_and_lost_leases_in_due_order,
            shutdown_with_100_in_flight_loses_none_and_hides_none, long_jobs_are_not_prefetched_away_from_an_idle_worker, quick_jobs_are_prefetched_seven_per_slot, slower_jobs_are_prefetched_no_deeper_than_the_concurrency, shutdown_lets_running_jobs_finish_within_grace,
            garbage_bodies_are_dead_lettered_with_reasons_and_good_jobs_run,
            an_id_given_twice_is_one_job_to_delete_and_to_extend);
    };
    (@$module:ident $setup:path, #[$attr:meta], $($name:ident),* $(,)?) => {
        $(
            #[$attr]
            async fn $name() {
                let env = $setup().await;
                $crate::$module::$name(&env).await;
            }
        )*
    };
}

/// The suite on the memory backend, on tokio's paused clock: delays, leases and
/// backoff take no real time.
mod on_memory {
    crate::conformance_suite!(crate::Env::memory, #[tokio::test(start_paused = true)]);
}

/// The suite on Redis (a private redis-server per test).
mod on_redis {
    crate::conformance_suite!(crate::Env::redis, #[tokio::test]);
}

/// The suite on Valkey (a private valkey-server per test, as `scripts/servers`
/// installs it).
mod on_valkey {
    crate::conformance_suite!(crate::Env::valkey, #[tokio::test]);
}

/// The suite on a Redis Cluster: 3 masters and 3 replicas shared by the tests of
/// this process, a namespace per test.
mod on_cluster {
    crate::conformance_suite!(crate::Env::cluster, #[tokio::test]);
}
