"""The double's `vllm serve` option table (tests/doubles/vllm/src/vllm/_double/args.py) held to real vLLM 0.32's,
as recorded in tests/fixtures/vllm-serve-options/real-0.32.json by scripts/record_vllm_serve_options.py.
No real vLLM is needed: the fixture is the reference (re-record it with the contract venv when vLLM changes).

- REAL_OPTIONS, every option string of the real parser in its order, is the fixture's: so abbreviations resolve and
  ambiguous prefixes fail (with the same candidates, in the same order) as in vLLM;
- every option the double reproduces has vLLM's option strings, dest, action, nargs, converter (by name; 64k
  accepted where vLLM's is human-readable) and choices (in vLLM's order, that of the error message);
- every flag the prod profile renders (and the serve role's extras) is in both tables, and reproduced;
- the parser behaviours recorded from the real parser (prefixes, underscores, 64k, errors) are the double's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.vllm_launch import vllm_launch_args
from conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/fixtures/vllm-serve-options/real-0.32.json"
REAL = json.loads(FIXTURE.read_text())
OPTIONS = REAL["options"]
ARGS = load_script(ROOT / "tests/doubles/vllm/src/vllm/_double/args.py", "double_serve_args")
RECORDER = load_script(ROOT / "scripts/record_vllm_serve_options.py", "record_vllm_serve_options")
PROFILE = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"]
# What the serve role adds to the profile's flags (roles/serve/vars/main.yml: serve_safetensors_load_strategy, then
# serve_extra_args; molecule/serve passes --max-log-len) and --api-key, which a launch may give instead of the file.
SERVE_EXTRAS = ["--safetensors-load-strategy", "prefetch", "--max-log-len", "100", "--api-key", "sk-test"]


def rendered_argv() -> list[str]:
    weights = PROFILE["weights"]
    return vllm_launch_args(PROFILE["launch"], weights["container_dir"], PROFILE["served_model_name"], "0.0.0.0",
                            8000, SERVE_EXTRAS)  # fmt: skip


def rendered_flags() -> list[str]:
    return [a for a in rendered_argv() if a.startswith("--")]


def double_actions() -> dict[str, argparse.Action]:
    """The double's actions, by their first option string (as the fixture keys them)."""
    return {a.option_strings[0]: a for a in ARGS.make_parser()._actions if a.option_strings}


def real_in_order() -> list[dict]:
    return sorted(OPTIONS.values(), key=lambda entry: entry["position"])


def test_the_fixture_is_the_real_0_32_parser():
    assert REAL["vllm_version"] == ARGS.REAL_VERSION == "0.32.0"
    assert REAL["parser"]["prog"] == "vllm serve" and REAL["parser"]["allow_abbrev"] is True
    assert len(OPTIONS) > 300


def test_real_options_of_the_double_are_the_fixtures():
    table = [(nargs, strings) for nargs, strings in ARGS.real_options()]
    assert table == [(entry["nargs"], entry["option_strings"]) for entry in real_in_order()]


def test_the_double_knows_every_real_option_string_in_the_real_order():
    """argparse resolves a prefix over these strings, in this order: the same strings, the same outcome."""
    parser = ARGS.make_parser()
    assert list(parser._option_string_actions) == [s for entry in real_in_order() for s in entry["option_strings"]]
    assert parser.allow_abbrev is REAL["parser"]["allow_abbrev"]
    assert parser.prog == REAL["parser"]["prog"]


@pytest.mark.parametrize("flag", sorted(ARGS.MODELLED))
def test_a_modelled_option_is_the_real_one(flag):
    assert flag in OPTIONS, f"{flag} is not an option of vllm serve {REAL['vllm_version']}"
    real, action = OPTIONS[flag], double_actions()[flag]
    assert action.option_strings == real["option_strings"]
    assert action.dest == real["dest"]
    assert RECORDER.ACTIONS.get(type(action).__name__, type(action).__name__) == real["action"]
    assert action.nargs == real["nargs"]
    assert RECORDER.type_name(action.type) == real["type"]
    assert RECORDER.human_readable(action.type) is bool(real.get("human_readable"))
    assert (list(action.choices) if action.choices is not None else None) == real.get("choices")
    assert action.required is bool(real.get("required"))


def test_options_the_double_does_not_model_are_refused_not_unknown():
    actions = double_actions()
    others = [flag for flag in OPTIONS if flag not in ARGS.MODELLED and flag != "-h"]
    assert others and all(isinstance(actions[flag], ARGS.NotReproduced) for flag in others)
    assert all(actions[flag].nargs == OPTIONS[flag]["nargs"] for flag in others)


@pytest.mark.parametrize("flag", sorted(set(rendered_flags())))
def test_every_rendered_flag_is_in_both_tables_and_modelled(flag):
    real_strings = {s: key for key, entry in OPTIONS.items() for s in entry["option_strings"]}
    assert flag in real_strings, f"{flag} (rendered from the profile) is not an option of real vllm serve"
    assert real_strings[flag] in ARGS.MODELLED, f"{flag} is rendered but the double does not reproduce it"


def test_the_rendered_launch_parses_in_the_double():
    args = ARGS.parse_args(rendered_argv()[:])
    assert args.model_tag == PROFILE["weights"]["container_dir"]
    assert args.max_model_len == PROFILE["launch"]["max_model_len"]
    assert args.attention_config == PROFILE["launch"]["attention_config"]


def _outcome(argv: list[str], dest: str | None) -> dict:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            namespace = ARGS.parse_args(argv)
    except SystemExit as exc:
        lines = [line for line in err.getvalue().splitlines() if "error:" in line]
        return {"argv": argv, "exit_code": exc.code, "error": lines[0] if lines else err.getvalue().strip()}
    return {"argv": argv, "exit_code": 0, "value": RECORDER.jsonable(getattr(namespace, dest)) if dest else None}


@pytest.mark.parametrize("name", sorted(REAL["probes"]))
def test_recorded_parser_behaviour_is_the_doubles(name):
    """Each probe of the recording (parsed by the real serve parser alone) gives the same outcome in the double;
    an unrecognized argument is reported by vLLM's top-level parser in `vllm serve`, hence `vllm:` there."""
    expected = dict(REAL["probes"][name])
    if "error" in expected:
        expected["error"] = expected["error"].replace("vllm serve: error: unrecognized", "vllm: error: unrecognized")
    dest = RECORDER.PROBES[name][1]
    assert _outcome(list(expected["argv"]), dest) == expected


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["m", "--max-model-len", "64k"], "max_model_len", 64000),
        (["m", "--max-num-batched-tokens", "8K"], "max_num_batched_tokens", 8192),
        (["m", "--kv-cache-memory-bytes", "64M"], "kv_cache_memory_bytes", 64 * 2**20),
        (["m", "--served-model-name", "a", "b"], "served_model_name", ["a", "b"]),
        (["m", "--api-key", "k1", "k2"], "api_key", ["k1", "k2"]),
        (["m", "--no-enable-auto-tool-choice"], "enable_auto_tool_choice", False),
        (["m", "--attention-config.sparse_mla_force_mqa", "true"], "attention_config", {"sparse_mla_force_mqa": True}),
        (["m", "--speculative_config.method", "mtp"], "speculative_config", {"method": "mtp"}),
        (["--model", "m", "--max-num-seqs", "16"], "model_tag", "m"),
        (["m", "--host", "None"], "host", None),
    ],
)
def test_values_convert_as_in_vllm(argv, dest, value):
    assert getattr(ARGS.parse_args(argv), dest) == value


def test_parse_keeps_the_doubles_simplifications():
    args = ARGS.parse(["m", "--served-model-name", "a", "b", "--api-key", "k1", "k2", "--max-model-len", "auto"])
    assert (args.model, args.served_model_name, args.api_key, args.max_model_len) == ("m", "a", "k1", None)
