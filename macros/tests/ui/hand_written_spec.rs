// A JobSpec written by hand would never be registered for the workers: it
// does not compile.
use redjob::job::{JobOptions, JobSpec};

struct Manual;

impl JobSpec for Manual {
    type Output = ();
    const NAME: &'static str = "manual";
    const OPTIONS: JobOptions = JobOptions::DEFAULT;
}

fn main() {}
