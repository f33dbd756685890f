"""The launch rule value_ranges (plugins/filter/vllm_launch_rules.py VALUE_RANGES) held to the real vLLM.

Each bound of the rule is one that real vLLM's configuration enforces after argparse accepted the flag: the real
`vllm serve` (CPU build of 0.32.0, on the tiny local model) parses the value and then exits non-zero naming the field
and the bound, before any weight is loaded; on an A800 that happens after the running server was stopped. The rule
must refuse exactly those values, and pass the profile's own. Where serve_validate_skip lets such a value through,
the serve role diagnoses the failed start from its log: the error catalogue must name each of these real refusals
launch_value_out_of_range (the rollback that follows is held on the real engine by the real-engine scenario).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import real_vllm
import yaml
from ansible_collections.a800.vllm.plugins.filter.vllm_launch_rules import VALUE_RANGES, _value_range_check
from ansible_collections.a800.vllm.plugins.module_utils.vllm_log import diagnose, split_lines

ROOT = Path(__file__).resolve().parents[2]
PROFILE = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"]
CATALOGUE = yaml.safe_load((ROOT / "roles/a800/defaults/main/catalogue.yml").read_text())["a800_error_catalogue"]

pytestmark = pytest.mark.contract

# An out-of-range value of each bounded key, the flag that carries it, and what pydantic says about the bound.
CASES = {
    "gpu_memory_utilization": (1.5, ["--gpu-memory-utilization", "1.5"], "less than or equal to 1"),
    "block_size": (0, ["--block-size", "0"], "greater than 0"),
    "max_num_seqs": (0, ["--max-num-seqs", "0"], "greater than or equal to 1"),
    "max_num_batched_tokens": (0, ["--max-num-batched-tokens", "0"], "greater than or equal to 1"),
    "tensor_parallel_size": (0, ["--tensor-parallel-size", "0"], "greater than or equal to 1"),
    "pipeline_parallel_size": (0, ["--pipeline-parallel-size", "0"], "greater than or equal to 1"),
    "speculative_config.num_speculative_tokens": (
        0,
        ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 0, "prompt_lookup_max": 2})],
        "greater than 0",
    ),
    "optimization_level": (4, ["--optimization-level", "4"], "Input should be 0, 1, 2 or 3"),
}


def launch_with(key: str, value: object) -> dict:
    launch = json.loads(json.dumps(PROFILE["launch"]))
    *parents, last = key.split(".")
    target = launch
    for part in parents:
        target = target.setdefault(part, {})
    target[last] = value
    return launch


def test_every_bound_of_the_rule_has_a_case():
    assert set(CASES) == set(VALUE_RANGES)


def test_the_profile_passes():
    assert _value_range_check(PROFILE["launch"])["status"] == "pass"


@pytest.mark.parametrize("key", list(CASES))
def test_real_vllm_refuses_what_the_rule_refuses(key, tiny_model):
    value, flag, bound = CASES[key]
    verdict = _value_range_check(launch_with(key, value))
    assert verdict["status"] == "fail" and f"model_profile.launch.{key} = {value!r}" in verdict["detail"]
    run = real_vllm.run_cli(real_vllm.serve_args(tiny_model, 18999, extra=flag))
    said = run.stdout + run.stderr
    assert run.returncode not in (0, 2), said[-3000:]  # parsed (not exit 2), then refused
    assert key.split(".")[-1] in said and bound in said, said[-3000:]
    assert "Loading safetensors checkpoint shards" not in said  # refused before any weight was read
    found = [entry["name"] for entry in diagnose(split_lines(said), CATALOGUE)]
    assert found[:1] == ["launch_value_out_of_range"], (found, said[-3000:])
