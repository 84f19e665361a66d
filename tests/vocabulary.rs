//! The macro crate's copies of the vocabulary, held equal to the originals.
//!
//! `#[job]` checks its arguments at compile time against limits and defaults of
//! harel-jobs (the highest priority, the longest kind and queue name, the longest period,
//! the default backoff). A procedural-macro crate can export only macros, so
//! `harel-jobs-macros/src/args.rs` keeps copies of them; this test reads each copy from that
//! source and compares it with the original, so that a copy that drifts fails here rather
//! than letting `#[job]` accept what the queue refuses (or the reverse).

use std::time::Duration;

use harel_jobs::transport::{MAX_DELAY, MAX_KIND_BYTES, MAX_QUEUE_NAME_LEN};
use harel_jobs::{Backoff, Priority};

/// The macro crate's source, as it is compiled.
const ARGS: &str = include_str!("../harel-jobs-macros/src/args.rs");

/// The value of `pub(crate) const NAME: TYPE = VALUE;` in [`ARGS`], digit separators
/// dropped.
fn copied(name: &str) -> String {
    let start = format!("pub(crate) const {name}: ");
    let line = ARGS
        .lines()
        .find(|line| line.starts_with(&start))
        .unwrap_or_else(|| panic!("harel-jobs-macros/src/args.rs no longer declares {name}"));
    let (_, value) = line
        .split_once(" = ")
        .unwrap_or_else(|| panic!("{name}: no value in {line:?}"));
    value.trim_end_matches(';').trim().replace('_', "")
}

/// A copied integer.
fn integer(name: &str) -> u128 {
    let text = copied(name);
    text.parse()
        .unwrap_or_else(|_| panic!("{name}: {text:?} is not an integer literal"))
}

/// A copied `Duration::from_secs(n)` or `Duration::from_millis(n)`.
fn duration(name: &str) -> Duration {
    let text = copied(name);
    let number = |constructor: &str| {
        text.strip_prefix(constructor)
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|n| n.parse::<u64>().ok())
    };
    if let Some(secs) = number("Duration::fromsecs(") {
        Duration::from_secs(secs)
    } else if let Some(millis) = number("Duration::frommillis(") {
        Duration::from_millis(millis)
    } else {
        panic!("{name}: {text:?} is neither Duration::from_secs(n) nor Duration::from_millis(n)")
    }
}

#[test]
fn the_macro_crate_s_limits_are_the_queue_s() {
    assert_eq!(
        integer("MAX_PRIORITY"),
        u128::from(Priority::HIGHEST.get()),
        "MAX_PRIORITY"
    );
    assert_eq!(
        integer("MAX_KIND_BYTES"),
        MAX_KIND_BYTES as u128,
        "MAX_KIND_BYTES"
    );
    assert_eq!(
        integer("MAX_QUEUE_NAME_LEN"),
        MAX_QUEUE_NAME_LEN as u128,
        "MAX_QUEUE_NAME_LEN"
    );
    assert_eq!(duration("MAX_PERIOD"), MAX_DELAY, "MAX_PERIOD");
}

#[test]
fn the_macro_crate_s_default_backoff_is_the_queue_s() {
    assert_eq!(
        duration("DEFAULT_BACKOFF"),
        Backoff::DEFAULT.base(),
        "DEFAULT_BACKOFF"
    );
    assert_eq!(
        duration("DEFAULT_BACKOFF_MAX"),
        Backoff::DEFAULT.max(),
        "DEFAULT_BACKOFF_MAX"
    );
}
