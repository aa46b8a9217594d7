"""Routes by bucket pattern and bucket operations: one route in front of many buckets
(`bucket: "team-*"`), exact names before patterns, the first pattern winning, and bucket-level
operations (CreateBucket, DeleteBucket, Get/PutBucketVersioning) carried to the origin only on
routes that say `bucket_operations: true`."""
import os

import pytest

from conftest import BUCKET, CLIENT, CLIENT2, FLOE_BIN, ORIGIN_KEY, ORIGIN_SECRET, Proc, free_port, s3_client
from test_s3_ops import code_of

YAML = """
server:
  listeners: [{{address: "127.0.0.1:{port}"}}]
  grace_period_seconds: 1
origins:
  minio:
    endpoint: http://127.0.0.1:{relay}
    credentials: {{from: env, access_key_env: K, secret_key_env: S}}
routes:
  - bucket: team-exact          # a name: wins over the pattern below
    origin: minio
    clients: [{{access_key: {c2}, secret_key: {s2}}}]
  - bucket: "team-*"
    origin: minio
    clients: [{{access_key: {c1}, secret_key: {s1}}}]
    filters: [sigv4, blocks]
    bucket_operations: true
  - bucket: "team-?"            # never reached: team-* matches first
    origin: minio
    clients: [{{access_key: {c2}, secret_key: {s2}}}]
  - bucket: "ro-*"
    origin: minio
    clients: [{{access_key: {c1}, secret_key: {s1}}}]
  - bucket: {bucket}
    origin: minio
    clients: [{{access_key: {c1}, secret_key: {s1}}}]
cache:
  dir: {cache}
  block_bytes: 1048576
  data: {{dram_bytes: 67108864, disk_bytes: 67108864}}
  metadata: {{dram_bytes: 33554432, disk_bytes: 67108864}}
"""


@pytest.fixture(scope="module")
def floe_patterns(relay, direct, tmp_path_factory):
    have = [b["Name"] for b in direct.list_buckets()["Buckets"]]
    for b in ("team-one", "team-x", "ro-data", "team-exact", "unrouted-bucket"):
        if b not in have:  # made before Floe first lists the origin's buckets
            direct.create_bucket(Bucket=b)
    tmp = tmp_path_factory.mktemp("patterns")
    port = free_port()
    (tmp / "floe.yaml").write_text(YAML.format(port=port, relay=relay.port, bucket=BUCKET, c1=CLIENT[0],
                                               s1=CLIENT[1], c2=CLIENT2[0], s2=CLIENT2[1], cache=tmp / "cache"))
    env = dict(os.environ, K=ORIGIN_KEY, S=ORIGIN_SECRET)
    p = Proc([str(FLOE_BIN), "--config", str(tmp / "floe.yaml")], env, tmp / "floe.log", port, "floe-proxy")
    yield p
    p.stop()


def names(client):
    return [b["Name"] for b in client.list_buckets()["Buckets"]]


def test_a_pattern_route_creates_serves_caches_and_deletes_matching_buckets(floe_patterns, direct):
    s3 = s3_client(floe_patterns.port)
    s3.create_bucket(Bucket="team-alpha")
    assert direct.head_bucket(Bucket="team-alpha")["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert "team-alpha" in names(s3), "a bucket made through Floe shows at once"
    body = os.urandom(3 << 20)
    s3.put_object(Bucket="team-alpha", Key="t/data.bin", Body=body)
    assert s3.get_object(Bucket="team-alpha", Key="t/data.bin")["Body"].read() == body
    second = s3.get_object(Bucket="team-alpha", Key="t/data.bin")
    assert second["Body"].read() == body
    assert second["ResponseMetadata"]["HTTPHeaders"]["x-floe-cache"] == "hit", "the route's blocks stage, built for this bucket"
    s3.put_bucket_versioning(Bucket="team-alpha", VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket="team-alpha")["Status"] == "Enabled"
    assert direct.get_bucket_versioning(Bucket="team-alpha")["Status"] == "Enabled"
    s3.put_bucket_versioning(Bucket="team-alpha", VersioningConfiguration={"Status": "Suspended"})
    for v in direct.list_object_versions(Bucket="team-alpha")["Versions"]:
        direct.delete_object(Bucket="team-alpha", Key=v["Key"], VersionId=v["VersionId"])
    s3.delete_bucket(Bucket="team-alpha")
    assert "team-alpha" not in [b["Name"] for b in direct.list_buckets()["Buckets"]]
    assert "team-alpha" not in names(s3)


def test_list_buckets_names_the_origin_buckets_each_route_serves_the_caller(floe_patterns):
    c1, c2 = s3_client(floe_patterns.port), s3_client(floe_patterns.port, *CLIENT2)
    listed = names(c1)
    assert {"team-one", "team-x", "ro-data", BUCKET} <= set(listed)
    assert "team-exact" not in listed and "unrouted-bucket" not in listed
    assert listed == sorted(listed)
    # team-x matches both team-* and team-?; the first pattern serves it, so c2 does not see it.
    assert names(c2) == ["team-exact"]


def test_a_named_route_wins_over_a_matching_pattern(floe_patterns, direct):
    c1, c2 = s3_client(floe_patterns.port), s3_client(floe_patterns.port, *CLIENT2)
    direct.put_object(Bucket="team-exact", Key="k", Body=b"exact")
    assert c2.get_object(Bucket="team-exact", Key="k")["Body"].read() == b"exact"
    assert code_of(lambda: c1.get_object(Bucket="team-exact", Key="k"))[1] == 403
    assert code_of(lambda: c2.list_objects_v2(Bucket="team-x"))[1] == 403, "team-? is shadowed by team-*"


def test_bucket_operations_stay_not_implemented_unless_the_route_allows_them(floe_patterns, direct):
    s3 = s3_client(floe_patterns.port)
    assert code_of(lambda: s3.create_bucket(Bucket="ro-new")) == ("NotImplemented", 501)
    assert "ro-new" not in [b["Name"] for b in direct.list_buckets()["Buckets"]]
    assert code_of(lambda: s3.delete_bucket(Bucket="ro-data")) == ("NotImplemented", 501)
    assert code_of(lambda: s3.get_bucket_versioning(Bucket=BUCKET)) == ("NotImplemented", 501)
    s3.put_object(Bucket="ro-data", Key="k", Body=b"objects still work")
    assert s3.get_object(Bucket="ro-data", Key="k")["Body"].read() == b"objects still work"
    assert s3.head_bucket(Bucket="ro-data")["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert code_of(lambda: s3.list_objects_v2(Bucket="nomatch-bucket")) == ("NoSuchBucket", 404)
