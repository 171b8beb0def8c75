//! `redjob web`: the dashboard (`redjob-web`) served on its own.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::{Ctx, Outcome};

#[derive(Args)]
pub struct WebArgs {
    /// Address to listen on. Keep it on loopback, or put an authenticating
    /// proxy in front: the dashboard has no login of its own.
    #[arg(long, default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
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

pub async fn serve(ctx: &Ctx, args: WebArgs) -> Outcome {
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
    let app = redjob_web::Dashboard::new(ctx.client.clone())
        .read_only(args.read_only)
        .refresh(args.refresh)
        .allowed_hosts(hosts)
        .router();
    let listener = tokio::net::TcpListener::bind(args.bind).await?;
    let at = listener.local_addr()?;
    let mode = if args.read_only { " (read-only)" } else { "" };
    eprintln!("redjob dashboard{mode} on http://{at}/ (Ctrl-C stops it)");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
