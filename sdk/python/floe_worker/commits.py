"""Commits that take effect once.

A commit carries ``floe.idempotency-key`` = ``<deployment>/<trigger identity>/<sequence>`` in
its snapshot summary (every snapshot it makes: an overwrite's delete and its append). Before
writing, the table's snapshot history is searched for the key; a run replayed after a crash or
a lost lease finds the commits its earlier attempt made and skips them. The table's own commit
log carries the guarantee: no side store to keep consistent.

Two attempts racing (a run whose lease was lost, still alive for a moment) are settled by the
catalog: each commit asserts the snapshot it read, so the loser's commit fails, it reloads,
finds the winner's key and skips.

A commit whose outcome the catalog could not report (a 5xx or a lost response:
``CommitStateUnknownException``) is settled the same way: reload, look for the key. Found, it
was this attempt's commit; not found, it did not happen and is made again.

Keys live as long as their snapshots: expire snapshots later than any run can be retried.
"""
from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

IDEMPOTENCY_KEY = "floe.idempotency-key"
#: The snapshot summary property naming the attempt that made a commit.
ATTEMPT = "floe.attempt"
#: Attempts at one commit when other writers keep winning the race for the table.
COMMIT_TRIES = 8
#: Attempts at creating an output namespace or table while the catalog answers 5xx.
CREATE_TRIES = 5


@dataclass(frozen=True)
class CommitResult:
    """What one ``append`` or ``overwrite`` did."""

    table: str
    kind: str
    sequence: int
    key: str
    rows: int
    #: The snapshot holding the key (this run's commit, or the earlier attempt's).
    snapshot_id: int | None
    #: True when an earlier attempt had committed it: nothing was written this time.
    skipped: bool
    #: The Arrow schema of the rows the worker passed (the conformance check compares it).
    schema: str = field(default="")


def find_key(tbl, key: str) -> int | None:
    """The id of a snapshot in ``tbl``'s history whose summary holds ``key``."""
    for snap in tbl.metadata.snapshots:
        if snap.summary is not None and snap.summary[IDEMPOTENCY_KEY] == key:
            return snap.snapshot_id
    return None


def kill_point(ctx, point: str, sequence: int) -> None:
    """The conformance hook: ``FLOE_KILL_AT=<point>:<sequence>`` kills this process with SIGKILL
    at that point of that commit, on the first attempt only (the re-dispatch must finish).
    Points: ``before-write``, ``before-commit`` (data files written, not committed),
    ``after-commit``."""
    want = ctx.env.get("FLOE_KILL_AT", "")
    if ctx.attempt == 1 and want == f"{point}:{sequence}":
        os.kill(os.getpid(), signal.SIGKILL)


def as_arrow(rows, tbl) -> pa.Table:
    if isinstance(rows, pa.Table):
        return rows
    if tbl is not None:
        return pa.Table.from_pylist(list(rows), schema=tbl.schema().as_arrow())
    return pa.Table.from_pylist(list(rows))


def _made_by(tbl, snapshot_id: int) -> str | None:
    """The ``floe.attempt`` that made snapshot ``snapshot_id`` of ``tbl``."""
    snap = tbl.metadata.snapshot_by_id(snapshot_id)
    return snap.summary[ATTEMPT] if snap is not None and snap.summary is not None else None


def _load_or_create(catalog, table: str, schema: pa.Schema | None):
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(table)
    except NoSuchTableError:
        if schema is None:
            raise
        namespace = table.rsplit(".", 1)[0]
        _settle_creation(lambda: catalog.create_namespace_if_not_exists(namespace),
                         lambda: catalog.namespace_exists(namespace))
        made = _settle_creation(lambda: catalog.create_table_if_not_exists(table, schema=schema),
                                lambda: catalog.table_exists(table))
        return made if made is not None else catalog.load_table(table)


def _settle_creation(create, exists):
    """``create()``'s result, or ``None`` once ``exists()`` holds after it failed. Workers that
    start together create their output tables' namespace together, and a catalog may answer the
    losers of that race with a 5xx instead of a 409 (the REST fixture's JDBC store fails the
    duplicate INSERT): what counts is that the thing exists afterwards, whoever made it."""
    from pyiceberg.exceptions import ServerError

    for tried in range(1, CREATE_TRIES + 1):
        try:
            return create()
        except ServerError:
            if exists():
                return None
            if tried == CREATE_TRIES:
                raise
            time.sleep(random.uniform(0.05, 0.3))  # backing off a catalog in trouble


def _without_retries(tbl):
    """``tbl`` as a table whose commits are not retried by PyIceberg. PyIceberg (0.10+) retries a
    commit that lost a race by re-applying it to the new head (``commit.retry.num-retries``,
    default 4), which would commit a key the winner already holds; here a lost race must come
    back to the key check instead. The property is set on this in-memory copy only: a commit
    sends its snapshot updates, never the base's properties."""
    from pyiceberg.table import Table

    props = {**tbl.metadata.properties, "commit.retry.num-retries": "0"}
    metadata = tbl.metadata.model_copy(update={"properties": props})
    return Table(tbl.name(), metadata, tbl.metadata_location, tbl.io, tbl.catalog)


def commit(ctx, kind: str, table: str, rows, overwrite_filter: Any, sequence: int) -> CommitResult:
    """Commits ``rows`` to ``table`` under this run's key number ``sequence``, unless the table
    already holds that key. A missing table is created with the rows' schema."""
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    key = ctx.idempotency_key(sequence)
    if not isinstance(rows, pa.Table):
        rows = list(rows)
    given = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
    tbl = _load_or_create(ctx.catalog, table, given.schema)
    data = as_arrow(rows, tbl)
    props = {IDEMPOTENCY_KEY: key, "floe.deployment": ctx.deployment, "floe.run-id": ctx.run_id,
             ATTEMPT: str(ctx.attempt)}
    for _ in range(COMMIT_TRIES):
        tbl.refresh()
        found = find_key(tbl, key)
        if found is not None:
            mine = _made_by(tbl, found) == str(ctx.attempt)
            ctx.log.info("commit %s to %s: made by %s (snapshot %s)", key, table,
                         "this attempt" if mine else "an earlier attempt", found)
            return CommitResult(table, kind, sequence, key, data.num_rows, found, not mine,
                                str(data.schema))
        kill_point(ctx, "before-write", sequence)
        tx = _without_retries(tbl).transaction()
        if kind == "append":
            tx.append(data, snapshot_properties=props)
        else:
            from pyiceberg.expressions import AlwaysTrue

            tx.overwrite(data, overwrite_filter=overwrite_filter or AlwaysTrue(), snapshot_properties=props)
        kill_point(ctx, "before-commit", sequence)
        try:
            tbl = tx.commit_transaction()
        except CommitFailedException as e:
            ctx.log.info("commit %s to %s lost a race (%s); reloading", key, table, e)
            time.sleep(random.uniform(0.05, 0.3))  # backing off a contended table
            continue
        except CommitStateUnknownException as e:
            # The reload above settles it: the key is there (this commit landed) or it is not.
            ctx.log.warning("commit %s to %s: the catalog did not say whether it landed (%s); "
                            "reloading", key, table, e)
            time.sleep(random.uniform(0.05, 0.3))  # backing off a catalog in trouble
            continue
        kill_point(ctx, "after-commit", sequence)
        snap = tbl.current_snapshot()
        return CommitResult(table, kind, sequence, key, data.num_rows,
                            snap.snapshot_id if snap else None, False, str(data.schema))
    raise RuntimeError(f"commit {key} to {table}: not made in {COMMIT_TRIES} tries (lost races or unknown outcomes)")
