"""Listeners and the process: TLS (rustls), virtual-host addressing, Prometheus metrics, and a
SIGTERM that lets an in-flight transfer finish."""
import hashlib
import os
import signal
import subprocess
import urllib.request

import pytest
import urllib3

from conftest import BUCKET, free_port, start_custom_floe
from test_sigv4 import sign

HTTP = urllib3.PoolManager(retries=False)


@pytest.fixture(scope="module")
def tls_floe(relay, tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")], check=True, capture_output=True)
    port, tport = free_port(), free_port()
    p = start_custom_floe(d, relay.port, port, f"""  listeners:
    - address: 127.0.0.1:{port}
    - address: 127.0.0.1:{tport}
      tls: {{cert: {d / 'cert.pem'}, key: {d / 'key.pem'}}}
  hostnames: [s3.floe.test]
  grace_period_seconds: 10""")
    p.tls_port, p.cert = tport, str(d / "cert.pem")
    yield p
    p.stop()


def test_tls_listener(tls_floe, direct):
    direct.put_object(Bucket=BUCKET, Key="tls/obj", Body=b"over tls")
    import boto3
    from botocore.config import Config
    c = boto3.client("s3", endpoint_url=f"https://127.0.0.1:{tls_floe.tls_port}", verify=tls_floe.cert,
                     aws_access_key_id="floe-client", aws_secret_access_key="floe-client-secret",
                     region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
    assert c.get_object(Bucket=BUCKET, Key="tls/obj")["Body"].read() == b"over tls"


def test_virtual_host_addressing(tls_floe, direct):
    direct.put_object(Bucket=BUCKET, Key="vhost/obj", Body=b"by host")
    host = f"{BUCKET}.s3.floe.test:{tls_floe.port}"
    req = sign("GET", f"http://{host}/vhost/obj")
    r = HTTP.request("GET", f"http://127.0.0.1:{tls_floe.port}/vhost/obj", headers=dict(req.headers) | {"Host": host})
    assert r.status == 200 and r.data == b"by host"


def test_metrics(floe, s3):
    s3.put_object(Bucket=BUCKET, Key="metrics/obj", Body=b"m")
    s3.get_object(Bucket=BUCKET, Key="metrics/obj")["Body"].read()
    text = urllib.request.urlopen(f"http://127.0.0.1:{floe.metrics_port}/metrics").read().decode()
    line = next(l for l in text.splitlines()
                if l.startswith("floe_requests_total") and 'op="GetObject"' in l and 'status="200"' in l)
    assert float(line.split()[-1]) >= 1
    assert "floe_request_duration_seconds_bucket" in text
    assert "floe_origin_response_bytes_total" in text


def test_sigterm_lets_inflight_transfer_finish(tls_floe, direct):
    data = os.urandom(64 << 20)
    direct.put_object(Bucket=BUCKET, Key="grace/obj", Body=data)
    url = f"http://127.0.0.1:{tls_floe.port}/{BUCKET}/grace/obj"
    r = HTTP.request("GET", url, headers=dict(sign("GET", url).headers), preload_content=False)
    assert r.status == 200
    h = hashlib.sha256(r.read(1 << 20))
    tls_floe.proc.send_signal(signal.SIGTERM)
    for piece in r.stream(1 << 20):
        h.update(piece)
    assert h.digest() == hashlib.sha256(data).digest()
    assert tls_floe.proc.wait(30) == 0
