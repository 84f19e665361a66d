//! A job's trace context (feature `opentelemetry`): the W3C `traceparent` (and
//! `tracestate`) of its producer span (`send {queue}`, or `create {queue}` for a job of a
//! batch or workflow; a child of the span current at enqueue), stored with the job
//! (migration 0009) and made the parent of each attempt's span (`process {queue}`), so
//! that a trace runs "request → send → process".
//!
//! Stored as one text: the `traceparent`, then, if the trace has one, a line feed and the
//! `tracestate`; at most [`MAX_TRACE_CONTEXT_BYTES`](crate::vocabulary::MAX_TRACE_CONTEXT_BYTES). Without the feature nothing is
//! stored and nothing read: [`current`] is `None` and [`set_parent`] does nothing.
//!
//! A context is written through the SDK's W3C propagator whatever propagator the application
//! installed globally, so the stored shape is always the one `harel_publish` checks.

#[cfg(feature = "opentelemetry")]
use crate::vocabulary::is_trace_context;

/// `messaging.system` of the crate's spans. Not one of the conventions' well-known values
/// (none names a queue on PostgreSQL), so a value of its own: the queue's protocol is
/// harel-jobs' functions, not PostgreSQL's (a `postgresql` span would be a database
/// client's `db.system.name`).
pub(crate) const MESSAGING_SYSTEM: &str = "harel-jobs";

/// A producer operation at enqueue: its `messaging.operation.type` (and name).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Produce {
    /// One job sent in its own round trip: the span covers it, and its context is the
    /// job's creation context (the conventions need no `create` span then).
    Send,
    /// A job pushed on a batch or a workflow: a span of its own, its creation context, so
    /// that each job of a batch has one. At DEBUG level: a batch of 10,000 jobs makes
    /// 10,000 of them, which an INFO subscriber skips (its jobs then carry the context of
    /// the span the batch was built in).
    Create,
}

impl Produce {
    fn as_str(self) -> &'static str {
        match self {
            Produce::Send => "send",
            Produce::Create => "create",
        }
    }
}

/// The producer span of an enqueue into `queue`, named `{operation} {queue}` (`send mail`),
/// with the conventions' messaging fields; `messaging.message.id`, `otel.status_code` and
/// `error.type` are left to record. With the `opentelemetry` feature, [`current`] inside
/// it is its context: what is stored with the job.
pub(crate) fn producer_span(operation: Produce, queue: &str) -> tracing::Span {
    macro_rules! producer_span {
        ($level:expr, $operation:expr) => {
            tracing::span!(
                $level,
                "harel_enqueue",
                otel.name = format!("{} {queue}", $operation),
                otel.kind = "producer",
                messaging.system = MESSAGING_SYSTEM,
                messaging.operation.type = $operation,
                messaging.operation.name = $operation,
                messaging.destination.name = queue,
                messaging.message.id = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
                error.type = tracing::field::Empty,
            )
        };
    }
    match operation {
        Produce::Send => producer_span!(tracing::Level::INFO, Produce::Send.as_str()),
        Produce::Create => producer_span!(tracing::Level::DEBUG, Produce::Create.as_str()),
    }
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
    if is_trace_context(&text) {
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
    if !is_trace_context(stored) {
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
