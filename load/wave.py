#!/usr/bin/env python3
"""The three-engine wave (design 000 §8.1): TPC-DS tables (DuckDB's tpcds extension) written as
Iceberg tables through PyIceberg to the REST catalog fixture, MinIO behind toxiproxy (+30 ms),
and three queries (a fact-table count, a monthly sales aggregation, an item-revenue
aggregation) run by DuckDB, Trino and ClickHouse (chDB): direct, with the engine's own cache,
through Floe cold and through Floe warm. Each cell: seconds, origin requests and origin bytes
(MinIO's audit log). Writes its section of load/PERFORMANCE.md.

Run with load/wave.sh (installs and builds first). Options: --sf (TPC-DS scale factor).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "load"))
import bench  # noqa: E402  (MinIO with its audit log, toxiproxy, release Floe)
import conftest  # noqa: E402
from perfdoc import write_section  # noqa: E402
from test_control import iceberg, start_rest  # noqa: E402
from test_engines import iceberg_catalog, launch_trino, trino_query, trino_server_files  # noqa: E402

NS = "tpcds"
TABLES = ("store_sales", "date_dim", "item")
QUERIES = {
    "count": "SELECT count(*) FROM {store_sales}",
    "monthly": ("SELECT d_year, d_moy, round(sum(ss_ext_sales_price), 2) FROM {store_sales} "
                "JOIN {date_dim} ON ss_sold_date_sk = d_date_sk GROUP BY d_year, d_moy "
                "ORDER BY d_year, d_moy"),
    "item revenue": ("SELECT i_category, round(sum(ss_net_paid), 2) FROM {store_sales} "
                     "JOIN {item} ON ss_item_sk = i_item_sk WHERE i_category IS NOT NULL "
                     "GROUP BY i_category ORDER BY i_category"),
}


def tpcds_tables(sf):
    """The three tables as Arrow, from DuckDB's tpcds extension (offline, from its wheel)."""
    import duckdb
    import duckdb_extension_tpcds
    ext = next(pathlib.Path(duckdb_extension_tpcds.__file__).parent.rglob("tpcds.duckdb_extension"))
    con = duckdb.connect()
    con.execute(f"LOAD '{ext}'")
    con.execute(f"CALL dsdgen(sf={sf})")
    return {t: con.execute(f"SELECT * FROM {t}").fetch_arrow_table() for t in TABLES}


def write_lake(rest_port, minio_port, sf):
    writer = iceberg(rest_port, minio_port, bench.KEY, bench.SECRET)
    writer.create_namespace_if_not_exists(NS)
    locations = {}
    for name, data in tpcds_tables(sf).items():
        if writer.table_exists(f"{NS}.{name}"):
            writer.drop_table(f"{NS}.{name}")
        table = writer.create_table(f"{NS}.{name}", schema=data.schema)
        table.append(data)
        locations[name] = writer.load_table(f"{NS}.{name}").metadata.location
    return locations


# Each engine process runs its query once per line on stdin and prints [seconds, rows] per
# run, so the caller can mark MinIO's audit log between runs.
PRELUDE = """
import json, pathlib, sys, time
def emit(t0, rows):
    norm = [[c if c is None or isinstance(c, str) else float(c) for c in r] for r in rows]
    print(json.dumps([time.perf_counter() - t0, norm]), flush=True)
"""

DUCKDB = PRELUDE + """
import duckdb
port, rest, key, secret, own, sql = sys.argv[1:7]
con = duckdb.connect()
for name in ("httpfs", "avro", "iceberg"):
    mod = __import__(f"duckdb_extension_{name}")
    con.execute(f"LOAD '{next(pathlib.Path(mod.__file__).parent.rglob(name + '.duckdb_extension'))}'")
# DuckDB's own cache: its external file cache (in memory, on by default); off for the other cells
# so a second run reads through the endpoint again.
con.execute(f"SET enable_external_file_cache = {own}")
con.execute(f"CREATE SECRET s (TYPE s3, KEY_ID '{key}', SECRET '{secret}', REGION 'us-east-1', "
            f"ENDPOINT '127.0.0.1:{port}', URL_STYLE 'path', USE_SSL false)")
con.execute(f"ATTACH '' AS lake (TYPE iceberg, ENDPOINT 'http://127.0.0.1:{rest}', AUTHORIZATION_TYPE 'none')")
for _ in sys.stdin:
    t0 = time.perf_counter()
    emit(t0, con.execute(sql).fetchall())
"""

CHDB = PRELUDE + """
from chdb import session
s = session.Session()
sql = sys.argv[1]
for _ in sys.stdin:
    t0 = time.perf_counter()
    emit(t0, json.loads(s.query(sql, "JSONCompact").data())["data"])
"""


class Child:
    """An engine process; `run()` runs its query once more."""

    def __init__(self, script, *args):
        self.p = subprocess.Popen([sys.executable, "-c", script, *map(str, args)], text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def run(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(self.p.stderr.read()[-3000:])
        took, rows = json.loads(line)
        return took, rows

    def close(self):
        self.p.stdin.close()
        self.p.wait(60)


def normal(rows):
    """Rows comparable across engines: numbers (Trino sends decimals as text) as floats rounded
    to cents, text as text."""
    def cell(c):
        if c is None:
            return c
        try:
            return round(float(c), 2)
        except ValueError:
            return c
    return [[cell(c) for c in r] for r in rows]


class TrinoRun:
    """One query on one Trino catalog; `run()` runs it once more."""

    def __init__(self, url, sql):
        self.url, self.sql = url, sql

    def run(self):
        t0 = time.perf_counter()
        rows = trino_query(self.url, self.sql)
        return time.perf_counter() - t0, rows

    def close(self):
        pass


CHDB_NO_CACHE = " SETTINGS use_iceberg_metadata_files_cache = 0, use_parquet_metadata_cache = 0"
CHDB_OWN_CACHE = " SETTINGS use_page_cache_for_object_storage = 1"


def sessions(engine, mode, ports, ctx):
    """(query name, session) for each query of `engine` in `mode` (direct, own, floe)."""
    port = ports["floe"][engine] if mode == "floe" else ports["origin"]
    key, secret = bench.KEY, bench.SECRET
    for name, q in QUERIES.items():
        if engine == "duckdb":
            sql = q.format(**{t: f"lake.{NS}.{t}" for t in TABLES})
            own = "true" if mode == "own" else "false"
            yield name, Child(DUCKDB, port, ctx["rest_port"], key, secret, own, sql)
        elif engine == "clickhouse":
            tables = {t: f"icebergS3('http://127.0.0.1:{port}/{ctx['paths'][t]}', '{key}', '{secret}') AS {t}"
                      for t in TABLES}
            sql = q.format(**tables) + (CHDB_OWN_CACHE if mode == "own" else CHDB_NO_CACHE)
            yield name, Child(CHDB, sql)
        else:
            catalog = {"direct": "direct", "own": "cached", "floe": "floe", "warmup": "warmup"}[mode]
            yield name, TrinoRun(ctx["trino"], q.format(**{t: f"{catalog}.{NS}.{t}" for t in TABLES}))


# The REST catalog fixture reads metadata.json from MinIO itself on every table load: its
# requests are not the engine's (the catalog runs beside the lake, not behind Floe).
CATALOG_AGENT = "s3fileio/"
AGENTS = set()


def cell(engine, mode, ports, ctx, s3):
    """Runs each query twice in one engine session: per run, seconds, origin requests and bytes
    summed over the queries, and the answers."""
    runs = [{"s": 0.0, "req": 0, "bytes": 0, "rows": {}} for _ in range(2)]
    for name, sess in sessions(engine, mode, ports, ctx):
        try:
            for r in runs:
                mark = bench.AUDIT.mark(s3)
                took, rows = sess.run()
                end = bench.AUDIT.mark(s3)
                r["s"] += took
                req, sent = bench.AUDIT.between(mark, end, skip_agent=CATALOG_AGENT)
                r["req"] += req
                r["bytes"] += sent
                AGENTS.update(bench.AUDIT.agents(mark, end))
                r["rows"][name] = normal(rows)
                r.setdefault("per_query", {})[name] = took
        finally:
            sess.close()
    return runs


def start_trino(work, rest_port, origin_port, floe_port):
    etc = work / "trino-etc"
    subprocess.run(["rm", "-rf", str(etc), str(work / "trino-data"), str(work / "trino-cache")], check=True)
    (etc / "catalog").mkdir(parents=True)
    port = conftest.free_port()
    trino_server_files(etc, work / "trino-data", port, heap="3G", memory=("2GB", "2GB"))
    key, secret = bench.KEY, bench.SECRET
    (etc / "catalog" / "direct.properties").write_text(iceberg_catalog(rest_port, origin_port, key, secret))
    (etc / "catalog" / "floe.properties").write_text(iceberg_catalog(rest_port, floe_port, key, secret))
    # For a pass that warms the JVM (JIT) before the measured ones; its numbers are dropped.
    (etc / "catalog" / "warmup.properties").write_text(iceberg_catalog(rest_port, origin_port, key, secret))
    # Trino's own cache: the file system cache (Alluxio-based) on a local directory.
    (etc / "catalog" / "cached.properties").write_text(
        iceberg_catalog(rest_port, origin_port, key, secret)
        + f"fs.cache.enabled=true\nfs.cache.directories={work / 'trino-cache'}\n"
        + "fs.cache.max-sizes=4GB\n")
    p = launch_trino(etc, work / "trino.log", port)
    return p


ENGINES = ("duckdb", "trino", "clickhouse")
MODES = ("direct", "own", "floe")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1)
    args = ap.parse_args()
    if os.environ.get("FLOE_BIN"):  # a smoke run with another build
        bench.FLOE_RELEASE = pathlib.Path(os.environ["FLOE_BIN"])
    bench.WORK = conftest.CACHE / "wave"
    bench.BUCKET = conftest.BUCKET  # the REST fixture's warehouse is s3://floe-test/wh
    subprocess.run(["rm", "-rf", str(bench.WORK)], check=True)
    bench.WORK.mkdir(parents=True)
    procs = []
    try:
        minio, s3 = bench.start_minio()
        procs.append(minio)
        toxi, origin_port = bench.start_toxiproxy(minio.port)
        procs.append(toxi)
        rest_port = conftest.free_port()
        procs.append(start_rest(bench.WORK, minio.port, rest_port))
        t0 = time.monotonic()
        locations = write_lake(rest_port, minio.port, args.sf)
        print(f"lake written in {time.monotonic() - t0:.0f} s", flush=True)
        floes = {}
        for engine in ENGINES:  # one Floe per engine, each cold when that engine starts
            bench.WORK = conftest.CACHE / "wave" / engine
            bench.WORK.mkdir(parents=True, exist_ok=True)
            floes[engine] = bench.start_floe(origin_port, data_dram=1 << 30, data_disk=2 << 30)
            procs.append(floes[engine])
        bench.WORK = conftest.CACHE / "wave"
        trino = start_trino(bench.WORK, rest_port, origin_port, floes["trino"].port)
        procs.append(trino)
        ctx = {"rest_port": rest_port, "trino": trino.url,
               "paths": {t: loc.removeprefix("s3://") for t, loc in locations.items()}}
        ports = {"origin": origin_port, "floe": {e: p.port for e, p in floes.items()}}
        cell("trino", "warmup", ports, ctx, s3)  # JIT warm-up of the fresh JVM, not measured
        results = {}
        for engine in ENGINES:
            for mode in MODES:
                results[(engine, mode)] = cell(engine, mode, ports, ctx, s3)
                print(engine, mode, [(round(r["s"], 2), r["req"], r["bytes"]) for r in results[(engine, mode)]],
                      flush=True)
        print("user agents seen:", sorted(AGENTS), flush=True)
        write_report(results, args)
    finally:
        for p in reversed(procs):
            p.stop()


def write_report(results, args):
    reference = results[("duckdb", "direct")][0]["rows"]
    lines = ["<!-- wave:begin -->", "## The three-engine wave (TPC-DS, Iceberg, +30 ms origin)", "",
             f"`load/wave.sh --sf {args.sf:g}`: TPC-DS SF{args.sf:g} (store_sales, date_dim, item) as Iceberg "
             "tables (PyIceberg, REST catalog fixture), MinIO behind toxiproxy adding 30 ms per request, "
             "all on this 2-core machine. Three queries per pass (a store_sales count, monthly sales, item "
             "revenue); each cell sums them: seconds / origin requests / origin MiB (MinIO's audit log). "
             "Each pass runs its queries twice in one engine session (cold, then warm). Direct and Floe "
             "passes switch the engine's in-process file caches off (DuckDB's external file cache, "
             "ClickHouse's Parquet and Iceberg metadata caches) so a warm run reads through its endpoint; "
             "the own-cache pass is DuckDB's external file cache, Trino's `fs.cache` on a local directory, "
             "ClickHouse's page cache for object storage (chDB has no filesystem cache without a server "
             "config). Trino keeps its default in-memory metadata cache in every pass, and a pass on a "
             "catalog of its own warms its JVM first (not measured). Origin requests leave out the REST "
             "catalog's own reads of metadata.json (it reads MinIO directly on every table load).", "",
             "| engine | direct | own cache cold | own cache warm | Floe cold | Floe warm | equal answers |",
             "|---|---|---|---|---|---|---|"]

    def fmt(r):
        return f"{r['s']:.2f} s / {r['req']} / {r['bytes'] / (1 << 20):.1f}"

    for engine in ENGINES:
        d, o, f = (results[(engine, m)] for m in MODES)
        equal = all(r["rows"] == reference for m in MODES for r in results[(engine, m)])
        lines.append(f"| {engine} | {fmt(d[0])} | {fmt(o[0])} | {fmt(o[1])} | {fmt(f[0])} | {fmt(f[1])} | "
                     f"{'yes' if equal else 'NO'} |")
    lines += ["", "| engine | Floe cold / direct | Floe warm / own warm | Floe warm / direct |", "|---|---|---|---|"]
    for engine in ENGINES:
        d, o, f = (results[(engine, m)] for m in MODES)
        lines.append(f"| {engine} | {f[0]['s'] / d[0]['s']:.2f}x | {f[1]['s'] / o[1]['s']:.2f}x | "
                     f"{d[0]['s'] / f[1]['s']:.1f}x faster |")
    lines += ["", "Per query (seconds, direct / own warm / Floe cold / Floe warm):", ""]
    for engine in ENGINES:
        d, o, f = (results[(engine, m)] for m in MODES)
        per = ", ".join(f"{q}: {d[0]['per_query'][q]:.2f} / {o[1]['per_query'][q]:.2f} / "
                        f"{f[0]['per_query'][q]:.2f} / {f[1]['per_query'][q]:.2f}" for q in QUERIES)
        lines.append(f"- {engine}: {per}")
    lines.append("<!-- wave:end -->")
    write_section("<!-- wave:begin -->", "<!-- wave:end -->", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
