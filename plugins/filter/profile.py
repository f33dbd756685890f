"""Filter: the model profile checked against its schema and against the flags of `vllm serve`.

The schema is the role a800's files/profile_schema.yml (nested options, written as a role argument spec entry is);
Ansible's own validator (ArgumentSpecValidator) reads it, and this filter turns what it finds into check records
whose detail names the key's path and, for an unknown key, the nearest known one:

    model_profile.launch.kv_cache_dtyp: unknown; did you mean kv_cache_dtype?
    model_profile.launch.tensor_parallel_size: 'eight' is not an integer

`launch` has no spelled-out options: its keys are the flags of `vllm serve` with underscores, looked up in the table
recorded from vLLM's parser (roles/a800/files/vllm_serve_flags.yml), plus `env`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError
from ansible_collections.a800.vllm.plugins.filter.vllm_launch import NOT_FLAGS  # launch keys that are not flags
from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, check

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ROOT = "model_profile"
FIX = "correct the key or value in model_profile / model_profile_overrides (inventory group_vars)"
_FOUND_IN = re.compile(r"found in '?(?P<path>[^'.]+?)'?(?:\.|$)")
_ARGUMENT = re.compile(r"argument '(?P<name>[^']+)'")
_MISSING = re.compile(r"missing required arguments: (?P<names>[^.]+?) found in")
_CONVERT = re.compile(r"unable to convert to (?P<type>\w+)")
TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
              "dict": "a mapping", "list": "a list", "path": "a path"}  # fmt: skip
_HUMAN_INT = re.compile(r"^-?\d+(\.\d+)?[kKmMgGtT]?$")
_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE]-?\d+)?$")
KIND_WORDS = {
    "bool": "true or false",
    "int": "an integer",
    "int_human": "an integer or a size like 64k",
    "float": "a number",
    "str": "a string",
    "json": "a mapping (or a JSON string)",
}


def _nearest(word: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else "no known key is close"


def _options_at(options: Mapping[str, Any], parents: Iterable[str]) -> Mapping[str, Any]:
    for name in parents:
        options = (options.get(name) or {}).get("options") or {}
    return options


def _record(path: str, measured: Any, expected: str, detail: str) -> dict[str, Any]:
    return check(f"profile:{path}", FAIL, path, measured, expected, detail, FIX)


def _plain(value: Any) -> Any:
    """`value` as plain dicts, lists and scalars. Ansible hands a filter its variables as lazy containers that render
    an item when it is read; ArgumentSpecValidator deep-copies its parameters, and a deep copy of those containers
    costs ~2 s for the model profile on a busy 2-CPU machine, where reading them once costs milliseconds."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    for kind in (bool, int, float, str):  # the templating engine's tagged scalars are subclasses of these
        if isinstance(value, kind):
            return kind(value)
    return value


def _schema_checks(profile: Mapping[str, Any], options: Mapping[str, Any]) -> list[dict[str, Any]]:
    result = ArgumentSpecValidator({ROOT: {"type": "dict", "required": True, "options": options}}).validate(
        {ROOT: _plain(profile)}
    )
    records = []
    for path in sorted(result.unsupported_parameters):
        *parents, key = path
        known = sorted(_options_at(options, parents[1:]))
        dotted = ".".join(path)
        records.append(
            _record(dotted, key, f"one of: {', '.join(known)}", f"{dotted}: unknown; {_nearest(key, known)}")
        )
    for error in result.errors:
        if isinstance(error, UnsupportedError):
            continue  # named above, with the nearest key
        found = _FOUND_IN.search(error.msg)
        where = found["path"].replace(" -> ", ".") if found else ROOT
        missing = _MISSING.search(error.msg)
        if missing:
            for name in (n.strip() for n in missing["names"].split(",")):
                records.append(_record(f"{where}.{name}", None, "a value", f"{where}.{name}: missing (required)"))
            continue
        argument = _ARGUMENT.search(error.msg)
        path = f"{where}.{argument['name']}" if argument else where
        convert = _CONVERT.search(error.msg)
        if convert:
            value, want = _value_at(profile, path.split(".")[1:]), TYPE_WORDS.get(convert["type"], convert["type"])
            records.append(_record(path, value, want, f"{path}: {value!r} is not {want}"))
        else:
            records.append(_record(path, None, "see detail", f"{path}: {error.msg}"))
    return records


def _value_at(data: Any, keys: Iterable[str]) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, Mapping) else None
    return data


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def value_fits(kind: str, value: Any, many: bool = False) -> bool:
    """Whether a profile value can be given to a flag of this kind (the table's `kind`)."""
    if many and isinstance(value, list):
        return all(value_fits(kind, v) for v in value)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and re.fullmatch(r"-?\d+", value) is not None
        )
    if kind == "int_human":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and (value == "auto" or _HUMAN_INT.fullmatch(value) is not None)
        )
    if kind == "float":
        return (isinstance(value, int | float) and not isinstance(value, bool)) or (
            isinstance(value, str) and _NUMBER.fullmatch(value) is not None
        )
    if kind == "str":
        return _scalar(value)
    if kind == "json":
        if isinstance(value, dict | list):
            return True
        if isinstance(value, str):
            try:
                json.loads(value)
            except ValueError:
                return False
            return True
        return False
    return True  # "any": what vLLM parses itself


def _launch_checks(
    launch: Mapping[str, Any], flags: Mapping[str, Mapping[str, Any]], extra: Iterable[str]
) -> list[dict[str, Any]]:
    records = []
    extra = {str(f).removeprefix("--").replace("-", "_") for f in extra}
    known = sorted({*flags, *NOT_FLAGS, *extra})
    for key, value in launch.items():
        path = f"{ROOT}.launch.{key}"
        if key in NOT_FLAGS:
            if not isinstance(value, dict) or not all(_scalar(v) for v in value.values()):
                records.append(
                    _record(path, value, "a mapping of names to values", f"{path}: not a mapping of names to values")
                )
            continue
        if key in extra:
            continue
        flag = flags.get(key)
        if flag is None:
            detail = f"{path}: unknown; {_nearest(key, known)}"
            if key.replace("-", "_") in flags:
                detail = f"{path}: unknown; write it with underscores: {key.replace('-', '_')}"
            records.append(_record(path, key, "a flag of vllm serve (underscored) or env", detail))
            continue
        kind = flag.get("kind", "any")
        if not value_fits(kind, value, bool(flag.get("many"))):
            want = KIND_WORDS.get(kind, kind) + (" (or a list of them)" if flag.get("many") else "")
            detail = f"{path}: {value!r} is not {want} ({flag['flag']})"
            records.append(_record(path, value, want, detail))
    return records


def a800_profile_checks(
    profile: Mapping[str, Any],
    options: Mapping[str, Any],
    flags: Mapping[str, Mapping[str, Any]],
    extra_flags: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Every problem of the profile as a failed check record; [] when it fits the schema and the flag table."""
    records = _schema_checks(profile, options)
    launch = profile.get("launch")
    if isinstance(launch, Mapping):
        records += _launch_checks(launch, flags, extra_flags)
    return records


def load_tables(role_path: str) -> tuple[Mapping[str, Any], Mapping[str, Mapping[str, Any]]]:
    """The schema (files/profile_schema.yml, entry `profile`) and the flag table (files/vllm_serve_flags.yml) of the
    role a800, read from its files with libyaml: ~0.1 s, where handing the 316-entry table to a filter as an Ansible
    variable cost ~3.5 s (12 s on a saturated machine) of templating."""
    root = Path(role_path)
    specs = yaml.load((root / "files/profile_schema.yml").read_text(), Loader=_Loader)
    table = yaml.load((root / "files/vllm_serve_flags.yml").read_text(), Loader=_Loader)
    return specs["profile"]["options"], table["a800_vllm_serve_flags"]


def a800_profile_problems(profile: Mapping[str, Any], role_path: str, extra_flags: Iterable[str] = ()) -> list:
    """a800_profile_checks against the role's own schema and flag table (load_tables): one Python call."""
    options, flags = load_tables(role_path)
    return a800_profile_checks(profile, options, flags, extra_flags)


EXTRA_ARGS_FIX = (
    "correct the flag in serve_extra_args, or add it to a800_launch_extra_flags when the served vLLM release has it "
    "and the recorded table (roles/a800/files/vllm_serve_flags.yml) does not"
)


_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")  # what argparse takes for a value, not an option (no such option here)
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
EXTRA_VALUE_FIX = "correct the value that follows the flag in serve_extra_args (vllm serve --help lists its values)"


def cli_value_fits(kind: str, text: str, choices: Iterable[Any] | None = None) -> bool:
    """Whether `vllm serve`'s parser can take this command-line word for a flag of this kind: Python's int() and
    float() as argparse calls them, vLLM's human_readable_int(_or_auto) (vllm/utils/argparse_utils.py), its
    optional_type ("" and "None" are None), the choices. Generous where the table cannot tell (a choice in another
    case, "" or "None" for a flag that may not be optional): the image's parser judges those."""
    if text in ("", "None"):
        return True
    if choices is not None:
        return text.lower() in {str(c).lower() for c in choices}
    if kind == "int_human":
        value = text.strip()
        if value == "-1" or value.lower() == "auto":
            return True
        if match := _HUMAN.fullmatch(value):
            return match[2] in "kmgt" or "." not in match[1]  # vLLM: no decimals with a binary suffix (1.5K)
    converter = {"int": int, "int_human": int, "float": float}.get(kind)
    if converter is None:
        return True  # a string, JSON, "any": the image's parser judges it
    try:
        converter(text)
    except ValueError:
        return False
    return True


def _extra_value_checks(name: str, value: str, flag: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The value given to one flag of the table, as a failed check record when vLLM's parser cannot take it."""
    kind, choices = flag.get("kind", "any"), flag.get("choices")
    if kind == "bool" or flag.get("many") or cli_value_fits(kind, value, choices):
        return []
    want = "one of " + ", ".join(map(str, choices)) if choices else KIND_WORDS.get(kind, kind)
    detail = f"serve_extra_args: {name} {value!r} is not {want}"
    return [
        check("profile:serve_extra_args", FAIL, "serve_extra_args", f"{name} {value}", want, detail, EXTRA_VALUE_FIX)
    ]


def _takes_as_option(word: str | None) -> bool:
    """Whether argparse reads this command-line word as an option rather than as a value (_parse_optional in
    Lib/argparse.py): a word of two or more characters that starts with "-", is no negative number (vllm serve has no
    option that looks like one) and has no space; None is the end of the command line."""
    return word is None or (len(word) > 1 and word.startswith("-") and not _NEGATIVE.match(word) and " " not in word)


def _missing_value_checks(name: str, following: str | None, flag: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A flag of the table that needs a value, given none (at the end, or before the next option), as argparse refuses
    it: "expected one argument" (nargs None) or "expected at least one argument" (nargs "+"). A flag whose value may
    be left out (optional: nargs "?" or "*") and a boolean flag take none."""
    if flag.get("kind") == "bool" or flag.get("optional") or not _takes_as_option(following):
        return []
    expected = "expected at least one argument" if flag.get("many") else "expected one argument"
    where = "at the end" if following is None else f"before {following}"
    detail = f"serve_extra_args: {name} has no value {where} (vllm serve's parser: argument {name}: {expected})"
    want = "a value after the flag"
    return [check("profile:serve_extra_args", FAIL, "serve_extra_args", name, want, detail, EXTRA_VALUE_FIX)]


def extra_args_checks(
    extra_args: Iterable[Any], flags: Mapping[str, Mapping[str, Any]], extra_flags: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """Every long option of `serve_extra_args` that `vllm serve` does not know, and every value its parser cannot
    take, as a failed check record. Flags: the recorded table's, written with dashes or underscores (vLLM's
    FlexibleArgumentParser takes both), `--no-X` for a boolean X (argparse's BooleanOptionalAction), a prefix of one
    of them (argparse's allow_abbrev), and the flags of a800_launch_extra_flags. Values: the one value of a flag the
    table names in full (`--flag value` or `--flag=value`) that is an integer, a size, a number or one of its choices
    (cli_value_fits), and a value the flag needs and was not given (at the end, or before the next option). Short
    options, ambiguous prefixes and the values of other kinds are the image's own parser's to judge
    (roles/serve/files/vllm_argcheck.py). Held to real vLLM's parser by tests/contract/test_cli_mutations.py:
    nothing real vLLM takes is refused here."""
    extra = {str(f).removeprefix("--").replace("-", "_") for f in extra_flags}
    known = {*flags, *extra}
    spellings = known | {"no_" + key for key, flag in flags.items() if flag.get("kind") == "bool"}
    args = [str(a) for a in extra_args or []]
    records = []
    for index, arg in enumerate(args):
        if not arg.startswith("--") or arg == "--":
            continue
        name, equals, inline = arg.partition("=")
        key = name[2:].replace("-", "_")
        flag = flags.get(key) if key not in extra else None
        if flag is not None:
            following = args[index + 1] if index + 1 < len(args) else None
            value = inline if equals else following
            if value is not None and (equals or not value.startswith("-") or _NEGATIVE.match(value)):
                records += _extra_value_checks(name, value, flag)
            elif not equals:
                records += _missing_value_checks(name, following, flag)
            continue
        # argparse also takes a prefix of an option (allow_abbrev); one that fits several is the parser's to refuse.
        if any(spelling.startswith(key) for spelling in spellings):
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        hint = f"did you mean --{close[0].replace('_', '-')}?" if close else "no known flag is close"
        records.append(
            check(
                "profile:serve_extra_args",
                FAIL,
                "serve_extra_args",
                name,
                "a flag of vllm serve",
                f"serve_extra_args: {name} is not a flag of vllm serve; {hint}",
                EXTRA_ARGS_FIX,
            )
        )
    return records


def extra_args_problems(extra_args: Iterable[Any], role_path: str, extra_flags: Iterable[str] = ()) -> list:
    """extra_args_checks against the role a800's recorded flag table (load_tables): one Python call."""
    return extra_args_checks(extra_args, load_tables(role_path)[1], extra_flags)


class FilterModule:
    def filters(self) -> dict:
        return {
            "a800_profile_checks": a800_profile_checks,
            "a800_profile_problems": a800_profile_problems,
            "extra_args_problems": extra_args_problems,
        }
