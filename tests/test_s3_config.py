"""Configuration Floe does not implement but carries (issue 28): an object's tags, retention and
legal hold on any signed route, a bucket's tags, lifecycle, policy and object lock on routes with
`bucket_operations: true` (501 elsewhere), each verified, re-signed and passed to the origin
uncached. A change of what a HEAD answers (the tag count, the lock headers) drops the cached
answer on every node of a fleet before the change is acknowledged."""
import datetime
import json
import os
import uuid

import botocore.exceptions

from conftest import BUCKET, s3_client
from fleet import start_fleet, wait_until
from relay import Relay
from test_blocks import get
from test_bucket_routes import floe_patterns  # noqa: F401 (the fixture)
from test_s3_ops import code_of
from test_writeback import put, wb  # noqa: F401 (the fixture)
from test_writeback_durability import cached_everywhere


def head_header(s3, bucket, key, name):
    return s3.head_object(Bucket=bucket, Key=key)["ResponseMetadata"]["HTTPHeaders"].get(name)


def test_object_tags_are_carried_and_a_cached_head_shows_the_new_count(floe_patterns, direct):
    s3 = s3_client(floe_patterns.port)
    key = "tags/00001-a.parquet"
    s3.put_object(Bucket="team-one", Key=key, Body=b"x" * 1000)
    for _ in range(3):  # cached: immutable class, read whole
        assert s3.get_object(Bucket="team-one", Key=key)["Body"].read() == b"x" * 1000
    assert head_header(s3, "team-one", key, "x-amz-tagging-count") is None
    tags = {"TagSet": [{"Key": "tier", "Value": "gold"}, {"Key": "owner", "Value": "lake"}]}
    s3.put_object_tagging(Bucket="team-one", Key=key, Tagging=tags)
    by_key = lambda ts: sorted(ts, key=lambda t: t["Key"])  # noqa: E731
    assert by_key(direct.get_object_tagging(Bucket="team-one", Key=key)["TagSet"]) == by_key(tags["TagSet"])
    got = s3.get_object_tagging(Bucket="team-one", Key=key)["TagSet"]
    assert sorted(t["Key"] for t in got) == ["owner", "tier"]
    assert head_header(s3, "team-one", key, "x-amz-tagging-count") == "2"
    assert s3.get_object(Bucket="team-one", Key=key)["TagCount"] == 2
    s3.delete_object_tagging(Bucket="team-one", Key=key)
    assert head_header(s3, "team-one", key, "x-amz-tagging-count") is None
    # Tags given with the PUT itself travel too.
    s3.put_object(Bucket="team-one", Key="tags/b.csv", Body=b"b", Tagging="a=1&b=2&c=3")
    assert head_header(s3, "team-one", "tags/b.csv", "x-amz-tagging-count") == "3"


def test_bucket_configuration_is_carried_only_where_bucket_operations_are(floe_patterns, direct):
    s3 = s3_client(floe_patterns.port)
    s3.put_bucket_tagging(Bucket="team-one", Tagging={"TagSet": [{"Key": "team", "Value": "one"}]})
    assert direct.get_bucket_tagging(Bucket="team-one")["TagSet"] == [{"Key": "team", "Value": "one"}]
    assert s3.get_bucket_tagging(Bucket="team-one")["TagSet"] == [{"Key": "team", "Value": "one"}]
    s3.delete_bucket_tagging(Bucket="team-one")
    assert code_of(lambda: s3.get_bucket_tagging(Bucket="team-one"))[1] == 404

    rules = {"Rules": [{"ID": "old", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
                        "Expiration": {"Days": 3}}]}
    s3.put_bucket_lifecycle_configuration(Bucket="team-one", LifecycleConfiguration=rules)
    got = s3.get_bucket_lifecycle_configuration(Bucket="team-one")["Rules"]
    assert [(r["ID"], r["Expiration"]["Days"]) for r in got] == [("old", 3)]
    s3.put_object(Bucket="team-one", Key="tmp/t.csv", Body=b"t")
    assert "rule-id=\"old\"" in (head_header(s3, "team-one", "tmp/t.csv", "x-amz-expiration") or "")
    s3.delete_bucket_lifecycle(Bucket="team-one")
    assert head_header(s3, "team-one", "tmp/t.csv", "x-amz-expiration") is None, "the cached HEAD kept the rule"

    policy = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": ["s3:GetObject"],
        "Resource": ["arn:aws:s3:::team-one/public/*"]}]}
    s3.put_bucket_policy(Bucket="team-one", Policy=json.dumps(policy))
    assert json.loads(s3.get_bucket_policy(Bucket="team-one")["Policy"])["Statement"][0]["Action"] in (
        "s3:GetObject", ["s3:GetObject"])
    s3.delete_bucket_policy(Bucket="team-one")
    assert code_of(lambda: s3.get_bucket_policy(Bucket="team-one"))[1] == 404

    # A route without bucket operations: S3's 501, and nothing reaches the origin.
    assert code_of(lambda: s3.put_bucket_tagging(
        Bucket="ro-data", Tagging={"TagSet": [{"Key": "a", "Value": "b"}]})) == ("NotImplemented", 501)
    assert code_of(lambda: direct.get_bucket_tagging(Bucket="ro-data"))[1] == 404
    # ... but an object's tags are the object's, like its bytes.
    s3.put_object(Bucket="ro-data", Key="t", Body=b"t")
    s3.put_object_tagging(Bucket="ro-data", Key="t", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]})
    assert direct.get_object_tagging(Bucket="ro-data", Key="t")["TagSet"] == [{"Key": "k", "Value": "v"}]
    # What S3 has no operation for is still refused with its code.
    assert code_of(lambda: s3.list_bucket_analytics_configurations(Bucket="team-one")) == ("NotImplemented", 501)


def test_object_lock_retention_and_legal_hold_are_carried_and_seen_by_the_next_head(floe_patterns, direct):
    s3 = s3_client(floe_patterns.port)
    bucket = f"team-lock-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    conf = {"ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}}
    s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration=conf)
    assert s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]["Rule"][
        "DefaultRetention"]["Days"] == 1
    key = "locked/00001-a.parquet"
    version = s3.put_object(Bucket=bucket, Key=key, Body=b"locked")["VersionId"]
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"locked"
    assert head_header(s3, bucket, key, "x-amz-object-lock-legal-hold") in (None, "OFF")
    s3.put_object_legal_hold(Bucket=bucket, Key=key, LegalHold={"Status": "ON"})
    assert s3.get_object_legal_hold(Bucket=bucket, Key=key)["LegalHold"]["Status"] == "ON"
    assert head_header(s3, bucket, key, "x-amz-object-lock-legal-hold") == "ON"
    until = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=2)).replace(microsecond=0)
    s3.put_object_retention(Bucket=bucket, Key=key, Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until},
                            BypassGovernanceRetention=True)
    assert s3.get_object_retention(Bucket=bucket, Key=key)["Retention"]["RetainUntilDate"] == until
    assert head_header(s3, bucket, key, "x-amz-object-lock-mode") == "GOVERNANCE"
    # The lock holds through Floe as at the origin: a held version is not deleted.
    assert code_of(lambda: s3.delete_object(Bucket=bucket, Key=key, VersionId=version)) == code_of(
        lambda: direct.delete_object(Bucket=bucket, Key=key, VersionId=version))
    assert direct.head_object(Bucket=bucket, Key=key, VersionId=version)["ContentLength"] == 6
    s3.put_object_legal_hold(Bucket=bucket, Key=key, LegalHold={"Status": "OFF"})
    s3.delete_object(Bucket=bucket, Key=key, VersionId=version, BypassGovernanceRetention=True)
    assert code_of(lambda: direct.head_object(Bucket=bucket, Key=key, VersionId=version))[1] == 404


def test_a_tag_change_through_one_node_is_seen_by_the_next_head_on_every_other(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=3)
    try:
        key = "config/fleet/00001-a.parquet"
        body = os.urandom(200_000)
        direct.put_object(Bucket=BUCKET, Key=key, Body=body)
        cached_everywhere(nodes, key, body)
        s3_client(nodes[0].port).put_object_tagging(
            Bucket=BUCKET, Key=key, Tagging={"TagSet": [{"Key": "pinned", "Value": "yes"}]})
        for nd in nodes[1:]:
            assert head_header(s3_client(nd.port), BUCKET, key, "x-amz-tagging-count") == "1", nd.name
            r = get(nd.port, key)
            assert r.data == body and r.headers.get("x-amz-tagging-count") == "1", nd.name
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_tags_of_a_staged_write_apply_to_it_once_it_reached_the_origin(wb, direct):
    """Write-back: the staged version lands before its configuration goes to the origin; while
    it cannot land, the change is refused (503) and the acknowledged write stays staged."""
    nodes, relay, _ = wb
    key = "config/staged.csv"
    relay.down()
    body = os.urandom(100_000)
    assert put(nodes[0], key, body)["x-floe-writeback"] == "staged"
    tags = {"TagSet": [{"Key": "state", "Value": "staged"}]}
    tagger = s3_client(nodes[1].port)
    assert code_of(lambda: tagger.put_object_tagging(Bucket=BUCKET, Key=key, Tagging=tags)) == ("SlowDown", 503)
    assert get(nodes[2].port, key).data == body, "the acknowledged write is still served"
    relay.up()

    def tagged():  # as a client does: a 503 (the origin's breaker still open) is retried
        try:
            tagger.put_object_tagging(Bucket=BUCKET, Key=key, Tagging=tags)
            return True
        except botocore.exceptions.ClientError as e:
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 503, e
            return False
    wait_until("the tags taken once the origin is back", tagged)
    assert direct.get_object(Bucket=BUCKET, Key=key)["Body"].read() == body
    assert direct.get_object_tagging(Bucket=BUCKET, Key=key)["TagSet"] == tags["TagSet"]
    assert head_header(s3_client(nodes[2].port), BUCKET, key, "x-amz-tagging-count") == "1"
    # A write that asks for tags (or a lock, grants, encryption, a storage class) goes to the
    # origin itself: a staged copy could not hand them on.
    r = s3_client(nodes[0].port).put_object(Bucket=BUCKET, Key="config/tagged.csv", Body=b"t", Tagging="a=1")
    assert r["ResponseMetadata"]["HTTPHeaders"]["x-floe-writeback"] == "direct"
    assert direct.get_object_tagging(Bucket=BUCKET, Key="config/tagged.csv")["TagSet"] == [
        {"Key": "a", "Value": "1"}]


def test_a_read_declaring_server_side_encryption_gets_the_origins_refusal(floe_patterns, direct):
    """S3 refuses SSE-S3/SSE-KMS request headers on a GET (400); a cached object must not
    answer 200 in its place."""
    s3 = s3_client(floe_patterns.port)
    key = "sse/00001-a.parquet"
    s3.put_object(Bucket="team-one", Key=key, Body=b"s" * 100)
    for _ in range(3):  # cached
        assert s3.get_object(Bucket="team-one", Key=key)["Body"].read() == b"s" * 100
    declare = lambda params, **kw: params["headers"].update({"x-amz-server-side-encryption": "aws:kms"})  # noqa: E731
    s3.meta.events.register("before-call.s3.GetObject", declare)
    assert code_of(lambda: s3.get_object(Bucket="team-one", Key=key))[1] == 400


def test_acls_are_carried_for_objects_and_buckets(floe_patterns, direct):
    """Canned ACLs and the ACL documents, object level on every signed route, bucket level where
    bucket operations are carried; what the origin answers is what the client gets."""
    s3 = s3_client(floe_patterns.port)
    key = "acl/00001-a.parquet"
    s3.put_object(Bucket="team-one", Key=key, Body=b"a", ACL="private")
    s3.put_object_acl(Bucket="team-one", Key=key, ACL="private")
    mine, theirs = s3.get_object_acl(Bucket="team-one", Key=key), direct.get_object_acl(Bucket="team-one", Key=key)
    assert mine["Grants"] == theirs["Grants"] and mine["Owner"] == theirs["Owner"]
    assert s3.get_bucket_acl(Bucket="team-one")["Grants"] == direct.get_bucket_acl(Bucket="team-one")["Grants"]
    assert code_of(lambda: s3.get_bucket_acl(Bucket="ro-data")) == ("NotImplemented", 501)
