"""Origin failures: a reset mid-GET must fail the client's transfer (never a short body passed
as whole), and a dead origin gets 503 SlowDown fast once the breaker is open."""
import os
import time

import botocore
import pytest
import urllib3

from conftest import BUCKET, s3_client, start_floe
from relay import Relay


@pytest.fixture
def rig(minio, tmp_path):
    relay = Relay(minio.port)
    floe = start_floe(tmp_path, relay.port)
    yield relay, floe, s3_client(floe.port)
    floe.stop()
    relay.down()


def test_reset_mid_get_fails_the_transfer(rig, direct):
    relay, floe, s3 = rig
    data = os.urandom(8 << 20)
    direct.put_object(Bucket=BUCKET, Key="faults/big", Body=data)
    assert s3.get_object(Bucket=BUCKET, Key="faults/big")["Body"].read() == data
    relay.cut_next_response(1 << 20)
    with pytest.raises((botocore.exceptions.ResponseStreamingError, urllib3.exceptions.ProtocolError,
                        botocore.exceptions.IncompleteReadError)):
        s3.get_object(Bucket=BUCKET, Key="faults/big")["Body"].read()


def test_dead_origin_answers_slowdown_fast(rig):
    relay, floe, s3 = rig
    s3.put_object(Bucket=BUCKET, Key="faults/small", Body=b"x")
    relay.down()
    codes = []
    for _ in range(4):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_object(Bucket=BUCKET, Key="faults/small")
        codes.append(e.value.response["ResponseMetadata"]["HTTPStatusCode"])
    assert codes == [503] * 4
    t0 = time.monotonic()
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=BUCKET, Key="faults/small")
    elapsed = time.monotonic() - t0
    assert e.value.response["Error"]["Code"] == "SlowDown"
    assert elapsed < 0.1, f"breaker answer took {elapsed * 1000:.1f} ms"
    # The origin comes back: after the open period a trial request closes the breaker.
    relay.up()
    deadline = time.monotonic() + 10
    while True:
        try:
            assert s3.get_object(Bucket=BUCKET, Key="faults/small")["Body"].read() == b"x"
            break
        except botocore.exceptions.ClientError:
            assert time.monotonic() < deadline, "breaker never closed"
            time.sleep(0.05)  # polling for recovery, bounded by the deadline
