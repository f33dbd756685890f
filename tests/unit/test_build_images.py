"""tests/testbed/build-images.sh builds what is asked for: `demo` only what `make demo` uses (the 2.4 GB real engine
and the gateway stand-in are for the tests), everything by default. Run with recording stand-ins for docker,
apt-get and dpkg-deb (TEST DOUBLES, below) on PATH, on an image store where every image is missing its inputs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

# A docker stand-in: `info` answers, the base image exists, every other image has no inputs label (so each is
# built), and every build, import and pull is recorded as the image's tag. pip download is not reached for `demo`.
FAKE_DOCKER = """#!/bin/sh
echo "$*" >> "$CALLS"
case "$1 $2" in
  "info "*) exit 0 ;;
  "image inspect") case "$*" in *debian12:base*) exit 0 ;; *) echo ""; exit 0 ;; esac ;;
  "image prune") exit 0 ;;
esac
case "$1" in
  build) while [ $# -gt 0 ]; do [ "$1" = -t ] && echo "built $2" >> "$CALLS"; shift; done; exit 0 ;;
  import) cat >/dev/null; for a; do last=$a; done; echo "built $last" >> "$CALLS"; exit 0 ;;
esac
exit 0
"""
FAKE_APT_GET = """#!/bin/sh
[ "$1" = download ] && for a; do :; done && touch "${a}_1.0_amd64.deb"
exit 0
"""
FAKE_DPKG_DEB = """#!/bin/sh
[ "$1" = -x ] || exec REAL "$@"  # the stand-in apt repository's packages are built by the real dpkg-deb
mkdir -p "$3/bin" && touch "$3/bin/busybox"
"""


DPKG_DEB = shutil.which("dpkg-deb") or "dpkg-deb"


def script(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fakes = {"docker": FAKE_DOCKER, "apt-get": FAKE_APT_GET, "dpkg-deb": FAKE_DPKG_DEB.replace("REAL", DPKG_DEB)}
    for name, body in fakes.items():
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    calls = tmp_path / "calls"
    calls.write_text("")
    # the real engine's wheels as if downloaded already (no 900 MB pip download in a unit test)
    wheels = tmp_path / "w/real-engine-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    (wheels / ".requirements").write_text((ROOT / "requirements-contract.txt").read_text())
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", CALLS=str(calls), TESTBED_WORK=str(tmp_path / "w"))
    run = subprocess.run(
        ["bash", str(ROOT / "tests/testbed/build-images.sh"), *args], env=env, capture_output=True, text=True
    )
    return run, calls


def build(tmp_path: Path, *args: str) -> set[str]:
    run, calls = script(tmp_path, *args)
    assert run.returncode == 0, run.stdout + run.stderr
    return {line.split(" ", 1)[1] for line in calls.read_text().splitlines() if line.startswith("built ")}


def test_the_demo_builds_only_what_it_uses(tmp_path):
    assert build(tmp_path, "demo") == {
        "a800-testbed/sim-host:latest",
        "vllm/vllm-openai:v0.26.0",
        "a800-testbed/probe:latest",
    }
    assert (tmp_path / "w/apt-repo").is_dir()  # the stand-in NVIDIA packages the demo installs


def test_by_default_every_image_is_built(tmp_path):
    assert build(tmp_path) == {
        "a800-testbed/sim-host:latest",
        "a800-testbed/sim-host-containerd-store:latest",
        "vllm/vllm-openai:v0.26.0",
        "a800-testbed/gateway-standin:latest",
        "a800-testbed/vllm-cpu:0.32.0",
        "a800-testbed/probe:latest",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless",
    }


@pytest.mark.parametrize("what", ["everything", "dmeo"])
def test_anything_else_than_demo_or_all_is_refused(tmp_path, what):
    run, calls = script(tmp_path, what)
    assert run.returncode == 2
    assert calls.read_text() == ""  # refused before anything ran
    assert "usage:" in run.stderr
