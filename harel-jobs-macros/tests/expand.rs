//! Compiles real jobs with `#[job]` and checks what was generated, without a database:
//! the struct, `Job`, `Handler`, and that the function stays callable.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use harel_jobs::{Action, Backoff, Handler, Job, JobContext, JobError, JobResult, Priority, job};

/// The state a worker pool would share.
#[derive(Default)]
struct AppState {
    sent: AtomicU32,
}

/// Sends the welcome mail.
#[job(
    max_attempts = 5,
    priority = 3,
    timeout = "30s",
    backoff = "500ms",
    backoff_max = "1m"
)]
async fn send_welcome_email(
    ctx: JobContext<AppState>,
    #[group] user_id: i64,
    template: String,
) -> JobResult {
    if template.is_empty() {
        return Err(JobError::permanent("empty template"));
    }
    ctx.state().sent.fetch_add(1, Ordering::SeqCst);
    let _ = user_id;
    Ok(())
}

/// No context, no options, no return type.
#[job]
async fn ping() {}

#[job(kind = "billing.charge")]
async fn charge(invoice_id: i64, cents: u64) -> Result<(), std::io::Error> {
    if cents == 0 {
        return Err(std::io::Error::other("nothing to charge"));
    }
    let _ = invoice_id;
    Ok(())
}

#[job(backoff_max = "10m")]
async fn with_path_context(
    ctx: harel_jobs::JobContext<()>,
    #[group] tenant: String,
    mut note: Option<String>,
) {
    note.take();
    let _ = (ctx, tenant);
}

/// Completed jobs kept a day.
#[job(retain = "24h")]
async fn archive(document_id: i64) {
    let _ = document_id;
}

/// At most one queued refresh per feed and mode: the whole job is the key.
#[job(unique)]
async fn refresh_feed(feed_id: i64, full: bool) {
    let _ = (feed_id, full);
}

/// One report per user and day, and not again within the hour after it ran.
#[job(unique(user_id, day, hold = "1h"), retain = "168h")]
async fn daily_report(ctx: JobContext<AppState>, user_id: i64, day: String, note: Option<String>) {
    let _ = (ctx, user_id, day, note);
}

/// At most one queued sync, and none within 30 minutes of the last one.
#[job(unique(hold = "30m"))]
async fn sync_all() {}

/// A one-parameter key is a one-element tuple.
#[job(unique(tenant))]
async fn reindex(tenant: String, shard: u32) {
    let _ = (tenant, shard);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

fn assert_send<T: Send>(value: T) -> T {
    value
}

#[test]
fn kind_defaults_to_the_function_name() {
    assert_eq!(SendWelcomeEmail::KIND, "send_welcome_email");
    assert_eq!(Ping::KIND, "ping");
    assert_eq!(Charge::KIND, "billing.charge");
}

#[test]
fn options_come_from_the_attribute() {
    let options = SendWelcomeEmail::options();
    assert_eq!(options.max_attempts, Some(5));
    assert_eq!(options.priority, Some(Priority::new(3).unwrap()));
    assert_eq!(options.timeout, Some(Duration::from_secs(30)));
    assert_eq!(
        options.backoff,
        Some(Backoff::exponential(
            Duration::from_millis(500),
            Duration::from_secs(60)
        ))
    );
    assert_eq!(Ping::options(), harel_jobs::JobOptions::new());
    // `backoff_max` alone keeps the default first delay
    assert_eq!(
        WithPathContext::options().backoff,
        Some(Backoff::exponential(
            Duration::from_secs(2),
            Duration::from_secs(600)
        ))
    );
}

#[test]
fn retain_comes_from_the_attribute() {
    assert_eq!(
        Archive::options().retain,
        Some(Duration::from_secs(24 * 3600))
    );
    assert_eq!(
        DailyReport::options().retain,
        Some(Duration::from_secs(7 * 24 * 3600))
    );
    assert_eq!(Ping::options().retain, None);
    assert_eq!(SendWelcomeEmail::options().retain, None);
}

#[test]
fn no_unique_by_default() {
    assert_eq!(Ping {}.unique(), None);
    assert_eq!(Archive { document_id: 1 }.unique(), None);
    let job = SendWelcomeEmail {
        user_id: 42,
        template: "hi".into(),
    };
    assert_eq!(job.unique(), None);
}

#[test]
fn unique_whole_job() {
    let feed = |feed_id, full| RefreshFeed { feed_id, full };
    let unique = feed(7, true).unique().expect("unique");
    assert!(
        unique.key().starts_with("refresh_feed:"),
        "{}",
        unique.key()
    );
    assert_eq!(unique.key(), r#"refresh_feed:{"feed_id":7,"full":true}"#);
    assert_eq!(unique.hold(), None);
    // equal jobs, equal keys; any difference, another key
    assert_eq!(feed(7, true).unique(), feed(7, true).unique());
    assert_ne!(feed(7, true).unique(), feed(8, true).unique());
    assert_ne!(feed(7, true).unique(), feed(7, false).unique());
}

#[test]
fn unique_fields_ignore_the_others() {
    let report = |user_id, day: &str, note: Option<&str>| DailyReport {
        user_id,
        day: day.into(),
        note: note.map(Into::into),
    };
    let unique = report(42, "2026-12-04", None).unique().expect("unique");
    assert_eq!(unique.key(), r#"daily_report:[42,"2026-12-04"]"#);
    assert_eq!(unique.hold(), Some(Duration::from_secs(3600)));
    // `note` is not part of the key
    assert_eq!(
        report(42, "2026-12-04", Some("again")).unique(),
        report(42, "2026-12-04", None).unique()
    );
    assert_ne!(
        report(42, "2026-12-05", None).unique(),
        report(42, "2026-12-04", None).unique()
    );
    assert_ne!(
        report(43, "2026-12-04", None).unique(),
        report(42, "2026-12-04", None).unique()
    );

    let reindex = |tenant: &str, shard| Reindex {
        tenant: tenant.into(),
        shard,
    };
    let unique = reindex("acme", 1).unique().expect("unique");
    assert_eq!(unique.key(), r#"reindex:["acme"]"#);
    assert_eq!(unique.hold(), None);
    assert_eq!(reindex("acme", 2).unique(), Some(unique));
    assert_ne!(reindex("other", 1).unique(), reindex("acme", 1).unique());
}

#[test]
fn unique_hold_alone() {
    let unique = SyncAll {}.unique().expect("unique");
    assert_eq!(unique.key(), "sync_all:{}");
    assert_eq!(unique.hold(), Some(Duration::from_secs(1800)));
}

#[test]
fn group_is_kind_and_value() {
    let job = SendWelcomeEmail {
        user_id: 42,
        template: "hi".into(),
    };
    assert_eq!(job.group().as_deref(), Some("send_welcome_email:42"));
    let job = WithPathContext {
        tenant: "acme".into(),
        note: None,
    };
    assert_eq!(job.group().as_deref(), Some("with_path_context:acme"));
    assert_eq!(Ping {}.group(), None);
    assert_eq!(
        Charge {
            invoice_id: 1,
            cents: 2
        }
        .group(),
        None
    );
}

#[test]
fn serde_round_trip() {
    let job = SendWelcomeEmail {
        user_id: 42,
        template: "hi".into(),
    };
    let json = serde_json::to_value(&job).unwrap();
    assert_eq!(json, serde_json::json!({"user_id": 42, "template": "hi"}));
    let back: SendWelcomeEmail = serde_json::from_value(json).unwrap();
    assert_eq!((back.user_id, back.template.as_str()), (42, "hi"));

    assert_eq!(serde_json::to_string(&Ping {}).unwrap(), "{}");
    let _: Ping = serde_json::from_str("{}").unwrap();

    // an `Option` parameter may be missing from a stored job (added later)
    let old: WithPathContext = serde_json::from_str(r#"{"tenant":"acme"}"#).unwrap();
    assert_eq!(old.note, None);
}

#[test]
fn the_function_stays_callable() {
    runtime().block_on(async {
        let ctx = JobContext::for_test(AppState::default());
        send_welcome_email(ctx.clone(), 7, "hi".into())
            .await
            .unwrap();
        assert_eq!(ctx.state().sent.load(Ordering::SeqCst), 1);
        ping().await;
        assert!(charge(1, 0).await.is_err());
    });
}

#[test]
fn handler_calls_the_function() {
    runtime().block_on(async {
        let ctx = JobContext::for_test(AppState::default());
        let job = SendWelcomeEmail {
            user_id: 7,
            template: "hi".into(),
        };
        assert_send(job.handle(ctx.clone())).await.unwrap();
        assert_eq!(ctx.state().sent.load(Ordering::SeqCst), 1);

        let failed = SendWelcomeEmail {
            user_id: 7,
            template: String::new(),
        }
        .handle(ctx.clone())
        .await
        .unwrap_err();
        assert_eq!(failed.action(), Action::Permanent);
        assert_eq!(ctx.state().sent.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn handler_converts_the_result() {
    runtime().block_on(async {
        // `()` is success
        Handler::<()>::handle(Ping {}, JobContext::for_test(()))
            .await
            .unwrap();
        // `Result<(), io::Error>`: the error is a retryable failure
        let error = Charge {
            invoice_id: 1,
            cents: 0,
        }
        .handle(JobContext::for_test(()))
        .await
        .unwrap_err();
        assert_eq!(error.action(), Action::Retry(None));
        assert_eq!(error.to_string(), "nothing to charge");
        WithPathContext {
            tenant: "t".into(),
            note: Some("n".into()),
        }
        .handle(JobContext::for_test(()))
        .await
        .unwrap();
    });
}

#[test]
fn a_job_without_context_runs_on_any_state() {
    runtime().block_on(async {
        let state = Arc::new(AtomicU32::new(0));
        Ping {}.handle(JobContext::for_test(state)).await.unwrap();
        Ping {}
            .handle(JobContext::for_test(AppState::default()))
            .await
            .unwrap();
        Charge {
            invoice_id: 1,
            cents: 5,
        }
        .handle(JobContext::for_test("any state"))
        .await
        .unwrap();
    });
}

/// Type-checks the enqueue methods against a pool and a transaction; never run (no database
/// in these tests).
#[allow(dead_code)]
async fn enqueue_compiles(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    let mut tx = pool.begin().await?;
    let _id: harel_jobs::JobId = SendWelcomeEmail {
        user_id: 42,
        template: "hi".into(),
    }
    .enqueue(&mut *tx)
    .await?;
    tx.commit().await?;
    SendWelcomeEmail {
        user_id: 42,
        template: "hi".into(),
    }
    .enqueue(&pool)
    .delay(Duration::from_secs(60))
    .priority(4)
    .group("user-42")
    .await?;
    let ids: Vec<harel_jobs::JobId> = Ping::enqueue_many(&pool, vec![Ping {}, Ping {}]).await?;
    assert_eq!(ids.len(), 2);
    Ok(())
}

#[test]
fn enqueue_futures_are_send() {
    fn spawnable<F: std::future::Future + Send + 'static>(_: impl FnOnce() -> F) {}
    spawnable(|| async {
        let pool = sqlx::PgPool::connect_lazy("postgres://localhost/none").unwrap();
        let _ = Ping::enqueue_many(&pool, [Ping {}]).await;
        let _ = Ping {}.enqueue(&pool).await;
    });
}
