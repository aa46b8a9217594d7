"""The container image (deploy/docker/Dockerfile). No container runtime runs on the CI
machine, so the image's contents are checked another way: its build stage builds exactly the
binaries the chart runs, with the workspace's Cargo.lock; the context leaves build output out;
and the binaries, built as the build stage builds them, need no shared library the runtime
image (distroless cc-debian12: glibc and libgcc) lacks."""
import os
import pathlib
import re
import subprocess

import pytest

from conftest import TARGET

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
# What gcr.io/distroless/cc-debian12 ships (plus the kernel's vDSO).
RUNTIME_LIBS = {"linux-vdso.so.1", "libgcc_s.so.1", "libc.so.6", "libm.so.6", "libpthread.so.0",
                "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}


def test_the_build_stage_builds_both_binaries_locked_and_the_runtime_stage_is_non_root():
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM (\S+)(?: AS (\S+))?", text, re.M)
    assert stages[0] == ("rust:1.95-bookworm", "build") and "distroless/cc-debian12" in stages[-1][0]
    assert "cargo build --release --locked --bin floe-proxy --bin floe-control" in text
    assert re.search(r"^USER 65532:65532$", text, re.M)
    assert "COPY --from=build /out/floe-proxy /out/floe-control /usr/local/bin/" in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert "target" in ignored and ".git" in ignored
    # The chart runs what the image holds.
    sts = (ROOT / "deploy" / "helm" / "floe" / "templates" / "statefulset.yaml").read_text()
    assert "args: [floe-proxy, --config, /etc/floe/floe.yaml]" in sts


@pytest.mark.parametrize("binary", ["floe-proxy", "floe-control"])
def test_the_release_binaries_need_only_what_the_runtime_image_has(binary):
    path = TARGET / "release" / binary
    if not path.exists():
        pytest.skip(f"{path} is built by .ci/run (cargo build --release)")
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True).stdout
    libs = {line.split()[0].rsplit("/", 1)[-1] for line in out.splitlines() if line.strip()}
    assert libs <= RUNTIME_LIBS, f"{binary} needs {sorted(libs - RUNTIME_LIBS)}"


def test_the_image_carries_setpriv_and_the_one_library_it_needs_beyond_the_runtime():
    """floe-control starts pipeline workers through `setpriv --pdeathsig KILL` (a worker dies
    with it); distroless has no util-linux, so the build stage copies setpriv and libcap-ng."""
    text = DOCKERFILE.read_text()
    assert "cp /usr/bin/setpriv /out/" in text and "/libcap-ng/" in text
    assert "COPY --from=build /out/setpriv /usr/bin/setpriv" in text
    assert "COPY --from=build /out/lib/ /usr/lib/" in text
    out = subprocess.run(["ldd", "/usr/bin/setpriv"], capture_output=True, text=True, check=True).stdout
    libs = {line.split()[0].rsplit("/", 1)[-1] for line in out.splitlines() if line.strip()}
    assert libs - RUNTIME_LIBS == {"libcap-ng.so.0"}, sorted(libs - RUNTIME_LIBS)
