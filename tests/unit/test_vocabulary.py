"""One home for what several roles read: the role a800 (roles/a800/defaults), listed first in every play, as
kubespray's kubespray_defaults is. A value that another role or play reads is never copied as a literal there: the
reader takes the owner's variable where it can see it (the inventory's value, another host's through hostvars) and
falls back to the vocabulary's a800_ value, so that changing a default in its one home changes it for every reader.

What counts as a literal copy, outside the role X a configured value is named after (X_..., set by a role's
defaults or by the inventory's group_vars; what a role returns, its facts and results, is not a configured value):
- in YAML and templates, `X_var | default(<literal>)` (a number, a quoted string, true/false, [] or {}), and
  `map(attribute='X_var', default=<literal>)` over other hosts' hostvars;
- in the plugins' Python, `.get("X_var", <literal>)`, `.get("X_var") or <literal>`, or a helper called with the name
  and a literal fallback;
- another role's file read by its path in a lookup (`<role>/defaults/...`, `<role>/vars/...`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, VOCABULARY

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())


def configured() -> set[str]:
    """The names a role's defaults or an inventory's group_vars set."""
    files = [*ROOT.glob("roles/*/defaults/**/*.yml"), *ROOT.glob("inventories/*/group_vars/**/*.yml")]
    return {name for f in files for name in (yaml.safe_load(f.read_text()) or {}) if isinstance(name, str)}


CONFIGURED = configured()
LITERAL = r"(?:-?\d[\d.]*|'[^']*'|\"[^\"]*\"|true|false|True|False|\[\]|\{\})"


def owner(name: str) -> str | None:
    """The role a variable is named after (the longest role name that prefixes it), if any."""
    found = [role for role in ROLES if name.startswith(role + "_")]
    return max(found, key=len) if found else None


def where(path: Path) -> str:
    """The role a file belongs to, or its path (a playbook, a plugin)."""
    rel = path.relative_to(ROOT)
    return rel.parts[1] if rel.parts[0] == "roles" else str(rel)


def yaml_files() -> list[Path]:
    files = [*ROOT.glob("roles/*/**/*.yml"), *ROOT.glob("roles/*/templates/**/*.j2"), *ROOT.glob("playbooks/*.yml")]
    files += [*ROOT.glob("a800vllm/playbooks/*.yml"), ROOT / "site.yml"]
    return sorted(files)


def jinja_copies(text: str, place: str) -> list[str]:
    """`name | default(<literal>)` of a variable named after another role than `place`, one finding per line."""
    found = []
    # the name read is the last of a chain: hostvars[host].monitoring_prometheus_port | default(9090)
    pattern = re.compile(
        r"\b((?:[a-z_][a-z0-9_]*(?:\[[^\]]+\])*\.)*)([a-z][a-z0-9_]*)\s*\|\s*default\(\s*(" + LITERAL + r")\s*[,)]"
    )
    attribute = re.compile(r"attribute=['\"]([a-z][a-z0-9_]*)['\"]\s*,\s*default=(" + LITERAL + ")")
    for number, line in enumerate(text.splitlines(), 1):
        reads = [m.group(2, 3) for m in pattern.finditer(line)] + [m.group(1, 2) for m in attribute.finditer(line)]
        for name, literal in reads:
            role = owner(name)
            if role and role not in ("a800", place) and name in CONFIGURED:
                found.append(f"{name} | default({literal}) (line {number})")
    return found


def python_copies(text: str) -> list[str]:
    """A name's literal fallback in Python: `.get("X_var", <literal>)`, `.get("X_var") or <literal>`, or any call
    that takes the name and then a literal as its last two arguments (a helper such as `var(host, "X_var", True)`)."""
    found = []
    name = r"[\"']([a-z][a-z0-9_]*)[\"']"
    forms = re.compile(
        r"\.get\(\s*" + name + r"\s*\)\s*or\s+(" + LITERAL + r")|" + name + r"\s*,\s*(" + LITERAL + r")\s*\)"
    )
    for number, line in enumerate(text.splitlines(), 1):
        for match in forms.finditer(line):
            var, literal = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
            if owner(var) not in (None, "a800") and var in CONFIGURED:
                found.append(f'"{var}" falls back to {literal} (line {number})')
    return found


def file_reads(text: str, place: str) -> list[str]:
    """Another role's files read by their path (its defaults or vars, which the reader's play does not load)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if "lookup(" in line:
            for m in re.finditer(r"\b([a-z_0-9]+)/(?:defaults|vars)/main\b[^'\"\s]*", line):
                if m.group(1) in ROLES and m.group(1) not in ("a800", place):
                    found.append(f"{m.group(0)} (line {number})")
    return found


def copies_in(path: Path) -> list[str]:
    text = path.read_text()
    if path.suffix == ".py":
        return python_copies(text)
    place = where(path)
    if path.parent.name == "meta":  # argument specs: a default shown to people, not evaluated
        return []
    return jinja_copies(text, place) + file_reads(text, place)


def test_no_role_or_play_copies_another_roles_value():
    files = [*yaml_files(), *sorted(ROOT.glob("plugins/**/*.py"))]
    copies = {str(p.relative_to(ROOT)): found for p in files if (found := copies_in(p))}
    assert copies == {}, (
        "literal copies of another role's value (read the owner's variable, else the a800 vocabulary, "
        f"roles/a800/defaults/main/vocabulary.yml): {copies}"
    )


@pytest.mark.parametrize(
    ("text", "suffix", "place"),
    [
        ('port: "{{ serve_port | default(8001) }}"', ".yml", "monitoring"),
        ('url: "{{ hostvars[h].monitoring_prometheus_port | default(9090) }}"', ".yml", "verify"),
        ('min: "{{ weights_residency_threshold_pct | default(99.0) | float }}"', ".yml", "monitoring"),
        ('x: "{{ serve_error_catalogue | default([]) }}"', ".yml", "verify"),
        ("c: \"{{ lookup('file', role_path ~ '/../serve/defaults/main/catalogue.yml') }}\"", ".yml", "image"),
        ("keys: \"{{ hosts | map(attribute='serve_api_key', default='') | list }}\"", ".yml", "fleet"),
        ('port = int(hv.get("serve_port") or 8001)', ".py", ""),
        ('publish = str(hv.get("serve_publish_address", "127.0.0.1"))', ".py", ""),
        ('if str(var(h, "monitoring_dcgm_enabled", True)).lower() == "true"', ".py", ""),
    ],
)
def test_a_literal_copy_is_found(tmp_path, text, suffix, place):
    """The test above fails on each kind of copy it is meant to find (each was in the tree before the vocabulary)."""
    if suffix == ".py":
        assert python_copies(text)
    else:
        assert jinja_copies(text, place) + file_reads(text, place)


@pytest.mark.parametrize(
    ("text", "place"),
    [
        ('port: "{{ serve_port | default(a800_serve_port) }}"', "monitoring"),
        ('a: "{{ monitoring_prometheus_port | default(a800_prometheus_port) }}"', "verify"),
        ('own: "{{ serve_extra_args | default([]) }}"', "serve"),  # a role's own variable
        ('knob: "{{ a800_host_batch | default(1) }}"', "playbooks/host.yml"),  # the vocabulary's own
    ],
)
def test_the_vocabulary_and_a_roles_own_values_are_no_copies(text, place):
    assert jinja_copies(text, place) == []


def test_the_vocabulary_holds_the_values_several_roles_read():
    defaults = VOCABULARY
    catalogue = yaml.safe_load((ROOT / "roles/a800/defaults/main/catalogue.yml").read_text())
    assert defaults["a800_serve_port"] == 8001  # the article's port
    assert defaults["a800_serve_publish_address"] == "127.0.0.1"
    assert defaults["a800_prometheus_port"] == 9090
    assert defaults["a800_residency_threshold_pct"] == 99.0
    assert defaults["a800_reports_dir"].endswith("/reports")
    assert {entry["name"] for entry in catalogue["a800_error_catalogue"]} >= {"engine_ready_timeout"}
    # the owners' defaults point at it
    for role, name, value in [
        ("serve", "serve_publish_address", "{{ a800_serve_publish_address }}"),
        ("serve", "serve_error_catalogue", "{{ a800_error_catalogue }}"),
        ("monitoring", "monitoring_prometheus_port", "{{ a800_prometheus_port }}"),
        ("weights", "weights_residency_threshold_pct", "{{ a800_residency_threshold_pct }}"),
        ("verify", "verify_reports_dir", "{{ a800_reports_dir }}"),
        ("bench", "bench_reports_dir", "{{ verify_reports_dir | default(a800_reports_dir) }}"),
        ("monitoring", "monitoring_reports_dir", "{{ a800_reports_dir }}"),
        ("fleet", "fleet_bench_reports_dir", "{{ a800_reports_dir }}"),
    ]:
        files = sorted((ROOT / "roles" / role / "defaults").rglob("*.yml"))
        merged = {k: v for f in files for k, v in (yaml.safe_load(f.read_text()) or {}).items()}
        assert merged[name] == value, f"roles/{role}/defaults: {name}"
