"""A node back from away reads what the fleet wrote meanwhile, from its first answer on.

A member that does not confirm a forget in time is retried, but after a backoff: a node frozen
longer than the wait (SIGSTOP, a paused VM) or restarted with its persisted mappings would serve
the version a write replaced until the retry reaches it. It asks its peers what it missed
instead (plugins/blocks/src/missed.rs), before it answers a read.
"""
import os
import signal
import threading

from conftest import BUCKET, s3_client
from fleet import Node, start_fleet, wait_until
from relay import Relay
from test_blocks import get
from test_writeback_durability import cached_everywhere


def test_a_node_frozen_past_the_forget_wait_reads_the_new_version_at_once(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=3)
    try:
        key = "away/frozen/00001-a.parquet"
        v0, v1 = os.urandom(300_000), os.urandom(310_000)
        direct.put_object(Bucket=BUCKET, Key=key, Body=v0)
        cached_everywhere(nodes, key, v0)
        frozen = nodes[2]
        frozen.proc.proc.send_signal(signal.SIGSTOP)
        try:
            # Written through another node while it is frozen: its forget times out.
            s3_client(nodes[0].port).put_object(Bucket=BUCKET, Key=key, Body=v1)
            threading.Event().wait(3.0)  # frozen longer than the write's wait: the point of the test
        finally:
            frozen.proc.proc.send_signal(signal.SIGCONT)
        first = get(frozen.port, key)
        assert first.status == 200 and first.data == v1, (
            f"{first.status} {first.headers.get('x-floe-cache')}: the replaced version")
        assert all(get(nd.port, key).data == v1 for nd in nodes)
    finally:
        for nd in nodes:
            nd.proc.proc.send_signal(signal.SIGCONT)
            nd.stop()
        relay.down()


def test_a_node_restarted_with_its_persisted_mappings_reads_the_new_version_at_once(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=3)
    try:
        key = "away/restarted/00001-a.parquet"
        v0, v1 = os.urandom(300_000), os.urandom(310_000)
        direct.put_object(Bucket=BUCKET, Key=key, Body=v0)
        cached_everywhere(nodes, key, v0)
        away = nodes[2]
        wait_until("its mapping persisted (the alive stamp written)",
                   lambda: (tmp_path / away.name / "cache" / "floe-alive.ms").exists())
        away.kill()
        s3_client(nodes[0].port).put_object(Bucket=BUCKET, Key=key, Body=v1)
        # Down long enough that the writer's retries of the forget are seconds apart.
        wait_until("the fleet to see the node gone",
                   lambda: nodes[0].view().get(away.name) in (None, "dead", "left"))
        threading.Event().wait(8.0)  # kept down longer than the retries' backoff: the point of the test
        seeds = [nd.peer_port for nd in nodes[:2]]
        nodes[2] = Node(tmp_path, away.name, relay.port, away.peer_port, seeds)
        first = get(nodes[2].port, key)
        assert first.status == 200 and first.data == v1, (
            f"{first.status} {first.headers.get('x-floe-cache')}: the replaced version")
        assert all(get(nd.port, key).data == v1 for nd in nodes)
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_a_write_through_a_restarted_node_reaches_members_its_view_does_not_list_yet(minio, direct, tmp_path):
    """A restarted node's view lists only itself until gossip brings the others back (seen in a
    chaos run: a PUT 300 ms after a restart left two nodes serving the version it replaced, for
    good). What every node must hear still reaches the members it saw before the restart, which
    it keeps on disk (floe_core::recent)."""
    relay = Relay(minio.port)
    slow = "  gossip_interval_ms: 3000"  # the others find the restarted node seconds later, not at once
    nodes = start_fleet(tmp_path, relay.port, n=3, extra_fleet=slow)
    try:
        key = "away/rejoin/00001-a.parquet"
        v0, v1 = os.urandom(300_000), os.urandom(310_000)
        direct.put_object(Bucket=BUCKET, Key=key, Body=v0)
        cached_everywhere(nodes, key, v0)
        writer = nodes[2]
        wait_until("the members it saw kept on disk",
                   lambda: (tmp_path / writer.name / "cache" / "floe-members").read_text().count("\n") == 2
                   if (tmp_path / writer.name / "cache" / "floe-members").exists() else False)
        writer.kill()
        # Back with no seeds: nothing brings the others into its view soon.
        nodes[2] = Node(tmp_path, writer.name, relay.port, writer.peer_port, [], extra_fleet=slow)
        assert set(nodes[2].view()) == {writer.name}, nodes[2].view()
        s3_client(nodes[2].port).put_object(Bucket=BUCKET, Key=key, Body=v1)
        for nd in nodes:
            got = get(nd.port, key)
            assert got.data == v1, f"{nd.name}: {got.status} {got.headers.get('x-floe-cache')}: the replaced version"
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()
