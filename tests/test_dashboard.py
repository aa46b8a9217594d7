"""The Grafana dashboard (deploy/grafana/floe.json): every panel's query names a metric Floe
exports, and every label it groups by is one that metric has, checked against a real scrape
of a write-back fleet after a little traffic."""
import json
import os
import pathlib
import re
import urllib.request

from conftest import BUCKET
from fleet import start_fleet
from relay import Relay
from test_blocks import get
from test_writeback import WB, put

ROOT = pathlib.Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "floe.json"
# Exported only once the event happens (none does in this test), so looked up in the
# sources: counted by the proxy's origin client on a failed connect or an open breaker.
ON_EVENT = {"floe_origin_failures_total": ["origin", "kind"]}


def queries(binary="floe-proxy"):
    """(panel title, query) of the panels on `binary`'s metrics: floe_control_* are
    floe-control's, checked against its own scrape in test_control.py; floe_sched_* its
    scheduler's ("scheduler", checked in test_scheduler.py); the rest the proxy's."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert panels, "the dashboard has panels"
    out = [(p["title"], t["expr"]) for p in panels for t in p["targets"]]
    prefix = {"floe-control": "floe_control_", "scheduler": "floe_sched_"}
    if binary in prefix:
        return [q for q in out if prefix[binary] in q[1]]
    return [q for q in out if not any(p in q[1] for p in prefix.values())]


def check(queries_, exported):
    """Every metric each query names is in `exported` ({name: labels}), with the labels the
    query groups or selects by."""
    for title, expr in queries_:
        names = set(re.findall(r"\bfloe_[a-z0-9_]+", expr))
        assert names, f"{title}: {expr} names no Floe metric"
        for name in names:
            assert name in exported, f"{title}: {name} is not exported"
            grouped = re.findall(r"by \(([^)]*)\)", expr)
            wanted = {g.strip() for gs in grouped for g in gs.split(",")} - {"le"}
            selected = set(re.findall(r'([a-z_]+)=~?"', expr))
            missing = (wanted | selected) - exported[name]
            assert not missing, f"{title}: {name} has no label {sorted(missing)}"


def scrape(url):
    """{metric name: label names} from the Prometheus text at `url`."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    found = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_0-9]+)(?:\{([^}]*)\})? ", line)
        if m:
            labels = set(re.findall(r'([a-z_]+)="', m.group(2) or ""))
            found.setdefault(m.group(1), set()).update(labels)
    return found


def test_every_panel_queries_metrics_and_labels_floe_exports(minio, direct, tmp_path):
    relay = Relay(minio.port)
    nodes = start_fleet(tmp_path, relay.port, n=3, **WB)
    try:
        body = os.urandom(3 * 1024 * 1024)
        direct.put_object(Bucket=BUCKET, Key="dash/from-origin.parquet", Body=body)
        assert put(nodes[0], "dash/staged.parquet", body)["x-floe-writeback"] == "staged"
        for nd in nodes:
            assert get(nd.port, "dash/from-origin.parquet").data == body
            assert get(nd.port, "dash/staged.parquet").data == body
        exported = {}
        for nd in nodes:
            for name, labels in scrape(f"http://{nd.host}:{nd.mport}/metrics").items():
                exported.setdefault(name, set()).update(labels)
        for name, labels in ON_EVENT.items():
            exported.setdefault(name, set()).update(labels)
        check(queries(), exported)
    finally:
        for nd in nodes:
            nd.stop()
        relay.down()
