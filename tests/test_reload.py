"""Hot reload (SIGHUP, and the opt-in file watch) and the zero-downtime binary upgrade
(`floe-proxy --upgrade`, Pingora's listening-socket hand-over, then SIGQUIT to the old one)."""
import hashlib
import os
import signal
import subprocess
import threading
import urllib.request

import pytest
import urllib3

from conftest import BUCKET, FLOE_BIN, ORIGIN_KEY, ORIGIN_SECRET, Proc, free_port
from fleet import wait_until
from test_sigv4 import sign

OLD = ("floe-old-key", "floe-old-secret")
NEW = ("floe-new-key", "floe-new-secret")
MiB = 1 << 20

CONF = """
server:
  listeners: [{{address: "127.0.0.1:{port}"}}]
  metrics_address: 127.0.0.1:{mport}
  grace_period_seconds: {grace}
  upgrade_sock: {sock}
  reload_watch: {watch}
origins:
  minio:
    endpoint: http://127.0.0.1:{origin}
    credentials: {{from: env, access_key_env: K, secret_key_env: S}}
routes:
  - bucket: {bucket}
    origin: minio
    clients: [{clients}]
    filters: [sigv4]
"""


class Floe:
    def __init__(self, tmp, origin_port, keys, watch=False, grace=1):
        self.tmp, self.port, self.mport = tmp, free_port(), free_port()
        self.conf = tmp / "floe.yaml"
        self.fmt = dict(port=self.port, mport=self.mport, origin=origin_port, bucket=BUCKET, grace=grace,
                        sock=tmp / "upgrade.sock", watch=str(watch).lower())
        self.write(keys)
        self.env = dict(os.environ, K=ORIGIN_KEY, S=ORIGIN_SECRET)
        self.proc = Proc([str(FLOE_BIN), "--config", str(self.conf)], self.env, tmp / "floe.log", self.port,
                         "floe-proxy")

    def write(self, keys):
        clients = ", ".join(f"{{access_key: {k}, secret_key: {s}}}" for k, s in keys)
        self.conf.write_text(CONF.format(clients=clients, **self.fmt))

    def reloads(self, result):
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.mport}/metrics").read().decode()
        for line in text.splitlines():
            if line.startswith(f'floe_config_reloads_total{{result="{result}"}}'):
                return int(float(line.split()[-1]))
        return 0

    def reload(self, result="ok"):
        """SIGHUP, then waits for the reload's outcome in the metrics."""
        before = self.reloads(result)
        self.proc.proc.send_signal(signal.SIGHUP)
        wait_until(f"a reload ({result})", lambda: self.reloads(result) > before)

    def stop(self):
        self.proc.stop()


HTTP = urllib3.PoolManager(maxsize=16, retries=False)


def get(port, key, creds, preload=True):
    url = f"http://127.0.0.1:{port}/{BUCKET}/{key}"
    req = sign("GET", url, key=creds)
    return HTTP.request("GET", url, headers=dict(req.headers), preload_content=preload)


def test_keys_rotated_under_load_fail_no_valid_request_and_the_old_key_is_refused(minio, direct, tmp_path):
    direct.put_object(Bucket=BUCKET, Key="reload/obj", Body=b"r" * 4096)
    floe = Floe(tmp_path, minio.port, [OLD])
    stop, failures, done = threading.Event(), [], [0]
    use = [OLD]  # the key the load uses: switched to NEW once NEW is live

    def load():
        while not stop.is_set():
            creds = use[0]
            r = get(floe.port, "reload/obj", creds)
            if r.status != 200 or r.data != b"r" * 4096:
                failures.append((creds[0], r.status, r.data[:200]))
            done[0] += 1
    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        wait_until("load under way", lambda: done[0] > 50)
        floe.write([OLD, NEW])      # 1: add the new key
        floe.reload()
        assert get(floe.port, "reload/obj", NEW).status == 200
        use[0] = NEW                # 2: clients move to it
        mark = done[0]
        wait_until("load on the new key", lambda: done[0] > mark + 50)
        floe.write([NEW])           # 3: retire the old one
        floe.reload()
        assert get(floe.port, "reload/obj", OLD).status == 403
        mark = done[0]
        wait_until("more load", lambda: done[0] > mark + 50)
    finally:
        stop.set()
        for t in threads:
            t.join()
    try:
        assert failures == [], failures[:5]
        assert done[0] > 150
        # A broken file is refused with the config error, and the running config stays.
        floe.conf.write_text(floe.conf.read_text().replace("filters:", "filterz:"))
        floe.reload(result="error")
        assert get(floe.port, "reload/obj", NEW).status == 200
        assert get(floe.port, "reload/obj", OLD).status == 403
        log = (tmp_path / "floe.log").read_text()
        assert "config reload refused" in log and "floe.yaml" in log and "filterz" in log
    finally:
        floe.stop()


def test_a_transfer_in_flight_finishes_across_a_reload_and_the_file_watch_reloads(minio, direct, tmp_path):
    body = os.urandom(64 * MiB)
    direct.put_object(Bucket=BUCKET, Key="reload/big", Body=body)
    floe = Floe(tmp_path, minio.port, [OLD], watch=True)
    try:
        r = get(floe.port, "reload/big", OLD, preload=False)
        assert r.status == 200
        head = r.read(8 * MiB)
        before = floe.reloads("ok")
        floe.write([NEW])  # the watch sees the change: the old key goes while its GET is under way
        wait_until("the watch's reload", lambda: floe.reloads("ok") > before)
        assert get(floe.port, "reload/big", OLD).status == 403
        rest = r.read()
        assert hashlib.sha256(head + rest).digest() == hashlib.sha256(body).digest()
    finally:
        floe.stop()


def test_an_upgrade_hands_the_listeners_over_while_a_1_gib_get_finishes(minio, direct, tmp_path):
    src = tmp_path / "big.bin"
    h = hashlib.sha256()
    with open(src, "wb") as f:
        for _ in range(1024):
            chunk = os.urandom(MiB)
            h.update(chunk)
            f.write(chunk)
    direct.upload_file(str(src), BUCKET, "upgrade/1gib")
    src.unlink()
    old = Floe(tmp_path, minio.port, [OLD], grace=30)
    new = None
    try:
        r = get(old.port, "upgrade/1gib", OLD, preload=False)
        assert r.status == 200
        got = hashlib.sha256()
        got.update(r.read(64 * MiB))
        # The new binary takes the listening sockets over; the old one drains.
        new_log = tmp_path / "floe-new.log"
        new = subprocess.Popen([str(FLOE_BIN), "--config", str(old.conf), "--upgrade"], env=old.env,
                               stdout=open(new_log, "wb"), stderr=subprocess.STDOUT)
        old.proc.proc.send_signal(signal.SIGQUIT)
        wait_until("the new floe-proxy to serve", lambda: new.poll() is None and "listening" in new_log.read_text())
        # New requests are answered (by the new process once the old stops accepting).
        for _ in range(20):
            assert get(old.port, "reload/none-" + "x", OLD).status in (200, 404)
        while True:
            piece = r.read(8 * MiB)
            if not piece:
                break
            got.update(piece)
        assert got.digest() == h.digest(), "the in-flight GET's bytes differ"
        assert old.proc.proc.wait(90) == 0, "the old floe-proxy did not drain and exit"
        assert "listener sockets sent" in (tmp_path / "floe.log").read_text()  # handed over, not rebound
        assert new.poll() is None, new_log.read_text()[-2000:]
        after = get(old.port, "upgrade/1gib", OLD, preload=False)
        assert after.status == 200
        after.release_conn()
    finally:
        if new:  # its own drain is the old one's, tested above: no need to wait it out
            new.kill()
            new.wait()
        old.stop()
        direct.delete_object(Bucket=BUCKET, Key="upgrade/1gib")  # a GiB less on the test disk
