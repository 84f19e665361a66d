//! The catalog: who may execute the schema's functions, and which privilege a role lacks.

use sqlx::{AssertSqlSafe, PgConnection, PgExecutor};

use super::{Statement, Store};

pub(super) const FUNCTION_GRANTS_READ: &str = "SELECT p.proname::text, a.grantee::regrole::text
       FROM pg_proc p
      CROSS JOIN LATERAL aclexplode(p.proacl) AS a
      WHERE p.pronamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = $1)
        AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner";

// identifiers quoted by the server (format's %I); only names read from the catalog
pub(super) const FUNCTION_GRANTS_RESTORE: &str =
    "SELECT format('GRANT EXECUTE ON FUNCTION %s TO %s', p.oid::regprocedure, g.role)
       FROM unnest($2::text[], $3::text[]) AS g(function, role)
       JOIN pg_proc p ON p.proname = g.function
      WHERE p.pronamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = $1)";

pub(super) const PRIVILEGES_LACKING: &str =
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
      WHERE c.relname::text = ANY ($2::text[]) AND c.relkind IN ('r', 'p', 'v', 'm')";

impl Store {
    /// Who may execute which of the schema's functions (by name), other than their owner:
    /// `(function, role)` pairs.
    pub(crate) async fn function_grants_read<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
    ) -> Result<Vec<(String, String)>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::FunctionGrantsRead))
            .bind(self.schema().name())
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// Gives each role of `grants` back its `EXECUTE` on the schema's function of that
    /// name (whatever its signature now is). A grant that is still there is given again,
    /// which changes nothing.
    pub(crate) async fn function_grants_restore(
        &self,
        tx: &mut PgConnection,
        grants: &[(String, String)],
    ) -> Result<(), sqlx::Error> {
        let (functions, roles): (Vec<&str>, Vec<&str>) = grants
            .iter()
            .map(|(function, role)| (function.as_str(), role.as_str()))
            .unzip();
        let statements: Vec<String> =
            sqlx::query_scalar(self.sql(Statement::FunctionGrantsRestore))
                .bind(self.schema().name())
                .bind(functions)
                .bind(roles)
                .persistent(self.persistent())
                .fetch_all(&mut *tx)
                .await?;
        // made by the server of names read from its catalog (see the statement)
        for statement in statements {
            sqlx::raw_sql(AssertSqlSafe(statement))
                .execute(&mut *tx)
                .await?;
        }
        Ok(())
    }

    /// The privileges the current role lacks: `USAGE` on the schema; `EXECUTE` on those of
    /// its functions named in `names`; the first of `table_privileges` it lacks on each of
    /// its tables named in `names`. Rows of role, privilege, object kind (`schema`,
    /// `function`, `table`) and object name (`None` for the schema).
    pub(crate) async fn privileges_lacking<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        names: &[String],
        table_privileges: &[&str],
    ) -> Result<Vec<(String, String, String, Option<String>)>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::PrivilegesLacking))
            .bind(self.schema().name())
            .bind(names)
            .bind(table_privileges)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }
}
