#!/usr/bin/env python3
"""A worker the scheduler tests deploy: reads its CloudEvent from stdin and appends one JSON line
to $OUT when it starts and one when it ends (each a single short append, so lines never mix).
SLEEP seconds of work between; FAIL_UNTIL=N exits 3 on attempts <= N; IGNORE_TERM=1 ignores
SIGTERM (a worker that does not stop when asked)."""
import json
import os
import signal
import sys
import time

if os.environ.get("IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

event = json.load(sys.stdin)
env = {k: v for k, v in os.environ.items() if k.startswith(("FLOE_", "CE_", "TRACEPARENT"))}


def record(kind):
    line = json.dumps({"kind": kind, "t": time.time(), "pid": os.getpid(), "event": event, "env": env})
    with open(os.environ["OUT"], "a") as f:
        f.write(line + "\n")


record("start")
time.sleep(float(os.environ.get("SLEEP", "0")))
if int(env["FLOE_ATTEMPT"]) <= int(os.environ.get("FAIL_UNTIL", "0")):
    print("failing on purpose", file=sys.stderr)
    sys.exit(3)
print(f"done with {event['id']}")
record("end")
