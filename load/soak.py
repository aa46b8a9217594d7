#!/usr/bin/env python3
"""Soak: a 3-node fleet (floe-proxy with the block cache, MinIO as the origin) under about 80% of
its measured peak rate of signed 64 KiB ranged GETs for SOAK_SECONDS, while, on a schedule,
objects are overwritten at the origin, the nodes' caches are purged, and one node at a time is
restarted (taken out of the clients' targets first, as a Service does with a pod that is not
ready). Every answer is checked: its bytes must be those of the version its ETag names.

Every 5 s it samples throughput, errors, p50/p99 latency and each node's RSS into
load/soak.json, then plots load/soak-throughput.png, load/soak-p99.png, load/soak-rss.png and
writes the "Soak" section of load/PERFORMANCE.md. Exit status 1 on any error. The summary it
prints ends with the nodes' CPU (user + system, all three) per request served, over the peak's
window (which fills the set cold) and over the soak at its rate.

  load/soak.sh                                  # 1 hour
  SOAK_SECONDS=90 SOAK_RESTART_EVERY=45 load/soak.sh   # the CI's short run (no report)
  SOAK_RATE=500 SOAK_SECONDS=120 SOAK_REPORT=0 load/soak.sh  # a fixed rate (two builds compared)
  FLOE_BIN=<other build>/floe-proxy SOAK_DATA_DRAM=335544320 ...  # another build, DRAM ceiling
"""
import hashlib
import json
import os
import pathlib
import random
import shutil
import sys
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "load"))
os.environ.setdefault("FLOE_BIN", str(pathlib.Path(os.environ.get(
    "CARGO_TARGET_DIR", pathlib.Path.home() / ".cache" / "floe" / "target")) / "release" / "floe-proxy"))
import conftest  # noqa: E402
import urllib3  # noqa: E402
from fleet import Node, wait_until  # noqa: E402
from relay import Relay  # noqa: E402
from test_sigv4 import sign  # noqa: E402

SECONDS = int(os.environ.get("SOAK_SECONDS", "3600"))
RESTART_EVERY = int(os.environ.get("SOAK_RESTART_EVERY", "1200"))
OVERWRITE_EVERY = int(os.environ.get("SOAK_OVERWRITE_EVERY", "30"))
PURGE_EVERY = int(os.environ.get("SOAK_PURGE_EVERY", "120"))
REPORT = os.environ.get("SOAK_REPORT", "1") == "1"
OBJECTS, SIZE, RANGE, CLIENTS, SAMPLE = 48, 4 << 20, 64 << 10, 8, 5
# Each node's cache.data.dram_bytes. Every node ends up holding all 192 MiB of objects, and the
# DRAM ceiling also holds the disk tier's write buffers and the pool's free buffers (188 MiB left
# for blocks of a 256 MiB ceiling): 256 MiB makes the soak read part of its set from the disk tier.
DATA_DRAM = int(os.environ.get("SOAK_DATA_DRAM", str(256 << 20)))
BUCKET = conftest.BUCKET
HTTP = urllib3.PoolManager(maxsize=CLIENTS * 2, retries=False)
from perfdoc import write_section  # noqa: E402
BEGIN, END = "<!-- soak section: written by load/soak.py -->", "<!-- soak section end -->"


def pattern(key, version):
    return hashlib.sha256(f"{key}:{version}".encode()).digest()


def body(key, version):
    return pattern(key, version) * (SIZE // 32)


class Objects:
    """Each key's versions by ETag (MD5 of the body: MinIO's ETag for a single-part PUT)."""

    def __init__(self, s3):
        self.s3, self.lock = s3, threading.Lock()
        self.versions = {}  # key -> {etag: version}
        self.current = {}
        for i in range(OBJECTS):
            self.write(f"soak/{i:03d}.bin")

    def write(self, key):
        v = self.current.get(key, -1) + 1
        data = body(key, v)
        etag = hashlib.md5(data).hexdigest()
        with self.lock:  # known before the origin has it: a read may see it at once
            self.versions.setdefault(key, {})[etag] = v
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=data)
        self.current[key] = v

    def check(self, key, etag, off, data):
        with self.lock:
            v = self.versions.get(key, {}).get(etag.strip('"'))
        if v is None:
            return f"unknown ETag {etag} for {key}"
        p = pattern(key, v)
        want = (p * (RANGE // 32 + 2))[off % 32: off % 32 + RANGE]
        return None if data == want else f"{key} bytes {off}+{RANGE} are not version {v}'s"


class Fleet:
    def __init__(self, tmp, relay_port):
        self.tmp, self.relay_port = tmp, relay_port
        self.peers = [conftest.free_port() for _ in range(3)]
        self.nodes = [self.start(i) for i in range(3)]
        self.wait()
        self.live = list(self.nodes)
        self.lock = threading.Lock()

    def start(self, i):
        return Node(self.tmp, f"soak-{i}", self.relay_port, self.peers[i],
                    [p for j, p in enumerate(self.peers) if j != i], data_dram=DATA_DRAM)

    def wait(self):
        names = {n.name for n in self.nodes}
        for n in self.nodes:
            wait_until("the fleet", lambda n=n: set(n.view()) == names, timeout=60)

    def targets(self):
        with self.lock:
            return list(self.live)

    def restart(self, i):
        old = self.nodes[i]
        with self.lock:
            self.live.remove(old)
        time.sleep(0.5)  # requests already sent to it finish (they are in its drain anyway)
        old.stop()
        self.nodes[i] = self.start(i)
        self.wait()
        with self.lock:
            self.live.append(self.nodes[i])

    def purge(self):
        for n in self.targets():
            n.admin("POST", f"/purge?bucket={BUCKET}&prefix=soak/")

    def rss(self):
        out = {}
        for n in self.nodes:
            try:
                for line in open(f"/proc/{n.proc.proc.pid}/status"):
                    if line.startswith("VmRSS:"):
                        out[n.name] = int(line.split()[1]) * 1024
            except OSError:
                pass
        return out

    def cpu(self):
        """The nodes' CPU seconds so far (user + system, from /proc), all three summed."""
        total = 0
        for n in self.nodes:
            try:
                fields = open(f"/proc/{n.proc.proc.pid}/stat").read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime (stat fields 14, 15)
            except OSError:
                pass
        return total / os.sysconf("SC_CLK_TCK")

    def stop(self):
        for n in self.nodes:
            n.stop()


class Load:
    """CLIENTS threads; `rate` requests/s in all (0: as fast as they go)."""

    def __init__(self, fleet, objects, rate):
        self.fleet, self.objects, self.rate = fleet, objects, rate
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.lat, self.ok, self.errors = [], 0, []
        self.t0 = time.monotonic()
        self.threads = [threading.Thread(target=self.run, args=(c,), daemon=True) for c in range(CLIENTS)]
        for t in self.threads:
            t.start()

    def one(self, rng):
        node = rng.choice(self.fleet.targets())
        key = f"soak/{rng.randrange(OBJECTS):03d}.bin"
        off = rng.randrange(0, SIZE - RANGE)
        url = f"http://127.0.0.1:{node.port}/{BUCKET}/{key}"
        req = sign("GET", url, headers={"Range": f"bytes={off}-{off + RANGE - 1}"})
        t0 = time.perf_counter()
        try:
            r = HTTP.request("GET", url, headers=dict(req.headers), timeout=30)
            took = time.perf_counter() - t0
            err = (f"{node.name}: status {r.status}" if r.status != 206
                   else self.objects.check(key, r.headers.get("etag", ""), off, r.data))
        except Exception as e:  # a failed request is the soak's finding: record it, go on
            took, err = time.perf_counter() - t0, f"{node.name}: {type(e).__name__}: {e}"
        with self.lock:
            self.lat.append(took)
            if err:  # when, on the soak's clock, so a failure can be set beside the events
                self.errors.append((round(time.monotonic() - self.t0, 2), f"{key}@{off}: {err}"))
            else:
                self.ok += 1

    def run(self, c):
        rng = random.Random(c)
        gap = CLIENTS / self.rate if self.rate else 0
        nxt = time.perf_counter()
        while not self.stop.is_set():
            self.one(rng)
            if gap:
                nxt += gap
                delay = nxt - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)  # pacing the open-loop rate, not synchronising
                else:
                    nxt = time.perf_counter()  # behind: no burst to catch up

    def take(self):
        with self.lock:
            lat, ok, errs = self.lat, self.ok, len(self.errors)
            self.lat, self.ok = [], 0
        return lat, ok, errs

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else 0.0


def peak(fleet, objects, seconds=20):
    load = Load(fleet, objects, 0)
    time.sleep(3)  # warm-up, untimed
    load.take()
    cpu0 = fleet.cpu()
    time.sleep(seconds)  # the measurement window
    _, ok, errs = load.take()
    cpu_us = (fleet.cpu() - cpu0) / max(1, ok) * 1e6
    load.end()
    return ok / seconds, errs, cpu_us


def main():
    work = conftest.CACHE / "soak" / str(int(time.time()))
    import bench  # noqa: E402  (MinIO helper)
    minio, s3 = bench.minio_in(work, BUCKET)
    relay = Relay(minio.port)
    fleet = Fleet(work, relay.port)
    samples, failures = [], []
    try:
        objects = Objects(s3)
        top, errs, peak_cpu_us = peak(fleet, objects)
        rate = float(os.environ.get("SOAK_RATE", 0.8 * top))  # a fixed rate compares two builds
        print(f"peak {top:.0f} req/s ({errs} errors, nodes' CPU {peak_cpu_us:.0f} us a request); "
              f"soaking at {rate:.0f} req/s for {SECONDS} s", flush=True)
        cpu0 = fleet.cpu()  # restarts reset a node's count: the figure is then a lower bound
        load = Load(fleet, objects, rate)
        t0 = time.monotonic()
        load.t0 = t0
        events, restarts = [], 0
        nxt = {"overwrite": OVERWRITE_EVERY, "purge": PURGE_EVERY, "restart": RESTART_EVERY}
        tick = t0
        while time.monotonic() - t0 < SECONDS:
            tick += SAMPLE
            time.sleep(max(0.0, tick - time.monotonic()))  # the sampling period
            now = time.monotonic() - t0
            lat, ok, errs = load.take()
            samples.append({"t": round(now, 1), "rps": ok / SAMPLE, "errors": errs,
                            "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "rss": fleet.rss()})
            if now >= nxt["overwrite"]:
                nxt["overwrite"] += OVERWRITE_EVERY
                for key in random.sample(sorted(objects.current), 4):
                    objects.write(key)
                events.append((now, "overwrite"))
            if now >= nxt["purge"]:
                nxt["purge"] += PURGE_EVERY
                fleet.purge()
                events.append((now, "purge"))
            if now >= nxt["restart"] and now < SECONDS - 10:
                nxt["restart"] += RESTART_EVERY
                fleet.restart(restarts % 3)
                events.append((time.monotonic() - t0, f"restart soak-{restarts % 3}"))
                restarts += 1
        load.end()
        served = sum(s["rps"] for s in samples) * SAMPLE
        cpu_us = (fleet.cpu() - cpu0) / max(1, served) * 1e6
        failures = load.errors
    finally:
        fleet.stop()
        relay.down()
        minio.stop()
    if REPORT:
        (ROOT / "load" / "soak.json").write_text(json.dumps(
            {"rate": rate, "peak": top, "seconds": SECONDS, "events": events, "samples": samples,
             "errors": failures[:100]}, indent=1))
    summary = summarize(samples, failures, rate, top, events)
    summary["node_cpu_us_per_request"] = {"peak": round(peak_cpu_us), "soak": round(cpu_us)}
    print(json.dumps(summary, indent=1), flush=True)
    if REPORT:
        plot(samples, events)
        report(summary)
    if not failures:  # MinIO's data and the nodes' caches: kept only to look into a failure
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


def summarize(samples, failures, rate, top, events):
    n = len(samples)
    early = samples[n // 10: n // 5] or samples
    late = samples[-max(1, n // 10):]
    rss = {}
    for name in samples[0]["rss"] if samples else []:
        a = [s["rss"].get(name, 0) for s in early]
        b = [s["rss"].get(name, 0) for s in late]
        rss[name] = {"early_mib": sum(a) / len(a) / 2**20, "late_mib": sum(b) / len(b) / 2**20}
    p99 = sorted(s["p99_ms"] for s in samples)
    return {"peak_rps": round(top), "target_rps": round(rate),
            "achieved_rps": round(sum(s["rps"] for s in samples) / max(1, n)),
            "errors": len(failures), "first_errors": [f"t={t}s {e}" for t, e in failures[:5]],
            "event_times": [f"t={round(t, 1)}s {e}" for t, e in events][:40],
            "p50_ms_median": round(sorted(s["p50_ms"] for s in samples)[n // 2], 2) if samples else 0,
            "p99_ms_median": round(p99[len(p99) // 2], 2) if p99 else 0,
            "p99_ms_max": round(p99[-1], 2) if p99 else 0, "rss": rss,
            "events": {k: sum(1 for _, e in events if e.startswith(k)) for k in ("overwrite", "purge", "restart")}}


def plot(samples, events):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = [s["t"] / 60 for s in samples]
    restarts = [e[0] / 60 for e in events if e[1].startswith("restart")]
    for name, ys, label in [
        ("throughput", [[s["rps"] for s in samples]], "requests/s (64 KiB ranges)"),
        ("p99", [[s["p99_ms"] for s in samples], [s["p50_ms"] for s in samples]], "latency ms (p99, p50)"),
        ("rss", [[s["rss"].get(n, 0) / 2**20 for s in samples] for n in sorted(samples[0]["rss"])], "RSS MiB per node"),
    ]:
        fig, ax = plt.subplots(figsize=(9, 3.2))
        for y in ys:
            ax.plot(t, y, linewidth=0.8)
        for r in restarts:
            ax.axvline(r, color="grey", linestyle=":", linewidth=0.8)
        ax.set_xlabel("minutes (dotted: a node restart)")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        fig.tight_layout()
        fig.savefig(ROOT / "load" / f"soak-{name}.png", dpi=90)
        plt.close(fig)


def report(s):
    rows = "\n".join(f"| {n} | {v['early_mib']:.0f} | {v['late_mib']:.0f} | {v['late_mib'] / v['early_mib']:.2f}x |"
                     for n, v in sorted(s["rss"].items()))
    text = f"""{BEGIN}

## Soak

`load/soak.sh` (SOAK_SECONDS={SECONDS}) on {time.strftime('%Y-%m-%d')}, a 3-node release fleet with the block cache on
this 2-core machine (client, nodes and MinIO share it). Signed 64 KiB ranged GETs over {OBJECTS} x 4 MiB objects
at 80% of the measured peak ({s['peak_rps']} req/s measured, {s['target_rps']} targeted, {s['achieved_rps']} achieved),
with 4 objects overwritten at the origin every {OVERWRITE_EVERY} s, every node's cache purged every {PURGE_EVERY} s and
one node restarted every {RESTART_EVERY} s ({s['events']['restart']} restarts; taken out of the targets first). Every
answer's bytes were checked against the version its ETag names.

- errors: **{s['errors']}**
- p99 per 5 s window: median {s['p99_ms_median']} ms, worst {s['p99_ms_max']} ms (windows around a restart or purge included)
- RSS, mean of the run's second tenth vs. its last tenth (a restarted node starts over):

| node | early MiB | late MiB | late/early |
|---|---:|---:|---:|
{rows}

![throughput](soak-throughput.png)
![p99](soak-p99.png)
![rss](soak-rss.png)

{END}
"""
    write_section(BEGIN, END, text)


if __name__ == "__main__":
    sys.exit(main())
