"""OpenTelemetry into a real collector (tests/otelcol: the collector's OTLP receiver and file
exporter, built by tests/otelcol/build.sh): floe-proxy's and floe-control's spans arrive with
their resource attributes, a client's `traceparent` becomes the parent of Floe's span, and
the requests Floe makes for it (to the origin, to a peer and on to the origin) carry Floe's
span as theirs."""
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import urllib3

from conftest import complete_lines, BUCKET, CACHE, Proc, free_port, start_cached_floe
from fleet import start_fleet, wait_until
from relay import Relay
from test_scheduler import Sched, deployment
from test_sigv4 import sign

ROOT = pathlib.Path(__file__).resolve().parent.parent
HTTP = urllib3.PoolManager(retries=False)
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


class Collector:
    def __init__(self, tmp):
        self.out = tmp / "otel.jsonl"
        self.port = free_port()
        conf = tmp / "otelcol.yaml"
        conf.write_text(f"""
receivers:
  otlp:
    protocols:
      http: {{endpoint: "127.0.0.1:{self.port}"}}
exporters:
  file: {{path: "{self.out}", flush_interval: 100ms}}
service:
  telemetry: {{metrics: {{level: none}}}}
  pipelines:
    traces: {{receivers: [otlp], exporters: [file]}}
    metrics: {{receivers: [otlp], exporters: [file]}}
""")
        binary = subprocess.run([ROOT / "tests" / "otelcol" / "build.sh"], check=True, capture_output=True,
                                text=True, env=dict(os.environ, FLOE_CACHE=str(CACHE))).stdout.strip()
        self.proc = Proc([binary, "--config", str(conf)], dict(os.environ), tmp / "otelcol.log", self.port,
                         "otel collector")
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def spans(self):
        """Every span exported so far, with its resource's attributes."""
        out = []
        if not self.out.exists():
            return out
        for line in complete_lines(self.out):
            for rs in json.loads(line).get("resourceSpans", []):
                res = attrs(rs.get("resource", {}).get("attributes", []))
                for ss in rs.get("scopeSpans", []):
                    for s in ss.get("spans", []):
                        out.append(dict(s, resource=res, attrs=attrs(s.get("attributes", []))))
        return out

    def metric_names(self):
        names = set()
        if self.out.exists():
            for line in complete_lines(self.out):
                for rm in json.loads(line).get("resourceMetrics", []):
                    for sm in rm.get("scopeMetrics", []):
                        names.update(m["name"] for m in sm.get("metrics", []))
        return names

    def points(self, name):
        """The latest value of each series of metric `name`: {(service, sorted attrs): value}."""
        out = {}
        if self.out.exists():
            for line in complete_lines(self.out):
                for rm in json.loads(line).get("resourceMetrics", []):
                    service = attrs(rm.get("resource", {}).get("attributes", [])).get("service.name")
                    for sm in rm.get("scopeMetrics", []):
                        for m in sm.get("metrics", []):
                            if m["name"] != name:
                                continue
                            data = m.get("sum") or m.get("gauge") or {}
                            for dp in data.get("dataPoints", []):
                                key = (service, tuple(sorted(attrs(dp.get("attributes", [])).items())))
                                out[key] = dp.get("asDouble", dp.get("asInt"))
        return out

    def stop(self):
        self.proc.stop()


def attrs(kvs):
    return {kv["key"]: next(iter(kv["value"].values()), None) for kv in kvs}


@pytest.fixture
def collector(tmp_path):
    c = Collector(tmp_path)
    yield c
    c.stop()


def traced_get(port, key, traceparent=None):
    url = f"http://127.0.0.1:{port}/{BUCKET}/{key}"
    headers = {"traceparent": traceparent} if traceparent else {}
    req = sign("GET", url, headers=headers)
    return HTTP.request("GET", url, headers=dict(req.headers))


OTLP_ENV = {"OTEL_METRIC_EXPORT_INTERVAL": "300", "OTEL_BSP_SCHEDULE_DELAY": "100"}


def test_a_clients_trace_runs_through_floe_to_the_origin_and_reaches_the_collector(minio, direct, collector,
                                                                                   tmp_path):
    relay = Relay(minio.port)
    floe = start_cached_floe(tmp_path, relay.port, tmp_path / "cache",
                             extra_server=f"  otlp_endpoint: {collector.endpoint}", **OTLP_ENV)
    try:
        direct.put_object(Bucket=BUCKET, Key="otel/traced", Body=b"t" * 1000)
        r = traced_get(floe.port, "otel/traced", f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")
        assert r.status == 200 and r.data == b"t" * 1000
        untraced = traced_get(floe.port, "otel/traced", "garbage")  # invalid: a new trace, served
        assert untraced.status == 200
        spans = wait_until("both GET spans at the collector", lambda: (lambda s: len(s) >= 2 and s)(
            [s for s in collector.spans() if s["name"] == "GetObject"]), timeout=30)
        wait_until("the request metrics at the collector", lambda: "floe.requests" in collector.metric_names(),
                   timeout=30)
    finally:
        floe.stop()
        relay.down()
    mine = [s for s in spans if s["traceId"] == CLIENT_TRACE]
    assert len(mine) == 1, spans
    span = mine[0]
    assert span["parentSpanId"] == CLIENT_SPAN and span["kind"] == 2  # server
    assert span["resource"]["service.name"] == "floe-proxy"
    assert span["resource"]["floe.node_id"] and span["resource"]["service.instance.id"]
    assert span["attrs"]["floe.route"] == BUCKET and span["attrs"]["s3.operation"] == "GetObject"
    # The origin's GET (the cache's fill) named Floe's span as its parent, in the client's trace.
    assert f"00-{CLIENT_TRACE}-{span['spanId']}-01" in relay.traceparents, relay.traceparents
    other = next(s for s in spans if s["traceId"] != CLIENT_TRACE)
    assert "parentSpanId" not in other or not other["parentSpanId"]


def test_a_peer_ask_carries_the_trace_to_the_owner_and_on_to_the_origin(minio, direct, tmp_path):
    """Without OTLP export a node passes the client's context on unchanged: every origin GET,
    whether the asked node or the key's owner made it, carries the client's traceparent."""
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=2)
    try:
        keys = [f"otel/peer-{i}" for i in range(16)]
        for k in keys:
            direct.put_object(Bucket=BUCKET, Key=k, Body=k.encode() * 100)
        sent = {}
        for i, k in enumerate(keys):
            tp = f"00-{i + 1:032x}-{CLIENT_SPAN}-01"
            sent[k] = tp
            r = traced_get(nodes[0].port, k, tp)
            assert r.status == 200 and r.data == k.encode() * 100
        served = nodes[1].metric("floe_peer_served_total")
    finally:
        for n in nodes:
            n.stop()
        relay.down()
    assert served > 0, "no key was owned by the other node"
    assert sorted(set(relay.traceparents)) == sorted(sent.values()), relay.traceparents


def test_floe_control_exports_its_scheduler_runs_with_the_events_trace(collector, tmp_path):
    out = tmp_path / "out.jsonl"
    sub = [{"event": {"type": "com.example.traced"}}]
    s = Sched(tmp_path, f"sqlite://{tmp_path}/q.db", [deployment("traced", out, sub)],
              otlp_endpoint=collector.endpoint, env=OTLP_ENV)
    try:
        ev = {"specversion": "1.0", "id": "t-1", "source": "/t", "type": "com.example.traced",
              "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "data": {}}
        code, _ = s.call("POST", "/events", json.dumps(ev).encode(), {"content-type": "application/cloudevents+json"})
        assert code == 202
        s.wait(lambda r: any(x["result"] == "ok" for x in r), "the run")
        runs = wait_until("the run's span at the collector", lambda: [
            x for x in collector.spans() if x["name"] == "sched.run"], timeout=30)
        # Its metrics too, under /metrics's names (counters without _total) with their labels.
        ok = ("floe-control", (("deployment", "traced"), ("result", "ok")))
        wait_until("the run counted at the collector", lambda: collector.points("floe_sched_runs").get(ok) == 1,
                   timeout=30)
        done = ("floe-control", (("state", "done"),))
        wait_until("the queue depth at the collector",
                   lambda: collector.points("floe_sched_queue_jobs").get(done) == 1, timeout=30)
        assert "floe_sched_run_duration_seconds_count" in collector.metric_names()
    finally:
        s.stop()
    span, = runs
    assert span["resource"]["service.name"] == "floe-control"
    assert span["traceId"] == CLIENT_TRACE and span["parentSpanId"] == CLIENT_SPAN
    assert span["attrs"]["floe.deployment"] == "traced" and span["attrs"]["floe.run.result"] == "ok"
    # The worker got the run's span as its TRACEPARENT.
    start = next(json.loads(x) for x in complete_lines(out))
    assert start["env"]["TRACEPARENT"] == f"00-{CLIENT_TRACE}-{span['spanId']}-01"
