//! The worker harness: one subprocess per claimed job. The event goes to the worker as JSON on
//! stdin and as environment variables; its stdout and stderr (the last 64 KiB of each) become
//! the run's log. The lease is renewed every third of its length while the worker lives; the
//! worker's process group gets SIGTERM at the time limit and SIGKILL after the deployment's
//! grace, and is killed at once when the lease is lost to another holder (so one event never
//! runs to completion twice) or when floe-control stops. A worker dies with its floe-control
//! (a parent-death signal), so none runs on after a crash.

use std::process::Stdio;
use std::time::Duration;

use cloudevents::{AttributesReader, Event};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::config::Deployment;
use super::queue::{Lease, Outcome, Queue};
use floe_core::worker::Shutdown;

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
    signal_group(pid, ticks, nix::sys::signal::Signal::SIGKILL);
}

/// Sends `signal` to process group `pid` if its leader is still the process that started at
/// `ticks`.
fn signal_group(pid: i64, ticks: Option<i64>, signal: nix::sys::signal::Signal) {
    let Ok(p) = u32::try_from(pid) else { return };
    if p == 0 {
        return;
    }
    if ticks.is_some() && start_ticks(p) != ticks {
        return;
    }
    let Ok(raw) = i32::try_from(p) else { return };
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(raw), signal);
}

/// Whether worker `pid`'s parent is a live floe-control: another instance's run on this
/// host, not an orphan (a worker whose floe-control died was killed with it, see
/// [`worker_command`], or was handed to init or a subreaper).
pub fn has_live_scheduler(pid: i64) -> bool {
    let Some(ppid) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let rest = stat.rsplit_once(')')?.1.to_owned();
            rest.split_whitespace().nth(1)?.parse::<u32>().ok()
        })
    else {
        return false;
    };
    let comm = std::fs::read_to_string(format!("/proc/{ppid}/comm")).unwrap_or_default();
    ppid > 1 && comm.trim() == "floe-control"
}

/// util-linux's `setpriv`, found on PATH once.
fn setpriv() -> Option<&'static std::path::Path> {
    static FOUND: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .map(|d| d.join("setpriv"))
                .find(|p| p.is_file())
        })
        .as_deref()
}

/// Whether `command` can be started from `dir` (a name is looked up on PATH).
fn findable(command: &str, dir: Option<&std::path::Path>) -> bool {
    if command.contains('/') {
        let path = std::path::Path::new(command);
        return match dir {
            Some(d) if path.is_relative() => d.join(path).is_file(),
            _ => path.is_file(),
        };
    }
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(command).is_file()))
}

/// The worker's command: run through `setpriv --pdeathsig KILL`, which sets the parent-death
/// signal and execs it, so the worker dies with floe-control even when floe-control is killed
/// with SIGKILL and stays down (the workspace forbids the unsafe `pre_exec` that would set it
/// here). Without setpriv on PATH the worker runs as it is, and a restart reaps it.
fn worker_command(d: &Deployment) -> Command {
    match setpriv() {
        Some(wrapper) => {
            let mut cmd = Command::new(wrapper);
            cmd.args(["--pdeathsig", "KILL", "--", &d.command]);
            cmd
        }
        None => Command::new(&d.command),
    }
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

/// Renews the lease for another `lease_len`; false once another holder took the run (a store
/// that cannot be reached keeps it: the lease runs out on its own).
async fn renewed(q: &dyn Queue, l: &Lease, lease_len: Duration) -> bool {
    let until = now_ms() + i64::try_from(lease_len.as_millis()).unwrap_or(i64::MAX / 2);
    !matches!(q.renew(&l.id, l.generation, until).await, Ok(false))
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
    if !findable(&d.command, d.dir.as_deref().map(std::path::Path::new)) {
        let why = format!("{}: not found", d.command);
        return Outcome {
            result: "spawn",
            exit_code: None,
            log: why,
            ended_ms: now_ms(),
        };
    }
    let mut cmd = worker_command(d);
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
            _ = renew.tick() => if !renewed(q, l, lease_len).await {
                break ("lost", None);
            }
        }
    };
    let mut ended_by = "";
    if result == "timeout" {
        // As Kubernetes stops a pod: SIGTERM, the grace (the lease still renewed), then SIGKILL.
        signal_group(i64::from(pid), ticks, nix::sys::signal::Signal::SIGTERM);
        let grace = tokio::time::sleep(d.stop_grace);
        tokio::pin!(grace);
        ended_by = loop {
            tokio::select! {
                _ = child.wait() => break "SIGTERM",
                _ = &mut grace => break "SIGKILL",
                _ = stop.changed() => break "SIGKILL",
                _ = renew.tick() => if !renewed(q, l, lease_len).await {
                    break "SIGKILL";
                }
            }
        };
    }
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
        let how = match ended_by {
            "SIGTERM" => "it ended on SIGTERM within the grace".to_owned(),
            _ => format!(
                "SIGTERM, then SIGKILL after the {} s grace",
                d.stop_grace.as_secs()
            ),
        };
        log += &format!("--- time limit ({} s): {how}\n", d.time_limit.as_secs());
    }
    ended(result, code, log)
}
