"""A fleet of three floe-proxy nodes: one origin fill per block fleet-wide, peer hits, a node
killed or cut off or drained under load without a failed read, version-atomic answers under
overwrites, and gossip that outsiders cannot change."""
import concurrent.futures
import contextlib
import os
import random
import shutil
import signal
import subprocess
import socket
import threading
import time

import pytest

from conftest import BUCKET, free_port
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
    received = relay.received()
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
    # A response counts the origin bytes its own node's fills fetched for it, once: one served
    # by the owner (hit-peer, fill-peer) counts none (the owner's fill is in the owner's log
    # and metrics), one that waited on another read's fill counts none. Never 64 times over.
    claimed = {r.headers["x-floe-cache"]: 0 for r in results}
    for r in results:
        claimed[r.headers["x-floe-cache"]] += int(r.headers["x-floe-origin-bytes"])
    assert sum(claimed.values()) <= len(data), claimed
    assert claimed.get("hit-peer", 0) == claimed.get("fill-peer", 0) == claimed.get("wait", 0) == 0, claimed
    assert 0 <= relay.received() - received - len(data) < 16384  # one fetch: headers (and HEADs) only


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


def test_gossip_without_the_secret_changes_no_view(fleet, minio, tmp_path_factory):
    nodes, relay, _ = fleet
    rejected = [nd.metric("floe_fleet_gossip_rejected_total") for nd in nodes]
    # An outsider: a real node with the wrong secret, seeded with the fleet's addresses.
    d = tmp_path_factory.mktemp("intruder")
    intruder = Node(d, "intruder", relay.port, free_port(),
                    [nd.peer_port for nd in nodes], secret="not-the-fleet-secret-000")
    try:
        # Junk datagrams too.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for nd in nodes:
                s.sendto(os.urandom(200), ("127.0.0.1", nd.peer_port))
        wait_until("the fleet to drop the outsider's datagrams", lambda: all(
            nd.metric("floe_fleet_gossip_rejected_total") >= r + 2 for nd, r in zip(nodes, rejected)))
        for nd in nodes:
            assert set(nd.view()) == {"floe-0", "floe-1", "floe-2"}
        assert set(intruder.view()) == {"intruder"}
    finally:
        intruder.stop()


def test_an_overwritten_key_never_yields_a_mixed_version_body(fleet, direct):
    nodes, _, _ = fleet
    key = "fleet/mutable/state.bin"
    size = 5 * MiB
    direct.put_object(Bucket=BUCKET, Key=key, Body=bytes([0]) * size)
    stop = threading.Event()

    def writer():
        v = 1
        while not stop.is_set():
            direct.put_object(Bucket=BUCKET, Key=key, Body=bytes([v % 251]) * size)
            v += 1

    def reader(i):
        mixed = ok = 0
        for _ in range(25):
            try:
                r = get(nodes[i % 3].port, key)
            except Exception:  # noqa: BLE001
                continue  # a response cut short is allowed; a mixed one is not
            if r.status != 200 or len(r.data) != size:
                continue
            if r.data.count(r.data[:1]) == size:
                ok += 1
            else:
                mixed += 1
        return mixed, ok

    w = threading.Thread(target=writer)
    w.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(6) as ex:
            results = list(ex.map(reader, range(6)))
    finally:
        stop.set()
        w.join()
    print("overwrite readers (mixed, ok):", results)
    assert sum(m for m, _ in results) == 0
    # A rewritable object has one owner for all its blocks: one origin GET per version read,
    # so reads succeed while it is rewritten (a multi-owner read would fail between GETs).
    assert sum(o for _, o in results) >= 140


def test_a_node_killed_under_load_fails_no_read_and_leaves_the_view_within_three_seconds(
        fleet, direct, minio, tmp_path_factory):
    nodes, relay, d = fleet
    keys = [f"fleet/kill/data/0000{i}-0-c.parquet" for i in range(8)]
    blobs = {k: os.urandom(3 * MiB + i) for i, k in enumerate(keys)}
    for k, b in blobs.items():
        direct.put_object(Bucket=BUCKET, Key=k, Body=b)
    victim, survivors = nodes[2], nodes[:2]
    with steady_reads([survivors], keys, blobs, 8) as (failures, reads):
        wait_until("steady load", lambda: reads[0] >= 40)
        victim.kill()
        killed = time.monotonic()
        wait_until("the survivors to drop the dead node",
                   lambda: all(set(s.view()) == {"floe-0", "floe-1"} for s in survivors), timeout=10)
        gone = time.monotonic() - killed
        at_kill = reads[0]
        wait_until("load after the kill", lambda: reads[0] >= at_kill + 40)
    assert failures == []
    print(f"dead node left the view after {gone:.2f} s; {reads[0]} reads")
    assert gone <= 3.0, f"the dead node left the view after {gone:.2f} s"
    # Restart it for the tests after this one (same id, new generation).
    nodes[2] = Node(d, victim.name, relay.port, victim.peer_port,
                    [s.peer_port for s in survivors])
    wait_until("the restarted node to rejoin",
               lambda: all(set(nd.view()) == {"floe-0", "floe-1", "floe-2"} for nd in nodes))


def _steady_reads(targets, keys, blobs, stop, failures, reads, seed):
    """Reads random keys through random nodes of `targets[0]` (which the test may swap, as a
    load balancer moves clients) until `stop`."""
    rnd = random.Random(seed)
    while not stop.is_set():
        k = rnd.choice(keys)
        nd = rnd.choice(targets[0])
        try:
            r = get(nd.port, k)
            if r.status != 200 or r.data != blobs[k]:
                failures.append((nd.name, k, r.status))
        except Exception as e:  # noqa: BLE001
            failures.append((nd.name, k, repr(e)))
        reads[0] += 1


@contextlib.contextmanager
def steady_reads(targets, keys, blobs, clients=6):
    """`clients` threads of _steady_reads while the block runs; yields (failures, reads)."""
    stop = threading.Event()
    failures, reads = [], [0]
    threads = [threading.Thread(target=_steady_reads, args=(targets, keys, blobs, stop, failures, reads, i))
               for i in range(clients)]
    for t in threads:
        t.start()
    try:
        yield failures, reads
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_a_drain_under_load_fails_no_read_and_causes_no_cold_miss(fleet, direct):
    nodes, relay, _ = fleet
    leaving, staying = nodes[2], nodes[:2]
    keys = [f"fleet/drain/data/0000{i}-0-d.parquet" for i in range(8)]
    blobs = {k: os.urandom(4 * MiB + 1000 * i) for i, k in enumerate(keys)}
    for k, b in blobs.items():
        direct.put_object(Bucket=BUCKET, Key=k, Body=b)
    # Clients read through the leaving node; the blocks it owns are nowhere else.
    targets = [[leaving]]
    with steady_reads(targets, keys, blobs) as (failures, reads):
        wait_until("steady load", lambda: reads[0] >= 60)
        gets = relay.count("GET")
        nlines = len(relay.lines)
        leaving.admin("POST", "/fleet/drain")
        wait_until("the fleet to see the drain",
                   lambda: all(nd.view().get(leaving.name) == "draining" for nd in staying))
        targets[0] = staying  # the load balancer moves the draining node's clients
        at_drain = reads[0]
        wait_until("load after the drain", lambda: reads[0] >= at_drain + 60)
    assert failures == []
    assert relay.count("GET") - gets == 0, f"the drain caused origin fills: {relay.lines[nlines:]}"
    donated = leaving.metric('floe_peer_served_total{kind="blocks",result="hit"}')
    assert donated > 0


def test_a_joining_node_takes_its_share_warm_from_the_previous_owners(fleet, direct):
    nodes, relay, d = fleet
    active = [nd for nd in nodes if nd.view().get(nd.name) == "active"]
    # Sized to fit every node's stores (a footer's blocks go to the smaller metadata store).
    keys = [f"fleet/join/data/000{i:02d}-0-e.parquet" for i in range(12)]
    blobs = {k: os.urandom(6 * MiB + 100 * i) for i, k in enumerate(keys)}
    for k, b in blobs.items():
        direct.put_object(Bucket=BUCKET, Key=k, Body=b)
    for k in keys:  # warm through one node: each block is now at its owner
        assert get(active[0].port, k).data == blobs[k]
    joiner = Node(d, "floe-3", relay.port, free_port(), [nd.peer_port for nd in nodes])
    try:
        names = {nd.name for nd in nodes} | {"floe-3"}
        wait_until("the fleet to see the joiner", lambda: all(
            set(nd.view()) == names for nd in nodes + [joiner]))
        gets = relay.count("GET")
        nlines = len(relay.lines)
        for nd in active[1:] + [joiner]:
            for k in keys:
                r = get(nd.port, k)
                assert r.status == 200 and r.data == blobs[k]
        # The joiner owns about a quarter (a third of the active nodes' blocks when one of them
        # drains) and pulled each from its previous owner: no block was fetched twice.
        assert relay.count("GET") - gets == 0, relay.lines[nlines:]
        pulled = joiner.metric('floe_peer_asks_total{kind="blocks",result="ok"}')
        assert pulled > 0
        # Gossip may show the joiner its fleet a member at a time: it takes warmth from every
        # member it met in its warming window, not only those of its first view.
        wait_until("the joiner to pull from every member", lambda: {nd.name for nd in active} <= set(
            joiner.admin("GET", "/fleet")["handover"]["givers"]))
    finally:
        joiner.stop()


def _ip(*args, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True)


def _clear_netns_leftovers():
    """Removes what a run that died inside the fixture left behind (its namespace, veth,
    loopback address and blackhole route survive the process): setting up over them fails."""
    run = lambda *cmd: subprocess.run(["ip", *cmd], capture_output=True, text=True)
    for line in run("netns", "list").stdout.splitlines():
        if line.startswith("floecut"):
            run("netns", "del", line.split()[0])
    for line in run("-o", "link", "show").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith("fca"):
            run("link", "del", name)
    run("addr", "del", "10.231.1.1/32", "dev", "lo")
    run("route", "del", "blackhole", "10.231.0.3/32")


@pytest.fixture
def netns():
    """A network namespace joined to the host by a veth pair: the host end 10.231.0.1, the
    namespace end 10.231.0.2 (S3 and admin) and 10.231.0.3 (peer address); host peers on
    10.231.1.1. Needs root and iproute2 (the CI machine has both)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for a network namespace")
    _clear_netns_leftovers()
    ns, a, b = f"floecut{os.getpid()}", f"fca{os.getpid() % 100000}", f"fcb{os.getpid() % 100000}"
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
        _ip("link", "set", b, "netns", ns)
        _ip("addr", "add", "10.231.0.1/24", "dev", a)
        _ip("link", "set", a, "up")
        _ip("addr", "add", "10.231.1.1/32", "dev", "lo")
        for cmd in (["addr", "add", "10.231.0.2/24", "dev", b], ["addr", "add", "10.231.0.3/24", "dev", b],
                    ["link", "set", b, "up"], ["link", "set", "lo", "up"],
                    ["route", "add", "default", "via", "10.231.0.1"]):
            _ip(*cmd, ns=ns)
        yield ns
    finally:
        for cmd in (["route", "del", "blackhole", "10.231.0.3/32"], ["addr", "del", "10.231.1.1/32", "dev", "lo"],
                    ["link", "del", a], ["netns", "del", ns]):
            subprocess.run(["ip", *cmd], capture_output=True)


def test_a_node_cut_off_from_its_peers_still_serves_right_bytes(minio, direct, netns, tmp_path):
    relay = Relay(minio.port, bind="0.0.0.0")
    peers = [free_port() for _ in range(3)]
    seeds = [f"10.231.1.1:{peers[0]}", f"10.231.1.1:{peers[1]}", f"10.231.0.3:{peers[2]}"]
    host_nodes = [Node(tmp_path, f"cut-{i}", relay.port, peers[i], [s for j, s in enumerate(seeds) if j != i],
                       peer_host="10.231.1.1") for i in range(2)]
    cut = Node(tmp_path, "cut-2", relay.port, peers[2], seeds[:2], host="10.231.0.2", peer_host="10.231.0.3",
               origin_host="10.231.0.1", netns=netns)
    nodes = host_nodes + [cut]
    try:
        names = {nd.name for nd in nodes}
        wait_until("the three nodes to see each other", lambda: all(set(nd.view()) == names for nd in nodes))
        keys = [f"fleet/cut/data/0000{i}-0-f.parquet" for i in range(6)]
        blobs = {k: os.urandom(5 * MiB + 10 * i) for i, k in enumerate(keys)}
        for k, b in blobs.items():
            direct.put_object(Bucket=BUCKET, Key=k, Body=b)
        asked = cut.metric("floe_peer_asks_total")
        for k in keys[:3]:  # before the cut the node asks its peers
            assert get(cut.port, k, host=cut.host).data == blobs[k]
        assert cut.metric("floe_peer_asks_total") > asked
        # The cut: no packet between the namespace and the host peers' addresses, either way.
        _ip("route", "add", "blackhole", "10.231.1.0/24", ns=netns)
        _ip("route", "add", "blackhole", "10.231.0.3/32")
        gets = relay.count("GET")
        for k in keys:
            r = get(cut.port, k, host=cut.host)
            assert r.status == 200 and r.data == blobs[k], k
        for k in keys:
            r = get(host_nodes[0].port, k)
            assert r.status == 200 and r.data == blobs[k], k
        assert relay.count("GET") > gets  # the cut node filled from the origin itself
        wait_until("the cut node to drop its peers", lambda: set(cut.view()) == {"cut-2"})
        wait_until("the peers to drop the cut node",
                   lambda: all(set(nd.view()) == {"cut-0", "cut-1"} for nd in host_nodes))
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_sigterm_drains_the_node_before_it_exits(fleet):
    nodes, relay, d = fleet
    leaving = Node(d, "floe-t", relay.port, free_port(), [nd.peer_port for nd in nodes], grace=3)
    try:
        wait_until("the fleet to see the new node", lambda: all(
            nd.view().get("floe-t") == "active" for nd in nodes[:2]))
        leaving.proc.proc.send_signal(signal.SIGTERM)
        # Within the grace period: still alive, and gossiping that it left ownership.
        wait_until("the fleet to see it draining", lambda: all(
            nd.view().get("floe-t") == "draining" for nd in nodes[:2]), timeout=2.5)
        assert leaving.proc.proc.poll() is None
        assert leaving.proc.proc.wait(15) == 0
    finally:
        leaving.stop()


def test_a_drained_node_hands_its_blocks_over_before_it_exits(fleet, direct):
    nodes, relay, d = fleet
    staying = [nd for nd in nodes if nd.view().get(nd.name) == "active"]
    giver = Node(d, "floe-h", relay.port, free_port(), [nd.peer_port for nd in nodes])
    try:
        wait_until("the fleet to see the new node", lambda: all(
            nd.view().get("floe-h") == "active" for nd in staying))
        keys = [f"fleet/handover/data/0000{i}-0-g.parquet" for i in range(8)]
        blobs = {k: os.urandom(6 * MiB + 100 * i) for i, k in enumerate(keys)}
        for k, b in blobs.items():
            direct.put_object(Bucket=BUCKET, Key=k, Body=b)
        for k in keys:  # only through the giver: the blocks it owns are nowhere else
            assert get(giver.port, k).data == blobs[k]
        giver.admin("POST", "/fleet/drain")
        # Finished hand-overs are named by giver (others, e.g. of the joiner stopped before,
        # may finish meanwhile).
        wait_until("the new owners to take the giver's blocks over", lambda: all(
            "floe-h" in nd.admin("GET", "/fleet")["handover"]["givers"] for nd in staying))
        pulled = sum(nd.admin("GET", "/fleet")["handover"]["blocks"] for nd in staying)
        assert pulled > 0
        giver.kill()  # it exits: what it owned must be with its new owners already
        gets, nlines = relay.count("GET"), len(relay.lines)
        for nd in staying:
            for k in keys:
                r = get(nd.port, k)
                assert r.status == 200 and r.data == blobs[k], (nd.name, k)
        assert relay.count("GET") - gets == 0, (
            relay.lines[nlines:], [nd.admin("GET", "/fleet")["handover"] for nd in staying])
    finally:
        giver.stop()


def test_the_peer_api_over_tls(minio, direct, tmp_path):
    from fleet import start_fleet
    from tls_relay import make_ca
    ca, cert, key = make_ca(tmp_path)
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=2, extra_fleet=f"  tls: {{cert: {cert}, key: {key}, ca: {ca}}}")
    try:
        keys = [f"fleet/tls/data/0000{i}-0-h.parquet" for i in range(6)]
        blobs = {k: os.urandom(MiB + i) for i, k in enumerate(keys)}
        for k, b in blobs.items():
            direct.put_object(Bucket=BUCKET, Key=k, Body=b)
        labels = []
        for nd in nodes:
            for k in keys:
                r = get(nd.port, k)
                assert r.status == 200 and r.data == blobs[k]
                labels.append(r.headers["x-floe-cache"])
        assert {"hit-peer", "fill-peer"} & set(labels), labels
        assert origin_gets(relay, "fleet/tls/") == len(keys)  # one fill per block, fleet-wide
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


def test_a_busy_owner_hands_fills_to_the_next_choice(minio, direct, tmp_path):
    from fleet import start_fleet
    relay = Relay(minio.port)
    relay.delay = 0.2  # slow origin: the owner's fills pile up
    nodes = start_fleet(tmp_path, relay.port, n=2, extra_fleet="  max_owner_fills: 1")
    try:
        keys = [f"fleet/busy/data/000{i:02d}-0-i.parquet" for i in range(16)]
        blobs = {k: os.urandom(MiB + i) for i, k in enumerate(keys)}
        for k, b in blobs.items():
            direct.put_object(Bucket=BUCKET, Key=k, Body=b)
        barrier = threading.Barrier(len(keys))

        def one(k):
            barrier.wait()
            return get(nodes[0].port, k)

        with concurrent.futures.ThreadPoolExecutor(len(keys)) as ex:
            results = list(ex.map(one, keys))
        assert all(r.status == 200 and r.data == blobs[k] for r, k in zip(results, keys))
        busy = nodes[0].metric('floe_peer_asks_total{kind="blocks",result="busy"}')
        refused = nodes[1].metric('floe_peer_served_total{kind="blocks",result="busy"}')
        assert busy > 0 and refused > 0, (busy, refused)
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()


FRAME_CONTEXT = "floe fleet peer bodies v2"


def peer_auth(method, path, length=0, secs=None):
    """The v2 peer API's request signature: HMAC-SHA256 over the head and the body's length.
    Returns the header and the nonce the body's frames are bound to."""
    import hashlib
    import hmac
    from fleet import SECRET
    secs = int(time.time()) if secs is None else secs
    nonce = os.urandom(16).hex()
    msg = f"{secs}\n{nonce}\n{method}\n{path}\nlen:{length}"
    mac = hmac.new(SECRET.encode(), msg.encode(), hashlib.sha256).hexdigest()
    return f"{secs}:{nonce}:{mac}", int(nonce, 16)


def frame_key():
    import blake3
    from fleet import SECRET
    return blake3.blake3(SECRET.encode(), derive_key_context=FRAME_CONTEXT).digest()


def sealed(body, nonce, direction=b"q"):
    """A body as the peer API frames it: len | data | BLAKE3-keyed tag, then an end frame."""
    import blake3
    key, out, seq = frame_key(), b"", 0
    for data in ([body] if body else []) + [b""]:
        head = len(data).to_bytes(4, "big")
        tag = blake3.blake3(nonce.to_bytes(16, "big") + direction + seq.to_bytes(8, "big") + head + data, key=key).digest()
        out += head + data + tag
        seq += 1
    return out


def opened(wire, nonce):
    """The data of an answer's framed body; raises when a tag fails."""
    import blake3
    key, out, seq, at = frame_key(), b"", 0, 0
    while True:
        n = int.from_bytes(wire[at:at + 4], "big")
        data, tag = wire[at + 4:at + 4 + n], wire[at + 4 + n:at + 36 + n]
        want = blake3.blake3(nonce.to_bytes(16, "big") + b"r" + seq.to_bytes(8, "big") + wire[at:at + 4] + data, key=key).digest()
        assert tag == want, "an answer frame failed its check"
        at, seq = at + 36 + n, seq + 1
        if n == 0:
            assert at == len(wire), "bytes after the end frame"
            return out
        out += data


def reply_holds(r, nonce):
    import blake3
    node, note = r.headers.get("x-floe-node", ""), r.headers.get("x-floe-peer-note", "")
    msg = nonce.to_bytes(16, "big") + b"h" + r.status.to_bytes(2, "big")
    for field in (node.encode(), note.encode()):
        msg += len(field).to_bytes(8, "big") + field
    msg += int(r.headers["x-floe-body-len"]).to_bytes(8, "big")
    return blake3.blake3(msg, key=frame_key()).hexdigest() == r.headers.get("x-floe-fleet-reply")


def test_a_captured_peer_request_cannot_be_replayed_or_given_another_body(fleet):
    """Peer requests are signed over a nonce and the body's length, and every body frame is
    tagged under that nonce: a capture replays for nothing, a signed call cannot carry another
    body (nor a body captured from another call), and answers carry a tag of their own."""
    import urllib3
    nodes, _, _ = fleet
    http = urllib3.PoolManager(retries=False)
    peer = f"http://127.0.0.1:{nodes[0].peer_port}"
    path = f"/v2/x/blocks/head?bucket={BUCKET}&key=fleet/replay/none.parquet"

    def send(method, path, auth, nonce_body, length):
        headers = {"x-floe-fleet-auth": auth, "x-floe-body-len": str(length)}
        return http.request(method, peer + path, body=nonce_body, headers=headers)

    auth, nonce = peer_auth("GET", path)
    first = send("GET", path, auth, sealed(b"", nonce), 0)
    assert first.status == 404, first.data  # authenticated: the key does not exist
    assert reply_holds(first, nonce), dict(first.headers)
    assert opened(first.data, nonce) == b"no such object"
    again = send("GET", path, auth, sealed(b"", nonce), 0)
    assert again.status == 403, "a replayed capture was accepted"
    old = http.request("GET", peer + f"/v1/head?bucket={BUCKET}&key=k")
    assert old.status == 503 and "x-floe-fleet-reply" not in old.headers, "an earlier release's ask"

    call = "/v2/x/blocks/forget"
    body = b'{"bucket":"%s","keys":["fleet/replay/a.parquet"]}' % BUCKET.encode()
    auth, nonce = peer_auth("POST", call, len(body))
    other = body.replace(b"a.parquet", b"b.parquet")
    wire = sealed(body, nonce)
    r = send("POST", call, auth, wire[:4] + other + wire[4 + len(body):], len(body))
    assert r.status == 400, "a signed call took another body"
    # A body sealed for another (captured) call, under a fresh signature: its frames fail.
    captured_nonce = nonce
    auth, nonce = peer_auth("POST", call, len(body))
    r = send("POST", call, auth, sealed(body, captured_nonce), len(body))
    assert r.status == 400, "a body captured from another call was accepted"
    auth, nonce = peer_auth("POST", call, len(body))
    r = send("POST", call, auth, sealed(body, nonce), len(body))
    assert r.status == 204, r.data
    assert reply_holds(r, nonce)
