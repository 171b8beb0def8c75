//! The overview's totals against its lines: `Overview::total` is "the
//! matching queues' lines added up", each state of `StateCounts` among them.

use redjob::Client;
use redjob::backend::Backend;
use redjob::backend::memory::MemoryBackend;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, OverviewQuery};
use redjob::queue::{Keyed, QueueOptions, SendMessage};

/// Jobs waiting for their concurrency key's place are counted in each
/// queue's line (`counts.blocked`) but were left out of the totals:
/// `Totals::add` sums ready, scheduled, in flight and dead, not blocked, so
/// `total.counts.blocked` stayed 0 and `total.counts.total()` fell short of
/// the lines' jobs.
#[tokio::test]
async fn the_overviews_totals_count_the_blocked_jobs_of_its_lines() {
    let client = Client::memory(MemoryBackend::new());
    let q = client.backend();
    for queue in ["mail", "sms"] {
        let msgs: Vec<SendMessage> = (0..3)
            .map(|i| {
                SendMessage::new(format!(r#"{{"type":"A","args":{{"i":{i}}}}}"#))
                    .keyed(Keyed::new("account-7"))
            })
            .collect();
        q.send(queue, &msgs, &QueueOptions::default())
            .await
            .unwrap();
        assert_eq!(client.counts(queue).await.unwrap().blocked, 2, "{queue}");
    }
    let o = client.overview(&OverviewQuery::default()).await.unwrap();
    let lines: u64 = o.lines.iter().map(|l| l.counts.blocked).sum();
    assert_eq!(lines, 4, "each line counts its blocked jobs");
    let all: u64 = o.lines.iter().map(|l| l.counts.total()).sum();
    assert_eq!(
        (o.total.counts.blocked, o.total.counts.total()),
        (lines, all),
        "the totals are the lines added up: {:?}",
        o.total
    );
}
