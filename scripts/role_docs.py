#!/usr/bin/env python3
"""Generate the variables section of each role's README.md from its meta/argument_specs.yml (and its
files/*_schema.yml, schemas of data in the same form), and the phase table of the top README.md from
a800vllm/phases.yml.

    scripts/role_docs.py           rewrite the generated sections
    scripts/role_docs.py --check   exit 1 when a README is out of date (used by the unit tests)

Each section sits between the markers below; text outside them is written by hand and kept.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- BEGIN generated from meta/argument_specs.yml by scripts/role_docs.py -->"
END = "<!-- END generated -->"
PHASES_BEGIN = "<!-- BEGIN generated from a800vllm/phases.yml by scripts/role_docs.py -->"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _option_rows(options: dict, prefix: str = "") -> list[str]:
    """One table row per option; nested options (a dict's or a list's elements') follow as dotted names."""
    rows = []
    for name, opt in options.items():
        desc = (
            " ".join(opt.get("description", []))
            if isinstance(opt.get("description"), list)
            else opt.get("description", "")
        )
        default = f"`{opt['default']}`" if "default" in opt else "-"
        secret = " (secret, never logged)" if opt.get("no_log") else ""
        kind = opt.get("type", "str") + (f" of {opt['elements']}" if opt.get("elements") else "")
        rows.append(
            f"| `{prefix}{name}` | {kind} | {_cell(default)} | "
            f"{'yes' if opt.get('required') else 'no'} | {_cell(desc)}{secret} |"
        )
        if opt.get("options"):
            rows += _option_rows(opt["options"], f"{prefix}{name}{'[]' if opt.get('type') == 'list' else ''}.")
    return rows


def variables_section(role: Path) -> str:
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    headings = {entry: f"Entry point `{entry}`" for entry in specs}
    # Schemas of data that are not a task entry point, in the same form (the role a800's model profile): kept out of
    # meta/argument_specs.yml, which Ansible parses each time a play loads the role.
    for path in sorted((role / "files").glob("*_schema.yml")):
        schema = yaml.safe_load(path.read_text())
        specs |= schema
        headings |= {name: f"Schema `{name}` (files/{path.name})" for name in schema}
    lines = [BEGIN]
    for entry, spec in specs.items():
        lines += ["", f"### {headings[entry]}: {spec.get('short_description', '')}", ""]
        for paragraph in spec.get("description", []) or []:
            lines.append(paragraph)
        lines += ["", "| variable | type | default | required | description |", "|---|---|---|---|---|"]
        lines += _option_rows(spec.get("options") or {})
    lines += ["", END]
    return "\n".join(lines)


def phases_section() -> str:
    phases = yaml.safe_load((ROOT / "a800vllm" / "phases.yml").read_text())["phases"]
    lines = [PHASES_BEGIN, "", "| # | phase | what it does | playbook | tag | opt-in |", "|---|---|---|---|---|---|"]
    for number, phase in enumerate(phases, 1):
        playbook = f"`{phase['playbook']}`" + (f" (alone: `{phase['alone']}`)" if phase.get("alone") else "")
        opt_in = f"`{phase['opt_in']}`" if phase.get("opt_in") else "-"
        row = [str(number), phase["name"], phase["description"], playbook, f"`{phase['tag']}`", opt_in]
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join([*lines, "", END])


def render_readme(path: Path) -> str:
    text = path.read_text()
    head, rest = text.split(PHASES_BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + phases_section() + tail


def render(role: Path) -> str:
    readme = role / "README.md"
    section = variables_section(role)
    if not readme.exists():
        return f"# Role `{role.name}`\n\n## Variables\n\n{section}\n"
    text = readme.read_text()
    if BEGIN not in text:
        return text.rstrip("\n") + f"\n\n## Variables\n\n{section}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + section + tail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report out-of-date READMEs instead of writing")
    args = parser.parse_args()
    stale = []
    for role in sorted(p.parent.parent for p in ROOT.glob("roles/*/meta/argument_specs.yml")):
        wanted = render(role)
        readme = role / "README.md"
        if readme.exists() and readme.read_text() == wanted:
            continue
        if args.check:
            stale.append(str(readme.relative_to(ROOT)))
        else:
            readme.write_text(wanted)
            print(f"wrote {readme.relative_to(ROOT)}")
    readme = ROOT / "README.md"
    wanted = render_readme(readme)
    if readme.read_text() != wanted:
        if args.check:
            stale.append("README.md")
        else:
            readme.write_text(wanted)
            print("wrote README.md")
    if stale:
        print("out of date (run scripts/role_docs.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
