//! `redjob web`: the dashboard (`redjob-web`) served on its own.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::{Ctx, Failure, Outcome};

#[derive(Args)]
pub struct WebArgs {
    /// Address to listen on. Beyond loopback it needs a token
    /// (REDJOB_WEB_TOKEN or --token-file), or --no-auth.
    #[arg(long, default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// A file holding the token every request must give (HTTP Basic: any
    /// user name, the token as the password; the user name is recorded as
    /// who acted). Else the environment variable REDJOB_WEB_TOKEN; never an
    /// argument, which other users of the machine can read.
    #[arg(long)]
    token_file: Option<std::path::PathBuf>,
    /// Serve beyond loopback without a token (behind a proxy that
    /// authenticates).
    #[arg(long)]
    no_auth: bool,
    /// Show everything, allow no action.
    #[arg(long)]
    read_only: bool,
    /// How often open pages refresh (0s: never).
    #[arg(long, default_value = "5s", value_parser = crate::show::duration)]
    refresh: Duration,
    /// A host name the dashboard answers to, besides localhost, 127.0.0.1,
    /// `[::1]` and the --bind address (repeat for more). Requests naming another
    /// host get 403, so that no other site can reach it by DNS rebinding.
    #[arg(long = "host")]
    hosts: Vec<String>,
}

/// The token: from --token-file (its first line), else REDJOB_WEB_TOKEN.
fn token(args: &WebArgs) -> Result<Option<String>, Failure> {
    if let Some(path) = &args.token_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure(format!("--token-file {}: {e}", path.display())))?;
        let t = text.lines().next().unwrap_or("").trim().to_string();
        if t.is_empty() {
            return Err(Failure(format!("--token-file {}: empty", path.display())));
        }
        return Ok(Some(t));
    }
    Ok(std::env::var("REDJOB_WEB_TOKEN")
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

pub async fn serve(ctx: &Ctx, args: WebArgs) -> Outcome {
    let token = token(&args)?;
    if token.is_none() && !args.no_auth && !args.bind.ip().is_loopback() {
        return Err(Failure(format!(
            "refusing to serve the dashboard on {} without a token: set REDJOB_WEB_TOKEN or --token-file, or pass --no-auth behind an authenticating proxy",
            args.bind
        )));
    }
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".into(), "[::1]".into()];
    let ip = args.bind.ip();
    if !ip.is_unspecified() {
        hosts.push(match ip {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        });
    } else if args.hosts.is_empty() {
        eprintln!(
            "warning: listening on every interface: pass --host <name> for each name the dashboard is reached by (only loopback names are allowed now)"
        );
    }
    hosts.extend(args.hosts);
    let mut dashboard = redjob_web::Dashboard::new(ctx.client.clone())
        .read_only(args.read_only)
        .refresh(args.refresh)
        .allowed_hosts(hosts);
    let auth = token.is_some();
    if let Some(t) = token {
        dashboard = dashboard.token(t);
    }
    let app = dashboard.router();
    let listener = tokio::net::TcpListener::bind(args.bind).await?;
    let at = listener.local_addr()?;
    let mode = match (args.read_only, auth) {
        (true, true) => " (read-only, token required)",
        (true, false) => " (read-only)",
        (false, true) => " (token required)",
        (false, false) => "",
    };
    eprintln!("redjob dashboard{mode} on http://{at}/ (Ctrl-C stops it)");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
