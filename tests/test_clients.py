"""Real clients and engines through Floe give byte-identical results to direct-to-origin:
the AWS CLI (multipart cp, sync, ls, presign), DuckDB httpfs, PyIceberg, Polars, pyarrow."""
import hashlib
import os
import pathlib
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import urllib3

from conftest import BUCKET, CLIENT, ORIGIN_KEY, ORIGIN_SECRET

VENV_BIN = pathlib.Path(sys.executable).parent


AWS_CONFIG = pathlib.Path("/tmp/floe-test-aws-config")
# AWS CLI v1 presigns with SigV2 unless told otherwise; Floe accepts SigV4 only.
AWS_CONFIG.write_text("[default]\ns3 =\n    signature_version = s3v4\n")


def aws(port, *args, key=CLIENT):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=key[0], AWS_SECRET_ACCESS_KEY=key[1], AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=str(AWS_CONFIG), AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    out = subprocess.run([str(VENV_BIN / "aws"), "--endpoint-url", f"http://127.0.0.1:{port}", *args],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def test_cli_multipart_cp_sync_ls_presign(floe, minio, direct, tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        for _ in range(100):
            f.write(os.urandom(1 << 20))
    aws(floe.port, "s3", "cp", str(big), f"s3://{BUCKET}/cli/big.bin")
    head = direct.head_object(Bucket=BUCKET, Key="cli/big.bin")
    assert head["ContentLength"] == 100 << 20
    assert "-" in head["ETag"], "a 100 MiB cp is a multipart upload"
    back = tmp_path / "back.bin"
    aws(floe.port, "s3", "cp", f"s3://{BUCKET}/cli/big.bin", str(back))
    assert sha(back) == sha(big)

    src = tmp_path / "tree"
    for i in range(5):
        (src / f"d{i % 2}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 2}" / f"f{i}.txt").write_bytes(os.urandom(1000 + i))
    aws(floe.port, "s3", "sync", str(src), f"s3://{BUCKET}/sync/")
    listing = aws(floe.port, "s3", "ls", "--recursive", f"s3://{BUCKET}/sync/")
    assert len(listing.strip().splitlines()) == 5
    dst = tmp_path / "tree2"
    aws(floe.port, "s3", "sync", f"s3://{BUCKET}/sync/", str(dst))
    for p in src.rglob("*.txt"):
        assert (dst / p.relative_to(src)).read_bytes() == p.read_bytes()
    direct_listing = aws(minio.port, "s3", "ls", "--recursive", f"s3://{BUCKET}/sync/", key=(ORIGIN_KEY, ORIGIN_SECRET))
    assert sorted(l.split()[-1] for l in listing.splitlines()) == sorted(l.split()[-1] for l in direct_listing.splitlines())

    url = aws(floe.port, "s3", "presign", f"s3://{BUCKET}/sync/d0/f0.txt", "--expires-in", "300").strip()
    r = urllib3.PoolManager().request("GET", url)
    assert r.status == 200 and r.data == (src / "d0" / "f0.txt").read_bytes()


@pytest.fixture(scope="module")
def parquet_key(s3):
    n = 200_000
    table = pa.table({"id": pa.array(range(n), pa.int64()), "v": pa.array([i * 0.5 for i in range(n)]),
                      "s": pa.array([f"name-{i % 977}" for i in range(n)])})
    path = "/tmp/floe-test-engines.parquet"
    pq.write_table(table, path, row_group_size=50_000)
    s3.upload_file(path, BUCKET, "engines/t.parquet")
    return "engines/t.parquet"


def duckdb_query(port, key, secret, sql):
    import duckdb
    import duckdb_extension_httpfs
    ext = next(pathlib.Path(duckdb_extension_httpfs.__file__).parent.rglob("httpfs.duckdb_extension"))
    con = duckdb.connect()
    con.execute(f"LOAD '{ext}'")
    con.execute(f"CREATE SECRET s (TYPE s3, KEY_ID '{key}', SECRET '{secret}', REGION 'us-east-1', "
                f"ENDPOINT '127.0.0.1:{port}', URL_STYLE 'path', USE_SSL false)")
    return con.execute(sql).fetchall()


def test_duckdb_httpfs(floe, minio, parquet_key):
    sql = (f"SELECT s, count(*), sum(v) FROM 's3://{BUCKET}/{parquet_key}' WHERE id % 7 = 0 "
           f"GROUP BY s ORDER BY s")
    via = duckdb_query(floe.port, *CLIENT, sql)
    ref = duckdb_query(minio.port, ORIGIN_KEY, ORIGIN_SECRET, sql)
    assert len(via) == 977 and via == ref


def test_polars_and_pyarrow(floe, minio, parquet_key):
    import polars as pl
    from pyarrow import fs

    def polars_read(port, key, secret):
        return pl.read_parquet(f"s3://{BUCKET}/{parquet_key}", storage_options={
            "aws_endpoint_url": f"http://127.0.0.1:{port}", "aws_access_key_id": key,
            "aws_secret_access_key": secret, "aws_region": "us-east-1", "aws_allow_http": "true"})

    a, b = polars_read(floe.port, *CLIENT), polars_read(minio.port, ORIGIN_KEY, ORIGIN_SECRET)
    assert a.height == 200_000 and a.equals(b)

    def arrow_read(port, key, secret):
        f = fs.S3FileSystem(access_key=key, secret_key=secret, endpoint_override=f"127.0.0.1:{port}",
                            scheme="http", force_virtual_addressing=False, region="us-east-1")
        return pq.read_table(f"{BUCKET}/{parquet_key}", filesystem=f)

    assert arrow_read(floe.port, *CLIENT).equals(arrow_read(minio.port, ORIGIN_KEY, ORIGIN_SECRET))


def test_pyiceberg_sql_catalog(floe, minio, tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    def catalog(port, key, secret):
        return SqlCatalog("t", uri=f"sqlite:///{tmp_path}/cat.db", warehouse=f"s3://{BUCKET}/iceberg",
                          **{"s3.endpoint": f"http://127.0.0.1:{port}", "s3.access-key-id": key,
                             "s3.secret-access-key": secret, "s3.region": "us-east-1",
                             "s3.force-virtual-addressing": "false"})

    via = catalog(floe.port, *CLIENT)
    via.create_namespace("ns")
    data = pa.table({"id": pa.array(range(1000), pa.int64()), "name": pa.array([f"n{i}" for i in range(1000)])})
    t = via.create_table("ns.items", schema=data.schema)
    t.append(data)
    t.append(data.slice(0, 10))
    got = via.load_table("ns.items").scan().to_arrow().sort_by("id")
    ref = catalog(minio.port, ORIGIN_KEY, ORIGIN_SECRET).load_table("ns.items").scan().to_arrow().sort_by("id")
    assert got.num_rows == 1010 and got.equals(ref)


def test_pyarrow_small_multipart_writes_all_complete(floe, direct):
    """Arrow's S3 writer (aws-sdk-cpp) uploads even small files as one aws-chunked part with a
    CRC64NVME trailer. The SigV4 trailer stage holds bytes back; an empty piece it left used to be
    written upstream as a zero-length chunk (a premature terminator), so now and then the next
    request on that origin connection failed with 400. 300 uploads caught it about every run."""
    import pyarrow.fs as pafs
    fs = pafs.S3FileSystem(access_key=CLIENT[0], secret_key=CLIENT[1], scheme="http",
                           endpoint_override=f"127.0.0.1:{floe.port}", region="us-east-1",
                           force_virtual_addressing=False)
    failed = []
    for i in range(300):
        try:
            with fs.open_output_stream(f"{BUCKET}/mpu-small/f{i}.avro") as f:
                f.write(bytes([i % 251]) * (1000 + i * 37))
        except OSError as e:
            failed.append((i, str(e)[:160]))
    assert failed == []
    got = direct.get_object(Bucket=BUCKET, Key="mpu-small/f299.avro")["Body"].read()
    assert got == bytes([299 % 251]) * (1000 + 299 * 37)
