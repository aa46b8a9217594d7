"""A fleet of floe-proxy nodes on 127.0.0.1 for tests: each node with its own cache, admin API
and metrics listener, gossiping with the others through one counting relay to MinIO."""
import json
import os
import signal
import time
import urllib.request

from conftest import ADMIN_TOKEN, BUCKET, CLIENT, FLOE_BIN, ORIGIN_KEY, ORIGIN_SECRET, Proc, free_port, wait_port

SECRET = "fleet-test-secret-0123456789"

NODE_YAML = """
server:
  listeners: [{{address: "{host}:{port}"}}]
  metrics_address: {host}:{mport}
  grace_period_seconds: {grace}
{extra_server}
origins:
  minio:
    endpoint: http://{origin_host}:{relay}
    credentials: {{from: env, access_key_env: K, secret_key_env: S}}
    connect_timeout_ms: 300
{extra_origin}
routes:
  - bucket: {bucket}
    origin: minio
    clients: [{{access_key: {c1}, secret_key: {s1}}}]
    filters: [{filters}]
{extra_route}
cache:
  dir: {cache}
  block_bytes: 2097152
  data: {{dram_bytes: {data_dram}, disk_bytes: {data_disk}}}
  metadata: {{dram_bytes: 134217728, disk_bytes: 134217728}}
{extra_cache}
admin:
  address: {host}:{aport}
  token: {token}
fleet:
  node_id: {node_id}
  peer_address: {peer_host}:{peer}
  seeds: [{seeds}]
  secret_env: FLOE_FLEET_SECRET
  peer_timeout_ms: 300
{extra_fleet}
{extra_top}
"""


class Node:
    """One floe-proxy of a fleet. `host` is where its S3, admin and metrics listeners are,
    `peer_host` its peer address, `seeds` other nodes' peer `host:port`s (or ports on
    127.0.0.1); `netns` runs it inside a network namespace."""

    def __init__(self, tmp, name, relay_port, peer_port, seeds, secret=SECRET, grace=1,
                 host="127.0.0.1", peer_host="127.0.0.1", origin_host="127.0.0.1", netns=None,
                 extra_fleet="", extra_route="", extra_top="", filters="sigv4, blocks", extra_server="",
                 extra_origin="", extra_cache="", data_dram=268435456, data_disk=268435456):
        self.name = name
        self.host = host
        self.peer_port = peer_port
        self.port, self.mport, self.aport = free_port(), free_port(), free_port()
        d = tmp / name
        d.mkdir(parents=True, exist_ok=True)
        conf = d / "floe.yaml"
        conf.write_text(NODE_YAML.format(
            port=self.port, mport=self.mport, aport=self.aport, relay=relay_port, bucket=BUCKET,
            c1=CLIENT[0], s1=CLIENT[1], cache=d / "cache", token=ADMIN_TOKEN, node_id=name,
            peer=peer_port, seeds=", ".join(s if isinstance(s, str) else f"127.0.0.1:{s}" for s in seeds),
            grace=grace, host=host, peer_host=peer_host, origin_host=origin_host,
            extra_fleet=extra_fleet, extra_route=extra_route, extra_server=extra_server, extra_origin=extra_origin, extra_top=extra_top.replace("{dir}", str(d)),
            filters=filters, extra_cache=extra_cache, data_dram=data_dram, data_disk=data_disk))
        env = dict(os.environ, K=ORIGIN_KEY, S=ORIGIN_SECRET, FLOE_FLEET_SECRET=secret)
        args = [str(FLOE_BIN), "--config", str(conf)]
        if netns:
            args = ["ip", "netns", "exec", netns] + args
        self.start_args = (args, env, d / "floe.log")
        self.start()

    def start(self):
        """Starts the process (again, after `kill` or `stop`: same config, same cache folder)."""
        args, env, log = self.start_args
        self.proc = Proc(args, env, log, self.port, self.name, host=self.host)
        wait_port(self.aport, self.proc.proc, f"{self.name} admin", host=self.host)

    def admin(self, method, path):
        req = urllib.request.Request(f"http://{self.host}:{self.aport}{path}", method=method,
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def ready(self):
        """Whether /readyz answers 200."""
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.mport}/readyz", timeout=5) as r:
                return r.status == 200
        except OSError:  # HTTPError (503) included
            return False

    def view(self):
        """Ids of the members this node sees, with their states."""
        return {m["node_id"]: m["state"] for m in self.admin("GET", "/fleet")["members"]}

    def metric(self, name):
        with urllib.request.urlopen(f"http://{self.host}:{self.mport}/metrics", timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and (line[len(name)] in " {"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def kill(self):
        self.proc.proc.send_signal(signal.SIGKILL)
        self.proc.proc.wait(10)

    def stop(self):
        if self.proc.proc.poll() is None:
            self.proc.stop()


def wait_until(what, check, timeout=20.0):
    """Polls `check` until it returns a truthy value (state polling, not step sync)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def start_fleet(tmp, relay_port, n=3, overrides=None, **kw):
    """`n` nodes seeded with each other, once each sees all of them; `overrides` maps a node's
    index to the keywords it takes instead of `kw`'s."""
    peers = [free_port() for _ in range(n)]
    nodes = []
    try:
        for i in range(n):
            nodes.append(Node(tmp, f"floe-{i}", relay_port, peers[i],
                              [p for p in peers if p != peers[i]], **{**kw, **(overrides or {}).get(i, {})}))
        names = {nd.name for nd in nodes}
        for nd in nodes:
            wait_until(f"{nd.name} to see the fleet", lambda nd=nd: set(nd.view()) == names)
        for nd in nodes:  # as a Service would: traffic once ready (write-back caught up)
            wait_until(f"{nd.name} ready", lambda nd=nd: nd.ready())
    except BaseException:
        for nd in nodes:  # a node that failed to start must not leave the others running
            nd.stop()
        raise
    return nodes
