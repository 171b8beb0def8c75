//! What a renewal of held events says of each (still held, claimed by
//! another consumer, or held by none: acknowledged by another, or its
//! subscriber removed), and a settle for a removed subscriber, which has
//! nothing left to settle: no error, on every backend.

use std::time::Duration;

use redjob::topic::{EventId, EventOptions, EventSettle, Renewed, Start, Topics};

use crate::Env;

pub async fn a_renewal_tells_held_claimed_and_gone_and_a_settle_for_a_removed_subscriber_is_no_error(
    env: &Env,
) {
    let (c, b) = (&env.client, env.queues());
    c.subscribe("parcels", "s", Start::Beginning).await.unwrap();
    b.publish(
        "parcels",
        &[("parcel", "{}"), ("parcel", "{}")],
        &EventOptions::DEFAULT,
    )
    .await
    .unwrap();
    let got = b
        .read("parcels", "s", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let ids: Vec<EventId> = got.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), 2);
    // another consumer takes the first over
    let claimed = b
        .claim("parcels", "s", "c2", Duration::ZERO, 1, EventId::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.events[0].id, ids[0]);
    let found = b.renew("parcels", "s", "c1", &ids).await.unwrap();
    assert_eq!(found, [Renewed::Claimed, Renewed::Held]);
    // and acknowledges it: held by none
    let ack = EventSettle {
        acks: vec![claimed.events[0].delivery()],
        ..EventSettle::default()
    };
    b.settle_events("parcels", "s", "c2", &ack, None)
        .await
        .unwrap();
    let found = b.renew("parcels", "s", "c1", &ids).await.unwrap();
    assert_eq!(found, [Renewed::Gone, Renewed::Held]);
    // the subscriber is removed while the second runs
    assert!(c.unsubscribe("parcels", "s").await.unwrap());
    let found = b.renew("parcels", "s", "c1", &ids[1..]).await.unwrap();
    assert_eq!(found, [Renewed::Gone]);
    let settle = EventSettle {
        acks: vec![got[1].delivery()],
        retries: vec![(got[0].delivery(), Duration::ZERO, None)],
        ..EventSettle::default()
    };
    b.settle_events("parcels", "s", "c1", &settle, None)
        .await
        .expect("nothing left to settle");
    let t = c.topic("parcels").await.unwrap().unwrap();
    assert!(t.subscribers.is_empty(), "{t:?}");
}
