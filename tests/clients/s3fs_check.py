"""The client-matrix program for s3fs/fsspec (what PyIceberg's and pandas' s3:// paths use),
at its default settings but for the endpoint. Same protocol as tests/clients/go/main.go:

    s3fs_check.py write|read ENDPOINT BUCKET PREFIX DIR

Runs in its own virtualenv (tests/clients/build.sh), as s3fs pins botocore through aiobotocore."""
import os
import pathlib
import sys

import s3fs


def main():
    mode, endpoint, bucket, prefix, d = sys.argv[1:6]
    d = pathlib.Path(d)
    fs = s3fs.S3FileSystem(key=os.environ["AWS_ACCESS_KEY_ID"], secret=os.environ["AWS_SECRET_ACCESS_KEY"],
                           endpoint_url=endpoint, client_kwargs={"region_name": "us-east-1"},
                           config_kwargs={"s3": {"addressing_style": "path"}}, use_listings_cache=False)
    base = f"{bucket}/{prefix}"
    if mode == "write":
        for name in ("small", "big"):
            fs.put_file(str(d / f"{name}.bin"), f"{base}/{name}")
        return
    out = d / "out"
    out.mkdir(exist_ok=True)
    (out / "big").write_bytes(fs.cat_file(f"{base}/big"))
    (out / "range").write_bytes(fs.cat_file(f"{base}/big", start=1000, end=3000))
    lines = [f"{e['name'].split('/', 1)[1]} {e['size']}" for e in sorted(fs.ls(base + "/", detail=True),
                                                                       key=lambda e: e["name"])]
    (out / "list").write_text("\n".join(lines) + "\n")
    info = fs.info(f"{base}/small")
    (out / "head").write_text(f"{info['size']} {info['ETag']}\n")


if __name__ == "__main__":
    main()
