#!/usr/bin/env python3
"""Hedged origin reads, side by side: cold 64 KiB ranged GETs straight to the origin, through
Floe without hedging, and through Floe with the default hedge (`hedge: {}`: the observed p95,
at most 5% of fills), against a MinIO origin behind a relay that adds 20 ms to every request
and stalls one GET in 40 for 1 s (a slow connection: the long tail S3 shows). Every answer's
bytes are checked. Three passes per row, each Floe fresh (a cold cache); the median of each
measure and its spread. Writes the "Hedged origin reads" section of load/PERFORMANCE.md.

  CARGO_TARGET_DIR=... $FLOE_CACHE/venv/bin/python load/hedge_bench.py
"""
import os
import pathlib
import statistics
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "load"))
os.environ.setdefault("FLOE_BIN", str(pathlib.Path(os.environ.get(
    "CARGO_TARGET_DIR", pathlib.Path.home() / ".cache" / "floe" / "target")) / "release" / "floe-proxy"))
import conftest  # noqa: E402
from relay import Relay  # noqa: E402

BUCKET = conftest.BUCKET
OBJECTS, SIZE, RANGE, CLIENTS, PASSES = 400, 128 << 10, 64 << 10, 2, 3
READS = OBJECTS  # one read per object: each is a fill of its own (an object is one block)
STALL_EVERY, STALL_S, DELAY_S = 40, 1.0, 0.02
from perfdoc import write_section  # noqa: E402
BEGIN, END = "<!-- hedge section: written by load/hedge_bench.py -->", "<!-- hedge section end -->"


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def run(port, key, secret, bodies, relay):
    """READS cold ranges by CLIENTS threads; latencies, wall time, origin GETs."""
    jobs = [(f"hb/data/{i:05d}-0-hedge.parquet", (i * 4096) % (SIZE - RANGE)) for i in range(READS)]
    lat, bad, lock = [], [], threading.Lock()

    def client(c):
        s3 = conftest.s3_client(port, key, secret)
        for name, off in jobs[c::CLIENTS]:
            t0 = time.perf_counter()
            got = s3.get_object(Bucket=BUCKET, Key=name, Range=f"bytes={off}-{off + RANGE - 1}")["Body"].read()
            took = time.perf_counter() - t0
            with lock:
                lat.append(took)
                if got != bodies[name][off:off + RANGE]:
                    bad.append((name, off))

    gets = relay.count("GET")
    relay.slow(f"GET /{BUCKET}/hb/", every=STALL_EVERY, seconds=STALL_S)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    relay.slow(None, 1, 0)
    assert not bad, f"wrong bytes: {bad[:3]}"
    return {"p50": pct(lat, 0.5), "p99": pct(lat, 0.99), "max": max(lat) * 1000, "wall": wall,
            "gets": relay.count("GET") - gets}


def floe_pass(tmp, relay, bodies, hedge, n):
    d = tmp / f"{'on' if hedge else 'off'}-{n}"
    d.mkdir()
    mport = conftest.free_port()
    floe = conftest.start_cached_floe(d, relay.port, d / "cache", extra_server=f"  metrics_address: 127.0.0.1:{mport}",
                                      extra_origin="    hedge: {}" if hedge else "")
    try:
        s3 = conftest.s3_client(floe.port)
        for name in bodies:  # resolved first: the measured GETs are all fills
            s3.head_object(Bucket=BUCKET, Key=name)
        r = run(floe.port, conftest.CLIENT[0], conftest.CLIENT[1], bodies, relay)
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics").read().decode()
        r["hedged"] = sum(int(float(line.split()[-1])) for line in text.splitlines()
                          if line.startswith("floe_origin_range_reads_total") and
                          ('hedge="won"' in line or 'hedge="lost"' in line))
        return r
    finally:
        floe.stop()


def main():
    import bench
    work = conftest.CACHE / "bench" / f"hedge-{int(time.time())}"
    minio, s3 = bench.minio_in(work, BUCKET)
    relay = Relay(minio.port)
    relay.delay = DELAY_S
    try:
        bodies = {}
        for i in range(OBJECTS):
            name = f"hb/data/{i:05d}-0-hedge.parquet"
            bodies[name] = os.urandom(SIZE)
            s3.put_object(Bucket=BUCKET, Key=name, Body=bodies[name])
        rows = {"direct": [], "floe": [], "floe+hedge": []}
        for n in range(PASSES):
            rows["direct"].append(run(relay.port, conftest.ORIGIN_KEY, conftest.ORIGIN_SECRET, bodies, relay))
            rows["floe"].append(floe_pass(work, relay, bodies, False, n))
            rows["floe+hedge"].append(floe_pass(work, relay, bodies, True, n))
            print(n, {k: v[-1] for k, v in rows.items()}, flush=True)
    finally:
        relay.down()
        minio.stop()
    report(rows)


def cell(runs, k):
    xs = [r[k] for r in runs]
    return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"


def report(rows):
    lines = "\n".join(
        f"| {name} | {cell(r, 'p50')} | {cell(r, 'p99')} | {cell(r, 'max')} | {cell(r, 'wall')} | "
        f"{cell(r, 'gets')} | {cell(r, 'hedged') if 'hedged' in r[0] else '-'} |"
        for name, r in rows.items())
    p99 = {k: statistics.median(x["p99"] for x in v) for k, v in rows.items()}
    text = f"""{BEGIN}

## Hedged origin reads

`load/hedge_bench.py` on {time.strftime('%Y-%m-%d')} (release build): {READS} cold 64 KiB ranged GETs
by {CLIENTS} clients, one per {SIZE >> 10} KiB object (each read a fill of its own); the origin (MinIO behind a relay) adds {DELAY_S * 1000:.0f} ms to
every request and stalls one GET in {STALL_EVERY} for {STALL_S:.0f} s. The keys are Iceberg data-file paths (immutable to the cache); Floe resolves each first (a HEAD), so every measured GET is one fill.
`floe+hedge` runs `hedge: {{}}` (the observed p95, at most 5% of fills). Median of {PASSES} passes, (min-max);
latencies in ms, wall in s, GETs as the origin saw them.

| row | p50 | p99 | max | wall | origin GETs | hedged |
|---|---:|---:|---:|---:|---:|---:|
{lines}

p99 with hedging vs without: **{p99['floe+hedge'] / p99['floe']:.2f}x**; vs direct: {p99['floe+hedge'] / p99['direct']:.2f}x.

The max stays near the stall: the stalls among a fresh Floe's first 64 answers come before it trusts an observed percentile, so they are not hedged (`after_ms` hedges from the first read).

{END}
"""
    write_section(BEGIN, END, text)
    print(text)


if __name__ == "__main__":
    main()
