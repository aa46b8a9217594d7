"""Bucket names and copies as S3 has them (issue 28): a name S3 would refuse is refused with
InvalidBucketName before any route is looked up, a 63-character name works; CopyObject and
UploadPartCopy read a source in another bucket Floe routes to the same origin for the caller, or
a named version, and the target's cached answer is dropped; a source Floe does not route for the
caller is AccessDenied; a staged (write-back) source lands at the origin before it is copied."""
import os

import botocore.exceptions
import pytest

from conftest import BUCKET, CLIENT, CLIENT2, FLOE_BIN, ORIGIN_KEY, ORIGIN_SECRET, Proc, free_port, s3_client
from fleet import wait_until
from test_blocks import get
from test_bucket_routes import floe_patterns  # noqa: F401 (the fixture)
from test_s3_ops import code_of
from test_writeback import put, wb  # noqa: F401 (the fixture)


CATCH_ALL = """
server:
  listeners: [{{address: "127.0.0.1:{port}"}}]
  grace_period_seconds: 1
origins:
  minio:
    endpoint: http://127.0.0.1:{relay}
    credentials: {{from: env, access_key_env: K, secret_key_env: S}}
routes:
  - bucket: "*"
    origin: minio
    clients: [{{access_key: {c1}, secret_key: {s1}}}]
    bucket_operations: true
"""


@pytest.fixture(scope="module")
def catch_all(relay, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("catch-all")
    port = free_port()
    (tmp / "floe.yaml").write_text(CATCH_ALL.format(port=port, relay=relay.port, c1=CLIENT[0], s1=CLIENT[1]))
    env = dict(os.environ, K=ORIGIN_KEY, S=ORIGIN_SECRET)
    p = Proc([str(FLOE_BIN), "--config", str(tmp / "floe.yaml")], env, tmp / "floe.log", port, "floe-proxy")
    yield p
    p.stop()


def test_a_route_for_every_bucket_lists_them_and_refuses_bad_names(catch_all, direct):
    """`bucket: "*"` matches every name, but not the service itself (ListBuckets) nor a name
    S3 refuses."""
    s3 = s3_client(catch_all.port)
    s3.create_bucket(Bucket="every-1")
    assert "every-1" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert code_of(lambda: s3.create_bucket(Bucket="every_1")) == ("InvalidBucketName", 400)
    s3.delete_bucket(Bucket="every-1")
    # The next list, sent the moment the answer arrives, names what changed (tools that
    # clean up list, then delete what is listed).
    for i in range(20):
        s3.create_bucket(Bucket=f"every-{i}")
        assert f"every-{i}" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        s3.delete_bucket(Bucket=f"every-{i}")
        assert f"every-{i}" not in [b["Name"] for b in s3.list_buckets()["Buckets"]], i


@pytest.mark.parametrize("name", ["aa", "foo_bar", "foo..bar", "foo.-bar", "foo-.bar", "team-",
                                  "192.168.5.123", "Team-upper", "xn--team", "team-s3alias"])
def test_a_bucket_name_s3_refuses_is_invalid_bucket_name(floe_patterns, name):
    s3 = s3_client(floe_patterns.port)
    assert code_of(lambda: s3.create_bucket(Bucket=name)) == ("InvalidBucketName", 400)


def test_the_longest_and_the_dotted_names_s3_allows_work(floe_patterns, direct):
    s3 = s3_client(floe_patterns.port)
    for name in ["team-" + "a" * 58, "team-1.2.3"]:
        s3.create_bucket(Bucket=name)
        s3.put_object(Bucket=name, Key="k", Body=b"named")
        assert direct.get_object(Bucket=name, Key="k")["Body"].read() == b"named"
        s3.delete_object(Bucket=name, Key="k")
        s3.delete_bucket(Bucket=name)


def test_a_copy_reads_a_source_in_another_routed_bucket_and_drops_the_target(floe_patterns, direct):
    s3 = s3_client(floe_patterns.port)
    old, new = os.urandom(150_000), os.urandom(120_000)
    s3.put_object(Bucket="team-x", Key="copies/t.parquet", Body=old)
    for _ in range(2):  # cached on the second read
        assert s3.get_object(Bucket="team-x", Key="copies/t.parquet")["Body"].read() == old
    s3.put_object(Bucket="team-one", Key="copies/s 1+?.parquet", Body=new)
    s3.copy_object(Bucket="team-x", Key="copies/t.parquet",
                   CopySource={"Bucket": "team-one", "Key": "copies/s 1+?.parquet"})
    assert direct.get_object(Bucket="team-x", Key="copies/t.parquet")["Body"].read() == new
    assert s3.get_object(Bucket="team-x", Key="copies/t.parquet")["Body"].read() == new
    # Across a pattern route and a named one, both the caller's.
    s3.copy_object(Bucket=BUCKET, Key="copies/from-team.parquet",
                   CopySource={"Bucket": "team-one", "Key": "copies/s 1+?.parquet"})
    assert s3.get_object(Bucket=BUCKET, Key="copies/from-team.parquet")["Body"].read() == new


def test_a_copy_from_a_bucket_floe_does_not_route_for_the_caller_is_access_denied(floe_patterns, direct):
    s3, other = s3_client(floe_patterns.port), s3_client(floe_patterns.port, *CLIENT2)
    other.put_object(Bucket="team-exact", Key="secret.csv", Body=b"theirs")
    direct.put_object(Bucket="unrouted-bucket", Key="k.csv", Body=b"nobody's")
    for source in [{"Bucket": "team-exact", "Key": "secret.csv"}, {"Bucket": "unrouted-bucket", "Key": "k.csv"}]:
        assert code_of(lambda: s3.copy_object(Bucket="team-one", Key="copies/stolen.csv",
                                              CopySource=source)) == ("AccessDenied", 403)
    assert code_of(lambda: direct.head_object(Bucket="team-one", Key="copies/stolen.csv"))[1] == 404


def test_a_copy_of_a_version_and_a_ranged_part_copy_from_another_bucket(floe_patterns, direct):
    s3 = s3_client(floe_patterns.port)
    s3.put_bucket_versioning(Bucket="team-x", VersioningConfiguration={"Status": "Enabled"})
    try:
        v1 = s3.put_object(Bucket="team-x", Key="copies/v.csv", Body=b"first")["VersionId"]
        s3.put_object(Bucket="team-x", Key="copies/v.csv", Body=b"second")
        s3.copy_object(Bucket="team-one", Key="copies/v1.csv",
                       CopySource={"Bucket": "team-x", "Key": "copies/v.csv", "VersionId": v1})
        assert s3.get_object(Bucket="team-one", Key="copies/v1.csv")["Body"].read() == b"first"
    finally:
        s3.put_bucket_versioning(Bucket="team-x", VersioningConfiguration={"Status": "Suspended"})

    part = os.urandom(6 * 1024 * 1024)
    s3.put_object(Bucket="team-x", Key="copies/big.bin", Body=part + b"tail")
    up = s3.create_multipart_upload(Bucket="team-one", Key="copies/joined.bin")["UploadId"]
    etags = []
    for n, rng in [(1, f"bytes=0-{len(part) - 1}"), (2, f"bytes={len(part)}-{len(part) + 3}")]:
        r = s3.upload_part_copy(Bucket="team-one", Key="copies/joined.bin", UploadId=up, PartNumber=n,
                                CopySource={"Bucket": "team-x", "Key": "copies/big.bin"}, CopySourceRange=rng)
        etags.append({"PartNumber": n, "ETag": r["CopyPartResult"]["ETag"]})
    s3.complete_multipart_upload(Bucket="team-one", Key="copies/joined.bin", UploadId=up,
                                 MultipartUpload={"Parts": etags})
    assert s3.get_object(Bucket="team-one", Key="copies/joined.bin")["Body"].read() == part + b"tail"


def test_a_staged_source_lands_before_it_is_copied(wb, direct):
    """Write-back: the copy is the origin's, so the acknowledged staged version of its source is
    put there first (else the origin copies the version before it, or finds none)."""
    nodes, relay, _ = wb
    relay.down()
    body = os.urandom(90_000)
    assert put(nodes[0], "copies/staged.csv", body)["x-floe-writeback"] == "staged"
    relay.up()
    copier = s3_client(nodes[1].port)

    def copied():  # as a client does: a 503 (the origin's breaker still open) is retried
        try:
            copier.copy_object(Bucket=BUCKET, Key="copies/copied.csv",
                               CopySource={"Bucket": BUCKET, "Key": "copies/staged.csv"})
            return True
        except botocore.exceptions.ClientError as e:
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 503, e
            return False
    wait_until("the copy taken once the origin is back", copied)
    assert direct.get_object(Bucket=BUCKET, Key="copies/copied.csv")["Body"].read() == body
    assert get(nodes[2].port, "copies/copied.csv").data == body


def test_a_part_copy_into_an_upload_write_back_holds_is_staged(wb, direct):
    """Write-back hands out its own upload ids (the origin does not know them): UploadPartCopy
    into one reads the source's range from the origin and stages it as the part. Parts through
    different nodes; the completed object reaches the origin whole."""
    from test_writeback import wait_all_at_origin
    nodes, _, _ = wb
    source = os.urandom(6 * 1024 * 1024 + 100)
    direct.put_object(Bucket=BUCKET, Key="copies/source.bin", Body=source)
    s3 = [s3_client(nd.port) for nd in nodes]
    up = s3[0].create_multipart_upload(Bucket=BUCKET, Key="copies/assembled.bin")
    assert up["ResponseMetadata"]["HTTPHeaders"]["x-floe-writeback"] == "staged"
    uid = up["UploadId"]
    p1 = s3[1].upload_part_copy(Bucket=BUCKET, Key="copies/assembled.bin", UploadId=uid, PartNumber=1,
                                CopySource={"Bucket": BUCKET, "Key": "copies/source.bin"},
                                CopySourceRange=f"bytes=0-{5 * 1024 * 1024 - 1}")
    tail = b"written, not copied"
    p2 = s3[2].upload_part(Bucket=BUCKET, Key="copies/assembled.bin", UploadId=uid, PartNumber=2, Body=tail)
    assert code_of(lambda: s3[1].upload_part_copy(
        Bucket=BUCKET, Key="copies/assembled.bin", UploadId=uid, PartNumber=3,
        CopySource={"Bucket": BUCKET, "Key": "copies/source.bin"},
        CopySourceRange=f"bytes=0-{len(source)}")) == ("InvalidRange", 416)
    s3[0].complete_multipart_upload(Bucket=BUCKET, Key="copies/assembled.bin", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": p1["CopyPartResult"]["ETag"]}, {"PartNumber": 2, "ETag": p2["ETag"]}]})
    want = source[:5 * 1024 * 1024] + tail
    assert get(nodes[1].port, "copies/assembled.bin").data == want
    wait_all_at_origin(direct, {"copies/assembled.bin": want}, set())
