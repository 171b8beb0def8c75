use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, redjob::Job)]
struct NoHandler {
    n: u32,
}

fn main() {}
