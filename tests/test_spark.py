"""Spark through Floe, against Spark straight to MinIO: an Iceberg table on the REST catalog
fixture (the Iceberg Spark runtime with S3FileIO) created, appended to, read back and
compacted with `rewrite_data_files`, and a Parquet dataset written and read over `s3a://`
(hadoop-aws). The two sides' results must be equal, and a repeated scan through Floe must not
fetch the table's data files from the origin again.

Spark needs pyspark (~450 MB) and jars from Maven Central, and a JVM start per session, so
this file runs from its own script, `tests/spark.sh`, which installs them and sets
FLOE_SPARK=1; the default suite skips it."""
import os
import pathlib

import pytest

from conftest import BUCKET, CLIENT, ORIGIN_KEY, ORIGIN_SECRET, free_port, start_cached_floe
from relay import Relay
from test_control import start_rest

pytestmark = pytest.mark.skipif(not os.environ.get("FLOE_SPARK"), reason="run tests/spark.sh")

ICEBERG = "1.12.0"  # the runtime for Spark 4.1 (pyspark 4.1.x)
NS = "sparkns"


def hadoop_version():
    import pyspark
    jars = pathlib.Path(pyspark.__file__).parent / "jars"
    api = next(jars.glob("hadoop-client-api-*.jar"))
    return api.name.removeprefix("hadoop-client-api-").removesuffix(".jar")


@pytest.fixture(scope="module")
def stack(minio, tmp_path_factory):
    from pyspark.sql import SparkSession
    tmp = tmp_path_factory.mktemp("spark")
    rest_port = free_port()
    rest = start_rest(tmp, minio.port, rest_port)
    relay = Relay(minio.port)
    floe = start_cached_floe(tmp, relay.port, tmp / "cache", data=(256 << 20, 1 << 30))
    b = (SparkSession.builder.master("local[2]").appName("floe-spark")
         .config("spark.jars.packages", ",".join([
             f"org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:{ICEBERG}",
             f"org.apache.iceberg:iceberg-aws-bundle:{ICEBERG}",
             f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"]))
         .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2"))
    sides = {"direct": (minio.port, ORIGIN_KEY, ORIGIN_SECRET), "floe": (floe.port, *CLIENT)}
    for name, (port, key, secret) in sides.items():
        c = f"spark.sql.catalog.{name}"
        b = (b.config(c, "org.apache.iceberg.spark.SparkCatalog").config(f"{c}.type", "rest")
             .config(f"{c}.uri", f"http://127.0.0.1:{rest_port}")
             .config(f"{c}.io-impl", "org.apache.iceberg.aws.s3.S3FileIO")
             .config(f"{c}.s3.endpoint", f"http://127.0.0.1:{port}")
             .config(f"{c}.s3.path-style-access", "true")
             .config(f"{c}.s3.access-key-id", key).config(f"{c}.s3.secret-access-key", secret)
             .config(f"{c}.client.region", "us-east-1"))
    spark = b.getOrCreate()
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS direct.{NS}")
    yield dict(spark=spark, relay=relay, floe=floe, minio=minio, sides=sides)
    spark.stop()
    floe.stop()
    rest.stop()
    relay.down()


def iceberg_round(spark, side):
    t = f"{side}.{NS}.events_{side}"
    spark.sql(f"DROP TABLE IF EXISTS {t}")
    spark.sql(f"CREATE TABLE {t} (id BIGINT, p INT, v STRING) USING iceberg PARTITIONED BY (p)")
    for start in (0, 1000, 2000):
        spark.sql(f"INSERT INTO {t} SELECT id, CAST(id % 4 AS INT), concat('v-', id) "
                  f"FROM range({start}, {start + 1000})")
    before = [tuple(r) for r in spark.sql(f"SELECT p, count(*), sum(id), max(v) FROM {t} GROUP BY p ORDER BY p").collect()]
    rewritten = spark.sql(f"CALL {side}.system.rewrite_data_files(table => '{NS}.events_{side}', "
                          "options => map('min-input-files', '2'))").collect()[0]
    after = [tuple(r) for r in spark.sql(f"SELECT p, count(*), sum(id), max(v) FROM {t} GROUP BY p ORDER BY p").collect()]
    files = spark.sql(f"SELECT count(*) FROM {t}.files").collect()[0][0]
    return before, after, rewritten[0], files


def test_an_iceberg_table_written_read_and_compacted_through_floe_equals_direct(stack):
    spark = stack["spark"]
    direct = iceberg_round(spark, "direct")
    floe = iceberg_round(spark, "floe")
    assert floe == direct, (floe, direct)
    before, after, rewritten, files = floe
    assert before == after and sum(r[1] for r in after) == 3000
    assert rewritten > 0 and files == 4, "three appends' files compacted to one per partition"
    relay, key = stack["relay"], f"/{BUCKET}/wh/{NS}/events_floe/data/"
    mark = len(relay.lines)
    again = [tuple(r) for r in spark.sql(f"SELECT p, count(*), sum(id), max(v) FROM floe.{NS}.events_floe "
                                         "GROUP BY p ORDER BY p").collect()]
    assert again == after
    fetched = [t for m, t in relay.lines[mark:] if m == "GET" and t.startswith(key)]
    assert fetched == [], f"the repeated scan fetched data files from the origin: {fetched}"


def test_parquet_over_s3a_through_floe_equals_direct(stack):
    spark = stack["spark"]
    got = {}
    for side, (port, key, secret) in stack["sides"].items():
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        for k, v in {"fs.s3a.endpoint": f"http://127.0.0.1:{port}", "fs.s3a.access.key": key,
                     "fs.s3a.secret.key": secret, "fs.s3a.path.style.access": "true",
                     "fs.s3a.connection.ssl.enabled": "false", "fs.s3a.endpoint.region": "us-east-1",
                     "fs.s3a.impl.disable.cache": "true"}.items():
            conf.set(k, v)
        path = f"s3a://{BUCKET}/spark/s3a-{side}"
        spark.range(0, 50_000).selectExpr("id", "id % 7 AS k", "uuid() AS u").drop("u") \
            .write.mode("overwrite").parquet(path)
        got[side] = [tuple(r) for r in spark.read.parquet(path).groupBy("k").count().orderBy("k").collect()]
    assert got["floe"] == got["direct"] and sum(r[1] for r in got["floe"]) == 50_000


def test_a_repeated_s3a_read_with_default_change_detection_is_served_from_the_cache(stack):
    """S3A's default change detection (mode server, source etag) sends its reads with
    If-Match: the repeat of a read must still make no origin GET for the data files."""
    spark, relay = stack["spark"], stack["relay"]
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = f"{BUCKET}/spark/s3a-repeat"
    for side in ("direct", "floe"):  # written straight to MinIO, read through Floe
        port, key, secret = stack["sides"][side]
        for k, v in {"fs.s3a.endpoint": f"http://127.0.0.1:{port}", "fs.s3a.access.key": key,
                     "fs.s3a.secret.key": secret, "fs.s3a.path.style.access": "true",
                     "fs.s3a.connection.ssl.enabled": "false", "fs.s3a.endpoint.region": "us-east-1",
                     "fs.s3a.impl.disable.cache": "true"}.items():
            conf.set(k, v)
        if side == "direct":
            spark.range(0, 80_000).selectExpr("id", "id % 5 AS k").write.mode("overwrite") \
                .parquet(f"s3a://{path}")
    assert conf.get("fs.s3a.change.detection.mode") in (None, "server")

    def query():
        rows = spark.read.parquet(f"s3a://{path}").groupBy("k").count().orderBy("k").collect()
        return [tuple(r) for r in rows]

    def data_gets(mark):
        return [t for m, t in relay.lines[mark:] if m == "GET" and t.startswith(f"/{path}/")
                and ".parquet" in t]

    mark = len(relay.lines)
    first = query()
    assert sum(r[1] for r in first) == 80_000
    assert data_gets(mark), "the first read did not reach the origin through Floe"
    mark = len(relay.lines)
    assert query() == first
    assert data_gets(mark) == [], "the repeated s3a read went to the origin"
