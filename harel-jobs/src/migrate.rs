//! Creating and upgrading the queue's schema.
//!
//! The migrations are the `.sql` files of the repository's `migrations/` folder, embedded
//! at compile time. Their bookkeeping lives in `<schema>._migrations`, not in sqlx's
//! `_sqlx_migrations`, so they never mix with the application's own migrations.

use sqlx::{AssertSqlSafe, PgPool};

use crate::error::{DatabaseError, MigrateError};
use crate::schema::Schema;

/// One embedded migration.
struct Migration {
    version: i32,
    name: &'static str,
    sql: &'static str,
}

/// Every migration, oldest first. Versions are never reused or edited once released.
const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "transport",
    sql: include_str!("../../migrations/0001_transport.sql"),
}];

/// The newest schema version this release knows.
pub const SCHEMA_VERSION: i32 = 1;

/// Creates or upgrades the queue in the default schema (`harel`).
///
/// Safe to call from every worker at start-up: see [`migrate_schema`].
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), harel_jobs::MigrateError> {
/// harel_jobs::migrate(&pool).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// See [`migrate_schema`].
pub async fn migrate(pool: &PgPool) -> Result<(), MigrateError> {
    migrate_schema(pool, &Schema::default()).await
}

/// Creates or upgrades the queue in `schema`.
///
/// All pending migrations run in one transaction under a transaction-level advisory lock
/// keyed on the schema name, each with its bookkeeping row: any number of processes may
/// call this at once, one does the work and the others find it done. The schema itself is
/// created (`CREATE SCHEMA IF NOT EXISTS`) under the same lock.
///
/// When the schema is already current, this only reads `<schema>._migrations` and changes
/// nothing, so a worker whose role may not create anything (see RELIABILITY.md, least
/// privilege) can still call it at start-up, given `SELECT` on that table.
///
/// # Errors
/// [`MigrateError::Migration`] if a statement fails (nothing of the run is kept),
/// [`MigrateError::NewerSchema`] if a newer release already migrated this schema,
/// [`MigrateError::Database`] if the database cannot be reached or refuses the lock.
pub async fn migrate_schema(pool: &PgPool, schema: &Schema) -> Result<(), MigrateError> {
    if let Some(applied) = read_applied(pool, schema).await?
        && applied.check()? == SCHEMA_VERSION
    {
        return Ok(());
    }
    let mut tx = pool.begin().await?;

    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("harel-jobs migrate {}", schema.name()))
        .execute(&mut *tx)
        .await?;

    let setup = schema.render(
        "CREATE SCHEMA IF NOT EXISTS @schema@;
         CREATE TABLE IF NOT EXISTS @schema@._migrations (
             version    INT         PRIMARY KEY,
             name       TEXT        NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now());
         ALTER TABLE @schema@._migrations ADD COLUMN IF NOT EXISTS checksum TEXT;",
    );
    sqlx::raw_sql(AssertSqlSafe(setup))
        .execute(&mut *tx)
        .await?;

    let applied = Applied::from(applied_query(schema).fetch_one(&mut *tx).await?).check()?;

    for migration in MIGRATIONS.iter().filter(|m| m.version > applied) {
        let failed = |source: sqlx::Error| MigrateError::Migration {
            version: migration.version,
            name: migration.name,
            source: DatabaseError::new(source),
        };
        sqlx::raw_sql(AssertSqlSafe(schema.render(migration.sql)))
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        sqlx::query(AssertSqlSafe(schema.render(
            "INSERT INTO @schema@._migrations (version, name, checksum) VALUES ($1, $2, md5($3))",
        )))
        .bind(migration.version)
        .bind(migration.name)
        .bind(migration.sql)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        tracing::info!(
            schema = schema.name(),
            version = migration.version,
            name = migration.name,
            "harel-jobs migration applied"
        );
    }

    tx.commit().await?;
    Ok(())
}

/// What `<schema>._migrations` records.
struct Applied {
    /// The newest version applied (0 when none).
    newest: i32,
    /// The oldest applied migration whose recorded checksum is not that of this release's
    /// text (or that has none: applied before checksums were kept).
    modified: Option<i32>,
}

impl From<(i32, Option<i32>)> for Applied {
    fn from((newest, modified): (i32, Option<i32>)) -> Self {
        Self { newest, modified }
    }
}

impl Applied {
    /// The newest version applied, if this release can work with what is applied.
    fn check(&self) -> Result<i32, MigrateError> {
        if self.newest > SCHEMA_VERSION {
            return Err(MigrateError::NewerSchema {
                found: self.newest,
                known: SCHEMA_VERSION,
            });
        }
        match self.modified {
            Some(version) => Err(MigrateError::Modified {
                version,
                name: MIGRATIONS
                    .iter()
                    .find(|m| m.version == version)
                    .map_or("unknown", |m| m.name),
            }),
            None => Ok(self.newest),
        }
    }
}

/// Reads the applied versions and compares their checksums with this release's texts
/// (md5, computed by the server on both sides).
fn applied_query(
    schema: &Schema,
) -> sqlx::query::QueryAs<'static, sqlx::Postgres, (i32, Option<i32>), sqlx::postgres::PgArguments>
{
    let versions: Vec<i32> = MIGRATIONS.iter().map(|m| m.version).collect();
    let texts: Vec<&'static str> = MIGRATIONS.iter().map(|m| m.sql).collect();
    sqlx::query_as(AssertSqlSafe(schema.render(
        "SELECT COALESCE(max(applied.version), 0) AS newest,
                min(applied.version) FILTER (
                    WHERE applied.checksum IS DISTINCT FROM md5(known.sql)) AS modified
           FROM @schema@._migrations AS applied
           LEFT JOIN unnest($1::int[], $2::text[]) AS known (version, sql)
                  ON known.version = applied.version",
    )))
    .bind(versions)
    .bind(texts)
}

/// What is applied to `schema`, without taking any lock; `None` if the schema or its
/// bookkeeping table does not exist yet (or predates checksums), or cannot be read.
async fn read_applied(pool: &PgPool, schema: &Schema) -> Result<Option<Applied>, MigrateError> {
    match applied_query(schema).fetch_one(pool).await {
        Ok(row) => Ok(Some(Applied::from(row))),
        Err(error) => {
            let error = DatabaseError::new(error);
            // undefined schema, table or column, or no right to read it: let the full path
            // decide
            match error.code().as_deref() {
                Some("3F000" | "42P01" | "42703" | "42501") => Ok(None),
                _ => Err(MigrateError::Database(error)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_dense_and_end_at_schema_version() {
        for (index, migration) in MIGRATIONS.iter().enumerate() {
            assert_eq!(migration.version, index as i32 + 1, "{}", migration.name);
        }
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
    }

    #[test]
    fn every_object_is_schema_qualified() {
        // an unqualified table or function would land in the caller's search_path (indexes
        // always go to their table's schema)
        for migration in MIGRATIONS {
            for line in migration.sql.lines() {
                let line = line.trim_start();
                let creates = ["CREATE TABLE", "CREATE OR REPLACE FUNCTION", "ALTER TABLE"];
                if creates.iter().any(|c| line.starts_with(c)) {
                    assert!(line.contains("@schema@."), "unqualified: {line}");
                }
            }
        }
    }
}
