"""(Named to run last: its three nodes, MinIO and clean-up load the disk, and the fsync-heavy
write-back tests ran slow right after it.)

The soak, short (load/soak.py; the hour-long run is load/soak.sh and its plots are in
load/PERFORMANCE.md): a 3-node fleet at 80% of its measured peak for 60 s with overwrites at the
origin every 10 s, cache purges every 15 s and a node restart: not one failed or wrong answer."""
import os
import pathlib
import subprocess
import sys

from conftest import FLOE_BIN, MINIO_BIN

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_a_short_soak_with_overwrites_purges_and_a_restart_has_no_errors():
    env = dict(os.environ, SOAK_SECONDS="60", SOAK_RESTART_EVERY="30", SOAK_OVERWRITE_EVERY="10",
               SOAK_PURGE_EVERY="15", SOAK_REPORT="0", FLOE_BIN=str(FLOE_BIN), MINIO_BIN=str(MINIO_BIN))
    r = subprocess.run([sys.executable, str(ROOT / "load" / "soak.py")], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert '"errors": 0' in r.stdout and '"restart": 1' in r.stdout, r.stdout[-2000:]
