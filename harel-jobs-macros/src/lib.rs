//! The `#[job]` attribute of [harel-jobs](https://docs.rs/harel-jobs).
//!
//! Use it through `harel_jobs::job`; this crate is an implementation detail of harel-jobs
//! and its version moves with it. The attribute's reference is on [`macro@job`].
//!
//! The crate is thin: `args` parses the attribute, `signature` checks the function and takes
//! its parameters apart, `expand` writes the generated items.
#![warn(missing_docs)]

mod args;
mod diagnostic;
mod expand;
mod signature;

use proc_macro::TokenStream;

/// Turns an `async fn` into a typed job of harel-jobs: a struct of its arguments that can be
/// enqueued (in the caller's transaction) and run by a worker pool.
///
/// *The examples here are `ignore`d: this crate cannot depend on harel-jobs for doctests.
/// The same code is compiled by the tests of `harel-jobs-macros` (`tests/expand.rs`,
/// `tests/ui/pass/`).*
///
/// ```ignore
/// use harel_jobs::{job, JobContext, JobResult};
///
/// /// Sends the welcome mail.
/// #[job(max_attempts = 5, priority = 3, timeout = "30s")]
/// async fn send_welcome_email(
///     ctx: JobContext<AppState>,
///     #[group] user_id: i64,
///     template: String,
/// ) -> JobResult {
///     ctx.state().mailer.send(user_id, &template).await?;
///     Ok(())
/// }
///
/// // Inside the application's transaction: the job exists if and only if it commits.
/// let id = SendWelcomeEmail { user_id: 42, template: "hi".into() }
///     .enqueue(&mut *tx)
///     .await?;
/// // With options, on a pool:
/// SendWelcomeEmail { user_id: 42, template: "hi".into() }
///     .enqueue(&pool)
///     .delay(Duration::from_secs(60))
///     .priority(4)
///     .await?;
/// // Many in one round trip:
/// let ids = SendWelcomeEmail::enqueue_many(&pool, jobs).await?;
/// ```
///
/// # The function
///
/// - It must be `async`, not generic, without `self`.
/// - Its first parameter may be the job context, `JobContext<S>` (recognised by the last
///   segment of its type path, so `harel_jobs::JobContext<S>` works too): `S` is the worker
///   pool's shared state, and the job runs only on a pool whose state is `S`. Without a
///   context parameter the job runs on a pool of any state.
/// - Every other parameter is a plain name with an owned, serialisable type (no
///   references: take `String`, not `&str`). Each becomes a field of the job struct, stored
///   as JSON with the job. To add a parameter to a job that may already be queued, make it
///   an `Option<T>`: stored jobs without it read back as `None`. Removing one is safe.
/// - It returns `()`, `JobResult`, or any `Result<(), E>` with `E: Into<JobError>` (any
///   error type, or `JobError` for "do not retry", "retry after", "snooze"). An `Err` is a
///   failed attempt.
/// - It stays an ordinary function: call it directly in unit tests, e.g. with
///   `JobContext::for_test(state)`.
///
/// # Arguments
///
/// | key | value | default |
/// | --- | --- | --- |
/// | `max_attempts` | integer, at least 1 | the pool's default |
/// | `priority` | integer from 0 (lowest) to 4 (highest); applies when the job creates its group | 2 (`Priority::NORMAL`) |
/// | `timeout` | duration string, longer than zero | the pool's default |
/// | `backoff` | duration string: the first retry delay, doubling after each failed attempt | the pool's default, `"2s"` |
/// | `backoff_max` | duration string: the cap of the doubling | `"1h"` |
/// | `retain` | duration string, longer than zero, at most 100 years: how long completed jobs of this type stay in the queue's history | the pool's `retain_completed`, else none (deleted at once) |
/// | `unique` | bare, or a list of parameters, optionally with `hold = "<duration>"`: see [Unique jobs](#unique-jobs) | not unique |
/// | `kind` | string, 1 to 255 bytes | the function's name |
/// | `derive` | a parenthesised list of derive macros for the job struct: `derive(Clone, Debug)` | none besides serde's |
/// | `crate` | path to harel-jobs | `::harel_jobs` |
///
/// Durations are one or more `<integer><unit>` with the units `ms`, `s`, `m`, `h`, added up:
/// `"500ms"`, `"30s"`, `"5m"`, `"1h30m"`. Giving `backoff` or `backoff_max` sets both, the
/// other to its default (2 s, 1 h); `backoff_max` must be at least `backoff`. The delay
/// after failed attempt `n` is `min(backoff_max, backoff × 2^(n−1))`, with jitter (see
/// `harel_jobs::Backoff`).
///
/// `kind` is the name the job is stored under and its handler found by. It must stay the
/// same while jobs of the old name may be queued: renaming the function changes the
/// default, so set `kind` explicitly before renaming (`kind = "send_welcome_email"`).
///
/// `retain` keeps each completed job of this type in the queue's history for that long,
/// where `Client::job` finds it as completed, with its attempts and duration; the maintenance
/// task prunes it after. It overrides the worker pool's `retain_completed` for this type.
///
/// `derive(…)` puts `#[derive(…)]` with those traits on the generated struct (the fields
/// are the function's parameters, so each parameter's type must implement them; rustc
/// reports one that does not at the parameter). `#[derive]` itself cannot go on a function
/// (E0774): written below `#[job]`, it is reported with the `derive(…)` to write instead.
/// `Serialize` and `Deserialize` are always derived and cannot be listed.
///
/// ```ignore
/// #[job(derive(Clone, Debug, PartialEq))]
/// async fn resize_image(image_id: i64, width: u32) { /* … */ }
///
/// let job = ResizeImage { image_id: 7, width: 640 };
/// assert_eq!(job.clone(), job);
/// ```
///
/// `crate` is for code that reaches harel-jobs under another name (a re-export, a renamed
/// dependency): every generated path starts with it, including serde and sqlx, which are
/// reached through harel-jobs so the calling crate needs neither.
///
/// ```ignore
/// #[job(kind = "billing.charge", backoff = "10s", backoff_max = "10m", crate = my_app::jobs)]
/// async fn charge(invoice_id: i64) -> Result<(), BillingError> { /* … */ }
/// ```
///
/// # Groups
///
/// Jobs of one group run one at a time, in enqueue order; different groups run in parallel.
/// Mark at most one parameter `#[group]`; its type must implement `Display`, and the job's
/// group is `"<kind>:<value>"` (for the example above, `"send_welcome_email:42"`), so that
/// two job types grouping by `user_id` do not share a group. Without `#[group]`, each job is
/// a group of its own. `.group("…")` at enqueue overrides either, and is how several job
/// types share one group.
///
/// # Fairness keys
///
/// A job's fairness key is a tenant, an account, a customer: within a queue and a priority
/// level, claims share the starts between the keys that have ready work in proportion to
/// their weights, however many groups or jobs each has. Mark at most one parameter
/// `#[fair_key]` (it may also be the `#[group]` one); its type must implement `Display`, and
/// its value is the key as is, not prefixed by the kind, so job types of one tenant share
/// its share. A key is at most 255 bytes, without NUL; `""` (and the default, without
/// `#[fair_key]`) is the key of jobs without one. An enqueue's `fair_key` option
/// (`EnqueueOptions::fair_key`, `.fair_key("…")`) overrides it. The operator sets the
/// weights with `Client::set_fair_weight` (1 by default).
///
/// ```ignore
/// #[job]
/// async fn index_document(#[group] #[fair_key] tenant: String, document_id: i64) { /* … */ }
/// ```
///
/// # Unique jobs
///
/// With `unique`, while a job holding the same key is queued (waiting, scheduled, running or
/// retrying), enqueueing another writes nothing and fails with `PublishError::Duplicate`
/// (which names the queued job). The key is the kind, `:`, and a JSON value:
///
/// - `unique`: the whole job, so two jobs are duplicates when all their arguments are equal
///   (`"refresh_feed:{\"feed_id\":7,\"full\":true}"`);
/// - `unique(user_id, day)`: only these parameters, as an array in the order written
///   (`"daily_report:[42,\"2026-12-04\"]"`); the others may differ. Each name must be a
///   parameter of the function stored in the job (not the `JobContext`), named once; the list
///   cannot be empty;
/// - `hold = "<duration>"` (longer than zero, at most 100 years), alone or after the names:
///   `unique(hold = "1h")`, `unique(user_id, hold = "1h")`: the key also stays held that long
///   after its job completed ("at most once an hour"). Without it the key is free as soon as
///   the job completes. A job that becomes a dead letter or is cancelled frees its key.
///
/// ```ignore
/// /// One report per user and day, and not again within the hour after it ran.
/// #[job(unique(user_id, day, hold = "1h"), retain = "24h")]
/// async fn daily_report(ctx: JobContext<AppState>, user_id: i64, day: String, note: String) { /* … */ }
///
/// let report = DailyReport { user_id: 42, day: "2026-12-04".into(), note: String::new() };
/// match report.enqueue(&pool).await {
///     Ok(id) => { /* queued */ }
///     Err(error) if error.duplicate_of().is_some() => { /* already queued, or held */ }
///     Err(error) => return Err(error.into()),
/// }
/// ```
///
/// Keys are compared as exact strings across every job kind of the queue; the kind prefix
/// keeps two types apart. A change to what the key is made of (the list, its order, or for a
/// bare `unique` any parameter, its name included) changes the keys: a job queued before the
/// change does not block one enqueued after it. `.unique(…)` at enqueue replaces the type's
/// key for one job (see `harel_jobs::Unique`).
///
/// # Generated items
///
/// For `async fn send_welcome_email(ctx: JobContext<AppState>, #[group] user_id: i64,
/// template: String)`:
///
/// - the function itself, unchanged but for `#[group]` and `#[fair_key]`;
/// - `struct SendWelcomeEmail { pub user_id: i64, pub template: String }`, with the
///   function's visibility, its doc comments and `#[cfg]`s, and serde's `Serialize` and
///   `Deserialize`, and the traits of `derive(…)` (no others by default: a job may hold
///   secrets, so it is not `Debug` unless asked);
/// - `impl Job for SendWelcomeEmail`: `KIND`, `options()` from the arguments, `group()`
///   from the `#[group]` parameter, `fair_key()` from the `#[fair_key]` one, and `unique()`
///   from `unique`;
/// - `impl Handler<AppState> for SendWelcomeEmail`, which calls the function with the
///   context and the fields (`impl<S: Send + Sync + 'static> Handler<S>` without a context
///   parameter). The function's future must be `Send`;
/// - inherent methods, usable without importing a trait:
///   - `fn enqueue<'c, E: PgExecutor<'c>>(self, executor: E) -> Enqueue<'c, Self, E>`:
///     options (`delay`, `not_before`, `priority`, `group`, `unique`, `schema`), then
///     `.await` for the `JobId`;
///   - `async fn enqueue_many<'c, E: PgExecutor<'c>>(executor: E, jobs: impl
///     IntoIterator<Item = Self>) -> Result<Vec<JobId>, PublishError>`: one round trip,
///     at most 100,000 jobs and 64 MiB (`JobBatch`'s limits).
///
/// The struct is named after the function in camel case (`send_welcome_email` becomes
/// `SendWelcomeEmail`); a function without parameters gives an empty struct, built as
/// `Ping {}`.
///
/// # Errors
///
/// Mistakes are compile errors at the offending token: a function that is not `async`, takes
/// `self`, is generic, has two `#[group]` or two `#[fair_key]` parameters, a `#[group]` or
/// `#[fair_key]` with arguments, a context parameter that is not first or marked `#[group]`
/// or `#[fair_key]`, a parameter that is a pattern or a reference, a `#[derive]` on the
/// function; an unknown (the message lists the valid keys) or repeated key, an empty or
/// repeated `derive(…)` list or one naming serde's traits, an out-of-range number, a malformed
/// duration, a name in `unique(…)` that is not a parameter (the message lists them). A return type that is not a job result, or a `#[group]` or `#[fair_key]` type
/// without `Display`, is reported at that type. All are reported at once, and the function is still emitted, so
/// an IDE keeps working while the attribute is wrong.
#[proc_macro_attribute]
pub fn job(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::job(args.into(), item.into()).into()
}
