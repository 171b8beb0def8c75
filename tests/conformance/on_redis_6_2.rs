//! The conformance suite on Redis 6.2, the oldest Redis redjob supports (a
//! private server per test, as `scripts/servers` installs it). Topics need
//! Redis 7.0: on 6.2 they are refused with a clear error.

use redjob::Error;
use redjob::topic::{Event, Start};

use serde::{Deserialize, Serialize};

crate::conformance_suite!(crate::Env::redis_6_2, #[tokio::test], without_topics);

#[derive(Serialize, Deserialize, Event)]
#[event(name = "old_tick", topic = "old_ticks")]
struct OldTick {
    n: u64,
}

#[tokio::test]
async fn topics_on_redis_6_2_are_refused_naming_the_version_they_need() {
    let env = crate::Env::redis_6_2().await;
    let c = &env.client;
    let too_old = |e: Error| match e {
        Error::ServerTooOld {
            feature,
            needs,
            found,
        } => {
            assert_eq!((feature, needs), ("topics", "7.0"));
            assert!(found.starts_with("6.2."), "{found}");
            let text = Error::ServerTooOld {
                feature,
                needs,
                found,
            }
            .to_string();
            assert!(
                text.starts_with("topics need Redis 7.0 or newer; this server is Redis 6.2."),
                "{text}"
            );
        }
        other => panic!("expected ServerTooOld, got {other:?}"),
    };
    too_old(c.publish(&OldTick { n: 1 }).await.unwrap_err());
    too_old(
        c.subscribe("old_ticks", "audit", Start::Beginning)
            .await
            .unwrap_err(),
    );
    too_old(c.topic("old_ticks").await.unwrap_err());
    // nothing was written
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut env.raw().await)
        .await
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}
