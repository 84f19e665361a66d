//! A migration or function file cut into its statements, so that `migrate` sends them one
//! at a time (still in one transaction).
//!
//! Why: PostgreSQL runs a multi-statement string sent by the simple query protocol, but
//! Citus forwards a DDL command's *whole* query string to the node holding a distributed
//! schema's tables, over the extended protocol, which refuses several commands ("cannot
//! insert multiple commands into a prepared statement"). Sent one by one, every statement
//! is its own query string, on plain PostgreSQL as on Citus.
//!
//! The cut follows PostgreSQL's lexer where a `;` can hide: `--` and nested `/* */`
//! comments, `'…'` strings (`''` inside; backslash escapes in `E'…'`), `"…"` identifiers,
//! and `$tag$…$tag$` bodies. The files are ours, checked by the tests below and by every
//! migration the suite runs; this is not a parser for arbitrary SQL.

/// The statements of `sql`, each without its `;`, leaving out those that hold only blanks
/// and comments.
pub(crate) fn split(sql: &str) -> Vec<&str> {
    let bytes = sql.as_bytes();
    let mut statements = Vec::new();
    let mut start = 0;
    let mut code = false; // something other than blanks and comments since `start`
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        match bytes[i] {
            b'-' if rest.starts_with(b"--") => {
                i = rest
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |end| i + end + 1);
                continue;
            }
            b'/' if rest.starts_with(b"/*") => {
                i = block_comment_end(bytes, i);
                continue;
            }
            b'\'' => {
                let escapes = i > 0
                    && matches!(bytes[i - 1], b'E' | b'e')
                    && (i < 2 || !is_identifier_byte(bytes[i - 2]));
                i = quoted_end(bytes, i, b'\'', escapes);
            }
            b'"' => i = quoted_end(bytes, i, b'"', false),
            b'$' if i == 0 || !is_identifier_byte(bytes[i - 1]) => {
                i = match dollar_tag(rest) {
                    Some(tag) => rest[tag.len()..]
                        .windows(tag.len())
                        .position(|window| window == tag)
                        .map_or(bytes.len(), |at| i + tag.len() + at + tag.len()),
                    None => i + 1,
                };
            }
            b';' => {
                if code {
                    statements.push(sql[start..i].trim());
                }
                start = i + 1;
                code = false;
                i += 1;
                continue;
            }
            b if b.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            _ => i += 1,
        }
        code = true;
    }
    if code {
        statements.push(sql[start..].trim());
    }
    statements
}

/// Letters, digits, `_` and `$` continue an identifier (and bytes of non-ASCII letters).
fn is_identifier_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'$' || byte >= 0x80
}

/// Just past the `*/` closing the comment opening at `from` (comments nest).
fn block_comment_end(bytes: &[u8], from: usize) -> usize {
    let mut depth = 0_usize;
    let mut i = from;
    while i + 1 < bytes.len() {
        match &bytes[i..i + 2] {
            b"/*" => {
                depth += 1;
                i += 2;
            }
            b"*/" => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Just past the quote closing the one at `from` (a doubled quote stays inside; with
/// `escapes`, so does a quote after a backslash).
fn quoted_end(bytes: &[u8], from: usize, quote: u8, escapes: bool) -> usize {
    let mut i = from + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if escapes => i += 2,
            b if b == quote => {
                if bytes.get(i + 1) == Some(&quote) {
                    i += 2;
                } else {
                    return i + 1;
                }
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The dollar-quote tag (`$$`, `$body$`) at the start of `rest`, if one opens there (a
/// `$1` parameter does not: a tag does not start with a digit).
fn dollar_tag(rest: &[u8]) -> Option<&[u8]> {
    let inner = rest[1..]
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80))
        .map_or(rest.len() - 1, |end| end);
    let starts_with_digit = rest.get(1).is_some_and(u8::is_ascii_digit);
    (rest.get(1 + inner) == Some(&b'$') && !starts_with_digit).then(|| &rest[..inner + 2])
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn cuts_at_semicolons_outside_comments_strings_and_bodies() {
        let sql = "
            -- a comment; with a semicolon
            CREATE TABLE t (a TEXT DEFAULT 'x;y', \"b;c\" INT); /* a; /* nested; */ comment */
            CREATE FUNCTION f() RETURNS INT LANGUAGE plpgsql AS $body$
            BEGIN
                RAISE NOTICE 'in; body $$ not the end';
                RETURN 1;
            END $body$;
            DO $$ BEGIN PERFORM 1; END $$;
            SELECT E'it\\'s; fine', 'it''s; fine', $1, a$b FROM t;
            -- only a comment at the end;
        ";
        let statements = split(sql);
        assert_eq!(statements.len(), 4, "{statements:#?}");
        assert!(statements[0].ends_with("\"b;c\" INT)"));
        assert!(statements[1].starts_with("/* a; /* nested; */ comment */"));
        assert!(statements[1].ends_with("END $body$"));
        assert_eq!(statements[2], "DO $$ BEGIN PERFORM 1; END $$");
        assert!(statements[3].ends_with("a$b FROM t"));
    }

    #[test]
    fn a_last_statement_without_semicolon_and_blank_statements() {
        assert_eq!(
            split(";; SELECT 1;\n;\n SELECT 2 "),
            ["SELECT 1", "SELECT 2"]
        );
        assert!(split("  -- nothing\n /* at all */ ").is_empty());
    }

    /// Every file `migrate` sends cuts into statements that each parse on their own (the
    /// suite runs them all; here: none starts inside a body or a string).
    #[test]
    fn every_file_of_ours_cuts_where_a_statement_ends() {
        for (name, sql) in crate::migrate::texts() {
            for statement in split(sql) {
                let first = statement
                    .lines()
                    .map(str::trim)
                    .find(|line| !line.is_empty() && !line.starts_with("--"))
                    .unwrap_or_default()
                    .to_ascii_uppercase();
                let known = [
                    "CREATE", "ALTER", "DROP", "GRANT", "REVOKE", "COMMENT", "DO", "INSERT",
                    "UPDATE", "DELETE", "SELECT", "LOCK", "SET", "WITH", "/*",
                ];
                assert!(
                    known.iter().any(|word| first.starts_with(word)),
                    "{name}: a statement starts with {first:?}"
                );
            }
        }
    }
}
