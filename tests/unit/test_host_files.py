"""One read of a role's files (plugins/modules/host_read.py) and the skip of a write whose file already matches
(plugins/filter/host_files.py, file_current). The filter is held to the real modules: for every case, on a real
ansible-core run, it says "current" exactly where ansible.builtin.copy or ansible.builtin.file (check mode, --diff)
would change nothing."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.a800.vllm.plugins.filter.host_files import file_current, file_path
from test_rolling import ansible_playbook

CONTENT = "# Managed by Ansible (test): ünïcode, and a last line without its newline\nkey=value"
ME = pwd.getpwuid(os.getuid()).pw_name
SAY = "{{ {'states': read.paths, 'changed': write.changed} | to_json }}"


def make(tmp_path: Path, case: str) -> tuple[Path, dict]:
    """The host as the case leaves it, and the task's file spec."""
    dest = tmp_path / "host" / case
    dest.parent.mkdir(exist_ok=True)
    spec = {"dest": str(dest), "content": CONTENT, "mode": "0644", "owner": ME}
    if case in ("same", "mode differs", "symbolic mode", "link to the same"):
        dest.write_text(CONTENT)
        dest.chmod(0o600 if case == "mode differs" else 0o644)
    if case == "symbolic mode":
        spec["mode"] = "u=rw,g=r,o=r"
    if case == "link to the same":
        dest.rename(dest.with_suffix(".target"))
        dest.symlink_to(dest.with_suffix(".target"))
    if case == "content differs":
        dest.write_text(CONTENT + "\n")
        dest.chmod(0o644)
    if case.startswith("directory"):
        dest.mkdir(mode=0o755)
        dest.chmod(0o700 if case == "directory mode differs" else 0o755)
        spec = {"path": str(dest), "state": "directory", "mode": "0755", "owner": ME}
    if case.startswith("absent"):
        spec = {"path": str(dest), "state": "absent"}
        if case == "absent but there":
            dest.write_text("left over\n")
    return dest, spec


CASES = ["same", "content differs", "mode differs", "symbolic mode", "missing", "link to the same", "directory",
         "directory mode differs", "absent", "absent but there"]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_current_exactly_where_the_real_module_would_change_nothing(tmp_path: Path, case: str):
    dest, spec = make(tmp_path, case)
    module = "ansible.builtin.file" if "state" in spec else "ansible.builtin.copy"
    play = [{
        "name": "contract", "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "read", "a800.vllm.host_read": {"paths": [str(dest)]}, "register": "read"},
            {"name": "write", module: spec, "register": "write", "check_mode": True, "diff": True},
            {"name": "say", "ansible.builtin.debug": {"msg": SAY}},
        ],
    }]  # fmt: skip
    rc, out = ansible_playbook(tmp_path, play, "-i", "localhost,", "-c", "local",
                               "-e", f"ansible_python_interpreter={sys.executable}")  # fmt: skip
    assert rc == 0, out[-3000:]
    said = json.loads(out.split('"msg": ')[1].split("\n")[0].strip().strip('"').encode().decode("unicode_escape"))
    current = file_current(said["states"], spec)
    # Never a skipped write that would have changed something; where the filter cannot tell (a symbolic mode) it
    # answers "not current", and the task runs and finds nothing to do, as before.
    assert not (current and said["changed"]), (case, said)
    cannot_tell = case == "symbolic mode"
    assert current is (False if cannot_tell else not said["changed"]), (case, said)
    assert current is (case in ("same", "directory", "absent")), (case, said)


def test_host_read_returns_states_contents_and_commands(tmp_path: Path):
    (tmp_path / "conf").write_text("a=1\n")
    play = [{
        "name": "read", "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "read", "register": "read", "a800.vllm.host_read": {
                "paths": [str(tmp_path / "conf"), str(tmp_path), str(tmp_path / "none")],
                "contents": [str(tmp_path / "conf"), str(tmp_path / "none")],
                "commands": {"ok": ["sh", "-c", "echo out; echo err >&2"], "fails": ["sh", "-c", "exit 3"],
                             "missing": ["no-such-program-a800", "--version"]}}},
            {"name": "say", "ansible.builtin.debug": {"msg": "{{ read | to_json }}"}},
        ],
    }]  # fmt: skip
    rc, out = ansible_playbook(tmp_path, play, "-i", "localhost,", "-c", "local",
                               "-e", f"ansible_python_interpreter={sys.executable}")  # fmt: skip
    assert rc == 0, out[-3000:]
    read = json.loads(json.loads(out.split('"msg": ')[1].split("\n")[0]))
    conf = read["paths"][str(tmp_path / "conf")]
    assert conf == {"state": "file", "mode": f"{(tmp_path / 'conf').stat().st_mode & 0o7777:04o}", "owner": ME,
                    "group": grp.getgrgid(os.getgid()).gr_name, "sha1": hashlib.sha1(b"a=1\n").hexdigest()}  # fmt: skip
    assert read["paths"][str(tmp_path)]["state"] == "directory"
    assert read["paths"][str(tmp_path / "none")] == {"state": "absent"}
    assert read["contents"][str(tmp_path / "conf")] == {"found": True, "content": "a=1\n"}
    assert read["contents"][str(tmp_path / "none")] == {"found": False, "content": ""}
    assert read["commands"]["ok"] == {"rc": 0, "stdout": "out", "stderr": "err"}
    assert read["commands"]["fails"]["rc"] == 3
    assert read["commands"]["missing"]["rc"] == 127
    assert read["changed"] is False


def test_anything_not_read_or_not_comparable_is_not_current():
    assert file_current({}, {"dest": "/etc/x", "content": "a"}) is False
    assert file_current(None, "/etc/x", content="a") is False
    with pytest.raises(AnsibleFilterError, match="content"):
        file_current({"/etc/x": {"state": "file", "sha1": "0"}}, "/etc/x")
    with pytest.raises(AnsibleFilterError, match="state must be"):
        file_current({}, {"path": "/etc/x", "state": "link"})
    with pytest.raises(AnsibleFilterError, match="no dest or path"):
        file_path({"content": "a"})
    link = {"/etc/x": {"state": "link"}}
    assert file_current(link, {"dest": "/etc/x", "content": "a"}) is False
    assert file_current(link, {"path": "/etc/x", "state": "directory"}) is False
