"""Mutation test of the `vllm serve` command line: the vLLM test double's parser against real vLLM 0.32's.

The prod profile's launch is rendered as roles/serve/vars/main.yml renders it (vllm_launch_args, with the serve role's
extras), and every flag of it is mutated: a wrong type (`eight` for an int, `x` for a float or JSON), values outside
the choices, human-readable integers (64k, 64K, 1.5K, auto) on every integer flag, a unique prefix of the flag (also
with `=`), an ambiguous prefix, underscores, the flag without its value (at the end, and before the next flag), an
explicit value to a boolean flag, its --no- form, and unknown flags. Each mutated argv is parsed in-process by both
parsers, each in one subprocess running DRIVER over the whole list:

- real: the vLLM CLI's own parser construction, `vllm` (FlexibleArgumentParser) with the subcommand `serve` built by
  make_arg_parser (a FlexibleArgumentParser with prog "vllm serve", as scripts/record_vllm_serve_flags.py builds it),
  run by .venv-vllm/bin/python; `parse_args(["serve", *argv])`, so unrecognized arguments are reported by the
  top-level parser (`vllm: error: ...`), as by the real `vllm serve`;
- double: vllm._double.args.parse_args of the patched install of the double (what its image runs).

Both must agree on accept/reject and the exit code of every mutation (0, or 2 for argparse's errors), on the error
line (`vllm serve: error: ...`; a function's address in a message is not compared) and, where both accepted, on the
value parsed (when both are plain data). Only argparse-level behaviour is compared: real `vllm serve` afterwards runs
validate_parsed_serve_args and the engine's config checks (value ranges: test_value_ranges_contract.py), which are
not part of this test; the double's parse() keeps its own post-parse checks too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import real_vllm
import yaml
from ansible_collections.a800.vllm.plugins.filter.vllm_launch import vllm_launch_args

ROOT = Path(__file__).resolve().parents[2]
PROFILE = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"]
OPTIONS = json.loads((ROOT / "tests/fixtures/vllm-serve-options/real-0.32.json").read_text())["options"]
# The serve role's additions (serve_safetensors_load_strategy, serve_extra_args such as molecule's --max-log-len) and
# --api-key, which a launch may pass as a flag.
SERVE_EXTRAS = ["--safetensors-load-strategy", "prefetch", "--max-log-len", "100", "--api-key", "sk-test"]

pytestmark = pytest.mark.contract

DRIVER = r"""
import contextlib, io, json, sys

mode, root = sys.argv[1], sys.argv[2]
if mode == "real":
    sys.path.insert(0, root + "/scripts")
    from record_vllm_serve_flags import _parser
    _parser()  # the CPU build's metadata shim and vLLM's imports, as for the recorded table
    try:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    top = FlexibleArgumentParser(prog="vllm")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    make_arg_parser(subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]"))

    def parse(argv):
        return top.parse_args(["serve", *argv])
else:
    from vllm._double import args as double_args

    parse = double_args.parse_args


def plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
        return list(value)
    return "<%s>" % type(value).__name__


results = []
for argv, dest in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            namespace = parse(argv)
    except SystemExit as exc:
        lines = [line for line in err.getvalue().splitlines() if "error:" in line]
        results.append({"exit_code": exc.code, "error_line": lines[0] if lines else err.getvalue().strip()[-300:]})
        continue
    except Exception as exc:  # FlexibleArgumentParser's own checks raise (the CLI dies with a traceback: exit 1)
        results.append({"exit_code": 1, "error_line": "%s: %s" % (type(exc).__name__, exc)})
        continue
    value = plain(getattr(namespace, dest, None)) if dest else None
    results.append({"exit_code": 0, "error_line": "", "value": value})
sys.stdout.write("\nDRIVER-RESULT " + json.dumps(results) + "\n")
"""


def rendered_argv() -> list[str]:
    weights = PROFILE["weights"]
    return vllm_launch_args(PROFILE["launch"], weights["container_dir"], PROFILE["served_model_name"], "0.0.0.0",
                            8000, SERVE_EXTRAS)  # fmt: skip


def segments(argv: list[str]) -> list[tuple[str, list[str]]]:
    """The argv after the model as (flag, its values)."""
    out: list[tuple[str, list[str]]] = []
    for arg in argv[1:]:
        if arg.startswith("--"):
            out.append((arg, []))
        else:
            out[-1][1].append(arg)
    return out


def real_strings() -> list[str]:
    return [s for entry in sorted(OPTIONS.values(), key=lambda e: e["position"]) for s in entry["option_strings"]]


def matches(prefix: str) -> list[str]:
    return [s for s in real_strings() if s.startswith(prefix)]


def entry_of(flag: str) -> dict:
    return next(entry for entry in OPTIONS.values() if flag in entry["option_strings"])


def value_mutations(entry: dict, values: list[str]) -> dict[str, list[str]]:
    """Mutated values of one flag, by name, from the real option's converter and choices."""
    kind, out = entry["type"] or "", {}
    if entry["nargs"] == 0:
        return out
    if entry.get("choices") is not None:
        out |= {"choice_upper": [values[0].upper()], "choice_bf16": ["bf16"], "choice_typo": [values[0] + "x"]}
        out |= {"choice_none": ["None"], "choice_empty": [""], "choice_other": [str(entry["choices"][0])]}
    if kind.endswith("int)") or kind in ("int", "human_readable_int", "human_readable_int_or_auto"):
        out |= {"int_word": ["eight"], "int_float": ["8.5"], "int_hex": ["0x8"], "int_exp": ["1e3"]}
        out |= {"int_negative": ["-1"], "int_spaces": [" 64 "], "int_none": ["None"]}
        out |= {"human_64k": ["64k"], "human_64K": ["64K"], "human_1M": ["1M"], "human_25.6k": ["25.6k"]}
        out |= {"human_1.5K": ["1.5K"], "human_auto": ["auto"], "human_AUTO": ["AUTO"], "human_64kb": ["64kb"]}
        out |= {"human_spaces": [" 64k "], "human_k": ["k"]}
    if kind == "float" or kind.endswith("float)"):
        out |= {"float_word": ["x"], "float_comma": ["0,95"], "float_exp": ["9.5e-1"], "float_nan": ["nan"]}
        out |= {"float_percent": ["95%"], "float_64k": ["64k"], "float_dot": [".95"]}
    if "loads" in kind or "parse_dataclass" in kind:
        out |= {"json_word": ["x"], "json_broken": ["{bad json"], "json_list": ["[]"], "json_number": ["5"]}
        out |= {"json_empty": [""], "json_none": ["None"], "json_spaced": [json.dumps(json.loads(values[0]), indent=1)]}
        human = re.sub(r"(?<=:)(\d+)(?=[,}])", r"\1k", values[0], count=1)  # the profile's first integer as 5k
        if human != values[0]:
            out["json_human_readable"] = [human]
    if kind in ("str", "optional_type(str)") and entry.get("choices") is None:
        out |= {"str_empty": [""], "str_none": ["None"], "str_space": ["a b"], "str_dash": ["-x"]}
    if entry["nargs"] == "+":
        out |= {"many_values": [values[0], values[0] + "-2"]}
    return out


def mutations(argv: list[str]) -> list[tuple[str, list[str], str | None]]:
    """(name, mutated argv, dest to compare) for every flag of argv."""
    model, parts = argv[0], segments(argv)
    out: list[tuple[str, list[str], str | None]] = [("unmutated", argv, "max_model_len")]

    def rebuild(i: int, replacement: list[str]) -> list[str]:
        return [model] + [a for j, (f, v) in enumerate(parts) for a in (replacement if j == i else [f, *v])]

    for i, (flag, values) in enumerate(parts):
        entry = entry_of(flag)
        dest = entry["dest"]

        def add(name: str, replacement: list[str], flag=flag, i=i, dest=dest) -> None:
            out.append((f"{flag} {name}", rebuild(i, replacement), dest))

        for name, mutated in value_mutations(entry, values).items():
            add(name, [flag, *mutated])
        unique = [flag[:n] for n in range(3, len(flag)) if matches(flag[:n]) == [flag]]
        if unique:
            add("shortest_unique_prefix", [unique[0], *values])
            add("longest_unique_prefix", [unique[-1], *values])
            if len(values) == 1:
                add("unique_prefix_equals", [f"{unique[0]}={values[0]}"])
        ambiguous = [flag[:n] for n in range(3, len(flag)) if len(matches(flag[:n])) > 1]
        if ambiguous:
            add("longest_ambiguous_prefix", [ambiguous[-1], *values])
            add("shortest_ambiguous_prefix", [ambiguous[0], *values])
        add("underscores", ["--" + flag[2:].replace("-", "_"), *values])
        add("misspelt", [flag[:-1] + "x" + flag[-1], *values])
        add("unknown_suffix", [flag + "-x", *values])
        add("twice", [flag, *values, flag, *values])
        if values:
            add("equals", [f"{flag}={values[0]}", *values[1:]])
            add("value_missing_before_next_flag", [flag])
            out.append((f"{flag} value_missing_at_end", [*rebuild(i, []), flag], dest))
        else:
            add("explicit_value", [f"{flag}=true"])
            add("value_after_bare_flag", [flag, "true"])
            if "--no-" + flag[2:] in entry["option_strings"]:
                add("no_form", ["--no-" + flag[2:]])
    out.append(("unknown_flag", [*argv, "--no-such-flag"], None))
    out.append(("unknown_flag_with_value", [*argv, "--no-such-flag", "1"], None))
    out.append(("unknown_single_dash", [*argv, "-z"], None))
    out.append(("stray_positional_at_end", [*argv, "extra"], "api_key"))  # --api-key takes several values
    out.append(("stray_positional_after_model", [model, "extra", *argv[1:]], None))
    return out


def run_driver(mode: str, python: str, env: dict[str, str], cases: list[tuple[str, list[str], str | None]]) -> list:
    """DRIVER over every case's argv in one process of `python`: a result per case."""
    run = subprocess.run(
        [python, "-c", DRIVER, mode, str(ROOT)],
        input=json.dumps([[argv, dest] for _, argv, dest in cases]),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd="/tmp",
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("DRIVER-RESULT ")]
    assert run.returncode == 0 and lines, (run.returncode, run.stdout[-2000:], run.stderr[-3000:])
    return json.loads(lines[-1].removeprefix("DRIVER-RESULT "))


def same_value(real, double) -> bool:
    """Equal (NaN too), or not comparable: an object of vLLM's (a config class) or of the double's (a mapping)."""
    opaque = [isinstance(v, str) and v.startswith("<") and v.endswith(">") for v in (real, double)]
    return any(opaque) or repr(real) == repr(double)


def normal(line: str) -> str:
    return re.sub(r" at 0x[0-9a-f]+", " at 0x…", line)


def test_every_mutation_of_the_rendered_launch_is_parsed_alike(installs, capsys):
    cases = mutations(rendered_argv())
    real = run_driver("real", real_vllm.vllm_python(), real_vllm.vllm_env(), cases)
    double = run_driver("double", sys.executable, {**os.environ, "PYTHONPATH": str(installs["patched"])}, cases)
    assert len(real) == len(double) == len(cases)
    exit_codes, messages, values = [], [], []
    for (name, argv, _), r, d in zip(cases, real, double, strict=True):
        if r["exit_code"] != d["exit_code"]:
            exit_codes.append((name, argv[1:], r, d))
        elif normal(r["error_line"]) != normal(d["error_line"]):
            messages.append((name, r["error_line"], d["error_line"]))
        elif r["exit_code"] == 0 and not same_value(r["value"], d["value"]):
            values.append((name, r["value"], d["value"]))
    rejected = sum(1 for r in real if r["exit_code"] != 0)
    with capsys.disabled():
        print(
            f"\nvllm serve mutations: {len(cases)} ({rejected} rejected by real vLLM, {len(cases) - rejected} "
            f"accepted); disagreements: {len(exit_codes)} accept/reject or exit code, {len(messages)} error line, "
            f"{len(values)} parsed value"
        )
    assert not (exit_codes or messages or values), "\n".join(map(repr, exit_codes + messages + values))
    assert rejected and len(cases) - rejected > 1  # both kinds of outcome are exercised


def test_the_recorded_option_table_is_the_real_parsers():
    """The fixture the double's parser is held to (tests/double_tests/test_args_table.py) equals what real vLLM's
    parser gives now (scripts/record_vllm_serve_options.py --check)."""
    run = subprocess.run(
        [str(ROOT / ".venv-vllm/bin/python"), str(ROOT / "scripts/record_vllm_serve_options.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "VLLM_TARGET_DEVICE": "cpu", "HOME": os.environ.get("HOME", "/root")},
    )
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_preflight_refuses_an_extra_flag_only_where_real_vllm_does():
    """serve_extra_args is refused in the preflight's first step by the recorded table (plugins/filter/profile.py
    extra_args_checks), before the image's own parser runs on the host: each mutated argv, taken as extra args, must
    never be refused there when real vLLM's parser accepts it; an unknown, misspelt or suffixed flag, a word given to
    an integer or a number, a choice that is none, and a flag without the value it needs (at the end, or before the
    next flag), which real vLLM refuses, are refused there too."""
    from ansible_collections.a800.vllm.plugins.filter.profile import extra_args_checks

    flags = yaml.safe_load((ROOT / "roles/a800/files/vllm_serve_flags.yml").read_text())["a800_vllm_serve_flags"]
    cases = mutations(rendered_argv())
    real = run_driver("real", real_vllm.vllm_python(), real_vllm.vllm_env(), cases)
    refused = {name: extra_args_checks(argv, flags) for name, argv, _ in cases}
    wrongly = [(name, refused[name]) for (name, _, _), r in zip(cases, real, strict=True)
               if refused[name] and r["exit_code"] == 0]  # fmt: skip
    assert not wrongly, "\n".join(map(repr, wrongly))
    unknown = [
        name for name, _, _ in cases if name.endswith((" misspelt", " unknown_suffix")) or name == "unknown_flag"
    ]
    assert unknown and all(refused[name] for name in unknown), [n for n in unknown if not refused[n]]
    # A word for an integer or a number, and a choice that is not one, are refused there too.
    typed = [name for (name, _, _), r in zip(cases, real, strict=True)
             if name.endswith((" int_word", " float_word", " choice_typo")) and r["exit_code"] != 0]  # fmt: skip
    assert typed and all(refused[name] for name in typed), [n for n in typed if not refused[n]]
    # A flag without its value: refused with argparse's words for it (the option's aliases, -tp, are not in the table).
    missing = [(name, r["error_line"]) for (name, _, _), r in zip(cases, real, strict=True)
               if name.endswith((" value_missing_at_end", " value_missing_before_next_flag"))]  # fmt: skip
    assert missing and all("expected" in line for _, line in missing), missing
    wrong = [(name, line, refused[name]) for name, line in missing
             if not refused[name] or line.rsplit(": ", 1)[-1] + ")" not in refused[name][0]["detail"]]  # fmt: skip
    assert not wrong, "\n".join(map(repr, wrong))
