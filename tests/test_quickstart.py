"""The README's quickstart config runs on its embedded origin (s3s-fs over a local folder):
objects written through Floe land in the folder and are served from the cache on re-read."""
import json
import os
import urllib.request

from conftest import FLOE_BIN, ROOT, Proc, free_port, s3_client


def admin_stats(port):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/stats", headers={"Authorization": "Bearer floe-admin"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def test_quickstart_config_serves_and_caches(tmp_path):
    port, mport, aport = free_port(), free_port(), free_port()
    text = (ROOT / "conf" / "quickstart.yaml").read_text()
    text = (text.replace("127.0.0.1:9000", f"127.0.0.1:{port}").replace("127.0.0.1:9100", f"127.0.0.1:{mport}")
            .replace("127.0.0.1:9101", f"127.0.0.1:{aport}").replace(".floe-data", str(tmp_path / "data"))
            .replace(".floe-cache", str(tmp_path / "cache")))
    (tmp_path / "q.yaml").write_text(text)
    p = Proc([str(FLOE_BIN), "--config", str(tmp_path / "q.yaml")], dict(os.environ), tmp_path / "floe.log", port, "floe")
    try:
        s3 = s3_client(port, "floe", "floe-quickstart-secret")
        body = os.urandom(3 << 20)
        s3.put_object(Bucket="warehouse", Key="t/data/x.parquet", Body=body)
        assert (tmp_path / "data" / "warehouse" / "t" / "data" / "x.parquet").read_bytes() == body
        first = s3.get_object(Bucket="warehouse", Key="t/data/x.parquet", Range="bytes=0-1048575")
        assert first["Body"].read() == body[:1 << 20]
        # The PUT of a Parquet file warms its footer; that fill covers the whole (single) block, so
        # the first read misses, joins it ("wait") or, when the warm was done first, hits; a
        # re-read made while it still runs waits on it too; once it is stored, "hit". Never a
        # second "miss": the read's block (2 MiB) came from the origin once at most.
        assert first["ResponseMetadata"]["HTTPHeaders"]["x-floe-cache"] in ("miss", "wait", "hit")
        labels = []
        while "hit" not in labels:
            assert len(labels) < 200, labels
            again = s3.get_object(Bucket="warehouse", Key="t/data/x.parquet", Range="bytes=0-1048575")
            assert again["Body"].read() == body[:1 << 20]
            labels.append(again["ResponseMetadata"]["HTTPHeaders"]["x-floe-cache"])
        assert set(labels) <= {"wait", "hit"}, labels
        stats = admin_stats(aport)
        assert 0 < stats["data"]["origin_bytes"] <= 2 << 20, stats["data"]
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["warehouse"]
    finally:
        p.stop()
