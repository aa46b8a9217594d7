"""The CloudEvents scheduler in floe-control, on SQLite and on a real PostgreSQL server (Debian's
package, started by tests/postgres.sh): cron catch-up, crash recovery under lease generations,
idempotent ingest, webhooks, the CLI, and two instances sharing one PostgreSQL queue.

Workers are tests/sched_worker.py: each appends a JSON line when it starts and one when it ends.
"""
import hashlib
import hmac
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import complete_lines, CONTROL_BIN, Proc, free_port
from fleet import wait_until
from test_dashboard import check, queries, scrape

HERE = pathlib.Path(__file__).parent
WORKER = HERE / "sched_worker.py"


def deployment(name, out, triggers, sleep=0, retries=2, extra_env=None, **kw):
    env = {"OUT": str(out), "SLEEP": str(sleep), **(extra_env or {})}
    d = {"name": name, "code": {"command": sys.executable, "args": [str(WORKER)]},
         "triggers": triggers, "env": env, "retries": retries, "retry_backoff_ms": 200,
         "output_tables": ["db.out"], **kw}
    return d


class Sched:
    """One floe-control running only the scheduler."""

    def __init__(self, tmp, store, deployments, lease_ms=1500, concurrency=4, name="ctl",
                 otlp_endpoint=None, env=None):
        self.tmp, self.port = tmp, free_port()
        self.conf = tmp / f"{name}.yaml"
        self.log = tmp / f"{name}.log"
        conf = {"status_address": f"127.0.0.1:{self.port}",
                "scheduler": {"store": store, "lease_ms": lease_ms, "concurrency": concurrency,
                              "deployments": deployments}}
        if otlp_endpoint:
            conf["otlp_endpoint"] = otlp_endpoint
        self.conf.write_text(json.dumps(conf))
        self.env = env or {}
        self.start()

    def start(self):
        env = dict(os.environ, RUST_LOG="info", FLOE_T_HOOK_SECRET="hook-secret", **self.env)
        self.proc = Proc([str(CONTROL_BIN), "--config", str(self.conf)], env, self.log, self.port,
                         "floe-control")

    def stop(self):
        self.proc.stop()

    def kill9(self):
        self.proc.proc.send_signal(signal.SIGKILL)
        self.proc.proc.wait()

    def call(self, method, path, body=b"", headers=None):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body or None,
                                     method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def runs(self, deployment=None):
        code, doc = self.call("GET", "/runs?limit=10000" + (f"&deployment={deployment}" if deployment else ""))
        assert code == 200, doc
        return doc

    def wait(self, cond, what, timeout=60):
        """Polls the run records until `cond(runs)` holds; returns them."""
        try:
            return wait_until(what, lambda: (lambda r: cond(r) and (r,))(self.runs()), timeout)[0]
        except AssertionError as e:
            raise AssertionError(f"{e}: {json.dumps(self.runs())[:3000]}\n"
                                 + self.log.read_text(errors="replace")[-3000:]) from None


def lines(out):
    p = pathlib.Path(out)
    return [json.loads(x) for x in complete_lines(p)] if p.exists() else []


def ok_runs(runs, dep):
    return [r for r in runs if r["deployment"] == dep and r["result"] == "ok"]


def cloudevent(source, id, type="com.example.order.created", data=None):
    return {"specversion": "1.0", "id": id, "source": source, "type": type,
            "datacontenttype": "application/json", "data": data or {}}


def test_cron_catchup_sequential_parallel_and_none_backfill_as_declared_then_tick_live(tmp_path, store):
    period = 4
    # Start early in a period, so the ten intervals before now are exactly the ten past ones
    # when the ticker first runs (it ticks within a second of starting).
    while time.time() % period > 1.5:
        time.sleep(0.05)  # choosing the start time, not synchronising
    now = int(time.time())
    start = now - now % period - 10 * period
    start_iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start))
    cron = lambda catchup: [{"cron": {"schedule": f"*/{period} * * * * *", "start_date": start_iso,
                                      "catchup": catchup}}]
    outs = {c: tmp_path / f"{c}.jsonl" for c in ("sequential", "parallel", "none")}
    s = Sched(tmp_path, store, [deployment(c, outs[c], cron(c), sleep=0.3) for c in outs],
              concurrency=6)
    try:
        runs = s.wait(lambda r: all(len(ok_runs(r, c)) >= {"sequential": 12, "parallel": 12,
                                                           "none": 2}[c] for c in outs),
                      "backfill and two live ticks", timeout=90)
    finally:
        s.stop()
    for c, out in outs.items():
        ends = [x for x in lines(out) if x["kind"] == "end"]
        starts = [x for x in lines(out) if x["kind"] == "start"]
        logical = [x["env"]["FLOE_LOGICAL_DATE"] for x in starts]
        assert len(logical) == len(set(logical)), f"{c}: an interval ran twice"
        interval = lambda x: (x["env"]["FLOE_INTERVAL_START"], x["env"]["FLOE_INTERVAL_END"])
        accepted = sorted({r["accepted_ms"] for r in ok_runs(runs, c)})
        first_tick = [r for r in ok_runs(runs, c) if r["accepted_ms"] == accepted[0]]
        if c == "none":
            # No backfill: the first run is the interval that ended after the start.
            assert len(first_tick) == 1
            first = json.loads(first_tick[0]["event"])
            assert first["logicaldate"] >= time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now - period))
            continue
        assert len(first_tick) == 10, f"{c}: backfill was {len(first_tick)} runs"
        want = [time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(start + i * period)) for i in range(12)]
        by_start = sorted(starts, key=lambda x: x["env"]["FLOE_LOGICAL_DATE"])
        assert [x["env"]["FLOE_LOGICAL_DATE"] for x in by_start][:12] == want, c
        for x in by_start:
            a, b = interval(x)
            assert a == x["env"]["FLOE_LOGICAL_DATE"] and b > a
        # Live ticks: accepted at their own fire time, not with the backfill.
        assert len(accepted) >= 3, f"{c}: no live ticks after the backfill"
        order = [x["env"]["FLOE_LOGICAL_DATE"] for x in sorted(starts, key=lambda x: x["t"])]
        spans = sorted((x["t"], e["t"]) for x in starts for e in ends if e["pid"] == x["pid"])
        overlap = any(spans[i + 1][0] < spans[i][1] for i in range(len(spans) - 1))
        if c == "sequential":
            assert order == sorted(order), "sequential backfill ran out of order"
            assert not overlap, "sequential runs overlapped"
        else:
            assert overlap, "parallel backfill ran one at a time"


def test_a_run_killed_with_its_floe_control_is_retried_under_a_new_generation_and_runs_to_completion_once(tmp_path, store):
    out = tmp_path / "out.jsonl"
    s = Sched(tmp_path, store, [deployment("slow", out, [], sleep=2)])
    try:
        code, doc = s.call("POST", "/deployments/slow/dispatch")
        assert code == 202, doc
        s.wait(lambda r: any(x["generation"] == 1 for x in r) and lines(out), "the first run to start")
        s.kill9()
        # Kept down longer than the worker needs: it must die with its floe-control, not finish.
        threading.Event().wait(3.0)
        assert [x["kind"] for x in lines(out)] == ["start"], "the worker outlived its floe-control"
        s.start()
        # The retry starts after the lease expires and sleeps as long as the first did, so by
        # its end the first worker would have ended too had it outlived its floe-control.
        runs = s.wait(lambda r: ok_runs(r, "slow"), "the retry to finish")
    finally:
        s.stop()
    runs = sorted(runs, key=lambda r: r["generation"])
    assert [(r["attempt"], r["generation"], r["result"]) for r in runs] == [(1, 1, "lost"), (2, 2, "ok")]
    assert "retried under generation 2" in runs[0]["note"]
    got = lines(out)
    assert [x["env"]["FLOE_LEASE_GENERATION"] for x in got if x["kind"] == "start"] == ["1", "2"]
    assert [x["env"]["FLOE_LEASE_GENERATION"] for x in got if x["kind"] == "end"] == ["2"], \
        "the first worker ran to completion after its floe-control died"
    assert "done with" in runs[1]["log"]


def test_a_graceful_stop_gives_the_runs_attempt_back_so_a_restart_fails_nothing(tmp_path, store):
    out = tmp_path / "out.jsonl"
    s = Sched(tmp_path, store, [deployment("once", out, [], sleep=2, retries=0)])
    try:
        code, doc = s.call("POST", "/deployments/once/dispatch")
        assert code == 202, doc
        s.wait(lambda r: r and lines(out), "the run to start")
        s.stop()  # SIGTERM: the worker is killed and the run recorded as stopped
        s.start()
        runs = s.wait(lambda r: ok_runs(r, "once"), "the run to finish after the restart")
    finally:
        s.stop()
    runs = sorted(runs, key=lambda r: r["generation"])
    assert [(r["attempt"], r["generation"], r["result"]) for r in runs] == [(1, 1, "stopped"), (1, 2, "ok")]
    assert "attempt given back" in runs[0]["note"]


def test_a_stalled_holders_completion_is_refused_after_another_instance_took_the_run(tmp_path, store):
    out = tmp_path / "out.jsonl"
    deps = [deployment("slow", out, [], sleep=3)]
    a = Sched(tmp_path, store, deps, name="a")
    b = None
    try:
        code, doc = a.call("POST", "/deployments/slow/dispatch")
        assert code == 202, doc
        a.wait(lambda r: lines(out), "the first run to start")
        a.proc.proc.send_signal(signal.SIGSTOP)  # a stalls past its lease with its worker running
        b = Sched(tmp_path, store, deps, name="b")
        b.wait(lambda r: any(x["generation"] == 2 for x in r), "b to take the run")
        a.proc.proc.send_signal(signal.SIGCONT)
        runs = b.wait(lambda r: ok_runs(r, "slow") and "refused" in "".join(x["note"] for x in r),
                      "b to finish and a's completion to be refused")
    finally:
        a.proc.proc.send_signal(signal.SIGCONT)
        a.stop()
        if b:
            b.stop()
    gen1 = next(r for r in runs if r["generation"] == 1)
    assert "completion" in gen1["note"] and "refused" in gen1["note"], gen1
    assert [r["generation"] for r in runs if r["result"] == "ok"] == [2]
    assert [x["env"]["FLOE_LEASE_GENERATION"] for x in lines(out) if x["kind"] == "end"] == ["2"]


def test_the_same_cloudevent_posted_twice_is_one_run_in_structured_and_binary_mode(tmp_path, store):
    out = tmp_path / "out.jsonl"
    sub = [{"event": {"type": "com.example.order.created", "source": "/shop"}}]
    s = Sched(tmp_path, store, [deployment("orders", out, sub), deployment("other", out, [
        {"event": {"type": "com.example.order.created", "subject": "never"}}])])
    try:
        ev = json.dumps(cloudevent("/shop", "order-1", data={"order": 1})).encode()
        for _ in range(2):
            code, doc = s.call("POST", "/events", ev, {"content-type": "application/cloudevents+json"})
            assert code == 202, doc
            assert len(doc["jobs"]) == 1
        binary = {"ce-specversion": "1.0", "ce-id": "order-2", "ce-source": "/shop",
                  "ce-type": "com.example.order.created", "content-type": "application/json"}
        for _ in range(2):
            code, doc = s.call("POST", "/events", b'{"order": 2}', binary)
            assert code == 202, doc
        # Not subscribed (other source): accepted, no job.
        code, doc = s.call("POST", "/events", json.dumps(cloudevent("/elsewhere", "x")).encode(),
                           {"content-type": "application/cloudevents+json"})
        assert (code, doc["jobs"]) == (202, [])
        code, doc = s.call("POST", "/events", b"{not json", {"content-type": "application/cloudevents+json"})
        assert code == 400 and "CloudEvent" in doc["error"]
        # Empty id, source or type break the spec: 400, and nothing of the request is enqueued
        # (an empty id would also make the next such event from /shop a "duplicate").
        for field in ("id", "source", "type"):
            ev = dict(cloudevent("/shop", f"empty-{field}"), **{field: ""})
            code, doc = s.call("POST", "/events", json.dumps(ev).encode(),
                               {"content-type": "application/cloudevents+json"})
            assert code == 400 and field in doc["error"], (field, code, doc)
        code, doc = s.call("POST", "/events", b'{"order": 3}', dict(binary, **{"ce-id": ""}))
        assert code == 400 and "id" in doc["error"], doc
        batch = json.dumps([cloudevent("/shop", "order-3"), dict(cloudevent("/shop", "x"), id="")]).encode()
        code, doc = s.call("POST", "/events", batch, {"content-type": "application/cloudevents-batch+json"})
        assert code == 400 and "id" in doc["error"], doc
        runs = s.wait(lambda r: len(ok_runs(r, "orders")) == 2, "two runs")
    finally:
        s.stop()
    assert len(runs) == 2
    got = sorted((x["event"]["id"], x["event"]["data"]) for x in lines(out) if x["kind"] == "end")
    assert got == [("order-1", {"order": 1}), ("order-2", {"order": 2})]
    # Workers get a clean environment: floe-control's secrets stay out.
    assert all("FLOE_T_HOOK_SECRET" not in x["env"] for x in lines(out))


def test_a_webhook_request_becomes_one_run_with_its_body_in_the_event(tmp_path, store):
    out = tmp_path / "out.jsonl"
    hooks = [{"webhook": {"path": "deploy-done"}}]
    signed = [{"webhook": {"path": "signed", "secret_env": "FLOE_T_HOOK_SECRET", "methods": ["POST", "PUT"],
                           "tolerance_secs": 60}}]
    s = Sched(tmp_path, store, [deployment("hook", out, hooks), deployment("signed", out, signed)])
    try:
        code, doc = s.call("POST", "/hooks/deploy-done?env=prod", b'{"build": 42}',
                           {"content-type": "application/json", "x-request-id": "req-1"})
        assert code == 202, doc
        # The sender's retry carries the same request id: still one run.
        assert s.call("POST", "/hooks/deploy-done?env=prod", b'{"build": 42}', {"x-request-id": "req-1"})[0] == 202
        assert s.call("POST", "/hooks/nope", b"x")[0] == 404
        body = b"payload"
        assert s.call("POST", "/hooks/signed", body, {"x-floe-signature": "sha256=00"})[0] == 401
        sig = hmac.new(b"hook-secret", body, hashlib.sha256).hexdigest()
        assert s.call("POST", "/hooks/signed", body, {"x-floe-signature": f"sha256={sig}"})[0] == 202
        # Only the methods a hook lists (default POST): a link follower's GET starts nothing.
        assert s.call("GET", "/hooks/deploy-done")[0] == 405
        assert s.call("DELETE", "/hooks/signed", body, {"x-floe-signature": f"sha256={sig}"})[0] == 405
        # A timestamp inside the signature: taken within the tolerance, refused as a replay after.
        now = int(time.time())
        stamp = lambda t, b: f"t={t},sha256=" + hmac.new(b"hook-secret", f"{t}.".encode() + b, hashlib.sha256).hexdigest()
        assert s.call("PUT", "/hooks/signed", b"fresh", {"x-floe-signature": stamp(now, b"fresh"),
                                                          "x-request-id": "fresh-1"})[0] == 202
        code, doc = s.call("POST", "/hooks/signed", b"old", {"x-floe-signature": stamp(now - 61, b"old")})
        assert code == 401 and "t=" in doc["error"], doc
        assert s.call("POST", "/hooks/signed", b"old", {"x-floe-signature": stamp(now - 61, b"other")})[0] == 401
        runs = s.wait(lambda r: len([x for x in r if x["result"] == "ok"]) == 3, "three webhook runs")
    finally:
        s.stop()
    assert len(runs) == 3
    ends = {x["env"]["FLOE_DEPLOYMENT"]: x for x in lines(out) if x["kind"] == "end" and x["event"]["id"] != "fresh-1"}
    e = ends["hook"]["event"]
    assert e["type"] == "dev.floe.webhook.request" and e["source"] == "/hooks/deploy-done"
    assert e["data"]["body"] == '{"build": 42}' and e["data"]["query"] == "env=prod"
    assert e["data"]["method"] == "POST" and e["id"] == "req-1"
    assert ends["signed"]["event"]["data"]["body"] == "payload"


def test_a_failing_worker_is_retried_with_backoff_and_its_output_kept_in_the_run_log(tmp_path, store):
    out = tmp_path / "out.jsonl"
    s = Sched(tmp_path, store, [deployment("flaky", out, [], extra_env={"FAIL_UNTIL": "1"}),
                                deployment("doomed", out, [], retries=1, extra_env={"FAIL_UNTIL": "9"}),
                                deployment("late", out, [], sleep=30, time_limit_secs=1, retries=0),
                                deployment("stubborn", out, [], sleep=30, time_limit_secs=1, retries=0,
                                           stop_grace_secs=1, extra_env={"IGNORE_TERM": "1"})])
    try:
        for d in ("flaky", "doomed", "late", "stubborn"):
            assert s.call("POST", f"/deployments/{d}/dispatch")[0] == 202
        runs = s.wait(lambda r: len([x for x in r if x["ended_ms"]]) == 6, "six runs to end")
        text = urllib.request.urlopen(f"http://127.0.0.1:{s.port}/metrics").read().decode()
        # The dashboard's scheduler panels query metrics and labels this scrape has.
        check(queries("scheduler"), scrape(f"http://127.0.0.1:{s.port}/metrics"))
    finally:
        s.stop()
    by = lambda d: sorted((r["attempt"], r["result"], r["exit_code"]) for r in runs if r["deployment"] == d)
    assert by("flaky") == [(1, "error", 3), (2, "ok", 0)]
    assert by("doomed") == [(1, "error", 3), (2, "error", 3)]
    assert by("late") == [(1, "timeout", None)]
    failed = next(r for r in runs if r["deployment"] == "flaky" and r["attempt"] == 1)
    assert "failing on purpose" in failed["log"] and "retry at" in failed["note"]
    late = next(r for r in runs if r["deployment"] == "late")
    # At the time limit: SIGTERM, then SIGKILL after the grace for a worker that ignores it.
    assert "time limit (1 s): it ended on SIGTERM within the grace" in late["log"], late["log"]
    assert late["ended_ms"] - late["started_ms"] < 5000
    stubborn = next(r for r in runs if r["deployment"] == "stubborn")
    assert by("stubborn") == [(1, "timeout", None)]
    assert "SIGTERM, then SIGKILL after the 1 s grace" in stubborn["log"], stubborn["log"]
    assert 1800 < stubborn["ended_ms"] - stubborn["started_ms"] < 6000
    assert 'floe_sched_runs_total{deployment="flaky",result="ok"} 1' in text
    assert 'floe_sched_retries_total{deployment="flaky"} 1' in text
    assert 'floe_sched_queue_jobs{state="failed"} 3' in text
    assert "floe_sched_dispatch_latency_seconds_count" in text


def test_the_cli_dispatches_lists_runs_and_shows_the_scheduler(tmp_path):
    out = tmp_path / "out.jsonl"
    cron = [{"cron": {"schedule": "0 3 * * *", "timezone": "Europe/Berlin"}}]
    s = Sched(tmp_path, f"sqlite://{tmp_path}/q.db", [deployment("nightly", out, cron)])
    addr = f"127.0.0.1:{s.port}"
    cli = lambda *a: subprocess.run([str(CONTROL_BIN), *a], capture_output=True, text=True, check=True).stdout
    try:
        job = cli("dispatch", "nightly", addr).strip()
        assert job.startswith("nightly/")
        s.wait(lambda r: ok_runs(r, "nightly"), "the dispatched run")
        listing = cli("runs", "--deployment", "nightly", addr)
        assert "nightly" in listing and "manual" in listing and " ok " in listing and job in listing
        status = cli("status", addr)
        assert "SCHEDULER (sqlite)" in status and "1 done" in status
        assert "nightly" in status and ":00:00.000Z" in status  # its next fire
        bad = subprocess.run([str(CONTROL_BIN), "dispatch", "nope", addr], capture_output=True, text=True)
        assert bad.returncode != 0 and "no deployment" in bad.stderr
    finally:
        s.stop()


def fresh_db(postgres, prefix):
    """A new database on the test PostgreSQL server; its URL."""
    bindir = sorted(pathlib.Path("/usr/lib/postgresql").glob("*/bin"))[-1]
    host, port = postgres.split("@")[1].split("/")[0].split(":")
    name = f"{prefix}_{os.getpid()}"
    subprocess.run([bindir / "createdb", "-h", host, "-p", port, "-U", "floe", name], check=True)
    return postgres.rsplit("/", 1)[0] + "/" + name


def test_a_second_instance_on_the_same_host_leaves_the_first_ones_live_run_alone(tmp_path, postgres):
    """Start-new-then-stop-old on one host: the new instance's orphan reaping must not take the
    old one's live run for an orphan (it killed the worker, and a `retries: 0` job failed)."""
    url = fresh_db(postgres, "upgrade")
    out = tmp_path / "out.jsonl"
    deps = [deployment("long", out, [], sleep=3, retries=0)]
    a, b = Sched(tmp_path, url, deps, name="a"), None
    try:
        assert a.call("POST", "/deployments/long/dispatch")[0] == 202
        a.wait(lambda r: lines(out), "the run to start")
        b = Sched(tmp_path, url, deps, name="b")
        runs = a.wait(lambda r: [x for x in r if x["ended_ms"]], "the run to end")
    finally:
        a.stop()
        if b:
            b.stop()
    assert [(r["attempt"], r["result"]) for r in runs] == [(1, "ok")], runs
    assert [x["kind"] for x in lines(out)] == ["start", "end"]


def test_two_instances_on_one_postgresql_queue_run_each_event_once(tmp_path, postgres):
    url = fresh_db(postgres, "two")
    out = tmp_path / "out.jsonl"
    sub = [{"event": {"type": "com.example.tick"}}]
    period = [{"cron": {"schedule": "* * * * * *"}}]
    deps = [deployment("each", out, sub, sleep=0.1), deployment("secondly", tmp_path / "cron.jsonl", period)]
    a = Sched(tmp_path, url, deps, name="a")
    b = Sched(tmp_path, url, deps, name="b")
    try:
        n = 60
        for i in range(n):
            inst = (a, b)[i % 2]
            code, _ = inst.call("POST", "/events", json.dumps(cloudevent("/t", f"e{i}", "com.example.tick")).encode(),
                                {"content-type": "application/cloudevents+json"})
            assert code == 202
        runs = a.wait(lambda r: len(ok_runs(r, "each")) == n and len(ok_runs(r, "secondly")) >= 3,
                      "every event run and three cron ticks")
    finally:
        a.stop()
        b.stop()
    ends = [x["event"]["id"] for x in lines(out) if x["kind"] == "end"]
    assert sorted(ends) == sorted(f"e{i}" for i in range(n)), "an event ran twice or not at all"
    holders = {r["holder"].split("/")[1] for r in ok_runs(runs, "each")}
    assert len(holders) == 2, "one instance did all the work"
    ticks = [x["event"]["id"] for x in lines(tmp_path / "cron.jsonl") if x["kind"] == "end"]
    assert len(ticks) == len(set(ticks)), "two tickers enqueued the same interval twice"
