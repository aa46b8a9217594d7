"""floe-control's console (issue 27) in a real headless browser: Debian's chromium driven by
Playwright, against the whole stack (MinIO, the Iceberg REST fixture, two floe-proxy nodes in a
fleet with write-back, floe-control following the catalog with a scheduler and a deployment).
The page must show a committed table whose warm reaches done, the table pinned with its button, both nodes with their tiers, a
write staged and then propagated, the heat of a table read through Floe, and a run with its
log. Assertions are on the DOM, never on pixels; screenshots go to tests/artifacts/ (not
committed)."""
import json
import os
import pathlib
import shutil
import sys
import urllib.request

import pyarrow as pa
import pytest

from conftest import ADMIN_TOKEN, CLIENT, ORIGIN_KEY, ORIGIN_SECRET, BUCKET, Proc, free_port, s3_client
from fleet import start_fleet, wait_until
from relay import Relay
from test_control import CONTROL_BIN, iceberg, start_rest
from test_writeback import WB

HERE = pathlib.Path(__file__).parent
ARTIFACTS = HERE / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As the machine notes say: no background networking (this network is closed), no sandbox (root).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NS = "console"
# Two nodes: one fragment of data and one of parity, both durable before a 200.
WB2 = dict(WB, extra_route="    writeback: {k: 1, m: 1, w: 2, stripe_bytes: 262144}")


def control_conf(tmp, rest_port, nodes, port):
    return {
        "catalog": {"uri": f"http://127.0.0.1:{rest_port}", "poll_interval_ms": 200},
        "follow": [{"namespace": NS}],
        "nodes": [{"admin": f"http://127.0.0.1:{nd.aport}", "token": ADMIN_TOKEN} for nd in nodes],
        "status_address": f"127.0.0.1:{port}",
        "heat": {"path": str(tmp / "heat.json"), "pull_interval_ms": 200},
        "pins": {"path": str(tmp / "pins.json"), "console_buttons": True},
        "scheduler": {
            "store": f"sqlite://{tmp}/sched.db", "lease_ms": 1500, "concurrency": 2,
            "deployments": [{
                "name": "nightly-rollup", "retries": 0, "output_tables": ["db.out"],
                "code": {"command": sys.executable, "args": [str(HERE / "sched_worker.py")]},
                "env": {"OUT": str(tmp / "runs.jsonl"), "SLEEP": "0"},
                "triggers": [{"cron": {"schedule": "0 3 * * *"}}],
            }]},
    }


@pytest.fixture
def stack(minio, tmp_path):
    pytest.importorskip("playwright")
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (tests/run.sh installs it)")
    relay = Relay(minio.port)
    rest_port = free_port()
    rest = start_rest(tmp_path, minio.port, rest_port)
    nodes = start_fleet(tmp_path, relay.port, n=2, extra_cache="  pinned_bytes: 16777216", **WB2)
    port = free_port()
    conf = tmp_path / "control.json"
    conf.write_text(json.dumps(control_conf(tmp_path, rest_port, nodes, port)))
    ctl = Proc([str(CONTROL_BIN), "--config", str(conf)], dict(os.environ, RUST_LOG="info"),
               tmp_path / "control.log", port, "floe-control")
    try:
        yield dict(tmp=tmp_path, rest_port=rest_port, nodes=nodes, port=port, minio=minio)
    finally:
        ctl.stop()
        for nd in nodes:
            nd.stop()
        rest.stop()
        relay.down()


def dom(page, script):
    """Evaluates `script` (an expression) in the page."""
    return page.evaluate(script)


def wait_dom(page, what, script, timeout=90):
    """Polls the page's DOM (the page polls its document every 2 s) until `script` is truthy."""
    try:
        return wait_until(what, lambda: dom(page, script), timeout=timeout)
    except AssertionError:
        page.screenshot(path=str(ARTIFACTS / "console-timeout.png"), full_page=True)
        raise


def test_the_console_shows_tables_warming_the_fleet_write_back_heat_and_runs(stack):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    base = f"http://127.0.0.1:{stack['port']}"
    with urllib.request.urlopen(f"{base}/console") as r:
        assert r.headers["content-type"].startswith("text/html")
        assert b"/console/data" in r.read()
    # A commit the control plane follows: written straight to MinIO, warmed through the fleet.
    writer = iceberg(stack["rest_port"], stack["minio"].port, ORIGIN_KEY, ORIGIN_SECRET)
    writer.create_namespace_if_not_exists(NS)
    table = writer.create_table(f"{NS}.events", schema=pa.schema([("id", pa.int64()), ("p", pa.int32())]))
    table.append(pa.table({"id": pa.array(range(1000), pa.int64()),
                           "p": pa.array([i % 4 for i in range(1000)], pa.int32())}))
    name = f"{NS}.events"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(f"{base}/console")
        wait_dom(page, "the page loaded its document", "document.body.dataset.loaded === 'true'")
        row = f'#tables tr[data-table="{name}"]'
        wait_dom(page, "the table's warm to be done",
                 f"document.querySelector('{row} .warm-phase')?.textContent === 'warm'")
        done, total = dom(page, f"document.querySelector('{row} .warm-count').textContent").split("/")
        assert int(total) > 0 and done == total, (done, total)
        bar = dom(page, f"document.querySelector('{row} [role=progressbar]').getAttribute('aria-valuenow')")
        assert bar == "100"
        snapshot = table.refresh().metadata.current_snapshot_id
        assert dom(page, f"document.querySelector('{row} .snapshot').textContent") == str(snapshot)
        # Both nodes, active, with their DRAM ceilings.
        wait_dom(page, "both nodes listed active",
                 "[...document.querySelectorAll('#fleet tbody tr')].filter("
                 "r => r.querySelector('.state-active')).length === 2")
        ids = dom(page, "[...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.node).sort()")
        assert ids == sorted(nd.name for nd in stack["nodes"])
        # Pinned with the page's button: the row reaches `kept`, each node's kept store holds it.
        page.select_option("#pin-table", name)
        page.click("#pin-button")
        wait_dom(page, "the pin kept",
                 f"document.querySelector('#pins tr[data-pin=\"{name}\"][data-phase=\"kept\"]') !== null")
        assert dom(page, "document.querySelector('#pin-msg').dataset.status") == "201"
        assert dom(page, f"document.querySelector('#pins tr[data-pin=\"{name}\"] .pin-files').textContent") == "1"
        assert sum(nd.admin("GET", f"/kept?bucket={BUCKET}")["keys"] for nd in stack["nodes"]) == 2
        # The table's bytes, and what the fleet holds of them: the pinned file whole on its
        # owner, beside the footer copies the warm put on every node.
        size = int(dom(page, f"document.querySelector('{row} .table-bytes').dataset.bytes"))
        assert size == sum(f.file.file_size_in_bytes for f in table.refresh().scan().plan_files())
        wait_dom(page, "the fleet's held bytes of the table",
                 f"Number(document.querySelector('{row} .held').dataset.held) >= {size}", timeout=60)
        # Heat: the table read through Floe (PyIceberg at its defaults) heats its columns.
        reader = iceberg(stack["rest_port"], stack["nodes"][0].port, *CLIENT)
        assert reader.load_table(name).scan().to_arrow().num_rows == 1000
        wait_dom(page, "the table's heat map",
                 f"document.querySelectorAll('[data-heat=\"{name}\"] rect').length > 0")
        # A write staged on the fleet shows in write-back, then leaves it once propagated.
        s3_client(stack["nodes"][0].port).put_object(Bucket=BUCKET, Key="console/staged.bin", Body=b"x" * 4096)
        wait_dom(page, "the write-back rows", "document.querySelectorAll('#writeback tbody tr').length === 2")
        wait_until("the write to reach the origin", lambda: all(
            nd.admin("GET", "/writeback")["indexed_objects"] == 0 for nd in stack["nodes"]), timeout=60)
        wait_dom(page, "the page to count the propagated write",
                 "[...document.querySelectorAll('#writeback .propagated')].reduce((n, c) => n + Number(c.textContent), 0) === 1")
        # A run, dispatched by hand, with its result, duration and log.
        req = urllib.request.Request(f"{base}/deployments/nightly-rollup/dispatch", data=b"{}", method="POST",
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req) as r:
            assert r.status == 202
        wait_dom(page, "the deployment listed",
                 "document.querySelector('#deployments tr[data-deployment=\"nightly-rollup\"]') !== null")
        wait_dom(page, "the run done", "document.querySelector('#runs tr[data-result=\"ok\"]') !== null")
        log = dom(page, "document.querySelector('#runs tr[data-result=\"ok\"] pre.log').textContent")
        assert "done with" in log, log
        page.screenshot(path=str(ARTIFACTS / "console.png"), full_page=True)
        browser.close()
