"""The model profile's schema (roles/a800/files/profile_schema.yml) and the flag table of
`vllm serve` (roles/a800/files/vllm_serve_flags.yml): what the role validate_inventory (imported by the role a800,
first in every play) checks before anything runs (plugins/filter/profile.py), and a typo failing
`ansible-playbook site.yml` in its first play."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.profile import a800_profile_checks, extra_args_checks, value_fits
from conftest import ROOT

SCHEMA = yaml.safe_load((ROOT / "roles/a800/files/profile_schema.yml").read_text())["profile"]
FLAGS = yaml.safe_load((ROOT / "roles/a800/files/vllm_serve_flags.yml").read_text())["a800_vllm_serve_flags"]
PROD = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"]
SIM = yaml.safe_load((ROOT / "inventories/sim/group_vars/all/simulated_host.yml").read_text())


def details(profile: dict, extra: list[str] | None = None) -> list[str]:
    return [c["detail"] for c in a800_profile_checks(profile, SCHEMA["options"], FLAGS, extra or [])]


def changed(**sections) -> dict:
    """The prod profile with some keys of its sections replaced (None: removed)."""
    profile = copy.deepcopy(PROD)
    for section, keys in sections.items():
        for key, value in keys.items():
            if value is None:
                profile[section].pop(key)
            else:
                profile[section][key] = value
    return profile


def test_the_prod_and_simulated_profiles_fit():
    assert details(PROD) == []
    merged = copy.deepcopy(PROD)
    for section, keys in SIM["model_profile_overrides"].items():
        merged[section] |= keys
    assert details(merged) == []


def test_a_typo_in_a_launch_key_names_the_path_and_the_nearest_flag():
    profile = changed(launch={"kv_cache_dtype": None, "kv_cache_dtyp": "bfloat16"})
    assert details(profile) == ["model_profile.launch.kv_cache_dtyp: unknown; did you mean kv_cache_dtype?"]
    (record,) = a800_profile_checks(profile, SCHEMA["options"], FLAGS)
    assert (record["name"], record["status"], record["fact"]) == (
        "profile:model_profile.launch.kv_cache_dtyp",
        "fail",
        "model_profile.launch.kv_cache_dtyp",
    )
    assert "model_profile_overrides" in record["fix"]


def test_a_typo_in_a_section_key_names_the_path_the_suggestion_and_what_is_then_missing():
    profile = changed(weights={"host_dir": None, "hostdir": "/data/models/GLM-5.2-NVFP4"})
    assert details(profile) == [
        "model_profile.weights.hostdir: unknown; did you mean host_dir?",
        "model_profile.weights.host_dir: missing (required)",
    ]


def test_an_unknown_section_and_a_key_nothing_is_close_to():
    profile = copy.deepcopy(PROD) | {"baseline": {}}
    profile["launch"] = profile["launch"] | {"zzz": 1}
    assert details(profile) == [
        "model_profile.baseline: unknown; did you mean baselines?",
        "model_profile.launch.zzz: unknown; no known key is close",
    ]


def test_a_flag_written_with_dashes_is_told_to_use_underscores():
    profile = changed(launch={"max_num_seqs": None, "max-num-seqs": 16})
    assert details(profile) == ["model_profile.launch.max-num-seqs: unknown; write it with underscores: max_num_seqs"]


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("launch", "tensor_parallel_size", "eight", "'eight' is not an integer (--tensor-parallel-size)"),
        ("launch", "gpu_memory_utilization", "high", "'high' is not a number (--gpu-memory-utilization)"),
        ("launch", "enable_auto_tool_choice", "yes", "'yes' is not true or false (--enable-auto-tool-choice)"),
        ("launch", "max_model_len", "64q", "'64q' is not an integer or a size like 64k (--max-model-len)"),
        ("launch", "speculative_config", "{bad", "'{bad' is not a mapping (or a JSON string) (--speculative-config)"),
        ("launch", "reasoning_parser", {"name": "glm45"}, "{'name': 'glm45'} is not a string (--reasoning-parser)"),
        ("launch", "env", ["A=1"], "not a mapping of names to values"),
        ("hardware", "gpu_count", "eight", "'eight' is not an integer"),
        ("smoke", "max_tokens", "many", "'many' is not an integer"),
    ],
)  # fmt: skip
def test_a_value_of_the_wrong_type_is_named_with_its_path(section, key, value, message):
    assert details(changed(**{section: {key: value}})) == [f"model_profile.{section}.{key}: {message}"]


@pytest.mark.parametrize(
    ("key", "value"),
    [("max_model_len", "64k"), ("max_model_len", 65536), ("tensor_parallel_size", "8"),
     ("speculative_config", '{"method": "mtp"}'), ("gpu_memory_utilization", 1)],
)  # fmt: skip
def test_what_vllm_parses_is_accepted(key, value):
    assert details(changed(launch={key: value})) == []


def test_flags_beyond_the_table_are_accepted_when_named():
    profile = changed(launch={"some_new_flag": True})
    assert details(profile) == ["model_profile.launch.some_new_flag: unknown; no known key is close"]
    assert details(profile, ["--some-new-flag"]) == [] and details(profile, ["some_new_flag"]) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--max-log-len", "100"],  # a flag and its value
        ["--max_log_len=100"],  # underscores and =, as FlexibleArgumentParser takes them
        ["--no-enable-prefix-caching"],  # the --no- form of a boolean
        ["--max-num-seq", "64"],  # a prefix of one flag (argparse's allow_abbrev)
        ["-O", "3", "--", "lots"],  # short options and what follows -- are the image parser's
        ["--max-model-len", "64k"],  # vLLM's human-readable integers
        ["--max-model-len=25.6k"],
        ["--max-model-len", "-1"],  # a negative number is a value, not an option
        ["--max-model-len", " 64 "],  # int() strips the spaces
        ["--hf-token"],  # a flag whose value may be left out (nargs "?")
        ["--hf-token", "--max-model-len", "8"],
        ["--max-model-len", "-"],  # "-" alone is a value to argparse
        ["--max-model-len", "-5 x"],  # so is a word with a space
        ["--max-model-len="],  # an empty value, given
        ["--max-mod"],  # the value of a prefix is the image parser's
        ["--max-mod", "lots"],
        ["--gpu-memory-utilization", "9.5e-1"],
        ["--kv-cache-dtype", "FP8"],  # a choice in another case: the parser's to judge
        ["--max-num-seqs", "None"],  # optional_type: "" and "None" are None
        ["--served-model-name", "lots"],  # a string
    ],
)
def test_extra_args_vllm_takes_are_not_refused(args):
    assert extra_args_checks(args, FLAGS) == []


@pytest.mark.parametrize(
    ("args", "detail"),
    [
        (["--max-model-len", "lots"], "--max-model-len 'lots' is not an integer or a size like 64k"),
        (["--max_model_len=1.5K"], "--max_model_len '1.5K' is not an integer or a size like 64k"),  # vLLM: no decimals
        (["--max-num-seqs", "0x8"], "--max-num-seqs '0x8' is not an integer"),
        (["--gpu-memory-utilization", "95%"], "--gpu-memory-utilization '95%' is not a number"),
        (["--kv-cache-dtype", "fp9"], "--kv-cache-dtype 'fp9' is not one of auto, bfloat16,"),
    ],
)
def test_an_extra_flag_value_vllm_cannot_parse_is_refused(args, detail):
    [record] = extra_args_checks(["--max-log-len", "100", *args], FLAGS)
    assert record["detail"].startswith("serve_extra_args: " + detail), record["detail"]
    assert "serve_extra_args" in record["fix"]


@pytest.mark.parametrize(
    ("args", "detail"),
    [
        (["--max-model-len"], "--max-model-len has no value at the end (vllm serve's parser: argument --max-model-len: "
         "expected one argument)"),
        (["--max-model-len", "--enforce-eager"], "--max-model-len has no value before --enforce-eager"),
        (["--max_model_len", "-O3"], "--max_model_len has no value before -O3"),
        (["--served-model-name"], "--served-model-name has no value at the end (vllm serve's parser: argument "
         "--served-model-name: expected at least one argument)"),  # nargs "+"
    ],
)  # fmt: skip
def test_a_flag_without_the_value_it_needs_is_refused_as_argparse_refuses_it(args, detail):
    [record] = extra_args_checks(["--max-log-len", "100", *args], FLAGS)
    assert record["detail"].startswith("serve_extra_args: " + detail), record["detail"]
    assert (record["status"], record["fact"]) == ("fail", "serve_extra_args")


def test_an_unknown_extra_flag_is_named_with_the_nearest_one_and_the_escape():
    [record] = extra_args_checks(["--max-log-len", "100", "--enable-prefix-cachng"], FLAGS)
    assert (record["name"], record["status"], record["fact"]) == (
        "profile:serve_extra_args",
        "fail",
        "serve_extra_args",
    )
    assert record["detail"] == (
        "serve_extra_args: --enable-prefix-cachng is not a flag of vllm serve; did you mean --enable-prefix-caching?"
    )
    assert "a800_launch_extra_flags" in record["fix"]
    assert extra_args_checks(["--some-new-flag=1"], FLAGS, ["--some-new-flag"]) == []  # named in the escape


def test_value_kinds():
    assert value_fits("int", 8) and not value_fits("int", True) and not value_fits("int", 8.5)
    assert value_fits("str", "x", many=True) and value_fits("str", ["a", "b"], many=True)
    assert not value_fits("str", ["a"]) and value_fits("any", object())


def test_every_launch_key_of_the_profile_is_in_the_table_with_its_kind():
    for key, value in PROD["launch"].items():
        if key != "env":
            assert value_fits(FLAGS[key]["kind"], value, bool(FLAGS[key].get("many"))), key


# --- the whole playbook -------------------------------------------------------------------------------------------
@pytest.fixture
def one_host(tmp_path) -> Path:
    """An inventory of one server reached locally, with the prod group_vars (the run must stop before any task on
    it; the connection is local so that nothing could leave this machine anyway)."""
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump(
            {"all": {"children": {"a800_servers": {"hosts": {"a800-typo": {"ansible_connection": "local"}}}}}}
        )
    )
    (tmp_path / "group_vars").symlink_to(ROOT / "inventories/prod/group_vars", target_is_directory=True)
    return tmp_path


def site(inventory: Path, overrides: dict, **extra) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "site.yml", "-i", str(inventory)]
    extra |= {"model_profile_overrides": overrides, "ansible_python_interpreter": sys.executable}
    argv += ["-e", json.dumps(extra)]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ({"launch": {"kv_cache_dtyp": "bf16"}}, "launch.kv_cache_dtyp: unknown; did you mean kv_cache_dtype?"),
        ({"launch": {"tensor_parallel_size": "eight"}}, "launch.tensor_parallel_size: 'eight' is not an integer"),
    ],
    ids=["typo", "wrong-type"],
)  # fmt: skip
def test_site_yml_stops_in_its_first_play_naming_the_key(one_host, overrides, line):
    run = site(one_host, overrides)
    out = run.stdout + run.stderr
    assert run.returncode == 2, out
    assert line in out
    assert "PLAY [Preflight" in out and "TASK [validate_inventory : Stop when the model profile" in out
    assert "TASK [preflight" not in out and "PLAY [Host" not in out  # no role past the check, no other play
    assert "changed=0" in out and "failed=1" in out


def test_the_role_a800s_own_inputs_are_validated_in_the_first_play(one_host):
    """The role a800's argument spec (entry point setup, validated by its tasks/setup.yml once per run and inputs, not
    by Ansible in each of the 17 plays that list the role) still refuses a wrong type before any other role runs."""
    run = site(one_host, {}, a800_serve_port="eight")
    out = run.stdout + run.stderr
    assert run.returncode == 2, out
    assert "TASK [a800 : Check the inputs against the role's argument spec (entry point setup)]" in out
    assert "a800_serve_port" in out and "int" in out
    assert "TASK [validate_inventory" not in out and "PLAY [Host" not in out
    assert "arg spec 'main' - The merged model profile" not in out


@pytest.mark.contract
def test_the_recorded_flag_table_is_the_real_parsers():
    """The table the profile is checked against equals what real vLLM's parser (the contract venv) gives now."""
    python = ROOT / ".venv-vllm" / "bin" / "python"
    run = subprocess.run(
        [str(python), str(ROOT / "scripts" / "record_vllm_serve_flags.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "VLLM_TARGET_DEVICE": "cpu", "HOME": os.environ.get("HOME", "/root")},
    )
    assert run.returncode == 0, run.stderr[-2000:]
