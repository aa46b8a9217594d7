//! The in-process test bench: a real S3 origin (s3s-fs over a temporary folder, on hyper) that
//! records every request it gets, and a whole floe-proxy (`floe_proxy::server::build`, the code
//! `main.rs` runs) on a loopback port in front of it, with a SigV4 signer for the client side.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::{S3Service, S3ServiceBuilder};

/// The bucket every test route serves.
pub const BUCKET: &str = "itest";
/// The client key the route accepts.
pub const CLIENT_KEY: &str = "itest-client";
/// Its secret.
pub const CLIENT_SECRET: &str = "itest-client-secret";
const ORIGIN_KEY: &str = "itest-origin";
const ORIGIN_SECRET: &str = "itest-origin-secret";

/// One request the origin received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET`, `HEAD`, `PUT`, ...
    pub method: String,
    /// The path (`/bucket/key`).
    pub path: String,
    /// Its `Range` header, if any.
    pub range: Option<String>,
}

/// The origin: s3s-fs over `root`, counting what reaches it.
pub struct Origin {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The folder behind it (`root/<bucket>/<key>` are the objects).
    pub root: PathBuf,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Origin {
    /// Every request so far for `key` in [`BUCKET`].
    pub fn seen(&self, key: &str) -> Vec<Seen> {
        let path = format!("/{BUCKET}/{key}");
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|s| s.path == path).cloned().collect()
    }

    /// The GETs (data reads) so far for `key`.
    pub fn gets(&self, key: &str) -> usize {
        self.seen(key).iter().filter(|s| s.method == "GET").count()
    }

    /// Writes an object behind the proxy's back, as another writer of the bucket would.
    pub fn put_file(&self, key: &str, bytes: &[u8]) {
        let path = self.root.join(BUCKET).join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

#[derive(Clone)]
struct Recording {
    inner: S3Service,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for Recording {
    type Response =
        <S3Service as hyper::service::Service<http::Request<hyper::body::Incoming>>>::Response;
    type Error =
        <S3Service as hyper::service::Service<http::Request<hyper::body::Incoming>>>::Error;
    type Future =
        <S3Service as hyper::service::Service<http::Request<hyper::body::Incoming>>>::Future;

    fn call(&self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let range = req.headers().get("range").and_then(|v| v.to_str().ok());
        self.seen.lock().unwrap().push(Seen {
            method: req.method().to_string(),
            path: req.uri().path().to_owned(),
            range: range.map(str::to_owned),
        });
        hyper::service::Service::call(&self.inner, req)
    }
}

/// Starts the origin on a thread of its own (its own runtime, as a separate server would be).
pub fn start_origin(root: &Path) -> Origin {
    std::fs::create_dir_all(root.join(BUCKET)).unwrap();
    let fs = s3s_fs::FileSystem::new(root).unwrap();
    let mut builder = S3ServiceBuilder::new(fs);
    builder.set_auth(SimpleAuth::from_single(ORIGIN_KEY, ORIGIN_SECRET));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = Recording {
        inner: builder.build(),
        seen: seen.clone(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let conn = ConnBuilder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(socket), service.clone())
                    .into_owned();
                tokio::spawn(conn);
            }
        });
    });
    Origin {
        addr,
        root: root.to_owned(),
        seen,
    }
}

/// A whole floe-proxy in this process, in front of `origin`, with `filters` on the test route.
/// Returns its S3 address once it accepts connections.
pub fn start_proxy(dir: &Path, origin: &Origin, filters: &str) -> SocketAddr {
    let port = free_port();
    let yaml = format!(
        r#"
server:
  listeners: [{{address: "127.0.0.1:{port}"}}]
  grace_period_seconds: 1
origins:
  o:
    endpoint: http://{origin}
    credentials: {{from: env, access_key_env: ORIGIN_KEY, secret_key_env: ORIGIN_SECRET}}
routes:
  - bucket: {BUCKET}
    origin: o
    clients: [{{access_key: {CLIENT_KEY}, secret_key: {CLIENT_SECRET}}}]
    filters: {filters}
cache:
  dir: {cache}
  data: {{dram_bytes: 33554432, disk_bytes: 134217728}}
  metadata: {{dram_bytes: 16777216, disk_bytes: 67108864}}
"#,
        origin = origin.addr,
        cache = dir.join("cache").display(),
    );
    let env = |name: &str| match name {
        "ORIGIN_KEY" => Some(ORIGIN_KEY.to_owned()),
        "ORIGIN_SECRET" => Some(ORIGIN_SECRET.to_owned()),
        _ => None,
    };
    let settings = floe_proxy::config::settings::parse("itest.yaml", &yaml, &env).unwrap();
    let path = dir.join("itest.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let server = floe_proxy::server::build(settings, path, false).unwrap();
    std::thread::spawn(move || server.run_forever());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "floe-proxy never listened on {addr}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    addr
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A request to the proxy signed as the route's client (`secret` overrides the secret, to
/// sign wrongly). The payload is signed as `UNSIGNED-PAYLOAD`, as engines sign reads.
pub fn signed(
    client: &reqwest::Client,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    secret: &str,
) -> reqwest::RequestBuilder {
    let host = url.split('/').nth(2).unwrap().to_owned();
    let mut all: Vec<(String, String)> = vec![
        ("host".into(), host),
        ("x-amz-content-sha256".into(), "UNSIGNED-PAYLOAD".into()),
    ];
    all.extend(
        headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    // S3's rules: the path encoded once, never normalised.
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let identity: Identity = Credentials::new(CLIENT_KEY, secret, None, None, "itest").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .unwrap()
        .into();
    let signable = SignableRequest::new(
        method,
        url,
        all.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::UnsignedPayload,
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let (added, _) = instructions.into_parts();
    let mut req = client.request(method.parse().unwrap(), url).body(body);
    for (k, v) in all.iter().filter(|(k, _)| k != "host") {
        req = req.header(k, v);
    }
    for h in added {
        req = req.header(h.name(), h.value());
    }
    req
}
