"""Hedged origin reads (origins.<name>.hedge): a fill's GET that stalls at the origin is hedged
after `after_ms`, the hedge's answer is the one used, every byte is right, and the hedges stay
within `max_share`. The stalls come from the relay: every 5th fill GET is held for seconds."""
import os
import re
import urllib.request

from conftest import BUCKET, free_port, s3_client, start_cached_floe
from relay import Relay

READS = 30


def reads_by_outcome(mport):
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'floe_origin_range_reads_total\{(.*)\} (\S+)$', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            out[labels["hedge"]] = int(float(m.group(2)))
    return out


def start(tmp_path, relay, hedge):
    mport = free_port()
    floe = start_cached_floe(tmp_path, relay.port, tmp_path / "cache",
                             extra_server=f"  metrics_address: 127.0.0.1:{mport}",
                             extra_origin=f"    hedge: {hedge}")
    floe.metrics_port = mport
    return floe


def resolved_objects(direct, floe, prefix):
    """READS objects at the origin, each resolved by Floe (a HEAD), so every GET after is a
    fill; a client of Floe and the bodies."""
    bodies = {}
    for i in range(READS):
        key = f"{prefix}/{i:02d}.bin"
        bodies[key] = os.urandom(256 << 10)
        direct.put_object(Bucket=BUCKET, Key=key, Body=bodies[key])
    s3 = s3_client(floe.port)
    for key in bodies:
        s3.head_object(Bucket=BUCKET, Key=key)
    return s3, bodies


def test_a_stalled_fill_is_hedged_and_the_hedges_answer_is_served(minio, direct, tmp_path):
    relay = Relay(minio.port)
    floe = start(tmp_path, relay, "{after_ms: 200, max_share: 0.5}")
    try:
        s3, bodies = resolved_objects(direct, floe, "hedge/a")
        relay.slow(f"GET /{BUCKET}/hedge/a/", every=5, seconds=3)
        for key, body in bodies.items():
            got = s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=1000-70999")["Body"].read()
            assert got == body[1000:71000], key
        reads = reads_by_outcome(floe.metrics_port)
    finally:
        floe.stop()
        relay.down()
    # Each stalled GET was hedged (the hedge is the next GET, never a 5th) and the hedge won.
    assert relay.slowed >= 5
    assert reads.get("won") == relay.slowed, reads
    assert reads.get("lost", 0) == 0 and reads.get("refused", 0) == 0, reads
    assert reads.get("none") == READS - relay.slowed, reads


def test_hedges_stay_within_their_share_when_the_origin_is_slow_for_everyone(minio, direct, tmp_path):
    relay = Relay(minio.port)
    floe = start(tmp_path, relay, "{after_ms: 50, max_share: 0.1}")
    try:
        s3, bodies = resolved_objects(direct, floe, "hedge/b")
        relay.slow(f"GET /{BUCKET}/hedge/b/", every=1, seconds=0.3)  # every GET is late
        for key, body in bodies.items():
            got = s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=0-65535")["Body"].read()
            assert got == body[:65536], key
        reads = reads_by_outcome(floe.metrics_port)
    finally:
        floe.stop()
        relay.down()
    hedged = reads.get("won", 0) + reads.get("lost", 0)
    assert hedged == READS // 10, reads  # a tenth of the reads, no more
    assert hedged + reads.get("refused", 0) == READS, reads
