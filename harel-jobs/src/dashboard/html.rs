//! Building HTML safely: escaping, the page shell, links, tables and forms. Every value from
//! the database or the request goes through [`escape`] (or [`attr`]).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

/// `text` with `& < > " '` escaped: safe in element content and in quoted attributes.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` percent-encoded for a URL's query.
pub(crate) fn query_value(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A time, in UTC to the second, with its full value as a tooltip.
pub(crate) fn time(at: DateTime<Utc>) -> String {
    format!(
        "<time datetime=\"{}\">{}</time>",
        at.to_rfc3339(),
        at.format("%Y-%m-%d %H:%M:%S")
    )
}

/// A span of time for people: `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`.
pub(crate) fn span(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3_600 => format!("{} min", s / 60),
        3_600..86_400 => format!("{} h {} min", s / 3_600, s % 3_600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3_600),
    }
}

/// [`time`], or a dash.
pub(crate) fn opt_time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| "–".to_owned(), time)
}

/// A text cut to `max` characters (with `…`), escaped, the whole text as a tooltip.
pub(crate) fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return escape(text);
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("<span title=\"{}\">{}…</span>", escape(text), escape(&cut))
}

/// The pages of the navigation bar: path and label.
const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/queues", "Queues"),
    ("/jobs", "Jobs"),
    ("/groups", "Groups"),
    ("/dead", "Dead letters"),
    ("/schedules", "Schedules"),
    ("/workflows", "Workflows"),
];

/// What every page shares: the page's title and section, the prefix the router is mounted
/// under, and whether actions are shown.
pub(crate) struct Shell<'a> {
    /// The `<title>` and `<h1>`.
    pub(crate) title: &'a str,
    /// The navigation entry to highlight.
    pub(crate) section: &'a str,
    /// The schema shown in the header.
    pub(crate) schema: &'a str,
    /// Whether the dashboard is read-only (a banner says so).
    pub(crate) read_only: bool,
    /// A notice to show on top (after an action).
    pub(crate) notice: Option<String>,
}

/// A whole page: the shell around `body`. `base` is the path the dashboard is mounted at
/// (empty at the root), which every link starts with.
pub(crate) fn page(shell: &Shell<'_>, base: &str, body: &str) -> String {
    let mut nav = String::new();
    for (path, label) in NAV {
        let current = if *path == shell.section {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(nav, "<a href=\"{base}{path}\"{current}>{label}</a>");
    }
    let banner = if shell.read_only {
        "<p class=\"banner\">Read-only: actions are disabled.</p>"
    } else {
        ""
    };
    let notice = shell
        .notice
        .as_deref()
        .map(|n| format!("<p class=\"notice\" role=\"status\">{}</p>", escape(n)))
        .unwrap_or_default();
    format!(
        "<!doctype html>
<html lang=\"en\">
<head>
<meta charset=\"utf-8\">
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">
<title>{title} · harel-jobs</title>
<link rel=\"stylesheet\" href=\"{base}/assets/style.css\">
<script src=\"{base}/assets/app.js\" defer></script>
</head>
<body>
<header><span class=\"brand\">harel-jobs</span><span class=\"schema\">schema <b>{schema}</b></span><nav>{nav}</nav></header>
<main>
{banner}{notice}<h1>{title}</h1>
{body}
</main>
</body>
</html>
",
        title = escape(shell.title),
        schema = escape(shell.schema),
    )
}

/// A table: headers and rows of ready-made HTML cells, or `empty` when there are none. It
/// sits in a container of its own that scrolls sideways on a narrow screen, so a wide table
/// never widens the page.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>], empty: &str) -> String {
    if rows.is_empty() {
        return format!("<p class=\"empty\">{}</p>", escape(empty));
    }
    let mut out = String::from("<div class=\"table-wrap\"><table><thead><tr>");
    for header in headers {
        let _ = write!(out, "<th>{}</th>", escape(header));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
}

/// A definition list of ready-made HTML values.
pub(crate) fn fields(pairs: &[(&str, String)]) -> String {
    let mut out = String::from("<dl class=\"fields\">");
    for (key, value) in pairs {
        let _ = write!(out, "<dt>{}</dt><dd>{value}</dd>", escape(key));
    }
    out.push_str("</dl>");
    out
}

/// A POST form with the CSRF token, hidden `fields`, and one button; `confirm` (if any) is
/// asked in the browser before it is sent (assets/app.js).
pub(crate) fn action(
    path: &str,
    csrf: &str,
    fields: &[(&str, String)],
    button: &str,
    class: &str,
    confirm: Option<&str>,
) -> String {
    let mut out = format!(
        "<form method=\"post\" action=\"{}\" class=\"inline\"",
        escape(path)
    );
    if let Some(question) = confirm {
        let _ = write!(out, " data-confirm=\"{}\"", escape(question));
    }
    let _ = write!(
        out,
        "><input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        escape(csrf)
    );
    for (name, value) in fields {
        let _ = write!(
            out,
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
            escape(name),
            escape(value)
        );
    }
    let _ = write!(
        out,
        "<button type=\"submit\" class=\"{}\">{}</button></form>",
        escape(class),
        escape(button)
    );
    out
}

/// A link.
pub(crate) fn link(href: &str, text: &str) -> String {
    format!("<a href=\"{}\">{}</a>", escape(href), escape(text))
}

/// A state or status as a coloured badge.
pub(crate) fn badge(state: &str) -> String {
    format!("<span class=\"badge badge-{0}\">{0}</span>", escape(state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_like_people_say_them() {
        assert_eq!(span(-3), "0 s");
        assert_eq!(span(59), "59 s");
        assert_eq!(span(125), "2 min");
        assert_eq!(span(3_600 * 3 + 300), "3 h 5 min");
        assert_eq!(span(86_400 * 2 + 3_600 * 4), "2 d 4 h");
    }

    #[test]
    fn everything_that_could_be_markup_is_escaped() {
        assert_eq!(
            escape("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
        let form = action(
            "jobs/1/cancel",
            "t\"ok",
            &[("reason", "<b>".into())],
            "Cancel",
            "danger",
            Some("Sure \"now\"?"),
        );
        assert!(form.contains("value=\"t&quot;ok\""), "{form}");
        assert!(form.contains("value=\"&lt;b&gt;\""), "{form}");
        assert!(
            form.contains("data-confirm=\"Sure &quot;now&quot;?\""),
            "{form}"
        );
        assert_eq!(query_value("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
        assert!(short(&"x".repeat(50), 10).contains("xxxxxxxxx…"));
    }
}
