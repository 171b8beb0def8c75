//! Writing to stdout and stderr. A reader that went away (`redjob queues |
//! head -1`) ends the program quietly, with 0: it took what it wanted, and
//! nothing went wrong here. std's `println!` panics instead ("failed printing
//! to stdout", exit code 101), so this binary's `println!`, `print!`,
//! `eprintln!` and `eprint!` are its own (`main.rs`), through these two
//! functions, and so is every line any command prints.
//!
//! (Restoring SIGPIPE's default action would need `unsafe`, which the
//! workspace forbids, and would also kill the program, without a word, when
//! Redis or a browser closes a socket it writes to with `writev`.)

use std::fmt::Arguments;
use std::io::{ErrorKind, Write};

/// Writes `args` to stdout. A closed pipe exits with 0 (the reader went
/// away); any other failure to write says so on stderr and exits with 1.
pub fn stdout(args: Arguments<'_>) {
    let written = std::io::stdout().lock().write_fmt(args);
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            stderr(format_args!("error: cannot write to stdout: {e}\n"));
            std::process::exit(1)
        }
    }
}

/// Writes `args` to stderr; if that fails, there is no one left to tell.
pub fn stderr(args: Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}
