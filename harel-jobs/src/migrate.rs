//! Creating and upgrading the queue's schema.
//!
//! The SQL is the crate's `sql/` folder, embedded at compile time (its README states the
//! upgrade rules): versioned migrations for tables and data, applied once each, and one
//! file per function, re-applied whenever its text changes. The bookkeeping lives in
//! `<schema>._migrations` and `<schema>._functions`, not in sqlx's `_sqlx_migrations`, so it
//! never mixes with the application's own migrations.

use std::collections::HashMap;

use sqlx::{PgConnection, PgExecutor, PgPool};

use crate::error::{DatabaseError, MigrateError};
use crate::schema::Schema;
use crate::store::{AppliedRow, PreparedStatements, Store};

/// One versioned migration.
#[derive(Debug)]
struct Migration {
    version: i32,
    name: &'static str,
    sql: &'static str,
    /// Checksums of earlier texts of this migration that created the same objects, so
    /// that schemas they migrated are accepted (and upgraded by the later migrations).
    also_accepts: &'static [&'static str],
}

/// One function file.
#[derive(Debug)]
struct Function {
    name: &'static str,
    /// Its folder under `sql/functions/`: `api` (called by roles) or `internal` (called
    /// only by other functions). Read by the tests that check the folders.
    #[cfg_attr(not(test), allow(dead_code))]
    folder: &'static str,
    sql: &'static str,
}

/// Every file `migrate` runs, by name: the migrations, then the functions.
#[cfg(test)]
pub(crate) fn texts() -> impl Iterator<Item = (&'static str, &'static str)> {
    let migrations = MIGRATIONS.iter().map(|m| (m.name, m.sql));
    migrations.chain(FUNCTIONS.iter().map(|f| (f.name, f.sql)))
}

/// Every versioned migration, oldest first. Released ones never change (sql/README.md).
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "transport",
        sql: include_str!("../sql/migrations/0001_transport.sql"),
        // 0001 of the first releases also held the functions (now in sql/functions/);
        // its tables are exactly today's 0001
        also_accepts: &["016ef39be47eb6707aa2855f8b335ea2"],
    },
    Migration {
        version: 2,
        name: "settle",
        sql: include_str!("../sql/migrations/0002_settle.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 3,
        name: "claim_floors",
        sql: include_str!("../sql/migrations/0003_claim_floors.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 4,
        name: "inline_first_messages",
        sql: include_str!("../sql/migrations/0004_inline_first_messages.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 5,
        name: "job_lifecycle",
        sql: include_str!("../sql/migrations/0005_job_lifecycle.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 6,
        name: "schedules",
        sql: include_str!("../sql/migrations/0006_schedules.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 7,
        name: "named_queues",
        sql: include_str!("../sql/migrations/0007_named_queues.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 8,
        name: "workers",
        sql: include_str!("../sql/migrations/0008_workers.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 9,
        name: "trace_context",
        sql: include_str!("../sql/migrations/0009_trace_context.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 10,
        name: "reserved_own_groups",
        sql: include_str!("../sql/migrations/0010_reserved_own_groups.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 11,
        name: "owned_locks_and_bounds",
        sql: include_str!("../sql/migrations/0011_owned_locks_and_bounds.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 12,
        name: "jobs_view",
        sql: include_str!("../sql/migrations/0012_jobs_view.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 13,
        name: "fair_share",
        sql: include_str!("../sql/migrations/0013_fair_share.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 14,
        name: "key_limits",
        sql: include_str!("../sql/migrations/0014_key_limits.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 15,
        name: "dependencies",
        sql: include_str!("../sql/migrations/0015_dependencies.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 16,
        name: "durable_steps",
        sql: include_str!("../sql/migrations/0016_durable_steps.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 17,
        name: "attempt_history",
        sql: include_str!("../sql/migrations/0017_attempt_history.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 18,
        name: "schedule_controls",
        sql: include_str!("../sql/migrations/0018_schedule_controls.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 19,
        name: "throughput_by_queue",
        sql: include_str!("../sql/migrations/0019_throughput_by_queue.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 20,
        name: "dependency_backlog",
        sql: include_str!("../sql/migrations/0020_dependency_backlog.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 21,
        name: "unpark_in_pages",
        sql: include_str!("../sql/migrations/0021_unpark_in_pages.sql"),
        also_accepts: &[],
    },
    Migration {
        version: 22,
        name: "workflow_seams",
        sql: include_str!("../sql/migrations/0022_workflow_seams.sql"),
        also_accepts: &[],
    },
];

/// Every function, in the order they are applied: the internal helpers first, then the
/// entry points that call them (sql/README.md).
const FUNCTIONS: &[Function] = &[
    Function {
        name: "harel_fair_tags",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_fair_tags.sql"),
    },
    Function {
        name: "harel_unpark",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_unpark.sql"),
    },
    Function {
        name: "harel_unpark_queue",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_unpark_queue.sql"),
    },
    Function {
        name: "harel_drop_empty_groups",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_drop_empty_groups.sql"),
    },
    Function {
        name: "harel_notify",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_notify.sql"),
    },
    Function {
        name: "harel_release_key",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_release_key.sql"),
    },
    Function {
        name: "harel_take_key",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_take_key.sql"),
    },
    Function {
        name: "harel_move_on",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_move_on.sql"),
    },
    Function {
        name: "harel_release_waiting",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_release_waiting.sql"),
    },
    Function {
        name: "harel_record_attempts",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_record_attempts.sql"),
    },
    Function {
        name: "harel_queue_id",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_queue_id.sql"),
    },
    Function {
        name: "harel_jobs_gone",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_jobs_gone.sql"),
    },
    Function {
        name: "harel_cancel_waiting",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_cancel_waiting.sql"),
    },
    Function {
        name: "harel_resolve_dependents",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_resolve_dependents.sql"),
    },
    Function {
        name: "harel_hold",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_hold.sql"),
    },
    Function {
        name: "harel_end_cancelled",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_end_cancelled.sql"),
    },
    Function {
        name: "harel_ensure_queue",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_ensure_queue.sql"),
    },
    Function {
        name: "harel_queued_state",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_queued_state.sql"),
    },
    Function {
        name: "harel_retry_tasks",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_retry_tasks.sql"),
    },
    Function {
        name: "harel_prune_workflows",
        folder: "internal",
        sql: include_str!("../sql/functions/internal/harel_prune_workflows.sql"),
    },
    Function {
        name: "harel_publish",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_publish.sql"),
    },
    Function {
        name: "harel_retry_dead_letters",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_retry_dead_letters.sql"),
    },
    Function {
        name: "harel_delete_dead_letters",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_delete_dead_letters.sql"),
    },
    Function {
        name: "harel_purge_dead_letters",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_purge_dead_letters.sql"),
    },
    Function {
        name: "harel_publish_workflow",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_publish_workflow.sql"),
    },
    Function {
        name: "harel_workflows",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_workflows.sql"),
    },
    Function {
        name: "harel_workflow",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_workflow.sql"),
    },
    Function {
        name: "harel_workflow_tasks",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_workflow_tasks.sql"),
    },
    Function {
        name: "harel_cancel_workflow",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_cancel_workflow.sql"),
    },
    Function {
        name: "harel_retry_workflow",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_retry_workflow.sql"),
    },
    Function {
        name: "harel_workflow_task",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_workflow_task.sql"),
    },
    Function {
        name: "harel_job_workflow",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_job_workflow.sql"),
    },
    Function {
        name: "harel_job_parents",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_job_parents.sql"),
    },
    Function {
        name: "harel_job_steps",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_job_steps.sql"),
    },
    Function {
        name: "harel_job_attempts",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_job_attempts.sql"),
    },
    Function {
        name: "harel_claim",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_claim.sql"),
    },
    Function {
        name: "harel_settle",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_settle.sql"),
    },
    Function {
        name: "harel_extend",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_extend.sql"),
    },
    Function {
        name: "harel_resolve_backlog",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_resolve_backlog.sql"),
    },
    Function {
        name: "harel_maintain",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_maintain.sql"),
    },
    Function {
        name: "harel_job",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_job.sql"),
    },
    Function {
        name: "harel_list_jobs",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_list_jobs.sql"),
    },
    Function {
        name: "harel_list_jobs_newest",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_list_jobs_newest.sql"),
    },
    Function {
        name: "harel_cancel",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_cancel.sql"),
    },
    Function {
        name: "harel_run_now",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_run_now.sql"),
    },
    Function {
        name: "harel_cancel_group",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_cancel_group.sql"),
    },
    Function {
        name: "harel_list_groups",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_list_groups.sql"),
    },
    Function {
        name: "harel_top_groups",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_top_groups.sql"),
    },
    Function {
        name: "harel_schedule_fire",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_schedule_fire.sql"),
    },
    Function {
        name: "harel_schedules",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_schedules.sql"),
    },
    Function {
        name: "harel_set_queue",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_set_queue.sql"),
    },
    Function {
        name: "harel_queues",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_queues.sql"),
    },
    Function {
        name: "harel_depth",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_depth.sql"),
    },
    Function {
        name: "harel_worker_report",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_worker_report.sql"),
    },
    Function {
        name: "harel_workers",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_workers.sql"),
    },
    Function {
        name: "harel_throughput",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_throughput.sql"),
    },
    Function {
        name: "harel_throughput_by_queue",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_throughput_by_queue.sql"),
    },
    Function {
        name: "harel_elect",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_elect.sql"),
    },
    Function {
        name: "harel_set_fair_weight",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_set_fair_weight.sql"),
    },
    Function {
        name: "harel_set_key_limits",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_set_key_limits.sql"),
    },
    Function {
        name: "harel_fair_keys",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_fair_keys.sql"),
    },
    Function {
        name: "harel_delete_schedule",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_delete_schedule.sql"),
    },
    Function {
        name: "harel_schedule_control",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_schedule_control.sql"),
    },
    Function {
        name: "harel_steps",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_steps.sql"),
    },
    Function {
        name: "harel_record_step",
        folder: "api",
        sql: include_str!("../sql/functions/api/harel_record_step.sql"),
    },
];

/// The newest schema version this release knows.
pub const SCHEMA_VERSION: i32 = 22;

/// This release, recorded with the functions it applies (see [`newer_release`]).
const RELEASE: &str = env!("CARGO_PKG_VERSION");

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
/// Pending versioned migrations, then the function files whose text changed, run in one
/// transaction holding a lock on the schema's `_migrations` table (one only the queue's
/// owner can take), each with its bookkeeping row: any number of processes may call this
/// at once, one does the work and the others find it done. The schema itself is created
/// (`CREATE SCHEMA IF NOT EXISTS`) first. Run it as the role that is to own the queue: the functions
/// run with their owner's rights (see the guide's
/// ["Database roles"](https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/operating.md#database-roles)).
///
/// When the schema is already current, this only reads the bookkeeping tables (readable by
/// every role with `USAGE` on the schema) and changes nothing, so a worker whose role may
/// not create anything can still call it at start-up.
///
/// Everything runs in transactions, with unnamed statements: it works through a transaction
/// pooler such as PgBouncer as well as directly.
///
/// # Errors
/// [`MigrateError::Migration`] if a statement fails (nothing of the run is kept),
/// [`MigrateError::NewerSchema`] if a newer release already migrated this schema,
/// [`MigrateError::Modified`] if an applied migration differs from this release's,
/// [`MigrateError::Database`] if the database cannot be reached or refuses the lock.
pub async fn migrate_schema(pool: &PgPool, schema: &Schema) -> Result<(), MigrateError> {
    let store = bookkeeping_store(schema);
    if let Some(applied) = read_applied(pool, &store).await?
        && applied.plan()?.is_empty()
    {
        return Ok(());
    }
    let mut tx = lock_bookkeeping(pool, &store).await?;
    let plan = applied_rows(&store, &mut *tx)
        .await
        .map(Applied::from_rows)?
        .plan()?;
    plan.apply(&mut tx, &store).await?;
    tx.commit().await?;
    Ok(())
}

/// The store migrations run through: unnamed statements, each in a transaction, so that
/// migrating works through a transaction pooler as well as directly (a migration has no
/// setting to say which it is behind).
fn bookkeeping_store(schema: &Schema) -> Store {
    Store::new(schema.clone(), PreparedStatements::Unnamed)
}

/// Checks that `schema` is migrated to what this release expects, reading only the
/// bookkeeping tables: for a worker at start-up.
///
/// # Errors
/// [`MigrateError::NotMigrated`] if migrations or function updates are pending (or the
/// schema does not exist), [`MigrateError::PermissionDenied`] if the role may not read it
/// (no `USAGE` on the schema), [`MigrateError::NewerSchema`] and [`MigrateError::Modified`] as
/// for [`migrate_schema`], [`MigrateError::Database`] if it cannot be read.
pub async fn check_schema(pool: &PgPool, schema: &Schema) -> Result<(), MigrateError> {
    let not_migrated = |applied: i32| MigrateError::NotMigrated {
        schema: schema.name().to_owned(),
        applied,
        expected: SCHEMA_VERSION,
    };
    let Some(applied) = read_applied(pool, &bookkeeping_store(schema)).await? else {
        // no schema, or no right to read it: a role granted nothing must not be told to
        // migrate
        let bookkeeping = ["_migrations".to_owned(), "_functions".to_owned()];
        let missing = crate::privileges::missing(pool, schema, &bookkeeping, &["SELECT"]).await?;
        return Err(match missing.into_iter().next() {
            Some(missing) => MigrateError::PermissionDenied(missing),
            None => not_migrated(0),
        });
    };
    let newest = applied.newest();
    if applied.plan()?.is_empty() {
        Ok(())
    } else {
        Err(not_migrated(newest))
    }
}

/// Opens the migration's transaction holding the migration lock, the schema and the
/// bookkeeping tables created if missing ([`Store::migrations_lock`]).
///
/// The lock is `_migrations` itself in `EXCLUSIVE` mode: it conflicts with every other
/// migration's and with no reader (workers read the table at start-up), and only its owner
/// can take it. An advisory lock, which this used to be, is a key any login of the server
/// can take and hold, so that no worker could ever migrate. Two runs that create the schema
/// or its first table at the same moment collide on the catalog's unique keys (one waits for
/// the other, then fails): the loser tries again, and then finds them.
async fn lock_bookkeeping(
    pool: &PgPool,
    store: &Store,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, MigrateError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut tx = pool.begin().await?;
        match store.migrations_lock(&mut tx).await {
            Ok(_) => return Ok(tx),
            Err(error) if attempt < 3 && is_unique_violation(&error) => {
                drop(tx); // rolled back
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Whether `error` is a unique violation (SQLSTATE 23505).
fn is_unique_violation(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == "23505")
}

/// What the bookkeeping records, with this release's checksums (computed by the server).
#[derive(Debug, Default)]
struct Applied {
    /// Applied migration versions and their recorded checksums.
    migrations: Vec<(i32, Option<String>)>,
    /// Applied functions: (checksum, release).
    functions: HashMap<String, (String, String)>,
    /// md5 of this release's texts, by migration version and function name.
    ours: HashMap<String, String>,
}

/// What a run has to do.
#[derive(Debug, Default)]
struct Plan {
    migrations: Vec<&'static Migration>,
    functions: Vec<&'static Function>,
}

impl Plan {
    fn is_empty(&self) -> bool {
        self.migrations.is_empty() && self.functions.is_empty()
    }

    async fn apply(&self, tx: &mut PgConnection, store: &Store) -> Result<(), MigrateError> {
        let schema = store.schema();
        // who may execute which function, read before the versioned migrations run: one
        // that changes a function's signature drops it, and with it the grants roles had on
        // it (given back at the end, sql/README.md, rule 3)
        let grants = if self.migrations.is_empty() {
            Vec::new()
        } else {
            store.function_grants_read(&mut *tx).await?
        };
        for migration in &self.migrations {
            let failed = |source: sqlx::Error| MigrateError::Migration {
                version: migration.version,
                name: migration.name,
                source: DatabaseError::new(source),
            };
            store
                .migration_apply(tx, migration.version, migration.name, migration.sql)
                .await
                .map_err(failed)?;
            tracing::info!(
                schema = schema.name(),
                version = migration.version,
                name = migration.name,
                "harel-jobs migration applied"
            );
        }
        for function in &self.functions {
            let failed = |source: sqlx::Error| MigrateError::Function {
                name: function.name,
                source: DatabaseError::new(source),
            };
            store
                .function_apply(tx, function.name, function.sql, RELEASE)
                .await
                .map_err(failed)?;
            tracing::debug!(
                schema = schema.name(),
                function = function.name,
                "harel-jobs function applied"
            );
        }
        if !self.functions.is_empty() {
            store.citus_settings(&mut *tx).await?;
        }
        Ok(store.function_grants_restore(tx, &grants).await?)
    }
}

impl Applied {
    fn from_rows(rows: Vec<AppliedRow>) -> Self {
        let mut applied = Self::default();
        for (what, key, checksum, release) in rows {
            match what.as_str() {
                "m" => {
                    if let Ok(version) = key.parse() {
                        applied.migrations.push((version, checksum));
                    }
                }
                "f" => {
                    let entry = (checksum.unwrap_or_default(), release.unwrap_or_default());
                    applied.functions.insert(key, entry);
                }
                _ => {
                    applied.ours.insert(key, checksum.unwrap_or_default());
                }
            }
        }
        applied
    }

    /// The newest version applied (0 when none).
    fn newest(&self) -> i32 {
        self.migrations.iter().map(|m| m.0).max().unwrap_or(0)
    }

    /// What this release has to do to the schema, if it can work with what is applied.
    fn plan(&self) -> Result<Plan, MigrateError> {
        let newest = self.newest();
        if newest > SCHEMA_VERSION {
            return Err(MigrateError::NewerSchema {
                found: newest,
                known: SCHEMA_VERSION,
            });
        }
        let mut versions: Vec<&(i32, Option<String>)> = self.migrations.iter().collect();
        versions.sort_by_key(|m| m.0);
        for (version, checksum) in versions {
            let known = MIGRATIONS.iter().find(|m| m.version == *version);
            let ours = self.ours.get(&version.to_string());
            let accepted = match (known, checksum) {
                (Some(migration), Some(checksum)) => {
                    Some(checksum) == ours || migration.also_accepts.contains(&checksum.as_str())
                }
                _ => false,
            };
            if !accepted {
                return Err(MigrateError::Modified {
                    version: *version,
                    name: known.map_or("unknown", |m| m.name),
                });
            }
        }
        let migrations: Vec<&'static Migration> =
            MIGRATIONS.iter().filter(|m| m.version > newest).collect();
        // after any versioned migration, every function again: a migration may have
        // dropped or replaced one whose file did not change
        let functions = FUNCTIONS
            .iter()
            .filter(|f| !migrations.is_empty() || self.function_is_stale(f))
            .collect();
        Ok(Plan {
            migrations,
            functions,
        })
    }

    /// Whether `function` differs from what is applied and is ours to replace.
    fn function_is_stale(&self, function: &Function) -> bool {
        match self.functions.get(function.name) {
            None => true,
            Some((checksum, release)) => {
                Some(checksum) != self.ours.get(function.name) && !newer_release(release, RELEASE)
            }
        }
    }
}

/// Whether release `a` is newer than `b` (`major.minor.patch`; anything unparsable is
/// never newer).
fn newer_release(a: &str, b: &str) -> bool {
    fn parse(version: &str) -> Option<(u64, u64, u64)> {
        let core = version.split(['-', '+']).next()?;
        let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
        Some((parts.next()??, parts.next()??, parts.next()??))
    }
    matches!((parse(a), parse(b)), (Some(a), Some(b)) if a > b)
}

/// Reads the bookkeeping, and the checksums of this release's texts.
async fn applied_rows<'e, E: PgExecutor<'e>>(
    store: &Store,
    executor: E,
) -> Result<Vec<AppliedRow>, sqlx::Error> {
    let mut keys: Vec<String> = MIGRATIONS.iter().map(|m| m.version.to_string()).collect();
    keys.extend(FUNCTIONS.iter().map(|f| f.name.to_owned()));
    let mut texts: Vec<&'static str> = MIGRATIONS.iter().map(|m| m.sql).collect();
    texts.extend(FUNCTIONS.iter().map(|f| f.sql));
    store.migrations_applied(executor, &keys, &texts).await
}

/// What is applied to `schema`, without taking any lock; `None` if the schema or its
/// bookkeeping tables do not exist yet (or predate checksums), or cannot be read.
///
/// In a transaction of its own, as every statement here is unnamed: behind a transaction
/// pooler, only a transaction keeps an unnamed statement's parse and its execution on one
/// server connection.
async fn read_applied(pool: &PgPool, store: &Store) -> Result<Option<Applied>, MigrateError> {
    let mut tx = pool.begin().await?;
    let read = applied_rows(store, &mut *tx).await;
    // read-only: ending it either way is the same; a failed read already aborted it
    let _ = tx.rollback().await;
    match read {
        Ok(rows) => Ok(Some(Applied::from_rows(rows))),
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

/// Every SQL file of this release rendered for `schema`, with its path under the
/// repository's `migrations/` folder (which holds them rendered for the default schema).
#[cfg(test)]
fn rendered_files(schema: &Schema) -> Vec<(String, String)> {
    let migrations = MIGRATIONS.iter().map(|m| {
        (
            format!("{:04}_{}.sql", m.version, m.name),
            schema.render(m.sql),
        )
    });
    let functions = FUNCTIONS.iter().map(|f| {
        let path = format!("functions/{}/{}.sql", f.folder, f.name);
        (path, schema.render(f.sql))
    });
    migrations.chain(functions).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_dense_and_end_at_schema_version() {
        for (expected, migration) in (1..).zip(MIGRATIONS) {
            assert_eq!(migration.version, expected, "{}", migration.name);
        }
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
    }

    #[test]
    fn every_object_is_schema_qualified() {
        // an unqualified table or function would land in the caller's search_path (indexes
        // always go to their table's schema)
        let texts = MIGRATIONS.iter().map(|m| m.sql);
        for text in texts.chain(FUNCTIONS.iter().map(|f| f.sql)) {
            for line in text.lines() {
                let line = line.trim_start();
                let creates = [
                    "CREATE TABLE",
                    "CREATE SEQUENCE",
                    "CREATE VIEW",
                    "CREATE OR REPLACE VIEW",
                    "CREATE OR REPLACE FUNCTION",
                    "ALTER TABLE",
                    "DROP FUNCTION",
                    "REVOKE",
                ];
                if creates.iter().any(|c| line.starts_with(c)) {
                    assert!(line.contains("@schema@."), "unqualified: {line}");
                }
            }
        }
    }

    #[test]
    fn versioned_migrations_create_no_function() {
        for migration in MIGRATIONS {
            assert!(
                !migration.sql.contains("CREATE OR REPLACE FUNCTION")
                    && !migration.sql.contains("CREATE FUNCTION"),
                "{}: functions belong in sql/functions/",
                migration.name
            );
        }
    }

    /// The parked band (ADR 0031) starts at one place in every function that reads it: a
    /// constant `c_parked` of 2^62 (a function returning it would cost each call the
    /// settings every function sets, on the claim's and the settle's path).
    #[test]
    fn every_function_puts_the_parked_band_at_two_to_the_62() {
        let mut readers = Vec::new();
        for function in FUNCTIONS {
            if function.sql.contains("c_parked") {
                let declared = function
                    .sql
                    .lines()
                    .find(|line| line.trim_start().starts_with("c_parked"))
                    .unwrap_or_default();
                assert!(
                    declared.ends_with("CONSTANT BIGINT := 4611686018427387904;"),
                    "{}: {declared:?}",
                    function.name
                );
                assert_eq!(4611686018427387904_i64, 1 << 62);
                readers.push(function.name);
            }
        }
        assert_eq!(
            readers,
            [
                "harel_fair_tags",
                "harel_unpark",
                "harel_unpark_queue",
                "harel_claim",
                "harel_set_key_limits"
            ]
        );
    }

    /// The policy of sql/README.md ("Every function"), file by file.
    #[test]
    fn every_function_file_pins_search_path_runs_as_owner_and_revokes_public() {
        for function in FUNCTIONS {
            let sql = function.sql;
            let header = format!("CREATE OR REPLACE FUNCTION @schema@.{}(", function.name);
            assert_eq!(sql.matches(&header).count(), 1, "{}", function.name);
            assert_eq!(
                sql.matches("CREATE OR REPLACE FUNCTION").count(),
                1,
                "{}: one function per file",
                function.name
            );
            for setting in [
                "\nSECURITY DEFINER\n",
                "\nSET search_path = pg_catalog, pg_temp\n",
                "\nSET plan_cache_mode = force_generic_plan\n",
                "\nSET jit = off\n",
            ] {
                assert!(
                    sql.contains(setting),
                    "{}: missing {setting:?}",
                    function.name
                );
            }
            let revoke = format!("REVOKE ALL ON FUNCTION @schema@.{}(", function.name);
            assert!(
                sql.contains(&revoke) && sql.trim_end().ends_with("FROM PUBLIC;"),
                "{}: must end by revoking EXECUTE from PUBLIC",
                function.name
            );
        }
    }

    #[test]
    fn function_files_are_named_after_their_function() {
        let mut names: Vec<&str> = FUNCTIONS.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FUNCTIONS.len());
        let list = |dir: &str| {
            let mut entries: Vec<String> = std::fs::read_dir(dir)
                .expect("sql/functions")
                .map(|entry| {
                    entry
                        .expect("entry")
                        .file_name()
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
            entries.sort_unstable();
            entries
        };
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/sql/functions");
        assert_eq!(
            list(root),
            ["api", "internal"],
            "sql/functions/ holds its two folders and nothing else"
        );
        for folder in ["api", "internal"] {
            let mut expected: Vec<String> = FUNCTIONS
                .iter()
                .filter(|f| f.folder == folder)
                .map(|f| format!("{}.sql", f.name))
                .collect();
            expected.sort_unstable();
            assert_eq!(
                list(&format!("{root}/{folder}")),
                expected,
                "every file in sql/functions/{folder}/ must be listed with that folder"
            );
        }
    }

    /// The folder rule of sql/README.md: an internal function is called by another function
    /// (and granted to no role); the helpers are applied before the entry points.
    #[test]
    fn internal_functions_are_helpers_applied_first() {
        for function in FUNCTIONS.iter().filter(|f| f.folder == "internal") {
            let call = format!("@schema@.{}(", function.name);
            assert!(
                FUNCTIONS
                    .iter()
                    .any(|f| f.name != function.name && f.sql.contains(&call)),
                "{}: no function calls it, so it is not internal",
                function.name
            );
        }
        let first_api = FUNCTIONS.iter().position(|f| f.folder == "api");
        let last_internal = FUNCTIONS.iter().rposition(|f| f.folder == "internal");
        assert!(last_internal < first_api, "internal functions come first");
        assert!(
            FUNCTIONS
                .iter()
                .all(|f| ["api", "internal"].contains(&f.folder))
        );
    }

    fn applied(migrations: &[(i32, &str)], functions: &[(&str, &str, &str)]) -> Applied {
        let mut applied = Applied::default();
        for migration in MIGRATIONS {
            applied.ours.insert(
                migration.version.to_string(),
                format!("m{}", migration.version),
            );
        }
        for function in FUNCTIONS {
            applied
                .ours
                .insert(function.name.to_owned(), format!("f-{}", function.name));
        }
        applied.migrations = migrations
            .iter()
            .map(|(v, c)| (*v, Some((*c).to_owned())))
            .collect();
        applied.functions = functions
            .iter()
            .map(|(n, c, r)| ((*n).to_owned(), ((*c).to_owned(), (*r).to_owned())))
            .collect();
        applied
    }

    fn current() -> Applied {
        let migrations: Vec<(i32, String)> = MIGRATIONS
            .iter()
            .map(|m| (m.version, format!("m{}", m.version)))
            .collect();
        let functions: Vec<(&str, String)> = FUNCTIONS
            .iter()
            .map(|f| (f.name, format!("f-{}", f.name)))
            .collect();
        let m: Vec<(i32, &str)> = migrations.iter().map(|(v, c)| (*v, c.as_str())).collect();
        let f: Vec<(&str, &str, &str)> = functions
            .iter()
            .map(|(n, c)| (*n, c.as_str(), RELEASE))
            .collect();
        applied(&m, &f)
    }

    #[test]
    fn a_current_schema_needs_nothing() {
        assert!(current().plan().unwrap().is_empty());
    }

    #[test]
    fn a_fresh_schema_needs_everything() {
        let plan = applied(&[], &[]).plan().unwrap();
        assert_eq!(plan.migrations.len(), MIGRATIONS.len());
        assert_eq!(plan.functions.len(), FUNCTIONS.len());
    }

    #[test]
    fn a_changed_function_file_is_applied_again_alone() {
        let mut applied = current();
        applied.functions.insert(
            "harel_claim".to_owned(),
            ("old".to_owned(), RELEASE.to_owned()),
        );
        let plan = applied.plan().unwrap();
        assert!(plan.migrations.is_empty());
        let names: Vec<&str> = plan.functions.iter().map(|f| f.name).collect();
        assert_eq!(names, ["harel_claim"]);
    }

    #[test]
    fn a_function_applied_by_a_newer_release_is_left_alone() {
        let mut applied = current();
        applied.functions.insert(
            "harel_claim".to_owned(),
            ("newer".to_owned(), "99.0.0".to_owned()),
        );
        assert!(applied.plan().unwrap().is_empty());
    }

    #[test]
    fn the_first_releases_0001_is_accepted_and_upgraded() {
        let legacy = MIGRATIONS[0].also_accepts[0];
        let plan = applied(&[(1, legacy)], &[]).plan().unwrap();
        let versions: Vec<i32> = plan.migrations.iter().map(|m| m.version).collect();
        let later: Vec<i32> = MIGRATIONS.iter().skip(1).map(|m| m.version).collect();
        assert_eq!(versions, later);
        assert_eq!(plan.functions.len(), FUNCTIONS.len());
    }

    #[test]
    fn a_modified_or_newer_migration_is_refused() {
        assert!(matches!(
            applied(&[(1, "something else")], &[]).plan(),
            Err(MigrateError::Modified { version: 1, .. })
        ));
        assert!(matches!(
            applied(&[(SCHEMA_VERSION + 1, "x")], &[]).plan(),
            Err(MigrateError::NewerSchema { .. })
        ));
    }

    #[test]
    fn release_order() {
        assert!(newer_release("0.2.0", "0.1.9"));
        assert!(newer_release("1.0.0", "0.99.99"));
        assert!(!newer_release("0.1.0", "0.1.0"));
        assert!(!newer_release("0.1.0-rc.1", "0.1.0"));
        assert!(!newer_release("garbage", "0.1.0"));
        assert!(!newer_release("0.1.0", "garbage"));
    }

    /// The repository's top-level `migrations/` folder holds these files rendered for the
    /// default schema, for other tools; `HAREL_BLESS=1` rewrites it. (Skipped where the
    /// folder is absent: in the published crate.)
    /// Migrations from 0019 on alter tables as Citus takes DDL on a distributed schema
    /// (sql/README.md, rule 5): a constraint added by an `ALTER TABLE` of its own, none
    /// inside `ADD COLUMN`. (0014 does not, and is released: ADR 0035.)
    #[test]
    fn new_migrations_alter_tables_one_constraint_at_a_time() {
        let mut checked = 0;
        for migration in MIGRATIONS.iter().filter(|m| m.version >= 19) {
            for statement in crate::store::split_statements(migration.sql) {
                let upper = statement.to_ascii_uppercase();
                if !upper.starts_with("ALTER TABLE") {
                    continue;
                }
                checked += 1;
                // subcommands: the commas outside parentheses
                let mut depth = 0_i32;
                let subcommands = 1 + upper
                    .chars()
                    .filter(|c| {
                        match c {
                            '(' => depth += 1,
                            ')' => depth -= 1,
                            _ => {}
                        }
                        *c == ',' && depth == 0
                    })
                    .count();
                let adds_constraint =
                    upper.contains("ADD CONSTRAINT") || upper.contains("ADD PRIMARY KEY");
                assert!(
                    !adds_constraint || subcommands == 1,
                    "{}: a constraint beside other subcommands: {statement}",
                    migration.name
                );
                for clause in upper.split("ADD COLUMN").skip(1) {
                    let column = clause.split(",\n").next().unwrap_or_default();
                    for word in ["CHECK", "PRIMARY KEY", "UNIQUE", "REFERENCES"] {
                        assert!(
                            !column.contains(word),
                            "{}: {word} inside ADD COLUMN: {statement}",
                            migration.name
                        );
                    }
                }
            }
        }
        assert!(checked > 0, "no ALTER TABLE checked");
    }

    #[test]
    fn the_top_level_migrations_folder_is_this_release_rendered() {
        let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations"));
        if !root.is_dir() {
            return;
        }
        let files = rendered_files(&Schema::default());
        let bless = std::env::var_os("HAREL_BLESS").is_some();
        let mut stale = Vec::new();
        for (path, text) in &files {
            let path = root.join(path);
            if bless {
                std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
                std::fs::write(&path, text).expect("write");
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                stale.push(path.display().to_string());
            }
        }
        // and nothing else but its README
        let mut found = Vec::new();
        let mut folders = vec![root.to_path_buf()];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).expect("read migrations/") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    folders.push(path);
                } else if let Ok(relative) = path.strip_prefix(root) {
                    found.push(relative.to_string_lossy().into_owned());
                }
            }
        }
        for path in found {
            if path != "README.md" && !files.iter().any(|(known, _)| *known == path) {
                stale.push(format!("{path} (not a file of this release: delete it)"));
            }
        }
        assert!(
            stale.is_empty(),
            "stale (run `HAREL_BLESS=1 cargo test -p harel-jobs --lib migrate`): {stale:?}"
        );
    }
}
