"""A randomized run of PUTs, overwrites and DELETEs of a small key set through a four-node
write-back fleet (k=2 m=1 w=3) while nodes are killed and restarted, paused, the origin goes
away, refuses writes or stops answering, and clients die mid-body. Each key is written by one
worker at a time, so its history is a sequence: every read must return the last acknowledged
state of its key (or the outcome of a request that failed without an answer, which may or may
not have taken effect), never an older one and never a deleted object after its 204; after
healing the origin must hold exactly that state. Two runs: origin faults only (outages,
refused writes, silent and slow links), and with nodes killed and paused too; both must hold.
FLOE_CHAOS_SEED replays a run, FLOE_CHAOS_OPS sets its length (1,200: over 1,000 PUTs and
DELETEs); the seed and counts are printed."""
import concurrent.futures
import os
import random
import signal
import threading
import time

import pytest

from conftest import BUCKET, s3_client
from fleet import Node, start_fleet, wait_until
from relay import Relay
from test_blocks import get
from test_sigv4 import send_slowly, sign
from test_writeback import WB, at_origin

OPS = int(os.environ.get("FLOE_CHAOS_OPS", "1200"))
KEYS = 48
WORKERS = 6
GONE = None  # a deleted key's state
# Faults of the origin's side, and of nodes that go away and come back.
ORIGIN_FAULTS = ["outage", "refuse", "silence", "slow"]
NODE_FAULTS = ["kill", "pause"]


class History:
    """What a key may read as: its last acknowledged state, plus the outcomes of requests
    since that failed without a clear answer (they may have taken effect)."""

    def __init__(self):
        self.states = [GONE]
        self.log = []  # (op, node, outcome, mode): what a violation prints
        self.seen = [GONE]  # every state a request tried to leave, in order

    def which(self, state):
        """Which write a read returned (its index in `seen`), for a violation's report."""
        return [i for i, s in enumerate(self.seen) if s == state] or "never written"

    def acked(self, state):
        self.states = [state]
        self.seen.append(state)

    def unsure(self, state):
        self.states.append(state)
        self.seen.append(state)

    def allows(self, state):
        return state in self.states


def settled_get(port, key):
    """A read once the faults are over: a 503 (the origin breaker of a node still cooling down
    after the run's outages) is retried as a client would, a few times; what it then answers
    is the node's answer."""
    got = get(port, key)
    for _ in range(20):
        if got.status != 503:
            break
        threading.Event().wait(0.5)  # a client's retry backoff, not a synchronisation
        got = get(port, key)
    return got


@pytest.mark.parametrize("faults_drawn", [ORIGIN_FAULTS, ORIGIN_FAULTS + NODE_FAULTS], ids=["origin", "origin-and-nodes"])
def test_random_puts_and_deletes_under_combined_faults_lose_nothing_and_read_no_past(minio, direct, tmp_path, faults_drawn):
    seed = int(os.environ.get("FLOE_CHAOS_SEED") or random.randrange(1 << 30))
    print(f"chaos run seed {seed} faults {faults_drawn}")
    relay = Relay(minio.port)
    kw = dict(WB, extra_origin="    read_timeout_ms: 2000")
    nodes = start_fleet(tmp_path, relay.port, n=4, **kw)
    ports = {nd.name: nd.peer_port for nd in nodes}
    lock = threading.Lock()
    run = "-".join(faults_drawn)  # each run its own keys: the origin outlives a run
    keys = [f"wb/chaos/{run}/{i:03d}.parquet" for i in range(KEYS)]
    history = {k: History() for k in keys}
    counts = dict(ops=0, puts=0, deletes=0, cut=0, acked=0, failed=0, reads=0, read_errors=0,
                  stale=0, kills=0, pauses=0, outages=0, refusals=0, silences=0, slow=0)
    stale = []
    stop = threading.Event()

    def live():
        with lock:
            return [nd for nd in nodes if nd.proc.proc.poll() is None]

    def restart(i):
        name = nodes[i].name
        seeds = [p for n, p in ports.items() if n != name]
        nodes[i] = Node(tmp_path, name, relay.port, ports[name], seeds, **kw)

    events = []  # (time, fault, node drawn): what a violation is read against

    def faults():
        frng = random.Random(seed + 1)
        while not stop.wait(frng.uniform(0.5, 1.5)):
            kind = frng.choice(faults_drawn)
            i = frng.randrange(len(nodes))
            events.append((round(time.time(), 3), kind, nodes[i].name))
            if kind == "kill":
                with lock:
                    nodes[i].kill()
                counts["kills"] += 1
                stop.wait(frng.uniform(0.5, 3.0))  # down longer than a write takes
                with lock:
                    restart(i)
            elif kind == "pause":
                nodes[i].proc.proc.send_signal(signal.SIGSTOP)
                counts["pauses"] += 1
                stop.wait(frng.uniform(0.2, 1.5))
                nodes[i].proc.proc.send_signal(signal.SIGCONT)
            elif kind == "outage":
                relay.down()
                counts["outages"] += 1
                stop.wait(frng.uniform(0.5, 2.0))
                relay.up()
            elif kind == "refuse":
                relay.refuse = {"PUT", "POST", "DELETE"}
                counts["refusals"] += 1
                stop.wait(frng.uniform(0.5, 2.0))
                relay.refuse = set()
            elif kind == "slow":
                relay.delay = frng.uniform(0.1, 0.6)  # every origin request waits that long
                counts["slow"] += 1
                stop.wait(frng.uniform(1.0, 3.0))
                relay.delay = 0
            else:
                relay.silent = f"PUT /{BUCKET}/wb/chaos/"  # taken, never answered nor done
                counts["silences"] += 1
                stop.wait(frng.uniform(1.0, 3.0))
                relay.silent = None

    def check_read(key, prng):
        reader = prng.choice(live() or nodes)
        try:
            got = get(reader.port, key)
        except Exception:
            with lock:
                counts["read_errors"] += 1
            return
        state = got.data if got.status == 200 else (GONE if got.status == 404 else "error")
        with lock:
            counts["reads"] += 1
            if state == "error":
                counts["read_errors"] += 1
            elif not history[key].allows(state):
                counts["stale"] += 1
                stale.append((key, reader.name, round(time.time(), 3), got.status, got.headers.get("x-floe-cache"),
                              got.headers.get("x-floe-node"), history[key].log[-3:],
                              history[key].which(state), len(history[key].seen)))

    def op(key, prng):
        nd = prng.choice(live() or nodes)
        kind = prng.choices(["put", "delete", "cut"], weights=[7, 2, 1])[0]
        s3 = s3_client(nd.port, read_timeout=30, connect_timeout=2)
        if kind == "put":
            body = prng.randbytes(prng.choice([0, 700, 65536, 200_000]))
            mode = None
            try:
                answer = s3.put_object(Bucket=BUCKET, Key=key, Body=body)["ResponseMetadata"]
                ok = answer["HTTPStatusCode"] == 200
                mode = answer["HTTPHeaders"].get("x-floe-writeback")
            except Exception as e:
                ok, mode = False, type(e).__name__
            state = body
        elif kind == "delete":
            try:
                ok = s3.delete_object(Bucket=BUCKET, Key=key)["ResponseMetadata"]["HTTPStatusCode"] == 204
                mode = None
            except Exception as e:
                ok, mode = False, type(e).__name__
            state = GONE
        else:  # a client that dies mid-body: nothing may change
            body = prng.randbytes(300_000)
            url = f"http://127.0.0.1:{nd.port}/{BUCKET}/{key}"
            req = sign("PUT", url, headers={"Content-Length": str(len(body))}, payload="UNSIGNED-PAYLOAD")
            try:
                send_slowly(req, body, cuts=[100_000, 200_000], pause=0.05, stop_at=150_000)
            except OSError:
                pass
            ok, state, mode = None, None, "cut"
        with lock:
            history[key].log.append((kind, nd.name, ok, mode, round(time.time(), 3)))
            counts["ops"] += 1
            counts[{"put": "puts", "delete": "deletes", "cut": "cut"}[kind]] += 1
            if ok:
                counts["acked"] += 1
                history[key].acked(state)
            elif ok is False:
                counts["failed"] += 1
                history[key].unsure(state)  # it may have taken effect before failing
        check_read(key, prng)

    def worker(w):
        prng = random.Random(seed * 7919 + w)
        mine = keys[w::WORKERS]
        for _ in range(OPS // WORKERS):
            op(prng.choice(mine), prng)

    chaos = threading.Thread(target=faults, daemon=True)
    chaos.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as ex:
            list(ex.map(worker, range(WORKERS)))
        stop.set()
        chaos.join(15)
        relay.up()
        relay.refuse = set()
        relay.silent = None
        relay.delay = 0
        for i, nd in enumerate(nodes):
            nd.proc.proc.send_signal(signal.SIGCONT)
            if nd.proc.proc.poll() is not None:
                restart(i)
        wait_until("everything staged propagated", lambda: all(
            nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in nodes), timeout=180)
        lost = [k for k in keys if not history[k].allows(at_origin(direct, k))]
        print(f"chaos run seed {seed}: {counts}; lost {len(lost)}: {lost[:10]}; stale: {stale[:10]}")
        for k in lost[:3]:  # what the origin holds, which write it was, and the key's ops
            print(f"lost {k}: origin has write {history[k].which(at_origin(direct, k))} of"
                  f" {len(history[k].seen)}; allowed {[history[k].which(x) for x in history[k].states]};"
                  f" ops {history[k].log}")
        assert not lost, f"keys whose origin state is no acknowledged one: {lost}"
        assert counts["acked"] > OPS // 3, counts
        for k in keys:  # and, settled, every node reads what the origin holds
            for nd in nodes:
                got = settled_get(nd.port, k)
                state = got.data if got.status == 200 else GONE
                if state != at_origin(direct, k):
                    counts["stale"] += 1
                    stale.append((k, nd.name, got.status, got.headers.get("x-floe-cache"), "settled",
                                  got.data[:200] if got.status >= 500 else None))
        if counts["stale"]:  # what a violation is read against, with the nodes' logs
            (tmp_path / "faults.txt").write_text("\n".join(map(str, events)) + "\n")
        assert counts["stale"] == 0, stale[:20]
    finally:
        stop.set()
        for nd in nodes:
            nd.proc.proc.send_signal(signal.SIGCONT)
            nd.stop()
        relay.down()
