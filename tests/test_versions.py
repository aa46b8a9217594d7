"""Reads that name a version (versionId) and presigned downloads with response-* overrides,
served from the block cache against a versioned MinIO bucket: old and new versions each read
their own bytes, never mixed with the current version's mapping, and warm reads make no
origin request."""
import os

import pytest
import urllib3

from conftest import ORIGIN_KEY, ORIGIN_SECRET, VERSIONED, s3_client, start_cached_floe
from relay import Relay

HTTP = urllib3.PoolManager(maxsize=8, retries=False)


@pytest.fixture(scope="module")
def versioned(minio, tmp_path_factory):
    d = tmp_path_factory.mktemp("versions")
    relay = Relay(minio.port)
    p = start_cached_floe(d, relay.port, d / "cache", bucket=VERSIONED)
    p.relay = relay
    p.s3 = s3_client(p.port)
    yield p
    p.stop()
    relay.down()


def origin_requests(relay):
    return relay.count("GET") + relay.count("HEAD")


def test_old_and_new_versions_are_cached_apart(versioned, direct):
    key = "tables/t/data/part-0.parquet"
    old, new = os.urandom(3 * (1 << 20) + 5), os.urandom(2 * (1 << 20) + 9)
    v_old = direct.put_object(Bucket=VERSIONED, Key=key, Body=old)["VersionId"]
    v_new = direct.put_object(Bucket=VERSIONED, Key=key, Body=new)["VersionId"]
    s3, relay = versioned.s3, versioned.relay

    def read(version=None, rng=None):
        kw = dict(Bucket=VERSIONED, Key=key)
        if version:
            kw["VersionId"] = version
        if rng:
            kw["Range"] = rng
        r = s3.get_object(**kw)
        return r["Body"].read(), r["ResponseMetadata"]["HTTPHeaders"]

    for _ in range(2):  # cold, then warm
        assert read(v_old)[0] == old
        assert read(v_new)[0] == new
        assert read()[0] == new
        assert read(v_old, "bytes=2097150-2097160")[0] == old[2097150:2097161]
    before = origin_requests(relay)
    body, headers = read(v_old)
    assert body == old and headers["x-floe-cache"] == "hit"
    assert headers["x-amz-version-id"] == v_old
    head = s3.head_object(Bucket=VERSIONED, Key=key, VersionId=v_old)
    assert head["ContentLength"] == len(old) and head["VersionId"] == v_old
    assert read(v_new)[1]["x-floe-cache"] == "hit"
    assert origin_requests(relay) == before, "warm version reads asked the origin"
    # A version deleted through Floe is gone at once; the others are untouched.
    s3.delete_object(Bucket=VERSIONED, Key=key, VersionId=v_old)
    with pytest.raises(s3.exceptions.ClientError) as gone:
        read(v_old)
    assert gone.value.response["ResponseMetadata"]["HTTPStatusCode"] in (400, 404)
    assert read()[0] == new and read(v_new)[0] == new


def test_presigned_download_overrides_are_served_from_the_cache(versioned, direct, minio):
    key = "exports/report.parquet"
    data = os.urandom(300_000)
    direct.put_object(Bucket=VERSIONED, Key=key, Body=data, ContentType="application/x-parquet")
    params = dict(Bucket=VERSIONED, Key=key, ResponseContentDisposition='attachment; filename="r.parquet"',
                  ResponseContentType="application/octet-stream", ResponseCacheControl="no-store")
    minio = s3_client(minio.port, ORIGIN_KEY, ORIGIN_SECRET, signature_version="s3v4")
    minio_url = minio.generate_presigned_url("get_object", Params=params, ExpiresIn=300)
    want = HTTP.request("GET", minio_url)
    assert want.status == 200
    floe = s3_client(versioned.port, signature_version="s3v4")  # boto3 presigns SigV2 otherwise
    url = floe.generate_presigned_url("get_object", Params=params, ExpiresIn=300)
    cold = HTTP.request("GET", url)
    before = origin_requests(versioned.relay)
    warm = HTTP.request("GET", url)
    assert origin_requests(versioned.relay) == before
    for r in (cold, warm):
        assert (r.status, r.data) == (200, data), r.data[:500]
        for h in ("Content-Disposition", "Content-Type", "Cache-Control"):
            assert r.headers.get(h) == want.headers.get(h), h
    assert warm.headers["x-floe-cache"] == "hit"
    # The stored headers stay the object's own on a plain read.
    plain = versioned.s3.get_object(Bucket=VERSIONED, Key=key)
    assert plain["ContentType"] == "application/x-parquet"
