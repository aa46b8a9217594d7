"""The run context a worker gets: trigger, interval, output tables, env, logger, catalog, and
the commit verbs."""
from __future__ import annotations

import datetime as dt
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Mapping

import pyarrow as pa

from . import commits
from .commits import CommitResult, IDEMPOTENCY_KEY
from .runlog import RunLog

__all__ = ["Context", "CommitResult", "Interval", "IDEMPOTENCY_KEY"]


@dataclass(frozen=True)
class Interval:
    """A cron run's logical time: the nominal date and the half-open [start, end) it covers."""

    logical_date: dt.datetime
    start: dt.datetime
    end: dt.datetime


def _instant(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def interval_of(event: Mapping[str, Any]) -> Interval | None:
    """The logical interval of a cron event (its extensions), else None."""
    start, end = _instant(event.get("intervalstart")), _instant(event.get("intervalend"))
    if start is None or end is None:
        return None
    return Interval(_instant(event.get("logicaldate")) or start, start, end)


def catalog_from_env(env: Mapping[str, str]):
    """A PyIceberg REST catalog from the deployment's configuration: ``FLOE_CATALOG_URI``
    (required), ``FLOE_CATALOG_WAREHOUSE``, ``FLOE_CATALOG_TOKEN``; its S3 I/O goes to
    ``FLOE_S3_ENDPOINT`` (the local Floe) with ``FLOE_S3_ACCESS_KEY_ID`` /
    ``FLOE_S3_SECRET_ACCESS_KEY`` (or the AWS_ variables) and path-style addressing."""
    from pyiceberg.catalog import load_catalog

    uri = env.get("FLOE_CATALOG_URI")
    if not uri:
        raise RuntimeError("FLOE_CATALOG_URI is not set: the deployment's env (or the scheduler's "
                           "worker_env) must name the Iceberg REST catalog")
    props = {"type": "rest", "uri": uri, "s3.region": env.get("FLOE_S3_REGION", "us-east-1"),
             "s3.force-virtual-addressing": "false"}
    optional = {"warehouse": "FLOE_CATALOG_WAREHOUSE", "token": "FLOE_CATALOG_TOKEN",
                "s3.endpoint": "FLOE_S3_ENDPOINT"}
    for prop, var in optional.items():
        if env.get(var):
            props[prop] = env[var]
    key = env.get("FLOE_S3_ACCESS_KEY_ID") or env.get("AWS_ACCESS_KEY_ID")
    secret = env.get("FLOE_S3_SECRET_ACCESS_KEY") or env.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        props["s3.access-key-id"], props["s3.secret-access-key"] = key, secret
    return load_catalog("floe", **props)


class Context:
    """What one run of a worker sees. Built by the harness (``python -m floe_worker``) from the
    scheduler's environment and the event on stdin; a test may build one directly."""

    def __init__(self, event: Mapping[str, Any], env: Mapping[str, str] | None = None,
                 catalog=None, run_log: RunLog | None = None):
        self.env: dict[str, str] = dict(os.environ if env is None else env)
        self.trigger: dict[str, Any] = dict(event)
        self.interval = interval_of(event)
        self.deployment = self.env.get("FLOE_DEPLOYMENT", "local")
        # The job id is the trigger's deterministic identity: every attempt of one event has it.
        self.run_id = self.env.get("FLOE_RUN_ID") or f"{event.get('source')}#{event.get('id')}"
        self.attempt = int(self.env.get("FLOE_ATTEMPT", "1"))
        self.output_tables = [t for t in self.env.get("FLOE_OUTPUT_TABLES", "").split(",") if t]
        self.log = logging.getLogger(f"floe.worker.{self.deployment}")
        self._catalog = catalog
        self._sequence = 0
        self.run_log = run_log
        self.commits: list[CommitResult] = []

    @property
    def output(self) -> str:
        """The first output table (most workers have one)."""
        if not self.output_tables:
            raise RuntimeError(f"deployment {self.deployment} declares no output_tables")
        return self.output_tables[0]

    @property
    def catalog(self):
        """The PyIceberg catalog (loaded on first use)."""
        if self._catalog is None:
            self._catalog = catalog_from_env(self.env)
        return self._catalog

    def read(self, table: str, row_filter: Any = None) -> pa.Table:
        """The table's current rows (optionally filtered) as Arrow."""
        tbl = self.catalog.load_table(table)
        return (tbl.scan(row_filter=row_filter) if row_filter is not None else tbl.scan()).to_arrow()

    def append(self, table: str, rows: pa.Table | list[dict]) -> CommitResult:
        """Appends ``rows``, once: a replay of this run commits nothing twice."""
        return self._commit("append", table, rows, None)

    def overwrite(self, table: str, rows: pa.Table | list[dict], overwrite_filter: Any = None) -> CommitResult:
        """Replaces the rows matching ``overwrite_filter`` (default: all) with ``rows``, once."""
        return self._commit("overwrite", table, rows, overwrite_filter)

    def idempotency_key(self, sequence: int) -> str:
        """The key of this run's commit number ``sequence`` (1-based)."""
        return f"{self.deployment}/{self.run_id}/{sequence}"

    def _commit(self, kind: str, table: str, rows, overwrite_filter) -> CommitResult:
        self._sequence += 1
        result = commits.commit(self, kind, table, rows, overwrite_filter, self._sequence)
        self.commits.append(result)
        if self.run_log is not None:
            self.run_log.commit(result)
        return result


def stderr_logging() -> None:
    """Log lines to stderr (the run's log in floe-control)."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
