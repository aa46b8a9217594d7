#!/usr/bin/env python3
"""Does a fleet's DRAM add up? A set twice one node's data DRAM (48 x 8 MiB objects; nodes with
256 MiB of data DRAM, 64 MiB of disk so the disk tier holds little), random 1 MiB ranges read
through every node in turn by 8 clients, four passes of the same 1,200 requests: origin MiB per
pass (the nodes' /stats data.origin_bytes), the passes' wall time (MinIO on this machine: an
origin byte costs far less than S3's) and what each node holds at the end. Once through one
node, then through three; with --build NAME=PATH for each build to compare, side by side.
Prints, writes nothing.

    FLOE_CACHE=~/.cache/floe ~/.cache/floe/venv/bin/python load/capacity_bench.py \
        [--build main=$CARGO_TARGET_DIR/release/floe-proxy --build base=...] [--nodes 1,3]
"""
import argparse
import os
import pathlib
import random
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "load"))
DEFAULT_BIN = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", pathlib.Path.home() / ".cache" / "floe" / "target"))
os.environ.setdefault("FLOE_BIN", str(DEFAULT_BIN / "release" / "floe-proxy"))
import bench  # noqa: E402  (MinIO helper)
import conftest  # noqa: E402
import urllib3  # noqa: E402
import fleet  # noqa: E402
from fleet import Node, wait_until  # noqa: E402
from relay import Relay  # noqa: E402
from test_sigv4 import sign  # noqa: E402

OBJECTS, SIZE, RANGE, REQUESTS, CLIENTS, PASSES = 48, 8 << 20, 1 << 20, 1200, 8, 4
DATA_DRAM, DATA_DISK = 256 << 20, 64 << 20
BUCKET = conftest.BUCKET
HTTP = urllib3.PoolManager(maxsize=CLIENTS * 2, retries=False)


def start_fleet(work, relay_port, count, binary):
    fleet.FLOE_BIN = pathlib.Path(binary)  # what Node starts
    peers = [conftest.free_port() for _ in range(count)]
    nodes = [Node(work, f"cap-{i}", relay_port, peers[i], [p for j, p in enumerate(peers) if j != i],
                  data_dram=DATA_DRAM, data_disk=DATA_DISK) for i in range(count)]
    names = {n.name for n in nodes}
    for n in nodes:
        wait_until("the fleet", lambda n=n: set(n.view()) == names, timeout=60)
    return nodes


def one_pass(nodes, reqs):
    """Every request once, the i-th through node i mod N; returns the errors."""
    todo, lock, errors = iter(range(len(reqs))), threading.Lock(), []

    def client():
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            key, off = reqs[i]
            node = nodes[i % len(nodes)]
            url = f"http://127.0.0.1:{node.port}/{BUCKET}/{key}"
            signed = sign("GET", url, headers={"Range": f"bytes={off}-{off + RANGE - 1}"})
            r = HTTP.request("GET", url, headers=dict(signed.headers), timeout=60)
            if r.status != 206 or len(r.data) != RANGE:
                errors.append(f"{node.name} {key}@{off}: {r.status}, {len(r.data)} bytes")

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def run(work, relay_port, count, name, binary, reqs):
    nodes = start_fleet(work / f"{name}-{count}", relay_port, count, binary)
    try:
        origin = lambda: sum(n.admin("GET", "/stats")["data"]["origin_bytes"] for n in nodes)  # noqa: E731
        per_pass, seconds = [], []
        for _ in range(PASSES):
            before, t0 = origin(), time.perf_counter()
            errors = one_pass(nodes, reqs)
            seconds.append(time.perf_counter() - t0)
            if errors:
                raise SystemExit(f"{name}, {count} nodes: {len(errors)} errors, first {errors[0]}")
            per_pass.append((origin() - before) / 2**20)
        held = [n.admin("GET", "/stats")["data"] for n in nodes]
    finally:
        for n in nodes:
            n.stop()
    passes = " / ".join(f"{m:.0f}" for m in per_pass)
    entries = ", ".join(str(d["dram_entries"]) for d in held)
    warm = sum(seconds[1:]) / (PASSES - 1)
    print(f"| {name} | {count} | {passes} | {REQUESTS * RANGE >> 20} | {warm:.2f} | {entries} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="append", default=[], help="NAME=PATH of a floe-proxy")
    ap.add_argument("--nodes", default="1,3")
    args = ap.parse_args()
    builds = [b.split("=", 1) for b in args.build] or [["main", os.environ["FLOE_BIN"]]]
    work = conftest.CACHE / "capacity" / str(int(time.time()))
    minio, s3 = bench.minio_in(work, BUCKET)
    relay = Relay(minio.port)
    try:
        for k in range(OBJECTS):
            s3.put_object(Bucket=BUCKET, Key=f"cap/{k:03d}", Body=os.urandom(SIZE))
        rng = random.Random(1)
        reqs = [(f"cap/{rng.randrange(OBJECTS):03d}", rng.randrange(SIZE // RANGE) * RANGE)
                for _ in range(REQUESTS)]
        print("| build | nodes | origin MiB, passes 1-4 | MiB served a pass | s a pass (2-4) | DRAM blocks a node at the end |")
        print("|---|---:|---|---:|---:|---|")
        for count in (int(c) for c in args.nodes.split(",")):
            for name, binary in builds:
                run(work, relay.port, count, name, binary, reqs)
    finally:
        relay.down()
        minio.stop()


if __name__ == "__main__":
    main()
