//! The worker harness: one subprocess per claimed job. The event goes to the worker as JSON on
//! stdin and as environment variables; its stdout and stderr (the last 64 KiB of each) become
//! the run's log. The lease is renewed every third of its length while the worker lives; the
//! worker's process group is killed at the time limit, when the lease is lost to another
//! holder (so one event never runs to completion twice), or when floe-control stops.

use std::process::Stdio;
use std::time::Duration;

use cloudevents::{AttributesReader, Event};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::config::Deployment;
use super::queue::{Lease, Outcome, Queue};
use crate::worker::Shutdown;

/// Variables a worker inherits from floe-control; nothing else is passed through.
const BASE_ENV: [&str; 7] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER"];

/// Log bytes kept per stream.
const LOG_TAIL: usize = 64 << 10;

/// The environment a worker gets besides the deployment's own.
pub fn env_of(d: &Deployment, l: &Lease) -> Vec<(String, String)> {
    let mut env = vec![
        ("FLOE_DEPLOYMENT".to_owned(), d.name.clone()),
        ("FLOE_RUN_ID".to_owned(), l.id.clone()),
        ("FLOE_ATTEMPT".to_owned(), l.attempt.to_string()),
        ("FLOE_LEASE_GENERATION".to_owned(), l.generation.to_string()),
        ("FLOE_OUTPUT_TABLES".to_owned(), d.output_tables.join(",")),
    ];
    if let Ok(e) = serde_json::from_str::<Event>(&l.event) {
        env.push(("CE_ID".into(), e.id().to_owned()));
        env.push(("CE_TYPE".into(), e.ty().to_owned()));
        env.push(("CE_SOURCE".into(), e.source().to_string()));
        if let Some(s) = e.subject() {
            env.push(("CE_SUBJECT".into(), s.to_owned()));
        }
        if let Some(t) = e.time() {
            env.push(("CE_TIME".into(), t.to_rfc3339()));
        }
        for (ext, var) in [
            ("logicaldate", "FLOE_LOGICAL_DATE"),
            ("intervalstart", "FLOE_INTERVAL_START"),
            ("intervalend", "FLOE_INTERVAL_END"),
        ] {
            if let Some(v) = e.extension(ext) {
                env.push((var.into(), v.to_string()));
            }
        }
    }
    env
}

/// The worker's start time in clock ticks since boot (`/proc/PID/stat` field 22), so a later
/// kill can tell the process from another that reused its pid.
pub fn start_ticks(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is parenthesised and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Kills process group `pid` if its leader is still the process that started at `ticks`.
pub fn kill_group(pid: i64, ticks: Option<i64>) {
    let Ok(p) = u32::try_from(pid) else { return };
    if p == 0 {
        return;
    }
    if ticks.is_some() && start_ticks(p) != ticks {
        return;
    }
    let Ok(raw) = i32::try_from(p) else { return };
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(raw),
        nix::sys::signal::Signal::SIGKILL,
    );
}

async fn tail(mut r: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut keep = Vec::new();
    let mut buf = vec![0u8; 8192];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        keep.extend_from_slice(&buf[..n]);
        if keep.len() > 2 * LOG_TAIL {
            keep.drain(..keep.len() - LOG_TAIL);
        }
    }
    if keep.len() > LOG_TAIL {
        keep.drain(..keep.len() - LOG_TAIL);
    }
    keep
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Runs one claimed job to its end and says how it ended (the caller records it).
pub async fn run(
    d: &Deployment,
    l: &Lease,
    trace: Option<&floe_core::trace::TraceParent>,
    q: &dyn Queue,
    lease_len: Duration,
    mut stop: Shutdown,
) -> Outcome {
    let mut cmd = Command::new(&d.command);
    // A clean environment: floe-control's own secrets (store URL, catalog token) stay out of
    // workers; they get the basics, their deployment's `env` and the event's variables.
    cmd.env_clear();
    for k in BASE_ENV {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    if let Some(t) = trace {
        cmd.env("TRACEPARENT", t.header());
    }
    cmd.args(&d.args)
        .envs(&d.env)
        .envs(env_of(d, l))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(dir) = &d.dir {
        cmd.current_dir(dir);
    }
    let ended = |result, exit_code, log: String| Outcome {
        result,
        exit_code,
        log,
        ended_ms: now_ms(),
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return ended("spawn", None, format!("{}: {e}", d.command)),
    };
    let pid = child.id().unwrap_or(0);
    let ticks = start_ticks(pid);
    if let Err(e) = q
        .set_pid(&l.id, l.generation, i64::from(pid), ticks.unwrap_or(0))
        .await
    {
        tracing::warn!(error = %e, "could not record the worker's pid");
    }
    if let Some(mut stdin) = child.stdin.take() {
        let event = l.event.clone().into_bytes();
        tokio::spawn(async move {
            let _ = stdin.write_all(&event).await;
        });
    }
    let out = child.stdout.take().map(|s| tokio::spawn(tail(s)));
    let err = child.stderr.take().map(|s| tokio::spawn(tail(s)));
    let deadline = tokio::time::sleep(d.time_limit);
    tokio::pin!(deadline);
    let mut renew = tokio::time::interval(lease_len / 3);
    renew.tick().await;
    let (result, code) = loop {
        tokio::select! {
            st = child.wait() => break match st {
                Ok(s) if s.success() => ("ok", s.code()),
                Ok(s) => ("error", s.code()),
                Err(_) => ("error", None),
            },
            _ = &mut deadline => break ("timeout", None),
            _ = stop.changed() => break ("stopped", None),
            _ = renew.tick() => {
                let until = now_ms() + i64::try_from(lease_len.as_millis()).unwrap_or(i64::MAX / 2);
                if let Ok(false) = q.renew(&l.id, l.generation, until).await {
                    break ("lost", None);
                }
            }
        }
    };
    if result != "ok" && result != "error" {
        kill_group(i64::from(pid), ticks);
        let _ = child.wait().await;
    }
    // Whatever the worker left running in its group goes with it.
    kill_group(i64::from(pid), None);
    let mut log = String::new();
    for (name, h) in [("stdout", out), ("stderr", err)] {
        if let Some(h) = h {
            let bytes = h.await.unwrap_or_default();
            if !bytes.is_empty() {
                log += &format!("--- {name}\n{}", String::from_utf8_lossy(&bytes));
            }
        }
    }
    if result == "timeout" {
        log += &format!(
            "--- killed after the time limit ({} s)\n",
            d.time_limit.as_secs()
        );
    }
    ended(result, code, log)
}
