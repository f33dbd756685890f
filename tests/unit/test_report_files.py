"""The report_files action (plugins/action/report_files.py): a host's reports written on the controller in one call.
Through Ansible itself (`ansible localhost -m a800.vllm.report_files`), as the verify role calls it, and its writer."""

from __future__ import annotations

import json
import stat

import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.a800.vllm.plugins.action.report_files import write_reports
from conftest import ansible_adhoc


def run_action(directory, files: dict, *extra: str) -> tuple[int, dict]:
    args = json.dumps({"dir": str(directory), "files": files})
    rc, document, out = ansible_adhoc("localhost", "-m", "a800.vllm.report_files", "-a", args, *extra)
    assert document is not None, out
    return rc, document["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_it_creates_the_directory_writes_the_files_and_reports_no_change(tmp_path):
    target = tmp_path / "reports" / "a800-sim-1"
    rc, result = run_action(target, {"verify.json": '{"ok": true}\n', "report.md": "# PASS\n"})
    assert rc == 0, result
    assert result["changed"] is False
    assert sorted(result["written"]) == [str(target / "report.md"), str(target / "verify.json")]
    assert (target / "verify.json").read_text() == '{"ok": true}\n'
    assert stat.S_IMODE((target / "report.md").stat().st_mode) == 0o644
    assert stat.S_IMODE(target.stat().st_mode) & 0o755 == 0o755


def test_an_unchanged_file_is_left_alone_and_a_changed_one_replaced(tmp_path):
    write_reports(str(tmp_path), {"verify.json": "old\n", "report.md": "same\n"})
    before = (tmp_path / "report.md").stat().st_mtime_ns
    written = write_reports(str(tmp_path), {"verify.json": "new\n", "report.md": "same\n"})
    assert written == [str(tmp_path / "verify.json")]
    assert (tmp_path / "verify.json").read_text() == "new\n"
    assert (tmp_path / "report.md").stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "verify.json"]  # no temporary file left


def test_check_mode_writes_nothing(tmp_path):
    rc, result = run_action(tmp_path / "r", {"report.md": "# PASS\n"}, "--check")
    assert (rc, result["changed"], result["written"]) == (0, False, []), result
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("name", ["../escape.md", "sub/report.md", "", ".."])
def test_a_name_with_a_directory_part_is_refused(tmp_path, name):
    with pytest.raises(AnsibleActionFail, match="is not a file name"):
        write_reports(str(tmp_path), {name: "x"})
    assert not (tmp_path.parent / "escape.md").exists()


def test_a_missing_argument_is_refused_by_its_spec(tmp_path):
    rc, _, out = ansible_adhoc("localhost", "-m", "a800.vllm.report_files", "-a", json.dumps({"files": {}}))
    assert rc != 0
    assert "missing required arguments: dir" in out, out
