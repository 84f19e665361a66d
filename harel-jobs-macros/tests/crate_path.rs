//! Every generated path goes through the `crate = …` path: here `::harel_jobs`, `::serde`
//! and `::sqlx` are shadowed (an `extern crate` item at the crate root takes precedence
//! over the `--extern` of the same name), so any path that escaped would fail to compile.

extern crate harel_jobs as jobs;

// Shadow the real crates with `core`, which has none of the items the expansion names.
extern crate core as harel_jobs;
extern crate core as serde;
extern crate core as sqlx;

/// A module re-exporting harel-jobs, as an application's facade would.
mod facade {
    pub use jobs::*;
}

/// Groups by the account.
#[jobs::job(
    crate = jobs,
    max_attempts = 2,
    priority = 1,
    timeout = "1s",
    backoff = "1s",
    retain = "1h",
    unique(account, hold = "1m")
)]
async fn through_the_extern_crate(
    ctx: jobs::JobContext<u8>,
    #[group] account: u32,
) -> jobs::JobResult {
    let _ = (ctx, account);
    Ok(())
}

#[jobs::job(crate = crate::facade, kind = "facade", unique)]
async fn through_a_facade(value: String) {
    let _ = value;
}

#[test]
fn generated_items_use_the_given_path() {
    use jobs::{Handler, Job};

    assert_eq!(ThroughTheExternCrate::KIND, "through_the_extern_crate");
    assert_eq!(ThroughTheExternCrate::options().max_attempts, Some(2));
    let job = ThroughTheExternCrate { account: 9 };
    assert_eq!(job.group().as_deref(), Some("through_the_extern_crate:9"));
    assert_eq!(ThroughAFacade::KIND, "facade");
    assert_eq!(
        ThroughTheExternCrate::options().retain,
        Some(std::time::Duration::from_secs(3600))
    );
    let unique = job.unique().unwrap();
    assert_eq!(unique.key(), "through_the_extern_crate:[9]");
    let facade = ThroughAFacade {
        value: "v".to_owned(),
    };
    assert_eq!(facade.unique().unwrap().key(), r#"facade:{"value":"v"}"#);

    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            job.handle(jobs::JobContext::for_test(1u8)).await.unwrap();
            ThroughAFacade {
                value: "v".to_owned(),
            }
            .handle(jobs::JobContext::for_test(()))
            .await
            .unwrap();
        });
}

/// The enqueue methods type-check through the path too (never run: no database here).
#[allow(dead_code)]
async fn enqueue(pool: &jobs::__private::sqlx::PgPool) -> Result<(), jobs::PublishError> {
    ThroughTheExternCrate { account: 1 }.enqueue(pool).await?;
    ThroughAFacade::enqueue_many(pool, Vec::new()).await?;
    Ok(())
}
