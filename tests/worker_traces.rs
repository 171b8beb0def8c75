//! Traces that cross the queue (the `opentelemetry` feature): the envelope of a
//! job enqueued inside a span carries its W3C `traceparent` (under `trace`), and the worker's
//! span of the job is that span's child, in one trace, though the worker runs
//! in tasks of its own outside any span; a job enqueued outside any span, and
//! a periodic job's body built inside one, are stored byte for byte as without
//! the feature.
#![cfg(feature = "opentelemetry")]

mod common;

use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use redjob::backend::memory::MemoryBackend;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, Schedule};
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::prelude::*;

use common::{start_serving, wait_for};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "traced", queue = "traces")]
struct Traced {
    n: u64,
}

impl Job for Traced {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        tracing::info_span!("handler").in_scope(|| ());
        Ok(())
    }
}

#[tokio::test]
async fn a_jobs_span_continues_the_trace_that_enqueued_it() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    // this thread's default: the test's runtime runs every task on it
    let _guard = tracing::subscriber::set_default(subscriber);
    // the application's propagator, as for its HTTP calls: W3C trace context
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());

    let client = Client::memory(MemoryBackend::new());
    let request = tracing::info_span!("request");
    let (trace_id, request_id) = {
        let cx = request.context();
        let sc = cx.span().span_context().clone();
        (sc.trace_id(), sc.span_id())
    };
    let (id, worker) = {
        let _in = request.enter();
        let id = client.enqueue(&Traced { n: 1 }).await.unwrap();
        // a periodic job's body, built here once, is sent at every tick: no trace
        let worker = Worker::builder(client.backend())
            .queue("traces")
            .handle_signals(false)
            .periodic(
                Schedule::every(Duration::from_secs(3600)).unwrap(),
                Traced { n: 3 },
            )
            .build()
            .unwrap();
        (id, worker)
    };
    drop(request);
    let body = client.job("traces", &id).await.unwrap().unwrap().body;
    let body = String::from_utf8(body).unwrap();
    assert_eq!(
        body,
        format!(
            r#"{{"type":"traced","args":{{"n":1}},"trace":{{"traceparent":"00-{trace_id}-{request_id}-01"}}}}"#
        )
    );

    // outside any span: the envelope as without the feature
    let plain = client.enqueue(&Traced { n: 2 }).await.unwrap();
    let plain = client.job("traces", &plain).await.unwrap().unwrap().body;
    assert_eq!(plain, br#"{"type":"traced","args":{"n":2}}"#);

    // the worker runs in its own tasks, entered into no span of the test
    let running = start_serving(worker).await;
    assert!(
        wait_for(Duration::from_secs(10), || async {
            client.stats("traces").await.unwrap().processed == 2
        })
        .await
    );
    let schedules = client.schedules().await.unwrap();
    assert_eq!(
        schedules[0].body.as_deref(),
        Some(r#"{"type":"traced","args":{"n":3}}"#)
    );
    running.stop().await;
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let jobs: Vec<_> = spans.iter().filter(|s| s.name == "job").collect();
    assert_eq!(jobs.len(), 2, "{spans:?}");
    let traced: Vec<_> = jobs
        .iter()
        .filter(|s| s.span_context.trace_id() == trace_id)
        .collect();
    assert_eq!(traced.len(), 1, "one job in the request's trace");
    assert_eq!(
        traced[0].parent_span_id, request_id,
        "the request is its parent"
    );
    let other = jobs
        .iter()
        .find(|s| s.span_context.trace_id() != trace_id)
        .unwrap();
    assert_eq!(other.parent_span_id, SpanId::INVALID, "a trace of its own");
    // the handler's own span is in the job's trace, under the job's span
    let handler = spans
        .iter()
        .find(|s| s.name == "handler" && s.span_context.trace_id() == trace_id)
        .expect("the handler's span in the request's trace");
    assert_eq!(handler.parent_span_id, traced[0].span_context.span_id());
}
