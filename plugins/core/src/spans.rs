//! Timed phases of work, exported as trace spans by the proxy's OTLP exporter. A phase of a
//! request goes in `floe_filter::FilterCtx::phases` and becomes a child of the request's span
//! when the request ends; background work (a propagation, a repair) is handed to [`emit`] and
//! becomes a span of its own (without an installed sink, `emit` is a load and a return).
//!
//! A phase is timed and recorded once it ended, so nothing is held across awaits:
//!
//! ```
//! use floe_core::spans::{self, Phase};
//! let started = spans::Started::now();
//! // ... the work ...
//! let mut phases = Vec::new();
//! spans::record(&mut phases, || Phase::new("writeback.place", started).attr("writeback.id", "0af3"));
//! spans::emit(Phase::new("writeback.propagate", started)); // no sink here: dropped
//! assert!(phases.is_empty(), "nothing is built while spans are not exported");
//! ```

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

/// When a phase started, on both clocks (the wall clock for the span, the monotonic one for
/// its length).
#[derive(Debug, Clone, Copy)]
pub struct Started {
    wall: SystemTime,
    mono: Instant,
}

impl Started {
    /// Now.
    pub fn now() -> Self {
        Self {
            wall: SystemTime::now(),
            mono: Instant::now(),
        }
    }

    /// Time since.
    pub fn elapsed(&self) -> Duration {
        self.mono.elapsed()
    }
}

/// One ended phase.
#[derive(Debug, Clone)]
pub struct Phase {
    /// Span name, `<plugin>.<phase>`.
    pub name: &'static str,
    /// Start on the wall clock.
    pub start: SystemTime,
    /// Length.
    pub took: Duration,
    /// Attributes.
    pub attrs: Vec<(&'static str, String)>,
}

impl Phase {
    /// A phase from `started` to now.
    pub fn new(name: &'static str, started: Started) -> Self {
        Self {
            name,
            start: started.wall,
            took: started.elapsed(),
            attrs: Vec::new(),
        }
    }

    /// With an attribute.
    pub fn attr(mut self, key: &'static str, value: impl ToString) -> Self {
        self.attrs.push((key, value.to_string()));
        self
    }
}

type Sink = Box<dyn Fn(Phase) + Send + Sync>;

static SINK: OnceLock<Sink> = OnceLock::new();

/// Installs the exporter of background phases (once per process; later calls are ignored).
pub fn set_sink(sink: impl Fn(Phase) + Send + Sync + 'static) {
    let _ = SINK.set(Box::new(sink));
}

/// Whether spans are exported (a sink is installed): when not, phases are not built.
pub fn enabled() -> bool {
    SINK.get().is_some()
}

/// Adds the phase `make` builds to a request's `phases`, only when spans are exported (no
/// allocation per request otherwise).
pub fn record(phases: &mut Vec<Phase>, make: impl FnOnce() -> Phase) {
    if enabled() {
        phases.push(make());
    }
}

/// Hands `phase` to the sink, if any.
pub fn emit(phase: Phase) {
    if let Some(s) = SINK.get() {
        s(phase);
    }
}
