//! Trace context through a job's metadata (feature `opentelemetry`): an enqueue's producer
//! span (`send {queue}`, or `create {queue}` for a job of a batch) is a child of the span
//! that enqueued, and the span of a job's attempt (`process {queue}`) a child of that
//! producer span, with the messaging semantic conventions' fields, read back from the
//! OpenTelemetry SDK's in-memory exporter; jobs without a context, or with one that does
//! not parse, run as usual. Each test installs its own subscriber for its thread (a current-thread runtime,
//! where the pool's tasks run too).

use std::time::{Duration, Instant};

use harel_jobs::transport::{MAX_TRACE_CONTEXT_BYTES, OutgoingMessage, Transport};
use harel_jobs::{
    Client, InvalidMessage, JobContext, JobError, JobId, JobResult, PublishError, WorkerStats, job,
};
use harel_jobs_suite::{SuiteSchema, capture};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TracerProvider,
};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

#[job]
async fn traced(_ctx: JobContext<()>, n: u32) {
    tracing::info!(n, "traced job runs");
}

/// Fails for good: a dead letter at its first attempt.
#[job]
async fn doomed(_ctx: JobContext<()>) -> JobResult {
    Err(JobError::permanent("gone"))
}

/// Fails its first attempt.
#[job(max_attempts = 3)]
async fn flaky(ctx: JobContext<()>) -> JobResult {
    if ctx.attempt() == 1 {
        return Err(JobError::retry("first attempt fails"));
    }
    Ok(())
}

/// A tracer exporting to memory, as the subscriber of this thread until the guard drops.
struct Otel {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Otel {
    fn install() -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("harel-test"));
        let guard = capture::set_default(tracing_subscriber::registry().with(layer));
        Self {
            exporter,
            provider,
            _guard: guard,
        }
    }

    /// The finished spans named `name`.
    fn spans(&self, name: &str) -> Vec<SpanData> {
        self.provider.force_flush().expect("flushed");
        let spans = self.exporter.get_finished_spans().expect("spans");
        spans.into_iter().filter(|span| span.name == name).collect()
    }
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| &kv.value)
}

fn text(span: &SpanData, key: &str) -> Option<String> {
    attribute(span, key).map(|value| value.as_str().into_owned())
}

/// The messaging fields every span of the crate has, for `operation` on `queue`, and none
/// of the fields they replaced.
fn assert_messaging(span: &SpanData, operation: &str, queue: &str) {
    assert_eq!(span.name, format!("{operation} {queue}"));
    assert_eq!(
        text(span, "messaging.system").as_deref(),
        Some("harel-jobs")
    );
    assert_eq!(
        text(span, "messaging.operation.type").as_deref(),
        Some(operation)
    );
    assert_eq!(
        text(span, "messaging.operation.name").as_deref(),
        Some(operation)
    );
    assert_eq!(
        text(span, "messaging.destination.name").as_deref(),
        Some(queue)
    );
    for gone in ["messaging.operation", "message_id", "queue"] {
        assert_eq!(attribute(span, gone), None, "{gone} in {span:?}");
    }
}

/// Runs a pool over `queue` until `done` holds for its counters.
async fn run_until(queue: &SuiteSchema, done: impl Fn(WorkerStats) -> bool) {
    let handle = Client::with_schema(queue.pool.clone(), queue.schema.clone())
        .worker(())
        .register::<Traced>()
        .register::<Doomed>()
        .poll_interval(Duration::from_millis(50))
        .build()
        .expect("valid worker")
        .start();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(handle.stats()) {
        assert!(Instant::now() < deadline, "timed out: {:?}", handle.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.shutdown().await.expect("clean shutdown");
}

/// The trace context stored with job `id` (an inline first message, or a message row).
async fn stored(queue: &SuiteSchema, id: JobId) -> Option<String> {
    sqlx::query_scalar(queue.sql(
        "SELECT inline_trace_context FROM @schema@.transport_groups WHERE inline_seq = $1
         UNION ALL
         SELECT trace_context FROM @schema@.transport_messages WHERE seq = $1",
    ))
    .bind(id.get())
    .fetch_one(&queue.pool)
    .await
    .expect("the job is queued")
}

#[tokio::test]
async fn a_jobs_span_is_a_child_of_the_span_that_enqueued_it() {
    let otel = Otel::install();
    let queue = SuiteSchema::new().await;
    let jobs = Client::with_schema(queue.pool.clone(), queue.schema.clone());

    // the request, and a job enqueued in it, alone and as the second of a group and of a
    // batch (a message row, not its group's inline first message)
    let request = tracing::info_span!("request");
    let request_context: SpanContext = request.context().span().span_context().clone();
    assert!(request_context.is_valid());
    let ids = async {
        let alone = jobs.enqueue(&queue.pool, Traced { n: 1 }).await.unwrap();
        let first = jobs
            .enqueue(&queue.pool, Traced { n: 2 })
            .group("g")
            .await
            .unwrap();
        let second = jobs
            .enqueue(&queue.pool, Traced { n: 3 })
            .group("g")
            .await
            .unwrap();
        let mut batch = jobs.batch();
        batch.push(Traced { n: 4 }).unwrap();
        batch
            .push_with(
                Traced { n: 5 },
                &harel_jobs::EnqueueOptions::new().group("g"),
            )
            .unwrap();
        let batched = batch.enqueue(&queue.pool).await.unwrap();
        [vec![alone, first, second], batched].concat()
    }
    .instrument(request.clone())
    .await;
    drop(request);
    for id in &ids {
        let context = stored(&queue, *id).await.expect("a trace context");
        assert_eq!(context.len(), 55, "{context:?}");
        assert!(context.contains(&request_context.trace_id().to_string()));
    }

    run_until(&queue, |stats| stats.succeeded == 5).await;
    // the producer spans: one `send` per single enqueue, with the job's id, and one
    // `create` per job of the batch; children of the request
    let sent = otel.spans("send default");
    let created = otel.spans("create default");
    assert_eq!((sent.len(), created.len()), (3, 2));
    for (span, operation) in sent
        .iter()
        .map(|span| (span, "send"))
        .chain(created.iter().map(|span| (span, "create")))
    {
        assert_messaging(span, operation, "default");
        assert_eq!(span.span_kind, SpanKind::Producer);
        assert_eq!(span.span_context.trace_id(), request_context.trace_id());
        assert_eq!(span.parent_span_id, request_context.span_id());
        assert_eq!(span.status, Status::Unset);
    }
    for (span, id) in sent.iter().zip(&ids[..3]) {
        // in the order of the enqueues
        assert_eq!(
            text(span, "messaging.message.id"),
            Some(id.to_string()),
            "{sent:?}"
        );
    }

    // each job's span descends from its own producer span (the send span of a single
    // enqueue, the create span of a batch's job), across the database
    let spans = otel.spans("process default");
    assert_eq!(spans.len(), 5);
    for span in &spans {
        assert_messaging(span, "process", "default");
        assert_eq!(span.span_kind, SpanKind::Consumer);
        assert_eq!(span.span_context.trace_id(), request_context.trace_id());
        assert!(span.parent_span_is_remote);
        assert_eq!(span.status, Status::Unset);
        let id = text(span, "messaging.message.id").expect("an id");
        let position = ids
            .iter()
            .position(|job| job.to_string() == id)
            .unwrap_or_else(|| panic!("{id}"));
        let producer = if position < 3 {
            &sent[position]
        } else {
            &created[position - 3]
        };
        assert_eq!(span.parent_span_id, producer.span_context.span_id(), "{id}");
        assert_eq!(text(span, "attempt").as_deref(), Some("1"));
    }
}

#[tokio::test]
async fn jobs_without_a_context_or_with_garbage_run_in_traces_of_their_own() {
    let otel = Otel::install();
    let queue = SuiteSchema::new().await;
    let jobs = Client::with_schema(queue.pool.clone(), queue.schema.clone());

    // outside any span: the send span starts the trace, and its context is stored
    let plain = jobs.enqueue(&queue.pool, Traced { n: 1 }).await.unwrap();
    let plain_context = stored(&queue, plain)
        .await
        .expect("the send span's context");
    // a raw message (as from a producer built without the feature): nothing stored
    let bare = Transport::new(queue.schema.clone())
        .publish(
            &queue.pool,
            &OutgoingMessage::new("bare", "traced", r#"{"n":6}"#),
        )
        .await
        .unwrap();
    assert_eq!(stored(&queue, bare).await, None);

    // set by hand on a raw message: refused before anything is sent, with a typed error
    let transport = Transport::new(queue.schema.clone());
    let refused = transport
        .publish(
            &queue.pool,
            &OutgoingMessage::new("raw", "traced", r#"{"n":2}"#).trace_context("garbage"),
        )
        .await;
    assert!(matches!(
        refused,
        Err(PublishError::Invalid(InvalidMessage::InvalidTraceContext {
            max: MAX_TRACE_CONTEXT_BYTES
        }))
    ));

    // past the Rust side, straight to harel_publish: a bad or huge one is stored as NULL
    let huge = format!(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n{}",
        "s".repeat(2 * MAX_TRACE_CONTEXT_BYTES)
    );
    for (n, context) in [(3, "garbage".to_owned()), (4, huge)] {
        let id: i64 = sqlx::query_scalar(queue.sql(
            "SELECT s FROM @schema@.harel_publish(ARRAY[NULL::text], ARRAY['traced'],
                    ARRAY[$1], ARRAY[2::smallint], ARRAY[NULL::timestamptz],
                    ARRAY[NULL::bigint], NULL, NULL, NULL, ARRAY[$2]) AS s",
        ))
        .bind(format!(r#"{{"n":{n}}}"#))
        .bind(context)
        .fetch_one(&queue.pool)
        .await
        .unwrap();
        assert_eq!(stored(&queue, JobId::new(id)).await, None);
    }

    // garbage already stored (written by hand, or by another tool): the job still runs
    let garbled = jobs.enqueue(&queue.pool, Traced { n: 5 }).await.unwrap();
    sqlx::query(queue.sql(
        "UPDATE @schema@.transport_groups SET inline_trace_context = 'not-a-traceparent'
          WHERE inline_seq = $1",
    ))
    .bind(garbled.get())
    .execute(&queue.pool)
    .await
    .unwrap();

    run_until(&queue, |stats| stats.succeeded == 5).await;
    let sent = otel.spans("send default");
    let root_send = sent
        .iter()
        .find(|span| plain_context.contains(&span.span_context.span_id().to_string()))
        .expect("the plain job's send span");
    assert_eq!(root_send.parent_span_id, SpanId::INVALID);
    let spans = otel.spans("process default");
    assert_eq!(spans.len(), 5);
    for span in &spans {
        if text(span, "messaging.message.id") == Some(plain.to_string()) {
            assert_eq!(span.parent_span_id, root_send.span_context.span_id());
        } else {
            // a root span: a trace of its own
            assert_eq!(span.parent_span_id, SpanId::INVALID, "{span:?}");
        }
    }
}

#[tokio::test]
async fn a_dead_letter_keeps_its_context_and_a_retry_carries_it() {
    let otel = Otel::install();
    let queue = SuiteSchema::new().await;
    let jobs = Client::with_schema(queue.pool.clone(), queue.schema.clone());
    let request = tracing::info_span!("request");
    let request_context = request.context().span().span_context().clone();
    let id = async { jobs.enqueue(&queue.pool, Doomed {}).await }
        .instrument(request.clone())
        .await
        .unwrap();
    drop(request);
    let context = stored(&queue, id).await.expect("a trace context");

    run_until(&queue, |stats| stats.dead_lettered == 1).await;
    let kept: Option<String> = sqlx::query_scalar(
        queue.sql("SELECT trace_context FROM @schema@.dead_letters WHERE id = $1"),
    )
    .bind(id.get())
    .fetch_one(&queue.pool)
    .await
    .unwrap();
    assert_eq!(kept.as_deref(), Some(&*context));

    let retried = jobs
        .dead_letters()
        .retry(id)
        .await
        .unwrap()
        .expect("retried");
    assert_eq!(stored(&queue, retried).await.as_deref(), Some(&*context));
    run_until(&queue, |stats| stats.dead_lettered == 1).await;
    let sent = otel.spans("send default");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].parent_span_id, request_context.span_id());
    let spans = otel.spans("process default");
    assert_eq!(spans.len(), 2);
    for span in &spans {
        assert_eq!(span.span_context.trace_id(), request_context.trace_id());
        assert_eq!(span.parent_span_id, sent[0].span_context.span_id());
        // a failed attempt: the span's status is an error, and says what came of it
        assert!(matches!(span.status, Status::Error { .. }), "{span:?}");
        assert_eq!(text(span, "error.type").as_deref(), Some("dead_letter"));
    }
}

/// An attempt that fails and will be retried ends its span in error too; the next,
/// successful, attempt's does not. A failed send's span is an error as well.
#[tokio::test]
async fn a_failed_attempt_and_a_failed_send_end_their_spans_in_error() {
    let otel = Otel::install();
    let queue = SuiteSchema::new().await;
    let jobs = Client::with_schema(queue.pool.clone(), queue.schema.clone());
    jobs.enqueue(&queue.pool, Flaky {}).await.unwrap();
    let handle = Client::with_schema(queue.pool.clone(), queue.schema.clone())
        .worker(())
        .register::<Flaky>()
        .backoff(harel_jobs::Backoff::fixed(Duration::from_millis(10)))
        .poll_interval(Duration::from_millis(50))
        .build()
        .expect("valid worker")
        .start();
    let deadline = Instant::now() + Duration::from_secs(20);
    while handle.stats().succeeded < 1 {
        assert!(Instant::now() < deadline, "timed out: {:?}", handle.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.shutdown().await.expect("clean shutdown");
    let mut spans = otel.spans("process default");
    spans.sort_by_key(|span| text(span, "attempt"));
    assert_eq!(spans.len(), 2);
    assert!(matches!(spans[0].status, Status::Error { .. }), "{spans:?}");
    assert_eq!(text(&spans[0], "error.type").as_deref(), Some("retry"));
    assert_eq!(spans[1].status, Status::Unset);
    assert_eq!(attribute(&spans[1], "error.type"), None);

    // a send the database refuses: its group is in another queue
    jobs.enqueue(&queue.pool, Traced { n: 1 })
        .group("g")
        .await
        .unwrap();
    let refused = jobs
        .enqueue(&queue.pool, Traced { n: 2 })
        .group("g")
        .queue("mail")
        .await;
    assert!(matches!(refused, Err(PublishError::GroupInAnotherQueue)));
    let failed = otel.spans("send mail");
    assert_eq!(failed.len(), 1);
    assert!(matches!(failed[0].status, Status::Error { .. }));
    assert_eq!(
        text(&failed[0], "error.type").as_deref(),
        Some("group_in_another_queue")
    );
    assert_eq!(attribute(&failed[0], "messaging.message.id"), None);
}
