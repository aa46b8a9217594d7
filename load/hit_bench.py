#!/usr/bin/env python3
"""The warm hit path alone: Floe and nginx proxy_cache side by side, both warm, answering the
same random ranged GETs (16 clients, 64 KiB and 1 MiB) over a 128 MiB set, three passes of
10 s each; with --perf, where Floe's CPU goes on 64 KiB hits. For measuring one hit-path change
at a time in a couple of minutes (load/bench.sh is the full run). Prints, writes nothing.

--client-reads 0,262144 runs every row once per client read size in each pass (0: load/loadgen's
default, io.Discard's 8 KiB reads; N: LOADGEN_READ_BYTES=N), and prints the client's own CPU
per request beside the proxy's: on a machine the client shares with the proxy, how much of a
warm ratio is the client's.

Run after load/bench.sh has installed its tools once:
    FLOE_CACHE=~/.cache/floe ~/.cache/floe/venv/bin/python load/hit_bench.py [--perf]
"""
import argparse
import os
import random
import resource
import statistics

import bench

MiB = 1 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--perf", action="store_true")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--only", choices=["floe", "nginx"], help="one proxy only")
    ap.add_argument("--size", choices=["64KiB", "1MiB"], help="one read size only")
    ap.add_argument("--client-reads", default="0", help="client read sizes, comma-separated (0: default)")
    args = ap.parse_args()
    client_reads = [int(v) for v in args.client_reads.split(",")]
    bench.WORK.mkdir(parents=True, exist_ok=True)
    procs = []
    try:
        minio, s3 = bench.start_minio()
        procs.append(minio)
        keys = []
        for i in range(4):
            k = f"hit/part-{i}.bin"
            try:
                s3.head_object(Bucket=bench.BUCKET, Key=k)
            except Exception:
                s3.put_object(Bucket=bench.BUCKET, Key=k, Body=os.urandom(32 * MiB))
            keys.append((k, 32 * MiB))
        nginx = bench.start_nginx(minio.port)
        procs.append(nginx)
        floe = bench.start_floe(minio.port)
        procs.append(floe)
        rnd = random.Random(1)
        for size, label in ((64 << 10, "64KiB"), (MiB, "1MiB")):
            reqs = bench.ranges(rnd, keys, size, 2000)
            if args.size and args.size != label:
                continue
            rows = {}
            for name, p in (("nginx", nginx), ("floe", floe)):
                if args.only and args.only != name:
                    continue
                bench.run_once(p.port, reqs, 16)  # fills the cache
                bench.run_once(p.port, reqs, 16)  # nginx caches on the second touch of a slice too
            for _ in range(args.passes):  # the proxies and client settings alternate in each pass
                for name, p in (("nginx", nginx), ("floe", floe)):
                    if args.only and args.only != name:
                        continue
                    for read_bytes in client_reads:
                        rows.setdefault((name, read_bytes), []).append(timed_pass(p, reqs, read_bytes))
            for (name, read_bytes), rs in rows.items():
                m = lambda f: statistics.median(r[f] for r in rs)
                client = f" client reads {read_bytes}" if len(client_reads) > 1 else ""
                print(f"{label} {name:5}{client}: {m('mib_s'):8.1f} MiB/s ({min(r['mib_s'] for r in rs):.1f}-"
                      f"{max(r['mib_s'] for r in rs):.1f}) p50 {m('p50_ms'):.2f} ms p99 {m('p99_ms'):.2f} ms"
                      f" proxy CPU {m('cpu_us_per_req'):.0f} us/request, client {m('client_us_per_req'):.0f}",
                      flush=True)
            if args.perf and size == 64 << 10 and args.only != "nginx":
                _, top = bench.profiled(floe.proc.pid, lambda: bench.run_once(floe.port, reqs, 16, 10, cycle=True),
                                        limit=os.environ.get("PERF_LIMIT", "1.5"))
                print(top)
                sym = os.environ.get("PERF_SYMBOL")
                if sym:  # who calls it (callers' chains, from load/bench.py's perf.data)
                    import subprocess
                    rep = subprocess.run(["perf", "report", "-i", str(bench.WORK / "perf.data"), "--stdio",
                                          "--no-children", "-S", sym, "-G"], capture_output=True, text=True)
                    print(rep.stdout[:6000])
    finally:
        for p in reversed(procs):
            p.stop()


def timed_pass(p, reqs, read_bytes):
    """One 10 s warm pass with the client reading `read_bytes` at a time (0: its default); the
    proxy's and the client's CPU per request."""
    if read_bytes:
        os.environ["LOADGEN_READ_BYTES"] = str(read_bytes)
    else:
        os.environ.pop("LOADGEN_READ_BYTES", None)
    cpu0, client0 = bench.cpu_s(p.proc.pid), children_cpu_s()
    r = bench.run_once(p.port, reqs, 16, 10, cycle=True)
    r["cpu_us_per_req"] = (bench.cpu_s(p.proc.pid) - cpu0) / r["requests"] * 1e6
    r["client_us_per_req"] = (children_cpu_s() - client0) / r["requests"] * 1e6
    os.environ.pop("LOADGEN_READ_BYTES", None)
    return r


def children_cpu_s():
    """CPU seconds of this script's finished children (the load generator runs as one)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
