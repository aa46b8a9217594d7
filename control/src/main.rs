//! `floe-control --config FILE` runs the control plane; `floe-control check FILE` validates a
//! config; `floe-control status [ADDRESS]` prints what a running one is doing; `floe-control
//! runs [--deployment D] [ADDRESS]` lists the scheduler's runs; `floe-control dispatch D
//! [ADDRESS]` starts one run of deployment D by hand; `floe-control pin TABLE [--partition
//! SPEC] [--columns a,b] [ADDRESS]` keeps a table (or its matching partitions, or some of its
//! columns) in the fleet's cache until
//! `floe-control unpin` with the same arguments; `floe-control pins [ADDRESS]` lists pins; `floe-control conform D --config FILE`
//! checks D's worker against the worker contract; `floe-control schema` prints the config's
//! JSON Schema. ADDRESS defaults to 127.0.0.1:9102.

use std::path::PathBuf;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The OTLP exporter builds a blocking HTTP client: start it before the runtime.
    let mut settings = None;
    if let [flag, file] = args.as_slice() {
        if flag == "--config" {
            let s = floe_control::config::load(&PathBuf::from(file))?;
            if let Some(endpoint) = &s.otlp_endpoint {
                floe_control::otel::init(endpoint)?;
            }
            settings = Some(s);
        }
    }
    tokio::runtime::Runtime::new()?.block_on(async_main(settings))
}

async fn async_main(settings: Option<floe_control::config::Settings>) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--json").collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["--config", _] => match settings {
            Some(s) => run(s).await,
            None => bail!("no settings"),
        },
        ["conform", deployment, "--config", file] => conform(file, deployment, None).await,
        ["conform", deployment, "--config", file, "--event", event] => {
            conform(file, deployment, Some(event)).await
        }
        ["check", file] => {
            floe_control::config::load(&PathBuf::from(file))?;
            eprintln!("{file}: ok");
            Ok(())
        }
        ["schema"] => {
            print_schema();
            Ok(())
        }
        ["status"] => status(DEFAULT_ADDR).await,
        ["status", addr] => status(addr).await,
        ["runs"] => runs(DEFAULT_ADDR, None).await,
        ["runs", "--deployment", d] => runs(DEFAULT_ADDR, Some(d)).await,
        ["runs", "--deployment", d, addr] => runs(addr, Some(d)).await,
        ["runs", addr] => runs(addr, None).await,
        ["pin", rest @ ..] => pin(reqwest::Method::POST, rest).await,
        ["unpin", rest @ ..] => pin(reqwest::Method::DELETE, rest).await,
        ["pins"] => pins(DEFAULT_ADDR).await,
        ["pins", addr] => pins(addr).await,
        ["dispatch", d] => dispatch(DEFAULT_ADDR, d).await,
        ["dispatch", d, addr] => dispatch(addr, d).await,
        _ => bail!("usage: floe-control --config FILE | check FILE | status [ADDRESS] | runs [--deployment D] [ADDRESS] | dispatch D [ADDRESS] | pin|unpin TABLE [--partition SPEC] [--columns a,b] [ADDRESS] | pins [ADDRESS] | conform D --config FILE [--event FILE] [--json] | schema"),
    }
}

/// Runs the worker conformance check on deployment `deployment` and prints its report; fails
/// when a check fails.
#[allow(clippy::print_stdout)]
async fn conform(file: &str, deployment: &str, event: Option<&str>) -> anyhow::Result<()> {
    let settings = floe_control::config::load(&PathBuf::from(file))?;
    floe_control::http::install(floe_control::http::build(settings.ca_pem.as_deref())?);
    let event = match event {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| path.to_owned())?;
            Some(serde_json::from_str(&text).with_context(|| format!("{path}: not a CloudEvent"))?)
        }
        None => None,
    };
    let report = floe_control::conform::run(&settings, deployment, event).await?;
    if std::env::args().any(|a| a == "--json") {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.render());
    }
    if !report.passed() {
        bail!("{deployment} does not conform");
    }
    Ok(())
}

/// Prints the config file's JSON Schema (conf/floe-control.schema.json).
#[allow(clippy::print_stdout)]
fn print_schema() {
    print!("{}", floe_control::config::schema());
}

const DEFAULT_ADDR: &str = "127.0.0.1:9102";

/// Sends one request to a running floe-control; its status and JSON answer.
async fn call(
    addr: &str,
    method: reqwest::Method,
    path: &str,
) -> anyhow::Result<(u16, serde_json::Value)> {
    let url = format!("http://{addr}{path}");
    let r = reqwest::Client::new()
        .request(method, &url)
        .send()
        .await
        .with_context(|| format!("no floe-control listening at {addr}"))?;
    let code = r.status().as_u16();
    let doc = r
        .json()
        .await
        .with_context(|| format!("{url}: the answer is not JSON"))?;
    Ok((code, doc))
}

/// Lists runs, newest first (stdout is the command's output here).
#[allow(clippy::print_stdout)]
async fn runs(addr: &str, deployment: Option<&str>) -> anyhow::Result<()> {
    let q = deployment.map(|d| {
        format!(
            "?deployment={}",
            url::form_urlencoded::byte_serialize(d.as_bytes()).collect::<String>()
        )
    });
    let (code, doc) = call(
        addr,
        reqwest::Method::GET,
        &format!("/runs{}", q.unwrap_or_default()),
    )
    .await?;
    if code != 200 {
        bail!("{addr}: {code} {}", doc["error"]);
    }
    if std::env::args().any(|a| a == "--json") {
        println!("{doc}");
    } else {
        print!("{}", floe_control::status::render_runs(&doc));
    }
    Ok(())
}

/// Pins or unpins (`method` POST or DELETE) the table `args` name, and prints the answer.
#[allow(clippy::print_stdout)]
async fn pin(method: reqwest::Method, args: &[&str]) -> anyhow::Result<()> {
    let usage = "usage: floe-control pin|unpin TABLE [--partition SPEC] [--columns a,b] [ADDRESS]";
    let Some((table, mut rest)) = args.split_first() else {
        bail!(usage);
    };
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    q.append_pair("table", table);
    let mut addr = DEFAULT_ADDR;
    while let Some((first, tail)) = rest.split_first() {
        match (*first, tail) {
            (flag @ ("--partition" | "--columns"), [value, more @ ..]) => {
                q.append_pair(&flag[2..], value);
                rest = more;
            }
            (a, []) if !a.starts_with("--") => {
                addr = a;
                rest = &[];
            }
            _ => bail!(usage),
        }
    }
    let (code, doc) = call(addr, method, &format!("/pins?{}", q.finish())).await?;
    if !(200..300).contains(&code) {
        bail!(
            "{addr}: {code} {}",
            doc["error"].as_str().unwrap_or_default()
        );
    }
    println!("{doc}");
    Ok(())
}

/// Lists pins and their state.
#[allow(clippy::print_stdout)]
async fn pins(addr: &str) -> anyhow::Result<()> {
    let (code, doc) = call(addr, reqwest::Method::GET, "/pins").await?;
    if code != 200 {
        bail!("{addr}: {code} {}", doc["error"]);
    }
    if std::env::args().any(|a| a == "--json") {
        println!("{doc}");
        return Ok(());
    }
    for p in doc["pins"].as_array().into_iter().flatten() {
        println!(
            "{:<32} {:<20} {:<16} {:<9} {:>6} files {:>14} bytes {}",
            p["table"].as_str().unwrap_or_default(),
            p["partition"].as_str().unwrap_or("(all)"),
            p["columns"]
                .as_array()
                .map(|c| c
                    .iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(","))
                .unwrap_or_else(|| "(all)".into()),
            p["phase"].as_str().unwrap_or_default(),
            p["files"],
            p["bytes"],
            p["note"].as_str().unwrap_or_default()
        );
    }
    Ok(())
}

/// Starts one run by hand and prints its job id.
#[allow(clippy::print_stdout)]
async fn dispatch(addr: &str, deployment: &str) -> anyhow::Result<()> {
    let path = format!("/deployments/{deployment}/dispatch");
    let (code, doc) = call(addr, reqwest::Method::POST, &path).await?;
    if code != 202 {
        bail!("{addr}: {code} {}", doc["error"]);
    }
    println!("{}", doc["job"].as_str().unwrap_or_default());
    Ok(())
}

async fn run(settings: floe_control::config::Settings) -> anyhow::Result<()> {
    floe_control::http::install(floe_control::http::build(settings.ca_pem.as_deref())?);
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
        let _ = tx.send(true);
    });
    floe_control::run(settings, rx).await
}

/// Prints the status of a running floe-control (stdout is the command's output here).
#[allow(clippy::print_stdout)]
async fn status(addr: &str) -> anyhow::Result<()> {
    let mut sock = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("no floe-control status endpoint at {addr}"))?;
    sock.write_all(b"GET /status HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await?;
    let mut buf = Vec::new();
    sock.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf);
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    let doc: serde_json::Value = serde_json::from_str(body).context("status answer is not JSON")?;
    if std::env::args().any(|a| a == "--json") {
        println!("{doc}");
    } else {
        print!("{}", floe_control::status::render(&doc));
    }
    Ok(())
}
