"""Browser form uploads (POST Object, issue 28): a policy-signed form (boto3's
generate_presigned_post, SigV4) is verified as S3 verifies it (signature, expiration, every
condition, every field named by one) and its file goes to the origin as a PUT, streamed; the
answer is S3's (204, 201 with a PostResponse, 303 to a redirect). A refused form stores nothing;
a body cut off mid-file stores nothing; the key's cached answers are dropped on every node."""
import os
import socket
import time
import urllib.parse
from xml.etree import ElementTree

import botocore.exceptions
import urllib3
from urllib3.filepost import encode_multipart_formdata

from conftest import BUCKET, s3_client
from fleet import start_fleet, wait_until
from relay import Relay
from test_blocks import get
from test_bucket_routes import floe_patterns  # noqa: F401 (the fixture)
from test_writeback import put, wb  # noqa: F401 (the fixture)

HTTP = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=5, read=60))


def presigned(port, bucket, key, conditions=None, fields=None):
    s3 = s3_client(port, signature_version="s3v4")  # botocore signs forms with SigV2 otherwise
    return s3.generate_presigned_post(bucket, key, Fields=fields, Conditions=conditions, ExpiresIn=600)


def post(post, data, extra=None, name="a.bin"):
    fields = dict(post["fields"], **(extra or {}))
    body, ctype = encode_multipart_formdata(list(fields.items()) + [("file", (name, data))])
    return HTTP.request("POST", post["url"], body=body, headers={"Content-Type": ctype})


def code(r):
    return r.status, ElementTree.fromstring(r.data).findtext("Code") if r.data else None


def missing(direct, bucket, key):
    try:
        direct.head_object(Bucket=bucket, Key=key)
        return False
    except botocore.exceptions.ClientError:
        return True


def test_a_signed_form_upload_is_stored_with_its_fields_and_answered_as_s3_does(floe_patterns, direct):
    data = os.urandom(3 * 1024 * 1024 + 17)  # many body pieces
    conds = [["content-length-range", 1, 10 * 1024 * 1024], ["starts-with", "$key", "forms/"],
             {"Content-Type": "text/csv"}, {"x-amz-meta-team": "one"}]
    form = presigned(floe_patterns.port, "team-one", "forms/${filename}", conds,
                     {"Content-Type": "text/csv", "x-amz-meta-team": "one"})
    r = post(form, data, name="big.csv")
    assert r.status == 204, r.data
    got = direct.get_object(Bucket="team-one", Key="forms/big.csv")
    assert got["Body"].read() == data
    assert got["ContentType"] == "text/csv" and got["Metadata"] == {"team": "one"}
    assert r.headers["etag"] == got["ETag"]

    form = presigned(floe_patterns.port, "team-one", "forms/created.txt", fields={"success_action_status": "201"},
                     conditions=[{"success_action_status": "201"}])
    r = post(form, b"created")
    assert r.status == 201
    assert ElementTree.fromstring(r.data).findtext("Key") == "forms/created.txt"
    form = presigned(floe_patterns.port, "team-one", "forms/redirected.txt",
                     fields={"success_action_redirect": "https://app.example/done"},
                     conditions=[{"success_action_redirect": "https://app.example/done"}])
    r = post(form, b"")
    assert r.status == 303
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(r.headers["location"]).query)
    assert query["key"] == ["forms/redirected.txt"] and query["bucket"] == ["team-one"]
    assert direct.get_object(Bucket="team-one", Key="forms/redirected.txt")["Body"].read() == b""


def test_a_form_its_policy_does_not_allow_stores_nothing(floe_patterns, direct):
    conds = [["content-length-range", 1, 1000], ["starts-with", "$key", "forms/"]]
    form = presigned(floe_patterns.port, "team-one", "forms/refused.bin", conds)
    assert code(post(form, b"x" * 1001)) == (400, "EntityTooLarge")
    assert code(post(form, b"x", extra={"acl": "public-read"}))[0] == 403  # a field no condition names
    outside = dict(form, fields=dict(form["fields"], key="elsewhere/refused.bin"))
    assert code(post(outside, b"x")) == (403, "AccessDenied")
    tampered = dict(form, fields=dict(form["fields"], **{"x-amz-signature": "0" * 64}))
    assert code(post(tampered, b"x")) == (403, "SignatureDoesNotMatch")
    unsigned = {"url": form["url"], "fields": {"key": "forms/refused.bin"}}
    assert code(post(unsigned, b"x")) == (403, "AccessDenied")
    v2 = {"url": form["url"], "fields": {"key": "forms/refused.bin", "AWSAccessKeyId": "k", "signature": "s",
                                         "policy": form["fields"]["policy"]}}
    assert code(post(v2, b"x")) == (400, "InvalidRequest")
    tagged = presigned(floe_patterns.port, "team-one", "forms/refused.bin", fields={"tagging": "<Tagging/>"},
                       conditions=[{"tagging": "<Tagging/>"}])
    assert code(post(tagged, b"x")) == (501, "NotImplemented")  # never silently untagged
    assert missing(direct, "team-one", "forms/refused.bin")


def raw_post(port, form, data, cut_at=None, pause=0.2):
    """The form sent in three pieces with pauses, or cut off after `cut_at` bytes of it."""
    body, ctype = encode_multipart_formdata(list(form["fields"].items()) + [("file", ("f.bin", data))])
    path = urllib.parse.urlsplit(form["url"]).path
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        end = len(body) if cut_at is None else cut_at
        thirds = [0, end // 3, 2 * end // 3, end]
        for a, b in zip(thirds, thirds[1:]):
            s.sendall(body[a:b])
            time.sleep(pause)
        if cut_at is not None:
            return None
        return s.recv(65536).split(b"\r\n", 1)[0]


def test_a_slow_form_streams_and_a_cut_off_one_stores_nothing(floe_patterns, direct):
    data = os.urandom(2 * 1024 * 1024)
    form = presigned(floe_patterns.port, "team-one", "forms/slow.bin")
    assert raw_post(floe_patterns.port, form, data) == b"HTTP/1.1 204 No Content"
    assert direct.get_object(Bucket="team-one", Key="forms/slow.bin")["Body"].read() == data
    form = presigned(floe_patterns.port, "team-one", "forms/cut.bin")
    posts = lambda: open(floe_patterns.log, "rb").read().count(b'"op":"PostObject"')  # noqa: E731
    before = posts()
    raw_post(floe_patterns.port, form, data, cut_at=len(data) // 2)
    wait_until("Floe to finish the cut-off request", lambda: posts() > before)
    assert missing(direct, "team-one", "forms/cut.bin")


def test_a_form_upload_through_one_node_is_read_by_every_other(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=3)
    try:
        key = "forms/fleet/00001-a.parquet"
        direct.put_object(Bucket=BUCKET, Key=key, Body=b"old" * 1000)
        for nd in nodes:  # cached everywhere (immutable class)
            for _ in range(2):
                assert get(nd.port, key).data == b"old" * 1000
        r = post(presigned(nodes[0].port, BUCKET, key), b"new" * 1000)
        assert r.status == 204, r.data
        for nd in nodes[1:]:
            assert get(nd.port, key).data == b"new" * 1000, nd.name
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_a_form_upload_over_a_staged_write_lands_after_it(wb, direct):
    nodes, relay, _ = wb
    relay.down()
    assert put(nodes[0], "forms/staged.csv", b"staged")["x-floe-writeback"] == "staged"
    relay.up()
    form = presigned(nodes[1].port, BUCKET, "forms/staged.csv")
    wait_until("the form taken once the origin is back", lambda: post(form, b"posted").status == 204)
    assert direct.get_object(Bucket=BUCKET, Key="forms/staged.csv")["Body"].read() == b"posted"
    assert get(nodes[2].port, "forms/staged.csv").data == b"posted"
