"""The client-matrix program for the MinIO client `mc`, driven through its command line with
an alias for the endpoint. Same protocol as tests/clients/go/main.go:

    mc_check.py MC write|read ENDPOINT BUCKET PREFIX DIR"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile


def main():
    mc, mode, endpoint, bucket, prefix, d = sys.argv[1:7]
    d = pathlib.Path(d)
    with tempfile.TemporaryDirectory() as conf:
        def run(*args, **kw):
            r = subprocess.run([mc, "--config-dir", conf, "--quiet", *args], capture_output=True, timeout=300, **kw)
            if r.returncode != 0:
                sys.exit(f"mc {' '.join(args)}: {r.stderr.decode()[-2000:]}")
            return r.stdout

        run("alias", "set", "t", endpoint, os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
            "--api", "S3v4", "--path", "on")
        base = f"t/{bucket}/{prefix}"
        if mode == "write":
            for name in ("small", "big"):
                run("cp", str(d / f"{name}.bin"), f"{base}/{name}")
            return
        out = d / "out"
        out.mkdir(exist_ok=True)
        (out / "big").write_bytes(run("cat", f"{base}/big"))
        (out / "range").write_bytes(run("cat", "--offset", "1000", f"{base}/big")[:2000])
        entries = [json.loads(line) for line in run("ls", "--json", "--recursive", base + "/").splitlines()]
        lines = sorted(f"{prefix}/{e['key']} {e['size']}" for e in entries)
        (out / "list").write_text("\n".join(lines) + "\n")
        stat = json.loads(run("stat", "--json", f"{base}/small"))
        (out / "head").write_text(f"{stat['size']} \"{stat['etag']}\"\n")


if __name__ == "__main__":
    main()
