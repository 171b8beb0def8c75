use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, redjob::Job)]
struct Wrapper<T> {
    inner: T,
}

fn main() {}
