"""Fixtures: a real MinIO origin, a counting relay in front of it, and a floe-proxy process."""
import os
import pathlib
import random
import socket
import subprocess
import time

import boto3
import pytest
from botocore.config import Config

from relay import Relay

ROOT = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("FLOE_CACHE", pathlib.Path.home() / ".cache" / "floe"))
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
# The debug build (tests/run.sh builds it: overflow checks, debug assertions). FLOE_BUILD=release
# runs the release build users run: the suite takes ~2/3 of the time, but two timing-bound
# tests (test_control's fleet warm, test_pipeline's kill) failed once on it (issue 24's note).
BUILD_DIR = TARGET / os.environ.get("FLOE_BUILD", "debug")
FLOE_BIN = pathlib.Path(os.environ.get("FLOE_BIN", BUILD_DIR / "floe-proxy"))
CONTROL_BIN = pathlib.Path(os.environ.get("FLOE_CONTROL_BIN", BUILD_DIR / "floe-control"))
MINIO_BIN = pathlib.Path(os.environ.get("MINIO_BIN", CACHE / "bin" / "minio"))

ORIGIN_KEY, ORIGIN_SECRET = "floeorigin", "floe-origin-secret-123"
CLIENT = ("floe-client", "floe-client-secret")
CLIENT2 = ("second-client", "second-client-secret")
BUCKET, VERSIONED, PUBLIC = "floe-test", "floe-versioned", "floe-public"
PUBLIC_RW = "floe-public-rw"  # anonymous callers may read and put, nothing else


def pytest_sessionstart(session):
    """This suite runs the binaries in $CARGO_TARGET_DIR/debug (or $FLOE_BUILD) as they are
    (tests/run.sh builds them first): warn when one is older than the sources, or a run tests
    yesterday's code."""
    sources = [p for d in ("proxy", "plugins", "control") for p in (ROOT / d).rglob("*.rs")]
    newest = max((p.stat().st_mtime for p in sources), default=0)
    for binary in (FLOE_BIN, CONTROL_BIN):
        if binary.exists() and binary.stat().st_mtime < newest:
            import warnings
            warnings.warn(f"{binary} is older than the sources: run `cargo build --bin "
                          "floe-proxy --bin floe-control` (tests/run.sh does) or these tests run old code")


_PORTS = random.Random()
_GIVEN = set()  # ports handed out already: a fleet picks its peer ports before any node binds them


def free_port():
    """A port free for TCP and UDP now, below the kernel's ephemeral range (32768-60999 here),
    so no outgoing connection takes it between this call and the listener's bind, and never
    one this process handed out before (it may be picked but not yet bound)."""
    while True:
        p = _PORTS.randrange(20000, 32000)
        if p in _GIVEN:
            continue
        try:
            with socket.socket() as t, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                t.bind(("127.0.0.1", p))
                u.bind(("127.0.0.1", p))
            _GIVEN.add(p)
            return p
        except OSError:
            continue


def wait_port(port, proc, what, timeout=60, host="127.0.0.1"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)  # polling for a port to open, not synchronising test steps
    raise RuntimeError(f"{what} did not open port {port}")


def s3_client(port, key=CLIENT[0], secret=CLIENT[1], **cfg):
    return boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}, **cfg),
    )


class Proc:
    def __init__(self, args, env, log, port, what, host="127.0.0.1"):
        self.log = log
        self.port = port
        self.proc = subprocess.Popen(args, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT)
        try:
            wait_port(port, self.proc, what, host=host)
        except RuntimeError as e:  # say why it did not start: the log is gone with tmp_path
            tail = pathlib.Path(log).read_text(errors="replace").splitlines()[-15:]
            raise RuntimeError(f"{e}; last lines of {log}:\n" + "\n".join(tail)) from None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def minio(tmp_path_factory):
    d = tmp_path_factory.mktemp("minio")
    port = free_port()
    env = dict(os.environ, MINIO_ROOT_USER=ORIGIN_KEY, MINIO_ROOT_PASSWORD=ORIGIN_SECRET,
               MINIO_BROWSER="off")
    p = Proc([str(MINIO_BIN), "server", "--quiet", "--address", f"127.0.0.1:{port}", str(d / "data")],
             env, d / "minio.log", port, "minio")
    direct = s3_client(port, ORIGIN_KEY, ORIGIN_SECRET)
    deadline = time.monotonic() + 30
    while True:
        try:
            direct.list_buckets()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # MinIO answers 503 while initialising
    for b in (BUCKET, VERSIONED, PUBLIC, PUBLIC_RW):
        direct.create_bucket(Bucket=b)
    direct.put_bucket_versioning(Bucket=VERSIONED, VersioningConfiguration={"Status": "Enabled"})
    yield p
    p.stop()


@pytest.fixture(scope="session")
def direct(minio):
    """boto3 straight to MinIO: the reference every Floe result is compared with."""
    return s3_client(minio.port, ORIGIN_KEY, ORIGIN_SECRET)


@pytest.fixture(scope="session")
def relay(minio):
    return Relay(minio.port)


FLOE_YAML = """
server:
  listeners:
    - address: 127.0.0.1:{port}
  metrics_address: 127.0.0.1:{mport}
  grace_period_seconds: 1
origins:
  minio:
    endpoint: http://127.0.0.1:{relay}
    credentials:
      from: env
      access_key_env: FLOE_TEST_ORIGIN_KEY
      secret_key_env: FLOE_TEST_ORIGIN_SECRET
    retries: 1
    connect_timeout_ms: 500
    breaker:
      failures: 3
      open_ms: 1000
routes:
  - bucket: {bucket}
    origin: minio
    clients:
      - access_key: {c1}
        secret_key: {s1}
      - access_key: {c2}
        secret_key_env: FLOE_TEST_CLIENT2_SECRET
  - bucket: {versioned}
    origin: minio
    clients:
      - access_key: {c1}
        secret_key: {s1}
  - bucket: floe-not-at-origin  # routed, but the origin has no such bucket
    origin: minio
    clients:
      - access_key: {c1}
        secret_key: {s1}
  - bucket: {public}
    origin: minio
    anonymous: true
  - bucket: {public_rw}
    origin: minio
    anonymous: {{operations: [GetObject, PutObject]}}
"""


def start_floe(tmp, relay_port, **extra_env):
    port, mport = free_port(), free_port()
    conf = tmp / "floe.yaml"
    conf.write_text(FLOE_YAML.format(port=port, mport=mport, relay=relay_port, bucket=BUCKET,
                                     versioned=VERSIONED, public=PUBLIC, public_rw=PUBLIC_RW, c1=CLIENT[0], s1=CLIENT[1],
                                     c2=CLIENT2[0]))
    env = dict(os.environ, FLOE_TEST_ORIGIN_KEY=ORIGIN_KEY, FLOE_TEST_ORIGIN_SECRET=ORIGIN_SECRET,
               FLOE_TEST_CLIENT2_SECRET=CLIENT2[1], **extra_env)
    p = Proc([str(FLOE_BIN), "--config", str(conf)], env, tmp / "floe.log", port, "floe-proxy")
    p.metrics_port = mport
    return p


@pytest.fixture(scope="session")
def floe(relay, tmp_path_factory):
    p = start_floe(tmp_path_factory.mktemp("floe"), relay.port)
    yield p
    p.stop()


@pytest.fixture(scope="session")
def s3(floe):
    """boto3 through Floe, with current default checksum behaviour (aws-chunked trailers)."""
    return s3_client(floe.port)


CUSTOM_YAML = """
server:
{server}
origins:
  minio:
    endpoint: http://127.0.0.1:{relay}
    credentials: {{from: env, access_key_env: K, secret_key_env: S}}
{origin}
routes:
  - bucket: {bucket}
    origin: minio
    clients: [{{access_key: {c1}, secret_key: {s1}}}]
    filters: {filters}
{cache}
"""


def start_custom_floe(tmp, relay_port, port, server_yaml, cache="", filters="[sigv4]", origin="",
                      bucket=BUCKET, **env):
    """A floe-proxy with one route to the test bucket and the given `server:` section body
    (`origin`: more keys of the origin's section, indented by four)."""
    conf = tmp / "floe.yaml"
    conf.write_text(CUSTOM_YAML.format(server=server_yaml, relay=relay_port, bucket=bucket,
                                       c1=CLIENT[0], s1=CLIENT[1], cache=cache, filters=filters, origin=origin))
    full_env = dict(os.environ, K=ORIGIN_KEY, S=ORIGIN_SECRET, **env)
    return Proc([str(FLOE_BIN), "--config", str(conf)], full_env, tmp / "floe.log", port, "floe-proxy")


ADMIN_TOKEN = "floe-test-admin-token"


def start_cached_floe(tmp, relay_port, cache_dir, data=(64 << 20, 256 << 20), meta=(32 << 20, 64 << 20),
                      extra_cache="", admin_tls=None, extra_server="", extra_origin="", bucket=BUCKET,
                      **env):
    """A floe-proxy whose route has [sigv4, blocks], with an admin API (p.admin(method, path));
    `admin_tls=(ca, cert, key)` serves the admin API over TLS."""
    port, aport = free_port(), free_port()
    tls = f"\n  tls: {{cert: {admin_tls[1]}, key: {admin_tls[2]}}}" if admin_tls else ""
    cache = f"""
cache:
  dir: {cache_dir}
  block_bytes: 2097152
  data: {{dram_bytes: {data[0]}, disk_bytes: {data[1]}}}
  metadata: {{dram_bytes: {meta[0]}, disk_bytes: {meta[1]}}}
{extra_cache}
admin:
  address: 127.0.0.1:{aport}
  token: {ADMIN_TOKEN}{tls}
"""
    p = start_custom_floe(tmp, relay_port, port, f"""  listeners: [{{address: "127.0.0.1:{port}"}}]
  grace_period_seconds: 1
{extra_server}""", cache=cache, filters="[sigv4, blocks]", origin=extra_origin, bucket=bucket,
                          **env)
    wait_port(aport, p.proc, "floe admin")

    def admin(method, path):
        import json
        import ssl
        import urllib.request
        scheme = "https" if admin_tls else "http"
        ctx = ssl.create_default_context(cafile=str(admin_tls[0])) if admin_tls else None
        req = urllib.request.Request(f"{scheme}://127.0.0.1:{aport}{path}", method=method,
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        with urllib.request.urlopen(req, context=ctx) as r:
            return json.loads(r.read())
    p.admin = admin
    p.admin_port = aport
    return p


# The scheduler's queue stores: a PostgreSQL server (Debian's package, tests/postgres.sh) for
# the session, and a fresh SQLite file or PostgreSQL database per test.
@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    d = tmp_path_factory.mktemp("pg")
    url = subprocess.run([ROOT / "tests" / "postgres.sh", "start", d], check=True, capture_output=True,
                         text=True).stdout.strip()
    yield url
    subprocess.run([ROOT / "tests" / "postgres.sh", "stop", d], check=False)


_DBS = iter(range(1, 1 << 30))


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    """A fresh, empty queue store of each kind."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/sched.db"
    base = request.getfixturevalue("postgres")
    name = f"sched_{os.getpid()}_{next(_DBS)}"
    bindir = sorted(pathlib.Path("/usr/lib/postgresql").glob("*/bin"))[-1]
    host, port = base.split("@")[1].split("/")[0].split(":")
    subprocess.run([bindir / "createdb", "-h", host, "-p", port, "-U", "floe", name], check=True)
    return base.rsplit("/", 1)[0] + "/" + name


def complete_lines(path):
    """The lines of a file another process is still appending to, the last one only once its
    newline is written: a reader never parses half a record."""
    text = path.read_text()
    return text.split("\n")[:-1] if text else []
