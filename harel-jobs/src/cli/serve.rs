//! `harel-jobs dashboard`: the dashboard's router served alone, until Ctrl-C or SIGTERM.

use std::net::SocketAddr;

use super::args::DashboardArgs;
use super::error::CliError;
use crate::client::Client;
use crate::dashboard::{self, Auth, DashboardConfig, DashboardError};

/// The credentials `args` give (`None`: none asked for).
///
/// # Errors
/// [`CliError::InvalidArgument`] for an empty or blank token, a `--basic-auth` without a
/// `:`, or with an empty or blank user or password: serving would let anyone in.
fn auth(args: &DashboardArgs) -> Result<Option<Auth>, CliError> {
    if let Some(token) = &args.token {
        return Auth::bearer(token.as_str()).map(Some).map_err(|_| {
            CliError::InvalidArgument(
                "the dashboard's token (--token or HAREL_DASHBOARD_TOKEN) is empty: give a long \
                 random one, or unset it to serve without authentication",
            )
        });
    }
    let Some(pair) = &args.basic_auth else {
        return Ok(None);
    };
    let (user, password) = pair.split_once(':').ok_or(CliError::InvalidArgument(
        "--basic-auth takes USER:PASSWORD",
    ))?;
    Auth::basic(user, password).map(Some).map_err(|error| {
        CliError::InvalidArgument(match error {
            DashboardError::EmptyUser => {
                "the user of --basic-auth (or HAREL_DASHBOARD_BASIC_AUTH) is empty: give \
                 USER:PASSWORD"
            }
            DashboardError::EmptyPassword => {
                "the password of --basic-auth (or HAREL_DASHBOARD_BASIC_AUTH) is empty: give \
                 USER:PASSWORD"
            }
            _ => "--basic-auth takes USER:PASSWORD",
        })
    })
}

/// The names the dashboard on `address` answers to: the address itself, with a loopback or
/// unspecified one the local names, and the operator's.
fn allowed_hosts(address: SocketAddr, extra: &[String]) -> Vec<String> {
    let port = address.port();
    let mut hosts = vec![address.to_string()];
    if address.ip().is_loopback() || address.ip().is_unspecified() {
        for local in ["localhost", "127.0.0.1", "[::1]"] {
            let host = format!("{local}:{port}");
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
    }
    hosts.extend(
        extra
            .iter()
            .map(|host| host.trim().to_owned())
            .filter(|host| !host.is_empty()),
    );
    hosts
}

/// The dashboard's configuration for `address` as `args` say.
fn config(args: &DashboardArgs, address: SocketAddr) -> Result<DashboardConfig, CliError> {
    let mut config = DashboardConfig::new()
        .read_only(args.read_only)
        .allowed_hosts(allowed_hosts(address, &args.allowed_hosts))
        .map_err(|error| CliError::InvalidHost(error.to_string()))?;
    if let Some(auth) = auth(args)? {
        config = config.auth(auth);
    }
    Ok(config)
}

/// Checks `args` before anything else is done (no database reached, no port bound):
/// empty credentials and malformed host names are refused at start.
///
/// # Errors
/// As [`serve`]'s, but for binding.
pub(crate) fn check(args: &DashboardArgs) -> Result<(), CliError> {
    config(args, args.listen).map(|_| ())
}

/// Serves the dashboard of `queue` as `args` say.
///
/// # Errors
/// [`CliError::InvalidArgument`] for empty credentials or a `--basic-auth` without a `:`,
/// [`CliError::InvalidHost`] for a malformed `--allowed-host`; [`CliError::Io`] if the
/// address cannot be bound.
pub(crate) async fn serve(client: &Client, args: DashboardArgs) -> Result<(), CliError> {
    check(&args)?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let address = listener.local_addr()?;
    // the port is known once bound (--listen …:0)
    let config = config(&args, address)?;
    let protected = args.token.is_some() || args.basic_auth.is_some();
    let router = dashboard::router_with(client.clone(), config);
    eprintln!(
        "harel-jobs dashboard of schema {} on http://{address}/{}{}",
        client.schema().name(),
        if args.read_only { " (read-only)" } else { "" },
        if protected {
            ""
        } else {
            " without authentication"
        },
    );
    eprintln!(
        "answering to Host {} (more with --allowed-host)",
        allowed_hosts(address, &args.allowed_hosts).join(", ")
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
