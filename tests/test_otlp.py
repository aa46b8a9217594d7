"""OTLP export: with server.otlp_endpoint set, each request becomes a span and the request
metrics are pushed, over OTLP/HTTP, to a collector (here a minimal OTLP/HTTP receiver)."""
import http.server
import threading
import time

import pytest

from conftest import BUCKET, free_port, s3_client, start_custom_floe
from fleet import Node
from relay import Relay


class Collector(http.server.BaseHTTPRequestHandler):
    received = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Collector.received.append((self.path, self.headers.get("Content-Type"), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def otlp_floe(relay, tmp_path):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = free_port()
    p = start_custom_floe(tmp_path, relay.port, port, f"""  listeners: [{{address: "127.0.0.1:{port}"}}]
  grace_period_seconds: 1
  otlp_endpoint: http://127.0.0.1:{srv.server_address[1]}""",
                          OTEL_METRIC_EXPORT_INTERVAL="300", OTEL_BSP_SCHEDULE_DELAY="100")
    yield p
    p.stop()
    srv.shutdown()


def test_spans_and_metrics_reach_the_collector(otlp_floe):
    s3 = s3_client(otlp_floe.port)
    s3.put_object(Bucket=BUCKET, Key="otlp/obj", Body=b"traced")
    rid = s3.get_object(Bucket=BUCKET, Key="otlp/obj")["ResponseMetadata"]["HTTPHeaders"]["x-floe-request-id"]
    deadline = time.monotonic() + 15
    while True:
        traces = [b for p, _, b in Collector.received if p == "/v1/traces"]
        metrics = [b for p, _, b in Collector.received if p == "/v1/metrics"]
        if any(rid.encode() in b for b in traces) and any(b"floe.requests" in b for b in metrics):
            break
        assert time.monotonic() < deadline, f"collector got {[(p, len(b)) for p, _, b in Collector.received]}"
        time.sleep(0.1)  # polling the collector's inbox, bounded by the deadline
    assert any(b"GetObject" in b for b in traces)
    assert all(ct == "application/x-protobuf" for _, ct, _ in Collector.received)


def _fields(buf):
    """The (field number, value) pairs of one protobuf message: varints as ints,
    length-delimited fields as bytes (enough to walk OTLP's ExportTraceServiceRequest)."""
    i, out = 0, []
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((field, v))
    return out


def _varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def _spans(bodies):
    """Every exported span as {name, trace, id, parent}."""
    spans = []
    def sub(buf, number):  # the embedded messages in field `number`
        return [v for f, v in _fields(buf) if f == number]

    for body in bodies:  # resource_spans = 1, scope_spans = 2, spans = 2
        for rs in sub(body, 1):
            for ss in sub(rs, 2):
                for sp in sub(ss, 2):
                    d = dict((k, v) for k, v in _fields(sp) if k in (1, 2, 4, 5))
                    spans.append({"name": d.get(5, b"").decode(), "trace": d.get(1), "id": d.get(2),
                                  "parent": d.get(4, b"")})
    return spans


@pytest.fixture
def otlp_writeback(minio, tmp_path, monkeypatch):
    """A one-node fleet (it stages on itself: k=1, m=1, w=1) exporting to the collector."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    relay = Relay(minio.port)
    node = Node(tmp_path, "floe-0", relay.port, free_port(), [], filters="sigv4, writeback",
                extra_server=f"  otlp_endpoint: http://127.0.0.1:{srv.server_address[1]}",
                extra_route="    writeback: {k: 1, m: 1, w: 1}",
                extra_top="writeback: {dir: '{dir}/wb', capacity_bytes: 67108864}")
    yield node
    node.stop()
    relay.down()
    srv.shutdown()


def test_a_staged_put_exports_its_phases_as_children_of_its_span(otlp_writeback, direct):
    Collector.received.clear()
    s3 = s3_client(otlp_writeback.port)
    r = s3.put_object(Bucket=BUCKET, Key="otlp/staged", Body=b"x" * 100_000)
    assert r["ResponseMetadata"]["HTTPHeaders"]["x-floe-writeback"] == "staged"
    deadline = time.monotonic() + 15
    while True:
        spans = _spans([b for p, _, b in Collector.received if p == "/v1/traces"])
        names = {s["name"] for s in spans}
        if {"PutObject", "writeback.place", "writeback.journal", "writeback.propagate"} <= names:
            break
        assert time.monotonic() < deadline, f"spans so far: {sorted(names)}"
        time.sleep(0.1)  # polling the collector's inbox, bounded by the deadline
    put = next(s for s in spans if s["name"] == "PutObject")
    for name in ("writeback.place", "writeback.journal"):
        child = next(s for s in spans if s["name"] == name)
        assert (child["trace"], child["parent"]) == (put["trace"], put["id"]), name
    propagate = next(s for s in spans if s["name"] == "writeback.propagate")
    assert propagate["parent"] == b"" and propagate["trace"] != put["trace"], "background work is a trace of its own"
    assert direct.get_object(Bucket=BUCKET, Key="otlp/staged")["Body"].read() == b"x" * 100_000
