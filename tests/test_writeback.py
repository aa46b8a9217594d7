"""Write-back across a fleet: PUTs acknowledged once durable as Reed-Solomon fragments on
distinct nodes, read back at once through any node, propagated to the origin, never lost."""
import hashlib
import os
import shutil
from pathlib import Path

import pytest
import urllib3

from conftest import BUCKET, s3_client
from fleet import Node, start_fleet, wait_until
from relay import Relay
from test_blocks import get

MiB = 1 << 20
WB = dict(filters="sigv4, writeback, blocks",
          extra_route="    writeback: {k: 2, m: 1, w: 3, stripe_bytes: 262144}",
          extra_top="writeback: {dir: '{dir}/wb', capacity_bytes: 268435456, retry_max_ms: 500}")


@pytest.fixture
def wb(minio, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=3, **WB)
    yield nodes, relay, tmp_path
    for nd in nodes:
        nd.stop()
    relay.down()


def put(node, key, body):
    r = s3_client(node.port).put_object(Bucket=BUCKET, Key=key, Body=body)
    return r["ResponseMetadata"]["HTTPHeaders"]


def at_origin(direct, key):
    try:
        return direct.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    except direct.exceptions.NoSuchKey:
        return None


def wait_all_at_origin(direct, acked, confirmed, timeout=120):
    """Waits until the origin holds every body of `acked` (key -> bytes). Keys that matched go
    into the set `confirmed` (each is fetched until it matches, then not again)."""

    def all_there():
        for k, b in acked.items():
            if k not in confirmed and at_origin(direct, k) == b:
                confirmed.add(k)
        return len(confirmed) == len(acked)

    wait_until("every acknowledged write at the origin", all_there, timeout=timeout)


def test_a_put_is_staged_read_everywhere_at_once_and_reaches_the_origin(wb, direct):
    nodes, relay, _ = wb
    relay.down()  # the origin is away: the write can only be in the fleet
    body = os.urandom(3 * MiB + 17)
    h = put(nodes[0], "wb/data/00000-a.parquet", body)
    assert h["x-floe-writeback"] == "staged"
    for nd in nodes:
        r = get(nd.port, "wb/data/00000-a.parquet")
        assert r.status == 200 and r.data == body, nd.name
        part = get(nd.port, "wb/data/00000-a.parquet", rng="bytes=262000-600000")
        assert part.status == 206 and part.data == body[262000:600001]
    assert nodes[0].admin("GET", "/writeback")["dirty_objects"] == 1
    # The backlog in the metrics too, read at the scrape.
    assert nodes[0].metric("floe_writeback_dirty_objects") == 1
    assert nodes[0].metric("floe_writeback_dirty_bytes") == len(body)
    assert nodes[0].metric("floe_writeback_oldest_dirty_age_seconds") > 0
    assert nodes[1].metric("floe_writeback_dirty_objects") == 0  # counted by its coordinator
    assert nodes[1].metric("floe_writeback_fragment_bytes") > len(body) / 2
    relay.up()
    wait_until("the write to reach the origin",
               lambda: at_origin(direct, "wb/data/00000-a.parquet") == body)
    wait_until("the fragments to be freed", lambda: all(
        nd.admin("GET", "/writeback")["fragment_bytes"] == 0 for nd in nodes))
    assert nodes[0].admin("GET", "/writeback")["propagated"] == 1
    assert nodes[0].metric("floe_writeback_propagated_total") == 1
    assert nodes[0].metric("floe_writeback_propagated_bytes_total") == len(body)
    assert nodes[0].metric("floe_writeback_dirty_objects") == 0


def test_conditional_reads_of_a_staged_write_answer_for_the_staged_version_on_every_node(wb, direct):
    """Written through one node with the origin away, read through every other: the staged
    write is the current version its conditions are evaluated against."""
    from test_sigv4 import sign
    nodes, relay, _ = wb
    key = "wb/data/00000-cond.parquet"
    direct.put_object(Bucket=BUCKET, Key=key, Body=b"older version at the origin")
    relay.down()
    body = os.urandom(MiB + 3)
    etag = put(nodes[0], key, body)["etag"]
    http = urllib3.PoolManager(retries=False)

    def read(node, method, headers):
        url = f"http://127.0.0.1:{node.port}/{BUCKET}/{key}"
        req = sign(method, url, headers=headers)
        return http.request(method, url, headers=dict(req.headers))

    for nd in nodes[1:] + nodes[:1]:
        assert read(nd, "GET", {"If-None-Match": etag}).status == 304, nd.name
        assert read(nd, "HEAD", {"If-None-Match": etag}).status == 304, nd.name
        r = read(nd, "GET", {"If-Match": etag, "Range": "bytes=10-19"})
        assert (r.status, r.data) == (206, body[10:20]), nd.name
        r = read(nd, "GET", {"If-Match": '"0123456789abcdef0123456789abcdef"'})
        assert r.status == 412 and b"PreconditionFailed" in r.data, nd.name
        r = read(nd, "GET", {"If-None-Match": '"0123456789abcdef0123456789abcdef"'})
        assert (r.status, r.data) == (200, body), nd.name
    relay.up()


def test_the_coordinator_killed_after_the_ack_propagates_after_its_restart(wb, direct):
    nodes, relay, tmp = wb
    relay.down()
    body = os.urandom(MiB + 5)
    assert put(nodes[1], "wb/data/00001-k.parquet", body)["x-floe-writeback"] == "staged"
    nodes[1].kill()
    seeds = [nd.peer_port for nd in nodes if nd is not nodes[1]]
    again = Node(tmp, "floe-1", relay.port, nodes[1].peer_port, seeds, **WB)
    nodes[1] = again
    relay.up()
    wait_until("the restarted coordinator to propagate its journal",
               lambda: at_origin(direct, "wb/data/00001-k.parquet") == body, timeout=30)


def test_a_corrupt_shard_is_an_erasure_and_too_few_intact_is_an_error_never_wrong_bytes(wb, direct):
    nodes, relay, tmp = wb
    relay.down()
    body = os.urandom(2 * MiB + 3)
    assert put(nodes[0], "wb/data/00002-c.parquet", body)["x-floe-writeback"] == "staged"
    frags = sorted(Path(tmp).glob("floe-*/wb/fragments/*.[0-9]"))
    assert len(frags) == 3, frags  # k + m fragments, one per node
    unread = os.urandom(MiB + 1)  # staged, never read (so never cached) before the end
    assert put(nodes[1], "wb/data/00002-d.parquet", unread)["x-floe-writeback"] == "staged"
    frags_d = [f for f in sorted(Path(tmp).glob("floe-*/wb/fragments/*.[0-9]")) if f not in frags]
    # A flipped byte in the first shard of one fragment: read as an erasure, rebuilt from parity.
    bad, = [f for f in frags if f.name.endswith(".0")]
    raw = bytearray(bad.read_bytes())
    raw[100] ^= 0xFF
    bad.write_bytes(bytes(raw))
    for nd in nodes:
        assert get(nd.port, "wb/data/00002-c.parquet").data == body, nd.name
    assert sum(nd.metric("floe_writeback_corrupt_shards_total") for nd in nodes) > 0
    # Lose a node, and corrupt a second fragment of the unread write: one intact of two needed.
    holder = nodes[2]
    holder.kill()
    reader = nodes[0]
    for f in (f for f in frags_d if holder.name not in str(f)):
        raw = bytearray(f.read_bytes())
        raw[100] ^= 0xFF
        f.write_bytes(bytes(raw))
        break
    # The block cache has the first block in hand before it answers: an error answer, never
    # a body begun and cut, and never the origin's (older) bytes.
    r = get(reader.port, "wb/data/00002-d.parquet")
    assert r.status == 500 and b"<Code>InternalError</Code>" in r.data, (r.status, r.data[:300])


def test_losing_m_nodes_still_reads_every_byte(wb, direct):
    nodes, relay, tmp = wb
    relay.down()
    body = os.urandom(MiB + 11)
    assert put(nodes[0], "wb/data/00004-m.parquet", body)["x-floe-writeback"] == "staged"
    nodes[2].kill()  # m = 1
    for nd in nodes[:2]:
        assert get(nd.port, "wb/data/00004-m.parquet").data == body, nd.name


@pytest.mark.parametrize("filters", ["sigv4, writeback, blocks", "sigv4, writeback"])
def test_a_read_under_way_when_propagation_frees_the_fragments_finishes_from_the_origin(minio, tmp_path, filters):
    import urllib3
    from test_sigv4 import sign
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=3, **dict(WB, filters=filters))
    try:
        relay.refuse = {"PUT"}  # staged until the read is under way
        key, body = "wb/data/00013-long-read.parquet", os.urandom(24 * MiB)
        assert put(nodes[0], key, body)["x-floe-writeback"] == "staged"
        url = f"http://127.0.0.1:{nodes[1].port}/{BUCKET}/{key}"
        r = urllib3.PoolManager(retries=False).request(
            "GET", url, headers=dict(sign("GET", url).headers), preload_content=False)
        assert r.status == 200
        head = r.read(MiB)  # the rest waits in Floe, beyond the socket buffers
        relay.refuse = set()
        wait_until("the write propagated and its fragments freed everywhere", lambda: all(
            nd.admin("GET", "/writeback")["fragment_bytes"] == 0 for nd in nodes), timeout=60)
        assert head + r.read() == body
        if "blocks" not in filters:  # write-back streamed it itself, then from the origin
            assert r.headers["x-floe-writeback"] == "dirty"
            assert nodes[1].metric("floe_writeback_read_through_total") == 1
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_a_staged_write_is_served_through_the_block_cache_which_keeps_it_after_propagation(wb, direct):
    nodes, relay, _ = wb
    relay.refuse = {"PUT"}
    key, body = "wb/data/00015-cached.parquet", os.urandom(3 * MiB + 5)
    assert put(nodes[0], key, body)["x-floe-writeback"] == "staged"
    gets = relay.count("GET")
    first = get(nodes[1].port, key)
    assert first.data == body and first.headers["x-floe-cache"] in ("miss", "partial", "fill-peer")
    for nd in nodes:  # admitted on a second touch, then served from the cache
        wait_until(f"{nd.name} to serve it from the cache", lambda nd=nd: get(
            nd.port, key, "bytes=100-200").headers["x-floe-origin-bytes"] == "0")
        assert get(nd.port, key, "bytes=100-200").data == body[100:201]
    assert relay.count("GET") == gets, "the cache filled from the fragments, not the origin"
    relay.refuse = set()
    wait_until("the write propagated and freed", lambda: all(
        nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in nodes))
    for nd in nodes:
        after = get(nd.port, key)
        assert after.data == body and after.headers["x-floe-origin-bytes"] == "0", nd.name
    assert relay.count("GET") == gets, "the blocks cached under the staged ETag are the origin's version"
    assert after.headers["etag"] == direct.head_object(Bucket=BUCKET, Key=key)["ETag"]


@pytest.mark.parametrize("key", ["wb/metadata/version-hint.text", "wb/data/00014-rewritten.parquet"])
def test_a_rewritten_key_reads_as_the_new_write_on_every_node_before_and_after_propagation(wb, direct, key):
    nodes, relay, _ = wb
    old, new = b"1" * 100, b"22" * 100
    direct.put_object(Bucket=BUCKET, Key=key, Body=old)
    for nd in nodes:
        assert get(nd.port, key).data == old  # every node's block cache resolved the old version
    relay.refuse = {"PUT"}
    assert put(nodes[0], key, new)["x-floe-writeback"] == "staged"
    for nd in nodes:
        assert get(nd.port, key).data == new, nd.name
    relay.refuse = set()
    wait_until("the write propagated and freed", lambda: all(
        nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in nodes))
    assert at_origin(direct, key) == new
    for nd in nodes:
        assert get(nd.port, key).data == new, nd.name  # was the old version, from the cache


def test_lists_through_any_node_show_staged_writes_merged_in_order(wb, direct):
    nodes, relay, _ = wb
    direct.put_object(Bucket=BUCKET, Key="wb/list/b.parquet", Body=b"origin")
    direct.put_object(Bucket=BUCKET, Key="wb/list/d/x.parquet", Body=b"origin")
    relay.refuse = {"PUT"}  # the origin lists, but takes no write: the writes stay staged
    put(nodes[0], "wb/list/a.parquet", b"a" * 10)
    put(nodes[0], "wb/list/c.parquet", b"c" * 30)
    put(nodes[1], "wb/list/e/y.parquet", b"e")
    for nd in nodes:
        s3 = s3_client(nd.port)
        got = s3.list_objects_v2(Bucket=BUCKET, Prefix="wb/list/")
        assert [(o["Key"], o["Size"]) for o in got["Contents"]] == [
            ("wb/list/a.parquet", 10), ("wb/list/b.parquet", 6), ("wb/list/c.parquet", 30),
            ("wb/list/d/x.parquet", 6), ("wb/list/e/y.parquet", 1)], nd.name
        assert got["KeyCount"] == 5
        rolled = s3.list_objects_v2(Bucket=BUCKET, Prefix="wb/list/", Delimiter="/")
        assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["wb/list/d/", "wb/list/e/"]
        v1 = s3.list_objects(Bucket=BUCKET, Prefix="wb/list/", Marker="wb/list/b.parquet")
        assert [o["Key"] for o in v1["Contents"]][:2] == ["wb/list/c.parquet", "wb/list/d/x.parquet"]
    relay.refuse = set()
    wait_until("the staged writes to reach the origin", lambda: at_origin(direct, "wb/list/c.parquet"))


def test_a_lost_fragment_node_and_a_corrupt_fragment_are_rebuilt_while_the_write_waits(minio, direct, tmp_path):
    relay = Relay(minio.port)
    fast = dict(WB, extra_top="writeback: {dir: '{dir}/wb', capacity_bytes: 268435456, retry_max_ms: 500,"
                              " scrub_interval_ms: 300, repair_grace_ms: 500}")
    nodes = start_fleet(tmp_path, relay.port, n=4, **fast)
    try:
        relay.refuse = {"PUT"}  # the write stays staged
        body = os.urandom(MiB + 99)
        assert put(nodes[0], "wb/data/00005-r.parquet", body)["x-floe-writeback"] == "staged"
        holders = lambda: {f.parent.parent.parent.name for f in Path(tmp_path).glob("floe-*/wb/fragments/*.[0-9]")}
        first = holders()
        assert len(first) == 3
        lost = next(nd for nd in nodes[1:] if nd.name in first)
        lost.kill()
        wait_until("the lost fragment to be rebuilt on the spare node",
                   lambda: nodes[0].admin("GET", "/writeback")["repairs"] >= 1, timeout=30)
        live = [nd for nd in nodes if nd is not lost]
        assert len(holders() - {lost.name}) == 3, holders()
        # A corrupt fragment is found by the scrub and rebuilt in place.
        frag = next(Path(tmp_path).glob(f"{nodes[0].name}/wb/fragments/*.[0-9]"))
        raw = bytearray(frag.read_bytes())
        raw[80] ^= 0xFF
        frag.write_bytes(bytes(raw))
        before = nodes[0].admin("GET", "/writeback")["repairs"]
        wait_until("the scrub to rebuild the corrupt fragment",
                   lambda: nodes[0].admin("GET", "/writeback")["repairs"] > before, timeout=30)
        assert frag.read_bytes() != bytes(raw)
        # So is a flipped byte in a fragment's header (its geometry), which no shard CRC covers.
        healed = frag.read_bytes()
        raw = bytearray(healed)
        raw[20] ^= 0x01
        frag.write_bytes(bytes(raw))
        before = nodes[0].admin("GET", "/writeback")["repairs"]
        wait_until("the scrub to rebuild the fragment with a bad header",
                   lambda: nodes[0].admin("GET", "/writeback")["repairs"] > before, timeout=30)
        assert frag.read_bytes() == healed
        # Lose another holder: k intact fragments remain, all of them checked.
        second = next(nd for nd in live[1:] if nd.name in holders())
        second.kill()
        for nd in (n for n in live if n is not second):
            assert get(nd.port, "wb/data/00005-r.parquet").data == body, nd.name
        relay.refuse = set()
        wait_until("the write to reach the origin",
                   lambda: at_origin(direct, "wb/data/00005-r.parquet") == body, timeout=30)
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_a_fragment_node_that_stops_answering_mid_put_makes_it_a_synchronous_origin_write(wb, direct):
    import signal
    nodes, relay, _ = wb
    nodes[2].proc.proc.send_signal(signal.SIGSTOP)  # still in every view: it is placed on
    try:
        body = os.urandom(MiB + 1)
        h = put(nodes[0], "wb/data/00008-s.parquet", body)
        assert h["x-floe-writeback"] == "sync"  # 2 of w=3 durable (>= k): the origin first
        assert at_origin(direct, "wb/data/00008-s.parquet") == body
    finally:
        nodes[2].proc.proc.send_signal(signal.SIGCONT)


def test_the_last_acknowledged_write_of_a_key_wins_across_coordinators(wb, direct):
    nodes, relay, tmp = wb
    relay.refuse = {"PUT"}  # both writes stay staged
    first, second = os.urandom(300_000), os.urandom(200_000)
    assert put(nodes[0], "wb/data/00009-w.parquet", first)["x-floe-writeback"] == "staged"
    assert put(nodes[1], "wb/data/00009-w.parquet", second)["x-floe-writeback"] == "staged"
    for nd in nodes:
        assert get(nd.port, "wb/data/00009-w.parquet").data == second, nd.name
    relay.refuse = set()
    wait_until("the later write at the origin", lambda: at_origin(direct, "wb/data/00009-w.parquet") == second)
    wait_until("nothing left staged", lambda: all(
        nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in nodes))
    assert at_origin(direct, "wb/data/00009-w.parquet") == second
    # The first write was freed unpropagated, journal copies included: no restart replays it.
    assert sum(nd.admin("GET", "/writeback")["superseded"] for nd in nodes) >= 1
    wait_until("the first write's fragments freed", lambda: all(
        nd.admin("GET", "/writeback")["fragment_bytes"] == 0 for nd in nodes))
    assert not list(Path(tmp).glob("floe-*/wb/journal/*.json"))


def test_fewer_eligible_nodes_than_w_sends_the_put_straight_to_the_origin(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=2, **WB)  # w = 3 > 2 nodes
    try:
        body = os.urandom(1000)
        h = put(nodes[0], "wb/data/00003-d.parquet", body)
        assert h["x-floe-writeback"] == "direct"
        assert at_origin(direct, "wb/data/00003-d.parquet") == body
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_a_node_without_room_for_a_fragment_is_not_planned_and_too_few_with_room_goes_direct(minio, direct, tmp_path):
    relay = Relay(minio.port)
    small = "writeback: {dir: '{dir}/wb', capacity_bytes: 67108864, retry_max_ms: 500}"  # 64 MiB
    nodes = start_fleet(tmp_path, relay.port, n=3, overrides={2: dict(extra_top=small)}, **WB)
    full = nodes[2]
    try:
        relay.refuse = {f"PUT /{BUCKET}/wb/fill/"}  # the fills stay staged, holding their room
        fragment = 4 * MiB + 4096  # an 8 MiB write's fragment at k=2, with headers and CRCs
        for i in range(40):
            h = put(nodes[0], f"wb/fill/{i:03d}.parquet", os.urandom(8 * MiB))
            # Never a refused reservation (that would make it a synchronous write, refused).
            assert h["x-floe-writeback"] == "staged", i
            free = full.admin("GET", "/writeback")["free_bytes"]
            wait_until("node 0 to see floe-2's room", lambda: nodes[0].admin(
                "GET", "/writeback")["peer_free_bytes"].get("floe-2") == free)
            if free < fragment:
                break
        else:
            pytest.fail("floe-2 never filled")
        st = full.admin("GET", "/writeback")
        assert st["fragment_bytes"] <= st["fragment_ceiling_bytes"] == 64 * MiB
        # Two of three nodes have room, w = 3: straight to the origin, nothing sent to floe-2.
        body = os.urandom(8 * MiB)
        h = put(nodes[0], "wb/data/00011-full.parquet", body)
        assert h["x-floe-writeback"] == "direct"
        assert at_origin(direct, "wb/data/00011-full.parquet") == body
        assert full.admin("GET", "/writeback")["fragment_bytes"] == st["fragment_bytes"]
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_pyiceberg_writes_a_table_through_write_back_reads_it_at_once_and_the_origin_gets_every_file(wb, minio, tmp_path):
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from conftest import CLIENT, ORIGIN_KEY, ORIGIN_SECRET
    nodes, relay, _ = wb

    def catalog(port, key, secret):
        return SqlCatalog("wb", uri=f"sqlite:///{tmp_path}/cat.db", warehouse=f"s3://{BUCKET}/wb-iceberg",
                          **{"s3.endpoint": f"http://127.0.0.1:{port}", "s3.access-key-id": key,
                             "s3.secret-access-key": secret, "s3.region": "us-east-1",
                             "s3.force-virtual-addressing": "false"})

    relay.refuse = {"PUT", "POST"}  # the origin takes no write: every file must be staged
    writer = catalog(nodes[0].port, *CLIENT)
    writer.create_namespace("ns")
    data = pa.table({"id": pa.array(range(5000), pa.int64()), "v": pa.array([f"v{i}" for i in range(5000)])})
    t = writer.create_table("ns.events", schema=data.schema)
    t.append(data)
    t.append(data.slice(0, 7))
    staged = sum(nd.metric('floe_writeback_put_seconds_count{mode="staged"}') for nd in nodes)
    assert staged >= 6  # data files, manifests, manifest lists, metadata.json: Arrow's multipart
    got = catalog(nodes[1].port, *CLIENT).load_table("ns.events").scan().to_arrow().sort_by("id")
    assert got.num_rows == 5007
    relay.refuse = set()
    wait_until("every staged file at the origin", lambda: all(
        nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in nodes), timeout=60)
    ref = catalog(minio.port, ORIGIN_KEY, ORIGIN_SECRET).load_table("ns.events").scan().to_arrow().sort_by("id")
    assert ref.equals(got)


def test_a_boto3_multipart_upload_is_staged_part_by_part_and_read_whole(wb, direct):
    from boto3.s3.transfer import TransferConfig
    nodes, relay, tmp = wb
    relay.down()
    body = os.urandom(13 * MiB + 5)
    path = Path(tmp) / "big.bin"
    path.write_bytes(body)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=3)
    s3_client(nodes[0].port).upload_file(str(path), BUCKET, "wb/data/00006-mp.parquet", Config=cfg)
    assert get(nodes[2].port, "wb/data/00006-mp.parquet").data == body
    part = get(nodes[1].port, "wb/data/00006-mp.parquet", rng=f"bytes={5 * MiB - 3}-{5 * MiB + 2}")
    assert part.data == body[5 * MiB - 3:5 * MiB + 3]
    bad = s3_client(nodes[0].port).create_multipart_upload(Bucket=BUCKET, Key="wb/data/00007-x.parquet")
    with pytest.raises(Exception) as e:
        s3_client(nodes[0].port).complete_multipart_upload(
            Bucket=BUCKET, Key="wb/data/00007-x.parquet", UploadId=bad["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"nope"'}]})
    assert "InvalidPart" in str(e.value)
    c = s3_client(nodes[0].port)
    for n, chunk in ((2, b"b" * 100), (1, b"a" * (5 * MiB)), (3, b"c" * 7)):
        c.upload_part(Bucket=BUCKET, Key="wb/data/00007-x.parquet", UploadId=bad["UploadId"], PartNumber=n, Body=chunk)
    listed = c.list_parts(Bucket=BUCKET, Key="wb/data/00007-x.parquet", UploadId=bad["UploadId"])
    assert [(p["PartNumber"], p["Size"]) for p in listed["Parts"]] == [(1, 5 * MiB), (2, 100), (3, 7)]
    assert listed["Parts"][0]["ETag"] == '"' + hashlib.md5(b"a" * (5 * MiB)).hexdigest() + '"'
    page = c.list_parts(Bucket=BUCKET, Key="wb/data/00007-x.parquet", UploadId=bad["UploadId"],
                        MaxParts=1, PartNumberMarker=1)
    assert [p["PartNumber"] for p in page["Parts"]] == [2] and page["IsTruncated"] and page["NextPartNumberMarker"] == 2
    # A part under 5 MiB that is not the last: refused as S3 refuses it (the origin would never
    # take these parts when the write propagates).
    with pytest.raises(Exception) as e:
        c.complete_multipart_upload(
            Bucket=BUCKET, Key="wb/data/00007-x.parquet", UploadId=bad["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in listed["Parts"]]})
    assert "EntityTooSmall" in str(e.value)
    c.abort_multipart_upload(Bucket=BUCKET, Key="wb/data/00007-x.parquet", UploadId=bad["UploadId"])
    with pytest.raises(Exception) as e:
        c.list_parts(Bucket=BUCKET, Key="wb/data/00007-x.parquet", UploadId=bad["UploadId"])
    assert "NoSuchUpload" in str(e.value)
    relay.up()
    wait_until("the upload to reach the origin",
               lambda: at_origin(direct, "wb/data/00006-mp.parquet") == body, timeout=30)


def test_orphan_fragments_and_an_abandoned_upload_are_swept_and_a_staged_write_is_kept(minio, direct, tmp_path):
    relay = Relay(minio.port)
    sweep = dict(WB, extra_top="writeback: {dir: '{dir}/wb', capacity_bytes: 268435456, retry_max_ms: 500,"
                               " scrub_interval_ms: 200, orphan_after_ms: 1000}")
    nodes = start_fleet(tmp_path, relay.port, n=3, **sweep)
    try:
        relay.refuse = {"PUT"}  # the acknowledged write stays staged, older than orphan_after_ms
        body = os.urandom(MiB + 7)
        assert put(nodes[0], "wb/data/00008-kept.parquet", body)["x-floe-writeback"] == "staged"
        frags = lambda: sorted(p.name for p in Path(tmp_path).glob("floe-*/wb/fragments/*.[0-9]"))
        kept = frags()
        assert len(kept) == 3
        # An upload that never completes is aborted once older than orphan_after_ms.
        c = s3_client(nodes[1].port)
        up = c.create_multipart_upload(Bucket=BUCKET, Key="wb/data/00009-abandoned.parquet")
        c.upload_part(Bucket=BUCKET, Key="wb/data/00009-abandoned.parquet", UploadId=up["UploadId"],
                      PartNumber=1, Body=os.urandom(300_000))
        assert len(frags()) == 6
        # A fragment no journal and no upload names (a coordinator that died mid-PUT).
        some = next(Path(tmp_path).glob("floe-2/wb/fragments/*.[0-9]"))
        orphan = some.with_name("0123456789abcdef0123456789abcdef.1")
        shutil.copyfile(some, orphan)
        removed = lambda: sum(nd.admin("GET", "/writeback")["orphan_fragments_removed"] for nd in nodes)
        # At least the orphan: a scrub on another node may also count the aborted upload's part
        # fragments (freed either way) if it lists them just after the upload is forgotten.
        wait_until("the orphan swept", lambda: not orphan.exists() and removed() >= 1, timeout=30)
        wait_until("the abandoned upload's part freed", lambda: frags() == kept, timeout=30)
        assert not orphan.exists()
        with pytest.raises(c.exceptions.NoSuchUpload):
            c.list_parts(Bucket=BUCKET, Key="wb/data/00009-abandoned.parquet", UploadId=up["UploadId"])
        assert get(nodes[2].port, "wb/data/00008-kept.parquet").data == body
        relay.refuse = set()
        wait_until("the kept write to reach the origin", lambda: at_origin(direct, "wb/data/00008-kept.parquet") == body)
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_parts_survive_a_kill_of_every_node_and_the_upload_completes_after(wb, direct):
    nodes, relay, tmp = wb
    key = "wb/data/00012-restart.parquet"
    parts = [os.urandom(5 * MiB), os.urandom(MiB + 9)]
    c = s3_client(nodes[0].port)
    up = c.create_multipart_upload(Bucket=BUCKET, Key=key, ContentType="application/x-parquet")["UploadId"]
    etags = [s3_client(nodes[i].port).upload_part(Bucket=BUCKET, Key=key, UploadId=up, PartNumber=i + 1,
                                                   Body=b)["ETag"] for i, b in enumerate(parts)]
    ports = [nd.peer_port for nd in nodes]
    for nd in nodes:
        nd.kill()
    for i, nd in enumerate(nodes):
        nodes[i] = Node(tmp, nd.name, relay.port, nd.peer_port, [p for p in ports if p != nd.peer_port], **WB)
    names = {nd.name for nd in nodes}
    for nd in nodes:
        wait_until(f"{nd.name} to see the fleet", lambda nd=nd: set(nd.view()) == names)
    c = s3_client(nodes[2].port)
    listed = c.list_parts(Bucket=BUCKET, Key=key, UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in listed] == [
        (1, etags[0], len(parts[0])), (2, etags[1], len(parts[1]))]
    r = c.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": i + 1, "ETag": e} for i, e in enumerate(etags)]})
    assert r["ResponseMetadata"]["HTTPHeaders"]["x-floe-writeback"] in ("staged", "sync")
    whole = b"".join(parts)
    assert get(nodes[1].port, key).data == whole
    wait_until("the completed upload at the origin", lambda: at_origin(direct, key) == whole, timeout=30)
    assert direct.head_object(Bucket=BUCKET, Key=key)["ContentType"] == "application/x-parquet"
    assert not list(Path(tmp).glob("floe-*/wb/uploads/floe-wb-*"))


def test_an_upload_spread_over_every_node_lists_completes_and_aborts_anywhere(wb, direct):
    nodes, relay, _ = wb
    relay.down()
    c = [s3_client(nd.port) for nd in nodes]  # a load balancer sends each call elsewhere
    key = "wb/data/00010-spread.parquet"
    up = c[0].create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    chunks = {1: os.urandom(5 * MiB), 2: os.urandom(5 * MiB), 3: os.urandom(1234)}
    etags = {n: c[n % 3].upload_part(Bucket=BUCKET, Key=key, UploadId=up, PartNumber=n, Body=b)["ETag"]
             for n, b in chunks.items()}
    listed = c[2].list_parts(Bucket=BUCKET, Key=key, UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["ETag"]) for p in listed] == sorted(etags.items())
    done = c[1].complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": e} for n, e in sorted(etags.items())]})
    assert done["ResponseMetadata"]["HTTPHeaders"]["x-floe-writeback"] == "staged"
    whole = chunks[1] + chunks[2] + chunks[3]
    assert all(get(nd.port, key).data == whole for nd in nodes)
    for cl in c:
        with pytest.raises(Exception) as e:
            cl.list_parts(Bucket=BUCKET, Key=key, UploadId=up)
        assert "NoSuchUpload" in str(e.value), "every node forgot the completed upload"
    gone = c[2].create_multipart_upload(Bucket=BUCKET, Key="wb/data/00011-gone.parquet")["UploadId"]
    c[0].upload_part(Bucket=BUCKET, Key="wb/data/00011-gone.parquet", UploadId=gone, PartNumber=1, Body=b"x" * 10)
    c[1].abort_multipart_upload(Bucket=BUCKET, Key="wb/data/00011-gone.parquet", UploadId=gone)
    with pytest.raises(Exception) as e:
        c[0].upload_part(Bucket=BUCKET, Key="wb/data/00011-gone.parquet", UploadId=gone, PartNumber=2, Body=b"y")
    assert "NoSuchUpload" in str(e.value)
    # S3's ETag of a completed upload: the MD5 of the parts' MD5s and their count. The origin
    # gets the same parts, so it ends with the ETag the client was answered.
    want = '"%s-3"' % hashlib.md5(b"".join(hashlib.md5(chunks[n]).digest() for n in (1, 2, 3))).hexdigest()
    assert done["ETag"] == want
    assert all(get(nd.port, key).headers["etag"] == want for nd in nodes)
    relay.up()
    wait_until("the spread upload to reach the origin", lambda: at_origin(direct, key) == whole, timeout=30)
    assert direct.head_object(Bucket=BUCKET, Key=key)["ETag"] == want
    assert all(get(nd.port, key).headers["etag"] == want for nd in nodes)


def test_list_multipart_uploads_shows_the_fleets_uploads_beside_the_origins(wb, direct):
    nodes, relay, _ = wb
    c = [s3_client(nd.port) for nd in nodes]
    at_origin_up = direct.create_multipart_upload(Bucket=BUCKET, Key="wb/up/b-origin.parquet")["UploadId"]
    a = c[0].create_multipart_upload(Bucket=BUCKET, Key="wb/up/a.parquet")["UploadId"]
    z = c[1].create_multipart_upload(Bucket=BUCKET, Key="wb/up/z.parquet")["UploadId"]
    deep = c[2].create_multipart_upload(Bucket=BUCKET, Key="wb/up/deep/x.parquet")["UploadId"]
    def ids(client, **kw):
        return [(u["Key"], u["UploadId"]) for u in client.list_multipart_uploads(Bucket=BUCKET, **kw).get("Uploads", [])]

    try:
        # MinIO lists an upload only under its whole key as the prefix; Floe's answer is the
        # origin's page with the fleet's uploads merged in, whatever the origin lists.
        origin = ids(direct, Prefix="wb/up/")
        assert sorted(ids(c[2], Prefix="wb/up/")) == sorted(origin + [
            ("wb/up/a.parquet", a), ("wb/up/deep/x.parquet", deep), ("wb/up/z.parquet", z)])
        assert [k for k, _ in ids(c[2], Prefix="wb/up/")] == sorted(k for k, _ in ids(c[2], Prefix="wb/up/"))
        assert ids(c[1], Prefix="wb/up/b-origin.parquet") == [("wb/up/b-origin.parquet", at_origin_up)]
        assert ids(c[0], Prefix="wb/up/a.parquet") == [("wb/up/a.parquet", a)]
        listed = c[2].list_multipart_uploads(Bucket=BUCKET, Prefix="wb/up/")["Uploads"]
        assert all(u["Initiated"].year >= 2026 and u["StorageClass"] == "STANDARD" for u in listed)
        rolled = c[0].list_multipart_uploads(Bucket=BUCKET, Prefix="wb/up/", Delimiter="/")
        assert [u["UploadId"] for u in rolled["Uploads"] if u["UploadId"].startswith("floe-wb-")] == [a, z]
        assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["wb/up/deep/"]
        after = ids(c[1], Prefix="wb/up/", KeyMarker="wb/up/b-origin.parquet")
        assert [i for _, i in after if i.startswith("floe-wb-")] == [deep, z]
        c[1].abort_multipart_upload(Bucket=BUCKET, Key="wb/up/a.parquet", UploadId=a)
        assert ids(c[0], Prefix="wb/up/a.parquet") == []
        assert len(ids(c[0], Prefix="wb/up/")) == len(origin) + 2
    finally:
        direct.abort_multipart_upload(Bucket=BUCKET, Key="wb/up/b-origin.parquet", UploadId=at_origin_up)


def test_a_node_away_during_a_newer_write_never_brings_the_older_one_back(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=4, **WB)  # k=2 m=1 w=3: one node may be away
    key = "wb/data/00012-order.parquet"
    try:
        relay.refuse = {"PUT"}  # both writes stay staged
        v1, v2 = os.urandom(MiB + 1), os.urandom(MiB + 2)
        assert put(nodes[0], key, v1)["x-floe-writeback"] == "staged"
        wait_until("v1's journal copy on every node",
                   lambda: all(nd.admin("GET", "/writeback")["indexed_objects"] == 1 for nd in nodes))
        away = nodes[3]
        away.kill()
        wait_until("the coordinator to see the node gone",
                   lambda: nodes[0].view().get(away.name) in (None, "dead", "left"))
        assert put(nodes[0], key, v2)["x-floe-writeback"] == "staged"  # supersedes v1 where it can
        seeds = [nd.peer_port for nd in nodes[:3]]
        nodes[3] = Node(tmp_path, away.name, relay.port, away.peer_port, seeds, **WB)  # back with v1's copy
        wait_until("the returning node to see the fleet", lambda: len(nodes[3].view()) == 4)
        wait_until("the returning node to catch up", lambda: nodes[3].admin("GET", "/writeback")["indexed_objects"] == 1)
        for _ in range(3):  # reads agree on v2 on every node, the returning one included
            got = {}
            for nd in nodes:
                r = get(nd.port, key)
                got[nd.name] = {v1: "v1", v2: "v2"}.get(r.data, f"{r.status} {r.data[:300]!r}")
            assert set(got.values()) == {"v2"}, got
        relay.refuse = set()
        wait_until("every staged write and copy settled", lambda: all(
            nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in nodes), timeout=60)
        assert at_origin(direct, key) == v2, "the older write came back over the newer"
        assert all(get(nd.port, key).data == v2 for nd in nodes)
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()
