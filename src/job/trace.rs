//! Traces that cross the queue (the `opentelemetry` feature): `encode` stores
//! the current span's W3C trace context in the envelope (`"traceparent"`, a
//! field RSMQ clients and workers without the feature ignore), and the worker
//! makes it the parent of the job's span, so one trace runs from the request
//! that enqueued a job to the handler that ran it.
//!
//! A parent, not a link: a job is one message handled on its own, the
//! continuation of the work that enqueued it, and a parent is what lets a
//! trace viewer show the two as one trace (OpenTelemetry's messaging
//! conventions keep links for a batch handled together). Without the feature
//! nothing is read or written: the envelope is byte for byte what it was.

/// The current span's W3C `traceparent`, when there is a valid one.
#[cfg(feature = "opentelemetry")]
pub(crate) fn current() -> Option<String> {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let mut carrier = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(&tracing::Span::current().context(), &mut carrier);
    carrier.remove("traceparent")
}

/// Without the feature, no trace context.
#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn current() -> Option<String> {
    None
}

/// Makes the trace context `body`'s envelope carries, if any, the parent of
/// `span` (the job's span, before it is entered).
#[cfg(feature = "opentelemetry")]
pub(crate) fn continue_in(span: &tracing::Span, body: &[u8]) {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    #[derive(serde::Deserialize)]
    struct Traced<'a> {
        #[serde(borrow)]
        traceparent: Option<std::borrow::Cow<'a, str>>,
    }
    let Some(parent) = serde_json::from_slice::<Traced<'_>>(body)
        .ok()
        .and_then(|t| t.traceparent)
    else {
        return;
    };
    let carrier =
        std::collections::HashMap::from([("traceparent".to_string(), parent.into_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        // an error only says the span is gone or already started: nothing to continue
        let _ = span.set_parent(cx);
    }
}

/// Without the feature, nothing to continue.
#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn continue_in(_span: &tracing::Span, _body: &[u8]) {}
