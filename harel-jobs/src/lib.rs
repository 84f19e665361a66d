//! harel-jobs: a job queue on PostgreSQL.
#![warn(missing_docs)]

mod connect;
mod error;
mod migrate;
mod schema;
pub mod transport;

pub use connect::{ConnectOptions, connect, connect_options_with, connect_with};
pub use error::{
    ConfigError, ConnectError, DatabaseError, InvalidMessage, MigrateError, PublishError,
    TransportError,
};
pub use migrate::{SCHEMA_VERSION, migrate, migrate_schema};
pub use schema::Schema;
pub use transport::Priority;
