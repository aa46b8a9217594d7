//! What operators touch: the admin API ([`admin`]), Prometheus metrics ([`metrics`]), OTLP
//! export ([`otel`]), the Kubernetes probes ([`probes`]) and hot reload ([`reload`]).

pub mod admin;
pub mod metrics;
pub mod otel;
pub mod probes;
pub mod reload;
