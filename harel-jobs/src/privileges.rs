//! Which privilege a role lacks, once PostgreSQL has refused a statement for lack of one
//! (SQLSTATE 42501): read from the catalog (readable by every role), so that a role without
//! `USAGE` on the schema is not told the schema is not migrated, and a role without an
//! `EXECUTE` is told which function.

use sqlx::PgPool;

use crate::error::{DatabaseError, MissingPrivilege};
use crate::schema::Schema;
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
    // unnamed statements in a transaction of their own, for transaction poolers
    let mut tx = pool.begin().await?;
    let rows: Vec<(String, String, String, Option<String>)> = sqlx::query_as(
        "WITH ns AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1)
         SELECT current_user::text, 'USAGE', 'schema', NULL::text
           FROM ns WHERE NOT pg_catalog.has_schema_privilege(ns.oid, 'USAGE')
         UNION ALL
         SELECT DISTINCT current_user::text, 'EXECUTE', 'function', p.proname::text
           FROM ns JOIN pg_catalog.pg_proc p ON p.pronamespace = ns.oid
          WHERE p.proname::text = ANY ($2::text[])
            AND NOT pg_catalog.has_function_privilege(p.oid, 'EXECUTE')
         UNION ALL
         SELECT current_user::text, lacking.privilege, 'table', c.relname::text
           FROM ns JOIN pg_catalog.pg_class c ON c.relnamespace = ns.oid
          CROSS JOIN LATERAL (
                SELECT w.privilege FROM unnest($3::text[]) WITH ORDINALITY AS w (privilege, n)
                 WHERE NOT pg_catalog.has_table_privilege(c.oid, w.privilege)
                 ORDER BY w.n LIMIT 1) AS lacking
          WHERE c.relname::text = ANY ($2::text[]) AND c.relkind IN ('r', 'p', 'v', 'm')",
    )
    .bind(schema.name())
    .bind(names)
    .bind(table_privileges)
    .persistent(false)
    .fetch_all(&mut *tx)
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
