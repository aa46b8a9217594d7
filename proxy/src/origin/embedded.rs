//! The embedded origin: an s3s-fs S3 server over a local folder, in this process, on a
//! loopback port. It is what makes the quickstart need nothing else installed.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;

/// A running embedded origin.
pub struct Embedded {
    /// Where it listens (loopback).
    pub addr: SocketAddr,
    /// The access key Floe signs with.
    pub access_key: String,
    /// The secret.
    pub secret_key: String,
}

/// Starts s3s-fs over `root`, creating a folder per bucket, on a thread of its own.
pub fn start(root: &str, buckets: &[String]) -> anyhow::Result<Embedded> {
    let root = PathBuf::from(root);
    for b in buckets {
        std::fs::create_dir_all(root.join(b))
            .with_context(|| format!("creating {}", root.join(b).display()))?;
    }
    let access_key = format!("embedded{:016x}", rand::random::<u64>());
    let secret_key = format!("{:032x}", rand::random::<u128>());
    let fs = s3s_fs::FileSystem::new(&root)
        .map_err(|e| anyhow::anyhow!("embedded origin at {}: {e:?}", root.display()))?;
    let mut builder = S3ServiceBuilder::new(fs);
    builder.set_auth(SimpleAuth::from_single(
        access_key.clone(),
        secret_key.clone(),
    ));
    let service = builder.build();
    let std_listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("binding the embedded origin")?;
    std_listener.set_nonblocking(true)?;
    let addr = std_listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("floe-embedded")
        .enable_all()
        .build()
        .context("starting the embedded origin runtime")?;
    std::thread::Builder::new()
        .name("floe-embedded".into())
        .spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                    return;
                };
                let http = ConnBuilder::new(TokioExecutor::new());
                loop {
                    let Ok((socket, _)) = listener.accept().await else {
                        continue;
                    };
                    let conn = http
                        .serve_connection(TokioIo::new(socket), service.clone())
                        .into_owned();
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                }
            });
        })?;
    Ok(Embedded {
        addr,
        access_key,
        secret_key,
    })
}
