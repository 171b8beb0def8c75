use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, redjob::Job)]
#[job(queue = "has space", max_attempts = 0, name = "")]
struct Bad {
    n: u32,
}

#[derive(Serialize, Deserialize, redjob::Job)]
#[job(queue = "a", queue = "b", timeout = 30)]
struct Twice {
    n: u32,
}

fn main() {}
