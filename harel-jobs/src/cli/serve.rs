//! `harel-jobs dashboard`: the dashboard's router served alone, until Ctrl-C or SIGTERM.

use super::args::DashboardArgs;
use super::error::CliError;
use crate::dashboard::{self, Auth, DashboardConfig};
use crate::queue::Queue;

/// Serves the dashboard of `queue` as `args` say.
///
/// # Errors
/// [`CliError::InvalidArgument`] for a `--basic-auth` without a `:`; [`CliError::Io`] if
/// the address cannot be bound.
pub(crate) async fn serve(queue: &Queue, args: DashboardArgs) -> Result<(), CliError> {
    let auth = match (args.token, args.basic_auth) {
        (Some(token), _) if !token.is_empty() => Some(Auth::Bearer(token)),
        (_, Some(pair)) => {
            let (user, password) = pair.split_once(':').ok_or(CliError::InvalidArgument(
                "--basic-auth takes USER:PASSWORD",
            ))?;
            Some(Auth::Basic {
                user: user.to_owned(),
                password: password.to_owned(),
            })
        }
        _ => None,
    };
    let mut router = dashboard::router_with(
        queue.clone(),
        DashboardConfig::new().read_only(args.read_only),
    );
    let protected = auth.is_some();
    if let Some(auth) = auth {
        router = dashboard::require_auth(router, auth);
    }
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let address = listener.local_addr()?;
    eprintln!(
        "harel-jobs dashboard of schema {} on http://{address}/{}{}",
        queue.schema().name(),
        if args.read_only { " (read-only)" } else { "" },
        if protected {
            ""
        } else {
            " without authentication"
        },
    );
    if !protected && !address.ip().is_loopback() {
        eprintln!(
            "warning: anyone who reaches {address} can use the dashboard: consider --token or \
             --basic-auth"
        );
    }
    axum::serve(listener, router)
        .with_graceful_shutdown(stop_signal())
        .await?;
    Ok(())
}

/// Ctrl-C, or SIGTERM on Unix.
async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
