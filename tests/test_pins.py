"""Pinned tables (issue 27), end to end: MinIO behind a counting relay, the Iceberg REST fixture,
two floe-proxy nodes in a fleet with a small data store (16 MiB DRAM, 64 MiB disk) and a kept
store of 12 MiB each, and floe-control following the catalog. A pinned table must stay in the
fleet through a scan that evicts everything else (no origin request re-reading it), move to the
new files of a compaction, come back to a restarted node within a poll (with its column-chunk
hints), and free its bytes when unpinned; a pin past a node's bound is refused whole."""
import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import BUCKET, CLIENT, ORIGIN_KEY, ORIGIN_SECRET, free_port, s3_client
from fleet import start_fleet, wait_until
from relay import Relay
from test_control import CONTROL_BIN, NS, Control, big_batch, compact, iceberg, start_rest

PINNED = 12 << 20
SCAN_OBJECTS = 48  # of 2 MiB: past each node's 16 MiB DRAM + 64 MiB disk


@pytest.fixture
def stack(minio, tmp_path):
    relay = Relay(minio.port)
    rest_port = free_port()
    rest = start_rest(tmp_path, minio.port, rest_port)
    nodes = start_fleet(tmp_path, relay.port, n=2, data_dram=16 << 20, data_disk=64 << 20,
                        extra_cache=f"  pinned_bytes: {PINNED}")
    ctl = Control(tmp_path, rest_port, [nd.aport for nd in nodes],
                  extra=f'pins: {{path: "{tmp_path / "pins.json"}"}}')
    writer = iceberg(rest_port, minio.port, ORIGIN_KEY, ORIGIN_SECRET)
    writer.create_namespace_if_not_exists(NS)
    try:
        yield dict(tmp=tmp_path, relay=relay, rest_port=rest_port, nodes=nodes, ctl=ctl,
                   writer=writer, minio=minio)
    finally:
        ctl.stop()
        for nd in nodes:
            nd.stop()
        rest.stop()
        relay.down()


def cli(ctl, *args):
    return subprocess.run([str(CONTROL_BIN), *args, f"127.0.0.1:{ctl.port}"],
                          capture_output=True, text=True, timeout=60)


def pins(ctl):
    return {p["table"]: p for p in ctl.status()["pins"]}


def kept(nd):
    return nd.admin("GET", f"/kept?bucket={BUCKET}")


def table_files(table):
    return {f.file_path.split(f"/{BUCKET}/", 1)[1]: f.file_size_in_bytes
            for f in (t.file for t in table.scan().plan_files())}


def data_gets(relay, mark, table):
    """Origin requests since `mark` for the table's data files."""
    return [line for line in relay.lines[mark:] if f"/wh/{NS}/{table}/data/" in line[1]]


def make_table(stack, name, appends, rows):
    t = stack["writer"].create_table(f"{NS}.{name}", schema=big_batch(0, 1).schema)
    for i in range(appends):
        t.append(big_batch(i * rows, rows))
    t = t.refresh()
    stack["ctl"].wait_warm(f"{NS}.{name}", t.metadata.current_snapshot_id)
    return t


def wait_kept(stack, name, files):
    """Until the pin is `kept` with `files` files and every node keeps exactly those."""
    def ok():
        p = pins(stack["ctl"]).get(f"{NS}.{name}")
        if not p or p["phase"] != "kept" or p["files"] != files:
            return False
        docs = [kept(nd) for nd in stack["nodes"]]
        return all(d["keys"] == files and d["held_bytes"] >= d["pinned_bytes"] for d in docs) and docs
    try:
        return wait_until(f"{name} kept with {files} files", ok, timeout=60)
    except AssertionError as e:  # say where it stands
        docs = [kept(nd) for nd in stack["nodes"]]
        raise AssertionError(f"{e}: pin {pins(stack['ctl']).get(f'{NS}.{name}')}, nodes {docs}") from None


def scan_everything_else(stack):
    """Reads SCAN_OBJECTS other 2 MiB objects twice through every node (the second touch is
    admitted): each node's data store and its disk tier turn over."""
    direct = s3_client(stack["minio"].port, ORIGIN_KEY, ORIGIN_SECRET)
    for i in range(SCAN_OBJECTS):
        direct.put_object(Bucket=BUCKET, Key=f"scan/{i:03}.bin", Body=os.urandom(2 << 20))
    for nd in stack["nodes"]:
        s3 = s3_client(nd.port, *CLIENT)
        for _ in range(2):
            for i in range(SCAN_OBJECTS):
                assert len(s3.get_object(Bucket=BUCKET, Key=f"scan/{i:03}.bin")["Body"].read()) == 2 << 20
    for nd in stack["nodes"]:
        assert nd.admin("GET", "/stats")["data"]["evictions"] > 0, f"{nd.name}: the scan evicted nothing"


def read_through_every_node(stack, name, rows):
    for nd in stack["nodes"]:
        reader = iceberg(stack["rest_port"], nd.port, *CLIENT)
        assert reader.load_table(f"{NS}.{name}").scan().to_arrow().num_rows == rows


def test_a_pinned_table_survives_a_scan_follows_a_compaction_and_unpins(stack):
    ctl, relay, nodes = stack["ctl"], stack["relay"], stack["nodes"]
    t = make_table(stack, "hot", appends=2, rows=150_000)
    files = table_files(t)
    assert len(files) == 2 and sum(files.values()) > 4 << 20, files
    r = cli(ctl, "pin", f"{NS}.hot")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["created"] is True
    docs = wait_kept(stack, "hot", 2)
    # Every block is kept on its owner alone: the nodes' owned bytes add up to the files', each
    # node holds what it owns, and no node holds copies of another's (held bytes are owned
    # bytes plus entry overhead). Which node owns what is rendezvous hashing of the files'
    # names: four 2 MiB blocks all land on one node one run in eight, so no node is asserted
    # to own some (a full suite run failed that way).
    assert sum(d["owned_bytes"] for d in docs) == sum(files.values())
    assert all(d["held_bytes"] >= d["owned_bytes"] for d in docs), docs
    assert sum(d["held_bytes"] for d in docs) < 1.1 * sum(files.values()), docs

    scan_everything_else(stack)
    mark = len(relay.lines)
    read_through_every_node(stack, "hot", 300_000)
    assert data_gets(relay, mark, "hot") == [], "a pinned file went back to the origin"

    # A compaction: the pin moves to the new files, the old ones leave the kept stores.
    compact(t)
    t = t.refresh()
    assert t.current_snapshot().summary.operation.value == "replace"
    ctl.wait_warm(f"{NS}.hot", t.metadata.current_snapshot_id)
    new = table_files(t)
    assert not set(new) & set(files)
    docs = wait_kept(stack, "hot", len(new))
    assert sum(d["owned_bytes"] for d in docs) == sum(new.values())
    scan_everything_else(stack)
    mark = len(relay.lines)
    read_through_every_node(stack, "hot", 300_000)
    assert data_gets(relay, mark, "hot") == [], "the compacted files went back to the origin"

    # Unpinned: nothing kept, the kept stores empty.
    r = cli(ctl, "unpin", f"{NS}.hot")
    assert r.returncode == 0, r.stderr
    wait_until("the kept stores emptied", lambda: all(
        kept(nd)["keys"] == 0 and kept(nd)["held_bytes"] == 0 for nd in nodes), timeout=30)
    assert pins(ctl) == {}
    assert json.loads((stack["tmp"] / "pins.json").read_text()) == []


def test_a_pin_past_a_nodes_bound_is_refused_whole(stack):
    ctl, nodes = stack["ctl"], stack["nodes"]
    make_table(stack, "small", appends=1, rows=60_000)
    big = make_table(stack, "big", appends=6, rows=250_000)  # ~33 MiB: more than a node's 12 MiB
    assert sum(table_files(big).values()) > 2 * PINNED
    assert cli(ctl, "pin", f"{NS}.small").returncode == 0
    wait_kept(stack, "small", 1)
    before = [kept(nd) for nd in nodes]
    url = f"http://127.0.0.1:{ctl.port}/pins?table={NS}.big"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=30)
    assert refused.value.code == 409
    why = json.loads(refused.value.read())["error"]
    assert "cache.pinned_bytes" in why and "nothing was pinned" in why, why
    r = cli(ctl, "pin", f"{NS}.big")
    assert r.returncode != 0 and "409" in r.stderr, (r.returncode, r.stderr)
    # Nothing changed: the small table alone is pinned, on every node, and persisted.
    assert set(pins(ctl)) == {f"{NS}.small"}
    assert [kept(nd)["keys"] for nd in nodes] == [d["keys"] for d in before] == [1, 1]
    assert [p["table"] for p in json.loads((stack["tmp"] / "pins.json").read_text())] == [f"{NS}.small"]
    # A table that is not followed is a 404, and a bad query a 400.
    for query, code in [("table=nope.none", 404), ("tablex=a", 400)]:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{ctl.port}/pins?{query}", method="POST"), timeout=30)
        assert e.value.code == code


def test_a_restarted_proxy_gets_its_pins_and_hints_back_within_a_poll(stack):
    ctl, relay, nodes = stack["ctl"], stack["relay"], stack["nodes"]
    make_table(stack, "back", appends=2, rows=150_000)
    assert cli(ctl, "pin", f"{NS}.back").returncode == 0
    wait_kept(stack, "back", 2)
    node = nodes[1]
    hints_before = node.admin("GET", "/stats")["hint_chunks"]
    assert hints_before > 0
    boot = node.admin("GET", "/stats")["boot"]
    node.kill()
    # Down for five of the keeper's rounds (each fails to reach it) before it comes back.
    rounds = ctl.status()["workers"]["keeper"]["runs"]
    ctl.wait(lambda d: d["workers"]["keeper"]["runs"] >= rounds + 5, "five keeper rounds without the node")
    node.start()
    wait_until(f"{node.name} ready", node.ready, timeout=60)
    assert node.admin("GET", "/stats")["boot"] != boot
    started = time.monotonic()
    # The control plane polls every 200 ms; its next round sends the pins, hints and classes.
    wait_until("hints back", lambda: node.admin("GET", "/stats")["hint_chunks"] == hints_before, timeout=30)
    wait_kept(stack, "back", 2)
    took = time.monotonic() - started
    assert took < 10, f"pins came back after {took:.1f} s"
    mark = len(relay.lines)
    read_through_every_node(stack, "back", 300_000)
    assert data_gets(relay, mark, "back") == [], "the restarted node read pinned files from the origin"
    # floe-control restarted too: its pins come back from pins.json.
    ctl.stop()
    ctl.start()
    assert set(pins(ctl)) == {f"{NS}.back"}
    ctl.wait(lambda d: d["pins"] and d["pins"][0]["phase"] == "kept", "the pin kept after a restart")


def column_ranges(minio, key, column):
    """(start, len) of each of `column`'s chunks in the Parquet file at `key`, from its footer."""
    import io
    import pyarrow.parquet as pq
    body = s3_client(minio.port, ORIGIN_KEY, ORIGIN_SECRET).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    meta = pq.ParquetFile(io.BytesIO(body)).metadata
    out = []
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            col = meta.row_group(g).column(c)
            if col.path_in_schema == column:
                start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
                out.append((start, col.total_compressed_size))
    return out


def test_a_pin_of_some_columns_keeps_only_their_blocks(stack):
    import pyarrow as pa
    ctl, relay, nodes, block = stack["ctl"], stack["relay"], stack["nodes"], 2 << 20
    rows = 150_000
    hexes = lambda: pa.array([os.urandom(16).hex() for _ in range(rows)])  # noqa: E731
    t = stack["writer"].create_table(f"{NS}.wide", schema=pa.schema(
        [("id", pa.int64()), ("v", pa.string()), ("w", pa.string())]))
    t.append(pa.table({"id": pa.array(range(rows), pa.int64()), "v": hexes(), "w": hexes()}))
    t = t.refresh()
    ctl.wait_warm(f"{NS}.wide", t.metadata.current_snapshot_id)
    (key, size), = table_files(t).items()
    ranges = column_ranges(stack["minio"], key, "w")
    blocks = {i for start, n in ranges for i in range(start // block, (start + n - 1) // block + 1)}
    expected = sum(min(block, size - i * block) for i in blocks)
    assert expected < size, "the test needs a file with blocks outside column w"
    r = cli(ctl, "pin", f"{NS}.wide", "--columns", "w")
    assert r.returncode == 0, r.stderr
    docs = wait_kept(stack, "wide", 1)
    assert sum(d["owned_bytes"] for d in docs) == expected
    assert pins(ctl)[f"{NS}.wide"]["bytes"] == sum(n for _, n in ranges)
    assert pins(ctl)[f"{NS}.wide"]["columns"] == ["w"]
    scan_everything_else(stack)
    mark = len(relay.lines)
    for nd in nodes:
        reader = iceberg(stack["rest_port"], nd.port, *CLIENT)
        got = reader.load_table(f"{NS}.wide").scan(selected_fields=("w",)).to_arrow()
        assert got.num_rows == rows
    assert data_gets(relay, mark, "wide") == [], "column w went back to the origin"
