//! Which privilege a role lacks, once PostgreSQL has refused a statement for lack of one
//! (SQLSTATE 42501): read from the catalog (readable by every role), so that a role without
//! `USAGE` on the schema is not told the schema is not migrated, and a role without an
//! `EXECUTE` is told which function.

use sqlx::PgPool;

use crate::error::{DatabaseError, MissingPrivilege};
use crate::schema::Schema;
use crate::store::{PreparedStatements, Store};
use crate::vocabulary::quote_identifier;

/// The privileges the role running on `pool` lacks that explain a refusal: `USAGE` on
/// `schema` (alone when it is missing: nothing in the schema can be reached without it),
/// else `EXECUTE` on the schema's functions and the first of `table_privileges` lacking on
/// its tables, among the objects named in `names` (the words of PostgreSQL's message,
/// which names the object in any language). Empty when the schema does not exist, or the
/// role lacks nothing of these.
///
/// # Errors
/// [`DatabaseError`] if the catalog cannot be read.
pub(crate) async fn missing(
    pool: &PgPool,
    schema: &Schema,
    names: &[String],
    table_privileges: &[&str],
) -> Result<Vec<MissingPrivilege>, DatabaseError> {
    // an unnamed statement in a transaction of its own, for transaction poolers: its
    // callers (a worker's schema check, the command line's diagnosis) cannot know whether
    // one is in the way
    let mut tx = pool.begin().await?;
    let rows = Store::new(schema.clone(), PreparedStatements::Unnamed)
        .privileges_lacking(&mut *tx, names, table_privileges)
        .await?;
    // read-only: ending it either way is the same
    let _ = tx.rollback().await;
    let missing: Vec<MissingPrivilege> = rows
        .into_iter()
        .filter_map(|(role, privilege, kind, object)| {
            let privilege = ["USAGE", "EXECUTE", "SELECT", "DELETE", "INSERT", "UPDATE"]
                .into_iter()
                .find(|known| *known == privilege)?;
            let object_kind = ["schema", "function", "table"]
                .into_iter()
                .find(|known| *known == kind)?;
            let object = match object {
                Some(name) => format!("{}.{}", schema.name(), quote_identifier(&name)),
                None => schema.name().to_owned(),
            };
            Some(MissingPrivilege {
                role,
                privilege,
                object_kind,
                object,
            })
        })
        .collect();
    if let Some(usage) = missing.iter().find(|m| m.object_kind == "schema") {
        return Ok(vec![usage.clone()]);
    }
    Ok(missing)
}
