#!/usr/bin/env python3
"""The cold path alone, two floe-proxy builds side by side: each pass reads one list of random
ranged GETs (16 clients, 1 MiB and 64 KiB, 5,000 reads of the 16 x 128 MiB set) through a fresh
Floe of each build in turn, behind the same MinIO + toxiproxy (+30 ms) as load/bench.sh, and
prints throughput, p50 and Floe's CPU per GiB served. For measuring one cold-path change in a
few minutes (load/bench.sh is the full run). Prints, writes nothing.

Run after load/bench.sh has installed its tools once:
    FLOE_CACHE=~/.cache/floe ~/.cache/floe/venv/bin/python load/cold_bench.py \\
        --build before=/path/to/old/floe-proxy --build after=/path/to/new/floe-proxy
"""
import argparse
import pathlib
import random
import statistics

import bench

MiB = 1 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="append", required=True, metavar="NAME=PATH",
                    help="a floe-proxy binary to run (give two or more)")
    ap.add_argument("--nginx", action="store_true",
                    help="also run nginx proxy_cache's cold row (load/bench.sh's) in each pass, the peer")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--size", choices=["64KiB", "1MiB"], help="one read size only")
    ap.add_argument("--perf", action="store_true",
                    help="then profile the last build's cold row (perf.data under the bench's work dir)")
    args = ap.parse_args()
    builds = [(b.split("=", 1)[0], pathlib.Path(b.split("=", 1)[1])) for b in args.build]
    if args.nginx:
        builds.append(("nginx", None))
    bench.WORK.mkdir(parents=True, exist_ok=True)
    procs = []
    try:
        minio, s3 = bench.start_minio()
        procs.append(minio)
        objs = bench.make_parquet_set(s3, 16, 128 * MiB)
        toxi, origin = bench.start_toxiproxy(minio.port)
        procs.append(toxi)
        bench.run_once(origin, bench.whole_reads(objs), 8)  # MinIO's page cache warm for all
        # A first Floe's cold row ran at a fraction of the later ones' speed whichever build it
        # was (the machine warming up): one row of the first build, not counted.
        bench.FLOE_RELEASE = builds[0][1]
        floe = bench.start_floe(origin)
        bench.run_once(floe.port, bench.ranges(random.Random(199), objs, MiB, bench.LIST), 16, bench.SECONDS)
        floe.stop()
        rows = {}
        for p in range(args.passes):
            rnd = random.Random(200 + p)
            for label, size in (("1MiB", MiB), ("64KiB", 64 << 10)):
                reqs = bench.ranges(rnd, objs, size, bench.LIST)
                if args.size and args.size != label:
                    continue
                # Each pass turns the builds' order round, so neither always runs first.
                for name, binary in builds[p % len(builds):] + builds[:p % len(builds)]:
                    r = cold_row(name, binary, origin, reqs, [minio, toxi])
                    r["cpu_s_per_gib"] = bench.cpu_per_gib(r)
                    rows.setdefault((label, name), []).append(r)
        if args.perf:
            builds = [b for b in builds if b[1]]
            size = 64 << 10 if args.size == "64KiB" else MiB
            floe = bench.start_floe(origin)  # bench.FLOE_RELEASE: the last build run
            reqs = bench.ranges(random.Random(300), objs, size, bench.LIST)
            try:
                _, top = bench.profiled(floe.proc.pid, lambda: bench.run_once(floe.port, reqs, 16, bench.SECONDS))
            finally:
                floe.stop()
            print(top, flush=True)
        for (label, name), rs in rows.items():
            m = lambda f: statistics.median(r[f] for r in rs)
            each = ", ".join("%.2f" % r["cpu_s_per_gib"] for r in rs)
            fetched = (f"origin/served {statistics.median(r['origin_mib'] * MiB / r['bytes'] for r in rs):.2f}"
                      if rs[0]["origin_mib"] is not None else "")
            print(f"{label} {name:>8}: {m('mib_s'):7.1f} MiB/s ({min(r['mib_s'] for r in rs):.1f}-"
                  f"{max(r['mib_s'] for r in rs):.1f}) p50 {m('p50_ms'):.1f} ms, CPU s per GiB "
                  f"{m('cpu_s_per_gib'):.2f} ({each}), {fetched}",
                  flush=True)
    finally:
        for p in reversed(procs):
            p.stop()


def cold_row(name, binary, origin, reqs, origin_procs):
    """One cold row through a fresh proxy: a Floe build (`binary`; once its pool is populated,
    bench.start_floe waits) or nginx (`binary` None)."""
    if binary is None:
        proxy = bench.start_nginx(origin)
        try:
            return bench.measure("nginx cold", proxy.port, reqs, 16, origin_procs, proxy)
        finally:
            proxy.stop()
    bench.FLOE_RELEASE = binary
    floe = bench.start_floe(origin)
    try:
        r = bench.measure(f"{name} cold", floe.port, reqs, 16, origin_procs, floe, floe)
    finally:
        floe.stop()
    print(f"    ({name}: pool populated in {floe.populate_s:.1f} s before the row)", flush=True)
    return r


if __name__ == "__main__":
    main()
