"""The collection's filters cost little per task: every task's worker process that templates one of them imports every
filter file of the collection (plugins/filter), so those files import nothing heavy at their top; and they are called
by their FQCN (a800.vllm.NAME), so a task that uses only Ansible's own filters imports none of them (with a legacy
`filter_plugins` directory, any filter, even ansible.builtin.int, made the worker import all of ours: ~1.2 s a task
on a busy 2-CPU machine, docs/testbed.md#filters-by-fqcn)."""

from __future__ import annotations

import configparser
import json
import re
import subprocess
import sys

from conftest import ROOT

FILTERS = sorted((ROOT / "plugins/filter").glob("*.py"))
# What a filter file may not import at its top: ansible.galaxy (~0.9 s) is imported where it is used.
HEAVY = ("ansible.galaxy", "requests", "aiohttp", "cryptography")


def python_json(code: str):
    """What a fresh Python running `code` in the repository prints, as JSON."""
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def filter_names() -> dict[str, str]:
    """Every filter the collection defines, with its file."""
    code = (
        "import importlib, json, sys; sys.path.insert(0, 'collections'); out = {}\n"
        f"for name in {[path.stem for path in FILTERS]!r}:\n"
        "    module = importlib.import_module('ansible_collections.a800.vllm.plugins.filter.' + name)\n"
        "    out |= {f: name for f in module.FilterModule().filters()}\n"
        "print(json.dumps(out))"
    )
    return python_json(code)


def test_importing_every_filter_file_imports_nothing_heavy():
    code = (
        "import importlib, sys; sys.path.insert(0, 'collections')\n"
        "import ansible.template, ansible.executor.task_executor\n"  # what a task's worker has imported already
        "before = set(sys.modules)\n"
        f"for name in {[path.stem for path in FILTERS]!r}:\n"
        "    importlib.import_module('ansible_collections.a800.vllm.plugins.filter.' + name)\n"
        f"print(sorted(m for m in set(sys.modules) - before if m.startswith({HEAVY!r})))"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]", f"imported at the top of a filter file: {run.stdout.strip()}"


def test_no_legacy_filter_plugins_directory():
    config = configparser.ConfigParser()
    config.read(ROOT / "ansible.cfg")
    assert not config.has_option("defaults", "filter_plugins")
    molecule = [p for p in (ROOT / "molecule").rglob("molecule.yml") if "ANSIBLE_FILTER_PLUGINS" in p.read_text()]
    assert molecule == []


def test_the_collections_filters_are_called_by_their_fqcn():
    names = filter_names()
    assert len(names) > 50  # the table is read, not empty
    short = re.compile(r"(?<![|])\|\s*(" + "|".join(sorted(names, key=len, reverse=True)) + r")\b(?![.\w-])")
    found = []
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if rel.parts[0].startswith(".") or rel.parts[0] in {"collections", "reports"}:
            continue
        if path.suffix in {".yml", ".yaml", ".j2"} and path.is_file() and not path.is_symlink():
            text = path.read_text()
            found += [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(1)}" for m in short.finditer(text)]
    assert found == [], "call these by a800.vllm.NAME:\n" + "\n".join(found)


def filter_files_imported_by_a_lookup(preload: bool) -> list[str]:
    """The collection's filter files that a lookup of one of its filters imports in a forked worker, after the
    controller ran (or did not run) the callback a800.vllm.controller_preload at the start of the playbook."""
    code = (
        "import json, os, sys\n"
        "from ansible.plugins.loader import callback_loader, filter_loader, init_plugin_loader\n"
        f"init_plugin_loader([{str(ROOT / 'collections')!r}])\n"
        f"if {preload!r}:\n"
        "    callback_loader.get('a800.vllm.controller_preload').v2_playbook_on_start(None)\n"
        "read, write = os.pipe()\n"
        "if os.fork() == 0:\n"  # a task's worker: forked from the controller, gone with the task
        "    before = set(sys.modules)\n"
        "    assert filter_loader.get('a800.vllm.os_identity') is not None\n"
        "    prefix = 'ansible_collections.a800.vllm.plugins.filter.'\n"
        "    new = sorted(m for m in set(sys.modules) - before if m.startswith(prefix))\n"
        "    os.write(write, json.dumps(new).encode())\n"
        "    os._exit(0)\n"
        "os.close(write); os.wait(); print(os.read(read, 65536).decode())"
    )
    return python_json(code)


def test_without_the_preload_a_worker_imports_every_filter_file():
    assert len(filter_files_imported_by_a_lookup(preload=False)) == len(FILTERS)


def test_with_the_preload_a_worker_imports_no_filter_file():
    assert filter_files_imported_by_a_lookup(preload=True) == []


def test_ansible_cfg_enables_the_preload():
    config = configparser.ConfigParser()
    config.read(ROOT / "ansible.cfg")
    enabled = [name.strip() for name in config.get("defaults", "callbacks_enabled").split(",")]
    assert "a800.vllm.controller_preload" in enabled
