//! The PostgreSQL schema everything of harel-jobs lives in.

use std::fmt;
use std::sync::Arc;

use crate::error::ConfigError;
use crate::vocabulary::MAX_SCHEMA_NAME_BYTES;

/// The name of the PostgreSQL schema holding the queue's tables and functions.
///
/// Default `harel`. Keeping the queue in its own schema means it never clashes with the
/// application's tables, and several independent queues can share one database.
///
/// Identifiers cannot be bound as query parameters, so the name is validated instead: 1 to
/// [`MAX_NAME_BYTES`](Self::MAX_NAME_BYTES) (48) lowercase ASCII letters, digits or `_`, not
/// starting with a digit. It is always double-quoted where it appears in SQL.
///
/// ```
/// use harel_jobs::Schema;
/// assert_eq!(Schema::default().name(), "harel");
/// assert!(Schema::new("billing_jobs").is_ok());
/// assert!(Schema::new("Robert'); DROP TABLE students;--").is_err());
/// assert!(Schema::new("pg_catalog").is_err()); // PostgreSQL's own
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Schema {
    name: Arc<str>,
}

impl Schema {
    /// The default schema name.
    pub const DEFAULT_NAME: &'static str = "harel";

    /// The longest schema name accepted, in bytes: 48. PostgreSQL allows 63, and the
    /// NOTIFY channel's name is the schema's with a suffix.
    pub const MAX_NAME_BYTES: usize = MAX_SCHEMA_NAME_BYTES;

    /// Validates a schema name.
    ///
    /// # Errors
    /// [`ConfigError::InvalidSchemaName`] if it is not a plain lowercase identifier;
    /// [`ConfigError::ReservedSchemaName`] if it is one of PostgreSQL's own schemas
    /// (`information_schema`, or any name starting with `pg_`, such as `pg_catalog`,
    /// `pg_toast` and `pg_temp`).
    pub fn new(name: &str) -> Result<Self, ConfigError> {
        let bytes = name.as_bytes();
        let valid = !bytes.is_empty()
            && bytes.len() <= Self::MAX_NAME_BYTES
            && !bytes[0].is_ascii_digit()
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_');
        if !valid {
            return Err(ConfigError::InvalidSchemaName(name.to_owned()));
        }
        if name.starts_with("pg_") || name == "information_schema" {
            return Err(ConfigError::ReservedSchemaName(name.to_owned()));
        }
        Ok(Self { name: name.into() })
    }

    /// The bare name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as a quoted SQL identifier.
    pub(crate) fn quoted(&self) -> String {
        // validated: no quote can occur inside
        format!("\"{}\"", self.name)
    }

    /// The LISTEN/NOTIFY channel on which enqueues wake idle workers.
    pub fn channel(&self) -> String {
        format!("{}_harel_jobs", self.name)
    }

    /// Fills the `@schema@` and `@channel@` placeholders of a SQL template.
    pub(crate) fn render(&self, template: &str) -> String {
        template
            .replace("@schema@", &self.quoted())
            .replace("@channel@", &format!("'{}'", self.channel()))
    }
}

impl Default for Schema {
    fn default() -> Self {
        Self {
            name: Self::DEFAULT_NAME.into(),
        }
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schema({:?})", &*self.name)
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl TryFrom<&str> for Schema {
    type Error = ConfigError;
    fn try_from(name: &str) -> Result<Self, ConfigError> {
        Self::new(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_identifiers() {
        for name in ["harel", "_q", "jobs_2", &"a".repeat(Schema::MAX_NAME_BYTES)] {
            assert!(Schema::new(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn rejects_anything_else() {
        for name in [
            "",
            "1jobs",
            "Jobs",
            "jobs-x",
            "jobs x",
            "a\"b",
            "é",
            &"a".repeat(Schema::MAX_NAME_BYTES + 1),
        ] {
            assert_eq!(
                Schema::new(name),
                Err(ConfigError::InvalidSchemaName(name.to_owned()))
            );
        }
    }

    #[test]
    fn refuses_postgresql_s_own_schemas() {
        for name in [
            "pg_catalog",
            "information_schema",
            "pg_toast",
            "pg_temp",
            "pg_temp_3",
            "pg_",
            "pg_jobs",
        ] {
            let error = Schema::new(name).unwrap_err();
            assert_eq!(error, ConfigError::ReservedSchemaName(name.to_owned()));
            let message = error.to_string();
            assert!(message.contains("reserved by PostgreSQL"), "{message}");
        }
        // only the prefix `pg_` and information_schema are PostgreSQL's
        for name in [
            "pg",
            "pgq",
            "my_pg_jobs",
            "public",
            "information",
            "information_schema2",
        ] {
            assert!(Schema::new(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn renders_placeholders() {
        let schema = Schema::new("q1").unwrap();
        assert_eq!(
            schema.render("SELECT @schema@.f(@channel@)"),
            "SELECT \"q1\".f('q1_harel_jobs')"
        );
    }
}
