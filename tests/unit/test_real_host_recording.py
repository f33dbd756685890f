"""What the preflight and the host phase's preview printed on real GPU hosts (one NVIDIA H200 on 2026-12-04, one H100
on 2026-12-06; Ubuntu 24.04.3, driver 580.159.04, no python3-apt, in a container without systemd), recorded read-only
as localhost with the production group_vars by tests/testbed/record-real-host.sh (each
tests/fixtures/hosts/*/recorded/README.md). Every recording is held here: when the checks or the preview change,
record again and these say what moved."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

RECORDINGS = sorted(ROOT.glob("tests/fixtures/hosts/*/recorded"))
ROW = re.compile(r"^\s+- '?(?P<status>PASS|WARN|FAIL|PENDING)\s+(?P<name>\S+)\s", re.M)


def rows(recorded, name: str) -> dict[str, str]:
    return {m["name"]: m["status"] for m in ROW.finditer((recorded / name).read_text())}


def test_both_gpu_hosts_are_held():
    assert [p.parent.name for p in RECORDINGS] == ["nvidia-h100-ubuntu-24.04", "nvidia-h200-ubuntu-24.04"]


@pytest.mark.parametrize("recorded", RECORDINGS, ids=lambda p: p.parent.name)
def test_the_preflight_refuses_the_host_on_what_it_lacks_and_nothing_it_misread(recorded):
    """Each host fails on its GPUs (one, compute capability 9.0: the profile wants eight of 8.0, and TP 8 cannot
    run on one), on its disk (64 GB free for 433 GB of weights) and on the production inventory's image settings
    (no sm80 patch set given there): each a true fact of that host or inventory. Nothing failed because a reading
    went wrong: no traceback, no unparsed output, every GPU-state check read."""
    found = rows(recorded, "preflight.txt")
    failed = sorted(name for name, status in found.items() if status == "FAIL")
    assert failed == sorted(
        ["gpu_count", "compute_capability", "tensor_parallel_gpus", "weights_storage", "image_patch_files",
         "image_patch_commit"]
    )  # fmt: skip
    text = (recorded / "preflight.txt").read_text()
    assert "Traceback" not in text and "MODULE FAILURE" not in text
    assert "GPU count: found 1, expected 8" in text and "compute capability: found 9.0, expected 8.0" in text
    # the driver newer than the pin is kept and named, never a failure (issue 31, item 3)
    assert found["driver_pin"] == "WARN" and "580.159.04 runs, newer than the" in text
    for state in ("mig_mode", "ecc_mode", "retired_pages_pending", "row_remap_pending", "row_remap_failure"):
        assert found[state] == "PASS", state
    assert found["python3_apt"] == "WARN"  # what check mode needs, named
    assert "preflight rc=2" in (recorded / "runs.txt").read_text()


@pytest.mark.parametrize("recorded", RECORDINGS, ids=lambda p: p.parent.name)
def test_the_host_phase_preview_gets_past_apt_without_python3_apt(recorded):
    """`playbooks/host.yml --check --diff` on that host: apt's tasks are previewed from dpkg (no `python3-apt must be
    installed to use check mode`), the driver role previews its packages, keeps the newer running driver and shows the
    persistence drop-in it would write; it stops at the first systemd unit, because the recorded host is a container
    without systemd (a real server has it)."""
    text = (recorded / "host-check-diff.txt").read_text()
    assert "python3-apt must be installed" not in text and "Traceback" not in text
    assert "TASK [nvidia_driver : Preview the driver packages from dpkg (check mode without python3-apt)]" in text
    assert "+ExecStart=/usr/bin/nvidia-persistenced --user root --persistence-mode --verbose" in text
    assert 'Failed to find required executable "systemctl"' in text
    assert "no docker" in (recorded / "host.txt").read_text()
    # The plan before any change (docs/field.md#hosts-side-by-side): the newer running driver stays, so no reboot;
    # no Docker engine and no toolkit yet, so dockerd would start anew and the host rolls in its own batch.
    plan = " ".join(text.split("TASK [Say what each host's plan is]")[1].split("TASK [")[0].split())
    assert "in its own batch: not serving; rolls: no Docker engine is installed" in plan, plan
    assert "(driver 580.159.04 runs and stays: no reboot)" in plan, plan
