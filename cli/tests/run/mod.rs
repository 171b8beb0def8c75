//! The `redjob` binary run as a process, for the CLI's tests.
#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

/// What a run printed and its exit code.
pub struct Run {
    pub code: i32,
    pub out: String,
    pub err: String,
}

impl Run {
    pub fn json(&self) -> Value {
        assert_eq!(self.code, 0, "stderr: {}", self.err);
        serde_json::from_str(&self.out).unwrap_or_else(|e| panic!("{e}: {}", self.out))
    }

    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "stderr: {}", self.err);
        &self.out
    }

    pub fn failed(&self, text: &str) {
        assert_eq!(self.code, 1, "stdout: {}", self.out);
        assert!(self.err.contains(text), "{:?} lacks {text:?}", self.err);
    }
}

/// Runs `redjob --url <url> args...` with stdin closed (not a terminal), at
/// most 30 s.
pub async fn cli(url: &str, args: &[&str]) -> Run {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redjob"))
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the CLI exits within 30 s")
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
