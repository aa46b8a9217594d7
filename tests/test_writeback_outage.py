"""An origin outage of minutes under write-back: PUTs keep being acknowledged within the
fleet's capacity, reads and LISTs through Floe see every acknowledged object meanwhile, and
everything reaches the origin once it returns. FLOE_OUTAGE_SECONDS sets the outage (120)."""
import os
import time

from conftest import BUCKET, s3_client
from fleet import start_fleet
from relay import Relay
from test_blocks import get
from test_writeback import WB, at_origin, wait_all_at_origin

OUTAGE = float(os.environ.get("FLOE_OUTAGE_SECONDS", "120"))


def test_minutes_of_origin_outage_lose_nothing_and_hide_nothing(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=3, **WB)
    try:
        relay.refuse = {"PUT", "POST"}  # the origin answers reads, takes no write
        acked, i = {}, 0
        until = time.monotonic() + OUTAGE
        while time.monotonic() < until:
            key = f"wb/outage/{i:05d}.parquet"
            body = os.urandom(64 * 1024 + i)
            h = s3_client(nodes[i % 3].port).put_object(Bucket=BUCKET, Key=key, Body=body)
            assert h["ResponseMetadata"]["HTTPHeaders"]["x-floe-writeback"] == "staged"
            acked[key] = body
            assert get(nodes[(i + 1) % 3].port, key).data == body
            if i % 50 == 0:
                listed = s3_client(nodes[(i + 2) % 3].port).list_objects_v2(Bucket=BUCKET, Prefix="wb/outage/")
                assert {o["Key"] for o in listed["Contents"]} == set(acked)
            i += 1
        assert at_origin(direct, "wb/outage/00000.parquet") is None
        relay.refuse = set()
        wait_all_at_origin(direct, acked, set())
        print(f"\noutage {OUTAGE:.0f} s: {len(acked)} PUTs acknowledged, all at the origin after")
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()
