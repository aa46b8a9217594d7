"""Engines at their default settings through the block cache, each compared with the same
engine reading MinIO directly: ClickHouse (chDB) over Parquet with s3() and over an Iceberg
table with icebergS3(), and Trino's Iceberg connector (native S3, REST catalog). Every warm
pass must make no origin request for the table's files (counted at the relay in front of
MinIO). ClickHouse sends every ranged GET with If-Match: a cache that passed conditional
reads on served it nothing."""
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import BUCKET, CLIENT, ORIGIN_KEY, ORIGIN_SECRET, free_port, start_cached_floe
from relay import Relay
from test_control import iceberg, start_rest

NS = "engines"


@pytest.fixture(scope="module")
def lake(minio, tmp_path_factory):
    """A cached Floe (behind a counting relay), the REST catalog, and an Iceberg table
    written straight to MinIO (so nothing is warm before the engines read)."""
    tmp = tmp_path_factory.mktemp("engines")
    relay = Relay(minio.port)
    floe = start_cached_floe(tmp, relay.port, tmp / "cache")
    rest_port = free_port()
    rest = start_rest(tmp, minio.port, rest_port)
    writer = iceberg(rest_port, minio.port, ORIGIN_KEY, ORIGIN_SECRET)
    writer.create_namespace_if_not_exists(NS)
    rows = 200_000
    data = pa.table({
        "id": pa.array(range(rows), pa.int64()),
        "region": pa.array([f"r{i % 7}" for i in range(rows)]),
        "amount": pa.array([(i * 37) % 1000 / 10 for i in range(rows)], pa.float64()),
    })
    tables = {}
    for name in ("sales", "sales_trino"):  # one per engine: each one's cold pass is cold
        if writer.table_exists(f"{NS}.{name}"):
            writer.drop_table(f"{NS}.{name}")
        writer.create_table(f"{NS}.{name}", schema=data.schema).append(data)
        tables[name] = writer.load_table(f"{NS}.{name}")
    yield dict(tmp=tmp, relay=relay, floe=floe, rest=rest, rest_port=rest_port,
               table=tables["sales"], minio_port=minio.port, data=data)
    rest.stop()
    floe.stop()
    relay.down()


def origin_lines(relay, mark, needle):
    """Origin request lines since `mark` whose target contains `needle`."""
    return [line for line in relay.lines[mark:] if needle in line[1]]


def hits(floe):
    """Blocks served from the cache so far, both stores."""
    stats = floe.admin("GET", "/stats")
    return stats["data"]["hits"] + stats["metadata"]["hits"]


CHDB = """
import json, sys
import chdb
print(json.dumps(chdb.query(sys.argv[1], "JSONCompact").data()))
"""


def clickhouse(sql):
    """One query in a fresh chDB process (its in-process caches start empty, as a new
    ClickHouse query on another server would)."""
    out = subprocess.run([sys.executable, "-c", CHDB, sql], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(json.loads(out.stdout))["data"]


def test_clickhouse_s3_parquet_reads_warm_from_the_cache(lake, direct):
    key = "engines/flat.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(lake["data"], sink, row_group_size=50_000)
    direct.put_object(Bucket=BUCKET, Key=key, Body=sink.getvalue().to_pybytes())
    sql = ("SELECT region, count(), round(sum(amount), 2) FROM s3('http://127.0.0.1:{port}/"
           f"{BUCKET}/{key}', '{{k}}', '{{s}}', 'Parquet') GROUP BY region ORDER BY region")
    want = clickhouse(sql.format(port=lake["minio_port"], k=ORIGIN_KEY, s=ORIGIN_SECRET))
    through = sql.format(port=lake["floe"].port, k=CLIENT[0], s=CLIENT[1])
    relay = lake["relay"]
    mark = len(relay.lines)
    assert clickhouse(through) == want
    cold = origin_lines(relay, mark, key)
    assert cold, "the cold pass did not read through Floe"
    mark = len(relay.lines)
    before = hits(lake["floe"])
    assert clickhouse(through) == want
    assert origin_lines(relay, mark, key) == [], "ClickHouse's warm pass reached the origin"
    assert hits(lake["floe"]) > before, "ClickHouse's warm pass did not read through Floe"


def test_clickhouse_iceberg_reads_warm_from_the_cache(lake):
    location = lake["table"].metadata.location  # s3://floe-test/wh/engines/sales
    path = location.removeprefix("s3://")
    sql = ("SELECT region, count(), round(sum(amount), 2) FROM icebergS3('http://127.0.0.1:{port}/"
           f"{path}', '{{k}}', '{{s}}') GROUP BY region ORDER BY region")
    want = clickhouse(sql.format(port=lake["minio_port"], k=ORIGIN_KEY, s=ORIGIN_SECRET))
    assert len(want) == 7
    through = sql.format(port=lake["floe"].port, k=CLIENT[0], s=CLIENT[1])
    relay = lake["relay"]
    mark = len(relay.lines)
    assert clickhouse(through) == want
    assert origin_lines(relay, mark, "/wh/engines/sales"), "the cold pass missed Floe"
    # The warm pass may list the metadata folder (a listing is not cached); no file is read.
    mark = len(relay.lines)
    assert clickhouse(through) == want
    reads = [line for line in origin_lines(relay, mark, "/wh/engines/sales")
             if line[0] in ("GET", "HEAD") and "list-type" not in line[1] and "prefix=" not in line[1]]
    assert reads == [], f"ClickHouse's warm Iceberg pass read files at the origin: {reads}"


TRINO_JAVA = os.environ.get("FLOE_TRINO_JAVA_HOME", "/usr/lib/jvm/temurin-25-jdk-amd64")


def trino_home():
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([os.path.join(here, "trino", "fetch.sh")], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def iceberg_catalog(rest_port, s3_port, key, secret):
    return "\n".join([
        "connector.name=iceberg", "iceberg.catalog.type=rest",
        f"iceberg.rest-catalog.uri=http://127.0.0.1:{rest_port}", "fs.native-s3.enabled=true",
        f"s3.endpoint=http://127.0.0.1:{s3_port}", "s3.path-style-access=true",
        "s3.region=us-east-1", f"s3.aws-access-key={key}", f"s3.aws-secret-key={secret}", ""])


def trino_server_files(etc, data_dir, port, heap, memory):
    """A single-node Trino's etc/ files (coordinator as worker) in `etc`: `heap` (-Xmx),
    `memory` (query.max-memory, per node)."""
    (etc / "node.properties").write_text(
        f"node.environment=floe_test\nnode.id=floe-test\nnode.data-dir={data_dir}\n")
    (etc / "jvm.config").write_text(f"-server\n-Xmx{heap}\n-XX:+UseG1GC\n-XX:+ExitOnOutOfMemoryError\n"
                                    "-Djdk.attach.allowAttachSelf=true\n")
    (etc / "config.properties").write_text(
        f"coordinator=true\nnode-scheduler.include-coordinator=true\nhttp-server.http.port={port}\n"
        f"discovery.uri=http://127.0.0.1:{port}\nquery.max-memory={memory[0]}\n"
        f"query.max-memory-per-node={memory[1]}\n")
    (etc / "log.properties").write_text("io.trino=WARN\n")


def launch_trino(etc, log, port):
    """Trino (Temurin 25) on the files in `etc`, once it runs queries; `.url` is its address."""
    from conftest import Proc
    env = dict(os.environ, JAVA_HOME=TRINO_JAVA,
               PATH=f"{TRINO_JAVA}/bin:{os.environ['PATH']}")
    p = Proc([f"{trino_home()}/bin/launcher", "run", f"--etc-dir={etc}"], env, log, port, "trino")
    p.url = f"http://127.0.0.1:{port}"
    trino_query(p.url, "SELECT 1", wait_started=True)
    return p


@pytest.fixture(scope="module")
def trino(lake):
    """A single-node Trino 476 (coordinator as worker, 2 GB heap) with Iceberg catalogs on
    the same REST catalog: `floe` and `floe_again` read S3 through Floe, `direct` MinIO."""
    etc = lake["tmp"] / "trino-etc"
    (etc / "catalog").mkdir(parents=True)
    port = free_port()
    trino_server_files(etc, lake["tmp"] / "trino-data", port, heap="2G",
                       memory=("1GB", "512MB"))
    (etc / "catalog" / "floe.properties").write_text(
        iceberg_catalog(lake["rest_port"], lake["floe"].port, *CLIENT))
    # A second catalog through Floe: its own connector, so none of the first one's in-memory
    # caches (Trino keeps small files it read in memory): a repeat through it is what another
    # Trino cluster's first query would send.
    (etc / "catalog" / "floe_again.properties").write_text(
        iceberg_catalog(lake["rest_port"], lake["floe"].port, *CLIENT))
    (etc / "catalog" / "direct.properties").write_text(
        iceberg_catalog(lake["rest_port"], lake["minio_port"], ORIGIN_KEY, ORIGIN_SECRET))
    p = launch_trino(etc, lake["tmp"] / "trino.log", port)
    yield p
    p.stop()


def trino_query(url, sql, wait_started=False):
    """Rows of `sql` over Trino's client protocol (POST, then follow nextUri)."""
    import time
    import urllib.error
    import urllib.request
    deadline = time.monotonic() + 180
    while True:
        req = urllib.request.Request(f"{url}/v1/statement", data=sql.encode(), method="POST",
                                     headers={"X-Trino-User": "floe"})
        try:
            doc = json.load(urllib.request.urlopen(req, timeout=30))
        except (urllib.error.URLError, ConnectionError):
            if not wait_started or time.monotonic() > deadline:
                raise
            time.sleep(0.5)  # the coordinator answers before it accepts queries
            continue
        rows = []
        while True:
            rows += doc.get("data", [])
            if "error" in doc:
                break
            if "nextUri" not in doc:
                return rows
            doc = json.load(urllib.request.urlopen(doc["nextUri"], timeout=60))
        # Starting: SERVER_STARTING_UP, then "No nodes available" until the worker announces
        # itself (the query did not run: asking again is safe).
        error = doc["error"]
        starting = (error.get("errorName") == "SERVER_STARTING_UP"
                    or "No nodes available" in error.get("message", ""))
        if not starting or time.monotonic() > deadline:
            raise AssertionError(f"trino: {doc['error'].get('message')}")
        time.sleep(0.5)  # the coordinator is still starting up


def test_trino_iceberg_through_floe_equals_direct_and_a_repeat_reads_no_data_file(lake, trino):
    sql = ("SELECT region, count(*), round(sum(amount), 2) FROM {c}.engines.sales_trino "
           "GROUP BY region ORDER BY region")
    want = trino_query(trino.url, sql.format(c="direct"))
    assert len(want) == 7
    relay = lake["relay"]
    mark = len(relay.lines)
    assert trino_query(trino.url, sql.format(c="floe")) == want
    assert origin_lines(relay, mark, "/wh/engines/sales_trino/data/"), "the cold pass missed Floe"
    mark, before = len(relay.lines), hits(lake["floe"])
    assert trino_query(trino.url, sql.format(c="floe_again")) == want
    data_reads = origin_lines(relay, mark, "/wh/engines/sales_trino/data/")
    assert data_reads == [], f"Trino's repeated query read data files at the origin: {data_reads}"
    assert hits(lake["floe"]) > before, "Trino's repeated query did not read through Floe"
