#!/usr/bin/env python3
"""Floe benchmark: direct origin vs nginx proxy_cache (slice module, 2 MiB slices) vs Floe cold
vs Floe warm, side by side in one run. The origin (MinIO) sits behind toxiproxy adding 30 ms of
latency to every request, as S3 has. Writes load/PERFORMANCE.md.

Run with load/bench.sh (it installs everything first). Options: --quick for a smaller run.
"""
import argparse
import concurrent.futures
import io
import json
import os
import pathlib
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import conftest  # noqa: E402  (process helpers, MinIO paths)
from perfdoc import write_section  # noqa: E402
import urllib3  # noqa: E402

CACHE = conftest.CACHE
WORK = CACHE / "bench"
BUCKET = "bench"
MiB = 1 << 20
KEY, SECRET = conftest.ORIGIN_KEY, conftest.ORIGIN_SECRET
FLOE_RELEASE = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", CACHE / "target")) / "release" / "floe-proxy"


class Audit:
    """MinIO's audit webhook sink: the origin's own log of every S3 call it served."""

    def __init__(self):
        import http.server
        import threading
        self.lock = threading.Lock()
        self.entries = []
        audit = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                for line in body.splitlines():
                    try:
                        e = json.loads(line)
                    except ValueError:
                        continue
                    api = e.get("api", {})
                    with audit.lock:
                        audit.entries.append((api.get("name", ""), api.get("object", ""), api.get("tx", 0),
                                              e.get("userAgent", "")))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.marks = 0

    def mark(self, s3):
        """Index in the log after everything before this call (a HEAD of a marker key)."""
        self.marks += 1
        name = f"audit-marker-{self.marks}"
        try:
            s3.head_object(Bucket=BUCKET, Key=name)
        except Exception:
            pass
        deadline = time.monotonic() + 30
        while True:
            with self.lock:
                for i, (_, obj, _, _) in enumerate(self.entries):
                    if obj == name:
                        return i
            if time.monotonic() > deadline:
                raise RuntimeError("audit marker never arrived")
            time.sleep(0.05)

    def count(self, start, end):
        with self.lock:
            return sum(1 for api, _, _, _ in self.entries[start + 1:end] if api in ("GetObject", "HeadObject"))

    def between(self, start, end, skip_agent=None):
        """(GET/HEAD requests, bytes sent) the origin served between two marks, leaving out
        clients whose User-Agent contains `skip_agent`."""
        with self.lock:
            seen = [(api, tx) for api, _, tx, agent in self.entries[start + 1:end]
                    if not (skip_agent and skip_agent in agent)]
        return sum(1 for api, _ in seen if api in ("GetObject", "HeadObject")), sum(tx for _, tx in seen)

    def agents(self, start, end):
        with self.lock:
            return sorted({agent for _, _, _, agent in self.entries[start + 1:end]})


AUDIT = None
MARK_S3 = None   # the client audit marks go through (set by start_minio)


def start_minio():
    global AUDIT, MARK_S3
    AUDIT = Audit()
    port = conftest.free_port()
    env = dict(os.environ, MINIO_ROOT_USER=KEY, MINIO_ROOT_PASSWORD=SECRET, MINIO_BROWSER="off",
               MINIO_AUDIT_WEBHOOK_ENABLE_bench="on",
               MINIO_AUDIT_WEBHOOK_ENDPOINT_bench=f"http://127.0.0.1:{AUDIT.port}/")
    p = conftest.Proc([str(conftest.MINIO_BIN), "server", "--quiet", "--address", f"127.0.0.1:{port}",
                       str(WORK / "minio")], env, WORK / "minio.log", port, "minio")
    s3 = conftest.s3_client(port, KEY, SECRET)
    deadline = time.monotonic() + 60
    while True:
        try:
            s3.list_buckets()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=BUCKET)
    MARK_S3 = s3
    s3.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": ["s3:GetObject"],
        "Resource": [f"arn:aws:s3:::{BUCKET}/*"]}]}))
    return p, s3


def minio_in(work, bucket):
    """MinIO (with the audit sink) in a new folder `work`, with `bucket` made: for the benchmarks
    that start their own origin (load/soak.py, load/hedge_bench.py)."""
    global WORK
    work.mkdir(parents=True)
    WORK = work
    minio, s3 = start_minio()
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=bucket)
    return minio, s3


def make_parquet_set(s3, files, size):
    import pyarrow as pa
    import pyarrow.parquet as pq
    have = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="set/").get("Contents", [])}
    keys = []
    for i in range(files):
        k = f"set/part-{i:03d}.parquet"
        keys.append(k)
        if have.get(k, 0) >= size * 0.9:
            continue
        rows = size // (128 * 1024)
        t = pa.table({"id": pa.array(range(rows), pa.int64()),
                      "payload": pa.array([os.urandom(128 * 1024) for _ in range(rows)], pa.binary())})
        buf = io.BytesIO()
        pq.write_table(t, buf, compression="none", row_group_size=64)
        s3.put_object(Bucket=BUCKET, Key=k, Body=buf.getvalue())
    sizes = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="set/")["Contents"]}
    return [(k, sizes[k]) for k in keys]


def make_filler(s3, files, size):
    """Objects that fill a proxy's DRAM before a "DRAM full" row: random bytes (no reads of
    the measured set touch them)."""
    have = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="filler/").get("Contents", [])}
    keys = []
    for i in range(files):
        k = f"filler/{i:03d}.bin"
        keys.append((k, size))
        if have.get(k) != size:
            s3.put_object(Bucket=BUCKET, Key=k, Body=os.urandom(size))
    return keys


def make_tpch(s3, sf):
    import duckdb
    import duckdb_extension_tpch
    if s3.list_objects_v2(Bucket=BUCKET, Prefix=f"tpch/sf{sf}/lineitem").get("KeyCount", 0):
        return
    ext = next(pathlib.Path(duckdb_extension_tpch.__file__).parent.rglob("tpch.duckdb_extension"))
    con = duckdb.connect()
    con.execute(f"LOAD '{ext}'")
    con.execute(f"CALL dbgen(sf={sf})")
    out = WORK / "tpch"
    out.mkdir(parents=True, exist_ok=True)
    for (t,) in con.execute("SHOW TABLES").fetchall():
        path = out / f"{t}.parquet"
        con.execute(f"COPY {t} TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 122880)")
        s3.upload_file(str(path), BUCKET, f"tpch/sf{sf}/{t}.parquet")


def start_toxiproxy(minio_port):
    api = conftest.free_port()
    p = conftest.Proc([str(CACHE / "bin" / "toxiproxy-server"), "-host", "127.0.0.1", "-port", str(api)],
                      dict(os.environ), WORK / "toxiproxy.log", api, "toxiproxy")
    listen = conftest.free_port()

    def post(path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{api}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(req).read()

    post("/proxies", {"name": "minio", "listen": f"127.0.0.1:{listen}", "upstream": f"127.0.0.1:{minio_port}"})
    post("/proxies/minio/toxics", {"type": "latency", "stream": "upstream", "attributes": {"latency": 30, "jitter": 0}})
    return p, listen


NGINX_CONF = """
user root;
worker_processes 2;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  proxy_cache_path {dir}/cache levels=1:2 keys_zone=floe:64m max_size=8g inactive=1d use_temp_path=off;
  upstream origin {{ server 127.0.0.1:{origin}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      slice 2m;
      proxy_cache floe;
      proxy_cache_key $uri$slice_range;
      proxy_set_header Range $slice_range;
      proxy_cache_valid 200 206 1d;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://origin;
    }}
  }}
}}
"""


def start_nginx(origin_port):
    if not os.access("/usr/sbin/nginx", os.X_OK):  # the scripts beside bench.sh assume it ran once
        sys.exit("nginx is not installed (/usr/sbin/nginx): load/bench.sh installs it "
                 "(apt-get install -y nginx-light)")
    d = WORK / "nginx"
    subprocess.run(["rm", "-rf", str(d)], check=True)
    (d / "cache").mkdir(parents=True)
    port = conftest.free_port()
    (d / "nginx.conf").write_text(NGINX_CONF.format(dir=d, origin=origin_port, port=port))
    return conftest.Proc(["/usr/sbin/nginx", "-c", str(d / "nginx.conf"), "-p", str(d)], dict(os.environ),
                         d / "stdout.log", port, "nginx")


FLOE_YAML = """
server:
  listeners: [{{address: "127.0.0.1:{port}"}}]
  threads: 2
  grace_period_seconds: 1
origins:
  minio:
    endpoint: http://127.0.0.1:{origin}
    credentials: {{from: env, access_key_env: K, secret_key_env: S}}
routes:
  - bucket: {bucket}
    origin: minio
    anonymous: true
    clients: [{{access_key: {key}, secret_key: {secret}}}]
    filters: [sigv4, blocks]
cache:
  dir: {dir}/cache
  data: {{dram_bytes: {data_dram}, disk_bytes: {data_disk}}}
  metadata: {{dram_bytes: {meta_dram}, disk_bytes: 536870912}}
  disk_writes: {disk_writes}
admin: {{address: "127.0.0.1:{admin}", token: bench}}
"""


# floe-proxy allocates with jemalloc (tikv-jemallocator; proxy/src/main.rs). Its default
# keeps freed pages for reuse (10 s decay); this setting returns them at once: RSS at the
# live bytes, for a page fault and zeroing per reuse (README, "Memory").
EAGER_PURGE = "dirty_decay_ms:0,muzzy_decay_ms:0"


def start_floe(origin_port, data_dram=3 << 30, data_disk=4 << 30, meta_dram=256 << 20, tunables=None,
               disk_writes="once"):
    d = WORK / "floe"
    subprocess.run(["rm", "-rf", str(d)], check=True)
    d.mkdir(parents=True)
    port, admin = conftest.free_port(), conftest.free_port()
    (d / "floe.yaml").write_text(FLOE_YAML.format(port=port, origin=origin_port, bucket=BUCKET, key=KEY,
                                                  secret=SECRET, dir=d, admin=admin, data_dram=data_dram,
                                                  data_disk=data_disk, meta_dram=meta_dram,
                                                  disk_writes=disk_writes))
    env = dict(os.environ, K=KEY, S=SECRET, FLOE_LOG="warn")
    if tunables:
        env["_RJEM_MALLOC_CONF"] = tunables  # jemalloc's MALLOC_CONF, prefixed as tikv's build names it
    p = conftest.Proc([str(FLOE_RELEASE), "--config", str(d / "floe.yaml")], env, d / "floe.log", port, "floe")
    p.admin_port = admin
    # Pingora starts the admin listener beside the proxy's, not before it: a row once failed on
    # /stats refused just after the proxy's port opened.
    conftest.wait_port(admin, p.proc, "floe's admin listener")
    p.populate_s = wait_populated(p)
    return p


def wait_populated(p, timeout=300):
    """Waits until Floe's pool holds its populated reserve (`cache.populate_dram`, a
    background worker at start), so no row counts that one-off CPU; returns the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        # "off" (or absent: an older build): nothing to wait for.
        if floe_stats(p).get("buffers", {}).get("populate", "off") in ("off", "done"):
            return time.monotonic() - t0
        time.sleep(0.05)
    raise RuntimeError("Floe's buffer pool was not populated in %d s" % timeout)


def floe_origin_bytes(p):
    s = floe_stats(p)
    return s["data"]["origin_bytes"] + s["metadata"]["origin_bytes"]


def cpu_s(pid):
    """CPU seconds (user + system) used so far by a process and its children's live processes."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            f = pathlib.Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
            todo += [int(c) for c in pathlib.Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


SECONDS = 10      # each row runs at least this long (warm rows), or stops there (cold rows)
LIST = 5000       # requests in each row's list: a cold row makes at most these
PASSES = 3        # every row runs once per pass; the report gives the median and the spread


def run_once(port, reqs, clients, seconds=None, cycle=False):
    """One pass of the request list with load/loadgen (Go, `clients` workers): the client must
    not be the bottleneck on a 2-core machine shared with the servers. With `seconds` it stops
    issuing after that long; with `cycle` it goes round the list until then."""
    lst = WORK / "ranges.txt"
    lst.write_text("".join(f"/{BUCKET}/{k} {a} {b}\n" for k, a, b in reqs))
    args = [str(CACHE / "bin" / "floe-loadgen"), f"http://127.0.0.1:{port}", str(lst), str(clients)]
    if seconds:
        args += [str(seconds)] + (["cycle"] if cycle else [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-2000:])
    return json.loads(out.stdout)


def floe_stats(p):
    req = urllib.request.Request(f"http://127.0.0.1:{p.admin_port}/stats", headers={"Authorization": "Bearer bench"})
    return json.loads(urllib.request.urlopen(req).read())


def publish_chunks(p, s3, keys):
    """Publishes the files' column chunks to Floe's admin API, as floe-control does after a
    commit (the benchmark has no catalog; the footers are read straight from the origin, so
    nothing is warmed)."""
    import pyarrow.parquet as pq
    import pyarrow.fs as pafs
    fs = pafs.S3FileSystem(access_key=KEY, secret_key=SECRET, endpoint_override=s3.meta.endpoint_url,
                           scheme="http", region="us-east-1")
    files = []
    for k in keys:
        md = pq.ParquetFile(fs.open_input_file(f"{BUCKET}/{k}")).metadata
        c = []
        for rg in range(md.num_row_groups):
            for i in range(md.num_columns):
                col = md.row_group(rg).column(i)
                start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
                c += [start, col.total_compressed_size]
        files.append({"k": k, "s": fs.get_file_info(f"{BUCKET}/{k}").size, "c": c})
    body = json.dumps({"table": "bench.tpch", "replace": True, "files": files}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{p.admin_port}/chunks?bucket={BUCKET}", data=body,
                                 method="POST", headers={"Authorization": "Bearer bench"})
    return json.loads(urllib.request.urlopen(req).read())


def peak_rss_mib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


TPCH_QUERIES = {
    "Q1": """SELECT l_returnflag, l_linestatus, sum(l_quantity), sum(l_extendedprice),
             avg(l_discount), count(*) FROM {t}lineitem.parquet' WHERE l_shipdate <= DATE '1998-09-02'
             GROUP BY ALL ORDER BY ALL""",
    "Q6": """SELECT sum(l_extendedprice * l_discount) FROM {t}lineitem.parquet'
             WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'
             AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24""",
    "Q3": """SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate
             FROM {t}customer.parquet' c JOIN {t}orders.parquet' o ON c_custkey = o_custkey
             JOIN {t}lineitem.parquet' l ON l_orderkey = o_orderkey
             WHERE c_mktsegment = 'BUILDING' AND o_orderdate < DATE '1995-03-15'
             AND l_shipdate > DATE '1995-03-15' GROUP BY l_orderkey, o_orderdate
             ORDER BY revenue DESC LIMIT 10""",
    "Q12": """SELECT l_shipmode, count(*) FROM {t}orders.parquet' o JOIN {t}lineitem.parquet' l
              ON o_orderkey = l_orderkey WHERE l_shipmode IN ('MAIL', 'SHIP')
              AND l_receiptdate >= DATE '1994-01-01' AND l_receiptdate < DATE '1995-01-01'
              GROUP BY l_shipmode ORDER BY l_shipmode""",
}


def duckdb_wave(port, sf, s3, signed):
    import duckdb
    import duckdb_extension_httpfs
    ext = next(pathlib.Path(duckdb_extension_httpfs.__file__).parent.rglob("httpfs.duckdb_extension"))
    con = duckdb.connect()
    con.execute(f"LOAD '{ext}'")
    # DuckDB's own caches off, so every query reads through the endpoint under test.
    con.execute("SET enable_object_cache=false")
    con.execute("SET enable_external_file_cache=false")
    creds = f"KEY_ID '{KEY}', SECRET '{SECRET}', " if signed else ""
    con.execute(f"CREATE SECRET s (TYPE s3, {creds}REGION 'us-east-1', ENDPOINT '127.0.0.1:{port}', "
                "URL_STYLE 'path', USE_SSL false)")
    out = {}
    for name, q in TPCH_QUERIES.items():
        before = AUDIT.mark(s3)
        t0 = time.perf_counter()
        rows = con.execute(q.format(t=f"'s3://{BUCKET}/tpch/sf{sf}/")).fetchall()
        took = time.perf_counter() - t0
        out[name] = {"s": took, "origin_requests": AUDIT.count(before, AUDIT.mark(s3)), "rows": rows}
    return out


class Targets:
    """The proxies under test, each restarted with an empty cache before a cold row."""

    def __init__(self, origin):
        self.origin, self.nginx, self.floe = origin, None, None

    def fresh(self, which):
        old = getattr(self, which)
        if old:
            old.stop()
        setattr(self, which, start_nginx(self.origin) if which == "nginx" else start_floe(self.origin))
        return getattr(self, which)

    def full(self, filler):
        """A fresh Floe whose DRAM is first filled with other objects (`filler`, read whole):
        the steady state of a long-running cache, where every fill evicts."""
        old = self.floe
        if old:
            old.stop()
        # The filler exceeds the DRAM (a --quick run's filler is smaller than bench Floe's 3 GiB).
        self.floe = start_floe(self.origin, data_dram=min(3 << 30, sum(sz for _, sz in filler) * 7 // 8))
        floe = self.floe
        run_once(floe.port, whole_reads(filler), 8)
        s = floe_stats(floe)["data"]
        print(f"  DRAM filled: {s['dram_usage_bytes'] / MiB:.0f} of {s['dram_capacity_bytes'] / MiB:.0f} MiB,"
              f" {s['evictions']} evictions", flush=True)
        return floe

    def stop(self):
        for p in (self.nginx, self.floe):
            if p:
                p.stop()


def measure(label, port, reqs, clients, procs, proxy=None, floe=None, cycle=False):
    """One row: the list against `port` for SECONDS (cycled for a warm row), with the CPU the
    origin side and the proxy used and, for Floe, the origin bytes it read."""
    before = floe_origin_bytes(floe) if floe else 0
    # nginx's origin bytes: what MinIO's audit log says it sent between two marks (the
    # proxy's own log would cost nginx a write per request).
    mark = AUDIT.mark(MARK_S3) if proxy and not floe else None
    # The disk quiet first: a cold row before this one (nginx's cache files, Floe's disk tier)
    # may leave gigabytes for the kernel to write back, which slowed the rows after it.
    os.sync()
    cpu0 = (sum(cpu_s(p.proc.pid) for p in procs), cpu_s(proxy.proc.pid) if proxy else 0.0)
    res = run_once(port, reqs, clients, SECONDS, cycle)
    res["cpu_origin_s"] = sum(cpu_s(p.proc.pid) for p in procs) - cpu0[0]
    res["cpu_proxy_s"] = (cpu_s(proxy.proc.pid) if proxy else 0.0) - cpu0[1]
    res["origin_mib"] = (floe_origin_bytes(floe) - before) / MiB if floe else None
    if mark is not None:
        res["origin_mib"] = AUDIT.between(mark, AUDIT.mark(MARK_S3))[1] / MiB
    res["label"] = label
    print(f"  {label:<11} {clients:>2} clients: {res['mib_s']:8.1f} MiB/s p50 {res['p50_ms']:6.1f} ms"
          f" p99 {res['p99_ms']:6.1f} ms ({res['requests']} requests)", flush=True)
    return res


def whole_reads(objs):
    """Every byte of `objs` as 8 MiB ranged GETs."""
    return [(k, a, min(a + 8 * MiB, sz) - 1) for k, sz in objs for a in range(0, sz, 8 * MiB)]


def ranges(rnd, objs, size, n):
    return [(k, a, a + size - 1) for k, sz in (rnd.choice(objs) for _ in range(n)) for a in [rnd.randrange(0, sz - size)]]


def pass_rows(t, minio_procs, objs, p, results, filler=None):
    """One pass of every row: per read size and client count, direct, nginx cold and warm,
    Floe cold and warm; each cold row on an empty cache, each warm row on what its cold row
    left, cycling the requests that row made."""
    rnd = random.Random(100 + p)
    for wl, size in (("1MiB", MiB), ("64KiB", 64 << 10)):
        for clients in (1, 4, 16):
            reqs = ranges(rnd, objs, size, LIST)
            print(f"pass {p + 1}/{PASSES}, {wl} ranges, {clients} clients", flush=True)
            rows = []
            if clients < 16:
                rows.append(measure("direct", t.origin, reqs, clients, minio_procs))
            for kind in (("nginx", "floe") if clients > 1 else ("floe",)):
                proxy = t.fresh(kind)
                floe = proxy if kind == "floe" else None
                cold = measure(f"{kind} cold", proxy.port, reqs, clients, minio_procs, proxy, floe)
                rows.append(cold)
                if clients == 16:
                    made = reqs[:cold["requests"]]
                    rows.append(measure(f"{kind} warm", proxy.port, made, clients, minio_procs, proxy, floe, cycle=True))
            if clients == 16 and filler:
                floe = t.full(filler)
                rows.append(measure("floe cold full", floe.port, reqs, clients, minio_procs, floe, floe))
            for r in rows:
                results.setdefault((wl, clients, r["label"]), []).append(r)


def memory_run(t, objs, tunables=None, disk_writes="once"):
    """A Floe whose data DRAM ceiling is a quarter of the working set (the disk tier in use):
    cold then warm 1 MiB reads over 1 GiB, with peak RSS against the ceilings; `tunables`:
    jemalloc's MALLOC_CONF for the run; `disk_writes`: the cache's
    setting (once, every_insert)."""
    work = objs[:8]
    dram, meta = max(64 * MiB, sum(o[1] for o in work) // 4 // MiB * MiB), 64 << 20
    if t.floe:
        t.floe.stop()
    t.floe = start_floe(t.origin, data_dram=dram, data_disk=2 << 30, meta_dram=meta, tunables=tunables,
                        disk_writes=disk_writes)
    rnd = random.Random(7)
    reqs = ranges(rnd, work, MiB, LIST)
    cold = run_once(t.floe.port, reqs, 16, 3 * SECONDS)
    warm = run_once(t.floe.port, reqs[:cold["requests"]], 16, 3 * SECONDS, cycle=True)
    st = floe_stats(t.floe)
    out = {"malloc": f"jemalloc {tunables}" if tunables else "jemalloc as built", "dram_mib": dram / MiB, "meta_mib": meta / MiB, "set_mib": sum(o[1] for o in work) / MiB,
           "peak_rss_mib": peak_rss_mib(t.floe.proc.pid), "cold": cold, "warm": warm,
           "disk_read_mib": st["data"]["disk_read_bytes"] / MiB, "disk_write_mib": st["data"]["disk_write_bytes"] / MiB,
           # What reads' ranges took from the disk tier (the disk read target's denominator).
           "disk_served_mib": st["data"].get("disk_served_bytes", 0) / MiB,
           # What the data store took in: every byte it fetched from the origin (admitted or not).
           "origin_mib": st["data"]["origin_bytes"] / MiB, "disk_writes": disk_writes}
    t.floe.stop()
    t.floe = None
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="256 MiB set, SF 0.1, one pass of 3 s rows")
    ap.add_argument("--memory-only", action="store_true",
                    help="only the memory run, printed as JSON (PERFORMANCE.md is not written);"
                         " FLOE_MEMORY_TUNABLES sets jemalloc's MALLOC_CONF")
    args = ap.parse_args()
    global SECONDS, PASSES
    files, fsize, sf = (16, 128 * MiB, 1) if not args.quick else (4, 64 * MiB, 0.1)
    if args.quick:
        SECONDS, PASSES = 3, 1
    WORK.mkdir(parents=True, exist_ok=True)
    procs = []
    t = None
    try:
        minio, s3 = start_minio()
        procs.append(minio)
        print("generating data ...", flush=True)
        objs = make_parquet_set(s3, files, fsize)
        make_tpch(s3, sf)
        toxi, origin = start_toxiproxy(minio.port)
        procs.append(toxi)
        if args.memory_only:
            t = Targets(origin)
            for m in (memory_run(t, objs, os.environ.get("FLOE_MEMORY_TUNABLES") or None),):
                print(json.dumps(m), flush=True)
            return
        # 3 GiB: more than the data store's DRAM (bench Floe's 3 GiB less its buffers).
        filler = make_filler(s3, 24, 128 * MiB) if not args.quick else make_filler(s3, 4, 64 * MiB)
        # One untimed direct read of the whole set: MinIO's page cache is then warm for every
        # target alike (a first pass is otherwise slower for whichever target runs first).
        run_once(origin, whole_reads(objs), 8)
        t = Targets(origin)
        results = {}
        for p in range(PASSES):
            pass_rows(t, [minio, toxi], objs, p, results, filler)
        profiles = {}
        if shutil.which("perf"):
            for wl, size in (("1MiB", MiB), ("64KiB", 64 << 10)):
                print(f"profiling warm {wl} hits", flush=True)
                floe = t.fresh("floe")
                reqs = ranges(random.Random(5), objs, size, 2000)
                run_once(floe.port, reqs, 16)
                _, profiles[wl] = profiled(floe.proc.pid, lambda: run_once(floe.port, reqs, 16, SECONDS, True))
        print("memory run", flush=True)
        memory = [memory_run(t, objs), memory_run(t, objs, EAGER_PURGE),
                  memory_run(t, objs, disk_writes="every_insert")]
        waves = {}
        floe = t.fresh("floe")
        tpch_keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"tpch/sf{sf}/")["Contents"]]
        hinted = publish_chunks(floe, s3, tpch_keys)
        for label, port in (("direct", origin), ("floe cold", floe.port), ("floe warm", floe.port)):
            print(f"duckdb wave: {label}", flush=True)
            waves[label] = duckdb_wave(port, sf, s3, True)
        ref = {q: v["rows"] for q, v in waves["direct"].items()}
        for label, w in waves.items():
            for q, v in w.items():
                assert v["rows"] == ref[q], f"{label} {q} differs from direct"
        write_report(results, waves, args, files, fsize, sf, profiles, memory, hinted)
    finally:
        if t:
            t.stop()
        for p in reversed(procs):
            p.stop()
        # The origin's objects, nginx's and Floe's caches: several GiB that the next run rebuilds
        # anyway; left behind they starve the test suite's MinIO of disk.
        for d in ("minio", "nginx", "floe", "perf.data", "perf.data.old"):
            subprocess.run(["rm", "-rf", str(WORK / d)], check=False)


def profiled(pid, fn, limit="1.5"):
    """Runs fn() under `perf record` attached to pid; returns (fn's result, top symbols). An
    empty profile says why (perf's own messages) instead of leaving a blank block: the
    2026-12-07 run's two profiles came out empty, and the same steps run alone gave symbols."""
    data = WORK / "perf.data"
    log = WORK / "perf.log"
    with open(log, "w") as err:
        rec = subprocess.Popen(["perf", "record", "-F", "1999", "-g", "-o", str(data), "-p", str(pid)],
                               stdout=subprocess.DEVNULL, stderr=err)
        try:
            res = fn()
        finally:
            rec.send_signal(signal.SIGINT)
            rec.wait(60)
    rep = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "symbol",
                          "-g", "none", "--percent-limit", limit], capture_output=True, text=True)
    top = "\n".join(l.split("  -  ")[0].rstrip() for l in rep.stdout.splitlines() if l.strip() and not l.startswith("#"))
    if not top:
        why = (log.read_text() + rep.stderr).strip().splitlines()[-6:]
        top = "(no samples: perf record exited %s; %s)" % (rec.returncode, " / ".join(why) or "perf said nothing")
        print("profile empty:", top, flush=True)
    return res, top


def med(rows, f):
    return statistics.median(f(r) for r in rows)


def spread(rows, f):
    vals = [f(r) for r in rows]
    return f"{statistics.median(vals):.1f} ({min(vals):.1f}-{max(vals):.1f})" if len(vals) > 1 else f"{vals[0]:.1f}"


def cpu_per_gib(r):
    return r["cpu_proxy_s"] / max(r["bytes"] / (1 << 30), 1e-9)


def verdict(ok):
    return "**met**" if ok else "**not met**"


def targets(results, waves, memory):
    """The issue's targets as measured ratios, one line each."""
    g = lambda wl, c, label: results.get((wl, c, label), [])
    out = []
    for wl in ("1MiB", "64KiB"):
        for c in (1, 4):
            d, f = g(wl, c, "direct"), g(wl, c, "floe cold")
            p50 = med(f, lambda r: r["p50_ms"]) / med(d, lambda r: r["p50_ms"])
            wall = med(d, lambda r: r["mib_s"]) / med(f, lambda r: r["mib_s"])
            out.append(f"- Cold latency, {wl}, {c} client{'s' * (c > 1)}: Floe cold p50 {p50:.2f}x direct,"
                       f" wall time per byte {wall:.2f}x direct (target <= 1.05x): {verdict(p50 <= 1.05 and wall <= 1.05)}")
    for wl in ("1MiB", "64KiB"):
        for c in (4, 16):
            f, n = g(wl, c, "floe cold"), g(wl, c, "nginx cold")
            ratio = med(f, cpu_per_gib) / med(n, cpu_per_gib)
            origin = med(f, lambda r: r["origin_mib"] / (r["bytes"] / MiB))
            out.append(f"- Cold cost, {wl}, {c} clients: Floe {med(f, cpu_per_gib):.2f} CPU s per GiB served vs nginx"
                       f" {med(n, cpu_per_gib):.2f} = {ratio:.2f}x (target <= 0.8x): {verdict(ratio <= 0.8)};"
                       f" origin bytes / bytes served {origin:.2f} (target <= 1): {verdict(origin <= 1.0)}")
    for c in (4, 16):
        f, n = g("64KiB", c, "floe cold"), g("64KiB", c, "nginx cold")
        ratio = med(f, lambda r: r["mib_s"]) / med(n, lambda r: r["mib_s"])
        out.append(f"- Cold small reads, 64 KiB, {c} clients: Floe cold {ratio:.2f}x nginx cold throughput"
                   f" (target >= 1): {verdict(ratio >= 1.0)}")
    for wl in ("1MiB", "64KiB"):
        n = g(wl, 16, "nginx cold")
        for label, what in (("floe cold", "a fresh proxy"), ("floe cold full", "DRAM first filled with other objects")):
            f = g(wl, 16, label)
            if not f:
                continue
            cost = med(f, cpu_per_gib) / med(n, cpu_per_gib)
            speed = med(f, lambda r: r["mib_s"]) / med(n, lambda r: r["mib_s"])
            out.append(f"- Cold, {wl}, 16 clients, {what} (issue 24): CPU per GiB served {cost:.2f}x nginx's"
                       f" (target <= 1x, stretch 0.8x): {verdict(cost <= 1.0)}; throughput {speed:.2f}x nginx's"
                       f" (target >= 1x): {verdict(speed >= 1.0)}")
    tot = {l: sum(v["s"] for v in w.values()) for l, w in waves.items()}
    worse = [q for q in TPCH_QUERIES if waves["floe cold"][q]["s"] > waves["direct"][q]["s"]
             or waves["floe cold"][q]["origin_requests"] > waves["direct"][q]["origin_requests"]]
    ratio = tot["floe cold"] / tot["direct"]
    out.append(f"- Engines cold: DuckDB TPC-H wave through cold Floe {ratio:.2f}x direct (target <= 0.35x):"
               f" {verdict(ratio <= 0.35)}; queries slower than direct or with more origin requests:"
               f" {', '.join(worse) or 'none'}: {verdict(not worse)}")
    for wl in ("1MiB", "64KiB"):
        f, n = g(wl, 16, "floe warm"), g(wl, 16, "nginx warm")
        ratio = med(f, lambda r: r["mib_s"]) / med(n, lambda r: r["mib_s"])
        line = f"- Warm, {wl}: Floe {ratio:.2f}x nginx throughput (target >= 1.5x): {verdict(ratio >= 1.5)}"
        if wl == "64KiB":
            p50 = (med(f, lambda r: r["p50_ms"]), med(n, lambda r: r["p50_ms"]))
            p99 = (med(f, lambda r: r["p99_ms"]), med(n, lambda r: r["p99_ms"]))
            line += (f"; p50 {p50[0]:.2f} vs {p50[1]:.2f} ms, p99 {p99[0]:.2f} vs {p99[1]:.2f} ms (target <= nginx):"
                     f" {verdict(p50[0] <= p50[1] and p99[0] <= p99[1])}")
        out.append(line)
    for m in memory:
        ceiling = m["dram_mib"] + m["meta_mib"] + 64
        out.append(f"- Memory ({m['malloc']}): peak RSS {m['peak_rss_mib']:.0f} MiB with data DRAM {m['dram_mib']:.0f} MiB +"
                   f" metadata DRAM {m['meta_mib']:.0f} MiB over a {m['set_mib']:.0f} MiB working set"
                   f" (target <= {ceiling:.0f} MiB): {verdict(m['peak_rss_mib'] <= ceiling)}")
    for m in memory:
        if m["disk_writes"] == "once" and m["malloc"] == "jemalloc as built":
            r = m["disk_write_mib"] / max(m["origin_mib"], 1e-9)
            out.append(f"- Disk writes (issue 24): {r:.2f} MiB written to the disk tier per MiB the data store fetched"
                       f" from the origin (target <= 1.2x): {verdict(r <= 1.2)}")
            if m.get("disk_served_mib"):
                d = m["disk_read_mib"] / m["disk_served_mib"]
                out.append(f"- Disk reads (issue 24): {d:.2f} MiB read from the disk tier per MiB of reads' ranges it"
                           f" served (target <= 1.5x): {verdict(d <= 1.5)}")
    return out


def write_report(results, waves, args, files, fsize, sf, profiles, memory, hinted):
    cmd = "load/bench.sh" + (" --quick" if args.quick else "")
    lines = ["<!-- bench:begin -->",
             f"Produced by `{cmd}` on {time.strftime('%Y-%m-%d')} ({platform.machine()}, {os.cpu_count()} cores;"
             " client, proxies and origin share the machine). Origin: MinIO behind toxiproxy adding 30 ms to every"
             " request (origin requests are counted from MinIO's audit webhook). nginx: Debian's nginx,"
             " proxy_cache + slice 2m. Floe: release build, 2 MiB blocks, data store DRAM 3 GiB, `fill: auto`."
             f" Set: {files} x {fsize // MiB} MiB Parquet files, read once untimed so MinIO's page cache is warm for"
             f" every target. Each row runs for {SECONDS} s (a cold row stops earlier after its {LIST} random"
             " ranges) on a fresh proxy with an empty cache; a warm row then cycles the requests its cold row made"
             f" for {SECONDS} s. Every row ran {PASSES} times: MiB/s is the median (min-max), the other columns"
             " medians. CPU s per GiB is the proxy's own CPU per GiB it served; origin/served is the bytes Floe"
             " fetched from the origin per byte served.", ""]
    for wl in ("1MiB", "64KiB"):
        lines += [f"## {wl} random ranged GETs", "",
                  "| clients | target | MiB/s | p50 ms | p99 ms | requests | CPU s origin side | proxy CPU s per GiB | origin/served |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for c in (1, 4, 16):
            for label in ("direct", "nginx cold", "nginx warm", "floe cold", "floe warm", "floe cold full"):
                rows = results.get((wl, c, label))
                if not rows:
                    continue
                o = "" if rows[0]["origin_mib"] is None else f"{med(rows, lambda r: r['origin_mib'] / (r['bytes'] / MiB)):.2f}"
                lines.append(f"| {c} | {label} | {spread(rows, lambda r: r['mib_s'])} | {med(rows, lambda r: r['p50_ms']):.1f} |"
                             f" {med(rows, lambda r: r['p99_ms']):.1f} | {med(rows, lambda r: r['requests']):.0f} |"
                             f" {med(rows, lambda r: r['cpu_origin_s']):.2f} |"
                             f" {'' if label == 'direct' else f'{med(rows, cpu_per_gib):.2f}'} | {o} |")
        lines.append("")
    lines += [f"## DuckDB TPC-H SF{sf} query wave (Parquet over httpfs)", "",
              f"Before the cold wave the files' column chunks ({hinted['chunks']} ranges) were published to Floe's"
              " admin API (`POST /chunks`) as floe-control does after a commit; the footers were read straight from"
              " the origin, so nothing was warmed.", "",
              "| query | " + " | ".join(f"{l} s (origin req)" for l in waves) + " |",
              "|---|" + "---:|" * len(waves)]
    for q in TPCH_QUERIES:
        lines.append(f"| {q} | " + " | ".join(f"{w[q]['s']:.2f} ({w[q]['origin_requests']})" for w in waves.values()) + " |")
    tot = {l: sum(v["s"] for v in w.values()) for l, w in waves.items()}
    lines.append("| total | " + " | ".join(f"{t:.2f}" for t in tot.values()) + " |")
    m = memory[0]
    lines += ["", "## Memory with the disk tier in use", "",
              f"Floe with data DRAM {m['dram_mib']:.0f} MiB (disk 2 GiB) and metadata DRAM {m['meta_mib']:.0f} MiB;"
              f" 16 clients read random 1 MiB ranges of a {m['set_mib']:.0f} MiB working set cold for {3 * SECONDS} s,"
              f" then cycle those requests for {3 * SECONDS} s. Once with jemalloc as built (as `floe-proxy` runs"
              f" from a build and in the image: `.cargo/config.toml` compiles in an arena per CPU, background"
              f" purging threads and a 0.25 s dirty decay) and once with `_RJEM_MALLOC_CONF={EAGER_PURGE}` (freed pages"
              f" returned at once).", "",
              "The disk tier holds pages of blocks (256 KiB), each written once. `disk_writes` is the cache setting:"
              " `once` (default: a whole block's pages when stored, a partial block's complete pages when it leaves"
              " DRAM) or `every_insert` (complete pages at each fill too), run side by side. Disk written per origin"
              " MiB: disk-tier bytes written per byte the data store fetched from the origin (what it could admit);"
              " disk read per disk-served MiB: per byte of reads' ranges that came from disk pages.", "",
              "| malloc | disk_writes | peak RSS MiB | cold MiB/s | warm MiB/s | warm p99 ms | disk read MiB | disk written MiB"
              " | disk written per origin MiB | served from disk MiB | disk read per disk-served MiB |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in memory:
        served = m.get("disk_served_mib", 0)
        lines.append(f"| {m['malloc']} | {m['disk_writes']} | {m['peak_rss_mib']:.0f} | {m['cold']['mib_s']:.1f} |"
                     f" {m['warm']['mib_s']:.1f} | {m['warm']['p99_ms']:.1f} | {m['disk_read_mib']:.0f} |"
                     f" {m['disk_write_mib']:.0f} | {m['disk_write_mib'] / max(m['origin_mib'], 1e-9):.2f} |"
                     f" {served:.0f} | {m['disk_read_mib'] / max(served, 1e-9):.2f} |")
    lines += ["", "## Targets (issue 15)", ""] + targets(results, waves, memory)
    for wl, top in profiles.items():
        lines += ["", f"## Where the warm hit path spends its time ({wl} ranges)", "",
                  f"`perf record -F 1999 -g` on floe-proxy during {SECONDS} s of warm 16-client reads (symbols >= 1.5% self time):", "",
                  "```", top, "```"]
    lines += ["<!-- bench:end -->"]
    block = "\n".join(lines) + "\n"
    write_section("<!-- bench:begin -->", "<!-- bench:end -->", block)
    print(block)


if __name__ == "__main__":
    main()
