"""Each SigV4 failure class gets the right S3 error and nothing reaches the origin (the relay's
byte count toward the origin does not move)."""
import base64
import datetime
import hashlib
import hmac
import os
import time
import zlib
from unittest import mock
from xml.etree import ElementTree

import botocore.auth
import pytest
import urllib3
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import BUCKET, CLIENT, ORIGIN_KEY, ORIGIN_SECRET, PUBLIC, PUBLIC_RW, s3_client

HTTP = urllib3.PoolManager(retries=False)


def sign(method, url, body=b"", headers=None, key=CLIENT, when=None, payload=None):
    req = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    if payload:
        req.headers["X-Amz-Content-SHA256"] = payload
    auth = botocore.auth.S3SigV4Auth(Credentials(*key), "s3", "us-east-1")
    if payload:
        auth.payload = lambda request: payload
    if when:
        with mock.patch.object(botocore.auth, "get_current_datetime", return_value=when):
            auth.add_auth(req)
    else:
        auth.add_auth(req)
    return req


def send(req, body=None):
    r = HTTP.request(req.method, req.url, body=req.body if body is None else body, headers=dict(req.headers))
    return r


def err(r):
    if not r.data:
        return r.status, None
    return r.status, ElementTree.fromstring(r.data).findtext("Code")


@pytest.fixture
def url(floe):
    return lambda key: f"http://127.0.0.1:{floe.port}/{BUCKET}/{key}"


@pytest.fixture
def nothing_reaches_origin(relay):
    before = relay.sent()
    yield
    assert relay.sent() == before, "bytes reached the origin"


def test_wrong_secret(url, nothing_reaches_origin):
    r = send(sign("GET", url("k"), key=(CLIENT[0], "wrong")))
    assert err(r) == (403, "SignatureDoesNotMatch")
    assert r.headers.get("x-amz-request-id")


def test_unknown_key(url, nothing_reaches_origin):
    assert err(send(sign("GET", url("k"), key=("nobody", "x")))) == (403, "InvalidAccessKeyId")


def test_tampered_header(url, nothing_reaches_origin):
    req = sign("GET", url("k"), headers={"Range": "bytes=0-9"})
    del req.headers["Range"]
    req.headers["Range"] = "bytes=0-99"
    assert err(send(req)) == (403, "SignatureDoesNotMatch")


def test_tampered_body_with_hex_digest(url, nothing_reaches_origin):
    req = sign("PUT", url("tampered"), body=b"the signed body")
    assert req.headers["X-Amz-Content-SHA256"] == hashlib.sha256(b"the signed body").hexdigest()
    assert err(send(req, body=b"the other body!")) == (400, "XAmzContentSHA256Mismatch")


def test_skewed_clock(url, nothing_reaches_origin):
    when = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) - datetime.timedelta(minutes=20)
    assert err(send(sign("GET", url("k"), when=when))) == (403, "RequestTimeTooSkewed")


def presign(url, expires, when):
    req = AWSRequest(method="GET", url=url)
    auth = botocore.auth.S3SigV4QueryAuth(Credentials(*CLIENT), "s3", "us-east-1", expires=expires)
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=when):
        auth.add_auth(req)
    return req.url


def test_presign_valid_then_expired(url, relay):
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    assert HTTP.request("GET", presign(url("missing"), 3600, now)).status == 404  # verified, reached origin
    before = relay.sent()
    r = HTTP.request("GET", presign(url("missing"), 3600, now - datetime.timedelta(hours=2)))
    assert err(r) == (403, "AccessDenied")
    assert b"expired" in r.data
    # Valid for 0 seconds: expired on arrival; longer than a week: not a valid URL at all.
    assert err(HTTP.request("GET", presign(url("missing"), 0, now))) == (403, "AccessDenied")
    assert err(HTTP.request("GET", presign(url("missing"), -7, now))) == (403, "AccessDenied")
    assert err(HTTP.request("GET", presign(url("missing"), 604_801, now))) == (
        400, "AuthorizationQueryParametersError")
    assert relay.sent() == before


def test_anonymous_only_where_allowed(floe, relay):
    assert err(HTTP.request("GET", f"http://127.0.0.1:{floe.port}/{BUCKET}/k")) == (403, "AccessDenied")
    r = HTTP.request("GET", f"http://127.0.0.1:{floe.port}/{PUBLIC}/missing")
    assert r.status == 404  # reached the origin (which checks its own policy)


def test_anonymous_route_is_read_only(floe, relay, direct):
    """Floe signs what it forwards with the origin's keys: an unsigned write must never borrow them."""
    direct.put_object(Bucket=PUBLIC, Key="kept", Body=b"public bytes")
    base = f"http://127.0.0.1:{floe.port}/{PUBLIC}"
    before = relay.sent()
    assert err(HTTP.request("PUT", f"{base}/new", body=b"x")) == (403, "AccessDenied")
    assert err(HTTP.request("DELETE", f"{base}/kept")) == (403, "AccessDenied")
    assert err(HTTP.request("POST", f"{base}/new?uploads")) == (403, "AccessDenied")
    body = b'<Delete><Object><Key>kept</Key></Object></Delete>'
    assert err(HTTP.request("POST", f"{base}?delete", body=body)) == (403, "AccessDenied")
    assert relay.sent() == before, "a refused anonymous request reached the origin"
    assert HTTP.request("GET", f"{base}/kept").data == b"public bytes"
    assert HTTP.request("HEAD", f"{base}/kept").status == 200
    assert b"<Key>kept</Key>" in HTTP.request("GET", f"{base}?list-type=2").data
    assert direct.get_object(Bucket=PUBLIC, Key="kept")["Body"].read() == b"public bytes"
    with pytest.raises(direct.exceptions.ClientError):
        direct.head_object(Bucket=PUBLIC, Key="new")


def test_anonymous_operations_listed_on_the_route(floe, relay, direct):
    base = f"http://127.0.0.1:{floe.port}/{PUBLIC_RW}"
    assert HTTP.request("PUT", f"{base}/drop", body=b"dropped").status == 200
    assert direct.get_object(Bucket=PUBLIC_RW, Key="drop")["Body"].read() == b"dropped"
    assert HTTP.request("GET", f"{base}/drop").data == b"dropped"
    before = relay.sent()
    assert err(HTTP.request("DELETE", f"{base}/drop")) == (403, "AccessDenied")
    assert err(HTTP.request("HEAD", f"{base}/drop"))[0] == 403
    assert relay.sent() == before
    assert direct.get_object(Bucket=PUBLIC_RW, Key="drop")["Body"].read() == b"dropped"


def test_malformed_authorization(url, nothing_reaches_origin):
    r = HTTP.request("GET", url("k"), headers={"Authorization": "AWS4-HMAC-SHA256 Credential=x/y",
                                               "x-amz-date": "20260101T000000Z", "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    assert err(r) == (400, "AuthorizationHeaderMalformed")


def test_signature_version_2_is_refused_as_s3_refuses_it(url, nothing_reaches_origin):
    """SigV2 (deprecated) is refused, header or query, with the code S3 answers where only V4 is
    taken: 400 InvalidRequest."""
    req = AWSRequest(method="GET", url=url("k"), headers={})
    botocore.auth.HmacV1Auth(Credentials(*CLIENT)).add_auth(req)
    assert req.headers["Authorization"].startswith("AWS ")
    assert err(send(req)) == (400, "InvalidRequest")
    query = AWSRequest(method="GET", url=url("k"), headers={})
    botocore.auth.HmacV1QueryAuth(Credentials(*CLIENT), expires=60).add_auth(query)
    assert "AWSAccessKeyId=" in query.url
    assert err(send(query)) == (400, "InvalidRequest")


# aws-chunked bodies, framed here so each chunk and trailer can be tampered with.

def chunk_signed_put(url, data, chunk, tamper_chunk=None, trailer=None, tamper_trailer=False):
    """A PUT in signed aws-chunked framing; with `trailer` (a CRC32 in base64) the signed
    trailer form, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER."""
    req, out, _ = chunk_signed_body(url, data, chunk, tamper_chunk, trailer, tamper_trailer)
    return send(req, body=out)


def chunk_signed_body(url, data, chunk, tamper_chunk=None, trailer=None, tamper_trailer=False, tamper_final=False):
    """The signed request and its aws-chunked body, and the offsets where each chunk ends."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    n_chunks = (len(data) + chunk - 1) // chunk
    tail = f"x-amz-checksum-crc32:{trailer}\r\nx-amz-trailer-signature:{'0' * 64}\r\n\r\n" if trailer else "\r\n"
    framed_len = sum(len(f"{min(chunk, len(data) - i):x};chunk-signature=") + 64 + 4 + min(chunk, len(data) - i)
                     for i in range(0, len(data), chunk)) + len("0;chunk-signature=") + 64 + 2 + len(tail)
    headers = {"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(data)),
               "Content-Length": str(framed_len)}
    mode = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
    if trailer:
        headers["x-amz-trailer"] = "x-amz-checksum-crc32"
        mode += "-TRAILER"
    req = sign("PUT", url, headers=headers, when=now, payload=mode)
    seed = req.headers["Authorization"].rsplit("Signature=", 1)[1]
    ts = req.context["timestamp"]
    scope = f"{ts[:8]}/us-east-1/s3/aws4_request"
    k = b"AWS4" + CLIENT[1].encode()
    for part in (ts[:8], "us-east-1", "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    prev, out, ends = seed, b"", []
    pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] + [b""]
    assert len(pieces) == n_chunks + 1
    for idx, p in enumerate(pieces):
        sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", ts, scope, prev, hashlib.sha256(b"").hexdigest(),
                         hashlib.sha256(p).hexdigest()])
        prev = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        sent = p if idx != tamper_chunk else b"X" + p[1:]
        shown = "f" * 64 if (tamper_final and not p) else prev
        out += f"{len(p):x};chunk-signature={shown}\r\n".encode() + sent
        out += b"\r\n" if p or not trailer else b""
        ends.append(len(out))
    if trailer:
        canonical = f"x-amz-checksum-crc32:{trailer}\n"
        sts = "\n".join(["AWS4-HMAC-SHA256-TRAILER", ts, scope, prev, hashlib.sha256(canonical.encode()).hexdigest()])
        sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        if tamper_trailer:
            sig = sig[::-1]
        out += f"x-amz-checksum-crc32:{trailer}\r\nx-amz-trailer-signature:{sig}\r\n\r\n".encode()
    assert len(out) == framed_len
    return req, out, ends


def send_slowly(req, body, cuts, pause=0.2, stop_at=None):
    """Sends `req` over a raw socket, its body in pieces ending at `cuts` with a pause between
    (the gaps a slow client opens); `stop_at`: close the connection once that many bytes went.
    Returns the status (None when the connection closed without an answer)."""
    import socket
    import urllib.parse
    u = urllib.parse.urlsplit(req.url)
    path = u.path + (f"?{u.query}" if u.query else "")
    head = f"PUT {path} HTTP/1.1\r\nHost: {u.netloc}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in req.headers.items() if k.lower() != "host") + "\r\n"
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    try:
        s.sendall(head.encode())
        start = 0
        for end in cuts:
            if stop_at is not None and end > stop_at:
                s.sendall(body[start:stop_at])
                return None
            s.sendall(body[start:end])
            start = end
            time.sleep(pause)
        got = b""
        while b"\r\n" not in got:
            piece = s.recv(65536)
            if not piece:
                return None
            got += piece
        return int(got.split(b" ", 2)[1])
    finally:
        s.close()


def never_at_origin(direct, key, watch=1.0):
    """The object does not exist at the origin, and does not appear for `watch` seconds (a
    commit the proxy let through would land within them)."""
    deadline = time.monotonic() + watch
    while time.monotonic() < deadline:
        with pytest.raises(direct.exceptions.ClientError):
            direct.head_object(Bucket=BUCKET, Key=key)
        time.sleep(0.1)


@pytest.mark.parametrize("case", ["bad-final-signature", "bad-trailer-signature", "bad-trailer-crc",
                                  "reset-after-last-chunk"])
def test_a_streamed_upload_that_fails_at_its_end_is_never_stored(direct, url, case):
    """Chunks sent one by one with pauses: every data chunk verifies and goes on, then the end
    fails. The origin, told the decoded length, must never have received the whole body."""
    key = f"chunked/slow-{case}"
    data = os.urandom(4 * 65536 + 1000)
    trailer = crc32_b64(data) if "trailer" in case else None
    req, body, ends = chunk_signed_body(
        url(key), data, 65536, trailer="AAAAAA==" if case == "bad-trailer-crc" else trailer,
        tamper_trailer=case == "bad-trailer-signature", tamper_final=case == "bad-final-signature")
    stop = ends[-2] if case == "reset-after-last-chunk" else None
    status = send_slowly(req, body, ends[:-1] + [len(body)], stop_at=stop)
    assert status in ({None} if stop else {400, 403}), status
    never_at_origin(direct, key)


def test_headers_added_after_signing_are_refused(direct, url):
    """An x-amz-* header the signature does not cover must not take effect: S3 answers
    AccessDenied (an added x-amz-copy-source would turn a PUT into a copy)."""
    direct.put_object(Bucket=BUCKET, Key="unsigned/src", Body=b"secret source")
    for added in ({"x-amz-meta-evil": "1"}, {"x-amz-copy-source": f"{BUCKET}/unsigned/src"}):
        req = sign("PUT", url("unsigned/dst"), body=b"mine")
        headers = dict(req.headers, **added)
        r = HTTP.request("PUT", req.url, body=b"mine", headers=headers)
        assert err(r) == (403, "AccessDenied"), (added, r.data[:200])
        never_at_origin(direct, "unsigned/dst", watch=0.2)


def test_signed_chunks_accepted(floe, direct, url):
    data = os.urandom(300_000)
    r = chunk_signed_put(url("chunked/ok"), data, 65536)
    assert r.status == 200, r.data
    assert direct.get_object(Bucket=BUCKET, Key="chunked/ok")["Body"].read() == data


def test_signed_chunk_tampered_small_never_reaches_origin(url, nothing_reaches_origin):
    r = chunk_signed_put(url("chunked/small-bad"), os.urandom(20_000), 8192, tamper_chunk=1)
    assert err(r) == (403, "SignatureDoesNotMatch")


def test_signed_chunk_tampered_large_stores_nothing(direct, url):
    r = chunk_signed_put(url("chunked/big-bad"), os.urandom(400_000), 65536, tamper_chunk=4)
    assert err(r) == (403, "SignatureDoesNotMatch")
    with pytest.raises(direct.exceptions.ClientError):
        direct.head_object(Bucket=BUCKET, Key="chunked/big-bad")


def test_signed_chunks_with_a_signed_trailer_accepted(direct, url):
    data = os.urandom(200_000)
    r = chunk_signed_put(url("chunked/trailer-ok"), data, 65536, trailer=crc32_b64(data))
    assert r.status == 200, r.data
    assert direct.get_object(Bucket=BUCKET, Key="chunked/trailer-ok")["Body"].read() == data


def test_a_bad_trailer_signature_or_checksum_stores_nothing(direct, url):
    data = os.urandom(300_000)
    r = chunk_signed_put(url("chunked/trailer-badsig"), data, 65536, trailer=crc32_b64(data), tamper_trailer=True)
    assert err(r) == (403, "SignatureDoesNotMatch")
    r = chunk_signed_put(url("chunked/trailer-badsum"), data, 65536, trailer="AAAAAA==")
    assert err(r) == (400, "BadDigest")
    for k in ("chunked/trailer-badsig", "chunked/trailer-badsum"):
        with pytest.raises(direct.exceptions.ClientError):
            direct.head_object(Bucket=BUCKET, Key=k)


def trailer_put(url, data, crc_b64, chunk=65536):
    framed = b"".join(f"{len(data[i:i + chunk]):x}\r\n".encode() + data[i:i + chunk] + b"\r\n"
                      for i in range(0, len(data), chunk))
    framed += b"0\r\nx-amz-checksum-crc32:" + crc_b64.encode() + b"\r\n\r\n"
    headers = {"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(data)),
               "x-amz-trailer": "x-amz-checksum-crc32", "Content-Length": str(len(framed))}
    req = sign("PUT", url, headers=headers, payload="STREAMING-UNSIGNED-PAYLOAD-TRAILER")
    return send(req, body=framed)


def crc32_b64(data):
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_trailer_checksum_verified_and_preserved(direct, url):
    data = os.urandom(200_000)
    r = trailer_put(url("trailer/ok"), data, crc32_b64(data))
    assert r.status == 200, r.data
    got = direct.get_object(Bucket=BUCKET, Key="trailer/ok", ChecksumMode="ENABLED")
    assert got["Body"].read() == data
    assert got.get("ChecksumCRC32") == crc32_b64(data), "the trailer checksum reached the origin"


def test_trailer_checksum_mismatch_small(url, nothing_reaches_origin):
    assert err(trailer_put(url("trailer/bad"), b"hello world", "AAAAAA==")) == (400, "BadDigest")


def test_trailer_checksum_mismatch_large_stores_nothing(direct, url):
    assert err(trailer_put(url("trailer/bad-big"), os.urandom(300_000), "AAAAAA==")) == (400, "BadDigest")
    with pytest.raises(direct.exceptions.ClientError):
        direct.head_object(Bucket=BUCKET, Key="trailer/bad-big")


@pytest.mark.parametrize("algo", ["CRC32", "CRC32C", "SHA256", "CRC64NVME"])
def test_boto3_default_checksums(s3, direct, algo):
    data = os.urandom(150_000)
    s3.put_object(Bucket=BUCKET, Key=f"algo/{algo}", Body=data, ChecksumAlgorithm=algo)
    assert direct.get_object(Bucket=BUCKET, Key=f"algo/{algo}")["Body"].read() == data


def test_sigv2_presign_is_refused_clearly(url, nothing_reaches_origin):
    r = HTTP.request("GET", url("k") + "?AWSAccessKeyId=a&Signature=x&Expires=9999999999")
    assert err(r) == (400, "InvalidRequest")
    assert b"AWS4-HMAC-SHA256" in r.data


def expect_continue_put(port, path, body=b"small body", key=CLIENT):
    """A signed PUT with Expect: 100-continue over a raw socket; returns every status line and
    the final response's body (S3 may answer 100 first, or the final answer at once)."""
    import socket
    url = f"http://127.0.0.1:{port}{path}"
    req = sign("PUT", url, body=body, headers={"Expect": "100-continue",
                                                "Content-Length": str(len(body))}, key=key)
    head = f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in req.headers.items() if k.lower() != "host") + "\r\n"
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(head.encode())
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    if got.startswith(b"HTTP/1.1 100"):
        s.sendall(body)
        got = got.split(b"\r\n\r\n", 1)[1]
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        statuses = [100]
    else:
        statuses = []
    if not got:
        s.close()
        return statuses, None, b""
    head, _, rest = got.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    s.close()
    return statuses + [status], status, rest


def test_expect_continue_still_gets_a_complete_early_error(floe, relay):
    """An early answer (unknown bucket, failed auth) after `100 Continue` is a whole S3 error,
    never a closed connection."""
    before = relay.sent()
    statuses, status, body = expect_continue_put(floe.port, "/no-such-bucket/k")
    assert status == 404, (statuses, body)
    assert b"<Code>NoSuchBucket</Code>" in body
    statuses, status, body = expect_continue_put(floe.port, f"/{BUCKET}/k",
                                                 key=("floe-client", "wrong-secret"))
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body, (statuses, body)
    assert relay.sent() == before


def raw_exchange(port, head, body):
    import socket
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(head + body)
        got = b""
        while b"\r\n\r\n" not in got:
            piece = s.recv(65536)
            if not piece:
                break
            got += piece
        return int(got.split(b" ", 2)[1]) if got else None
    finally:
        s.close()


@pytest.mark.parametrize("framing", [b"zz\r\nabc\r\n0\r\n\r\n", b"3\r\nabcdef\r\n0\r\n\r\n", b"-1\r\nabc\r\n0\r\n\r\n"],
                         ids=["bad-size", "overlong-chunk", "negative-size"])
def test_malformed_chunked_framing_is_a_client_error(floe, direct, minio, framing):
    """S3 and MinIO answer broken Transfer-Encoding: chunked framing with a 4xx; so does Floe
    (and stores nothing)."""
    statuses = {}
    for name, port, creds in (("floe", floe.port, CLIENT), ("minio", minio.port, None)):
        url = f"http://127.0.0.1:{port}/{BUCKET}/te/bad"
        req = sign("PUT", url, headers={"Transfer-Encoding": "chunked"}, payload="UNSIGNED-PAYLOAD",
                   **({} if creds else {"key": (ORIGIN_KEY, ORIGIN_SECRET)}))
        head = f"PUT /{BUCKET}/te/bad HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode() + b"".join(
            f"{k}: {v}\r\n".encode() for k, v in req.headers.items() if k.lower() not in ("host", "content-length")) + b"\r\n"
        statuses[name] = raw_exchange(port, head, framing)
    print("statuses", statuses)
    assert statuses["floe"] is not None and 400 <= statuses["floe"] < 500, statuses
    never_at_origin(direct, "te/bad", watch=0.2)


@pytest.mark.parametrize("key,sent", [("pct/a?b=c", "pct/a%3fb%3dc"), ("pct/abc-d", "pct/%61bc%2Dd")],
                         ids=["lower-case-escapes", "encoded-unreserved"])
def test_keys_sent_in_another_encoding_reach_the_origin_as_one_key(floe, direct, key, sent):
    """A path S3 decodes to the same key must work through Floe as it does direct: Floe verifies
    the client's signature, then forwards the key in the one encoding the origin rebuilds."""
    import urllib.parse
    signed_url = f"http://127.0.0.1:{floe.port}/{BUCKET}/{urllib.parse.quote(key, safe='/')}"
    req = sign("PUT", signed_url, body=b"one key")
    r = HTTP.request("PUT", f"http://127.0.0.1:{floe.port}/{BUCKET}/{sent}", body=b"one key",
                     headers=dict(req.headers))
    assert r.status == 200, r.data[:300]
    assert direct.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"one key"


def test_a_key_that_is_not_utf8_is_refused_before_the_origin(floe, direct, url):
    req = sign("PUT", url("pct/x%FF"), body=b"x")
    r = HTTP.request("PUT", url("pct/x%FF"), body=b"x", headers=dict(req.headers))
    assert err(r) == (400, "InvalidURI")
