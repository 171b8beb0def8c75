use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, redjob::Job)]
#[job(queue = "mail", retries = 3, weight = 1)]
struct Mail {
    to: String,
}

fn main() {}
