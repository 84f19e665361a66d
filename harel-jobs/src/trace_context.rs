//! A job's trace context (feature `opentelemetry`): the W3C `traceparent` (and
//! `tracestate`) of the span that enqueued it, stored with the job (migration 0009) and made
//! the parent of each attempt's span, so that a trace runs "request → enqueue → job".
//!
//! Stored as one text: the `traceparent`, then, if the trace has one, a line feed and the
//! `tracestate`; at most [`MAX_TRACE_CONTEXT_BYTES`]. Without the feature nothing is
//! stored and nothing read: [`current`] is `None` and [`set_parent`] does nothing.
//!
//! A context is written through the SDK's W3C propagator whatever propagator the application
//! installed globally, so the stored shape is always the one `harel_publish` checks.

use crate::transport::MAX_TRACE_CONTEXT_BYTES;

/// Whether `text` has the stored shape: a version-00-sized `traceparent` (lowercase hex
/// fields of 2, 32, 16 and 2 digits), then optionally a line feed and a `tracestate` of
/// printable ASCII, at most [`MAX_TRACE_CONTEXT_BYTES`] in all. What `harel_publish` checks.
pub(crate) fn is_valid(text: &str) -> bool {
    if text.len() > MAX_TRACE_CONTEXT_BYTES {
        return false;
    }
    let (parent, state) = match text.split_once('\n') {
        Some((parent, state)) => (parent, Some(state)),
        None => (text, None),
    };
    let hex = |field: &str, len: usize| {
        field.len() == len
            && field
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let mut fields = parent.split('-');
    let parent_ok = [2, 32, 16, 2]
        .into_iter()
        .all(|len| fields.next().is_some_and(|field| hex(field, len)))
        && fields.next().is_none();
    parent_ok && state.is_none_or(|state| state.bytes().all(|b| (b' '..=b'~').contains(&b)))
}

/// The current span's OpenTelemetry context as it is stored, if it has a valid one (a span
/// of a `tracing-opentelemetry` layer); `None` otherwise, or if it would not fit (logged).
#[cfg(feature = "opentelemetry")]
pub(crate) fn current() -> Option<String> {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let context = tracing::Span::current().context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = std::collections::HashMap::<String, String>::new();
    opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .inject_context(&context, &mut carrier);
    let parent = carrier.remove("traceparent")?;
    let text = match carrier
        .remove("tracestate")
        .filter(|state| !state.is_empty())
    {
        Some(state) => format!("{parent}\n{state}"),
        None => parent,
    };
    if is_valid(&text) {
        Some(text)
    } else {
        // a tracestate over the limit: the job goes without (never an enqueue error)
        tracing::debug!(
            len = text.len(),
            "trace context not stored with the job: over 1,024 bytes or not W3C"
        );
        None
    }
}

/// Without the feature: no context.
#[cfg(not(feature = "opentelemetry"))]
#[inline(always)]
pub(crate) fn current() -> Option<String> {
    None
}

/// Makes the context stored with a job the parent of `span` (an attempt's span, not yet
/// entered). A context that does not parse is ignored (logged): the job runs as usual, in
/// a trace of its own.
#[cfg(feature = "opentelemetry")]
pub(crate) fn set_parent(span: &tracing::Span, stored: Option<&str>) {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let Some(stored) = stored else { return };
    if !is_valid(stored) {
        tracing::debug!("the job's stored trace context is not W3C: ignored");
        return;
    }
    let (parent, state) = stored.split_once('\n').unwrap_or((stored, ""));
    let carrier = std::collections::HashMap::from([
        ("traceparent".to_owned(), parent.to_owned()),
        ("tracestate".to_owned(), state.to_owned()),
    ]);
    let context = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    if context.span().span_context().is_valid() {
        // fails only without an OpenTelemetry layer, or for a disabled span: nothing to link
        let _ = span.set_parent(context);
    }
}

/// Without the feature: nothing.
#[cfg(not(feature = "opentelemetry"))]
#[inline(always)]
pub(crate) fn set_parent(_span: &tracing::Span, _stored: Option<&str>) {}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_stored_shape() {
        assert_eq!(PARENT.len(), 55);
        assert!(is_valid(PARENT));
        assert!(is_valid(&format!(
            "{PARENT}\nrojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
        )));
        assert!(is_valid(&format!("{PARENT}\n")));
        for bad in [
            "",
            "garbage",
            &PARENT.to_uppercase(),
            &PARENT[..54],
            &format!("{PARENT}-00"),
            &format!("{PARENT}\nstate\nmore"),
            &format!("{PARENT}\nnul\0"),
            &format!("{PARENT}\n{}", "s".repeat(MAX_TRACE_CONTEXT_BYTES)),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        ] {
            assert!(!is_valid(bad), "{bad:?}");
        }
    }
}
