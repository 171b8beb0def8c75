use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, redjob::Job)]
#[job(timeout = "30 seconds", backoff = "fast")]
struct Slow {
    n: u32,
}

fn main() {}
