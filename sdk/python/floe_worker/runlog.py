"""The run log: every run's events (start, one per commit, end or error) appended to an Iceberg
table (``FLOE_RUN_LOG_TABLE``, default ``floe_sys.runs``; ``off`` turns it off) that any engine
reads through Floe.

Events go first to a spool file (``FLOE_RUN_LOG_DIR``, one file per attempt, each event flushed
and fsynced as it happens), so a catalog outage never blocks a run and a killed run's events
are kept. At the end of every run the spool is appended to the table, one commit per file under
the key ``floe-runlog/<file>`` (a flush that dies after its commit is not appended twice), then
deleted. A file still locked by a live run is left for its owner. Files the catalog could not
take wait for the next run's flush; past ``FLOE_RUN_LOG_MAX_FILES`` (default 1000) the oldest
are dropped, and the next flush records how many in a ``dropped`` event.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import pathlib
import re
import uuid

import pyarrow as pa

SCHEMA = pa.schema([
    ("deployment", pa.string()), ("run_id", pa.string()), ("attempt", pa.int32()),
    ("event", pa.string()), ("at", pa.timestamp("us", tz="UTC")),
    ("trigger_id", pa.string()), ("trigger_source", pa.string()), ("trigger_type", pa.string()),
    ("logical_date", pa.string()), ("table_name", pa.string()), ("rows", pa.int64()),
    ("snapshot_id", pa.int64()), ("idempotency_key", pa.string()), ("skipped", pa.bool_()),
    ("message", pa.string()),
])
DEFAULT_TABLE = "floe_sys.runs"
DEFAULT_MAX_FILES = 1000
DROPPED = ".dropped"


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


class RunLog:
    """One attempt's spool file, held under an exclusive lock while the run lives."""

    def __init__(self, ctx, directory: pathlib.Path, table: str, max_files: int):
        self.ctx, self.dir, self.table, self.max_files = ctx, directory, table, max_files
        self.dir.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", f"{ctx.deployment}.{ctx.run_id}")[:150]
        self.path = self.dir / f"{safe}.{ctx.attempt}.{uuid.uuid4().hex[:8]}.jsonl"
        self.file = open(self.path, "a", encoding="utf-8")
        fcntl.flock(self.file, fcntl.LOCK_EX)
        self._bound()

    @classmethod
    def from_env(cls, ctx) -> "RunLog | None":
        table = ctx.env.get("FLOE_RUN_LOG_TABLE", DEFAULT_TABLE)
        if table == "off":
            return None
        directory = ctx.env.get("FLOE_RUN_LOG_DIR") or os.path.join(
            ctx.env.get("HOME", "/tmp"), ".cache", "floe-worker", "run-log")
        max_files = int(ctx.env.get("FLOE_RUN_LOG_MAX_FILES", DEFAULT_MAX_FILES))
        return cls(ctx, pathlib.Path(directory), table, max_files)

    def _event(self, event: str, **fields) -> None:
        t = self.ctx.trigger
        row = {"deployment": self.ctx.deployment, "run_id": self.ctx.run_id,
               "attempt": self.ctx.attempt, "event": event, "at": _now(),
               "trigger_id": t.get("id"), "trigger_source": t.get("source"),
               "trigger_type": t.get("type"), "logical_date": t.get("logicaldate"), **fields}
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def start(self) -> None:
        self._event("start")

    def commit(self, result) -> None:
        self._event("commit", table_name=result.table, rows=result.rows,
                    snapshot_id=result.snapshot_id, idempotency_key=result.key,
                    skipped=result.skipped, message=result.schema)

    def end(self, error: str | None = None) -> None:
        """Records the end, releases this attempt's file and appends the spool to the table."""
        if error is None:
            self._event("end")
        else:
            self._event("error", message=error[-4000:])
        self.file.close()
        try:
            self.flush()
        except Exception as e:  # the catalog is down: the spool waits for the next run
            self.ctx.log.warning("run log: %s stays spooled in %s: %s", self.table, self.dir, e)

    def _bound(self) -> None:
        files = sorted(self.dir.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
        extra = len(files) - self.max_files
        dropped = 0
        for p in files[:max(extra, 0)]:
            if _try_lock(p) is not None:
                p.unlink(missing_ok=True)
                dropped += 1
        if dropped:
            count = self.dir / DROPPED
            before = int(count.read_text() or 0) if count.exists() else 0
            count.write_text(str(before + dropped))

    def flush(self) -> int:
        """Appends every unlocked spool file to the table; returns how many went."""
        from .commits import _load_or_create

        catalog = self.ctx.catalog
        tbl = _load_or_create(catalog, self.table, SCHEMA)
        sent = 0
        for p in sorted(self.dir.glob("*.jsonl"), key=lambda q: q.stat().st_mtime):
            held = _try_lock(p)
            if held is None:
                continue
            with held:
                rows = [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines()
                        if x.endswith("}")]
                rows += self._dropped_rows()
                key = f"floe-runlog/{p.name}"
                if rows:
                    for r in rows:
                        r["at"] = dt.datetime.fromisoformat(r["at"])
                    _append_once(tbl, pa.Table.from_pylist(rows, schema=SCHEMA), key)
                p.unlink(missing_ok=True)
                (self.dir / DROPPED).unlink(missing_ok=True)
                sent += 1
        return sent

    def _dropped_rows(self) -> list[dict]:
        count = self.dir / DROPPED
        if not count.exists():
            return []
        n = count.read_text().strip() or "0"
        return [{"deployment": self.ctx.deployment, "run_id": "", "attempt": 0, "event": "dropped",
                 "at": _now(), "rows": int(n),
                 "message": f"{n} spooled run-log files dropped past FLOE_RUN_LOG_MAX_FILES"}]


def _try_lock(path: pathlib.Path):
    """The file opened and exclusively locked, or None when a live run holds it."""
    try:
        f = open(path, "r", encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


def _append_once(tbl, data: pa.Table, key: str) -> None:
    """Appends ``data`` under ``key`` unless the table holds it; retries lost races (every run
    flushes into the same table) and commits whose outcome the catalog did not report (the
    reload finds the key if it landed)."""
    import random
    import time

    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    from .commits import COMMIT_TRIES, IDEMPOTENCY_KEY, find_key

    for _ in range(COMMIT_TRIES):
        tbl.refresh()
        if find_key(tbl, key) is not None:
            return
        try:
            tbl.append(data, snapshot_properties={IDEMPOTENCY_KEY: key})
            return
        except (CommitFailedException, CommitStateUnknownException):
            time.sleep(random.uniform(0.05, 0.3))  # backing off a contended table
    raise RuntimeError(f"run log: not appended in {COMMIT_TRIES} tries (lost races or unknown outcomes)")
