//! The admin API, on its own listener, behind a bearer token. The plugins serve their own
//! endpoints (the block cache: `/stats`, `/purge`, `/warm`, `/object`, `/accesses`,
//! `/classify`; see floe-blocks' admin.rs); the proxy itself serves:
//!
//! - `POST /catalog/purge?namespace=NS` -> the catalog route's cached answers about NS
//!   (dotted) are dropped; floe-control calls it on every commit it sees.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::BytesMut;
use floe_core::uri::decode;
use floe_filter::plugin::{AdminHandler, AdminRequest, AdminResponse};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::catalog::CatalogRoute;

/// Largest admin request body (a `/classify` list of about 100k keys).
const MAX_BODY: usize = 16 << 20;

/// The admin application.
pub struct AdminApp {
    token: String,
    handlers: Vec<Arc<dyn AdminHandler>>,
    catalog: Option<Arc<CatalogRoute>>,
}

impl AdminApp {
    /// An admin API over the plugins' endpoints and the catalog route.
    pub fn new(
        token: String,
        handlers: Vec<Arc<dyn AdminHandler>>,
        catalog: Option<Arc<CatalogRoute>>,
    ) -> Self {
        Self {
            token,
            handlers,
            catalog,
        }
    }

    fn authorized(&self, session: &ServerSession) -> bool {
        use subtle::ConstantTimeEq;
        let got = session
            .req_header()
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let want = format!("Bearer {}", self.token);
        got.len() == want.len() && bool::from(got.as_bytes().ct_eq(want.as_bytes()))
    }

    /// The request as plugins see it; `Err` when the body is too large or unreadable.
    async fn request(session: &mut ServerSession) -> Result<AdminRequest, AdminResponse> {
        let req = session.req_header();
        let method = req.method.as_str().to_owned();
        let path = req.uri.path().to_owned();
        let query = query(req.uri.query().unwrap_or(""));
        let mut body = BytesMut::new();
        loop {
            match session.read_request_body().await {
                Ok(Some(chunk)) if body.len() + chunk.len() <= MAX_BODY => {
                    body.extend_from_slice(&chunk)
                }
                Ok(Some(_)) => return Err(AdminResponse::error(413, "body over 16 MiB")),
                Ok(None) => break,
                Err(e) => return Err(AdminResponse::error(400, e)),
            }
        }
        Ok(AdminRequest {
            method,
            path,
            query,
            body: body.freeze(),
        })
    }

    async fn catalog_purge(&self, req: &AdminRequest) -> AdminResponse {
        match &self.catalog {
            Some(c) => {
                let purged = c.purge(req.param("namespace")).await;
                let purged = purged as u64;
                AdminResponse::doc(200, &CatalogPurgeDoc { purged })
            }
            None => AdminResponse::error(404, "no catalog route configured"),
        }
    }

    async fn answer(&self, session: &mut ServerSession) -> AdminResponse {
        if !self.authorized(session) {
            return AdminResponse::error(401, "missing or wrong bearer token");
        }
        let req = match Self::request(session).await {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        if (req.method.as_str(), req.path.as_str()) == ("POST", "/catalog/purge") {
            return self.catalog_purge(&req).await;
        }
        for h in &self.handlers {
            if let Some(resp) = h.handle(&req).await {
                return resp;
            }
        }
        AdminResponse::error(404, "unknown admin endpoint")
    }
}

fn query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn reply(r: AdminResponse) -> http::Response<Vec<u8>> {
    let mut resp = http::Response::new(r.body.to_vec());
    *resp.status_mut() =
        http::StatusCode::from_u16(r.status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    let kind = if r.json {
        "application/json"
    } else {
        "application/octet-stream"
    };
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(kind),
    );
    for (name, v) in r.headers {
        if let Ok(v) = http::HeaderValue::from_str(&v) {
            h.insert(name, v);
        }
    }
    resp
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> http::Response<Vec<u8>> {
        reply(self.answer(session).await)
    }
}

/// `POST /catalog/purge`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CatalogPurgeDoc {
    /// Cached answers dropped.
    pub purged: u64,
}
