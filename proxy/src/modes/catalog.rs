//! The catalog route as a [`Mode`]: Iceberg REST requests under the route's path go to the
//! catalog; GETs are cached with pingora-cache; failures answer an Iceberg REST ErrorModel.

use async_trait::async_trait;
use floe_filter::CacheOutcome;
use pingora::cache::{CacheKey, CachePhase, RespCacheable};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::Session;

use crate::catalog::CatalogRoute;
use crate::modes::respond;
use crate::modes::{Ctx, Mode};

fn no_req() -> Box<Error> {
    Error::explain(
        ErrorType::InternalError,
        "catalog mode without a catalog request",
    )
}

#[async_trait]
impl Mode for CatalogRoute {
    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        Ok(Box::new(self.peer()))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        req: &mut RequestHeader,
        _ctx: &mut Ctx,
    ) -> Result<()> {
        self.rewrite(req)
    }

    fn request_cache_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<()> {
        let c = ctx.catalog.as_ref().ok_or_else(no_req)?;
        if !c.mutation && session.req_header().method == http::Method::GET {
            self.enable(&mut session.cache);
        }
        Ok(())
    }

    fn cache_key_callback(&self, session: &Session, ctx: &mut Ctx) -> Result<CacheKey> {
        let c = ctx.catalog.as_ref().ok_or_else(no_req)?;
        Ok(self.key(session.req_header(), &c.scope))
    }

    fn response_cache_filter(
        &self,
        session: &Session,
        resp: &ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<RespCacheable> {
        let c = ctx.catalog.as_ref().ok_or_else(no_req)?;
        Ok(self.cacheable(session.cache.cache_key(), resp, c))
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let label = match session.cache.phase() {
            CachePhase::Hit => CacheOutcome::Hit,
            CachePhase::Miss | CachePhase::Expired => CacheOutcome::Miss,
            _ => CacheOutcome::Pass,
        };
        ctx.f.cache = Some(label);
        ctx.status = resp.status.as_u16();
        resp.insert_header("x-floe-cache", label.as_str())?;
        // A commit through the route: its namespace's answers go before the client hears of
        // it, so its next loadTable (on any connection) shows the commit.
        let Some(c) = ctx.catalog.as_ref() else {
            return Ok(());
        };
        if c.mutation && resp.status.is_success() {
            let purged = self.after_mutation(&c.scope).await;
            tracing::debug!(scope = %c.scope, purged, "catalog answers purged after a commit");
        }
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        resp.insert_header("x-floe-request-id", ctx.f.request_id.to_string())?;
        ctx.status = resp.status.as_u16();
        Ok(())
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, _ctx: &mut Ctx) -> u16 {
        if respond::answered(session) {
            return 0;
        }
        let msg = format!(
            "Floe could not reach the Iceberg REST catalog: {}",
            e.etype().as_str()
        );
        respond::catalog_error(session, 503, &msg)
            .await
            .unwrap_or(0)
    }
}
