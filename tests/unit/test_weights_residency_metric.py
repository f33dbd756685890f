"""The weights' residency metric script (roles/weights/templates/a800-weights-residency.sh.j2), rendered and run on
weights laid out as people lay them out: a Hugging Face snapshot (each shard a symlink into blobs/) behind a
symlinked weights directory. Every reader follows the links; no shard found is no ratio, not a ratio of 0."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import jinja2
import pytest
from conftest import ROOT, locked_in_memory

TEMPLATE = ROOT / "roles/weights/templates/a800-weights-residency.sh.j2"
RATIO = re.compile(r'^a800_weights_pagecache_resident_ratio\{dir="([^"]+)"\} ([0-9.]+)$', re.MULTILINE)
BYTES = re.compile(r'^a800_weights_bytes\{dir="([^"]+)"\} ([0-9]+)$', re.MULTILINE)

pytestmark = pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) is not installed")


def hf_snapshot(root):
    """models--org--name/{blobs/<sha>, snapshots/<rev>/model-0000N-of-00002.safetensors -> ../../blobs/<sha>}, as
    huggingface_hub's snapshot_download lays it out, and a stable path that links to the snapshot."""
    repo = root / "hub" / "models--zai-org--GLM-5.2-NVFP4"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    snapshot.mkdir(parents=True)
    shards = []
    for k in (1, 2):
        blob = repo / "blobs" / f"{k:064x}"
        blob.write_bytes(os.urandom(1024 * 1024) * 4)
        link = snapshot / f"model-{k:05d}-of-00002.safetensors"
        link.symlink_to(os.path.relpath(blob, snapshot))
        shards.append(blob)
    (snapshot / "config.json").symlink_to(os.path.relpath(repo / "blobs" / f"{1:064x}", snapshot))
    stable = root / "models" / "GLM-5.2-NVFP4"
    stable.parent.mkdir()
    stable.symlink_to(snapshot, target_is_directory=True)
    return stable, shards


def run_metric(tmp_path, weights_dir) -> str:
    textfiles = tmp_path / "textfile"
    textfiles.mkdir(exist_ok=True)
    script = jinja2.Template(TEMPLATE.read_text()).render(
        ansible_managed="test", a800_metrics_textfile_dir=str(textfiles), weights_dir=str(weights_dir)
    )
    run = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return (textfiles / "a800_weights.prom").read_text()


def test_a_snapshot_of_symlinks_is_measured(tmp_path):
    weights, shards = hf_snapshot(tmp_path)
    with locked_in_memory(shards):  # resident whatever else presses on memory
        text = run_metric(tmp_path, weights)
    assert BYTES.search(text).groups() == (str(weights), str(2 * 4 * 1024 * 1024)), text
    dir_, ratio = RATIO.search(text).groups()
    assert dir_ == str(weights) and float(ratio) == 1.0, text


def test_no_shard_writes_no_ratio(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    text = run_metric(tmp_path, empty)
    assert RATIO.search(text) is None, text  # an absent series: the alert neither fires nor clears on nothing
    assert BYTES.search(text).groups() == (str(empty), "0"), text
