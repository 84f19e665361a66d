//! The bench's own database: created on the server of `DATABASE_URL`, dropped at the end.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};

use crate::Res;

/// A database created for this run. [`drop_now`](Self::drop_now) (or `Drop`) removes it.
pub struct BenchDb {
    /// Its name (`harel_bench_` and 16 hex digits).
    pub name: String,
    /// Its URL: `DATABASE_URL` with the database name replaced.
    pub url: String,
    admin_url: String,
    dropped: bool,
}

impl BenchDb {
    /// Creates an empty database with a unique name.
    pub async fn create(admin_url: &str) -> Res<Self> {
        let name = harel_jobs_suite::unique_name("harel_bench");
        let admin = pool(admin_url, 1, &[]).await?;
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&admin)
            .await?;
        admin.close().await;
        Ok(Self {
            url: with_database(admin_url, &name),
            name,
            admin_url: admin_url.to_owned(),
            dropped: false,
        })
    }

    /// Drops the database (terminating its connections), on a thread and runtime of its
    /// own so it works from `Drop` and after the main runtime is gone. Best effort.
    pub fn drop_now(&mut self) {
        if self.dropped {
            return;
        }
        self.dropped = true;
        let url = self.admin_url.clone();
        let statement = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            runtime.block_on(async move {
                let result = async {
                    let admin = pool(&url, 1, &[]).await?;
                    sqlx::query(AssertSqlSafe(statement.clone()))
                        .execute(&admin)
                        .await?;
                    admin.close().await;
                    Ok::<_, crate::Error>(())
                }
                .await;
                if let Err(error) = result {
                    eprintln!("cleanup failed ({statement}): {error}");
                }
            });
        });
        let _ = cleanup.join();
    }
}

impl Drop for BenchDb {
    fn drop(&mut self) {
        self.drop_now();
    }
}

/// `url` with its database name replaced by `database` (user, password, host and query
/// parameters kept), usable by both sqlx and libpq (pgbench).
pub fn with_database(url: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let authority = before_query.split('/').next().unwrap_or(before_query);
    let mut out = format!("{scheme}://{authority}/{database}");
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// A pool of `connections` on `url`, each connection with the session settings `settings`
/// (sent at connect time, e.g. `synchronous_commit=off`).
pub async fn pool(url: &str, connections: u32, settings: &[(&str, &str)]) -> Res<PgPool> {
    let mut options: PgConnectOptions = url.parse()?;
    options = options.application_name("harel-bench");
    if !settings.is_empty() {
        options = options.options(settings.iter().copied());
    }
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(60))
        .connect_with(options)
        .await?;
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn replaces_the_database() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres?sslmode=disable", "b"),
            "postgres://u:p@h:5432/b?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "b"), "postgres://h/b");
    }
}
