"""The checkpoint index's declared size, as the serve role reads it: with the image, in the preflight's one read of
the serve role (tasks/argcheck.yml, roles/serve/vars/main.yml `__serve_index_size_argv`), and by tasks/weights_size.yml
from that read. An index is as Hugging Face writes it for a large checkpoint - one weight_map entry per tensor, here
megabytes, more than host_read returns as a file's text - so the host's Python prints the size alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ansible_collections.a800.vllm.plugins.modules.host_read import MAX_CONTENT
from conftest import ROOT
from test_rolling import ansible_playbook

TOTAL_SIZE = 433_112_345_678  # bytes: the profile's 433 GB
SAY = (
    "RESULT {{ {'gb': __serve_weights_gb, 'slurped': __serve_index is not skipped,"
    " 'from_index': __serve_weights_from_index} | to_json }}"
)


def write_index(directory: Path, tensors: int) -> Path:
    """model.safetensors.index.json as transformers' save_pretrained writes it: metadata.total_size, and the shard of
    every tensor (an NVFP4 checkpoint has a weight, two scales and an input scale per quantised linear)."""
    kinds = ("weight", "weight_scale", "weight_scale_2", "input_scale")
    weight_map = {
        f"model.layers.{n // 4096}.mlp.experts.{n // 16 % 256}.down_proj.{n}.{kinds[n % 4]}":
            f"model-{n // 2000 + 1:05d}-of-00081.safetensors"
        for n in range(tensors)
    }  # fmt: skip
    path = directory / "model.safetensors.index.json"
    path.write_text(json.dumps({"metadata": {"total_size": TOTAL_SIZE}, "weight_map": weight_map}, indent=2))
    return path


def weights_size(tmp_path: Path) -> dict:
    play = [{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "vars": {"serve_profile": {"weights": {"host_dir": str(tmp_path), "size_gb": 1.5}},
                 "ansible_python_interpreter": sys.executable},
        "tasks": [
            {"ansible.builtin.include_vars": str(ROOT / "roles/serve/vars/main.yml")},
            {"a800.vllm.host_read": {"commands": {"index": "{{ __serve_index_size_argv }}"}},
             "register": "__serve_preflight_read"},
            {"ansible.builtin.include_tasks": str(ROOT / "roles/serve/tasks/weights_size.yml")},
            {"ansible.builtin.debug": {"msg": SAY}},
        ],
    }]  # fmt: skip
    rc, out = ansible_playbook(tmp_path, play, "-i", "localhost,")
    assert rc == 0, out
    return json.loads(out.split('"RESULT ', 1)[1].split('"\n', 1)[0].replace('\\"', '"'))


def test_a_large_index_is_read_in_the_one_read_and_not_again(tmp_path):
    index = write_index(tmp_path, 120_000)
    assert index.stat().st_size > MAX_CONTENT  # host_read would refuse it as a file's text
    assert weights_size(tmp_path) == {"gb": pytest.approx(TOTAL_SIZE / 1e9), "from_index": True, "slurped": False}


def test_without_an_index_the_profile_s_size_stands_and_the_next_phase_reads_again(tmp_path):
    assert weights_size(tmp_path) == {"gb": 1.5, "from_index": False, "slurped": True}
