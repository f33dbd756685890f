#!/usr/bin/env python3
"""Record the full option table of `vllm serve` from vLLM's own argument parser, as the reference of the test double.

    .venv-vllm/bin/python scripts/record_vllm_serve_options.py
        write tests/fixtures/vllm-serve-options/real-0.32.json
    .venv-vllm/bin/python scripts/record_vllm_serve_options.py --check
        exit 1 when that file differs from the parser
    .venv-vllm/bin/python scripts/record_vllm_serve_options.py --double-table
        print the REAL_OPTIONS block of tests/doubles/vllm/src/vllm/_double/args.py (paste it there)

The parser is built as scripts/record_vllm_serve_flags.py builds it (make_arg_parser over
FlexibleArgumentParser(prog="vllm serve"), the import of roles/serve/files/vllm_argcheck.py). Unlike that script
(a reduced table for the profile check), this one keeps, per option (keyed by its first option string):

    option_strings  every string of the option, in the parser's order (aliases, --no- forms, short forms)
    position        the option's place in the parser (argparse resolves abbreviations, and lists the candidates of
                    an ambiguous one, in this order)
    dest, action    the namespace attribute; the action kind: store, store_true, store_false, store_const, append,
                    help, version, BooleanOptionalAction, or the class name of a vLLM action
    nargs, const    argparse's nargs (null: one value) and const where one is set
    type            how the value is converted: the callable's name, wrappers spelled out: `optional_type(int)`
                    ("" and "None" give None, other failures "Value X cannot be converted to ..."),
                    `parse_type(loads)`, `parse_dataclass(AttentionConfig)` (pydantic, JSON with 64k numbers),
                    `human_readable_int` (64k = 64000, 64K = 65536), `human_readable_int_or_auto` (also auto / -1)
    human_readable  true when the conversion accepts 64k (tried on the converter itself)
    choices         the accepted values after conversion, in the parser's order (the order of its error message)
    default         the default as JSON, or a short description of an object (its class; a dict's key count)
    deprecated      true for an option vLLM warns about
    required        true for a required option (none of vllm serve's are)

and, for the whole parser: its class, prog, allow_abbrev, the positionals, and the outcome of probe command lines
parsed by it (a unique prefix, ambiguous prefixes, underscores, human-readable integers, an unknown flag, a bare
flag): exit code (0 accepted, 2 argparse's error) and the `vllm serve: error: ...` line, or the parsed value.
The probes are parsed by the parser alone (argparse-level); `vllm serve` afterwards also runs
validate_parsed_serve_args and the engine's config checks, which are not recorded here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_vllm_serve_flags import _parser, _vllm_version, write_or_check  # the same parser as the profile table's

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "vllm-serve-options" / "real-0.32.json"
MODEL = "/models/GLM-5.2-NVFP4"
ACTIONS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_HelpAction": "help",
    "_VersionAction": "version",
}
# Command lines (after `vllm serve`) whose outcome says how the parser treats prefixes, underscores and values.
PROBES = {
    "unique_prefix": ([MODEL, "--max-model-le", "4096"], "max_model_len"),
    "unique_prefix_equals": ([MODEL, "--max-mod=4096"], "max_model_len"),
    "ambiguous_prefix": ([MODEL, "--kv-cache-dtyp", "bfloat16"], "kv_cache_dtype"),
    "ambiguous_prefix_short": ([MODEL, "--max-num", "16"], "max_num_seqs"),
    "exact_option_that_is_a_prefix_of_another": ([MODEL, "--kv-cache-dtype", "bfloat16"], "kv_cache_dtype"),
    "unique_prefix_of_no_form": ([MODEL, "--no-trust-remote"], "trust_remote_code"),
    "single_dash_prefix": ([MODEL, "-t", "8"], "tensor_parallel_size"),
    "underscores": ([MODEL, "--max_model_len", "4096"], "max_model_len"),
    "human_readable_decimal": ([MODEL, "--max-model-len", "64k"], "max_model_len"),
    "human_readable_binary": ([MODEL, "--max-model-len", "64K"], "max_model_len"),
    "human_readable_binary_decimal": ([MODEL, "--max-model-len", "1.5K"], "max_model_len"),
    "human_readable_auto": ([MODEL, "--max-model-len", "auto"], "max_model_len"),
    "human_readable_on_plain_int": ([MODEL, "--max-num-seqs", "16k"], "max_num_seqs"),
    "int_given_a_float": ([MODEL, "--tensor-parallel-size", "8.5"], "tensor_parallel_size"),
    "optional_type_none": ([MODEL, "--safetensors-load-strategy", "None"], "safetensors_load_strategy"),
    "invalid_choice": ([MODEL, "--kv-cache-dtype", "bf16"], "kv_cache_dtype"),
    "unknown_flag": ([MODEL, "--no-such-flag"], None),
    "bare_flag_without_value": ([MODEL, "--max-model-len"], "max_model_len"),
    "explicit_value_to_boolean_flag": ([MODEL, "--trust-remote-code=true"], "trust_remote_code"),
}


def _name(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def type_name(kind_of) -> str | None:
    """The converter spelled out: vLLM's wrappers (closures) with what they wrap."""
    if kind_of is None:
        return None
    name = _name(kind_of)
    cells = [c.cell_contents for c in (getattr(kind_of, "__closure__", None) or ())]
    if name == "_optional_type" and cells:
        return f"optional_type({type_name(cells[0])})"
    if name == "_parse_type" and cells:
        return f"parse_type({type_name(cells[0])})"
    if name == "parse_dataclass":
        cls = (getattr(kind_of, "__defaults__", None) or (None,))[-1]
        return f"parse_dataclass({_name(cls)})" if cls is not None else name
    return name


def human_readable(kind_of) -> bool:
    if kind_of is None:
        return False
    try:
        return kind_of("64k") == 64000
    except Exception:  # any converter's refusal
        return False


def jsonable(value):
    """A default as JSON, or a short deterministic description (no addresses, no long dumps)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value if value != argparse.SUPPRESS else "==SUPPRESS=="
    if isinstance(value, (list, tuple)) and all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
        return list(value) if len(json.dumps(list(value))) <= 200 else f"<{type(value).__name__} of {len(value)}>"
    if isinstance(value, dict):
        text = json.dumps(value, default=str, sort_keys=True)
        return value if len(text) <= 120 and json.loads(text) == value else f"<dict of {len(value)} keys>"
    return f"<{type(value).__name__}>"


def option_table(parser: argparse.ArgumentParser) -> dict[str, dict]:
    deprecated = getattr(parser, "_deprecated", set())
    options: dict[str, dict] = {}
    for position, action in enumerate(a for a in parser._actions if a.option_strings):
        entry: dict = {
            "option_strings": list(action.option_strings),
            "position": position,
            "dest": action.dest,
            "action": ACTIONS.get(type(action).__name__, type(action).__name__),
            "nargs": action.nargs,
            "type": type_name(action.type),
            "default": jsonable(action.default),
        }
        if human_readable(action.type):
            entry["human_readable"] = True
        if action.const is not None:
            entry["const"] = jsonable(action.const)
        if action.choices is not None:
            entry["choices"] = [jsonable(c) for c in action.choices]
        if action in deprecated:
            entry["deprecated"] = True
        if action.required:
            entry["required"] = True
        options[action.option_strings[0]] = entry
    return options


def probe(parser: argparse.ArgumentParser, argv: list[str], dest: str | None) -> dict:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            namespace = parser.parse_args(argv)
    except SystemExit as exc:
        lines = [line for line in err.getvalue().splitlines() if "error:" in line]
        return {"argv": argv, "exit_code": exc.code, "error": lines[0] if lines else err.getvalue().strip()}
    return {"argv": argv, "exit_code": 0, "value": jsonable(getattr(namespace, dest)) if dest else None}


def record() -> dict:
    parser = _parser()
    probes = {name: probe(parser, argv, dest) for name, (argv, dest) in PROBES.items()}
    return {
        "comment": "the options of `vllm serve`, recorded from vLLM's own parser by "
        "scripts/record_vllm_serve_options.py (do not edit; re-run it)",
        "vllm_version": _vllm_version(),
        "python": ".".join(str(n) for n in sys.version_info[:3]),
        "parser": {
            "class": type(parser).__name__,
            "prog": parser.prog,
            "allow_abbrev": parser.allow_abbrev,
            "prefix_chars": parser.prefix_chars,
            "underscores_in_option_names": "accepted: FlexibleArgumentParser.parse_args turns _ into - in the name "
            "of every --option (up to a '.' or '='); --option.key value is merged into --option's JSON",
            "positionals": [
                {"dest": a.dest, "nargs": a.nargs, "default": jsonable(a.default)}
                for a in parser._actions
                if not a.option_strings
            ],
        },
        "probes": probes,
        "options": option_table(parser),
    }


def render(data: dict) -> str:
    """JSON with sorted keys, indent 1; each option and each probe on one line (a change is a one-line diff)."""
    one_line = ("options", "probes")

    def dump(value) -> str:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    lines = ["{"]
    keys = sorted(data)
    for i, key in enumerate(keys):
        comma = "," if i < len(keys) - 1 else ""
        if key in one_line:
            items = sorted(data[key].items())
            lines.append(f" {dump(key)}: {{")
            lines += [f"  {dump(k)}: {dump(v)}" + ("," if j < len(items) - 1 else "") for j, (k, v) in enumerate(items)]
            lines.append(" }" + comma)
        else:
            body = json.dumps(data[key], indent=1, sort_keys=True, ensure_ascii=False).replace("\n", "\n ")
            lines.append(f" {dump(key)}: {body}{comma}")
    return "\n".join([*lines, "}"]) + "\n"


def double_table(data: dict) -> str:
    """The REAL_OPTIONS block of the double's args.py: every option string and nargs, in the parser's order."""
    lines = ['REAL_OPTIONS = """']
    for key in sorted(data["options"], key=lambda k: data["options"][k]["position"]):
        entry = data["options"][key]
        nargs = {None: "1", 0: "0"}.get(entry["nargs"], str(entry["nargs"]))
        lines.append(f"{nargs} {' '.join(entry['option_strings'])}")
    lines.append('"""')
    return "\n".join(lines) + "\n"


def main() -> int:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    data = record()
    if "--double-table" in sys.argv[1:]:
        sys.stdout.write(double_table(data))
        return 0
    text = render(data)
    if json.loads(text) != json.loads(json.dumps(data)):  # the compaction must not change the data
        raise AssertionError("render() changed the data")
    return write_or_check(OUT, text, f"{len(data['options'])} options, {len(text)} bytes")


if __name__ == "__main__":
    sys.exit(main())
