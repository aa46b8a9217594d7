"""Block cache lifecycle against a real origin: restart after kill -9 serves the warm set with
no origin data requests, a block corrupted on disk is refetched, a one-touch scan cannot push
out the hot set or the metadata store, ceilings hold, and the admin API warms and purges."""
import os
import pathlib
import random
import signal
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import ADMIN_TOKEN, BUCKET, start_cached_floe
from relay import Relay
from test_blocks import get

MiB = 1 << 20


@pytest.fixture
def relay(minio):
    r = Relay(minio.port)
    yield r
    r.down()


@pytest.fixture
def started():
    """Starts cached floe-proxy processes and stops them at teardown, even when a test fails."""
    procs = []

    def start(*args, **kwargs):
        p = start_cached_floe(*args, **kwargs)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.proc.poll() is None:
            p.stop()


def wait_flushed(p, store, at_least):
    """Polls the admin stats until the store's disk tier has written `at_least` bytes."""
    deadline = time.monotonic() + 30
    while p.admin("GET", "/stats")[store]["disk_write_bytes"] < at_least:
        assert time.monotonic() < deadline, p.admin("GET", "/stats")
        time.sleep(0.05)  # polling a counter, bounded by the deadline


def kill9(p):
    p.proc.send_signal(signal.SIGKILL)
    p.proc.wait(10)


def test_restart_serves_warm_set_without_origin_and_refetches_corrupt_blocks(relay, direct, tmp_path, started):
    files = {"t/data/a.parquet": os.urandom(5 * MiB), "t/data/b.parquet": os.urandom(3 * MiB + 7),
             "t/metadata/00001-0a1b2c3d-1111-2222-3333-444455556666.metadata.json": os.urandom(40_000)}
    for k, v in files.items():
        direct.put_object(Bucket=BUCKET, Key=k, Body=v)
    cache_dir = tmp_path / "cache"
    (tmp_path / "a").mkdir()
    a = started(tmp_path / "a", relay.port, cache_dir)
    for k, v in files.items():
        assert get(a.port, k).data == v
    # Parquet footer blocks (the last block of each file) live in the metadata store.
    wait_flushed(a, "data", 6 * MiB)
    wait_flushed(a, "metadata", 2 * MiB + 40_000)
    # Byte counts can be reached before the small mapping records are written: settle first.
    a.admin("POST", "/settle")
    kill9(a)

    (tmp_path / "b").mkdir()
    b = started(tmp_path / "b", relay.port, cache_dir)
    before = (relay.count("GET"), relay.count("HEAD"))
    for k, v in files.items():
        r = get(b.port, k)
        assert r.data == v and r.headers["x-floe-cache"] == "hit", (k, r.headers.get("x-floe-cache"))
    assert (relay.count("GET"), relay.count("HEAD")) == before, "warm restart went to the origin"
    b.stop()

    # Corrupt the data store's disk tier on purpose, then restart: bytes must still be right.
    for f in (cache_dir / "data").rglob("*"):
        if f.is_file() and f.stat().st_size > 2 * MiB:
            with open(f, "r+b") as fh:
                for off in range(4096, min(f.stat().st_size, 64 * MiB), 256 * 1024):
                    fh.seek(off)
                    fh.write(b"\xde\xad\xbe\xef" * 16)
    (tmp_path / "c").mkdir()
    c = started(tmp_path / "c", relay.port, cache_dir)
    before = relay.count("GET")
    for k, v in files.items():
        assert get(c.port, k).data == v
    assert relay.count("GET") > before, "corrupted blocks must be refetched"
    c.stop()


def test_scan_cannot_evict_hot_set_or_metadata(relay, direct, tmp_path, started):
    # Data store: 16 MiB DRAM, 64 MiB disk. The scan reads 10x that (800 MiB) once.
    p = started(tmp_path, relay.port, tmp_path / "cache", data=(16 * MiB, 64 * MiB), meta=(16 * MiB, 64 * MiB))
    hot = {f"hot/h{i}.bin": os.urandom(2 * MiB) for i in range(3)}
    meta = {f"t/metadata/snap-{i}-1-abc.avro": os.urandom(100_000) for i in range(5)}
    for k, v in {**hot, **meta}.items():
        direct.put_object(Bucket=BUCKET, Key=k, Body=v)
    for _ in range(2):
        for k in list(hot) + list(meta):
            get(p.port, k)
    scan_obj = os.urandom(8 * MiB)
    for i in range(100):
        direct.put_object(Bucket=BUCKET, Key=f"scan/s{i}.bin", Body=scan_obj)
    for i in range(100):
        assert len(get(p.port, f"scan/s{i}.bin").data) == 8 * MiB
    print("\nafter scan", p.admin("GET", "/stats"))
    hits = sum(get(p.port, k).headers["x-floe-cache"] == "hit" for k in hot)
    assert hits / len(hot) >= 0.9, f"hot set hits {hits}/{len(hot)}"
    assert all(get(p.port, k).headers["x-floe-cache"] == "hit" for k in meta), "metadata store lost entries"
    s = p.admin("GET", "/stats")
    assert s["data"]["admissions_rejected"] > 0
    p.stop()


def test_ceilings_hold_under_random_workload(relay, direct, tmp_path, started):
    data_cap, meta_cap = (16 * MiB, 64 * MiB), (8 * MiB, 64 * MiB)
    p = started(tmp_path, relay.port, tmp_path / "cache", data=data_cap, meta=meta_cap)
    rnd = random.Random(7)
    keys = []
    for i in range(30):
        k = rnd.choice(["r/data/f{}.parquet", "r/metadata/snap-{}-1-x.avro", "r/other/{}.bin"]).format(i)
        direct.put_object(Bucket=BUCKET, Key=k, Body=os.urandom(rnd.randrange(1, 6 * MiB)))
        keys.append(k)
    for _ in range(300):
        k = rnd.choice(keys)
        a = rnd.randrange(0, MiB)
        get(p.port, k, f"bytes={a}-{a + rnd.randrange(1, 4 * MiB)}")
        s = p.admin("GET", "/stats") if rnd.random() < 0.1 else None
        if s:
            assert s["data"]["dram_usage_bytes"] <= data_cap[0]
            assert s["metadata"]["dram_usage_bytes"] <= meta_cap[0]
    s = p.admin("GET", "/stats")
    assert s["data"]["dram_usage_bytes"] <= data_cap[0] and s["metadata"]["dram_usage_bytes"] <= meta_cap[0]
    # Range fills keep partial blocks (each holding only what reads fetched), so the entry count
    # is bounded by bytes held, not by whole blocks.
    assert 0 < s["data"]["dram_entries"] and s["data"]["dram_usage_bytes"] > 0
    assert s["data"]["evictions"] + s["data"]["admissions_rejected"] > 0, "the workload overflows DRAM"
    for store, cap in (("data", data_cap[1]), ("metadata", meta_cap[1])):
        on_disk = sum(f.stat().st_blocks * 512 for f in (tmp_path / "cache" / store).rglob("*") if f.is_file())
        assert on_disk <= cap, f"{store} disk {on_disk} > {cap}"
    p.stop()


def test_admin_warm_purge_and_token(relay, direct, tmp_path, started):
    p = started(tmp_path, relay.port, tmp_path / "cache")
    body = os.urandom(3 * MiB)
    direct.put_object(Bucket=BUCKET, Key="adm/x.parquet", Body=body)
    assert p.admin("POST", f"/warm?bucket={BUCKET}&key=adm/x.parquet")["bytes"] == len(body)
    before = relay.count("GET")
    r = get(p.port, "adm/x.parquet")
    assert r.data == body and r.headers["x-floe-cache"] == "hit" and relay.count("GET") == before
    assert p.admin("POST", f"/purge?bucket={BUCKET}&key=adm/x.parquet")["blocks"] == 2
    assert get(p.port, "adm/x.parquet").headers["x-floe-cache"] == "miss"
    warmed = p.admin("POST", f"/warm?bucket={BUCKET}&key=adm/x.parquet&range=0-99&store=metadata")
    assert warmed["bytes"] == 2 * MiB
    req = urllib.request.Request(f"http://127.0.0.1:{p.admin_port}/stats", headers={"Authorization": "Bearer wrong"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 401
    p.stop()


def test_delete_objects_through_floe_survives_restart(relay, direct, tmp_path, started):
    """DeleteObjects drops exactly the keys it names, in memory and persisted: after a restart a
    deleted immutable file answers NoSuchKey, and the file it did not name is still a hit."""
    from conftest import s3_client
    gone, kept = "delobjs/data/gone & <odd>.parquet", "delobjs/data/kept.parquet"
    bodies = {gone: os.urandom(MiB + 5), kept: os.urandom(MiB + 9)}
    for k, v in bodies.items():
        direct.put_object(Bucket=BUCKET, Key=k, Body=v)
    cache_dir = tmp_path / "cache"
    (tmp_path / "a").mkdir()
    a = started(tmp_path / "a", relay.port, cache_dir)
    for k, v in bodies.items():
        assert get(a.port, urllib.parse.quote(k)).data == v
    wait_flushed(a, "metadata", 2 * MiB)
    out = s3_client(a.port).delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": gone}]})
    assert [d["Key"] for d in out["Deleted"]] == [gone]
    assert get(a.port, urllib.parse.quote(kept)).headers["x-floe-cache"] == "hit"
    a.stop()
    # The cache plugin's background service settles the disk writes on SIGTERM.
    assert b"block cache writes settled for shutdown" in (tmp_path / "a" / "floe.log").read_bytes()

    (tmp_path / "b").mkdir()
    b = started(tmp_path / "b", relay.port, cache_dir)
    r = get(b.port, urllib.parse.quote(gone))
    assert r.status == 404 and b"<Code>NoSuchKey</Code>" in r.data, (r.status, r.headers)
    before = relay.count("GET")
    r = get(b.port, urllib.parse.quote(kept))
    assert r.data == bodies[kept] and r.headers["x-floe-cache"] == "hit"
    assert relay.count("GET") == before
