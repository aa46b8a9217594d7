"""A randomized fault run over write-back: 1,000 PUTs through a four-node fleet while nodes are
killed and restarted, paused (cut off from everyone), fragments corrupted and the origin goes
away. Every acknowledged write must reach the origin byte-identical, and no read may return
wrong bytes. FLOE_FAULT_SEED replays a run; the seed and counts are printed."""
import concurrent.futures
import os
import random
import signal
import threading
import time
from pathlib import Path

from conftest import BUCKET, s3_client
from fleet import Node, start_fleet
from relay import Relay
from test_blocks import get
from test_writeback import WB, wait_all_at_origin

PUTS = 1000


def test_a_randomized_fault_run_loses_no_acknowledged_write_and_reads_no_wrong_byte(minio, direct, tmp_path):
    seed = int(os.environ.get("FLOE_FAULT_SEED") or random.randrange(1 << 30))
    print(f"fault run seed {seed}")
    rng = random.Random(seed)
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=4, **WB)
    ports = {nd.name: nd.peer_port for nd in nodes}
    lock = threading.Lock()
    acked, counts = {}, dict(puts=0, acked=0, refused=0, reads=0, read_errors=0, wrong_reads=0,
                            kills=0, pauses=0, corruptions=0, outages=0)
    corrupted_ids = set()
    stop = threading.Event()

    def live():
        with lock:
            return [nd for nd in nodes if nd.proc.proc.poll() is None]

    def restart(i):
        name = nodes[i].name
        seeds = [p for n, p in ports.items() if n != name]
        nodes[i] = Node(tmp_path, name, relay.port, ports[name], seeds, **WB)

    def faults():
        frng = random.Random(seed + 1)
        while not stop.wait(frng.uniform(0.3, 1.0)):
            kind = frng.choice(["kill", "pause", "corrupt", "outage"])
            i = frng.randrange(len(nodes))
            if kind == "kill":
                with lock:
                    nodes[i].kill()
                counts["kills"] += 1
                stop.wait(frng.uniform(0.2, 1.5))
                with lock:
                    restart(i)
            elif kind == "pause":
                nodes[i].proc.proc.send_signal(signal.SIGSTOP)
                counts["pauses"] += 1
                stop.wait(frng.uniform(0.2, 1.5))
                nodes[i].proc.proc.send_signal(signal.SIGCONT)
            elif kind == "corrupt":
                # At most one corrupt fragment per write: what a scrubber would mend before a
                # second one.
                frags = [f for f in Path(tmp_path).glob("floe-*/wb/fragments/*.[0-9]")
                         if f.name.split(".")[0] not in corrupted_ids]
                if frags:
                    f = frng.choice(frags)
                    try:
                        raw = bytearray(f.read_bytes())
                        if len(raw) > 70:
                            raw[frng.randrange(64, len(raw))] ^= 0xFF
                            f.write_bytes(bytes(raw))
                            corrupted_ids.add(f.name.split(".")[0])
                            counts["corruptions"] += 1
                    except OSError:
                        pass  # freed meanwhile
            else:
                relay.down()
                counts["outages"] += 1
                stop.wait(frng.uniform(0.5, 2.0))
                relay.up()

    def one(n):
        prng = random.Random(seed * 7919 + n)
        key = f"wb/fault/{n:05d}.parquet"
        body = prng.randbytes(prng.choice([0, 1, 700, 65536, 100_000, 300_000]))
        nd = prng.choice(live() or nodes)
        try:
            s3 = s3_client(nd.port, read_timeout=30, connect_timeout=2)
            r = s3.put_object(Bucket=BUCKET, Key=key, Body=body)
            ok = r["ResponseMetadata"]["HTTPStatusCode"] == 200
        except Exception:
            ok = False
        with lock:
            counts["puts"] += 1
            if ok:
                counts["acked"] += 1
                acked[key] = body
            else:
                counts["refused"] += 1
        if ok:
            reader = prng.choice(live() or nodes)
            try:
                got = get(reader.port, key)
                with lock:
                    counts["reads"] += 1
                    if got.status == 200 and got.data != body:
                        counts["wrong_reads"] += 1
                    elif got.status != 200:
                        counts["read_errors"] += 1
            except Exception:
                with lock:
                    counts["read_errors"] += 1

    chaos = threading.Thread(target=faults, daemon=True)
    chaos.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(6) as ex:
            list(ex.map(one, range(PUTS)))
        stop.set()
        chaos.join(10)
        relay.up()
        for i, nd in enumerate(nodes):
            nd.proc.proc.send_signal(signal.SIGCONT)
            if nd.proc.proc.poll() is not None:
                restart(i)
        confirmed = set()
        try:
            wait_all_at_origin(direct, acked, confirmed)
        except AssertionError:
            lost = sorted(set(acked) - confirmed)
            print(f"fault run seed {seed}: {counts}; not at the origin: {lost[:20]}")
            raise
        print(f"fault run seed {seed}: {counts}")
        assert counts["wrong_reads"] == 0
        assert counts["acked"] > PUTS // 2, counts
    finally:
        stop.set()
        for nd in nodes:
            nd.proc.proc.send_signal(signal.SIGCONT)
            nd.stop()
        relay.down()
