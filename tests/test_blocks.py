"""The block cache against a real origin: single-flight cold fills, hits, version-atomic
responses under concurrent overwrites, and engines reading through a cold and a warm cache."""
import concurrent.futures
import os
import pathlib
import random
import signal
import threading

import pytest
import urllib3

from conftest import BUCKET, CLIENT, s3_client, start_cached_floe
from relay import Relay
from test_clients import parquet_key  # noqa: F401  (fixture)
from test_sigv4 import sign

MiB = 1 << 20


@pytest.fixture(scope="module")
def cached(minio, tmp_path_factory):
    d = tmp_path_factory.mktemp("cached")
    relay = Relay(minio.port)
    # fill: range, so a read's origin bytes do not depend on the reads earlier tests made
    # (fill: auto's neighbour estimate learns from them); auto is covered by the test bed
    # (plugins/blocks/src/testbed/fills.rs) and by load/bench.py.
    p = start_cached_floe(d, relay.port, d / "cache", extra_cache="  fill: range")
    p.relay = relay
    yield p
    p.stop()
    relay.down()


def get(port, key, rng=None,
        http=urllib3.PoolManager(maxsize=32, retries=False, timeout=urllib3.Timeout(connect=5, read=60)),
        host="127.0.0.1"):
    url = f"http://{host}:{port}/{BUCKET}/{key}"
    headers = {"Range": rng} if rng else {}
    req = sign("GET", url, headers=headers)
    return http.request("GET", url, headers=dict(req.headers))


def test_sixteen_cold_gets_make_one_origin_get(cached, direct):
    data = os.urandom(6 * MiB)
    direct.put_object(Bucket=BUCKET, Key="blocks/cold.parquet", Body=data)
    before = cached.relay.count("GET")
    heads = cached.relay.count("HEAD")
    received = cached.relay.received()
    barrier = threading.Barrier(16)

    def one(_):
        barrier.wait()
        return get(cached.port, "blocks/cold.parquet", "bytes=1000-3000000")

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        results = list(ex.map(one, range(16)))
    assert all(r.status == 206 and r.data == data[1000:3000001] for r in results)
    assert cached.relay.count("GET") - before == 1
    # The cold GET resolves the version itself (ETag and size from its answer): no HEAD.
    assert cached.relay.count("HEAD") - heads == 0
    # Each response says where its bytes came from: the one whose GET fetched them, a miss
    # counting every origin byte; the others waited on that fill (or found it cached).
    labels = sorted(r.headers["x-floe-cache"] for r in results)
    assert labels.count("miss") == 1 and set(labels) <= {"miss", "wait", "hit"}, labels
    claimed = [int(r.headers["x-floe-origin-bytes"]) for r in results]
    assert sum(claimed) == 3000001 - 1000, (labels, claimed)
    assert 0 <= cached.relay.received() - received - sum(claimed) < 4096  # headers only


def test_warm_read_is_a_hit_with_no_origin_get(cached, direct):
    data = os.urandom(5 * MiB + 123)
    direct.put_object(Bucket=BUCKET, Key="blocks/warm.parquet", Body=data)
    r = get(cached.port, "blocks/warm.parquet")
    assert r.status == 200 and r.data == data and r.headers["x-floe-cache"] == "miss"
    assert int(r.headers["x-floe-origin-bytes"]) == len(data)
    before = (cached.relay.count("GET"), cached.relay.count("HEAD"))
    for rng, want in [("bytes=0-9", data[:10]), ("bytes=-100", data[-100:]), (f"bytes={2 * MiB - 5}-{2 * MiB + 5}", data[2 * MiB - 5:2 * MiB + 6]), (None, data)]:
        r = get(cached.port, "blocks/warm.parquet", rng)
        assert r.data == want and r.headers["x-floe-cache"] == "hit" and r.headers["x-floe-origin-bytes"] == "0"
    assert (cached.relay.count("GET"), cached.relay.count("HEAD")) == before
    r = get(cached.port, "blocks/warm.parquet", f"bytes={len(data)}-")
    assert r.status == 416 and b"<Code>InvalidRange</Code>" in r.data
    assert r.headers["content-range"] == f"bytes */{len(data)}"  # as S3 answers a 416
    assert (cached.relay.count("GET"), cached.relay.count("HEAD")) == before


def origin_bytes(p):
    s = p.admin("GET", "/stats")
    return s["data"]["origin_bytes"] + s["metadata"]["origin_bytes"]


def test_range_fill_fetches_only_the_bytes_read(cached, direct):
    """fill: range (this module's): a cold read costs the origin exactly its own bytes; the spans
    it leaves in a block serve later reads inside them and join with their neighbours."""
    data = os.urandom(6 * MiB)
    key = "blocks/range.parquet"
    direct.put_object(Bucket=BUCKET, Key=key, Body=data)
    a = 2 * MiB + 12345  # inside block 1 ([2, 4) MiB); the footer block 2 is not touched
    b0, g0 = origin_bytes(cached), cached.relay.count("GET")
    r = get(cached.port, key, f"bytes={a}-{a + MiB - 1}")
    assert r.status == 206 and r.data == data[a:a + MiB]
    assert r.headers["x-floe-cache"] == "miss" and int(r.headers["x-floe-origin-bytes"]) == MiB
    assert origin_bytes(cached) - b0 == MiB and cached.relay.count("GET") - g0 == 1
    for lo, hi in ((a, a + MiB - 1), (a + 100, a + 200), (a + MiB - 10, a + MiB - 1)):
        r = get(cached.port, key, f"bytes={lo}-{hi}")
        assert r.data == data[lo:hi + 1] and r.headers["x-floe-cache"] == "hit"
        assert r.headers["x-floe-origin-bytes"] == "0"
    assert origin_bytes(cached) - b0 == MiB and cached.relay.count("GET") - g0 == 1
    # A read half in the cached span, half before it fetches only the uncached half.
    lo = a - 1000
    r = get(cached.port, key, f"bytes={lo}-{a + 1000}")
    assert r.data == data[lo:a + 1001] and r.headers["x-floe-cache"] == "miss"
    assert int(r.headers["x-floe-origin-bytes"]) == 1000
    assert origin_bytes(cached) - b0 == MiB + 1000
    # A disjoint span in the same block is kept beside the first.
    r = get(cached.port, key, f"bytes={2 * MiB}-{2 * MiB + 4095}")
    assert r.data == data[2 * MiB:2 * MiB + 4096] and origin_bytes(cached) - b0 == MiB + 1000 + 4096
    for lo, hi in ((2 * MiB, 2 * MiB + 4095), (lo, a + MiB - 1)):
        r = get(cached.port, key, f"bytes={lo}-{hi}")
        assert r.data == data[lo:hi + 1] and r.headers["x-floe-cache"] == "hit"


def test_sequential_reads_read_the_block_ahead(cached, direct):
    """A read that starts where a cached span ends fetches the rest of the block with it."""
    data = os.urandom(6 * MiB)
    key = "blocks/seq.parquet"
    direct.put_object(Bucket=BUCKET, Key=key, Body=data)
    b0 = origin_bytes(cached)
    r = get(cached.port, key, "bytes=0-65535")
    assert r.data == data[:65536] and int(r.headers["x-floe-origin-bytes"]) == 65536
    r = get(cached.port, key, "bytes=65536-131071")
    assert r.data == data[65536:131072] and int(r.headers["x-floe-origin-bytes"]) == 2 * MiB - 65536
    # The response ends with its own bytes; the read-ahead may still be arriving: the next read
    # of the block hits it, or waits on it (never fetches again).
    r = get(cached.port, key, f"bytes=131072-{2 * MiB - 1}")
    assert r.data == data[131072:2 * MiB]
    assert origin_bytes(cached) - b0 == 2 * MiB
    r = get(cached.port, key, f"bytes=131072-{2 * MiB - 1}")
    assert r.data == data[131072:2 * MiB] and r.headers["x-floe-cache"] == "hit"
    assert origin_bytes(cached) - b0 == 2 * MiB


def test_a_run_refetches_a_cached_tail_instead_of_a_second_get(cached, direct):
    """A read from a partly cached block on into an uncached one is one origin GET: the cached
    tail in between is fetched again rather than paying a second round trip."""
    data = os.urandom(8 * MiB)
    key = "blocks/tail.parquet"
    direct.put_object(Bucket=BUCKET, Key=key, Body=data)
    r = get(cached.port, key, f"bytes={3 * MiB}-{4 * MiB - 1}")  # the tail of block 1
    assert r.data == data[3 * MiB:4 * MiB]
    b0, g0 = origin_bytes(cached), cached.relay.count("GET")
    lo, hi = 2 * MiB + MiB // 2, 5 * MiB - 1
    r = get(cached.port, key, f"bytes={lo}-{hi}")
    assert r.data == data[lo:hi + 1] and r.headers["x-floe-cache"] == "miss"
    assert cached.relay.count("GET") - g0 == 1
    assert origin_bytes(cached) - b0 == int(r.headers["x-floe-origin-bytes"]) == MiB // 2 + 2 * MiB
    r = get(cached.port, key, f"bytes={lo}-{hi}")
    assert r.data == data[lo:hi + 1] and r.headers["x-floe-cache"] == "hit"


def test_contended_block_serves_every_read(cached, direct):
    """Many reads of different ranges of one cold block at once: each waits on the others'
    fills or fills its own bytes; every one is answered in full."""
    http = urllib3.PoolManager(maxsize=32, retries=False)
    failed = []
    for n in range(12):
        data = os.urandom(6 * MiB)
        key = f"blocks/contended{n}.parquet"
        direct.put_object(Bucket=BUCKET, Key=key, Body=data)
        rnd = random.Random(n)
        ranges = [(lo, lo + rnd.randrange(1, MiB)) for lo in (2 * MiB + rnd.randrange(0, MiB) for _ in range(32))]
        barrier = threading.Barrier(32)

        def one(rng):
            barrier.wait()
            lo, hi = rng
            try:
                r = get(cached.port, key, f"bytes={lo}-{hi}", http)
                return r.status == 206 and r.data == data[lo:hi + 1]
            except urllib3.exceptions.HTTPError:
                return False

        with concurrent.futures.ThreadPoolExecutor(32) as ex:
            failed += [r for r, ok in zip(ranges, ex.map(one, ranges)) if not ok]
    assert failed == []


def test_block_fill_fetches_whole_blocks(minio, direct, tmp_path):
    relay = Relay(minio.port)
    p = start_cached_floe(tmp_path, relay.port, tmp_path / "cache", extra_cache="  fill: block")
    try:
        data = os.urandom(6 * MiB)
        direct.put_object(Bucket=BUCKET, Key="blocks/whole.parquet", Body=data)
        a = 2 * MiB + 12345
        r = get(p.port, "blocks/whole.parquet", f"bytes={a}-{a + 1000}")
        assert r.data == data[a:a + 1001] and int(r.headers["x-floe-origin-bytes"]) == 2 * MiB
        for _ in range(2):  # the first may wait on the rest of the block still arriving
            r = get(p.port, "blocks/whole.parquet", f"bytes={2 * MiB}-{4 * MiB - 1}")
            assert r.data == data[2 * MiB:4 * MiB] and origin_bytes(p) == 2 * MiB
        assert r.headers["x-floe-cache"] == "hit"
    finally:
        p.stop()
        relay.down()


def test_overwrite_through_floe_is_seen(cached, direct):
    s3 = s3_client(cached.port)
    s3.put_object(Bucket=BUCKET, Key="blocks/ow.parquet", Body=b"A" * 3 * MiB)
    assert get(cached.port, "blocks/ow.parquet", "bytes=0-3").data == b"AAAA"
    s3.put_object(Bucket=BUCKET, Key="blocks/ow.parquet", Body=b"B" * 3 * MiB)
    assert get(cached.port, "blocks/ow.parquet", "bytes=0-3").data == b"BBBB"
    s3.delete_object(Bucket=BUCKET, Key="blocks/ow.parquet")
    assert get(cached.port, "blocks/ow.parquet").status == 404


def test_no_response_mixes_versions(cached, direct):
    """Writers overwrite (through Floe and directly at the origin) while readers read ranges
    across block boundaries; every byte of a version is that version's marker."""
    s3 = s3_client(cached.port)
    keys = [f"blocks/mix{i}.bin" for i in range(3)]
    size = 5 * MiB
    for k in keys:
        direct.put_object(Bucket=BUCKET, Key=k, Body=bytes([1]) * size)
    stop = threading.Event()
    version = [1]

    def writer(seed):
        rnd = random.Random(seed)
        while not stop.is_set():
            with threading.Lock():
                version[0] = version[0] % 250 + 1
                v = version[0]
            k = rnd.choice(keys)
            (s3 if rnd.random() < 0.5 else direct).put_object(Bucket=BUCKET, Key=k, Body=bytes([v]) * size)

    reads, mixed, aborted = [0], [0], [0]
    http = urllib3.PoolManager(maxsize=16, retries=False)

    def reader(seed):
        rnd = random.Random(seed)
        while reads[0] < 10_000:
            start = rnd.randrange(0, size - 1)
            end = min(size - 1, start + rnd.choice([10, 5000, MiB, 3 * MiB]))
            try:
                r = get(cached.port, rnd.choice(keys), f"bytes={start}-{end}", http)
                body = r.data
            except (urllib3.exceptions.ProtocolError, urllib3.exceptions.HTTPError):
                aborted[0] += 1
                continue
            if r.status != 206:
                continue
            assert len(body) == end - start + 1
            reads[0] += 1
            if len(set(body)) != 1:
                mixed[0] += 1

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for w in writers:
        w.start()
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(reader, range(8)))
    stop.set()
    for w in writers:
        w.join()
    print(f"\nreads={reads[0]} mixed={mixed[0]} aborted={aborted[0]}")
    assert reads[0] >= 10_000 and mixed[0] == 0


def test_engines_cold_and_warm_match_direct(cached, minio, parquet_key, tmp_path):
    """DuckDB, Polars and PyIceberg through a cold then a warm cache give the direct answers;
    the warm pass makes no origin GET."""
    import polars as pl
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from conftest import CLIENT, ORIGIN_KEY, ORIGIN_SECRET
    from test_clients import duckdb_query

    sql = f"SELECT s, count(*), sum(v) FROM 's3://{BUCKET}/{parquet_key}' GROUP BY s ORDER BY s"
    ref = duckdb_query(minio.port, ORIGIN_KEY, ORIGIN_SECRET, sql)

    def polars_read(port, key, secret):
        return pl.read_parquet(f"s3://{BUCKET}/{parquet_key}", storage_options={
            "aws_endpoint_url": f"http://127.0.0.1:{port}", "aws_access_key_id": key,
            "aws_secret_access_key": secret, "aws_region": "us-east-1", "aws_allow_http": "true"})

    pref = polars_read(minio.port, ORIGIN_KEY, ORIGIN_SECRET)

    def catalog(port, key, secret):
        return SqlCatalog("c", uri=f"sqlite:///{tmp_path}/cat.db", warehouse=f"s3://{BUCKET}/iceberg-cached",
                          **{"s3.endpoint": f"http://127.0.0.1:{port}", "s3.access-key-id": key,
                             "s3.secret-access-key": secret, "s3.region": "us-east-1",
                             "s3.force-virtual-addressing": "false"})

    writer = catalog(minio.port, ORIGIN_KEY, ORIGIN_SECRET)
    writer.create_namespace("cached_ns")
    t = writer.create_table("cached_ns.events", schema=pa.schema([("id", pa.int64()), ("name", pa.string())]))
    t.append(pa.table({"id": pa.array(range(5000), pa.int64()), "name": [f"e{i}" for i in range(5000)]}))
    iref = writer.load_table("cached_ns.events").scan().to_arrow().sort_by("id")

    for attempt in ("cold", "warm"):
        gets = cached.relay.count("GET")
        seen = len(cached.relay.lines)
        assert duckdb_query(cached.port, *CLIENT, sql) == ref, attempt
        assert polars_read(cached.port, *CLIENT).equals(pref), attempt
        via = catalog(cached.port, *CLIENT).load_table("cached_ns.events").scan().to_arrow().sort_by("id")
        assert via.equals(iref), attempt
        if attempt == "warm":
            assert cached.relay.count("GET") == gets, f"warm engines went to the origin: {cached.relay.lines[seen:]}"


def test_put_through_floe_is_read_back_into_the_cache(cached):
    s3 = s3_client(cached.port)
    body = os.urandom(3 * MiB)

    def inserted():
        s = cached.admin("GET", "/stats")
        return s["data"]["inserted"] + s["metadata"]["inserted"]

    before = inserted()
    s3.put_object(Bucket=BUCKET, Key="blocks/wt.parquet", Body=body)
    import time
    deadline = time.monotonic() + 10
    while inserted() < before + 2:  # 3 MiB = two 2 MiB blocks
        assert time.monotonic() < deadline, "write-through warm did not happen"
        time.sleep(0.05)  # polling a counter, bounded by the deadline
    gets = cached.relay.count("GET")
    r = get(cached.port, "blocks/wt.parquet")
    assert r.data == body and r.headers["x-floe-cache"] == "hit"
    assert cached.relay.count("GET") == gets


def test_default_checksum_mode_gets_are_served_from_the_cache(cached, direct, tmp_path):
    """Current boto3 and the AWS CLI send x-amz-checksum-mode: ENABLED on every GetObject. A
    whole-object read is served from blocks with the origin's full-object checksum headers (the
    SDK validates them); a ranged read carries none, as S3 answers."""
    import subprocess
    import sys
    data = os.urandom(3 * MiB + 11)
    direct.put_object(Bucket=BUCKET, Key="cksum/a.parquet", Body=data)  # boto3 adds a CRC32
    want = direct.head_object(Bucket=BUCKET, Key="cksum/a.parquet", ChecksumMode="ENABLED")
    crc = want["ResponseMetadata"]["HTTPHeaders"]["x-amz-checksum-crc32"]
    s3 = s3_client(cached.port)  # SDK defaults: checksum mode on, validation on
    # Two reads: under the shared fixture's DRAM pressure a data block is admitted on its
    # second touch (test_scan_cannot_evict_hot_set_or_metadata).
    for _ in range(2):
        assert s3.get_object(Bucket=BUCKET, Key="cksum/a.parquet")["Body"].read() == data
    before = (cached.relay.count("GET"), cached.relay.count("HEAD"))
    again = s3.get_object(Bucket=BUCKET, Key="cksum/a.parquet")
    assert again["Body"].read() == data  # botocore checks the CRC32 while reading
    h = again["ResponseMetadata"]["HTTPHeaders"]
    assert (h["x-floe-cache"], h["x-amz-checksum-crc32"]) == ("hit", crc)
    ranged = s3.get_object(Bucket=BUCKET, Key="cksum/a.parquet", Range="bytes=10-99")
    assert ranged["Body"].read() == data[10:100]
    assert "x-amz-checksum-crc32" not in ranged["ResponseMetadata"]["HTTPHeaders"]
    head = s3.head_object(Bucket=BUCKET, Key="cksum/a.parquet", ChecksumMode="ENABLED")
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-checksum-crc32"] == crc
    # The AWS CLI at its defaults.
    out = tmp_path / "a.parquet"
    aws_env = dict(os.environ, AWS_ACCESS_KEY_ID=CLIENT[0], AWS_SECRET_ACCESS_KEY=CLIENT[1],
                   AWS_DEFAULT_REGION="us-east-1", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    cli = pathlib.Path(sys.executable).parent / "aws"
    r = subprocess.run([str(cli), "--endpoint-url", f"http://127.0.0.1:{cached.port}", "s3", "cp",
                        f"s3://{BUCKET}/cksum/a.parquet", str(out)], env=aws_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == data
    assert (cached.relay.count("GET"), cached.relay.count("HEAD")) == before, "a cached read went to the origin"
    # Resolved by a ranged read (no checksums in a 206): one HEAD learns them, bytes stay cached.
    small = os.urandom(100_000)
    direct.put_object(Bucket=BUCKET, Key="cksum/b.parquet", Body=small)
    for _ in range(2):
        assert get(cached.port, "cksum/b.parquet", f"bytes=0-{len(small) - 1}").data == small
    gets, heads = cached.relay.count("GET"), cached.relay.count("HEAD")
    whole = s3.get_object(Bucket=BUCKET, Key="cksum/b.parquet")
    assert whole["Body"].read() == small
    assert whole["ResponseMetadata"]["HTTPHeaders"]["x-floe-cache"] == "hit"
    assert "x-amz-checksum-crc32" in whole["ResponseMetadata"]["HTTPHeaders"]
    assert (cached.relay.count("GET"), cached.relay.count("HEAD")) == (gets, heads + 1)


def rss_bytes(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmRSS")


def test_a_fresh_proxy_populates_its_dram_and_fills_take_no_fresh_buffer(minio, direct, tmp_path):
    """cache.populate_dram (default): the pool holds the DRAM ceilings, written, before any
    fill; cold reads of every size then take populated buffers, none allocated fresh."""
    from fleet import wait_until
    relay = Relay(minio.port)
    p = start_cached_floe(tmp_path, relay.port, tmp_path / "cache", data=(64 * MiB, 256 * MiB),
                          meta=(32 * MiB, 64 * MiB))
    try:
        wait_until("the pool populated", lambda: p.admin("GET", "/stats")["buffers"]["populate"] == "done")
        pool = p.admin("GET", "/stats")["buffers"]
        # The data store's room for entries (its ceiling less its disk tier's buffers) and the
        # pool's free bound, in 2 MiB buffers.
        reserve = pool["reserve_bytes"]
        assert 16 * MiB < reserve <= 64 * MiB and reserve - 2 * MiB < pool["populated_bytes"] <= reserve
        assert pool["free_bytes"] == pool["populated_bytes"] and rss_bytes(p.proc.pid) > reserve
        data = os.urandom(9 * MiB)
        direct.put_object(Bucket=BUCKET, Key="blocks/populated.parquet", Body=data)
        for a, b in [(0, 9 * MiB - 1), (3 * MiB + 5, 3 * MiB + 70000), (7 * MiB, 7 * MiB + 300000)]:
            r = get(p.port, "blocks/populated.parquet", f"bytes={a}-{b}")
            assert r.status == 206 and r.data == data[a:b + 1]
        pool = p.admin("GET", "/stats")["buffers"]
        assert pool["fresh"] == 0 and pool["reused"] >= 5, pool
    finally:
        p.stop()
        relay.down()


def test_populate_dram_false_leaves_the_pool_to_grow_with_the_cache(minio, tmp_path):
    relay = Relay(minio.port)
    p = start_cached_floe(tmp_path, relay.port, tmp_path / "cache", extra_cache="  populate_dram: false")
    try:
        pool = p.admin("GET", "/stats")["buffers"]
        assert (pool["populate"], pool["reserve_bytes"], pool["populated_bytes"]) == ("off", 0, 0)
    finally:
        p.stop()
        relay.down()


def test_jemalloc_returns_freed_pages_within_a_quarter_second_from_its_own_threads(minio, tmp_path):
    """floe-proxy as built (`.cargo/config.toml`): jemalloc with an arena per CPU, purging from
    background threads, freed pages returned after a quarter second (10 s by default held
    100-150 MiB of the disk tier's churn as dirty pages: load/PERFORMANCE.md). The settings
    are read as jemalloc prints them at exit, the threads from /proc."""
    relay = Relay(minio.port)
    p = start_cached_floe(tmp_path, relay.port, tmp_path / "cache", _RJEM_MALLOC_CONF="stats_print:true")
    try:
        threads = thread_names(p.proc.pid)
        assert "jemalloc_bg_thd" in threads, sorted(threads)
        p.proc.send_signal(signal.SIGINT)  # pingora's fast shutdown: jemalloc prints at exit
        assert p.proc.wait(30) == 0
        log = (tmp_path / "floe.log").read_bytes().decode("utf-8", "replace")
        for opt in ('opt.percpu_arena: "percpu"', "opt.background_thread: true",
                    "opt.dirty_decay_ms: 250", "opt.muzzy_decay_ms: 0"):
            assert opt in log, opt
    finally:
        p.stop()
        relay.down()


def thread_names(pid):
    """The names of a process's threads (one that exits while they are read is left out)."""
    names = set()
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            names.add((task / "comm").read_text().strip())
        except OSError:
            pass
    return names
