"""Which NVIDIA device nodes lack their /dev/char/MAJOR:MINOR link (plugins/module_utils/dev_char.py), over a
made-up /dev tree with real character device nodes (root only: mknod)."""

from __future__ import annotations

import os
import stat

import pytest
from ansible_collections.a800.vllm.plugins.module_utils.dev_char import dev_char_report
from conftest import ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of character devices needs root")


def make_dev(tmp_path, gpus=2):
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    nodes = {f"nvidia{i}": (195, i) for i in range(gpus)}
    nodes |= {"nvidiactl": (195, 255), "nvidia-uvm": (510, 0), "nvidia-caps/nvidia-cap1": (234, 1)}
    for name, (major, minor) in nodes.items():
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    (dev / "nvidia-not-a-device").write_text("")
    return dev, nodes


def test_every_node_is_missing_until_linked(tmp_path):
    dev, nodes = make_dev(tmp_path)
    report = dev_char_report(str(dev), str(dev / "char"))
    assert report["gpus"] == 2
    assert sorted(report["missing"]) == sorted(str(dev / n) for n in nodes)
    (dev / "char").mkdir()
    for name, (major, minor) in nodes.items():  # what nvidia-ctk does: absolute targets
        (dev / "char" / f"{major}:{minor}").symlink_to(dev / name)
    report = dev_char_report(str(dev), str(dev / "char"))
    assert report["missing"] == [] and {n["link"] for n in report["nodes"]} == {"ok"}


def test_a_link_to_something_else_counts_as_missing(tmp_path):
    dev, nodes = make_dev(tmp_path, gpus=1)
    (dev / "char").mkdir()
    for name, (major, minor) in nodes.items():
        (dev / "char" / f"{major}:{minor}").symlink_to(dev / name)
    (dev / "char" / "195:0").unlink()
    (dev / "char" / "195:0").symlink_to(dev / "nvidiactl")
    report = dev_char_report(str(dev), str(dev / "char"))
    assert report["missing"] == [str(dev / "nvidia0")]
    assert [n["link"] for n in report["nodes"] if n["path"].endswith("nvidia0")] == ["wrong"]


def test_no_driver_no_nodes(tmp_path):
    (tmp_path / "dev").mkdir()
    assert dev_char_report(str(tmp_path / "dev"), str(tmp_path / "dev/char")) == {"nodes": [], "missing": [], "gpus": 0}


def test_the_nodes_of_a_real_gpu_host(tmp_path):
    """The device nodes recorded on a real H200 host (tests/fixtures/hosts/nvidia-h200-ubuntu-24.04/dev-nodes.txt),
    made again under a temporary /dev: the module finds every one of them, and that none has its link."""
    recorded = (ROOT / "tests/fixtures/hosts/nvidia-h200-ubuntu-24.04/dev-nodes.txt").read_text().splitlines()
    dev = tmp_path / "dev"
    expected = {}
    for line in recorded:
        path, *_, numbers = line.split()
        if "character special file" not in line:
            continue
        major, minor = (int(n, 16) for n in numbers.split(":"))
        node = dev / path.removeprefix("/dev/")
        node.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        expected[str(node)] = (major, minor)
    assert len(expected) == 6
    report = dev_char_report(str(dev), str(dev / "char"))
    assert {n["path"]: (n["major"], n["minor"]) for n in report["nodes"]} == expected
    assert sorted(report["missing"]) == sorted(expected) and report["gpus"] == 1
