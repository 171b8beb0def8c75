use serde::{Deserialize, Serialize};

// a bad attribute on an event the code publishes: only the attribute's error shows
#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(topic = "payments", retention = "1d")]
struct Paid {
    cents: u64,
}

async fn pay(client: &redjob::Client) -> redjob::Result<()> {
    client.publish(&Paid { cents: 500 }).await?;
    Ok(())
}

fn main() {
    let _ = pay;
}
