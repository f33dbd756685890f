"""The launch filters: rendering from the prod model profile (plugins/filter/vllm_launch.py), and each rule of the
validation failing on the pitfall it names (plugins/filter/vllm_launch_rules.py) — the article's and vLLM's
(docs/article.md, docs/vllm.md); the message of a failed start (plugins/filter/vllm_failure.py)."""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.vllm_failure import vllm_failure_message
from ansible_collections.a800.vllm.plugins.filter.vllm_launch import (
    vllm_command_line,
    vllm_launch_args,
    vllm_ready_timeout,
)
from ansible_collections.a800.vllm.plugins.filter.vllm_launch_rules import (
    FLAG_TABLE,
    image_release,
    recorded_choices,
    vllm_argcheck_result,
    vllm_launch_checks,
)
from conftest import VOCABULARY

ROOT = Path(__file__).resolve().parents[2]
PROFILE = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"]
SERVE_DEFAULTS = yaml.safe_load((ROOT / "roles/serve/defaults/main/main.yml").read_text())
ARGCHECK = ROOT / "roles/serve/files/vllm_argcheck.py"
DOUBLE_SRC = ROOT / "tests/doubles/vllm/src"

# The article's `docker run` (docs/article.md#the-launch), after the image name.
ARTICLE = shlex.split(
    "/models/GLM-5.2-NVFP4 --host 0.0.0.0 --port 8001 --tensor-parallel-size 8 --trust-remote-code --dtype bfloat16 "
    "--gpu-memory-utilization 0.95 --max-model-len 65536 --kv-cache-dtype bfloat16 --max-num-seqs 16 "
    "--max-num-batched-tokens 8192 --served-model-name glm-5.2-nvfp4 "
    "--attention-config '{\"sparse_mla_force_mqa\": true}' --tool-call-parser glm47 --enable-auto-tool-choice "
    '--reasoning-parser glm45 --speculative-config \'{"method":"mtp","num_speculative_tokens":5}\''
)

# A800 host as the serve role sees it; values arrive as Ansible renders them (strings).
HOST = {"gpu_count": 8, "compute_caps": ["8.0"], "gpu_memory_mib": 81920}


def _options(argv: list[str]) -> dict[str, object]:
    """Flags → value (True for bare flags); JSON values parsed so that spacing and key order do not matter."""
    out: dict[str, object] = {"model": argv[0]}
    i = 1
    while i < len(argv):
        flag = argv[i]
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value = argv[i + 1]
            out[flag] = json.loads(value) if value.startswith("{") else value
            i += 2
        else:
            out[flag] = True
            i += 1
    return out


def render(launch: dict | None = None, extra: list | None = None) -> list[str]:
    return vllm_launch_args(
        PROFILE["launch"] if launch is None else launch,
        PROFILE["weights"]["container_dir"],
        PROFILE["served_model_name"],
        "0.0.0.0",
        8001,
        extra,
    )


def context(**over) -> dict:
    ctx = {
        "env": {},
        "served_model_name": PROFILE["served_model_name"],
        "sparse_attention": True,
        "quantization": "nvfp4",
        "memory_model": PROFILE["memory_model"],
        "known_parsers": SERVE_DEFAULTS["serve_known_parsers"],
        "weights_gb": 433.0,
        "ready_timeout_s": "2460",
        "min_ready_timeout_s": "1620",
        **HOST,
    }
    ctx.update(over)
    return ctx


def checks_of(launch: dict | None = None, **over) -> dict[str, dict]:
    return {c["name"]: c for c in vllm_launch_checks(PROFILE["launch"] if launch is None else launch, context(**over))}


def launch_with(**changes) -> dict:
    launch = copy.deepcopy(PROFILE["launch"])
    for key, value in changes.items():
        if value is None:
            launch.pop(key, None)
        else:
            launch[key] = value
    return launch


def failed(checks: dict[str, dict]) -> dict[str, dict]:
    return {name: c for name, c in checks.items() if c["status"] == "fail"}


def test_profile_renders_every_flag_of_the_article_and_selects_the_backend_by_flag():
    ours, article = _options(render()), _options(ARTICLE)
    for flag, value in article.items():
        assert ours.get(flag) == value, flag
    # docs/vllm.md#where-vllm-corrects-the-article: the backend by flag (the env var is ignored by 0.26.0)
    assert ours["--attention-backend"] == "TRITON_MLA_SPARSE"
    # docs/fleet.md#the-engines-drain: a stop lets the requests in flight finish (vLLM's default 0 aborts them)
    assert ours["--shutdown-timeout"] == "120"
    assert set(ours) - set(article) == {"--attention-backend", "--shutdown-timeout"}


def test_rendering_rules_for_booleans_mappings_lists_and_extra_args():
    args = render(
        {"a_flag": True, "off": False, "unset": None, "cfg": {"b": 1, "a": 2}, "many": [1, 2], "n": 3}, ["--x"]
    )
    assert args[7:] == ["--a-flag", "--cfg", '{"a":2,"b":1}', "--many", "1", "2", "--n", "3", "--x"]
    assert "--off" not in args and "--unset" not in args


def test_article_profile_passes_every_rule():
    checks = checks_of()
    assert not failed(checks), failed(checks)
    assert {"tensor_parallel_memory", "sparse_mla_force_mqa", "backend_by_flag", "kv_cache_dtype_backend"} <= set(
        checks
    )


@pytest.mark.parametrize(
    ("changes", "rule", "fix_says"),
    [
        ({"kv_cache_dtype": "bf16"}, "kv_cache_dtype", "bfloat16"),
        ({"dtype": "bf16"}, "dtype", "bfloat16"),
        ({"tensor_parallel_size": 4}, "tensor_parallel_memory", "tensor_parallel_size to 8"),
        ({"tensor_parallel_size": 16}, "tensor_parallel_gpus", "at most 8"),
        ({"tensor_parallel_size": "eight"}, "tensor_parallel_gpus", "number of GPUs"),
        ({"attention_config": {}}, "sparse_mla_force_mqa", "sparse_mla_force_mqa: true"),
        ({"attention_config": '{"sparse_mla_force_mqa": true'}, "json_option:attention_config", "valid JSON"),
        ({"speculative_config": "{method: mtp}"}, "json_option:speculative_config", "valid JSON"),
        ({"kv_cache_dtype": "fp8"}, "kv_cache_dtype_backend", "bfloat16"),
        ({"attention_backend": None}, "backend_by_flag", "attention_backend"),
        ({"attention_backend": "FLASH_ATTN"}, "sparse_backend", "TRITON_MLA_SPARSE"),
        ({"attention_backend": "FLASHMLA_SPARSE"}, "sparse_backend", "TRITON_MLA_SPARSE"),
        ({"reasoning_parser": "glm-45"}, "parser:reasoning_parser", "glm45"),
        ({"tool_call_parser": "glm5"}, "parser:tool_call_parser", "glm47"),
        ({"tool_call_parser": None}, "parser:auto_tool_choice", "tool_call_parser"),
        ({"load_format": "sharded_state"}, "load_format", "load_format"),
    ],
)
def test_each_pitfall_fails_its_rule_with_a_fix(changes, rule, fix_says):
    checks = checks_of(launch_with(**changes))
    assert rule in failed(checks), checks.get(rule)
    assert fix_says in checks[rule]["fix"]
    assert checks[rule]["fact"].startswith(("model_profile", "serve_"))


def test_the_choices_are_the_recorded_tables_and_the_releases_are_named():
    """--dtype and --kv-cache-dtype are judged against the recorded option table (one home: no tuple of choices in
    the rules' file); a choice only a newer release has passes with both releases named, the served image's parser
    having the last word; an invalid one fails with the table's release and the escape."""
    table = yaml.safe_load(FLAG_TABLE.read_text())
    release, choices = recorded_choices()
    assert release == table["a800_vllm_serve_flags_version"] == "0.32.0"
    for key in ("dtype", "kv_cache_dtype"):
        assert list(choices[key]) == table["a800_vllm_serve_flags"][key]["choices"]
    rules_file = Path(vllm_launch_checks.__code__.co_filename).read_text()
    assert '"fp8_e4m3"' not in rules_file and '"half"' not in rules_file  # no copy of the table's choices
    served = "vllm/vllm-openai:v0.26.0-glm52-sm80"
    newer = checks_of(launch_with(kv_cache_dtype="nvfp4"), served_image=served)["kv_cache_dtype"]
    assert newer["status"] == "pass", newer
    assert newer["detail"] == (
        "--kv-cache-dtype nvfp4 is a choice of vLLM 0.32.0 (the recorded table); the served image is vLLM 0.26.0, "
        "whose own parser has the last word (vllm_argument_parser)"
    )
    same = checks_of(launch_with(kv_cache_dtype="fp8"), served_image="vllm/vllm-openai:v0.32.0")["kv_cache_dtype"]
    assert same["detail"] == "--kv-cache-dtype fp8 is a choice of vLLM 0.32.0 (the recorded table)"
    bad = checks_of(launch_with(kv_cache_dtype="bf16"), served_image=served)["kv_cache_dtype"]
    assert bad["status"] == "fail" and bad["expected"] == list(choices["kv_cache_dtype"])
    assert "invalid choice: 'bf16'" in bad["detail"] and "not a choice of vLLM 0.32.0" in bad["detail"]
    assert bad["fix"].startswith("set model_profile.launch.kv_cache_dtype to bfloat16")
    assert "serve_validate_skip" in bad["fix"]


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("vllm/vllm-openai:v0.26.0-glm52-sm80", "0.26.0"),
        ("vllm/vllm-openai:v0.32.0", "0.32.0"),
        ("registry.example:5000/vllm/vllm-openai:0.30.1", "0.30.1"),  # a registry's port is not the tag
        ("vllm/vllm-openai:v0.26.0@sha256:" + "0" * 64, "0.26.0"),
        ("registry.example:5000/glm52-serving", None),
        ("vllm/vllm-openai:latest", None),
        ("", None),
    ],
)
def test_the_release_a_serving_images_tag_names(image, release):
    assert image_release(image) == release


def test_the_image_parsers_outcome_is_read_from_its_registered_result():
    """One reading of files/vllm_argcheck.py's output, for the preflight's stop and both phases' rule."""
    refused = {"rc": 2, "stdout_lines": ["noise", '{"ok": false, "error": "vllm serve: error: ambiguous option"}'],
               "stderr": "x"}  # fmt: skip
    assert vllm_argcheck_result(refused) == {"rc": 2, "error": "vllm serve: error: ambiguous option"}
    assert vllm_argcheck_result({"rc": 0, "stdout_lines": ['{"ok": true, "error": ""}']}) == {"rc": 0, "error": ""}
    assert vllm_argcheck_result({"rc": 125, "stdout_lines": [], "stderr": " no such image \n"}) == {
        "rc": 125,
        "error": "no such image",
    }
    assert vllm_argcheck_result({"skipped": True}) is None and vllm_argcheck_result(None) is None
    assert vllm_argcheck_result({"skipped": True}, True) == {"rc": 0, "running": True}


def test_the_env_var_alone_does_not_select_the_backend():
    launch = launch_with(attention_backend=None, env={"VLLM_ATTENTION_BACKEND": "TRITON_MLA_SPARSE"})
    check = checks_of(launch)["backend_by_flag"]
    assert check["status"] == "fail" and "ignored by 0.26.0" in check["detail"]
    # with the flag as well, the variable is redundant: a warning
    both = checks_of(launch_with(env={"VLLM_ATTENTION_BACKEND": "TRITON_MLA_SPARSE"}))["backend_by_flag"]
    assert both["status"] == "warn"


def test_backend_inside_attention_config_counts_as_selected_by_flag():
    launch = launch_with(
        attention_backend=None, attention_config={"backend": "TRITON_MLA_SPARSE", "sparse_mla_force_mqa": True}
    )
    assert checks_of(launch)["backend_by_flag"]["status"] == "pass"


def test_memory_arithmetic_names_the_numbers():
    check = checks_of(launch_with(tensor_parallel_size=4))["tensor_parallel_memory"]
    assert check["measured"] == "118.1 GB per GPU"  # 433 / 4 * 1.05 + 2.4 + 2
    assert "CUDA out of memory" in check["detail"]
    small = checks_of(gpu_memory_mib=40960)["tensor_parallel_memory"]  # A800 40 GB
    assert small["status"] == "fail" and "16" in small["fix"]


def test_served_name_and_ready_timeout_rules():
    assert failed(checks_of(served_model_name=""))["served_model_name"]
    short = failed(checks_of(ready_timeout_s="600"))["ready_timeout"]
    assert "1620" in short["fix"] and short["fact"] == "serve_ready_timeout_s"


@pytest.mark.parametrize(
    ("address", "key", "status"),
    [
        ("127.0.0.1", False, "pass"),
        ("localhost", False, "pass"),
        ("0.0.0.0", False, "fail"),
        ("10.1.2.3", False, "fail"),
        ("0.0.0.0", True, "pass"),
    ],
)
def test_the_server_is_not_open_by_default(address, key, status):
    """Published beyond loopback only with an API key; the pass with a key still says what --api-key leaves open."""
    rule = checks_of(publish_address=address, api_key_set=key)["exposure"]
    assert rule["status"] == status, rule
    if status == "fail":
        assert "serve_api_key" in rule["fix"] and "serve_publish_address: 127.0.0.1" in rule["fix"]
    if key:
        assert "/v1 routes" in rule["detail"] and "/tokenize" in rule["detail"]
    assert SERVE_DEFAULTS["serve_publish_address"] == "{{ a800_serve_publish_address }}"
    assert VOCABULARY["a800_serve_publish_address"] == "127.0.0.1"


def test_host_rules_pending_without_facts_and_failing_in_strict_mode():
    loose = checks_of(gpu_count=None, gpu_memory_mib=None)
    assert loose["tensor_parallel_gpus"]["status"] == "pending"
    assert loose["image_self_check"]["status"] == "pending"
    strict = checks_of(strict=True)
    assert strict["image_self_check"]["status"] == "fail" and strict["weights_verified"]["status"] == "fail"


def test_host_rules_with_facts():
    ours = {"port": 8001, "in_use": True, "listener": "LISTEN 0 4096 0.0.0.0:8001"}
    good = checks_of(
        port=ours,
        port_holder="ours",
        image={"ref": "sha256:abc", "self_check_ok": True},
        weights_check={"ok": True, "summary": "checkpoint OK"},
        argcheck={"rc": 0, "error": ""},
    )
    assert not failed(good)
    bad = checks_of(
        port=ours,
        port_holder="other",
        image={"ref": "sha256:abc", "self_check_ok": False},
        weights_check={"ok": False, "summary": "checkpoint BROKEN"},
        argcheck={"rc": 2, "error": "argument --kv-cache-dtype: invalid choice: 'bf16'"},
    )
    assert set(failed(bad)) == {"port_free", "image_self_check", "weights_verified", "vllm_argument_parser"}
    assert "bf16" in bad["vllm_argument_parser"]["detail"]
    running = checks_of(argcheck={"rc": 0, "running": True})["vllm_argument_parser"]
    assert running["status"] == "pass" and "the server runs this command line on this image" in running["detail"]


def test_skipped_rule_warns_instead_of_failing():
    checks = checks_of(ready_timeout_s="60", skip=["ready_timeout"])
    assert checks["ready_timeout"]["status"] == "warn" and "skipped" in checks["ready_timeout"]["detail"]


def test_ready_timeout_is_sized_from_the_weights():
    rates = PROFILE["load_time"]
    assert vllm_ready_timeout(433, rates) == 2460  # (433 / 0.33 + 300) * 1.5, in whole minutes
    assert vllm_ready_timeout(433, rates, 1, 0) == 1620
    assert vllm_ready_timeout(2, rates) == 600  # never below vLLM's default


def test_command_line_quotes_json_and_holds_no_secret():
    spec = {
        "name": "glm52-nvfp4",
        "image": "sha256:0123",
        "gpus": "all",
        "ipc_mode": "host",
        "ulimits": ["memlock:-1:-1"],
        "restart_policy": "unless-stopped",
        "env": {"VLLM_ENGINE_READY_TIMEOUT_S": "2460"},
        "volumes": ["/data/models:/models:ro"],
        "published_ports": ["0.0.0.0:8001:8001"],
        "labels": {"io.a800-vllm.config-hash": "abc"},
        "entrypoint": ["/bin/sh", "-c", 'exec vllm serve "$@"', "vllm-serve"],
        "command": render(),
    }
    line = vllm_command_line(spec)
    argv = shlex.split(line)
    assert argv[argv.index("--attention-config") + 1] == '{"sparse_mla_force_mqa":true}'
    assert "--ipc=host" in argv and argv[argv.index("--entrypoint") + 1] == "/bin/sh"
    assert argv[argv.index("--ulimit") + 1] == "memlock=-1:-1"  # docker run's spelling, not docker_container's
    assert "--stop-timeout" not in argv  # a spec without one: Docker's default
    argv = shlex.split(vllm_command_line(dict(spec, stop_timeout="150")))
    assert argv[argv.index("--stop-timeout") + 1] == "150"


def test_failure_message_has_diagnosis_fix_and_log_lines():
    ready = {
        "state": "failed",
        "message": "the container exited (code 1)",
        "diagnosis": [{"name": "cuda_oom", "cause": "weights do not fit", "fix": "raise TP", "context": ["E1", "E2"]}],
        "log_tail": ["x"],
    }
    text = vllm_failure_message(ready, {"message": "restored abc"})
    assert "DIAGNOSIS cuda_oom: weights do not fit FIX: raise TP" in text
    assert "  E2" in text and "ROLLBACK: restored abc" in text


@pytest.mark.parametrize("python", ["double", pytest.param("real", marks=pytest.mark.contract)])
def test_argcheck_script_uses_the_image_parser(python, request):
    """roles/serve/files/vllm_argcheck.py against the double's package and the real vLLM (contract venv)."""
    if python == "real":
        exe = ROOT / ".venv-vllm/bin/python"
        if not exe.exists():
            pytest.skip("the real vLLM venv is made by `make contract-venv`")
        env = {"VLLM_TARGET_DEVICE": "cpu", "PATH": "/usr/bin:/bin"}
    else:
        exe, env = Path(sys.executable), {"PYTHONPATH": str(DOUBLE_SRC), "PATH": "/usr/bin:/bin"}
    script = ARGCHECK.read_text()
    good = subprocess.run([str(exe), "-c", script, *render()], capture_output=True, text=True, env=env, timeout=120)
    bad_argv = render(launch_with(kv_cache_dtype="bf16"))
    bad = subprocess.run([str(exe), "-c", script, *bad_argv], capture_output=True, text=True, env=env, timeout=120)
    assert good.returncode == 0, good.stdout + good.stderr
    assert json.loads(good.stdout.splitlines()[-1]) == {"ok": True, "error": ""}
    assert bad.returncode == 2
    assert "invalid choice: 'bf16'" in json.loads(bad.stdout.splitlines()[-1])["error"]


# --- value_ranges: bounds vLLM enforces after parsing (held to the real engine in tests/contract) ---------------
@pytest.mark.parametrize(
    ("key", "value", "ok"),
    [
        ("gpu_memory_utilization", 1.5, False),
        ("gpu_memory_utilization", 1.0, True),
        ("gpu_memory_utilization", 0, False),
        ("gpu_memory_utilization", "0.9", True),  # a string from -e is a number to vLLM too
        ("max_num_seqs", 0, False),
        ("max_num_batched_tokens", 1, True),
        ("block_size", -16, False),
    ],
)
def test_values_outside_vllms_bounds_fail_naming_the_variable_and_the_range(key, value, ok):
    launch = copy.deepcopy(PROFILE["launch"]) | {key: value}
    verdict = checks_of(launch)["value_ranges"]
    assert (verdict["status"] == "pass") is ok, verdict
    if not ok:
        assert f"model_profile.launch.{key} = {value!r} is outside" in verdict["detail"]


def test_a_speculative_token_count_of_zero_fails():
    launch = copy.deepcopy(PROFILE["launch"])
    launch["speculative_config"]["num_speculative_tokens"] = 0
    verdict = checks_of(launch)["value_ranges"]
    assert verdict["status"] == "fail" and "num_speculative_tokens = 0 is outside > 0" in verdict["detail"]


def test_gpu_memory_utilization_1_5_is_outside_0_1():
    verdict = checks_of(copy.deepcopy(PROFILE["launch"]) | {"gpu_memory_utilization": 1.5})["value_ranges"]
    assert "gpu_memory_utilization = 1.5 is outside (0, 1] (CacheConfig)" in verdict["detail"]
