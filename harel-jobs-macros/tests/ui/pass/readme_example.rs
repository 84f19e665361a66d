//! The example of the attribute's documentation, warning-free and documented.
#![deny(warnings, missing_docs)]

use std::time::Duration;

use harel_jobs::{JobContext, JobResult, job};

/// Sends mails.
pub struct Mailer;

impl Mailer {
    /// Sends one.
    pub async fn send(&self, user_id: i64, template: &str) -> Result<(), std::io::Error> {
        let _ = (user_id, template);
        Ok(())
    }
}

/// The worker pool's state.
pub struct AppState {
    /// The mailer.
    pub mailer: Mailer,
}

/// Sends the welcome mail.
#[job(max_attempts = 5, priority = 2)]
pub async fn send_welcome_email(
    ctx: JobContext<AppState>,
    #[group] user_id: i64,
    template: String,
) -> JobResult {
    ctx.state().mailer.send(user_id, &template).await?;
    Ok(())
}

/// Enqueues like an application does (never run here).
pub async fn enqueue(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    let mut tx = pool.begin().await?;
    SendWelcomeEmail {
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
    let ids = SendWelcomeEmail::enqueue_many(
        &pool,
        vec![SendWelcomeEmail {
            user_id: 1,
            template: "a".into(),
        }],
    )
    .await?;
    assert_eq!(ids.len(), 1);
    Ok(())
}

fn main() {
    // The function stays callable, e.g. in a unit test.
    let _future = send_welcome_email(
        JobContext::for_test(AppState { mailer: Mailer }),
        1,
        "hi".into(),
    );
}
