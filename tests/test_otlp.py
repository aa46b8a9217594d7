"""OTLP export: with server.otlp_endpoint set, each request becomes a span and the request
metrics are pushed, over OTLP/HTTP, to a collector (here a minimal OTLP/HTTP receiver)."""
import http.server
import threading
import time

import pytest

from conftest import BUCKET, free_port, s3_client, start_custom_floe


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
