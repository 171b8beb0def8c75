use serde::{Deserialize, Serialize};

// a delivery count of 499 is where the count saturates, so it cannot be allowed
#[derive(Serialize, Deserialize, redjob::Job)]
#[job(max_attempts = 499)]
struct Saturates;

#[derive(Serialize, Deserialize, redjob::Job)]
#[job(max_attempts = 1000)]
struct Loops;

#[derive(Serialize, Deserialize, redjob::Job)]
#[job(max_attempts = 4294967296)]
struct Overflows;

fn main() {}
