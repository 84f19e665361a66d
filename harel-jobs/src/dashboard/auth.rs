//! Optional authentication for a dashboard served alone (`harel-jobs dashboard`): a bearer
//! token or HTTP basic auth, checked on every request. Empty credentials are refused when
//! an [`Auth`] is made: an empty token would let in anyone who sends `Bearer `.

use std::fmt;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

use super::DashboardError;
use super::actions::constant_time_eq;

/// Who may see the dashboard, made by [`Auth::bearer`] or [`Auth::basic`] (which refuse
/// empty credentials). Its `Debug` never shows the secret.
#[derive(Clone)]
#[non_exhaustive]
pub enum Auth {
    /// `Authorization: Bearer <token>` (for scripts and proxies).
    #[non_exhaustive]
    Bearer(String),
    /// HTTP basic auth (the browser asks for a user and password).
    #[non_exhaustive]
    Basic {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bearer(_) => f.write_str("Auth::Bearer(***)"),
            Self::Basic { user, .. } => {
                write!(f, "Auth::Basic {{ user: {user:?}, password: *** }}")
            }
        }
    }
}

/// Whether `text` is empty or only whitespace.
fn blank(text: &str) -> bool {
    text.trim().is_empty()
}

impl Auth {
    /// `Authorization: Bearer <token>`, the token without the whitespace around it (a
    /// header value cannot carry it).
    ///
    /// # Errors
    /// [`DashboardError::EmptyToken`] if `token` is empty or only whitespace.
    pub fn bearer(token: impl Into<String>) -> Result<Self, DashboardError> {
        let token = token.into();
        if blank(&token) {
            return Err(DashboardError::EmptyToken);
        }
        Ok(Self::Bearer(token.trim().to_owned()))
    }

    /// HTTP basic auth with `user` and `password` (taken as they are).
    ///
    /// # Errors
    /// [`DashboardError::EmptyUser`] or [`DashboardError::EmptyPassword`] if either is
    /// empty or only whitespace, [`DashboardError::ColonInUser`] if `user` holds a `:`.
    pub fn basic(
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Result<Self, DashboardError> {
        let (user, password) = (user.into(), password.into());
        if blank(&user) {
            return Err(DashboardError::EmptyUser);
        }
        if user.contains(':') {
            return Err(DashboardError::ColonInUser);
        }
        if blank(&password) {
            return Err(DashboardError::EmptyPassword);
        }
        Ok(Self::Basic { user, password })
    }

    /// Whether the request's `Authorization` header satisfies it.
    fn allows(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(value) = authorization.and_then(|v| v.to_str().ok()) else {
            return false;
        };
        match self {
            Self::Bearer(token) => value
                .strip_prefix("Bearer ")
                .is_some_and(|given| constant_time_eq(given.trim().as_bytes(), token.as_bytes())),
            Self::Basic { user, password } => {
                let Some(encoded) = value.strip_prefix("Basic ") else {
                    return false;
                };
                let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim())
                else {
                    return false;
                };
                let expected = format!("{user}:{password}");
                constant_time_eq(&decoded, expected.as_bytes())
            }
        }
    }

    fn challenge(&self) -> &'static str {
        match self {
            Self::Bearer(_) => "Bearer",
            Self::Basic { .. } => "Basic realm=\"harel-jobs\", charset=\"UTF-8\"",
        }
    }
}

/// `router` with every request checked against `auth`: 401 with a challenge otherwise.
/// Prefer [`DashboardConfig::auth`](super::DashboardConfig::auth), which checks the
/// `Host` first.
pub fn require_auth(router: Router, auth: Auth) -> Router {
    let auth = Arc::new(auth);
    router.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let auth = Arc::clone(&auth);
            async move {
                if auth.allows(request.headers().get(header::AUTHORIZATION)) {
                    next.run(request).await
                } else {
                    unauthorised(auth.challenge())
                }
            }
        },
    ))
}

fn unauthorised(challenge: &'static str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
        "401: authentication required",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(value: &str) -> HeaderValue {
        HeaderValue::from_str(value).unwrap()
    }

    #[test]
    fn empty_credentials_are_refused() {
        for token in ["", " ", "\t\n"] {
            assert_eq!(Auth::bearer(token).err(), Some(DashboardError::EmptyToken));
        }
        assert_eq!(Auth::basic("", "").err(), Some(DashboardError::EmptyUser));
        assert_eq!(
            Auth::basic(" ", "pw").err(),
            Some(DashboardError::EmptyUser)
        );
        assert_eq!(
            Auth::basic("ops", "").err(),
            Some(DashboardError::EmptyPassword)
        );
        assert_eq!(
            Auth::basic("ops", "  ").err(),
            Some(DashboardError::EmptyPassword)
        );
        assert_eq!(
            Auth::basic("o:ps", "pw").err(),
            Some(DashboardError::ColonInUser)
        );
        let auth = Auth::bearer(" s3cret\n").unwrap();
        assert!(auth.allows(Some(&header("Bearer s3cret"))));
        assert!(!auth.allows(Some(&header("Bearer "))));
    }

    #[test]
    fn a_bearer_token_must_match_exactly() {
        let auth = Auth::bearer("s3cret").unwrap();
        assert!(auth.allows(Some(&header("Bearer s3cret"))));
        assert!(!auth.allows(Some(&header("Bearer s3cre"))));
        assert!(!auth.allows(Some(&header("Basic s3cret"))));
        assert!(!auth.allows(None));
        assert!(!format!("{auth:?}").contains("s3cret"));
    }

    #[test]
    fn basic_auth_checks_user_and_password() {
        let auth = Auth::basic("ops", "pw:with:colons").unwrap();
        let encode = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert!(auth.allows(Some(&header(&format!(
            "Basic {}",
            encode("ops:pw:with:colons")
        )))));
        assert!(!auth.allows(Some(&header(&format!("Basic {}", encode("ops:pw"))))));
        assert!(!auth.allows(Some(&header(&format!(
            "Basic {}",
            encode("x:pw:with:colons")
        )))));
        assert!(!auth.allows(Some(&header("Basic !!!"))));
        assert!(!format!("{auth:?}").contains("colons"));
    }
}
