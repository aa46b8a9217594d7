"""A worker that touches no table: it runs while the catalog is down (its run log waits)."""


def worker(ctx):
    ctx.log.info("run %s attempt %d", ctx.run_id, ctx.attempt)
