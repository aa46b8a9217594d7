"""A fleet of three floe-proxy nodes: one origin fill per block fleet-wide, peer hits, a node
killed or cut off or drained under load without a failed read, version-atomic answers under
overwrites, and gossip that outsiders cannot change."""
import concurrent.futures
import os
import random
import socket
import threading
import time

import pytest

from conftest import BUCKET
from fleet import Node, start_fleet, wait_until
from relay import Relay
from test_blocks import get

MiB = 1 << 20


@pytest.fixture(scope="module")
def fleet(minio, tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    relay = Relay(minio.port)
    nodes = start_fleet(d, relay.port)
    yield nodes, relay, d
    for nd in nodes:
        nd.stop()
    relay.down()


def origin_gets(relay, key):
    return sum(1 for m, t in list(relay.lines) if m == "GET" and key in t)


def test_sixty_four_cold_requests_over_three_nodes_make_one_origin_get(fleet, direct):
    nodes, relay, _ = fleet
    key = "fleet/stampede/00000-0-a.parquet"
    data = os.urandom(MiB + 321)
    direct.put_object(Bucket=BUCKET, Key=key, Body=data)
    barrier = threading.Barrier(64)

    def one(i):
        barrier.wait()
        return get(nodes[i % 3].port, key)

    with concurrent.futures.ThreadPoolExecutor(64) as ex:
        results = list(ex.map(one, range(64)))
    assert [r.status for r in results] == [200] * 64
    assert all(r.data == data for r in results)
    assert origin_gets(relay, key) == 1
    served = {r.headers["x-floe-node"] for r in results}
    assert served <= {"floe-0", "floe-1", "floe-2"}
    labels = {r.headers["x-floe-cache"] for r in results}
    assert labels & {"hit-peer", "fill-peer"}, labels


def test_a_working_set_read_through_one_node_costs_the_others_no_origin_request(fleet, direct):
    nodes, relay, _ = fleet
    keys = [f"fleet/ws/data/0000{i}-0-b.parquet" for i in range(6)]
    blobs = {k: os.urandom(5 * MiB + i * 1000) for i, k in enumerate(keys)}
    for k, b in blobs.items():
        direct.put_object(Bucket=BUCKET, Key=k, Body=b)
    for k in keys:
        r = get(nodes[0].port, k)
        assert r.status == 200 and r.data == blobs[k]
    before = len(relay.lines)
    for nd in nodes[1:]:
        for k in keys:
            r = get(nd.port, k)
            assert r.status == 200 and r.data == blobs[k], (nd.name, k)
        for k in keys:
            lo = random.randrange(0, 5 * MiB)
            r = get(nd.port, k, f"bytes={lo}-{lo + 300000}")
            assert r.status == 206 and r.data == blobs[k][lo:lo + 300001]
    assert relay.lines[before:] == []
    peer_bytes = sum(nd.admin("GET", "/stats")["data"]["peer_bytes"] for nd in nodes)
    assert peer_bytes > 0
