"""What write-back acknowledges is what every node reads and what the origin ends with.

- A request that fails never undoes the acknowledged write before it: v1 is acknowledged
  `staged` while the origin takes no write; then a DELETE, a CopyObject overwrite or a PUT
  overwrite fails (the origin refuses it, or the client dies mid-body). Every node still reads
  v1, and once the origin takes writes again it holds v1: never v0, never nothing.
- A write the origin took before its answer (`sync`, `direct`) is read at once on every node.
- A body that does not match its client's Content-MD5 or x-amz-checksum-* is refused (S3's
  400) and never staged nor stored."""
import base64
import hashlib
import os
import signal
import zlib
from xml.etree import ElementTree

import pytest

from conftest import BUCKET, s3_client
from fleet import Node, start_fleet, wait_until
from relay import Relay
from test_blocks import get
from test_sigv4 import send, send_slowly, sign
from test_writeback import WB, at_origin, put, wait_all_at_origin, wb  # noqa: F401  (the fixture)

WRITES = {"PUT", "POST", "DELETE"}


def url(node, key):
    return f"http://127.0.0.1:{node.port}/{BUCKET}/{key}"


def staged_over_v0(nodes, relay, direct, key):
    """v0 at the origin, then v1 acknowledged staged while the origin refuses writes."""
    v0, v1 = os.urandom(70_000), os.urandom(90_000)
    direct.put_object(Bucket=BUCKET, Key=key, Body=v0)
    relay.refuse = set(WRITES)
    assert put(nodes[0], key, v1)["x-floe-writeback"] == "staged"
    return v0, v1


def v1_survives(nodes, relay, direct, key, v1):
    for nd in nodes:
        assert get(nd.port, key).data == v1, f"{nd.name} lost the acknowledged write"
    relay.refuse = set()
    wait_until("the acknowledged write at the origin", lambda: at_origin(direct, key) == v1, timeout=30)
    wait_until("nothing left staged", lambda: all(
        nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in nodes))
    assert at_origin(direct, key) == v1
    for nd in nodes:
        assert get(nd.port, key).data == v1, nd.name


def test_a_delete_the_origin_refuses_leaves_the_staged_write_acknowledged(wb, direct):
    nodes, relay, _ = wb
    key = "wb/dur/00001-del.parquet"
    _, v1 = staged_over_v0(nodes, relay, direct, key)
    answer = send(sign("DELETE", url(nodes[1], key)))
    assert answer.status == 503, answer.data
    v1_survives(nodes, relay, direct, key, v1)


def test_a_copy_over_a_staged_write_the_origin_refuses_leaves_it_acknowledged(wb, direct):
    nodes, relay, _ = wb
    key = "wb/dur/00002-copy.parquet"
    direct.put_object(Bucket=BUCKET, Key="wb/dur/source.bin", Body=b"copied bytes")
    _, v1 = staged_over_v0(nodes, relay, direct, key)
    copy = sign("PUT", url(nodes[2], key), headers={"x-amz-copy-source": f"/{BUCKET}/wb/dur/source.bin"})
    answer = send(copy)
    assert answer.status == 503, answer.data
    v1_survives(nodes, relay, direct, key, v1)


def test_an_overwrite_whose_client_dies_mid_body_leaves_the_staged_write_acknowledged(wb, direct):
    nodes, relay, _ = wb
    key = "wb/dur/00003-cut.parquet"
    _, v1 = staged_over_v0(nodes, relay, direct, key)
    body = os.urandom(600_000)
    req = sign("PUT", url(nodes[1], key), headers={"Content-Length": str(len(body))}, payload="UNSIGNED-PAYLOAD")
    assert send_slowly(req, body, cuts=[100_000, 200_000, 300_000], pause=0.1, stop_at=250_000) is None
    v1_survives(nodes, relay, direct, key, v1)


def test_a_multi_object_delete_never_lets_a_staged_write_come_back(wb, direct):
    nodes, relay, _ = wb
    key = "wb/dur/00007-multi.parquet"
    _, v1 = staged_over_v0(nodes, relay, direct, key)
    relay.refuse = {"PUT"}  # the origin would take the delete, not the staged write
    client = s3_client(nodes[1].port)
    with pytest.raises(client.exceptions.ClientError) as refused:
        client.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": key}]})
    assert refused.value.response["Error"]["Code"] == "SlowDown"
    assert at_origin(direct, key) is not None  # the delete did not reach the origin
    for nd in nodes:
        assert get(nd.port, key).data == v1, nd.name
    relay.refuse = set()
    client.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": key}]})
    wait_until("nothing left staged", lambda: all(
        nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in nodes))
    assert at_origin(direct, key) is None
    for nd in nodes:
        assert get(nd.port, key).status == 404, nd.name


def test_a_successful_delete_of_a_staged_write_deletes_it_for_good(wb, direct):
    nodes, relay, _ = wb
    key = "wb/dur/00004-gone.parquet"
    staged_over_v0(nodes, relay, direct, key)
    relay.refuse = set()
    s3_client(nodes[2].port).delete_object(Bucket=BUCKET, Key=key)
    assert at_origin(direct, key) is None
    for nd in nodes:
        assert get(nd.port, key).status == 404, nd.name
    wait_until("nothing left staged", lambda: all(
        nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in nodes))
    assert at_origin(direct, key) is None


def cached_everywhere(nodes, key, body):
    """Reads `key` through every node until each serves it from its cache."""
    for nd in nodes:
        assert get(nd.port, key).data == body, nd.name
        wait_until(f"{key} cached on {nd.name}", lambda: get(nd.port, key).headers.get("x-floe-cache") == "hit")


def test_an_overwrite_the_origin_took_before_its_answer_is_read_at_once_on_every_node(wb, direct):
    nodes, relay, _ = wb
    key = "wb/dur/00005-sync.parquet"
    v0, v1 = os.urandom(60_000), os.urandom(80_000)
    direct.put_object(Bucket=BUCKET, Key=key, Body=v0)
    cached_everywhere(nodes, key, v0)
    nodes[2].proc.proc.send_signal(signal.SIGSTOP)  # placed on, never answers: a sync write
    try:
        assert put(nodes[0], key, v1)["x-floe-writeback"] == "sync"
        for nd in nodes[:2]:  # read right after the answer, writer and other node alike
            assert get(nd.port, key).data == v1, f"{nd.name} served the replaced version"
    finally:
        nodes[2].proc.proc.send_signal(signal.SIGCONT)
    assert at_origin(direct, key) == v1


def test_a_direct_overwrite_is_read_at_once_on_every_node(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=2, **WB)  # w = 3 > 2 nodes: every PUT direct
    try:
        key = "wb/dur/00006-direct.parquet"
        v0, v1 = os.urandom(60_000), os.urandom(80_000)
        direct.put_object(Bucket=BUCKET, Key=key, Body=v0)
        cached_everywhere(nodes, key, v0)
        assert put(nodes[1], key, v1)["x-floe-writeback"] == "direct"
        for nd in nodes:
            assert get(nd.port, key).data == v1, f"{nd.name} served the replaced version"
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def b64(raw):
    return base64.b64encode(raw).decode()


def test_a_body_that_does_not_match_its_integrity_headers_is_refused_and_never_stored(wb, direct):
    nodes, relay, _ = wb
    body, other = os.urandom(100_000), os.urandom(100_000)
    cases = [
        ({"Content-MD5": b64(hashlib.md5(other).digest())}, 400, "BadDigest"),
        ({"Content-MD5": "AAAA"}, 400, "InvalidDigest"),
        ({"x-amz-checksum-crc32": b64(zlib.crc32(other).to_bytes(4, "big"))}, 400, "BadDigest"),
        ({"x-amz-checksum-sha256": b64(hashlib.sha256(other).digest())}, 400, "BadDigest"),
    ]
    for i, (headers, status, code) in enumerate(cases):
        key = f"wb/dur/digest-{i}.parquet"
        answer = send(sign("PUT", url(nodes[i % 3], key), body=body, headers=headers, payload="UNSIGNED-PAYLOAD"))
        assert answer.status == status, (headers, answer.status, answer.data)
        assert ElementTree.fromstring(answer.data).findtext("Code") == code, answer.data
        for nd in nodes:
            assert get(nd.port, key).status == 404, (nd.name, headers)
        assert at_origin(direct, key) is None
    assert all(nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in nodes)
    # The same headers, right this time: staged and read back.
    good = {"Content-MD5": b64(hashlib.md5(body).digest()),
            "x-amz-checksum-crc32": b64(zlib.crc32(body).to_bytes(4, "big"))}
    for name, value in good.items():
        key = f"wb/dur/digest-ok-{name}.parquet"
        answer = send(sign("PUT", url(nodes[0], key), body=body, headers={name: value}, payload="UNSIGNED-PAYLOAD"))
        assert answer.status == 200 and answer.headers["x-floe-writeback"] == "staged", answer.data
        assert get(nodes[1].port, key).data == body


def test_a_silent_origin_fails_uploads_in_time_and_propagation_resumes_once_it_answers(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=3, extra_origin="    read_timeout_ms: 1500", **WB)
    try:
        relay.slow(f"PUT /{BUCKET}/wb/silent/", 1, 60)  # connections taken, never answered
        acked = {}
        for i in range(6):
            key, body = f"wb/silent/{i:02d}.parquet", os.urandom(200_000 + i)
            assert put(nodes[i % 3], key, body)["x-floe-writeback"] == "staged"
            acked[key] = body
        # Every upload fails within its timeout and is retried: none hangs on the silence.
        wait_until("propagation failures counted on every node", lambda: all(
            nd.admin("GET", "/writeback")["propagation_failures"] >= 2 for nd in nodes), timeout=20)
        relay.slow(None, 0, 0)
        wait_all_at_origin(direct, acked, set(), timeout=30)
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_a_node_back_from_away_answers_only_once_it_caught_up(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=4, **WB)  # k=2 m=1 w=3: one node may be away
    try:
        key = "wb/dur/00008-away.parquet"
        v0, v1 = os.urandom(60_000), os.urandom(70_000)
        direct.put_object(Bucket=BUCKET, Key=key, Body=v0)
        cached_everywhere(nodes, key, v0)
        away = nodes[3]
        away.kill()
        wait_until("the fleet to see the node gone",
                   lambda: nodes[0].view().get(away.name) in (None, "dead", "left"))
        relay.refuse = set(WRITES)  # v1 stays staged
        assert put(nodes[0], key, v1)["x-floe-writeback"] == "staged"
        seeds = [nd.peer_port for nd in nodes[:3]]
        nodes[3] = Node(tmp_path, away.name, relay.port, away.peer_port, seeds, **WB)
        # From its first answer on it never serves the replaced version (its cache still
        # holds v0), and it is ready only once it would answer v1.
        first = get(nodes[3].port, key)
        assert first.data == v1, f"{first.status} {first.headers.get('x-floe-cache')}: the replaced version"
        assert nodes[3].ready()
        relay.refuse = set()
        wait_until("v1 at the origin", lambda: at_origin(direct, key) == v1, timeout=30)
        assert all(get(nd.port, key).data == v1 for nd in nodes)
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_a_delete_acknowledged_while_a_holder_was_away_never_comes_back(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=4, **WB)
    try:
        key = "wb/dur/00009-tomb.parquet"
        relay.refuse = {"PUT"}  # v1 stays staged
        v1 = os.urandom(90_000)
        assert put(nodes[0], key, v1)["x-floe-writeback"] == "staged"
        wait_until("v1's journal copy on every node",
                   lambda: all(nd.admin("GET", "/writeback")["indexed_objects"] == 1 for nd in nodes))
        away = nodes[3]
        away.kill()  # it keeps v1's copy (and maybe a fragment) on disk
        wait_until("the fleet to see the node gone",
                   lambda: nodes[0].view().get(away.name) in (None, "dead", "left"))
        relay.refuse = set()
        s3_client(nodes[1].port).delete_object(Bucket=BUCKET, Key=key)  # 204
        assert at_origin(direct, key) is None
        seeds = [nd.peer_port for nd in nodes[:3]]
        nodes[3] = Node(tmp_path, away.name, relay.port, away.peer_port, seeds, **WB)
        back = get(nodes[3].port, key)  # waits for its catch-up
        assert back.status == 404, f"{back.status}: the deleted object came back"
        wait_until("the returning node ready", nodes[3].ready)
        wait_until("no copy left anywhere", lambda: all(
            nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in nodes), timeout=30)
        assert at_origin(direct, key) is None, "the deleted object was uploaded again"
        assert all(get(nd.port, key).status == 404 for nd in nodes)
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()
