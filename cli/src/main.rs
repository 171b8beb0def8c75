//! `redjob`: look into and operate redjob queues on Redis from a shell. This
//! crate is the binary (`cargo install redjob-cli` installs `redjob`); the
//! library is [redjob](https://docs.rs/redjob), the dashboard
//! [redjob-web](https://docs.rs/redjob-web), which `redjob web` serves.
//!
//! ```text
//! redjob queues                          # every queue, its jobs by state
//! redjob jobs list emails --state ready  # jobs of a queue
//! redjob dead requeue emails --all       # dead letters back to work
//! redjob queue pause emails              # stop every worker leasing its jobs
//! redjob workers                         # live workers, what they run
//! redjob workers quiet 32b5              # take no more work (resume, stop)
//! redjob periodic                        # schedules, last and next tick
//! redjob web --bind 127.0.0.1:8080       # the dashboard
//! ```
//!
//! It connects to `--url` (or `REDIS_URL`, default `redis://127.0.0.1:6379`)
//! in one namespace (`--namespace`, RSMQ's `rsmq` by default). Run `redjob
//! --help` and `redjob <command> --help`; every listing takes `--json` for
//! scripts, and actions record who acted as `cli <user>`.

// This binary's own printing macros, in scope in every module below: as std's,
// but a closed pipe ends the program quietly where std's panic (`out`).

/// As std's `println!`, through [`out::stdout`].
macro_rules! println {
    () => {
        $crate::out::stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// As std's `print!`, through [`out::stdout`].
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::out::stdout(format_args!($($arg)*))
    };
}

/// As std's `eprintln!`, through [`out::stderr`].
macro_rules! eprintln {
    () => {
        $crate::out::stderr(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// As std's `eprint!`, through [`out::stderr`].
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::out::stderr(format_args!($($arg)*))
    };
}

mod batches;
mod dead;
mod enqueue;
mod jobs;
mod live;
mod out;
mod queues;
mod reach;
mod settings;
mod show;
mod topics;
mod web;
mod workers;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use redjob::Client;
use redjob::client::ClientConfig;

/// Operate redjob: queues (sizes by state, pause, drain), jobs, dead letters,
/// topics, batches, workers and periodic jobs.
///
/// Connects to the Redis at --url (or $REDIS_URL) and works on the queues of
/// one namespace (RSMQ's `rsmq` unless --namespace says otherwise). Listings
/// print tables; --json prints JSON for scripts instead.
///
/// Exit codes: 0 success; 1 an error, including an explicit id or queue that
/// matched nothing (the message on stderr; with --json, as
/// {"error": "...", "exit_code": 1}); 2 a usage error (a bad flag or value).
///
/// Examples:
///   redjob queues
///   redjob dead list emails --newest --error timeout
///   redjob dead requeue emails --all --rate 100
///   redjob queue pause emails
///   redjob drain emails
///   redjob workers
///   redjob workers quiet 32b5
///   redjob periodic
///   redjob topic show orders
///   redjob topic rewind orders billing --ago 1h
///   redjob web --bind 127.0.0.1:8080
#[derive(Parser)]
#[command(name = "redjob", version, verbatim_doc_comment)]
struct Cli {
    /// Redis URL (redis://, rediss:// for TLS, with user:password@ for ACL).
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    url: String,
    /// Key namespace: RSMQ's `ns`, redjob's `ClientConfig::namespace`.
    #[arg(long, env = "REDJOB_NAMESPACE", default_value = "rsmq", global = true)]
    namespace: String,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Print long cells of tables whole (a cell over 48 characters, such as a
    /// long queue name, is cut short with … otherwise; --json is always whole).
    #[arg(long, global = true)]
    wide: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every queue with its jobs by state, how long its oldest ready job has
    /// waited, counters and whether it is paused: read in two round trips
    /// however many queues there are.
    Queues(queues::ListArgs),
    /// One queue: show, create, pause, resume, unthrottle, its concurrency
    /// keys, purge its jobs, its settings, delete it.
    #[command(subcommand)]
    Queue(queues::QueueCommand),
    /// The jobs of a queue: peek, show, retry, cancel, run now, history, list
    /// by state.
    #[command(subcommand)]
    Jobs(jobs::JobsCommand),
    /// The dead letters of a queue: list, show, requeue, delete, purge.
    #[command(subcommand)]
    Dead(dead::DeadCommand),
    /// Topics and their subscribers: list, show, rewind (replay) a
    /// subscriber, its dead letters (list, requeue, delete).
    #[command(subcommand)]
    Topic(topics::TopicCommand),
    /// Sends a raw job envelope, `{"type": "<job name>", "args": {...}}`, and
    /// prints the job's id: for a unique job already queued, its id and what
    /// the send did to it (left as it was, moved or replaced).
    Enqueue(enqueue::EnqueueArgs),
    /// Counters and sizes of every queue; --watch refreshes with rates.
    Stats(queues::StatsArgs),
    /// Waits until a queue has no job left (ready, scheduled or running), with a
    /// progress bar and the rate.
    Drain(queues::DrainArgs),
    /// The live worker processes: host, pid, queues, how busy, last heartbeat,
    /// and the jobs each one runs. A worker that died is gone within three
    /// heartbeats (a lease). Quiet, resume or stop workers through Redis.
    Workers(workers::WorkersArgs),
    /// The periodic schedules live workers tick, with their last and next
    /// tick and whether they are paused; run one now, pause or resume one for
    /// every worker.
    Periodic(live::PeriodicArgs),
    /// Batches, newest first, with their progress.
    Batches(batches::BatchesArgs),
    /// One batch: its counts, state and dead jobs; --cancel cancels it.
    Batch(batches::BatchArgs),
    /// Serves the web dashboard: queues, jobs, dead letters, topics, batches,
    /// periodic jobs and workers, with the actions on them.
    Web(web::WebArgs),
}

/// An error for the user: printed as is, exit code 1.
#[derive(Debug)]
pub struct Failure(String);

impl From<redjob::Error> for Failure {
    fn from(e: redjob::Error) -> Self {
        // a server that did not answer, or is not Redis, is named
        Failure(reach::explained(&e).unwrap_or_else(|| e.to_string()))
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure(e.to_string())
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Self {
        Failure(e.to_string())
    }
}

/// What a command returns.
pub type Outcome = Result<(), Failure>;

/// What every command gets: the client and the output mode.
pub struct Ctx {
    /// Connected to --url in --namespace.
    pub client: Client,
    /// --json.
    pub json: bool,
}

/// Exits with a usage error (code 2): clap's text, or under `--json` the
/// whole of it (what is missing, the usage line) as `{"error": …,
/// "exit_code": 2}`, without its `error: ` and its terminal styling.
pub fn usage_error(e: clap::Error, json: bool) -> ! {
    // --help and --version print and exit 0
    if !json || !e.use_stderr() {
        e.exit()
    }
    // a StyledStr prints as plain text: its styles are dropped
    let detail = e.render().to_string();
    let message = detail.trim().trim_start_matches("error: ").to_string();
    eprintln!(
        "{}",
        serde_json::json!({ "error": message, "exit_code": 2 })
    );
    std::process::exit(2)
}

fn main() -> ExitCode {
    // (an argument that is not UTF-8 is clap's usage error, not a panic)
    let json = std::env::args_os().any(|a| a == "--json");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => usage_error(e, json),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let json = cli.json;
    show::set_wide(cli.wide);
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) if json => {
            eprintln!("{}", serde_json::json!({ "error": msg, "exit_code": 1 }));
            ExitCode::FAILURE
        }
        Err(Failure(msg)) => {
            eprintln!("error: {}", show::escaped_lines(&msg));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Outcome {
    let cfg = ClientConfig {
        namespace: cli.namespace.clone(),
        ..ClientConfig::from_url(cli.url.clone())
    };
    reach::set(&cfg.redis);
    // every action names who took it in the queues' history
    let client = Client::from_config(cfg).await?.acting_as(&actor());
    let ctx = Ctx {
        client,
        json: cli.json,
    };
    match cli.command {
        Command::Queues(a) => queues::list(&ctx, &a).await,
        Command::Queue(c) => queues::queue(&ctx, c).await,
        Command::Jobs(c) => jobs::jobs(&ctx, c).await,
        Command::Dead(c) => dead::dead(&ctx, c).await,
        Command::Enqueue(a) => enqueue::enqueue(&ctx, a).await,
        Command::Topic(c) => topics::topic(&ctx, c).await,
        Command::Stats(a) => queues::stats(&ctx, a).await,
        Command::Drain(a) => queues::drain(&ctx, a).await,
        Command::Workers(a) => workers::workers(&ctx, a).await,
        Command::Periodic(a) => live::periodic(&ctx, a).await,
        Command::Batches(a) => batches::list(&ctx, &a).await,
        Command::Batch(a) => batches::show(&ctx, &a).await,
        Command::Web(a) => web::serve(&ctx, a).await,
    }
}

/// Who acts, as the queue's history records it: `cli` and the user's login
/// name (`USER`, else `LOGNAME`).
pub fn actor() -> String {
    match std::env::var("USER").or_else(|_| std::env::var("LOGNAME")) {
        Ok(user) if !user.is_empty() => format!("cli {user}"),
        _ => "cli".into(),
    }
}
