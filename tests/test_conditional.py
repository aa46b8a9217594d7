"""Conditional reads (If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since) through
the block cache against a real MinIO: every combination answers the status MinIO answers
directly, with the same bytes, and a held version answers with no origin GET."""
import email.utils
import itertools
import os

import urllib3

from conftest import BUCKET, CLIENT, ORIGIN_KEY, ORIGIN_SECRET
from test_blocks import cached  # noqa: F401  (fixture: a cached Floe behind a counting relay)
from test_sigv4 import sign

HTTP = urllib3.PoolManager(maxsize=8, retries=False)


def read(port, method, key, headers, creds=CLIENT):
    url = f"http://127.0.0.1:{port}/{BUCKET}/{key}"
    req = sign(method, url, headers=headers, key=creds)
    return HTTP.request(method, url, headers=dict(req.headers))


def http_date(epoch):
    return email.utils.formatdate(epoch, usegmt=True)


def combinations(etag, modified):
    """Header sets: each condition alone with matching, other, star and weak tags and dates
    before, at and after the version's Last-Modified, then every pair S3 documents."""
    tags = {"same": etag, "other": '"0123456789abcdef0123456789abcdef"', "star": "*",
            "weak": "W/" + etag, "list": f'"nope", {etag}'}
    dates = {"before": http_date(modified - 60), "at": http_date(modified),
             "after": http_date(modified + 60), "garbage": "not a date"}
    out = []
    for name in ("If-Match", "If-None-Match"):
        out += [{name: t} for t in tags.values()]
    for name in ("If-Modified-Since", "If-Unmodified-Since"):
        out += [{name: d} for d in dates.values()]
    pairs = [("If-Match", "If-Unmodified-Since"), ("If-None-Match", "If-Modified-Since")]
    for tag_header, date_header in pairs:
        for t, d in itertools.product(("same", "other"), ("before", "after")):
            out.append({tag_header: tags[t], date_header: dates[d]})
    for t1, t2 in itertools.product(("same", "other"), repeat=2):
        out.append({"If-Match": tags[t1], "If-None-Match": tags[t2]})
    return out


def test_every_condition_answers_as_minio_does_and_a_held_version_needs_no_origin_get(
        cached, minio, direct):
    data = os.urandom(3 * (1 << 20) + 17)
    key = "conditional/a.parquet"
    direct.put_object(Bucket=BUCKET, Key=key, Body=data)
    head = direct.head_object(Bucket=BUCKET, Key=key)
    etag, modified = head["ETag"], head["LastModified"].timestamp()
    assert read(cached.port, "GET", key, {}).data == data  # warm: the version is held
    gets, heads = cached.relay.count("GET"), cached.relay.count("HEAD")
    asked_other = 0
    mismatches = []
    for headers in combinations(etag, int(modified)):
        for method, rng in (("GET", None), ("HEAD", None), ("GET", "bytes=100-2097251")):
            h = dict(headers, **({"Range": rng} if rng else {}))
            want = read(minio.port, method, key, h, creds=(ORIGIN_KEY, ORIGIN_SECRET))
            got = read(cached.port, method, key, h)
            same_body = got.status >= 300 or got.data == want.data  # error bodies differ in ids
            if got.status != want.status or not same_body:
                mismatches.append((method, h, want.status, got.status))
            if got.status in (304, 412):
                assert got.headers.get("ETag") == etag, (method, h)
                assert got.data == b"" or method == "GET" and got.status == 412
            if got.status == 412 and method == "GET":
                assert b"<Code>PreconditionFailed</Code>" in got.data
            if got.status in (200, 206, 304):
                assert got.headers.get("x-floe-cache") == "hit", (method, h, dict(got.headers))
            # A 412 on an If-Match naming another version was checked with the origin once.
            asked_other += want.status == 412 and h.get("If-Match") not in (None, etag, "*")
    assert mismatches == [], "\n".join(map(str, mismatches))
    assert cached.relay.count("GET") == gets, "a held version answers conditions itself"
    # An If-Match naming a version Floe does not hold asks the origin once (a HEAD): it may
    # have a newer version.
    assert cached.relay.count("HEAD") - heads == asked_other


def test_an_if_match_of_a_version_written_behind_the_cache_is_served_not_refused(cached, direct):
    key = "conditional/rewritten.parquet"
    v1, v2 = os.urandom(100_000), os.urandom(120_000)
    direct.put_object(Bucket=BUCKET, Key=key, Body=v1)
    assert read(cached.port, "GET", key, {}).data == v1
    e2 = direct.put_object(Bucket=BUCKET, Key=key, Body=v2)["ETag"]  # not through Floe
    r = read(cached.port, "GET", key, {"If-Match": e2, "Range": "bytes=10-99"})
    assert (r.status, r.data) == (206, v2[10:100])
    # The mapping moved on to v2: a plain read is v2, and a later If-Match read a hit.
    assert read(cached.port, "GET", key, {}).data == v2
    gets = cached.relay.count("GET") + cached.relay.count("HEAD")
    r = read(cached.port, "GET", key, {"If-Match": e2})
    assert (r.status, r.data, r.headers["x-floe-cache"]) == (200, v2, "hit")
    assert cached.relay.count("GET") + cached.relay.count("HEAD") == gets
