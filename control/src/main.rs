//! `floe-control --config FILE` runs the control plane; `floe-control check FILE` validates a
//! config; `floe-control status [ADDRESS]` prints what a running one is doing.

use std::path::PathBuf;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
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
        ["--config", file] => run(PathBuf::from(file)).await,
        ["check", file] => {
            floe_control::config::load(&PathBuf::from(file))?;
            eprintln!("{file}: ok");
            Ok(())
        }
        ["status"] => status("127.0.0.1:9102").await,
        ["status", addr] => status(addr).await,
        _ => bail!("usage: floe-control --config FILE | check FILE | status [ADDRESS]"),
    }
}

async fn run(file: PathBuf) -> anyhow::Result<()> {
    let settings = floe_control::config::load(&file)?;
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
