#!/usr/bin/env python3
"""Scheduler benchmark: dispatch latency (event accepted -> worker started, from the run
records' accepted_ms and started_ms) and queue throughput (events/s, posted to /events until
every run has ended), on SQLite and on PostgreSQL, release floe-control, worker /bin/true.
The peer, side by side: the same number of /bin/true spawned straight from Python, which is the
floor any per-event subprocess pays. Writes the "Scheduler" section of load/PERFORMANCE.md.

  CARGO_TARGET_DIR=... $FLOE_CACHE/venv/bin/python load/sched_bench.py
"""
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", pathlib.Path.home() / ".cache" / "floe" / "target"))
os.environ.setdefault("FLOE_CONTROL_BIN", str(TARGET / "release" / "floe-control"))
from test_scheduler import Sched  # noqa: E402

from perfdoc import write_section  # noqa: E402
BEGIN = "<!-- scheduler section: written by load/sched_bench.py -->"
END = "<!-- scheduler section end -->"
PACED = 300      # latency: events posted one at a time, 50 per second
BURST = 2000     # throughput: events posted by 4 clients as fast as they are accepted
TRUE = "/bin/true"


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def post(s, i, tag):
    ev = {"specversion": "1.0", "id": f"{tag}-{i}", "source": "/bench", "type": "bench.tick", "data": {}}
    code, _ = s.call("POST", "/events", json.dumps(ev).encode(), {"content-type": "application/cloudevents+json"})
    assert code == 202


def done(s, n):
    return len([r for r in s.runs() if r["result"] == "ok"]) >= n


def measure(store, tmp):
    deps = [{"name": "bench", "code": {"command": TRUE},
             "triggers": [{"event": {"type": "bench.tick"}}]}]
    s = Sched(tmp, store, deps, concurrency=8, lease_ms=30000)
    try:
        for i in range(PACED):
            post(s, i, "paced")
            time.sleep(0.02)  # pacing the load generator: 50 events/s
        s.wait(lambda r: len([x for x in r if x["result"] == "ok"]) >= PACED, "paced runs", timeout=300)
        lat = [r["started_ms"] - r["accepted_ms"] for r in s.runs() if r["job_id"]]
        t0 = time.perf_counter()
        accepted = []

        def client(k):
            for i in range(k, BURST, 4):
                post(s, i, "burst")
            accepted.append(time.perf_counter())
        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ingest = time.perf_counter() - t0
        s.wait(lambda r: len([x for x in r if x["result"] == "ok"]) >= PACED + BURST, "burst runs", timeout=600)
        total = time.perf_counter() - t0
    finally:
        s.stop()
    return dict(p50=pct(lat, 0.5), p99=pct(lat, 0.99), ingest=BURST / ingest, total=BURST / total)


def peer():
    t0 = time.perf_counter()
    for _ in range(BURST):
        subprocess.run([TRUE], check=True)
    return BURST / (time.perf_counter() - t0)


def main():
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        rows["SQLite"] = measure(f"sqlite://{tmp}/q.db", tmp)
        pg = tmp / "pg"
        url = subprocess.run([ROOT / "tests" / "postgres.sh", "start", pg], check=True,
                             capture_output=True, text=True).stdout.strip()
        try:
            rows["PostgreSQL"] = measure(url, tmp)
        finally:
            subprocess.run([ROOT / "tests" / "postgres.sh", "stop", pg], check=False)
    floor = peer()
    lines = [BEGIN, "", "## Scheduler", "",
             f"`{sys.executable} load/sched_bench.py` on {platform.node()} ({os.cpu_count()} cores), "
             f"{time.strftime('%Y-%m-%d')}, release floe-control, worker `/bin/true`, concurrency 8. "
             f"Latency: {PACED} events posted one at a time at 50/s, event accepted (persisted) -> "
             f"worker started, from the run records. Throughput: {BURST} events posted by 4 clients; "
             "accepted/s is the ingest rate (each event persisted before its 202), end-to-end/s runs "
             "every event's worker to its end. Peer: the same /bin/true spawned from Python in a loop.",
             "", "| store | dispatch p50 ms | dispatch p99 ms | accepted events/s | end-to-end events/s | ratio to the spawn floor |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['p50']} | {r['p99']} | {r['ingest']:.0f} | {r['total']:.0f} | {r['total'] / floor:.2f}x |")
    lines += [f"| peer: spawn /bin/true from Python | | | | {floor:.0f} | 1.00x |", "", END]
    block = "\n".join(lines) + "\n"
    write_section(BEGIN, END, block)
    print(block)


if __name__ == "__main__":
    main()
