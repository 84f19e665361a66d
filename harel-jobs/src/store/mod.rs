//! The data layer: the only place of the crate that sends SQL.
//!
//! A [`Store`] is one schema's statements, each rendered once (on first use) for that
//! schema, and one policy for how they are prepared ([`PreparedStatements`]). Every database
//! operation of the crate is one method here (or, for a statement that belongs to a session
//! rather than to the schema, one function of [`session`]), named entity then verb, with the
//! fence the SQL applies in the name where it has one (`leases_settle_if_held`): the
//! transport, the worker, the operator API, the command line and the dashboard call these,
//! and none of them writes SQL. Changing an SQL function's signature changes one method.
//!
//! The methods speak the SQL's own types: parameters as the SQL function takes them
//! (arrays for the batch functions, milliseconds for periods), rows as it returns them (a
//! tuple, its columns in order, named by a type alias of the entity's file). Turning a row
//! into the crate's types is the job of the type, next to its definition (`from_row`), so
//! that this layer imports nothing above it. Errors are the driver's (`sqlx::Error`): each
//! caller wraps them in its surface's error, as it did before.
//!
//! Each method runs on the executor it is given (a pool, a connection, an open
//! transaction), so that the caller chooses the transaction and the connection; the
//! statement goes as the store's policy says ([`Store::new`]), except where a method's
//! documentation says why it always goes another way.
//!
//! | method | SQL |
//! | --- | --- |
//! | [`jobs_publish`](Store::jobs_publish) | `harel_publish` |
//! | [`jobs_claim`](Store::jobs_claim) | `harel_claim` |
//! | [`job_get`](Store::job_get) | `harel_job` |
//! | [`jobs_list`](Store::jobs_list) | `harel_list_jobs`, `harel_list_jobs_newest` |
//! | [`job_cancel`](Store::job_cancel) | `harel_cancel` |
//! | [`job_run_now`](Store::job_run_now) | `harel_run_now` |
//! | [`job_parents`](Store::job_parents), [`job_steps`](Store::job_steps) | `harel_job_parents`, `harel_job_steps` |
//! | [`job_attempts`](Store::job_attempts) | `harel_job_attempts` |
//! | [`leases_settle_if_held`](Store::leases_settle_if_held) | `harel_settle` |
//! | [`leases_extend_if_held`](Store::leases_extend_if_held) | `harel_extend` |
//! | [`steps_read_if_held`](Store::steps_read_if_held) | `harel_steps` |
//! | [`step_record_if_held`](Store::step_record_if_held) | `harel_record_step` |
//! | [`groups_list`](Store::groups_list), [`group_get`](Store::group_get) | `harel_list_groups` |
//! | [`groups_top`](Store::groups_top) | `harel_top_groups` |
//! | [`group_cancel_step`](Store::group_cancel_step) | `harel_cancel_group` |
//! | [`queues_list`](Store::queues_list) | `harel_queues` |
//! | [`queues_depth`](Store::queues_depth) | `harel_depth` |
//! | [`queue_set`](Store::queue_set) | `harel_set_queue` |
//! | [`fair_weight_set`](Store::fair_weight_set) | `harel_set_fair_weight` |
//! | [`key_limits_set`](Store::key_limits_set) | `harel_set_key_limits` |
//! | [`fair_keys_list`](Store::fair_keys_list) | `harel_fair_keys` |
//! | [`workers_list`](Store::workers_list) | `harel_workers` |
//! | [`worker_report`](Store::worker_report) | `harel_worker_report` |
//! | [`throughput_list`](Store::throughput_list) | `harel_throughput` |
//! | [`throughput_by_queue_list`](Store::throughput_by_queue_list) | `harel_throughput_by_queue` |
//! | [`schedules_list`](Store::schedules_list), [`schedules_last_ticks`](Store::schedules_last_ticks), [`schedules_triggers`](Store::schedules_triggers) | `harel_schedules` |
//! | [`schedule_fire_if_due`](Store::schedule_fire_if_due) | `harel_schedule_fire` |
//! | [`schedule_delete`](Store::schedule_delete) | `harel_delete_schedule` |
//! | [`schedule_control`](Store::schedule_control) | `harel_schedule_control` |
//! | [`dead_letters_list`](Store::dead_letters_list), [`dead_letter_get`](Store::dead_letter_get), [`dead_letters_count`](Store::dead_letters_count) | `SELECT` on `dead_letters` |
//! | [`dead_letters_retry`](Store::dead_letters_retry) | `harel_retry_dead_letters` |
//! | [`dead_letters_delete`](Store::dead_letters_delete) | `harel_delete_dead_letters` |
//! | [`dead_letters_purge_before`](Store::dead_letters_purge_before) | `harel_purge_dead_letters` |
//! | [`workflow_publish`](Store::workflow_publish) | `harel_publish_workflow` |
//! | [`workflows_list`](Store::workflows_list), [`workflow_get`](Store::workflow_get), [`workflow_tasks`](Store::workflow_tasks) | `harel_workflows`, `harel_workflow`, `harel_workflow_tasks` |
//! | [`workflow_cancel_page`](Store::workflow_cancel_page), [`workflow_retry`](Store::workflow_retry) | `harel_cancel_workflow`, `harel_retry_workflow` |
//! | [`workflow_task_if_held`](Store::workflow_task_if_held) | `harel_workflow_task` |
//! | [`job_workflow`](Store::job_workflow) | `harel_job_workflow` |
//! | [`stats_read`](Store::stats_read) | the tables' first and last pages, their sizes and statistics |
//! | [`maintenance_run`](Store::maintenance_run) | `harel_maintain` |
//! | [`dependents_backlog_resolve`](Store::dependents_backlog_resolve) | `harel_resolve_backlog` |
//! | [`election_take`](Store::election_take) | `harel_elect` |
//! | [`tables_vacuum_check`](Store::tables_vacuum_check), [`tables_dead_rows`](Store::tables_dead_rows) | `pg_stat_user_tables` |
//! | [`tables_vacuum`](Store::tables_vacuum) | `VACUUM (SKIP_LOCKED)` |
//! | [`migrations_lock`](Store::migrations_lock) | creates the schema and its bookkeeping, locks `_migrations` |
//! | [`migrations_applied`](Store::migrations_applied) | `SELECT` on `_migrations` and `_functions` |
//! | [`migration_apply`](Store::migration_apply), [`function_apply`](Store::function_apply) | a migration or function file, and its bookkeeping row |
//! | [`function_grants_read`](Store::function_grants_read), [`function_grants_restore`](Store::function_grants_restore) | `pg_proc`'s ACLs; `GRANT EXECUTE` |
//! | [`privileges_lacking`](Store::privileges_lacking) | `has_*_privilege` over the catalog |
//! | [`schema_drop`](Store::schema_drop) | `DROP SCHEMA … CASCADE` (the test helpers) |
//! | `jobs_due_now`, `groups_due_now` (feature `testing`) | `UPDATE` on `transport_groups` and `transport_messages` (the test helpers) |
//! | [`session::synchronous_commit_set`], [`session::synchronous_commit_read`], [`session::synchronous_commit_restore`], [`session::transaction_begin`], [`session::synchronous_commit_set_local`], [`session::lock_timeout_set`] | `SET`, `current_setting`, `set_config`, `BEGIN` |
//! | [`session::listen`], [`session::listen_check`] | `LISTEN` |

mod catalog;
mod dead_letters;
mod groups;
mod jobs;
mod leases;
mod maintenance;
mod migrations;
mod queues;
mod schedules;
pub(crate) mod session;
mod statements;
#[cfg(test)]
pub(crate) use statements::split as split_statements;
mod stats;
mod steps;
mod testing;
mod workers;
mod workflows;

use std::fmt;
use std::sync::{Arc, OnceLock};

use sqlx::AssertSqlSafe;

use crate::schema::Schema;

pub(crate) use dead_letters::DeadLetterRow;
pub(crate) use groups::GroupRow;
pub(crate) use jobs::{Claim, JobRow, JobsFilter, ListRow, Publish};
pub(crate) use leases::{LeaseColumns, Settle};
pub(crate) use maintenance::VACUUMED_TABLES;
pub(crate) use migrations::AppliedRow;
pub(crate) use queues::{DepthRow, FairKeyRow, QueueRow, QueueSettings};
pub(crate) use schedules::Fire;
pub(crate) use stats::Figures;
pub(crate) use steps::HeldLease;
pub(crate) use workers::Report;
pub(crate) use workflows::{TaskOfJobRow, TaskRow, WorkflowRow};

/// How the statements harel-jobs sends are prepared on the server.
///
/// sqlx prepares a statement under a name the first time a connection runs it, keeps it in
/// the connection's cache, and afterwards only binds and executes it: one round trip per
/// call. A transaction pooler such as PgBouncer in `pool_mode = transaction` hands each
/// transaction (and each statement outside one) to whichever server connection is free, so
/// a statement prepared on one server connection is missing on the next ("prepared
/// statement \"sqlx_s_1\" does not exist", or "already exists" for another client) unless the
/// pooler tracks prepared statements itself (PgBouncer 1.21 and later, with
/// `max_prepared_statements` above zero).
///
/// Behind a pooler that does not (Debian 12's PgBouncer 1.18, for one), use
/// [`Unnamed`](Self::Unnamed) and run each call inside a transaction: sqlx parses an unnamed
/// statement in one exchange and binds it in the next, and only a transaction keeps both on
/// one server connection. See the guide's
/// ["Behind PgBouncer"](https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/operating.md#behind-pgbouncer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PreparedStatements {
    /// Named and cached per connection (sqlx's default): one round trip per call. For a
    /// direct connection, a session pooler, or a transaction pooler that tracks prepared
    /// statements.
    #[default]
    Cached,
    /// Unnamed, parsed again at each call: one more round trip per call, nothing kept on
    /// the server connection. For transaction poolers that do not track prepared
    /// statements; each call must then run inside a transaction.
    Unnamed,
}

impl PreparedStatements {
    /// Whether sqlx may keep the statement (`Query::persistent`).
    fn persistent(self) -> bool {
        matches!(self, Self::Cached)
    }
}

/// Declares the statements of the store: one variant of [`Statement`] each, with its
/// template (the SQL with `@schema@` where the schema's name goes).
macro_rules! statements {
    ($($(#[$doc:meta])* $name:ident = $template:expr,)*) => {
        /// One statement of the store, rendered once per [`Store`] on first use.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum Statement {
            $($(#[$doc])* $name,)*
        }

        impl Statement {
            /// Every statement, in declaration order (a statement's index is its place here).
            const ALL: &'static [Statement] = &[$(Statement::$name,)*];

            /// The SQL, with `@schema@` to render.
            fn template(self) -> &'static str {
                match self {
                    $(Statement::$name => $template,)*
                }
            }
        }
    };
}

statements! {
    /// [`Store::jobs_publish`].
    JobsPublish = jobs::PUBLISH,
    /// [`Store::jobs_claim`].
    JobsClaim = jobs::CLAIM,
    /// [`Store::job_get`].
    JobGet = jobs::GET,
    /// [`Store::jobs_list`].
    JobsList = jobs::LIST,
    /// [`Store::jobs_list`], newest first.
    JobsListNewest = jobs::LIST_NEWEST,
    /// [`Store::job_cancel`].
    JobCancel = jobs::CANCEL,
    /// [`Store::job_run_now`].
    JobRunNow = jobs::RUN_NOW,
    /// [`Store::job_parents`].
    JobParents = jobs::PARENTS,
    /// [`Store::job_steps`].
    JobSteps = jobs::STEPS,
    JobAttempts = jobs::ATTEMPTS,
    /// [`Store::leases_settle_if_held`].
    LeasesSettleIfHeld = leases::SETTLE_IF_HELD,
    /// [`Store::leases_extend_if_held`].
    LeasesExtendIfHeld = leases::EXTEND_IF_HELD,
    /// [`Store::steps_read_if_held`].
    StepsReadIfHeld = steps::READ_IF_HELD,
    /// [`Store::step_record_if_held`].
    StepRecordIfHeld = steps::RECORD_IF_HELD,
    /// [`Store::groups_list`] and [`Store::group_get`].
    GroupsList = groups::LIST,
    /// [`Store::groups_top`].
    GroupsTop = groups::TOP,
    /// [`Store::group_cancel_step`].
    GroupCancelStep = groups::CANCEL_STEP,
    /// [`Store::queues_list`].
    QueuesList = queues::LIST,
    /// [`Store::queues_sample`].
    QueuesSample = queues::SAMPLE,
    /// [`Store::queues_depth`].
    QueuesDepth = queues::DEPTH,
    /// [`Store::queue_set`].
    QueueSet = queues::SET,
    /// [`Store::fair_weight_set`].
    FairWeightSet = queues::FAIR_WEIGHT_SET,
    /// [`Store::key_limits_set`].
    KeyLimitsSet = queues::KEY_LIMITS_SET,
    /// [`Store::fair_keys_list`].
    FairKeysList = queues::FAIR_KEYS_LIST,
    /// [`Store::workers_list`].
    WorkersList = workers::LIST,
    /// [`Store::worker_report`].
    WorkerReport = workers::REPORT,
    /// [`Store::throughput_list`].
    ThroughputList = workers::THROUGHPUT,
    /// [`Store::throughput_by_queue_list`].
    ThroughputByQueueList = workers::THROUGHPUT_BY_QUEUE,
    /// [`Store::schedules_list`].
    SchedulesList = schedules::LIST,
    /// [`Store::schedules_last_ticks`].
    SchedulesLastTicks = schedules::LAST_TICKS,
    /// [`Store::schedule_fire_if_due`].
    ScheduleFireIfDue = schedules::FIRE_IF_DUE,
    /// [`Store::schedule_delete`].
    ScheduleDelete = schedules::DELETE,
    /// [`Store::schedules_triggers`].
    SchedulesTriggers = schedules::TRIGGERS,
    /// [`Store::schedule_control`].
    ScheduleControl = schedules::CONTROL,
    /// [`Store::dead_letters_list`].
    DeadLettersList = dead_letters::LIST,
    /// [`Store::dead_letter_get`].
    DeadLetterGet = dead_letters::GET,
    /// [`Store::dead_letters_count`].
    DeadLettersCount = dead_letters::COUNT,
    /// [`Store::dead_letters_count_matching`].
    DeadLettersCountMatching = dead_letters::COUNT_MATCHING,
    /// [`Store::dead_letters_retry`].
    DeadLettersRetry = dead_letters::RETRY,
    /// [`Store::dead_letters_delete`].
    DeadLettersDelete = dead_letters::DELETE,
    /// [`Store::dead_letters_purge_before`].
    DeadLettersPurgeBefore = dead_letters::PURGE_BEFORE,
    /// [`Store::workflow_publish`].
    WorkflowPublish = workflows::PUBLISH,
    /// [`Store::workflows_list`].
    WorkflowsList = workflows::LIST,
    /// [`Store::workflow_get`].
    WorkflowGet = workflows::GET,
    /// [`Store::workflow_tasks`].
    WorkflowTasks = workflows::STEPS,
    /// [`Store::workflow_cancel_page`].
    WorkflowCancelPage = workflows::CANCEL_PAGE,
    /// [`Store::workflow_retry`].
    WorkflowRetry = workflows::RETRY,
    /// [`Store::workflow_task_if_held`].
    WorkflowTaskIfHeld = workflows::TASK_IF_HELD,
    /// [`Store::job_workflow`].
    JobWorkflow = workflows::JOB_WORKFLOW,
    /// [`Store::stats_read`].
    StatsRead = stats::statement(),
    /// [`Store::maintenance_run`].
    MaintenanceRun = maintenance::RUN,
    /// [`Store::dependents_backlog_resolve`].
    DependentsBacklogResolve = maintenance::BACKLOG_RESOLVE,
    /// [`Store::election_take`].
    ElectionTake = maintenance::ELECTION_TAKE,
    /// [`Store::tables_vacuum_check`].
    TablesVacuumCheck = maintenance::VACUUM_CHECK,
    /// [`Store::tables_dead_rows`].
    TablesDeadRows = maintenance::DEAD_ROWS,
    /// [`Store::migrations_lock`].
    MigrationsLock = migrations::LOCK,
    /// [`Store::migrations_applied`].
    MigrationsApplied = migrations::APPLIED,
    /// [`Store::migration_apply`]'s bookkeeping row.
    MigrationRecord = migrations::MIGRATION_RECORD,
    /// [`Store::function_apply`]'s bookkeeping row.
    FunctionRecord = migrations::FUNCTION_RECORD,
    /// [`Store::function_grants_read`].
    FunctionGrantsRead = catalog::FUNCTION_GRANTS_READ,
    /// [`Store::function_grants_restore`].
    FunctionGrantsRestore = catalog::FUNCTION_GRANTS_RESTORE,
    /// [`Store::privileges_lacking`].
    PrivilegesLacking = catalog::PRIVILEGES_LACKING,
    /// [`Store::schema_drop`].
    SchemaDrop = migrations::SCHEMA_DROP,
    /// `Store::jobs_due_now` (feature `testing`).
    JobsDueNow = testing::JOBS_DUE_NOW,
    /// `Store::groups_due_now` (feature `testing`).
    GroupsDueNow = testing::GROUPS_DUE_NOW,
}

/// The statements of one schema, each rendered on first use and kept.
struct Rendered {
    schema: Schema,
    sql: [OnceLock<Arc<str>>; Statement::ALL.len()],
}

/// The data layer of one schema: its statements, rendered once, and how they are prepared.
/// Cheap to clone (the rendered statements are shared); holds no connection.
#[derive(Clone)]
pub(crate) struct Store {
    rendered: Arc<Rendered>,
    prepared: PreparedStatements,
}

impl Store {
    /// The store of the queue in `schema`, whose statements go as `prepared` says: the one
    /// policy of every method (but the few whose documentation says otherwise). The
    /// application's setting where it has one (`Client::prepared_statements`,
    /// `Transport::prepared_statements`, `Enqueue::prepared_statements`, a worker's
    /// `behind_transaction_pooler`); [`PreparedStatements::Unnamed`] where the caller cannot
    /// know whether a transaction pooler is in the way and must work behind one
    /// (migrations, the privileges diagnosis, [`DeadLetters`](crate::DeadLetters)).
    pub(crate) fn new(schema: Schema, prepared: PreparedStatements) -> Self {
        Self {
            rendered: Arc::new(Rendered {
                schema,
                sql: std::array::from_fn(|_| OnceLock::new()),
            }),
            prepared,
        }
    }

    /// The same statements (rendered once for both), prepared as `prepared` says.
    pub(crate) fn with_prepared(mut self, prepared: PreparedStatements) -> Self {
        self.prepared = prepared;
        self
    }

    /// The schema it works in.
    pub(crate) fn schema(&self) -> &Schema {
        &self.rendered.schema
    }

    /// How its statements are prepared.
    pub(crate) fn prepared(&self) -> PreparedStatements {
        self.prepared
    }

    /// Whether sqlx may keep its statements (`Query::persistent`): the policy.
    fn persistent(&self) -> bool {
        self.prepared.persistent()
    }

    /// `statement` rendered for the schema (once per store).
    fn sql(&self, statement: Statement) -> AssertSqlSafe<Arc<str>> {
        // a variant's discriminant is its place in `Statement::ALL`
        let rendered = self.rendered.sql[statement as usize]
            .get_or_init(|| Arc::from(self.rendered.schema.render(statement.template())));
        AssertSqlSafe(Arc::clone(rendered))
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("schema", self.schema())
            .field("prepared", &self.prepared)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_renders_for_its_schema() {
        let store = Store::new(Schema::new("q1").unwrap(), PreparedStatements::Cached);
        for statement in Statement::ALL {
            let sql = store.sql(*statement).0;
            assert!(!sql.contains("@schema@"), "{statement:?}: {sql}");
            assert!(!sql.contains("\"harel\""), "{statement:?}: {sql}");
        }
        assert!(
            store
                .sql(Statement::JobsPublish)
                .0
                .contains("\"q1\".harel_publish(")
        );
    }

    #[test]
    fn a_statement_s_discriminant_is_its_place() {
        for (index, statement) in Statement::ALL.iter().enumerate() {
            assert_eq!(*statement as usize, index, "{statement:?}");
        }
    }

    #[test]
    fn a_statement_is_rendered_once_and_shared_by_clones() {
        let store = Store::new(Schema::default(), PreparedStatements::Cached);
        let unnamed = store.clone().with_prepared(PreparedStatements::Unnamed);
        let first = store.sql(Statement::JobGet).0;
        let again = unnamed.sql(Statement::JobGet).0;
        assert!(Arc::ptr_eq(&first, &again));
        assert!(store.persistent());
        assert!(!unnamed.persistent());
    }
}
