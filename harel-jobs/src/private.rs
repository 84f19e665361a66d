//! What `#[job]`'s expansion names. Not public API: no stability promise.

pub use serde;
/// For the `PgExecutor` bound of the generated `enqueue` methods (so the user's crate need
/// not depend on sqlx).
pub use sqlx;

pub use crate::job_error::IntoJobResult;

/// The group id of a `#[group]` parameter: the job kind, `:`, and the value's `Display`.
///
/// Namespaced by kind, so `#[group] user_id` of two job types makes two groups; use
/// `.group(…)` at enqueue to share one group across types.
pub fn group_id<T: std::fmt::Display + ?Sized>(kind: &str, value: &T) -> String {
    format!("{kind}:{value}")
}

/// Makes rustc point at the `#[group]` parameter when its type has no `Display`.
pub fn assert_group_display<T: std::fmt::Display + ?Sized>() {}

/// The fairness key of a `#[fair_key]` parameter: the value's `Display`, as is (not
/// namespaced by kind: a tenant is shared across job kinds).
pub fn fair_key<T: std::fmt::Display + ?Sized>(value: &T) -> String {
    value.to_string()
}

/// Makes rustc point at the `#[fair_key]` parameter when its type has no `Display`.
pub fn assert_fair_key_display<T: std::fmt::Display + ?Sized>() {}

/// Makes rustc point at the user's return type when it is not a valid job result.
pub fn assert_job_result<T: IntoJobResult>() {}

/// The priority of `#[job(priority = N)]`. The macro checks `N <= 4` at compile time, so
/// the panic is unreachable from generated code.
pub fn priority(value: u8) -> crate::Priority {
    match crate::Priority::new(value) {
        Ok(priority) => priority,
        Err(error) => panic!("#[job]: {error}"),
    }
}

/// The unique key of `#[job(unique)]` / `#[job(unique(a, b))]`: the job kind, `:`, and the
/// chosen fields (or the whole job) as JSON. Serialising cannot fail for a job that was
/// serialised as its payload; if it did, the empty key is refused at enqueue
/// ([`InvalidMessage::InvalidUniqueKey`](crate::InvalidMessage::InvalidUniqueKey)).
pub fn unique_key<T: serde::Serialize + ?Sized>(kind: &str, fields: &T) -> String {
    match serde_json::to_string(fields) {
        Ok(json) => format!("{kind}:{json}"),
        Err(_) => String::new(),
    }
}
