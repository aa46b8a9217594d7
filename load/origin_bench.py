#!/usr/bin/env python3
"""What a cold row costs the origin, per proxy: one list of random ranged GETs (5,000 reads of
the 16 x 128 MiB set, as load/bench.sh's rows) through a fresh proxy of each build (and nginx
proxy_cache with --nginx), behind the same MinIO + toxiproxy (+30 ms), printing throughput,
p50, the origin GETs MinIO's audit log saw between two marks (count, bytes, sizes in 256 KiB
buckets), MinIO's and toxiproxy's CPU apart, and the proxy's CPU per GiB served. Each pass turns
the builds' order round. Prints, writes nothing.

Run after load/bench.sh has installed its tools once:
    FLOE_CACHE=~/.cache/floe ~/.cache/floe/venv/bin/python load/origin_bench.py \\
        --build before=/path/to/old/floe-proxy --build after=/path/to/new/floe-proxy --nginx
"""
import argparse
import collections
import os
import pathlib
import random

import bench

MiB = 1 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="append", default=[], metavar="NAME=PATH", help="a floe-proxy binary")
    ap.add_argument("--nginx", action="store_true", help="nginx proxy_cache's row too, the peer")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--size", choices=["64KiB", "1MiB"], help="one read size only")
    args = ap.parse_args()
    builds = [(b.split("=", 1)[0], pathlib.Path(b.split("=", 1)[1])) for b in args.build]
    builds += [("nginx", None)] if args.nginx else []
    bench.WORK.mkdir(parents=True, exist_ok=True)
    minio, s3 = bench.start_minio()
    toxi = None
    try:
        objs = bench.make_parquet_set(s3, 16, 128 * MiB)
        toxi, origin = bench.start_toxiproxy(minio.port)
        bench.run_once(origin, bench.whole_reads(objs), 8)  # MinIO's page cache warm for all
        for p in range(args.passes):
            for label, size in (("64KiB", 64 << 10), ("1MiB", MiB)):
                if args.size and args.size != label:
                    continue
                reqs = bench.ranges(random.Random(500 + p), objs, size, bench.LIST)
                for name, binary in builds[p % len(builds):] + builds[:p % len(builds)]:
                    print(f"{label} {args.clients}c {name}: " + row(binary, origin, reqs, args.clients, minio, toxi),
                          flush=True)
    finally:
        if toxi:
            toxi.stop()
        minio.stop()


def row(binary, origin, reqs, clients, minio, toxi):
    """One cold row through a fresh proxy (`binary` None: nginx), as one line."""
    if binary:
        bench.FLOE_RELEASE = binary
    proxy = bench.start_floe(origin) if binary else bench.start_nginx(origin)
    try:
        os.sync()
        mark = bench.AUDIT.mark(bench.MARK_S3)
        cpu0 = [bench.cpu_s(x.proc.pid) for x in (minio, toxi, proxy)]
        r = bench.run_once(proxy.port, reqs, clients, bench.SECONDS)
        cpu = [bench.cpu_s(x.proc.pid) - c for x, c in zip((minio, toxi, proxy), cpu0)]
        end = bench.AUDIT.mark(bench.MARK_S3)
    finally:
        proxy.stop()
    with bench.AUDIT.lock:
        gets = [tx for api, _, tx, _ in bench.AUDIT.entries[mark + 1:end] if api == "GetObject"]
    sizes = sorted(collections.Counter(min(tx // (256 << 10), 16) for tx in gets).items())
    return (f"{r['mib_s']:.1f} MiB/s p50 {r['p50_ms']:.1f} ms ({r['requests']} reads); origin GETs {len(gets)}"
            f" ({sum(gets) / MiB:.0f} MiB; sizes in 256 KiB buckets {sizes}); CPU s MinIO {cpu[0]:.2f}"
            f" toxiproxy {cpu[1]:.2f}; proxy CPU s per GiB {cpu[2] / max(r['bytes'] / (1 << 30), 1e-9):.2f}")


if __name__ == "__main__":
    main()
