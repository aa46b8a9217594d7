"""The worker SDK (sdk/python) in-process, on PyIceberg's SQLite catalog with a local warehouse:
the idempotency key, replays, a lost commit race, intervals and the run-log spool. No servers:
test_pipeline.py runs the same SDK under floe-control against a REST catalog and Floe."""
import fcntl
import json

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

import floe_worker.commits as commits
from floe_worker import IDEMPOTENCY_KEY, Context
from floe_worker.runlog import RunLog


@pytest.fixture
def catalog(tmp_path):
    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/cat.db", warehouse=f"file://{tmp_path}/wh")
    cat.create_namespace("db")
    return cat


def ctx(catalog, run="job-1", attempt=1, **env):
    base = {"FLOE_DEPLOYMENT": "dep", "FLOE_RUN_ID": run, "FLOE_ATTEMPT": str(attempt),
            "FLOE_OUTPUT_TABLES": "db.out,db.other"}
    event = {"id": "e1", "source": "/s", "type": "t", "intervalstart": "2026-12-01T00:00:00Z",
             "intervalend": "2026-12-01T01:00:00Z", "logicaldate": "2026-12-01T00:00:00Z"}
    return Context(event, env={**base, **env}, catalog=catalog)


ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})


def keyed(catalog, table):
    return [s.summary[IDEMPOTENCY_KEY] for s in catalog.load_table(table).metadata.snapshots
            if s.summary[IDEMPOTENCY_KEY]]


def test_a_replayed_run_commits_nothing_twice_and_a_different_trigger_does(catalog):
    first = ctx(catalog).append("db.out", ROWS)
    again = ctx(catalog, attempt=2).append("db.out", ROWS)
    assert not first.skipped and again.skipped and again.snapshot_id == first.snapshot_id
    assert catalog.load_table("db.out").scan().to_arrow().num_rows == 3
    ctx(catalog, run="job-2").append("db.out", ROWS)
    assert keyed(catalog, "db.out") == ["dep/job-1/1", "dep/job-2/1"]
    assert catalog.load_table("db.out").scan().to_arrow().num_rows == 6


def test_each_commit_of_a_run_has_its_own_sequence_and_an_overwrite_replays_once(catalog):
    c = ctx(catalog)
    c.append("db.out", ROWS)
    c.overwrite("db.other", [{"n": 1}])
    c.overwrite("db.other", [{"n": 2}])
    replay = ctx(catalog, attempt=2)
    results = [replay.append("db.out", ROWS), replay.overwrite("db.other", [{"n": 1}]),
               replay.overwrite("db.other", [{"n": 2}])]
    assert [r.skipped for r in results] == [True, True, True]
    assert catalog.load_table("db.other").scan().to_arrow().to_pylist() == [{"n": 2}]
    assert set(keyed(catalog, "db.other")) == {"dep/job-1/2", "dep/job-1/3"}


def test_an_attempt_that_loses_the_commit_race_to_another_finds_its_key_and_skips(catalog, monkeypatch):
    loser, winner = ctx(catalog), ctx(catalog, attempt=2)
    real = commits.kill_point
    raced = []

    def race(c, point, seq):
        # The other attempt commits between this one's check and its commit.
        if c is loser and point == "before-commit" and not raced:
            raced.append(winner.append("db.out", ROWS))
        real(c, point, seq)

    monkeypatch.setattr(commits, "kill_point", race)
    catalog.create_table("db.out", schema=ROWS.schema)
    result = loser.append("db.out", ROWS)
    assert raced and not raced[0].skipped
    assert result.skipped and result.snapshot_id == raced[0].snapshot_id
    assert catalog.load_table("db.out").scan().to_arrow().num_rows == 3
    assert keyed(catalog, "db.out") == ["dep/job-1/1"]


@pytest.mark.parametrize("landed", [True, False])
def test_a_commit_whose_outcome_the_catalog_lost_is_made_once(catalog, monkeypatch, landed):
    """A 5xx on commit (PyIceberg's CommitStateUnknownException): the SDK reloads and looks for
    its key. Landed, the commit is this attempt's and is not made again; not landed, it is made."""
    from pyiceberg.exceptions import CommitStateUnknownException
    from pyiceberg.table import Transaction

    real = Transaction.commit_transaction
    calls = []

    def unknown(tx):
        calls.append(tx)
        if len(calls) == 1:
            if landed:
                real(tx)
            raise CommitStateUnknownException("500: the catalog's store is locked")
        return real(tx)

    monkeypatch.setattr(Transaction, "commit_transaction", unknown)
    result = ctx(catalog).append("db.out", ROWS)
    assert len(calls) == (1 if landed else 2)
    assert not result.skipped and result.snapshot_id is not None
    assert keyed(catalog, "db.out") == ["dep/job-1/1"]
    assert catalog.load_table("db.out").scan().to_arrow().num_rows == 3


def test_the_interval_and_outputs_come_from_the_event_and_the_deployment(catalog):
    c = ctx(catalog)
    assert c.interval.start.isoformat() == "2026-12-01T00:00:00+00:00"
    assert c.interval.end.isoformat() == "2026-12-01T01:00:00+00:00"
    assert c.output == "db.out" and c.output_tables == ["db.out", "db.other"]
    assert Context({"id": "x"}, env={}).interval is None


def test_the_run_log_spools_then_appends_once_and_leaves_a_live_runs_file(catalog, tmp_path):
    spool = tmp_path / "spool"
    env = {"FLOE_RUN_LOG_DIR": str(spool), "FLOE_RUN_LOG_TABLE": "sys.runs"}
    live = RunLog.from_env(ctx(catalog, run="live", **env))
    live.start()
    c = ctx(catalog, **env)
    log = RunLog.from_env(c)
    c.run_log = log
    log.start()
    c.append("db.out", ROWS)
    log.end()
    rows = catalog.load_table("sys.runs").scan().to_arrow().to_pylist()
    assert [(r["run_id"], r["event"]) for r in rows] == [("job-1", "start"), ("job-1", "commit"), ("job-1", "end")]
    assert rows[1]["rows"] == 3 and rows[1]["idempotency_key"] == "dep/job-1/1"
    # The live run's file is locked by its run: left for it.
    assert [p.name.split(".")[1] for p in spool.glob("*.jsonl")] == ["live"]
    with open(live.path) as f:
        with pytest.raises(OSError):
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    live.end()
    runs = catalog.load_table("sys.runs").scan().to_arrow().to_pylist()
    assert sorted((r["run_id"], r["event"]) for r in runs if r["run_id"] == "live") == [("live", "end"), ("live", "start")]
    assert len(runs) == 5 and not list(spool.glob("*.jsonl"))
