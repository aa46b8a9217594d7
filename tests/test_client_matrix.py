"""The client matrix: each S3 client, at its default settings (a custom endpoint and
path-style addressing aside), writes two objects, then reads them back (a whole GET, a range,
a listing, a HEAD), once against MinIO directly and once through Floe. The results must be
byte-identical, and a second read through Floe must not fetch the object from the origin
again (the block cache serves it).

The clients' programs live in tests/clients/ and are built by tests/clients/build.sh (run by
tests/run.sh), which names each built client in $FLOE_CACHE/clients/."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import BUCKET, CACHE, CLIENT, ORIGIN_KEY, ORIGIN_SECRET, start_cached_floe
from relay import Relay

BUILT = CACHE / "clients"
SMALL, BIG = os.urandom(1000), os.urandom((6 << 20) + 123)


def go(mode, endpoint, prefix, d, env):
    return [str(BUILT / "s3check-go"), mode, endpoint, BUCKET, prefix, str(d)]


def rust(mode, endpoint, prefix, d, env):
    return [str(BUILT / "s3check-rust"), mode, endpoint, BUCKET, prefix, str(d)]


def java(mode, endpoint, prefix, d, env):
    cp = f"{BUILT / 'java' / 'classes'}:{BUILT / 'java' / 'dependency'}/*"
    return ["java", "-cp", cp, "S3Check", mode, endpoint, BUCKET, prefix, str(d)]


def fsspec(mode, endpoint, prefix, d, env):
    return [str(BUILT / "venv-s3fs" / "bin" / "python"), str(pathlib.Path(__file__).parent / "clients" / "s3fs_check.py"),
            mode, endpoint, BUCKET, prefix, str(d)]


def mc(mode, endpoint, prefix, d, env):
    return [sys.executable, str(pathlib.Path(__file__).parent / "clients" / "mc_check.py"), str(BUILT / "mc"),
            mode, endpoint, BUCKET, prefix, str(d)]


CLIENTS = {"aws-sdk-go-v2": (go, "s3check-go"), "aws-sdk-java-v2": (java, "java"), "aws-sdk-rust": (rust, "s3check-rust"),
           "s3fs-fsspec": (fsspec, "venv-s3fs"), "mc": (mc, "mc")}


@pytest.fixture(scope="module")
def cached(minio, tmp_path_factory):
    relay = Relay(minio.port)
    tmp = tmp_path_factory.mktemp("matrix")
    p = start_cached_floe(tmp, relay.port, tmp / "cache")
    yield p, relay
    p.stop()
    relay.down()


def run(client, mode, endpoint, prefix, d, key):
    make, _ = CLIENTS[client]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=key[0], AWS_SECRET_ACCESS_KEY=key[1], AWS_REGION="us-east-1",
               AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    out = subprocess.run(make(mode, endpoint, prefix, d, env), env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{client} {mode} against {endpoint}: {out.stderr[-3000:]}"


def read_back(d, prefix):
    out = d / "out"
    listing = [line.replace(prefix + "/", "") for line in (out / "list").read_text().split()]
    return {"big": (out / "big").read_bytes(), "range": (out / "range").read_bytes(),
            "list": listing, "head": (out / "head").read_text().split()}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_client_reads_through_floe_what_it_reads_direct_and_hits_the_cache_again(client, cached, minio, tmp_path):
    if not (BUILT / CLIENTS[client][1]).exists():
        pytest.fail(f"{client} is not built: run tests/clients/build.sh")
    floe, relay = cached
    sides = {"direct": (f"http://127.0.0.1:{minio.port}", (ORIGIN_KEY, ORIGIN_SECRET)),
             "floe": (f"http://127.0.0.1:{floe.port}", CLIENT)}
    got = {}
    for side, (endpoint, key) in sides.items():
        d = tmp_path / side
        d.mkdir()
        (d / "small.bin").write_bytes(SMALL)
        (d / "big.bin").write_bytes(BIG)
        prefix = f"matrix/{client}/{side}"
        run(client, "write", endpoint, prefix, d, key)
        run(client, "read", endpoint, prefix, d, key)
        got[side] = read_back(d, prefix)
    assert got["floe"]["big"] == BIG and got["floe"]["range"] == BIG[1000:3000]
    assert got["floe"] == got["direct"], json.dumps({s: {k: v for k, v in g.items() if k in ("list", "head")}
                                                     for s, g in got.items()})
    big = f"/{BUCKET}/matrix/{client}/floe/big"
    before = sum(1 for m, t in relay.lines if m == "GET" and t.split("?")[0] == big)
    again = tmp_path / "again"
    again.mkdir()
    run(client, "read", sides["floe"][0], f"matrix/{client}/floe", again, CLIENT)
    assert read_back(again, f"matrix/{client}/floe") == got["floe"]
    after = sum(1 for m, t in relay.lines if m == "GET" and t.split("?")[0] == big)
    assert after == before, f"the second read fetched {after - before} times from the origin"
