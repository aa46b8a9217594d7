//! W3C trace context (`traceparent`) through Floe: the proxy gives each request a span of its
//! own, a child of the client's when the client sent a `traceparent`, and every request Floe
//! makes for it (to the origin, to a peer) carries that span as its parent.
//!
//! The request's context travels in `floe_filter::FilterCtx::trace` and, for code that
//! sees no context (the origin reader, the peer client), in a task-local set by [`scope`]
//! around the request's stages. A fill that a spawned task makes on behalf of several requests
//! carries none: it belongs to no single trace.
//!
//! ```
//! use floe_core::trace::TraceParent;
//! let client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
//! let t = TraceParent::child_of(Some(client));
//! assert_eq!(t.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
//! assert_eq!(t.parent_hex().as_deref(), Some("00f067aa0ba902b7"));
//! assert!(t.header().starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
//! ```

use std::future::Future;

/// One span's place in a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace.
    pub trace_id: [u8; 16],
    /// This span.
    pub span_id: [u8; 8],
    /// The caller's span, when the caller sent one.
    pub parent: Option<[u8; 8]>,
    /// The caller's sampling decision (default: sampled).
    pub sampled: bool,
}

fn hex_exact<const N: usize>(s: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    if s.len() != 2 * N
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    hex::decode_to_slice(s, &mut out).ok()?;
    (out != [0u8; N]).then_some(out)
}

/// Parses a `traceparent` header (version 00; lower-case hex; ids not all zero).
pub fn parse(h: &str) -> Option<([u8; 16], [u8; 8], bool)> {
    let mut parts = h.trim().split('-');
    let (v, t, s, f) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if v.len() != 2 || v == "ff" || (v == "00" && parts.next().is_some()) {
        return None;
    }
    let flags = hex_exact::<1>(f).map_or(0, |x| x[0]);
    if f.len() != 2 {
        return None;
    }
    Some((hex_exact(t)?, hex_exact(s)?, flags & 1 == 1))
}

/// Random bytes, not all zero (an all-zero id is invalid).
fn nonzero<const N: usize>() -> [u8; N] {
    loop {
        let id: [u8; N] = std::array::from_fn(|_| rand::random());
        if id != [0; N] {
            return id;
        }
    }
}

impl TraceParent {
    /// A new span: a child of the caller's `traceparent` when it is valid, else the root of a
    /// new trace.
    pub fn child_of(header: Option<&str>) -> Self {
        let span_id = nonzero();
        match header.and_then(parse) {
            Some((trace_id, parent, sampled)) => Self {
                trace_id,
                span_id,
                parent: Some(parent),
                sampled,
            },
            None => Self {
                trace_id: nonzero(),
                span_id,
                parent: None,
                sampled: true,
            },
        }
    }

    /// The caller's own span, passed on unchanged (a hop that exports no span of its own).
    pub fn passed_on(header: &str) -> Option<Self> {
        let (trace_id, span_id, sampled) = parse(header)?;
        Some(Self {
            trace_id,
            span_id,
            parent: None,
            sampled,
        })
    }

    /// The header naming this span as the parent of a request Floe sends.
    pub fn header(&self) -> String {
        format!(
            "00-{}-{}-{}",
            hex::encode(self.trace_id),
            hex::encode(self.span_id),
            if self.sampled { "01" } else { "00" }
        )
    }

    /// The trace id, hex.
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }

    /// The caller's span id, hex.
    pub fn parent_hex(&self) -> Option<String> {
        self.parent.map(hex::encode)
    }
}

thread_local! {
    /// The ids the next span built on this thread takes (set and taken within one synchronous
    /// `start` call).
    static PRESET_TRACE: std::cell::Cell<Option<[u8; 16]>> = const { std::cell::Cell::new(None) };
    static PRESET_SPAN: std::cell::Cell<Option<[u8; 8]>> = const { std::cell::Cell::new(None) };
}

/// The OpenTelemetry SDK's id generator, except that it hands out the ids [`start_span`]
/// presets: the SDK takes span ids only from its generator, and a request's span id is chosen
/// when the request arrives (its origin and peer requests name it) but the span is built when
/// it ends. Install it with `SdkTracerProvider::builder().with_id_generator(Preset::default())`.
#[derive(Debug, Default)]
pub struct Preset(opentelemetry_sdk::trace::RandomIdGenerator);

impl opentelemetry_sdk::trace::IdGenerator for Preset {
    fn new_trace_id(&self) -> opentelemetry::trace::TraceId {
        match PRESET_TRACE.with(std::cell::Cell::take) {
            Some(t) => opentelemetry::trace::TraceId::from_bytes(t),
            None => self.0.new_trace_id(),
        }
    }

    fn new_span_id(&self) -> opentelemetry::trace::SpanId {
        match PRESET_SPAN.with(std::cell::Cell::take) {
            Some(s) => opentelemetry::trace::SpanId::from_bytes(s),
            None => self.0.new_span_id(),
        }
    }
}

/// Starts the span `t` names (its trace and span ids, its caller as the remote parent) from
/// `builder`, on a tracer whose provider uses [`Preset`].
pub fn start_span(
    tracer: &opentelemetry_sdk::trace::SdkTracer,
    builder: opentelemetry::trace::SpanBuilder,
    t: &TraceParent,
) -> opentelemetry_sdk::trace::Span {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    let parent = match t.parent {
        Some(p) => opentelemetry::Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from_bytes(t.trace_id),
            SpanId::from_bytes(p),
            if t.sampled {
                TraceFlags::SAMPLED
            } else {
                TraceFlags::default()
            },
            true,
            TraceState::default(),
        )),
        None => opentelemetry::Context::new(),
    };
    PRESET_TRACE.with(|c| c.set(Some(t.trace_id)));
    PRESET_SPAN.with(|c| c.set(Some(t.span_id)));
    let span = builder.start_with_context(tracer, &parent);
    PRESET_TRACE.with(|c| c.set(None));
    PRESET_SPAN.with(|c| c.set(None));
    span
}

tokio::task_local! {
    static CURRENT: TraceParent;
}

/// Runs `fut` with `t` as the current request's span (see [`current_header`]).
pub async fn scope<F: Future>(t: Option<TraceParent>, fut: F) -> F::Output {
    match t {
        Some(t) => CURRENT.scope(t, fut).await,
        None => fut.await,
    }
}

/// The `traceparent` for a request made now on behalf of the current request, if any.
pub fn current_header() -> Option<String> {
    CURRENT.try_with(TraceParent::header).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_header_parses_and_invalid_ones_do_not() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(parse(ok).is_some_and(|(_, _, s)| s));
        assert!(
            parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .is_some_and(|(_, _, s)| !s)
        );
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f-00f067aa0ba902b7-01",
            "garbage",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn without_a_valid_caller_a_new_trace_starts() {
        let t = TraceParent::child_of(Some("nonsense"));
        assert!(t.parent.is_none() && t.sampled);
        assert_ne!(t.trace_id, [0; 16]);
        assert_eq!(parse(&t.header()).map(|p| p.0), Some(t.trace_id));
    }

    #[test]
    fn a_span_started_late_takes_the_ids_chosen_when_its_request_arrived() {
        use opentelemetry::trace::{Span, Tracer, TracerProvider};
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_id_generator(Preset::default())
            .build();
        let tracer = provider.tracer("t");
        for t in [
            TraceParent::child_of(Some(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            )),
            TraceParent::child_of(None),
        ] {
            let span = start_span(&tracer, tracer.span_builder("GetObject"), &t);
            let cx = span.span_context();
            assert_eq!(cx.trace_id().to_bytes(), t.trace_id);
            assert_eq!(cx.span_id().to_bytes(), t.span_id);
            // The next span is an ordinary one again.
            let other = tracer.start("next");
            assert_ne!(other.span_context().span_id().to_bytes(), t.span_id);
        }
    }

    #[tokio::test]
    async fn the_scope_carries_the_header_to_code_without_a_context() {
        let t = TraceParent::child_of(None);
        assert_eq!(
            scope(Some(t), async { current_header() }).await,
            Some(t.header())
        );
        assert_eq!(current_header(), None);
    }
}
