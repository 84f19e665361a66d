//! The attribute's arguments: `#[job(max_attempts = 5, priority = 2, timeout = "30s", …)]`.
//!
//! Parsing is in two layers. Syntax (`key = value`, or `unique` with an optional
//! parenthesised list, separated by commas) is a hard error: [`JobArgs::parse`] returns
//! `Err` and nothing of the arguments is used. Meaning (an unknown or repeated key, an
//! out-of-range number, a malformed duration) is collected in [`JobArgs::errors`], one
//! spanned error per mistake, and parsing goes on, so that one compile lists every mistake
//! and the valid keys still apply. The names of `unique(…)` are checked against the
//! function's parameters later, by [`UniqueArgs::resolve`], once the signature is known.

use std::time::Duration;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path, Token, parenthesized};

use crate::diagnostic::Errors;

mod kw {
    syn::custom_keyword!(max_attempts);
    syn::custom_keyword!(priority);
    syn::custom_keyword!(timeout);
    syn::custom_keyword!(backoff);
    syn::custom_keyword!(backoff_max);
    syn::custom_keyword!(kind);
    syn::custom_keyword!(retain);
    syn::custom_keyword!(unique);
    syn::custom_keyword!(hold);
    syn::custom_keyword!(queue);
    syn::custom_keyword!(derive);
}

/// The valid keys, as listed in the "unknown argument" error.
pub(crate) const KEYS: &str = "`max_attempts`, `priority`, `timeout`, `backoff`, `backoff_max`, `retain`, `unique`, `queue`, `kind`, `derive`, `crate`";

/// The traits the job struct always derives: `derive(…)` must not name them again.
const ALWAYS_DERIVED: [&str; 2] = ["Serialize", "Deserialize"];

/// The highest priority (`Priority::HIGHEST` in harel-jobs).
pub(crate) const MAX_PRIORITY: u8 = 4;

/// The first backoff delay when `backoff` is not given (`Backoff::DEFAULT` in harel-jobs).
pub(crate) const DEFAULT_BACKOFF: Duration = Duration::from_secs(2);

/// The backoff cap when `backoff_max` is not given (`Backoff::DEFAULT` in harel-jobs).
pub(crate) const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(3600);

/// The longest kind, in bytes (`transport::MAX_KIND_BYTES` in harel-jobs).
pub(crate) const MAX_KIND_BYTES: usize = 255;

/// The longest queue name, in characters (`transport::MAX_QUEUE_NAME_LEN` in harel-jobs).
pub(crate) const MAX_QUEUE_NAME_LEN: usize = 64;

/// The longest `retain` or `hold`: 100 years of 365.25 days (`transport::MAX_DELAY` in
/// harel-jobs, which refuses longer periods at run time).
pub(crate) const MAX_PERIOD: Duration = Duration::from_millis(3_155_760_000_000);

/// A value and the span of the literal it was read from, for errors that involve it later.
#[derive(Clone, Debug)]
pub(crate) struct Spanned<T> {
    pub(crate) value: T,
    pub(crate) span: Span,
}

/// The parsed arguments of one `#[job(…)]`. `None`: the key was not given (or was invalid,
/// in which case [`errors`](Self::errors) says why).
#[derive(Default)]
pub(crate) struct JobArgs {
    pub(crate) max_attempts: Option<Spanned<u32>>,
    pub(crate) priority: Option<Spanned<u8>>,
    pub(crate) timeout: Option<Spanned<Duration>>,
    pub(crate) backoff: Option<Spanned<Duration>>,
    pub(crate) backoff_max: Option<Spanned<Duration>>,
    pub(crate) retain: Option<Spanned<Duration>>,
    pub(crate) unique: Option<UniqueArgs>,
    pub(crate) kind: Option<Spanned<String>>,
    pub(crate) queue: Option<Spanned<String>>,
    /// The traits of `derive(…)`, as written (paths keep their spans, so that rustc reports
    /// an unknown trait, or a field that does not implement it, at the user's token).
    pub(crate) derives: Vec<Path>,
    pub(crate) krate: Option<Path>,
    /// Every meaningful mistake, each at its own span.
    pub(crate) errors: Errors,
    /// Keys seen so far, to report repetitions.
    seen: Vec<&'static str>,
}

impl Parse for JobArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = JobArgs::default();
        while !input.is_empty() {
            args.parse_one(input)?;
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        args.check_backoff();
        Ok(args)
    }
}

impl JobArgs {
    /// Parses one `key = value`.
    fn parse_one(&mut self, input: ParseStream<'_>) -> syn::Result<()> {
        let lookahead = input.lookahead1();
        if lookahead.peek(kw::max_attempts) {
            let key = input.parse::<kw::max_attempts>()?.span;
            let value = value(input)?;
            let parsed = parse_max_attempts(&value);
            if let Some(value) = self.accept("max_attempts", key, parsed) {
                self.max_attempts = Some(value);
            }
        } else if lookahead.peek(kw::priority) {
            let key = input.parse::<kw::priority>()?.span;
            let value = value(input)?;
            let parsed = parse_priority(&value);
            if let Some(value) = self.accept("priority", key, parsed) {
                self.priority = Some(value);
            }
        } else if lookahead.peek(kw::timeout) {
            let key = input.parse::<kw::timeout>()?.span;
            let value = value(input)?;
            let parsed = positive_duration("timeout", &value);
            if let Some(value) = self.accept("timeout", key, parsed) {
                self.timeout = Some(value);
            }
        } else if lookahead.peek(kw::retain) {
            let key = input.parse::<kw::retain>()?.span;
            let value = value(input)?;
            let parsed = period("retain", &value);
            if let Some(value) = self.accept("retain", key, parsed) {
                self.retain = Some(value);
            }
        } else if lookahead.peek(kw::unique) {
            let key = input.parse::<kw::unique>()?.span;
            let unique = UniqueArgs::parse(input, &mut self.errors)?;
            if self.seen_before("unique") {
                self.errors.push(repeated(key, "unique"));
            } else if let Some(unique) = unique {
                self.unique = Some(unique);
            }
        } else if lookahead.peek(kw::backoff_max) {
            let key = input.parse::<kw::backoff_max>()?.span;
            let value = value(input)?;
            let parsed = duration_value("backoff_max", &value);
            if let Some(value) = self.accept("backoff_max", key, parsed) {
                self.backoff_max = Some(value);
            }
        } else if lookahead.peek(kw::backoff) {
            let key = input.parse::<kw::backoff>()?.span;
            let value = value(input)?;
            let parsed = duration_value("backoff", &value);
            if let Some(value) = self.accept("backoff", key, parsed) {
                self.backoff = Some(value);
            }
        } else if lookahead.peek(kw::queue) {
            let key = input.parse::<kw::queue>()?.span;
            let value = value(input)?;
            let parsed = parse_queue(&value);
            if let Some(value) = self.accept("queue", key, parsed) {
                self.queue = Some(value);
            }
        } else if lookahead.peek(kw::kind) {
            let key = input.parse::<kw::kind>()?.span;
            let value = value(input)?;
            let parsed = parse_kind(&value);
            if let Some(value) = self.accept("kind", key, parsed) {
                self.kind = Some(value);
            }
        } else if lookahead.peek(kw::derive) {
            let key = input.parse::<kw::derive>()?.span;
            let derives = parse_derive(key, input, &mut self.errors)?;
            if self.seen_before("derive") {
                self.errors.push(repeated(key, "derive"));
            } else {
                self.derives = derives;
            }
        } else if lookahead.peek(Token![crate]) {
            let key = input.parse::<Token![crate]>()?.span;
            input.parse::<Token![=]>()?;
            let path = Path::parse_mod_style(input)?;
            if self.seen_before("crate") {
                self.errors.push(repeated(key, "crate"));
            } else {
                self.krate = Some(path);
            }
        } else if input.peek(Ident::peek_any) {
            let key = Ident::parse_any(input)?;
            self.errors.push(syn::Error::new(
                key.span(),
                format!("unknown #[job] argument `{key}`; the valid ones are {KEYS}"),
            ));
            // Skip its value, if any, to report the next argument too.
            if input.peek(Token![=]) {
                input.parse::<Token![=]>()?;
                input.parse::<Expr>()?;
            }
        } else {
            return Err(lookahead.error());
        }
        Ok(())
    }

    /// A parsed value to store, or `None` after recording why not (a repeated key keeps its
    /// first value).
    fn accept<T>(
        &mut self,
        name: &'static str,
        key: Span,
        parsed: syn::Result<Spanned<T>>,
    ) -> Option<Spanned<T>> {
        if self.seen_before(name) {
            self.errors.push(repeated(key, name));
            return None;
        }
        parsed.map_err(|error| self.errors.push(error)).ok()
    }

    /// Whether `name` was given already; records it otherwise.
    fn seen_before(&mut self, name: &'static str) -> bool {
        if self.seen.contains(&name) {
            return true;
        }
        self.seen.push(name);
        false
    }

    /// The rule across two keys: the cap is not below the first delay. Reported at the
    /// `backoff_max` literal (or at `backoff` when it exceeds the default cap).
    fn check_backoff(&mut self) {
        match (&self.backoff, &self.backoff_max) {
            (Some(base), Some(max)) if max.value < base.value => {
                self.errors.push(syn::Error::new(
                    max.span,
                    format!(
                        "`backoff_max` ({}) is shorter than `backoff` ({}): the cap must be at least the first delay",
                        show(max.value),
                        show(base.value)
                    ),
                ));
                self.backoff_max = None;
            }
            (None, Some(max)) if max.value < DEFAULT_BACKOFF => {
                self.errors.push(syn::Error::new(
                    max.span,
                    format!(
                        "`backoff_max` ({}) is shorter than the default `backoff` ({}): set `backoff` too",
                        show(max.value),
                        show(DEFAULT_BACKOFF)
                    ),
                ));
                self.backoff_max = None;
            }
            (Some(base), None) if base.value > DEFAULT_BACKOFF_MAX => {
                self.errors.push(syn::Error::new(
                    base.span,
                    format!(
                        "`backoff` ({}) is longer than the default `backoff_max` ({}): set `backoff_max` too",
                        show(base.value),
                        show(DEFAULT_BACKOFF_MAX)
                    ),
                ));
                self.backoff = None;
            }
            _ => {}
        }
    }

    /// The backoff to emit, if `backoff` or `backoff_max` was given: `(base, cap)`.
    pub(crate) fn backoff(&self) -> Option<(Duration, Duration)> {
        if self.backoff.is_none() && self.backoff_max.is_none() {
            return None;
        }
        let base = self.backoff.as_ref().map_or(DEFAULT_BACKOFF, |b| b.value);
        let max = self
            .backoff_max
            .as_ref()
            .map_or(DEFAULT_BACKOFF_MAX, |m| m.value);
        Some((base, max))
    }
}

/// The `unique` argument: `unique`, `unique(a, b)`, `unique(hold = "1h")`,
/// `unique(a, b, hold = "1h")`.
pub(crate) struct UniqueArgs {
    /// The parameters the key is made of, as written; `None`: the whole job is the key.
    /// Not yet checked against the function: see [`resolve`](Self::resolve).
    pub(crate) fields: Option<Vec<Ident>>,
    /// How long the key stays held after its job completed.
    pub(crate) hold: Option<Spanned<Duration>>,
}

/// One item of `unique(…)`.
enum UniqueItem {
    /// A parameter name.
    Name(Ident),
    /// `hold = value`.
    Hold { key: Span, value: Expr },
    /// Another `key = value`: reported, then skipped.
    Unknown(Ident),
}

impl Parse for UniqueItem {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.peek(kw::hold) && input.peek2(Token![=]) {
            let key = input.parse::<kw::hold>()?.span;
            let value = value(input)?;
            return Ok(Self::Hold { key, value });
        }
        // Any identifier, keywords included, so that `unique(type)` is "not a parameter"
        // rather than a syntax error.
        let name = Ident::parse_any(input)?;
        if input.peek(Token![=]) {
            value(input)?;
            return Ok(Self::Unknown(name));
        }
        Ok(Self::Name(name))
    }
}

impl UniqueArgs {
    /// Parses what follows the `unique` keyword: nothing, or `(…)`. `Ok(None)`: the
    /// argument is unusable, and `errors` says why.
    fn parse(input: ParseStream<'_>, errors: &mut Errors) -> syn::Result<Option<Self>> {
        if input.peek(Token![=]) {
            // `unique = true` and the like: a meaning error, the value skipped.
            let value = value(input)?;
            errors.push(syn::Error::new(
                value.span(),
                "`unique` takes no value: write `unique` (the whole job is the key) or `unique(user_id, …)` (these parameters are), optionally with `hold = \"1h\"` inside the parentheses",
            ));
            return Ok(None);
        }
        if !input.peek(syn::token::Paren) {
            return Ok(Some(Self {
                fields: None,
                hold: None,
            }));
        }
        let content;
        let parens = parenthesized!(content in input);
        let items = Punctuated::<UniqueItem, Token![,]>::parse_terminated(&content)?;
        let mut names: Vec<Ident> = Vec::new();
        let mut hold: Option<Spanned<Duration>> = None;
        let mut hold_seen = false;
        let mut valid = true;
        for item in items {
            match item {
                UniqueItem::Name(name) => {
                    if hold_seen {
                        errors.push(syn::Error::new(
                            name.span(),
                            format!(
                                "`{name}` comes after `hold`: list the parameters first, e.g. `unique({name}, hold = \"1h\")`"
                            ),
                        ));
                        valid = false;
                    } else if names.iter().any(|seen| seen.unraw() == name.unraw()) {
                        errors.push(syn::Error::new(
                            name.span(),
                            format!("`{}` is named more than once in `unique(…)`", name.unraw()),
                        ));
                    } else {
                        names.push(name);
                    }
                }
                UniqueItem::Hold { key, value } => {
                    if hold_seen {
                        errors.push(repeated(key, "hold"));
                        continue;
                    }
                    hold_seen = true;
                    match period("hold", &value) {
                        Ok(period) => hold = Some(period),
                        Err(error) => {
                            errors.push(error);
                            valid = false;
                        }
                    }
                }
                UniqueItem::Unknown(name) => {
                    errors.push(syn::Error::new(
                        name.span(),
                        format!(
                            "unknown argument `{name}` in `unique(…)`: list parameter names, then optionally `hold = \"1h\"`"
                        ),
                    ));
                    valid = false;
                }
            }
        }
        if names.is_empty() && !hold_seen && valid {
            errors.push(syn::Error::new(
                parens.span.join(),
                "`unique()` names no parameter: write `unique` to make the whole job the key, or name the parameters of the key, e.g. `unique(user_id)`",
            ));
            return Ok(None);
        }
        Ok(valid.then(|| Self {
            fields: (!names.is_empty()).then_some(names),
            hold,
        }))
    }

    /// The indexes in `fields` (the job struct's fields, in order) of the parameters the key
    /// is made of, in the order written; `None` for the whole job. Each name that is not a
    /// field is an error in `errors`: `context` (the name of the `JobContext` parameter, if
    /// any) gets its own message.
    pub(crate) fn resolve(
        &self,
        fields: &[&Ident],
        context: Option<&Ident>,
        errors: &mut Errors,
    ) -> Option<Vec<usize>> {
        let names = self.fields.as_ref()?;
        let valid = if fields.is_empty() {
            "the function has none: write `unique` to make the whole job the key".to_owned()
        } else {
            let list: Vec<String> = fields
                .iter()
                .map(|field| format!("`{}`", field.unraw()))
                .collect();
            format!("the valid ones are {}", list.join(", "))
        };
        let mut indexes = Vec::with_capacity(names.len());
        for name in names {
            let wanted = name.unraw();
            if let Some(index) = fields.iter().position(|field| field.unraw() == wanted) {
                indexes.push(index);
            } else if context.is_some_and(|context| context.unraw() == wanted) {
                errors.push(syn::Error::new(
                    name.span(),
                    format!(
                        "`{wanted}` is the job context, which is not stored in the job and cannot be part of its unique key; {valid}"
                    ),
                ));
            } else {
                errors.push(syn::Error::new(
                    name.span(),
                    format!(
                        "`{wanted}` in `unique(…)` is not a parameter of the function; {valid}"
                    ),
                ));
            }
        }
        Some(indexes)
    }
}

/// What follows the `derive` keyword: `(Trait, path::Trait, …)`. The list is returned less
/// the traits that are mistakes (each recorded in `errors`): a trait the job struct derives
/// already, a repeated one, an empty list, or `derive = …`.
fn parse_derive(key: Span, input: ParseStream<'_>, errors: &mut Errors) -> syn::Result<Vec<Path>> {
    if input.peek(Token![=]) {
        let value = value(input)?;
        errors.push(syn::Error::new(
            value.span(),
            "`derive` takes a list of traits in parentheses, e.g. `derive(Clone, Debug)`",
        ));
        return Ok(Vec::new());
    }
    if !input.peek(syn::token::Paren) {
        errors.push(syn::Error::new(
            key,
            "`derive` needs a list of traits in parentheses, e.g. `derive(Clone, Debug)`",
        ));
        return Ok(Vec::new());
    }
    let content;
    parenthesized!(content in input);
    let paths =
        Punctuated::<Path, Token![,]>::parse_terminated_with(&content, Path::parse_mod_style)?;
    if paths.is_empty() {
        errors.push(syn::Error::new(
            key,
            "`derive()` names no trait: list the traits to derive, e.g. `derive(Clone, Debug)`, or leave `derive` out",
        ));
    }
    let mut kept: Vec<Path> = Vec::with_capacity(paths.len());
    for path in paths {
        let last = path
            .segments
            .last()
            .map(|segment| segment.ident.unraw().to_string())
            .unwrap_or_default();
        if ALWAYS_DERIVED.contains(&last.as_str()) {
            errors.push(syn::Error::new(
                path.span(),
                format!(
                    "the job struct always derives serde's `Serialize` and `Deserialize` (through harel-jobs): remove `{last}` from `derive(…)`"
                ),
            ));
        } else if kept.iter().any(|seen| same_path(seen, &path)) {
            errors.push(syn::Error::new(
                path.span(),
                format!("`{last}` is named more than once in `derive(…)`"),
            ));
        } else {
            kept.push(path);
        }
    }
    Ok(kept)
}

/// Whether two paths are written the same (raw or not).
fn same_path(a: &Path, b: &Path) -> bool {
    a.leading_colon.is_some() == b.leading_colon.is_some()
        && a.segments.len() == b.segments.len()
        && a.segments
            .iter()
            .zip(&b.segments)
            .all(|(a, b)| a.ident.unraw() == b.ident.unraw())
}

/// `= value`. The value is read as any expression, so that a wrong kind of value (a path,
/// a negative number) is a spanned error about that key rather than a syntax error.
fn value(input: ParseStream<'_>) -> syn::Result<Expr> {
    input.parse::<Token![=]>()?;
    input.parse()
}

fn repeated(key: Span, name: &str) -> syn::Error {
    syn::Error::new(key, format!("`{name}` is given more than once"))
}

fn int_literal<'a>(value: &'a Expr, expected: &str) -> syn::Result<&'a syn::LitInt> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => Ok(lit),
        other => Err(syn::Error::new(other.span(), expected)),
    }
}

fn str_literal<'a>(value: &'a Expr, expected: &str) -> syn::Result<&'a LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit),
        other => Err(syn::Error::new(other.span(), expected)),
    }
}

fn parse_max_attempts(value: &Expr) -> syn::Result<Spanned<u32>> {
    const RANGE: &str =
        "`max_attempts` must be an integer from 1 to 4294967295, e.g. `max_attempts = 5`";
    let lit = int_literal(value, RANGE)?;
    let attempts = lit
        .base10_parse::<u32>()
        .map_err(|_| syn::Error::new(lit.span(), RANGE))?;
    if attempts == 0 {
        return Err(syn::Error::new(
            lit.span(),
            "`max_attempts` must be at least 1: it counts the first attempt",
        ));
    }
    Ok(Spanned {
        value: attempts,
        span: lit.span(),
    })
}

fn parse_priority(value: &Expr) -> syn::Result<Spanned<u8>> {
    const RANGE: &str =
        "`priority` must be an integer from 0 (lowest) to 4 (highest); the default is 2";
    let lit = int_literal(value, RANGE)?;
    match lit.base10_parse::<u8>() {
        Ok(priority) if priority <= MAX_PRIORITY => Ok(Spanned {
            value: priority,
            span: lit.span(),
        }),
        _ => Err(syn::Error::new(lit.span(), RANGE)),
    }
}

/// `queue = "mail"`: checked by the rule of `harel_ensure_queue`.
fn parse_queue(value: &Expr) -> syn::Result<Spanned<String>> {
    let lit = str_literal(
        value,
        "`queue` must be a string literal, e.g. `queue = \"mail\"`",
    )?;
    let queue = lit.value();
    let valid = !queue.is_empty()
        && queue.len() <= MAX_QUEUE_NAME_LEN
        && queue
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if !valid {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`queue` must be 1 to {MAX_QUEUE_NAME_LEN} ASCII letters, digits, '_', '-', '.' or ':'"
            ),
        ));
    }
    Ok(Spanned {
        value: queue,
        span: lit.span(),
    })
}

fn parse_kind(value: &Expr) -> syn::Result<Spanned<String>> {
    let lit = str_literal(
        value,
        "`kind` must be a string literal, e.g. `kind = \"billing.charge\"`",
    )?;
    let kind = lit.value();
    let problem = if kind.is_empty() {
        Some("`kind` cannot be empty: it is the stable name jobs are stored under".to_owned())
    } else if kind.len() > MAX_KIND_BYTES {
        Some(format!(
            "`kind` is {} bytes long; the limit is {MAX_KIND_BYTES}",
            kind.len()
        ))
    } else if kind.contains('\0') {
        Some("`kind` cannot contain a NUL character".to_owned())
    } else {
        None
    };
    match problem {
        Some(message) => Err(syn::Error::new(lit.span(), message)),
        None => Ok(Spanned {
            value: kind,
            span: lit.span(),
        }),
    }
}

/// A duration longer than zero (`timeout`).
fn positive_duration(name: &str, value: &Expr) -> syn::Result<Spanned<Duration>> {
    let duration = duration_value(name, value)?;
    if duration.value.is_zero() {
        return Err(syn::Error::new(
            duration.span,
            format!("`{name}` must be longer than zero"),
        ));
    }
    Ok(duration)
}

/// A duration longer than zero and at most [`MAX_PERIOD`] (`retain`, `hold`).
fn period(name: &str, value: &Expr) -> syn::Result<Spanned<Duration>> {
    let duration = positive_duration(name, value)?;
    if duration.value > MAX_PERIOD {
        return Err(syn::Error::new(
            duration.span,
            format!("`{name}` is at most 100 years (\"{}\")", show(MAX_PERIOD)),
        ));
    }
    Ok(duration)
}

fn duration_value(name: &str, value: &Expr) -> syn::Result<Spanned<Duration>> {
    let lit = str_literal(
        value,
        &format!("`{name}` must be a duration string, e.g. `{name} = \"30s\"`"),
    )?;
    match parse_duration(&lit.value()) {
        Ok(duration) => Ok(Spanned {
            value: duration,
            span: lit.span(),
        }),
        Err(problem) => Err(syn::Error::new(
            lit.span(),
            format!("invalid `{name}` {:?}: {problem}", lit.value()),
        )),
    }
}

/// Parses a duration: one or more `<integer><unit>` with the units `ms`, `s`, `m`, `h`,
/// added up (`"500ms"`, `"30s"`, `"1h30m"`). No spaces, signs or fractions.
///
/// # Errors
/// A message saying what is wrong (without the input, which the caller quotes).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    const EXPECTED: &str =
        "write an integer and a unit (ms, s, m or h), e.g. \"500ms\", \"30s\", \"5m\", \"1h30m\"";
    if text.is_empty() {
        return Err(format!("it is empty; {EXPECTED}"));
    }
    let mut total_ms: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("expected a number at {rest:?}; {EXPECTED}"));
        }
        let (number, after) = rest.split_at(digits);
        let number: u64 = number
            .parse()
            .map_err(|_| format!("{number} is too large"))?;
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let ms_per_unit: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "" => {
                return Err(match after.chars().next() {
                    None => format!("{number} has no unit; {EXPECTED}"),
                    Some('.' | ',') => {
                        "fractions are not supported; use a smaller unit (\"1500ms\", not \"1.5s\")"
                            .to_owned()
                    }
                    Some(c) if c.is_whitespace() => format!("remove the spaces; {EXPECTED}"),
                    Some(c) => format!("unexpected {c:?}; {EXPECTED}"),
                });
            }
            other => return Err(format!("unknown unit {other:?}; {EXPECTED}")),
        };
        total_ms = number
            .checked_mul(ms_per_unit)
            .and_then(|ms| total_ms.checked_add(ms))
            .ok_or_else(|| "it is too long".to_owned())?;
        rest = after;
    }
    Ok(Duration::from_millis(total_ms))
}

/// A duration as it would be written in the attribute (largest exact unit).
pub(crate) fn show(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms == 0 {
        "0s".to_owned()
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;
    use syn::parse_quote;

    fn parse(tokens: proc_macro2::TokenStream) -> JobArgs {
        syn::parse2(tokens).expect("syntax is valid")
    }

    fn messages(args: &JobArgs) -> Vec<String> {
        args.errors.messages()
    }

    fn names(unique: &UniqueArgs) -> Option<Vec<String>> {
        unique
            .fields
            .as_ref()
            .map(|names| names.iter().map(ToString::to_string).collect())
    }

    /// `unique(…)`'s fields resolved against the parameters `fields` (and a context `ctx`).
    fn resolve(
        tokens: proc_macro2::TokenStream,
        fields: &[&str],
    ) -> (Option<Vec<usize>>, Vec<String>) {
        let args = parse(tokens);
        assert!(args.errors.is_empty(), "{:?}", messages(&args));
        let fields: Vec<Ident> = fields
            .iter()
            .map(|name| syn::parse_str(name).unwrap())
            .collect();
        let fields: Vec<&Ident> = fields.iter().collect();
        let context: Ident = parse_quote!(ctx);
        let mut errors = Errors::default();
        let resolved =
            args.unique
                .expect("unique is given")
                .resolve(&fields, Some(&context), &mut errors);
        (resolved, errors.messages())
    }

    #[test]
    fn empty() {
        let args: JobArgs = parse_quote!();
        assert!(args.errors.is_empty());
        assert!(args.max_attempts.is_none() && args.priority.is_none());
        assert!(args.krate.is_none() && args.kind.is_none());
        assert_eq!(args.backoff(), None);
    }

    #[test]
    fn every_key() {
        let args: JobArgs = parse_quote!(
            max_attempts = 5,
            priority = 4,
            timeout = "30s",
            backoff = "500ms",
            backoff_max = "10m",
            retain = "24h",
            unique(user_id, hold = "1h"),
            kind = "billing.charge",
            crate = ::my::jobs,
        );
        assert!(args.errors.is_empty(), "{:?}", messages(&args));
        assert_eq!(args.max_attempts.as_ref().unwrap().value, 5);
        assert_eq!(args.priority.as_ref().unwrap().value, 4);
        assert_eq!(
            args.timeout.as_ref().unwrap().value,
            Duration::from_secs(30)
        );
        assert_eq!(
            args.backoff(),
            Some((Duration::from_millis(500), Duration::from_secs(600)))
        );
        assert_eq!(
            args.retain.as_ref().unwrap().value,
            Duration::from_secs(86_400)
        );
        let unique = args.unique.as_ref().unwrap();
        assert_eq!(names(unique), Some(vec!["user_id".to_owned()]));
        assert_eq!(
            unique.hold.as_ref().unwrap().value,
            Duration::from_secs(3600)
        );
        assert_eq!(args.kind.as_ref().unwrap().value, "billing.charge");
        assert_eq!(
            args.krate.unwrap().to_token_stream().to_string(),
            ":: my :: jobs"
        );
    }

    #[test]
    fn backoff_defaults() {
        let args: JobArgs = parse_quote!(backoff = "1s");
        assert_eq!(
            args.backoff(),
            Some((Duration::from_secs(1), DEFAULT_BACKOFF_MAX))
        );
        let args: JobArgs = parse_quote!(backoff_max = "5m");
        assert_eq!(
            args.backoff(),
            Some((DEFAULT_BACKOFF, Duration::from_secs(300)))
        );
    }

    #[test]
    fn unknown_key_lists_valid_keys() {
        let args: JobArgs = parse_quote!(retries = 3, priority = 1);
        assert_eq!(
            messages(&args),
            [format!(
                "unknown #[job] argument `retries`; the valid ones are {KEYS}"
            )]
        );
        // the valid key after it still applies
        assert_eq!(args.priority.as_ref().unwrap().value, 1);
        // a bare unknown key too
        let args: JobArgs = parse_quote!(retry);
        assert_eq!(messages(&args).len(), 1);
    }

    #[test]
    fn repeated_key() {
        let args: JobArgs = parse_quote!(priority = 1, priority = 3);
        assert_eq!(messages(&args), ["`priority` is given more than once"]);
        assert_eq!(args.priority.as_ref().unwrap().value, 1);
        let args: JobArgs = parse_quote!(crate = a, crate = b);
        assert_eq!(messages(&args), ["`crate` is given more than once"]);
    }

    #[test]
    fn derive_lists_traits() {
        let args: JobArgs = parse_quote!(derive(Clone, Debug, ::core::hash::Hash,), priority = 1);
        assert!(args.errors.is_empty(), "{:?}", messages(&args));
        let derives: Vec<String> = args
            .derives
            .iter()
            .map(|path| path.to_token_stream().to_string())
            .collect();
        assert_eq!(derives, ["Clone", "Debug", ":: core :: hash :: Hash"]);
        assert_eq!(args.priority.as_ref().unwrap().value, 1);
    }

    #[test]
    fn derive_errors() {
        let args: JobArgs = parse_quote!(derive());
        assert_eq!(
            messages(&args),
            [
                "`derive()` names no trait: list the traits to derive, e.g. `derive(Clone, Debug)`, or leave `derive` out"
            ]
        );
        let args: JobArgs =
            parse_quote!(derive(Clone, Serialize, serde::Deserialize, Clone, Debug));
        assert_eq!(
            messages(&args),
            [
                "the job struct always derives serde's `Serialize` and `Deserialize` (through harel-jobs): remove `Serialize` from `derive(…)`",
                "the job struct always derives serde's `Serialize` and `Deserialize` (through harel-jobs): remove `Deserialize` from `derive(…)`",
                "`Clone` is named more than once in `derive(…)`",
            ]
        );
        assert_eq!(args.derives.len(), 2);
        let args: JobArgs = parse_quote!(derive = Clone, priority = 1);
        assert_eq!(
            messages(&args),
            ["`derive` takes a list of traits in parentheses, e.g. `derive(Clone, Debug)`"]
        );
        assert_eq!(args.priority.as_ref().unwrap().value, 1);
        let args: JobArgs = parse_quote!(derive);
        assert_eq!(messages(&args).len(), 1);
        let args: JobArgs = parse_quote!(derive(Clone), derive(Debug));
        assert_eq!(messages(&args), ["`derive` is given more than once"]);
        assert_eq!(args.derives.len(), 1);
        for source in ["derive(\"Clone\")", "derive(Clone Debug)", "derive[Clone]"] {
            assert!(
                syn::parse_str::<JobArgs>(source).is_err(),
                "{source} should not parse"
            );
        }
    }

    #[test]
    fn bad_values_are_all_reported() {
        let args: JobArgs = parse_quote!(
            max_attempts = 0,
            priority = 5,
            timeout = "30",
            backoff = 2,
            kind = "",
        );
        assert_eq!(
            messages(&args),
            [
                "`max_attempts` must be at least 1: it counts the first attempt",
                "`priority` must be an integer from 0 (lowest) to 4 (highest); the default is 2",
                "invalid `timeout` \"30\": 30 has no unit; write an integer and a unit (ms, s, m or h), e.g. \"500ms\", \"30s\", \"5m\", \"1h30m\"",
                "`backoff` must be a duration string, e.g. `backoff = \"30s\"`",
                "`kind` cannot be empty: it is the stable name jobs are stored under",
            ]
        );
        assert!(args.max_attempts.is_none() && args.priority.is_none());
    }

    #[test]
    fn bad_integers() {
        for tokens in [
            quote::quote!(max_attempts = "5"),
            quote::quote!(max_attempts = -1),
            quote::quote!(max_attempts = 1.5),
            quote::quote!(max_attempts = 99999999999),
        ] {
            let args = parse(tokens);
            assert_eq!(
                messages(&args),
                ["`max_attempts` must be an integer from 1 to 4294967295, e.g. `max_attempts = 5`"]
            );
        }
        let args: JobArgs = parse_quote!(priority = 300);
        assert_eq!(messages(&args).len(), 1);
    }

    #[test]
    fn zero_timeout() {
        let args: JobArgs = parse_quote!(timeout = "0s");
        assert_eq!(messages(&args), ["`timeout` must be longer than zero"]);
    }

    #[test]
    fn zero_or_too_long_retain() {
        let args: JobArgs = parse_quote!(retain = "0ms");
        assert_eq!(messages(&args), ["`retain` must be longer than zero"]);
        assert!(args.retain.is_none());
        let args: JobArgs = parse_quote!(retain = "876601h");
        assert_eq!(
            messages(&args),
            ["`retain` is at most 100 years (\"876600h\")"]
        );
        let args: JobArgs = parse_quote!(retain = "876600h");
        assert!(args.errors.is_empty());
        let args: JobArgs = parse_quote!(retain = 24);
        assert_eq!(
            messages(&args),
            ["`retain` must be a duration string, e.g. `retain = \"30s\"`"]
        );
        let args: JobArgs = parse_quote!(retain = "1h", retain = "2h");
        assert_eq!(messages(&args), ["`retain` is given more than once"]);
        assert_eq!(
            args.retain.as_ref().unwrap().value,
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn unique_forms() {
        let args: JobArgs = parse_quote!(unique);
        let unique = args.unique.as_ref().unwrap();
        assert_eq!(names(unique), None);
        assert!(unique.hold.is_none());

        let args: JobArgs = parse_quote!(unique(user_id, day), priority = 1);
        assert!(args.errors.is_empty(), "{:?}", messages(&args));
        let unique = args.unique.as_ref().unwrap();
        assert_eq!(
            names(unique),
            Some(vec!["user_id".to_owned(), "day".to_owned()])
        );
        assert!(unique.hold.is_none());
        assert_eq!(args.priority.as_ref().unwrap().value, 1);

        let args: JobArgs = parse_quote!(unique(hold = "1h30m"));
        let unique = args.unique.as_ref().unwrap();
        assert_eq!(names(unique), None);
        assert_eq!(
            unique.hold.as_ref().unwrap().value,
            Duration::from_secs(5400)
        );

        // a trailing comma; a parameter named `hold`; a raw name
        let args: JobArgs = parse_quote!(unique(hold, r#type, hold = "5m",));
        assert!(args.errors.is_empty(), "{:?}", messages(&args));
        let unique = args.unique.as_ref().unwrap();
        assert_eq!(
            names(unique),
            Some(vec!["hold".to_owned(), "r#type".to_owned()])
        );
        assert_eq!(
            unique.hold.as_ref().unwrap().value,
            Duration::from_secs(300)
        );
    }

    #[test]
    fn unique_errors() {
        let args: JobArgs = parse_quote!(unique());
        assert_eq!(
            messages(&args),
            [
                "`unique()` names no parameter: write `unique` to make the whole job the key, or name the parameters of the key, e.g. `unique(user_id)`"
            ]
        );
        assert!(args.unique.is_none());

        // a repeated name is reported, the first kept
        let args: JobArgs = parse_quote!(unique(a, b, a));
        assert_eq!(
            messages(&args),
            ["`a` is named more than once in `unique(…)`"]
        );
        assert_eq!(
            names(args.unique.as_ref().unwrap()),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        let args: JobArgs = parse_quote!(unique(r#a, a));
        assert_eq!(messages(&args).len(), 1);

        let args: JobArgs = parse_quote!(unique(a, hold = "0s"));
        assert_eq!(messages(&args), ["`hold` must be longer than zero"]);
        assert!(args.unique.is_none());

        let args: JobArgs = parse_quote!(unique(hold = "1h", hold = "2h"));
        assert_eq!(messages(&args), ["`hold` is given more than once"]);
        assert_eq!(
            args.unique.as_ref().unwrap().hold.as_ref().unwrap().value,
            Duration::from_secs(3600)
        );

        let args: JobArgs = parse_quote!(unique(hold = "1h", a));
        assert_eq!(
            messages(&args),
            ["`a` comes after `hold`: list the parameters first, e.g. `unique(a, hold = \"1h\")`"]
        );

        let args: JobArgs = parse_quote!(unique(a, keep = "1h"));
        assert_eq!(
            messages(&args),
            [
                "unknown argument `keep` in `unique(…)`: list parameter names, then optionally `hold = \"1h\"`"
            ]
        );
        assert!(args.unique.is_none());

        let args: JobArgs = parse_quote!(unique = true, priority = 1);
        assert_eq!(messages(&args).len(), 1);
        assert!(messages(&args)[0].starts_with("`unique` takes no value"));
        assert!(args.unique.is_none());
        assert_eq!(args.priority.as_ref().unwrap().value, 1);

        let args: JobArgs = parse_quote!(unique(a), unique);
        assert_eq!(messages(&args), ["`unique` is given more than once"]);
        assert_eq!(
            names(args.unique.as_ref().unwrap()),
            Some(vec!["a".to_owned()])
        );

        let args: JobArgs = parse_quote!(unique(hold = "1s", hold = 5, b = 1, hold = "0s"));
        assert_eq!(messages(&args).len(), 3, "{:?}", messages(&args));
    }

    #[test]
    fn unique_names_are_parameters() {
        let (resolved, errors) = resolve(
            quote::quote!(unique(day, user_id)),
            &["user_id", "day", "note"],
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(resolved, Some(vec![1, 0]));

        let (resolved, errors) = resolve(quote::quote!(unique(hold = "1h")), &["user_id"]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(resolved, None);

        // raw or not, the same parameter
        let (resolved, errors) =
            resolve(quote::quote!(unique(r#type, r#kind)), &["r#type", "kind"]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(resolved, Some(vec![0, 1]));

        let (resolved, errors) =
            resolve(quote::quote!(unique(user, ctx, day)), &["user_id", "day"]);
        assert_eq!(
            errors,
            [
                "`user` in `unique(…)` is not a parameter of the function; the valid ones are `user_id`, `day`",
                "`ctx` is the job context, which is not stored in the job and cannot be part of its unique key; the valid ones are `user_id`, `day`",
            ]
        );
        assert_eq!(resolved, Some(vec![1]));

        let (_, errors) = resolve(quote::quote!(unique(a)), &[]);
        assert_eq!(
            errors,
            [
                "`a` in `unique(…)` is not a parameter of the function; the function has none: write `unique` to make the whole job the key"
            ]
        );
    }

    #[test]
    fn long_or_nul_kind() {
        let long = "k".repeat(MAX_KIND_BYTES + 1);
        let args = parse(quote::quote!(kind = #long));
        assert_eq!(
            messages(&args),
            ["`kind` is 256 bytes long; the limit is 255"]
        );
        let args: JobArgs = parse_quote!(kind = "a\0b");
        assert_eq!(messages(&args), ["`kind` cannot contain a NUL character"]);
    }

    #[test]
    fn queue_names() {
        let args: JobArgs = parse_quote!(queue = "mail.eu-1");
        assert!(messages(&args).is_empty());
        assert_eq!(args.queue.map(|q| q.value).as_deref(), Some("mail.eu-1"));
        for bad in ["", "no spaces", "é"] {
            let args: JobArgs = parse_quote!(queue = #bad);
            assert_eq!(
                messages(&args),
                ["`queue` must be 1 to 64 ASCII letters, digits, '_', '-', '.' or ':'"],
                "{bad:?}"
            );
        }
        let long = "q".repeat(MAX_QUEUE_NAME_LEN + 1);
        let args = parse(quote::quote!(queue = #long));
        assert_eq!(messages(&args).len(), 1);
    }

    #[test]
    fn backoff_cap_below_base() {
        let args: JobArgs = parse_quote!(backoff = "10s", backoff_max = "5s");
        assert_eq!(
            messages(&args),
            [
                "`backoff_max` (5s) is shorter than `backoff` (10s): the cap must be at least the first delay"
            ]
        );
        let args: JobArgs = parse_quote!(backoff_max = "1s");
        assert_eq!(
            messages(&args),
            ["`backoff_max` (1s) is shorter than the default `backoff` (2s): set `backoff` too"]
        );
        let args: JobArgs = parse_quote!(backoff = "2h");
        assert_eq!(
            messages(&args),
            ["`backoff` (2h) is longer than the default `backoff_max` (1h): set `backoff_max` too"]
        );
    }

    #[test]
    fn syntax_errors_are_hard_errors() {
        for source in [
            "priority",
            "priority 3",
            "crate = \"x\"",
            "5",
            "priority = 1 kind = \"k\"",
            "unique(a b)",
            "unique(1)",
            "unique(a, hold = )",
            "unique[a]",
            "unique(a) priority = 1",
            "retain",
        ] {
            assert!(
                syn::parse_str::<JobArgs>(source).is_err(),
                "{source} should not parse"
            );
        }
    }

    #[test]
    fn durations() {
        let ok = [
            ("0ms", 0),
            ("500ms", 500),
            ("30s", 30_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
            ("1h30m", 5_400_000),
            ("1m30s250ms", 90_250),
        ];
        for (text, ms) in ok {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
        let bad = [
            ("", "it is empty"),
            ("30", "30 has no unit"),
            ("s", "expected a number at \"s\""),
            ("1.5s", "fractions are not supported"),
            ("1d", "unknown unit \"d\""),
            ("1 s", "remove the spaces"),
            ("1s+", "expected a number at \"+\""),
            ("1s/", "expected a number"),
            ("5m!", "expected a number"),
            ("-1s", "expected a number"),
            ("99999999999999999999s", "is too large"),
            ("9999999999999999h", "it is too long"),
        ];
        for (text, start) in bad {
            let error = parse_duration(text).unwrap_err();
            assert!(error.contains(start), "{text}: {error}");
        }
    }

    #[test]
    fn show_uses_the_largest_exact_unit() {
        assert_eq!(show(Duration::ZERO), "0s");
        assert_eq!(show(Duration::from_millis(1500)), "1500ms");
        assert_eq!(show(Duration::from_secs(90)), "90s");
        assert_eq!(show(Duration::from_secs(120)), "2m");
        assert_eq!(show(Duration::from_secs(7200)), "2h");
    }
}
