"""The worker contract for Floe pipelines (seed design 000, section 7.2).

A worker is one function, ``worker(ctx)``, run once per trigger event by floe-control's
scheduler through ``python -m floe_worker path/to/file.py[:function]``. It reads and writes
Iceberg tables through ``ctx`` and returns; it keeps no state between runs.

- ``ctx.trigger``: the CloudEvent that started the run (a dict, structured mode).
- ``ctx.interval``: the logical interval of a cron run (``logical_date``, ``start``, ``end``),
  else ``None``. It is the only progress a worker sees: a backfill is the same code over an
  older interval.
- ``ctx.output_tables`` / ``ctx.output``: the deployment's output tables (configuration, never
  written into the code).
- ``ctx.env``, ``ctx.log``: the environment and a logger (stderr, which becomes the run's log).
- ``ctx.catalog``: a PyIceberg REST catalog whose S3 endpoint is the local Floe, so what the
  pipeline reads and writes is what the cache keeps warm.
- ``ctx.append(table, rows)`` / ``ctx.overwrite(table, rows, filter)``: commits that take effect
  once. Each carries an idempotency key (deployment, trigger identity, sequence within the run)
  in its snapshot summary; a replayed run finds its key in the table's history and commits
  nothing twice.

Every run's events (start, each commit, end or error) go to the run log table
(``floe_sys.runs`` by default) through a local spool, so a catalog outage never blocks a run.
"""

from .context import Context, CommitResult, Interval, IDEMPOTENCY_KEY

__all__ = ["Context", "CommitResult", "Interval", "IDEMPOTENCY_KEY"]
