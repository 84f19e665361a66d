//! Which requests the dashboard answers at all: the `Host` of every request against the
//! names it serves (DNS rebinding), and where every POST comes from (`Origin`, or failing
//! that `Sec-Fetch-Site` or `Referer`) against the request's own `Host`.
//!
//! A DNS rebinding attack points a name the attacker owns (`evil.example`) at 127.0.0.1
//! once the victim's browser has loaded the attacker's page: from then on the browser
//! treats the dashboard as part of `evil.example`, so the page may read the dashboard's
//! pages (CSRF token included) and post its forms, with `Host: evil.example:8080` and an
//! `Origin` that matches it. Only the `Host` header gives that away: the dashboard's own
//! names never appear in such a request. So the `Host` is checked on every request, GET
//! included, whenever the names are known ([`DashboardConfig::allowed_hosts`]; the command
//! line always knows them). The `Origin` check on POSTs stops a page of another origin
//! that has the CSRF token somehow; it cannot tell a rebinding apart by itself.
//!
//! [`DashboardConfig::allowed_hosts`]: super::DashboardConfig::allowed_hosts

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The longest host name taken (DNS names are at most 253 characters, and a port).
const MAX_LEN: usize = 260;

/// A host name or address, lowercase, with a port or not: from the configuration, a `Host`
/// header, or the authority of an `Origin` or `Referer`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostPort {
    /// A DNS name (one trailing dot dropped), an IPv4 address, or an IPv6 address in
    /// brackets, in canonical form.
    host: String,
    /// The port, if given.
    port: Option<u16>,
}

impl HostPort {
    /// Parses `name`, `name:port`, `[v6]`, `[v6]:port`, or a bare IPv6 address (no port).
    ///
    /// # Errors
    /// What is wrong with `text`, in a few words.
    pub(crate) fn parse(text: &str) -> Result<Self, &'static str> {
        if text.is_empty() {
            return Err("it is empty");
        }
        if text.len() > MAX_LEN {
            return Err("it is too long");
        }
        if text.contains('/') {
            return Err("give the host name alone, not a URL");
        }
        if let Some(rest) = text.strip_prefix('[') {
            let (inner, after) = rest.split_once(']').ok_or("a '[' without its ']'")?;
            let address: Ipv6Addr = inner.parse().map_err(|_| "not an IPv6 address in [ ]")?;
            let port = match after {
                "" => None,
                _ => Some(parse_port(
                    after.strip_prefix(':').ok_or("something after ']'")?,
                )?),
            };
            return Ok(Self {
                host: format!("[{address}]"),
                port,
            });
        }
        if let Ok(address) = text.parse::<Ipv6Addr>() {
            return Ok(Self {
                host: format!("[{address}]"),
                port: None,
            });
        }
        let (name, port) = match text.split_once(':') {
            Some((name, port)) => (name, Some(parse_port(port)?)),
            None => (text, None),
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        if name.is_empty() {
            return Err("no host name");
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        {
            return Err("a host name holds only letters, digits, '-', '.' and '_'");
        }
        let host = match name.parse::<Ipv4Addr>() {
            Ok(address) => address.to_string(),
            Err(_) => name.to_ascii_lowercase(),
        };
        Ok(Self { host, port })
    }

    /// Whether a request to `other` is one this entry allows: the same host, and the same
    /// port unless this entry names none. A request without a port (the scheme's default)
    /// matches an entry with port 80 or 443.
    fn allows(&self, other: &Self) -> bool {
        self.host == other.host
            && match (self.port, other.port) {
                (None, _) => true,
                (Some(mine), Some(theirs)) => mine == theirs,
                (Some(mine), None) => mine == 80 || mine == 443,
            }
    }

    /// Whether `self` (a `Host`) and `origin` (of scheme default port `default`) name the
    /// same host and port.
    fn same_as(&self, origin: &Self, default: u16) -> bool {
        self.host == origin.host && self.port.unwrap_or(default) == origin.port.unwrap_or(default)
    }
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

fn parse_port(text: &str) -> Result<u16, &'static str> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the port is not a number");
    }
    text.parse().map_err(|_| "the port is above 65535")
}

/// The authority of a serialised origin or of a URL (`Origin`, `Referer`), with its
/// scheme's default port; `None` unless it is an `http` or `https` URL with a host.
fn url_authority(url: &str) -> Option<(HostPort, u16)> {
    let (rest, default) = if let Some(rest) = url.strip_prefix("http://") {
        (rest, 80)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (rest, 443)
    } else {
        return None;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return None;
    }
    HostPort::parse(authority).ok().map(|host| (host, default))
}

/// What the check knows: the names the dashboard answers to (none: any `Host`).
#[derive(Debug, Default)]
pub(crate) struct Guard {
    pub(crate) allowed: Vec<HostPort>,
}

impl Guard {
    fn allows(&self, host: &HostPort) -> bool {
        self.allowed.iter().any(|entry| entry.allows(host))
    }

    /// Whether a POST to `host` comes from a page of the dashboard itself.
    fn same_origin(&self, headers: &HeaderMap, host: &HostPort) -> Result<(), Refusal> {
        // the browser's own word: a page of another origin, or of another site, or none
        let site = one(headers, &HeaderName::from_static("sec-fetch-site"))?;
        if let Some(site) = site.filter(|site| *site != "same-origin") {
            return Err(Refusal::CrossOrigin(format!(
                "Sec-Fetch-Site: {}",
                printable(site)
            )));
        }
        // a proxy in front may rewrite `Host`: the operator's names count as ours too
        let ours = |url: &str| {
            url_authority(url).is_some_and(|(origin, default)| {
                host.same_as(&origin, default) || self.allows(&origin)
            })
        };
        let origin = one(headers, &header::ORIGIN)?;
        if let Some(origin) = origin.filter(|origin| *origin != "null") {
            return if ours(origin) {
                Ok(())
            } else {
                Err(Refusal::CrossOrigin(format!(
                    "Origin: {}",
                    printable(origin)
                )))
            };
        }
        // `Origin: null` is what a browser sends under `Referrer-Policy: no-referrer` (an
        // application around the router may set it), and also from a sandboxed frame or a
        // file: only the browser's same-origin settles it
        if site.is_some() {
            return Ok(());
        }
        if origin.is_some() {
            return Err(Refusal::CrossOrigin("Origin: null".to_owned()));
        }
        // no Origin at all: browsers of before 2020, or a script
        match one(headers, &header::REFERER)? {
            Some(referer) if ours(referer) => Ok(()),
            Some(referer) => Err(Refusal::CrossOrigin(format!(
                "Referer: {}",
                printable(referer)
            ))),
            None => Err(Refusal::NoOrigin),
        }
    }
}

/// The value of a header sent at most once, as text.
fn one<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Result<Option<&'a str>, Refusal> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Refusal::Malformed("a header sent twice"));
    }
    value
        .to_str()
        .map(Some)
        .map_err(|_| Refusal::Malformed("a header that is not text"))
}

/// `text` if it is short printable ASCII, for a message; a placeholder otherwise.
fn printable(text: &str) -> String {
    if text.len() <= MAX_LEN && text.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        format!("{text:?}")
    } else {
        "(unprintable)".to_owned()
    }
}

/// The host the request is for: its target's authority (absolute form) and its `Host`
/// header, which must agree.
fn request_host(request: &Request) -> Result<Option<HostPort>, Refusal> {
    let header = one(request.headers(), &header::HOST)?
        .map(|host| HostPort::parse(host).map_err(|_| Refusal::UnknownHost(Some(printable(host)))))
        .transpose()?;
    let target = request
        .uri()
        .authority()
        .map(|authority| {
            HostPort::parse(authority.as_str())
                .map_err(|_| Refusal::UnknownHost(Some(printable(authority.as_str()))))
        })
        .transpose()?;
    match (header, target) {
        (Some(header), Some(target)) if header != target => {
            Err(Refusal::Malformed("Host and the request's target disagree"))
        }
        (header, target) => Ok(target.or(header)),
    }
}

/// Why a request is refused before any page or action sees it.
#[derive(Debug)]
enum Refusal {
    /// A `Host` the dashboard does not answer to (or none): 421.
    UnknownHost(Option<String>),
    /// A POST from another origin: 403.
    CrossOrigin(String),
    /// A POST that does not say where it comes from: 403.
    NoOrigin,
    /// Headers no browser sends: 400.
    Malformed(&'static str),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            Self::UnknownHost(host) => (
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "421 Misdirected Request: this dashboard does not answer to the host name \
                     {}. If that name is yours, allow it (harel-jobs dashboard --allowed-host, \
                     HAREL_DASHBOARD_ALLOWED_HOSTS, or DashboardConfig::allowed_hosts); \
                     otherwise a web page may be trying to reach the dashboard through DNS \
                     rebinding.\n",
                    host.as_deref().unwrap_or("(none given)")
                ),
            ),
            Self::CrossOrigin(from) => (
                StatusCode::FORBIDDEN,
                format!(
                    "403 Forbidden: this POST does not come from the dashboard's own pages \
                     ({from}). Use the buttons of the dashboard itself.\n"
                ),
            ),
            Self::NoOrigin => (
                StatusCode::FORBIDDEN,
                "403 Forbidden: this POST does not say where it comes from (no Origin, \
                 Sec-Fetch-Site or Referer header; every browser sends Origin). A script must \
                 send `Origin: http://<the Host it sends>`.\n"
                    .to_owned(),
            ),
            Self::Malformed(what) => (
                StatusCode::BAD_REQUEST,
                format!("400 Bad Request: {what}.\n"),
            ),
        };
        (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            message,
        )
            .into_response()
    }
}

/// The middleware: the `Host` of every request (when names are configured), and where
/// every POST comes from.
pub(crate) async fn check(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    match admit(&guard, &request) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

fn admit(guard: &Guard, request: &Request) -> Result<(), Refusal> {
    let host = request_host(request)?;
    if !guard.allowed.is_empty() && !host.as_ref().is_some_and(|host| guard.allows(host)) {
        return Err(Refusal::UnknownHost(
            host.map(|host| printable(&host.to_string())),
        ));
    }
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return Ok(());
    }
    let host = host.ok_or(Refusal::UnknownHost(None))?;
    guard.same_origin(request.headers(), &host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(text: &str) -> HostPort {
        HostPort::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn hosts_parse_and_normalise() {
        assert_eq!(hp("LocalHost:8080").to_string(), "localhost:8080");
        assert_eq!(hp("jobs.example.com.").to_string(), "jobs.example.com");
        assert_eq!(hp("[::1]:80").to_string(), "[::1]:80");
        assert_eq!(hp("[0:0:0:0:0:0:0:1]").to_string(), "[::1]");
        assert_eq!(hp("::1").to_string(), "[::1]");
        assert_eq!(hp("127.0.0.1:9").to_string(), "127.0.0.1:9");
        for bad in [
            "", ":80", "a b", "http://x", "x/y", "x:", "x:http", "x:65536", "[::1", "[x]",
            "[::1]x", "u@x", "x:1:2",
        ] {
            assert!(HostPort::parse(bad).is_err(), "{bad:?}");
        }
        assert!(HostPort::parse(&"a".repeat(300)).is_err());
    }

    #[test]
    fn entries_without_a_port_allow_any() {
        assert!(hp("jobs.internal").allows(&hp("jobs.internal:8080")));
        assert!(hp("jobs.internal").allows(&hp("JOBS.internal")));
        assert!(hp("127.0.0.1:8080").allows(&hp("127.0.0.1:8080")));
        assert!(!hp("127.0.0.1:8080").allows(&hp("127.0.0.1:8081")));
        assert!(!hp("127.0.0.1:8080").allows(&hp("127.0.0.1")));
        assert!(hp("jobs.internal:443").allows(&hp("jobs.internal")));
        assert!(!hp("jobs.internal").allows(&hp("jobs.internal.evil.example")));
        assert!(!hp("localhost:8080").allows(&hp("evil.example:8080")));
    }

    #[test]
    fn origins_and_referers_name_their_authority() {
        assert_eq!(
            url_authority("http://127.0.0.1:8080"),
            Some((hp("127.0.0.1:8080"), 80))
        );
        assert_eq!(
            url_authority("https://jobs.example.com/dead?x#y"),
            Some((hp("jobs.example.com"), 443))
        );
        assert_eq!(url_authority("null"), None);
        assert_eq!(url_authority("file:///etc"), None);
        assert_eq!(url_authority("http://user@evil.example"), None);
        assert!(hp("127.0.0.1:80").same_as(&hp("127.0.0.1"), 80));
        assert!(!hp("127.0.0.1:8080").same_as(&hp("127.0.0.1"), 80));
    }
}
