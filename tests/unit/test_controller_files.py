"""The controller-side reads of the image role (plugins/lookup/controller_files.py) held to the modules they replace:
the same tree read by `ansible.builtin.find` (recurse, hidden, follow, get_checksum, excludes) and the same paths by
`ansible.builtin.stat`, on a real ansible-core run, must give the same records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible_collections.a800.vllm.plugins.lookup.controller_files import file_record, tree_record
from test_rolling import ansible_playbook

EXCLUDES = ["*.pyc", "*.pyo", ".DS_Store"]


def overlay(where: Path) -> Path:
    """An overlay as a user makes one: nested package files, a hidden file, files the excludes drop, a directory
    reached through a symbolic link, an empty file."""
    top = where / "overlay"
    (top / "vllm/v1/attention").mkdir(parents=True)
    (top / "vllm/v1/attention/mla.py").write_text("x = 1\n")
    (top / "vllm/v1/attention/mla.cpython-312.pyc").write_bytes(b"\x00\x01")
    (top / "vllm/.keep").write_text("")
    (top / "vllm/.DS_Store").write_bytes(b"junk")
    (where / "elsewhere/ops").mkdir(parents=True)
    (where / "elsewhere/ops/kernel.py").write_text("def k():\n    return 2\n")
    os.symlink(where / "elsewhere/ops", top / "vllm/ops")
    return top


def modules_saw(where: Path, play_vars: dict) -> dict:
    """find over the overlay and stat over the paths, as the image role ran them, printed as JSON."""
    tasks = [
        {"name": "find", "ansible.builtin.find": {"paths": "{{ tree }}", "recurse": True, "hidden": True,
                                                 "follow": True, "file_type": "file", "excludes": EXCLUDES,
                                                 "get_checksum": True, "checksum_algorithm": "sha256"},
         "register": "found"},
        {"name": "stat", "ansible.builtin.stat": {"path": "{{ item }}", "get_checksum": False}, "loop": "{{ paths }}",
         "register": "stats"},
        {"name": "show",
         "ansible.builtin.debug": {"msg": "SAW {{ {'find': found, 'stats': stats.results} | to_json }}"}},
    ]  # fmt: skip
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "vars": play_vars, "tasks": tasks}]
    rc, out = ansible_playbook(where, play)
    assert rc == 0, out
    line = next(line for line in out.splitlines() if "SAW " in line)
    return json.loads(line.split("SAW ", 1)[1].rstrip('"').encode().decode("unicode_escape"))


def test_the_lookup_reads_what_find_and_stat_read(tmp_path: Path):
    top = overlay(tmp_path)
    unreadable = tmp_path / "secret.patch"
    unreadable.write_text("--- a\n+++ b\n")
    paths = [str(top / "vllm/v1/attention/mla.py"), str(tmp_path / "missing.patch"), str(top / "vllm")]
    saw = modules_saw(tmp_path, {"tree": str(top), "paths": paths})

    found = sorted([os.path.relpath(f["path"], top), f["checksum"]] for f in saw["find"]["files"])
    tree = tree_record(str(top), EXCLUDES)
    assert tree == {"exists": True, "files": found}
    assert [name for name, _ in tree["files"]] == ["vllm/.keep", "vllm/ops/kernel.py", "vllm/v1/attention/mla.py"]

    for path, stat in zip(paths, saw["stats"], strict=True):
        record, st = file_record(path), stat["stat"]
        assert (record["exists"], record["isreg"], record["readable"]) == (
            st["exists"], st.get("isreg", False), st.get("readable", False)), path  # fmt: skip
    assert file_record(paths[0])["text"] == "x = 1\n"
    assert file_record(paths[1])["text"] is None and file_record(paths[2])["text"] is None


@pytest.mark.parametrize("make", ["absent", "a file"])
def test_an_overlay_that_is_not_a_directory_does_not_exist_as_find_reports_it(tmp_path: Path, make: str):
    path = tmp_path / "overlay"
    if make == "a file":
        path.write_text("not a directory\n")
    saw = modules_saw(tmp_path, {"tree": str(path), "paths": []})
    assert str(path) in saw["find"]["skipped_paths"]  # what the role read as "does not exist"
    assert tree_record(str(path), EXCLUDES) == {"exists": False, "files": []}


def test_a_tree_takes_one_directory(tmp_path: Path):
    """Through Ansible, as the role calls it: one directory is indexed, two are refused with the reason."""
    ask = "{{ lookup('a800.vllm.controller_files', *dirs, tree=true) }}"
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
             "tasks": [{"name": "one", "ansible.builtin.debug": {"msg": ask}, "vars": {"dirs": [str(tmp_path)]}},
                       {"name": "two", "ansible.builtin.debug": {"msg": ask},
                        "vars": {"dirs": [str(tmp_path), str(tmp_path)]}}]}]  # fmt: skip
    rc, out = ansible_playbook(tmp_path, play)
    assert rc != 0 and "takes one directory, got 2" in out, out
    assert '"play.yml",' in out, out  # the first: the directory's one file, the play
