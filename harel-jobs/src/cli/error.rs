//! What can go wrong in the command line, and the exit code each failure gives.

use crate::error::{
    ClientError, ConfigError, ConnectError, DatabaseError, MigrateError, MissingPrivilege,
};
use crate::vocabulary::JobId;

/// Why a command failed. Messages are lowercase and never hold the database password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CliError {
    /// Neither `--database-url` nor `DATABASE_URL` names the database.
    #[error("no database: pass --database-url or set DATABASE_URL")]
    NoDatabase,
    /// `--schema` is not a valid schema name.
    #[error(transparent)]
    Schema(#[from] ConfigError),
    /// The database could not be reached, or refused the connection.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The schema is not migrated for this release, or migrating failed.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    /// A client call failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A database statement failed.
    #[error("database error: {0}")]
    Database(#[from] DatabaseError),
    /// No job has this id.
    #[error("no job {0} (or it completed without retention, or its history was pruned)")]
    NoJob(JobId),
    /// No dead letter has this id.
    #[error("no dead letter {0}")]
    NoDeadLetter(JobId),
    /// Some of the dead letters named were not found (the others were acted on).
    #[error("no dead letter {}", list(.0))]
    NoDeadLetters(Vec<JobId>),
    /// No group has this id.
    #[error("no group {0:?} (a group exists only while it holds jobs)")]
    NoGroup(String),
    /// No workflow has this id.
    #[error("no workflow {0}")]
    NoWorkflow(i64),
    /// An argument out of range that the grammar let through.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// A malformed `--allowed-host` (or `HAREL_DASHBOARD_ALLOWED_HOSTS` entry).
    #[cfg(feature = "dashboard")]
    #[error("invalid argument: --allowed-host: {0}")]
    InvalidHost(String),
    /// PostgreSQL refused a statement, and the catalog says which privileges the role
    /// lacks.
    #[error("{source}: {}", missing_list(.missing))]
    PermissionDenied {
        /// What the role lacks (at least one).
        missing: Vec<MissingPrivilege>,
        /// The refusal.
        source: Box<CliError>,
    },
    /// A confirmation was declined, or could not be asked.
    #[error("{0}")]
    NotConfirmed(&'static str),
    /// Writing the output or reading the answer failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

fn missing_list(missing: &[MissingPrivilege]) -> String {
    missing
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn list(ids: &[JobId]) -> String {
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl CliError {
    /// 2 for a usage error (like clap's own), 1 for any other failure.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Self::NoDatabase
            | Self::Schema(_)
            | Self::InvalidArgument(_)
            | Self::Client(ClientError::InvalidArgument(_)) => 2,
            #[cfg(feature = "dashboard")]
            Self::InvalidHost(_) => 2,
            Self::Connect(ConnectError::InvalidUrl { .. } | ConnectError::NotPostgres { .. }) => 2,
            _ => 1,
        }
    }

    /// The database's refusal for lack of a privilege, if that is what this is.
    pub(crate) fn permission_denied(&self) -> Option<&DatabaseError> {
        match self {
            Self::Client(ClientError::Database(error))
            | Self::Database(error)
            | Self::Migrate(MigrateError::Database(error)) => {
                error.is_permission_denied().then_some(error)
            }
            _ => None,
        }
    }

    /// A line of advice to print after the error, if there is one.
    pub(crate) fn hint(&self) -> Option<String> {
        const ROLES: &str = "docs/guide/operating.md, \"Database roles\", lists each role's grants";
        let grants = |missing: &[MissingPrivilege]| {
            let grants: Vec<String> = missing.iter().map(MissingPrivilege::grant).collect();
            format!("as the schema's owner: {}; {ROLES}", grants.join("; "))
        };
        match self {
            Self::PermissionDenied { missing, .. } => Some(grants(missing)),
            Self::Migrate(MigrateError::PermissionDenied(missing)) => {
                Some(grants(std::slice::from_ref(missing)))
            }
            _ if self.permission_denied().is_some() => {
                Some(format!("the role lacks a grant: {ROLES} (the operator's)"))
            }
            Self::Migrate(MigrateError::NotMigrated { .. }) => Some(
                "is --schema right? To create or upgrade it, run `harel-jobs migrate` as the \
                 schema's owner"
                    .to_owned(),
            ),
            _ => None,
        }
    }
}
