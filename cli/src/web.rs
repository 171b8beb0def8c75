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
}

pub async fn serve(ctx: &Ctx, args: WebArgs) -> Outcome {
    let app = redjob_web::Dashboard::new(ctx.client.clone())
        .read_only(args.read_only)
        .refresh(args.refresh)
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
