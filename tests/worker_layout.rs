//! The layout version: a worker stores this release's in a fresh namespace
//! (`ns:@meta`, field `layout`) and starts; on a namespace whose data says a
//! later layout (or something unreadable) it refuses to start with a clear
//! error, before it leases anything.

mod common;

use std::time::Duration;

use common::RedisServer;
use redjob::backend::{Backend, LAYOUT_VERSION};
use redjob::inspect::{Inspect, JobState};
use redjob::queue::{Queues, SendMessage};
use redjob::{Client, Error, Worker};

#[tokio::test]
async fn a_worker_stores_the_layout_and_refuses_a_later_one() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut raw = server.raw().await;
    let stored = |mut raw: redis::aio::MultiplexedConnection| async move {
        redis::cmd("HGET")
            .arg("rsmq:@meta")
            .arg("layout")
            .query_async::<Option<String>>(&mut raw)
            .await
            .unwrap()
    };
    assert_eq!(stored(raw.clone()).await, None, "nothing before a worker");
    assert_eq!(
        client.backend().check_layout().await.unwrap(),
        LAYOUT_VERSION
    );
    assert_eq!(stored(raw.clone()).await, Some(LAYOUT_VERSION.to_string()));

    // a worker on this release's layout starts and stops
    let worker = Worker::builder(client.backend())
        .queue("mail")
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let running = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    running.await.unwrap().unwrap();

    // a later layout, or garbage: refused at start, nothing leased
    client
        .queues()
        .create_queue("mail", Default::default())
        .await
        .unwrap();
    let job = Queues::send(
        client.queues(),
        "mail",
        SendMessage::new(&br#"{"type":"x","args":{}}"#[..]),
    )
    .await
    .unwrap();
    for found in [(LAYOUT_VERSION + 1).to_string(), "0".into(), "two".into()] {
        let _: () = redis::cmd("HSET")
            .arg("rsmq:@meta")
            .arg("layout")
            .arg(&found)
            .query_async(&mut raw)
            .await
            .unwrap();
        let worker = Worker::builder(client.backend())
            .queue("mail")
            .handle_signals(false)
            .build()
            .unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), worker.run())
            .await
            .expect("refused at once");
        match r {
            Err(Error::LayoutUnsupported {
                found: f,
                supported,
            }) => {
                assert_eq!((f.as_str(), supported), (found.as_str(), LAYOUT_VERSION));
                let text = Error::LayoutUnsupported {
                    found: f,
                    supported,
                }
                .to_string();
                assert!(text.contains("upgrade redjob"), "{text}");
            }
            other => panic!("{found}: {other:?}"),
        }
        let j = client.queues().job("mail", &job).await.unwrap().unwrap();
        assert_eq!((j.state, j.attempts), (JobState::Ready, 0), "untouched");
    }
}
