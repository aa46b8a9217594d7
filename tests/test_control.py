"""floe-control against a real Iceberg REST catalog (the Apache Iceberg REST fixture from Maven
Central, backed by MinIO), PyIceberg as writer (straight to MinIO, so Floe's write-through cannot
warm anything) and PyIceberg as reader through Floe. The relay in front of MinIO logs every
request line Floe sends to the origin."""
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from conftest import (complete_lines, ADMIN_TOKEN, BUCKET, CLIENT, CONTROL_BIN, ORIGIN_KEY, ORIGIN_SECRET, Proc,
                      free_port, start_cached_floe)
from relay import Relay

NS = "ctl"


def rest_dir():
    d = os.environ.get("FLOE_ICEBERG_REST")
    if d:
        return d
    here = pathlib.Path(__file__).parent
    return subprocess.run([here / "catalog" / "fetch.sh"], check=True, capture_output=True,
                          text=True).stdout.strip()


def start_rest(tmp, minio_port, port):
    env = dict(os.environ, CATALOG_WAREHOUSE=f"s3://{BUCKET}/wh",
               CATALOG_IO__IMPL="org.apache.iceberg.aws.s3.S3FileIO",
               CATALOG_S3_ENDPOINT=f"http://127.0.0.1:{minio_port}",
               CATALOG_S3_PATH__STYLE__ACCESS="true", CATALOG_REST_PORT=str(port),
               # A file, not the default jdbc:sqlite::memory: (each pooled connection would get
               # its own empty database under concurrent requests).
               CATALOG_URI=f"jdbc:sqlite:{tmp}/catalog.db",
               AWS_ACCESS_KEY_ID=ORIGIN_KEY, AWS_SECRET_ACCESS_KEY=ORIGIN_SECRET,
               AWS_REGION="us-east-1")
    return Proc(["java", "-cp", f"{rest_dir()}/*", "org.apache.iceberg.rest.RESTCatalogServer"],
                env, tmp / "rest.log", port, "iceberg rest catalog")


def iceberg(rest_port, s3_port, key, secret, path=""):
    return load_catalog("rest", **{
        "type": "rest", "uri": f"http://127.0.0.1:{rest_port}{path}",
        "s3.endpoint": f"http://127.0.0.1:{s3_port}", "s3.access-key-id": key,
        "s3.secret-access-key": secret, "s3.region": "us-east-1",
        "s3.force-virtual-addressing": False})


CONTROL_YAML = """
catalog: {{uri: "{scheme}://127.0.0.1:{rest}", poll_interval_ms: 200{catalog_extra}}}
follow: [{{namespace: {ns}}}]
nodes: [{nodes}]
prefetch: {{enabled: {prefetch}, purge_after_ms: 1000}}
heat: {{path: "{heat}", pull_interval_ms: 200}}
status_address: "127.0.0.1:{status}"
{extra}
"""


class Control:
    def __init__(self, tmp, rest_port, admin_port, prefetch=True, extra="", catalog_extra="",
                 env=None, scheme="http"):
        self.env = env or {}
        self.tmp, self.port = tmp, free_port()
        self.conf = tmp / "control.yaml"
        ports = admin_port if isinstance(admin_port, list) else [admin_port]
        nodes = ", ".join(f'{{admin: "{scheme}://127.0.0.1:{p}", token: {ADMIN_TOKEN}}}' for p in ports)
        self.conf.write_text(CONTROL_YAML.format(rest=rest_port, ns=NS, nodes=nodes, scheme=scheme,
                                                 heat=tmp / "heat.json",
                                                 status=self.port,
                                                 prefetch=str(prefetch).lower(), extra=extra,
                                                 catalog_extra=catalog_extra))
        self.start()

    def start(self):
        env = dict(os.environ, RUST_LOG="info", **self.env)
        self.proc = Proc([str(CONTROL_BIN), "--config", str(self.conf)], env,
                         self.tmp / "control.log", self.port, "floe-control")

    def status(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status") as r:
            return json.loads(r.read())

    def wait(self, cond, what, timeout=60):
        """Polls the status document until `cond(doc)` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            doc = self.status()
            if cond(doc):
                return doc
            time.sleep(0.1)  # polling a state, not synchronising on time
        raise AssertionError(f"timed out waiting for {what}: {json.dumps(self.status())[:2000]}")

    def wait_warm(self, table, snapshot_id):
        def ok(doc):
            t = doc["tables"].get(table)
            return t and t["snapshot_id"] == snapshot_id and t["warm"]["phase"] == "warm"
        return self.wait(ok, f"{table} snapshot {snapshot_id} warm")["tables"][table]

    def stop(self):
        self.proc.stop()


@pytest.fixture(scope="module")
def stack(minio, relay, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("control")
    rest_port = free_port()
    rest = start_rest(tmp, minio.port, rest_port)
    # Floe's catalog route reaches the catalog through a counting relay.
    rest_relay = Relay(rest_port)
    # Room for the compaction test's working set and its rewrite without admission pressure.
    floe = start_cached_floe(tmp, relay.port, tmp / "cache", data=(512 << 20, 1 << 30),
                             extra_cache=f"catalog: {{upstream: 'http://127.0.0.1:{rest_relay.port}'}}")
    ctl = Control(tmp, rest_port, floe.admin_port)
    writer = iceberg(rest_port, minio.port, ORIGIN_KEY, ORIGIN_SECRET)
    reader = iceberg(rest_port, floe.port, *CLIENT)
    writer.create_namespace_if_not_exists(NS)
    stack = dict(tmp=tmp, rest=rest, rest_port=rest_port, floe=floe, ctl=ctl, writer=writer,
                 reader=reader, rest_relay=rest_relay)
    yield stack
    # The outage test replaces stack["rest"] with a restarted catalog: stop that one.
    for p in (ctl, floe, stack["rest"]):
        p.stop()


def batch(start, n, parts=4):
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "p": pa.array([i % parts for i in range(start, start + n)], pa.int32()),
        "v": pa.array([f"value-{i}" for i in range(start, start + n)]),
    })


def table_requests(relay, mark, table):
    """Origin request lines since `mark` that touched the table's files."""
    return [line for line in relay.lines[mark:] if f"/wh/{NS}/{table}" in line[1]]


def test_each_commit_is_warm_before_the_first_query(stack, relay):
    w, ctl = stack["writer"], stack["ctl"]
    t = w.create_table(f"{NS}.events", schema=batch(0, 1).schema)
    with t.update_spec() as u:
        u.add_identity("p")
    t.append(batch(0, 20_000))
    st = ctl.wait_warm(f"{NS}.events", t.current_snapshot().snapshot_id)
    assert st["data_files"] == 4 and st["warm"]["done"] == st["warm"]["total"] > 0, st
    for round_ in range(2):
        mark = len(relay.lines)
        got = stack["reader"].load_table(f"{NS}.events").scan().to_arrow()
        assert got.num_rows == 20_000 * (round_ + 1)
        assert sorted(got["id"].to_pylist()) == list(range(20_000 * (round_ + 1)))
        touched = table_requests(relay, mark, "events")
        assert touched == [], f"the first query after commit {round_} went to the origin: {touched}"
        # The next commit: an append; the query after it must be warm too.
        t.append(batch(20_000 * (round_ + 1), 20_000))
        t = w.load_table(f"{NS}.events")
        ctl.wait_warm(f"{NS}.events", t.current_snapshot().snapshot_id)


def test_warm_progress_is_in_the_metrics_the_dashboard_reads(stack):
    from test_dashboard import check, queries, scrape
    w, ctl = stack["writer"], stack["ctl"]
    t = w.create_table(f"{NS}.metered", schema=batch(0, 1).schema)
    t.append(batch(0, 1000))
    st = ctl.wait_warm(f"{NS}.metered", t.current_snapshot().snapshot_id)
    text = urllib.request.urlopen(f"http://127.0.0.1:{ctl.port}/metrics").read().decode()
    done = f'floe_control_warm_objects{{state="done",table="{NS}.metered"}} {st["warm"]["done"]}'
    assert done in text and st["warm"]["done"] > 0, text
    assert f'floe_control_warm_bytes{{table="{NS}.metered"}} {st["warm"]["bytes"]}' in text
    check(queries("floe-control"), scrape(f"http://127.0.0.1:{ctl.port}/metrics"))


def duckdb_iceberg(rest_port, s3_port, sql, key=CLIENT[0], secret=CLIENT[1], writes=False):
    """DuckDB with its iceberg extension (offline, from the PyPI wheels), the REST catalog
    attached as `lake`, S3 reads through `s3_port`."""
    import duckdb
    con = duckdb.connect()
    for name in ("httpfs", "avro", "iceberg"):
        mod = __import__(f"duckdb_extension_{name}")
        ext = next(pathlib.Path(mod.__file__).parent.rglob(f"{name}.duckdb_extension"))
        con.execute(f"LOAD '{ext}'")
    con.execute(f"""CREATE SECRET floe (TYPE s3, KEY_ID '{key}', SECRET '{secret}',
        REGION 'us-east-1', ENDPOINT '127.0.0.1:{s3_port}', URL_STYLE 'path', USE_SSL false)""")
    con.execute(f"""ATTACH '' AS lake (TYPE iceberg, ENDPOINT 'http://127.0.0.1:{rest_port}',
        AUTHORIZATION_TYPE 'none', READ_ONLY {str(not writes).lower()})""")
    return con.execute(sql).fetchall()


def test_duckdb_after_a_commit_reads_warm(stack, relay):
    """DuckDB reads metadata.json itself (PyIceberg takes it from the REST answer): after a
    commit its first query through Floe makes no origin request for the table either."""
    w, ctl = stack["writer"], stack["ctl"]
    t = w.load_table(f"{NS}.events")
    t.append(batch(50_000_000, 5000))
    t = w.load_table(f"{NS}.events")
    ctl.wait_warm(f"{NS}.events", t.current_snapshot().snapshot_id)
    expected = len(t.scan().to_arrow())
    mark = len(relay.lines)
    before = block_counts(stack["floe"])
    got = duckdb_iceberg(stack["rest_port"], stack["floe"].port,
                         f"SELECT count(*), count(DISTINCT id) FROM lake.{NS}.events")
    assert got == [(expected, expected)]
    after = block_counts(stack["floe"])
    assert after["metadata"][0] > before["metadata"][0], "DuckDB did not read through Floe"
    touched = table_requests(relay, mark, "events")
    assert touched == [], f"DuckDB's first query after the commit went to the origin: {touched}"


def test_merge_on_read_deletes_are_warm_too(stack, relay, minio):
    """DuckDB (writing straight to MinIO) deletes rows merge-on-read: a positional delete file.
    Every scan reads delete files whole; floe-control warms them, so the first scan through Floe
    after the delete makes no origin request either."""
    w, ctl = stack["writer"], stack["ctl"]
    t = w.create_table(f"{NS}.dels", schema=batch(0, 1).schema)
    t.append(batch(0, 1000))
    duckdb_iceberg(stack["rest_port"], minio.port, f"DELETE FROM lake.{NS}.dels WHERE id < 10",
                   key=ORIGIN_KEY, secret=ORIGIN_SECRET, writes=True)
    t = w.load_table(f"{NS}.dels")
    tasks = list(t.scan().plan_files())
    assert any(task.delete_files for task in tasks), "DuckDB wrote no delete file"
    ctl.wait_warm(f"{NS}.dels", t.current_snapshot().snapshot_id)
    mark = len(relay.lines)
    got = stack["reader"].load_table(f"{NS}.dels").scan().to_arrow()
    assert sorted(got["id"].to_pylist()) == list(range(10, 1000))
    touched = table_requests(relay, mark, "dels")
    assert touched == [], f"the first scan after the delete went to the origin: {touched}"


def test_every_node_is_warmed(stack, relay, tmp_path):
    """Two Floe nodes: floe-control reads through node 0 and warms node 1 by key, so the first
    query through node 1 makes no origin request either."""
    b = start_cached_floe(tmp_path, relay.port, tmp_path / "cache-b")
    c = Control(tmp_path, stack["rest_port"], [stack["floe"].admin_port, b.admin_port])
    try:
        t = stack["writer"].load_table(f"{NS}.events")
        c.wait_warm(f"{NS}.events", t.current_snapshot().snapshot_id)
        mark = len(relay.lines)
        via_b = iceberg(stack["rest_port"], b.port, *CLIENT)
        assert via_b.load_table(f"{NS}.events").scan().to_arrow().num_rows == len(t.scan().to_arrow())
        touched = table_requests(relay, mark, "events")
        assert touched == [], f"node 1 went to the origin: {touched}"
        assert b.admin("GET", "/stats")["metadata"]["hits"] > 0
    finally:
        c.stop()
        b.stop()


def test_the_control_plane_follows_the_fleet(stack, relay, tmp_path):
    """A fleet of two nodes and floe-control told only of the first: it learns the second from
    the fleet's gossip (each node advertises its admin URL) and warms its metadata too, so
    both hold every metadata block before any query, and a query through the second makes no
    origin request."""
    from fleet import start_fleet
    nodes = start_fleet(tmp_path, relay.port, n=2)
    c = Control(tmp_path, stack["rest_port"], nodes[0].aport)
    try:
        c.wait(lambda d: d["workers"].get("fleet", {}).get("detail") == "2 fleet members",
               "the control plane to follow the fleet")
        w = stack["writer"]
        t = w.create_table(f"{NS}.fleetwarm", schema=batch(0, 1).schema)
        t.append(batch(0, 5_000))
        c.wait_warm(f"{NS}.fleetwarm", t.current_snapshot().snapshot_id)
        # The module's own floe-control follows this table too and warms it on the stack's node
        # through the same relay: once it is done, every origin request below is node 1's.
        stack["ctl"].wait_warm(f"{NS}.fleetwarm", t.current_snapshot().snapshot_id)
        held = [nd.admin("GET", "/stats")["metadata"]["dram_entries"] for nd in nodes]
        assert held[0] > 0 and held[1] == held[0], held
        mark = len(relay.lines)
        via_1 = iceberg(stack["rest_port"], nodes[1].port, *CLIENT)
        assert via_1.load_table(f"{NS}.fleetwarm").scan().to_arrow().num_rows == 5_000
        touched = table_requests(relay, mark, "fleetwarm")
        assert touched == [], f"node 1 went to the origin: {touched}"
    finally:
        c.stop()
        for nd in nodes:
            nd.stop()


def test_an_unfollowed_table_does_go_to_the_origin(stack, relay):
    """The control case for the test above: the relay does see a cold table's reads."""
    w = stack["writer"]
    w.create_namespace_if_not_exists("cold")
    t = w.create_table("cold.events", schema=batch(0, 1).schema)
    t.append(batch(0, 1000))
    mark = len(relay.lines)
    assert stack["reader"].load_table("cold.events").scan().to_arrow().num_rows == 1000
    touched = [line for line in relay.lines[mark:] if "/wh/cold/events" in line[1]]
    assert any(".avro" in p for _, p in touched) and any(".parquet" in p for _, p in touched)


def test_over_budget_warming_stops_and_says_so(stack):
    tmp = stack["tmp"] / "budget"
    tmp.mkdir()
    c = Control(tmp, stack["rest_port"], stack["floe"].admin_port,
                extra="warm: {table_budget_bytes: 1}")
    try:
        doc = c.wait(lambda d: d["tables"].get(f"{NS}.events", {}).get("warm", {}).get("phase")
                     == "over-budget", "over-budget")
        w = doc["tables"][f"{NS}.events"]["warm"]
        assert "budget" in w["note"] and w["done"] < w["total"], w
    finally:
        c.stop()


def test_oauth2_client_credentials(stack, tmp_path):
    """floe-control authenticates with OAuth2 client credentials at the catalog's token endpoint
    (the REST fixture serves v1/oauth/tokens) and follows tables as with no auth. It talks to the
    catalog through the counting relay, so the token request is seen."""
    rr = stack["rest_relay"]
    mark = len(rr.lines)
    c = Control(tmp_path, rr.port, stack["floe"].admin_port,
                catalog_extra=", oauth2: {client_id: floe-control, client_secret_env: FLOE_T_SECRET}",
                env={"FLOE_T_SECRET": "s3cret"})
    try:
        t = stack["writer"].load_table(f"{NS}.events")
        c.wait_warm(f"{NS}.events", t.current_snapshot().snapshot_id)
    finally:
        c.stop()
    assert ("POST", "/v1/oauth/tokens") in rr.lines[mark:], rr.lines[mark:mark + 5]


def test_a_commit_starts_the_subscribed_worker_within_the_poll_interval_and_a_second(stack, tmp_path, store):
    """The watcher emits org.apache.iceberg.snapshot.committed for each commit it sees; the
    scheduler runs the deployment subscribed to that table with the snapshot in its event."""
    out = tmp_path / "out.jsonl"
    worker = pathlib.Path(__file__).parent / "sched_worker.py"
    table = f"committed_{store.split(':')[0]}"
    sched = {"store": store, "deployments": [{
        "name": "on-commit", "code": {"command": sys.executable, "args": [str(worker)]},
        "env": {"OUT": str(out)},
        "triggers": [{"event": {"type": "org.apache.iceberg.snapshot.committed",
                                "subject": f"{NS}.{table}"}}]}]}
    c = Control(tmp_path, stack["rest_port"], stack["floe"].admin_port,
                extra="scheduler: " + json.dumps(sched))
    try:
        t = stack["writer"].create_table(f"{NS}.{table}", schema=batch(0, 1).schema)
        t.append(batch(0, 100))
        committed = time.time()
        snap = t.current_snapshot().snapshot_id
        deadline = time.monotonic() + 30
        while not any(x["kind"] == "start" for x in read_lines(out)) and time.monotonic() < deadline:
            time.sleep(0.02)  # polling the worker's output, not synchronising on time
        starts = [x for x in read_lines(out) if x["kind"] == "start"]
    finally:
        c.stop()
    assert len(starts) == 1, starts
    e = starts[0]["event"]
    assert e["type"] == "org.apache.iceberg.snapshot.committed" and e["subject"] == f"{NS}.{table}"
    assert e["data"]["snapshot_id"] == snap and e["data"]["operation"] == "append"
    assert e["data"]["summary"]["added-records"] == "100"
    poll = 0.2  # CONTROL_YAML's poll_interval_ms
    assert starts[0]["t"] - committed <= poll + 1.0, f"worker started {starts[0]['t'] - committed:.2f} s after the commit"


def read_lines(p):
    return [json.loads(x) for x in complete_lines(p)] if p.exists() else []


def test_status_cli_prints_tables_workers_and_heat(stack):
    ctl = stack["ctl"]
    doc = ctl.wait(lambda d: any(h["table"] == f"{NS}.events" for h in d["heat"]), "heat")
    assert {"watcher", "warmer", "prefetcher", "heat", "status"} <= set(doc["workers"])
    # The control plane keeps up: the proxy's access queue never overflowed.
    assert stack["floe"].admin("GET", "/stats")["accesses_dropped"] == 0
    out = subprocess.run([str(CONTROL_BIN), "status", f"127.0.0.1:{ctl.port}"], check=True,
                         capture_output=True, text=True).stdout
    assert f"{NS}.events" in out, out
    assert "warm [####################]" in out, out
    assert "HEAT (bytes read, decayed)\n" in out, out
    heat = [line.split() for line in out.split("HEAT (bytes read, decayed)\n", 1)[1].splitlines()]
    # Each row: bytes, table, [partition], column; the events table's columns are id, p and v.
    assert any(r[1] == f"{NS}.events" and r[-1] in ("id", "p", "v") for r in heat if len(r) >= 3), out


def test_restart_keeps_the_heat_ledger(stack):
    ctl = stack["ctl"]
    doc = ctl.wait(lambda d: any(h["table"] == f"{NS}.events" for h in d["heat"]), "heat")
    before = {(h["table"], h["partition"], h["column"]) for h in doc["heat"]}
    ctl.stop()
    assert (stack["tmp"] / "heat.json").exists()
    ctl.start()
    after = {(h["table"], h["partition"], h["column"]) for h in ctl.status()["heat"]}
    assert before and before <= after, (before, after)


def test_catalog_classification_outranks_path_rules(stack):
    """A key the path rules call mutable data (unknown name) is pinned as immutable metadata by
    POST /classify, as floe-control does for table files: its blocks land in the metadata store."""
    import boto3
    floe = stack["floe"]
    direct = boto3.client("s3", endpoint_url=stack["writer"].properties["s3.endpoint"],
                          aws_access_key_id=ORIGIN_KEY, aws_secret_access_key=ORIGIN_SECRET,
                          region_name="us-east-1")
    body = os.urandom(300_000)
    direct.put_object(Bucket=BUCKET, Key="odd/table-file.bin", Body=body)
    req = urllib.request.Request(
        f"http://127.0.0.1:{floe.admin_port}/classify?bucket={BUCKET}&store=metadata",
        data=b"odd/table-file.bin\n", method="POST",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req) as r:
        assert json.loads(r.read())["keys"] == 1
    before = floe.admin("GET", "/stats")
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{floe.port}",
                      aws_access_key_id=CLIENT[0], aws_secret_access_key=CLIENT[1],
                      region_name="us-east-1")
    # Metadata fills whole blocks, and the response ends with its own 100 bytes while the rest of
    # the block may still be arriving: a second read hits the block or waits for that fill.
    for _ in range(2):
        assert s3.get_object(Bucket=BUCKET, Key="odd/table-file.bin", Range="bytes=0-99")["Body"].read() == body[:100]
    after = floe.admin("GET", "/stats")
    assert after["metadata"]["inserted"] == before["metadata"]["inserted"] + 1
    assert after["data"]["inserted"] == before["data"]["inserted"]


def test_a_commit_publishes_column_chunks_and_a_read_of_a_chunks_start_fetches_the_chunk(stack, relay):
    """floe-control sends each live data file's column chunks (from the footer it decoded) to
    the nodes; a cold read of a chunk's first bytes then fetches the whole chunk in that one
    origin GET, and the engine's read of the rest of the chunk is a hit."""
    import boto3
    import pyarrow.parquet as pq
    w, ctl, floe = stack["writer"], stack["ctl"], stack["floe"]
    n = 200_000
    rows = pa.table({"id": pa.array(range(n), pa.int64()),
                     "v": pa.array([os.urandom(12).hex() for _ in range(n)])})
    t = w.create_table(f"{NS}.chunked", schema=rows.schema)
    t.append(rows)
    ctl.wait_warm(f"{NS}.chunked", t.current_snapshot().snapshot_id)
    (task,) = list(t.scan().plan_files())
    key = task.file.file_path.split(f"s3://{BUCKET}/", 1)[1]
    direct = boto3.client("s3", endpoint_url=w.properties["s3.endpoint"], aws_access_key_id=ORIGIN_KEY,
                          aws_secret_access_key=ORIGIN_SECRET, region_name="us-east-1")
    body = direct.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    md = pq.ParquetFile(pa.BufferReader(body)).metadata
    expect = []
    for rg in range(md.num_row_groups):
        for c in range(md.num_columns):
            col = md.row_group(rg).column(c)
            start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
            expect.append((start, col.total_compressed_size))
    held = floe.admin("GET", f"/chunks?bucket={BUCKET}&key={key}")
    assert held["s"] == len(body)
    assert sorted(zip(held["c"][::2], held["c"][1::2])) == sorted(expect)
    # The longest chunk that ends before the footer's suffix (warmed into the metadata store).
    start, length = max((c for c in expect if c[0] + c[1] < len(body) - (1 << 20)), key=lambda c: c[1])
    assert length > 256 << 10, expect
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{floe.port}", aws_access_key_id=CLIENT[0],
                      aws_secret_access_key=CLIENT[1], region_name="us-east-1")
    mark, before = len(relay.lines), floe.admin("GET", "/stats")["data"]["origin_bytes"]
    got = s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start}-{start + 99}")["Body"].read()
    assert got == body[start:start + 100]
    # The rest of the chunk: from the fill still running, or cached (no GET either way).
    rest = s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start + 100}-{start + length - 1}")
    assert rest["Body"].read() == body[start + 100:start + length]
    again = s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start + length - 100}-{start + length - 1}")
    assert again["ResponseMetadata"]["HTTPHeaders"]["x-floe-cache"] == "hit"
    gets = [line for line in relay.lines[mark:] if line[0] == "GET" and key in line[1]]
    assert len(gets) == 1, gets
    assert floe.admin("GET", "/stats")["data"]["origin_bytes"] - before == length


def catalog_get(floe, path):
    req = urllib.request.Request(f"http://127.0.0.1:{floe.port}/catalog{path}")
    with urllib.request.urlopen(req) as r:
        return r.headers["x-floe-cache"], json.loads(r.read())


def test_catalog_route_caches_reads_and_follows_commits(stack):
    floe, rr, ctl = stack["floe"], stack["rest_relay"], stack["ctl"]
    path = f"/v1/namespaces/{NS}/tables/events"
    first = catalog_get(floe, path)
    asked = sum(1 for m, p in rr.lines if m == "GET" and p == path)
    second = catalog_get(floe, path)
    assert second[0] == "hit" and second[1] == first[1]
    assert sum(1 for m, p in rr.lines if m == "GET" and p == path) == asked, "second loadTable reached the catalog"
    # A commit through the route: the next loadTable shows the new snapshot.
    routed = iceberg(floe.port, floe.port, *CLIENT, path="/catalog")
    t = routed.load_table(f"{NS}.events")
    t.append(batch(10_000_000, 100))
    new_id = stack["writer"].load_table(f"{NS}.events").current_snapshot().snapshot_id
    cache, doc = catalog_get(floe, path)
    assert cache == "miss" and doc["metadata"]["current-snapshot-id"] == new_id
    assert routed.load_table(f"{NS}.events").current_snapshot().snapshot_id == new_id
    # A commit made elsewhere: floe-control sees it and purges the route's answers.
    stack["writer"].load_table(f"{NS}.events").append(batch(10_000_100, 100))
    newer = stack["writer"].load_table(f"{NS}.events").current_snapshot().snapshot_id
    ctl.wait(lambda d: d["tables"][f"{NS}.events"]["snapshot_id"] == newer, "the commit")
    assert catalog_get(floe, path)[1]["metadata"]["current-snapshot-id"] == newer


def big_batch(start, n, parts=4):
    """Rows with incompressible 32-character values: a partition's compacted file spans several
    2 MiB blocks, so its footer block is a small part of it."""
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "p": pa.array([i % parts for i in range(start, start + n)], pa.int32()),
        "v": pa.array([os.urandom(16).hex() for _ in range(n)]),
    })


def compact(table):
    """A rewrite_data_files done with PyIceberg: every live file is read and rewritten as one
    file per partition, committed as a `replace` snapshot (same rows, new files)."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files
    from pyiceberg.table.snapshots import Operation, Summary
    old = [task.file for task in table.scan().plan_files()]
    df = table.scan().to_arrow()
    with table.transaction() as tx:
        with tx.update_snapshot().overwrite() as snap:
            # PyIceberg 0.12 writes overwrite/append/delete only; its summary arithmetic is the
            # same for a replace, so the summary is computed as an overwrite and relabelled.
            overwrite_summary = snap._summary
            snap._summary = lambda props={}: Summary(
                Operation.REPLACE, **overwrite_summary(props)._additional_properties)
            for f in old:
                snap.delete_data_file(f)
            for f in _dataframe_to_data_files(table_metadata=tx.table_metadata,
                                              write_uuid=snap.commit_uuid, df=df, io=table.io):
                snap.append_data_file(f)
    return len(old)


# The 3-query working set: (partition, columns).
WORKING_SET = [(0, ("v",)), (1, ("id",)), (2, ("id", "v"))]


def wave(reader, name):
    from pyiceberg.expressions import EqualTo
    t = reader.load_table(name)
    return [t.scan(row_filter=EqualTo("p", p), selected_fields=cols).to_arrow().num_rows
            for p, cols in WORKING_SET]


def block_counts(floe):
    s = floe.admin("GET", "/stats")
    return {k: (s[k]["hits"], s[k]["misses"], s[k]["origin_bytes"]) for k in ("data", "metadata")}


def hit_ratio(before, after, store):
    """(hit ratio, blocks hit, blocks fetched, origin bytes) of one store over a wave. A miss
    fetches a run of adjacent blocks at once, so blocks fetched come from the origin bytes."""
    hits = after[store][0] - before[store][0]
    origin_bytes = after[store][2] - before[store][2]
    fetched = -(-origin_bytes // (2 << 20))
    return round(hits / max(hits + fetched, 1), 3), hits, fetched, origin_bytes


def compaction_run(stack, relay, ctl, table):
    name = f"{NS}.{table}"
    w = stack["writer"]
    t = w.create_table(name, schema=big_batch(0, 1).schema)
    with t.update_spec() as u:
        u.add_identity("p")
    for i in range(3):
        t.append(big_batch(i * 800_000, 800_000))
    t = w.load_table(name)
    ctl.wait_warm(name, t.current_snapshot().snapshot_id)
    for _ in range(2):  # warm the working set; the ledger learns what is hot
        assert wave(stack["reader"], name) == [600_000] * 3
    ctl.wait(lambda d: sum(h["table"] == name for h in d["heat"]) >= 3, f"heat of {name}")
    replaced = compact(t)
    t = w.load_table(name)
    assert t.current_snapshot().summary.operation.value == "replace"
    st = ctl.wait_warm(name, t.current_snapshot().snapshot_id)
    before = block_counts(stack["floe"])
    relay.delay = 0.03  # the wave meets S3's ~30 ms per origin request
    try:
        t0 = time.monotonic()
        assert wave(stack["reader"], name) == [600_000] * 3
        wave_s = round(time.monotonic() - t0, 3)
    finally:
        relay.delay = 0
    after = block_counts(stack["floe"])
    # The replaced files leave the cache after the grace period (1 s here).
    ctl.wait(lambda d: d["tables"][name]["purged"] == replaced, f"{name}'s replaced files purged")
    return dict(replaced=replaced, new=st["data_files"], prefetched=st["warm"]["prefetched_bytes"],
                wave_s=wave_s,
                data=hit_ratio(before, after, "data"), metadata=hit_ratio(before, after, "metadata"))


def test_compaction_prefetch_keeps_the_working_set_warm(stack, relay):
    """Prefetch on: the first wave after a `replace` commit hits >= 90% of its data blocks;
    prefetch off: <= 5%. Numbers go to load/PERFORMANCE.md (see load/compaction.sh)."""
    on = compaction_run(stack, relay, stack["ctl"], "compact_on")
    stack["ctl"].stop()
    off_tmp = stack["tmp"] / "prefetch-off"
    off_tmp.mkdir()
    off_ctl = Control(off_tmp, stack["rest_port"], stack["floe"].admin_port, prefetch=False)
    try:
        off = compaction_run(stack, relay, off_ctl, "compact_off")
    finally:
        off_ctl.stop()
        stack["ctl"].start()
    report = {"prefetch_on": on, "prefetch_off": off}
    print("COMPACTION " + json.dumps(report))
    out = os.environ.get("FLOE_COMPACTION_REPORT")
    if out:
        pathlib.Path(out).write_text(json.dumps(report, indent=1))
    assert on["prefetched"] > 0 and on["data"][0] >= 0.90, report
    assert off["prefetched"] == 0 and off["data"][0] <= 0.05, report


def test_https_catalog_and_nodes_with_a_private_ca(stack, relay, tmp_path):
    """floe-control follows a catalog and warms nodes over https, trusting a private CA given by
    tls.ca_file; without it the same catalog is refused (the certificate is not trusted)."""
    from tls_relay import TlsRelay, make_ca
    # Commit first, with only the stack's floe-control polling: the fixture's SQLite store can
    # refuse a commit while several pollers hold read locks. A new floe-control warms the
    # current snapshot of every table on its first poll.
    t = stack["writer"].create_table(f"{NS}.tls_events", schema=batch(0, 1).schema)
    t.append(batch(0, 50))
    ca, cert, key = make_ca(tmp_path)
    front = TlsRelay(stack["rest_port"], cert, key)
    (tmp_path / "floe").mkdir()
    floe = start_cached_floe(tmp_path / "floe", relay.port, tmp_path / "cache",
                             admin_tls=(ca, cert, key))
    assert "data" in floe.admin("GET", "/stats")  # the admin API answers over TLS
    (tmp_path / "ctl").mkdir()
    ctl = Control(tmp_path / "ctl", front.port, floe.admin_port, scheme="https",
                  extra=f"tls: {{ca_file: {ca}}}")
    try:
        snap = t.current_snapshot().snapshot_id
        warm = ctl.wait_warm(f"{NS}.tls_events", snap)
        assert warm["warm"]["bytes"] > 0, warm
        assert front.handshakes > 0
        assert floe.admin("GET", "/stats")["metadata"]["inserted"] > 0
    finally:
        ctl.stop()
        floe.stop()
    (tmp_path / "untrusting").mkdir()
    bare = Control(tmp_path / "untrusting", front.port, stack["floe"].admin_port, scheme="https")
    try:
        doc = bare.wait(lambda d: d["workers"]["watcher"].get("last_error"), "a TLS refusal")
        assert "certificate" in doc["workers"]["watcher"]["last_error"][1].lower(), doc["workers"]
        assert f"{NS}.tls_events" not in doc["tables"]
    finally:
        bare.stop()
        front.close()


def test_catalog_outage_does_not_disturb_reads(stack, relay):
    ctl, floe = stack["ctl"], stack["floe"]
    t = stack["writer"].load_table(f"{NS}.events")
    files = [task.file.file_path for task in t.scan().plan_files()]
    stack["rest"].stop()
    stopped = time.time()
    doc = ctl.wait(lambda d: (d["workers"]["watcher"]["last_error"] or [0])[0] >= int(stopped),
                   "the watcher to report the catalog outage")
    assert "catalog" in doc["workers"]["watcher"]["last_error"][1]
    import boto3
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{floe.port}",
                      aws_access_key_id=CLIENT[0], aws_secret_access_key=CLIENT[1],
                      region_name="us-east-1")
    direct = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{relay.upstream[1]}",
                          aws_access_key_id=ORIGIN_KEY, aws_secret_access_key=ORIGIN_SECRET,
                          region_name="us-east-1")
    for f in files:
        key = f.split(f"s3://{BUCKET}/", 1)[1]
        got = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert got == direct.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    # The catalog route answers an Iceberg REST error, not an S3 one.
    import urllib.error
    with pytest.raises(urllib.error.HTTPError) as e:
        catalog_get(floe, f"/v1/namespaces/{NS}/tables/never-cached")
    assert e.value.code == 503
    assert json.loads(e.value.read())["error"]["type"] == "ServiceUnavailableException"
    stack["rest"] = start_rest(stack["tmp"], relay.upstream[1], stack["rest_port"])
