#!/usr/bin/env python3
"""Fleet benchmark: peer hit vs local hit latency, and one node vs three on the same request
list (throughput and origin bytes), in one run. MinIO behind toxiproxy (30 ms per request, as
S3), release floe-proxy nodes on 127.0.0.1. Writes the "Fleet" section of load/PERFORMANCE.md
(replacing it; the rest of the file is bench.py's).

Run with load/bench.sh (after bench.py), or alone once bench.sh has installed everything:
  FLOE_BIN=$CARGO_TARGET_DIR/release/floe-proxy $FLOE_CACHE/venv/bin/python load/fleet_bench.py
"""
import concurrent.futures
import os
import shutil
import pathlib
import platform
import random
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "load"))
os.environ.setdefault("FLOE_BIN", str(pathlib.Path(os.environ.get(
    "CARGO_TARGET_DIR", pathlib.Path.home() / ".cache" / "floe" / "target")) / "release" / "floe-proxy"))
import bench  # noqa: E402  (MinIO and toxiproxy helpers)
import conftest  # noqa: E402
from fleet import Node, wait_until  # noqa: E402
from relay import Relay  # noqa: E402
from test_blocks import get  # noqa: E402
from test_sigv4 import sign  # noqa: E402,F401
from perfdoc import write_section  # noqa: E402

MiB = 1 << 20
MARK = "<!-- fleet section: written by load/fleet_bench.py -->"
END = "<!-- fleet section end -->"


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def start_nodes(tmp, relay_port, n):
    peers = [conftest.free_port() for _ in range(n)]
    nodes = [Node(tmp, f"bench-{n}-{i}", relay_port, peers[i], [p for p in peers if p != peers[i]])
             for i in range(n)]
    names = {nd.name for nd in nodes}
    for nd in nodes:
        wait_until("the fleet", lambda nd=nd: set(nd.view()) == names)
    return nodes


def latency(nodes, s3, keys=120):
    """6 MiB Parquet files (blocks 0-1 in the data store, the footer's block in the metadata
    store). Block 0 of each is read once through node B; those B filled itself (it owns them)
    are measured: 256 KiB ranges of block 0 read through B (local hits) and, each for the first
    time, through A (peer hits: A asks B)."""
    a, b = nodes[0], nodes[1]
    owned = []
    for i in range(keys):
        key = f"fleet-bench/lat/{i:05d}.parquet"
        s3.put_object(Bucket=conftest.BUCKET, Key=key, Body=os.urandom(6 * MiB))
        r = get(b.port, key, "bytes=0-2097151")
        if r.headers["x-floe-cache"] == "miss":
            owned.append(key)
    local, peer, labels = [], [], {}
    for key in owned:
        for nd, out in ((b, local), (a, peer)):
            t = time.perf_counter()
            r = get(nd.port, key, "bytes=524288-786431")
            out.append(time.perf_counter() - t)
            assert r.status == 206 and len(r.data) == 262144
            lab = (nd.name, r.headers["x-floe-cache"])
            labels[lab] = labels.get(lab, 0) + 1
    return {"local": local, "peer": peer, "labels": labels}


def workload(keys, sizes, n=600, seed=7):
    rnd = random.Random(seed)
    reqs = []
    for _ in range(n):
        k = rnd.choice(keys)
        lo = rnd.randrange(0, sizes[k] - MiB)
        reqs.append((k, f"bytes={lo}-{lo + MiB - 1}"))
    return reqs


def run(nodes, reqs, clients=12):
    lat = []

    def one(i):
        k, rng = reqs[i]
        nd = nodes[i % len(nodes)]
        t = time.perf_counter()
        r = get(nd.port, k, rng)
        lat.append(time.perf_counter() - t)
        return r.status == 206 and len(r.data) == MiB

    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as ex:
        ok = list(ex.map(one, range(len(reqs))))
    wall = time.perf_counter() - t
    assert all(ok)
    return {"rps": len(reqs) / wall, "mib_s": len(reqs) / wall, "p50": pct(lat, 0.5), "p99": pct(lat, 0.99)}


def main():
    bench.WORK.mkdir(parents=True, exist_ok=True)
    minio, s3 = bench.start_minio()
    toxi, toxi_port = bench.start_toxiproxy(minio.port)
    if conftest.BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=conftest.BUCKET)
    tmp = bench.WORK / f"fleet-{int(time.time())}"
    procs = []
    try:
        relay = Relay(toxi_port)
        nodes = start_nodes(tmp / "lat", relay.port, 2)
        procs += nodes
        lat = latency(nodes, s3)
        for nd in nodes:
            nd.stop()
        keys = [f"fleet-bench/tp/{i:03d}.parquet" for i in range(24)]
        sizes = {}
        for i, k in enumerate(keys):
            sizes[k] = 8 * MiB + 4096 * i
            s3.put_object(Bucket=conftest.BUCKET, Key=k, Body=os.urandom(sizes[k]))
        reqs = workload(keys, sizes)
        tp = {}
        for n in (1, 3):
            relay = Relay(toxi_port)
            nodes = start_nodes(tmp / f"tp{n}", relay.port, n)
            procs += nodes
            sent = relay.sent()
            gets = relay.count("GET")
            cold = run(nodes, reqs)
            origin = {"gets": relay.count("GET") - gets, "bytes": sum(
                nd.admin("GET", "/stats")["data"]["origin_bytes"] + nd.admin("GET", "/stats")["metadata"]["origin_bytes"]
                for nd in nodes)}
            warm = run(nodes, reqs)
            tp[n] = {"cold": cold, "warm": warm, "origin": origin, "sent": relay.sent() - sent}
            for nd in nodes:
                nd.stop()
    finally:
        for nd in procs:
            nd.stop()
        toxi.stop()
        minio.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # each node's cache files, a GiB or more
    report(lat, tp)


def report(lat, tp):
    lp50, lp99 = pct(lat["local"], 0.5), pct(lat["local"], 0.99)
    pp50, pp99 = pct(lat["peer"], 0.5), pct(lat["peer"], 0.99)
    lines = [MARK, "", "## Fleet", "",
             f"Produced by `load/fleet_bench.py` (run by `load/bench.sh`) on {time.strftime('%Y-%m-%d')}"
             f" ({platform.machine()}, {os.cpu_count()} cores; every node, the client and the origin share the"
             " machine). Release floe-proxy nodes on 127.0.0.1, 2 MiB blocks, origin MinIO behind toxiproxy"
             " (+30 ms per request).", "",
             f"### Peer hit vs local hit ({len(lat['local'])} 256 KiB ranged GETs each, one client, one at a time)", "",
             "| read | p50 ms | p99 ms |", "|---|---:|---:|",
             f"| local hit (the owner's own client) | {lp50:.2f} | {lp99:.2f} |",
             f"| peer hit (another node asks the owner) | {pp50:.2f} | {pp99:.2f} |",
             f"| difference | {pp50 - lp50:.2f} | {pp99 - lp99:.2f} |", "",
             f"Labels seen: {', '.join(f'{n} {lab}: {c}' for (n, lab), c in sorted(lat['labels'].items()))}.", "",
             "### One node vs three, same request list (600 x 1 MiB ranges over 24 x 8 MiB files, 12 clients,"
             " round-robin over the nodes)", "",
             "| nodes | pass | req/s | p50 ms | p99 ms | origin GETs | origin MiB |", "|---:|---|---:|---:|---:|---:|---:|"]
    for n, r in tp.items():
        for name in ("cold", "warm"):
            x = r[name]
            og = r["origin"]["gets"] if name == "cold" else 0
            ob = r["origin"]["bytes"] / MiB if name == "cold" else 0
            lines.append(f"| {n} | {name} | {x['rps']:.1f} | {x['p50']:.1f} | {x['p99']:.1f} | {og} | {ob:.1f} |")
    ratio = tp[3]["origin"]["bytes"] / max(1, tp[1]["origin"]["bytes"])
    lines += ["", f"Origin bytes, three nodes / one node: {ratio:.2f}x (goal 1x: each block is fetched once"
              " fleet-wide, whichever node a client reached). The warm pass makes no origin request.", ""]
    lines.append(END)
    write_section(MARK, END, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
