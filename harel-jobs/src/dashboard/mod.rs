//! The web dashboard (feature `dashboard`): server-rendered pages over the public
//! [`Client`] API, as an [`axum::Router`] an application mounts under its own prefix and
//! behind its own authentication, or served alone by `harel-jobs dashboard`.
//!
//! ```no_run
//! # async fn example(client: harel_jobs::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use harel_jobs::dashboard::{self, DashboardConfig};
//!
//! let config = DashboardConfig::new()
//!     .mounted_at("/admin/jobs")
//!     .allowed_hosts(["jobs.example.com", "127.0.0.1:8080"])?; // the names browsers use
//! let admin = dashboard::router_with(client, config);
//! let app = axum::Router::new().nest("/admin/jobs", admin); // behind the app's own auth
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! Pages: an overview (depth, jobs per minute as a chart, worker pools seen recently,
//! running jobs, latest dead letters), queues (pause, resume) and their fairness keys
//! (set a key's weight), jobs newest first by state, kind, group and queue with keyset
//! pagination and a search by id, a job's page (cancel, run now), groups (cancel a group),
//! dead letters (retry, delete, one, the ticked ones, or all a filter matches in batches),
//! schedules (stale ones marked; pause, resume, trigger now). Every page's work is bounded whatever the queue holds:
//! the same bounded calls as the library's (see [`Client::jobs`], [`Client::groups`],
//! [`Stats`](crate::Stats)). The overview, the jobs list, a job's page and the queues page
//! refresh themselves while open (the script fetches the page again every 5 s, paused while
//! the reader acts or the tab is hidden); every page works at 400 px wide and follows the
//! system's dark scheme.
//!
//! Actions are POSTs carrying a CSRF token (a random value the router makes when it is
//! built, shown only inside its own pages); a POST without it is refused (403). With
//! [`DashboardConfig::read_only`] there are no actions at all. Assets (one stylesheet, a
//! few lines of JavaScript) are embedded; the pages load nothing from elsewhere. The
//! router itself has no authentication unless given one ([`DashboardConfig::auth`]:
//! a bearer token or basic auth, as `harel-jobs dashboard` offers); serving it without is
//! the operator's choice.
//!
//! DNS rebinding: with [`DashboardConfig::allowed_hosts`] every request (GET included)
//! whose `Host` is not one of the dashboard's names is refused with 421 before any page
//! is rendered, so a web page that has pointed a name of its own at the dashboard's address
//! can neither read the CSRF token nor post a form. Every POST must also come from the
//! dashboard's own pages: its `Origin` (or, without one, `Sec-Fetch-Site: same-origin` or
//! a same-origin `Referer`) must match the request's `Host` or an allowed name, or it is
//! refused with 403. Mounted in an application without `allowed_hosts`, the router cannot
//! know its names and answers any `Host`: set them, unless the application's own
//! authentication (a cookie or basic auth, which a browser never sends to another name)
//! already keeps other names out. `harel-jobs dashboard` always sets them.

mod actions;
mod auth;
mod hosts;
mod html;
mod pages;
mod workflows;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};

pub use auth::{Auth, require_auth};
use hosts::{Guard, HostPort};

use crate::client::Client;
use crate::error::{ClientError, DatabaseError};

/// What is wrong with a dashboard's configuration: found when it is built, never at a
/// request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DashboardError {
    /// A bearer token that is empty or only whitespace (it would let anyone in).
    #[error("the bearer token is empty")]
    EmptyToken,
    /// A basic auth user name that is empty or only whitespace.
    #[error("the basic auth user name is empty")]
    EmptyUser,
    /// A basic auth password that is empty or only whitespace.
    #[error("the basic auth password is empty")]
    EmptyPassword,
    /// A basic auth user name with a `:` (HTTP basic auth cannot carry it).
    #[error("a basic auth user name cannot hold ':'")]
    ColonInUser,
    /// An allowed host that is not a host name or address with an optional port.
    #[error(
        "{host:?} is not a host name: {reason} (give a name or an address, with a port or \
         not: jobs.internal, jobs.internal:8080, 10.0.0.5, [::1]:8080)"
    )]
    InvalidHost {
        /// The entry as given.
        host: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// How [`router_with`] builds the dashboard.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct DashboardConfig {
    /// No actions: pages only, every POST refused (default `false`).
    pub read_only: bool,
    /// The path the application nests the router at (`/admin/jobs`; default: the root).
    pub mounted_at: String,
    /// The names requests must be addressed to (empty: any; see [`Self::allowed_hosts`]).
    allowed_hosts: Vec<HostPort>,
    /// Who may see the dashboard (`None`: anyone who reaches it).
    auth: Option<Auth>,
}

impl DashboardConfig {
    /// Actions allowed, mounted at the root.
    pub fn new() -> Self {
        Self::default()
    }

    /// Pages only: no buttons, and every POST refused with 403.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// The path the router is nested at, so its links and forms point there (a trailing
    /// `/` is dropped).
    pub fn mounted_at(mut self, path: impl Into<String>) -> Self {
        self.mounted_at = path.into().trim_end_matches('/').to_owned();
        self
    }

    /// Answers only requests addressed to one of `hosts` (added to those given before):
    /// every other request, GET included, gets 421 before any page is rendered. An entry
    /// is a name or an address, with a port or not: `jobs.internal` (any port),
    /// `jobs.internal:8080`, `127.0.0.1:8080`, `[::1]:8080`, `localhost:8080`. Give every
    /// name the browsers use (the one in the address bar), including the address and port
    /// the server listens on if people browse to it. Without any, every `Host` is answered:
    /// a DNS rebinding page can then read the pages, so set them unless the application's
    /// authentication keeps other names out (see the [module](self)).
    ///
    /// # Errors
    /// [`DashboardError::InvalidHost`] for an entry that is not a host name or address
    /// (a URL with a scheme or a path, a bad port).
    pub fn allowed_hosts<I>(mut self, hosts: I) -> Result<Self, DashboardError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        for host in hosts {
            let host = host.as_ref().trim();
            let parsed = HostPort::parse(host).map_err(|reason| DashboardError::InvalidHost {
                host: host.to_owned(),
                reason,
            })?;
            self.allowed_hosts.push(parsed);
        }
        Ok(self)
    }

    /// Asks every request for `auth` (a bearer token or basic auth; build it with
    /// [`Auth::bearer`] or [`Auth::basic`]): 401 otherwise. A request to a name not in
    /// [`Self::allowed_hosts`] is refused before it is asked, so a rebinding page cannot
    /// make the browser prompt for the password under its own name.
    pub fn auth(mut self, auth: Auth) -> Self {
        self.auth = Some(auth);
        self
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) client: Client,
    pub(crate) csrf: Arc<str>,
    pub(crate) read_only: bool,
    pub(crate) base: Arc<str>,
}

/// The dashboard of `client`, actions allowed, mounted at the root.
pub fn router(client: Client) -> Router {
    router_with(client, DashboardConfig::new())
}

/// The dashboard of `client`, as `config` says.
pub fn router_with(client: Client, config: DashboardConfig) -> Router {
    let state = Ctx {
        client,
        csrf: actions::new_csrf_token().into(),
        read_only: config.read_only,
        base: config.mounted_at.into(),
    };
    let pages = Router::new()
        .route("/", get(pages::overview))
        .route("/queues", get(pages::queues))
        .route("/queues/pause", post(actions::pause_queue))
        .route("/queues/resume", post(actions::resume_queue))
        .route("/queues/keys", get(pages::queue_keys))
        .route("/queues/weight", post(actions::set_weight))
        .route("/queues/key-limit", post(actions::set_key_limit))
        .route("/jobs", get(pages::jobs))
        .route(
            "/jobs/cancel-all",
            get(pages::cancel_all).post(actions::cancel_all),
        )
        .route("/jobs/{id}", get(pages::job))
        .route("/jobs/{id}/cancel", post(actions::cancel_job))
        .route("/jobs/{id}/run-now", post(actions::run_now))
        .route("/groups", get(pages::groups))
        .route("/groups/show", get(pages::group))
        .route("/groups/cancel", post(actions::cancel_group))
        .route("/dead", get(pages::dead_letters))
        .route("/dead/{id}", get(pages::dead_letter))
        .route("/dead/retry", post(actions::retry_dead))
        .route("/dead/delete", post(actions::delete_dead))
        .route("/dead/all", post(actions::dead_all))
        .route("/schedules", get(pages::schedules))
        .route("/schedules/{action}", post(actions::control_schedule))
        .route("/workflows", get(workflows::list))
        .route("/workflows/{id}", get(workflows::show))
        .route("/workflows/{id}/cancel", post(workflows::cancel))
        .route("/workflows/{id}/retry", post(workflows::retry))
        .route("/assets/style.css", get(style))
        .route("/assets/app.js", get(script))
        .fallback(not_found)
        .with_state(state);
    let pages = match config.auth {
        Some(auth) => require_auth(pages, auth),
        None => pages,
    };
    // outermost but for the headers: a foreign name is refused before anything else
    let guard = Arc::new(Guard {
        allowed: config.allowed_hosts,
    });
    pages
        .layer(axum::middleware::from_fn_with_state(guard, hosts::check))
        .layer(axum::middleware::map_response(security_headers))
}

/// Headers on every response: no framing (clickjacking), scripts and styles from the
/// dashboard only (and fetches: the live parts of a page re-read the page itself), no
/// referrer to other sites, no caching of pages that show jobs.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        // not `no-referrer`: under it browsers send `Origin: null` with the dashboard's own
        // form POSTs (Chromium does), and the origin check needs the real one
        HeaderValue::from_static("same-origin"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", include_str!("assets/style.css"))
}

async fn script() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        body,
    )
        .into_response()
}

async fn not_found() -> PageError {
    PageError::NotFound("no such page".into())
}

/// Why a page or an action failed: shown as a small page with its status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum PageError {
    /// What was asked for does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// A malformed request (400).
    #[error("{0}")]
    BadRequest(String),
    /// A POST without the right CSRF token, or any POST in read-only mode (403).
    #[error("{0}")]
    Forbidden(&'static str),
    /// The client's call failed (500, or 503 when the database is unreachable).
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl From<DatabaseError> for PageError {
    fn from(error: DatabaseError) -> Self {
        Self::Client(ClientError::Database(error))
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = match &self {
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Client(ClientError::Database(error)) if error.is_connection() => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Client(ClientError::InvalidArgument(_)) => StatusCode::BAD_REQUEST,
            Self::Client(ClientError::UnknownQueue(_) | ClientError::UnknownSchedule(_)) => {
                StatusCode::NOT_FOUND
            }
            Self::Client(ClientError::SchedulePaused(_)) => StatusCode::CONFLICT,
            Self::Client(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let body = format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{code} · harel-jobs</title></head><body>\
             <p class=\"error\">{code}: {message}</p></body></html>",
            code = status.as_u16(),
            message = html::escape(&self.to_string()),
        );
        (status, Html(body)).into_response()
    }
}
