//! `floe-proxy`: Floe's S3 data plane. Thin: it loads the config and runs the server
//! `floe_proxy::server::build` assembles (the parts are the `floe_proxy` library).
//!
//! Usage: `floe-proxy --config conf/quickstart.yaml`, `floe-proxy check conf/x.yaml`, or
//! `floe-proxy schema` (the config's JSON Schema, as in conf/floe-proxy.schema.json).

use std::path::PathBuf;

use floe_proxy::config::settings::load;
use floe_proxy::{schema, server};

/// jemalloc rather than glibc's malloc. Blocks come from Floe's own buffer pool, but much else
/// of a page's size does not (foyer's reads of disk pages, bodies in flight); glibc raises its
/// mmap threshold to the largest chunk freed, then serves such chunks from arenas that
/// fragment, and fixing the threshold (the image's old `GLIBC_TUNABLES`) costs a page fault
/// and zeroing per chunk. Measured with `load/bench.py --memory-only` (320 MiB of DRAM
/// ceilings, 16 clients): peak RSS 453 vs 495 MiB, warm 1138 vs 873 MiB/s, cold 465 vs 444.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn usage() -> anyhow::Error {
    anyhow::anyhow!(
        "usage: floe-proxy [--config FILE [--upgrade]] | floe-proxy check FILE | floe-proxy schema"
    )
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args == ["schema"] {
        print_schema();
        return Ok(());
    }
    let (check_only, path, upgrade) = match args.as_slice() {
        [c, p] if c == "check" => (true, PathBuf::from(p), false),
        [f, p] if f == "--config" || f == "-c" => (false, PathBuf::from(p), false),
        [f, p, u] if (f == "--config" || f == "-c") && u == "--upgrade" => {
            (false, PathBuf::from(p), true)
        }
        [] => (false, PathBuf::from("conf/quickstart.yaml"), false),
        _ => return Err(usage()),
    };
    let settings = match load(&path) {
        Ok(s) => s,
        Err(e) => {
            // A config error is the operator's to fix: say what and where, no backtrace.
            eprintln!("floe-proxy: config error: {e}");
            std::process::exit(2);
        }
    };
    if check_only {
        println_ok(&path);
        return Ok(());
    }
    init_logging();
    server::build(settings, path, upgrade)?.run_forever()
}

#[allow(clippy::print_stdout)]
fn print_schema() {
    print!("{}", schema());
}

#[allow(clippy::print_stdout)]
fn println_ok(path: &std::path::Path) {
    println!("{}: ok", path.display());
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FLOE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
