//! Traces that cross the queue (the `opentelemetry` feature): `encode` stores
//! the current span's trace context in the envelope (`"trace"`, an object of
//! the application's propagator's fields, `{"traceparent": "00-..."}` with
//! W3C's, which RSMQ clients and workers without the feature ignore), and the
//! worker makes it the parent of the job's span, so one trace runs from the
//! request that enqueued a job to the handler that ran it.
//!
//! The propagator is the application's
//! (`opentelemetry::global::set_text_map_propagator`), as for its HTTP calls:
//! without one set, nothing is stored. Only OpenTelemetry's API crate is used.
//!
//! A parent, not a link: a job is one message handled on its own, the
//! continuation of the work that enqueued it, and a parent is what lets a
//! trace viewer show the two as one trace (OpenTelemetry's messaging
//! conventions keep links for a batch handled together). Without the feature
//! nothing is read or written: the envelope is byte for byte what it was.

use std::collections::BTreeMap;

/// The fields the propagator writes for the current span (`traceparent`, and
/// `tracestate` when it has one); `None` when it writes none.
#[cfg(feature = "opentelemetry")]
pub(crate) fn current() -> Option<BTreeMap<String, String>> {
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let cx = tracing::Span::current().context();
    let mut fields = std::collections::HashMap::new();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut fields));
    let fields: BTreeMap<String, String> =
        fields.into_iter().filter(|(_, v)| !v.is_empty()).collect();
    (!fields.is_empty()).then_some(fields)
}

/// Without the feature, no trace context.
#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn current() -> Option<BTreeMap<String, String>> {
    None
}

/// Makes the trace context `body`'s envelope carries, if any, the parent of
/// `span` (the job's span, before it is entered).
#[cfg(feature = "opentelemetry")]
pub(crate) fn continue_in(span: &tracing::Span, body: &[u8]) {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    #[derive(serde::Deserialize)]
    struct Traced {
        trace: Option<std::collections::HashMap<String, String>>,
    }
    let Some(fields) = serde_json::from_slice::<Traced>(body)
        .ok()
        .and_then(|t| t.trace)
    else {
        return;
    };
    let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(&fields));
    if cx.span().span_context().is_valid() {
        // an error only says the span is gone or already started: nothing to continue
        let _ = span.set_parent(cx);
    }
}

/// Without the feature, nothing to continue.
#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn continue_in(_span: &tracing::Span, _body: &[u8]) {}
