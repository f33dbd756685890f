"""The lane runner lists only what failed the items that failed (tests/testbed/lane_failures.py): a rescued task, an
ignored error and a scenario's expected refusal print `fatal:` too, and must not hide the real cause."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "testbed"))
from lane_failures import failures
from playbook_output import changed_tasks, recap, task_outcomes, unchanged_message

RESCUED_THEN_FAILED = """\
PLAY [Host] ********************************************************************

TASK [nvidia_driver : Install the pinned driver] *******************************
fatal: [a800-mol-upgrade]: FAILED! => changed=false
  msg: 'E: Version 580.95.05-0ubuntu1 for nvidia-driver-580 was not found'

TASK [nvidia_driver : Roll back to the driver that ran before] *****************
changed: [a800-mol-upgrade]

TASK [nvidia_driver : Probe the port] ******************************************
fatal: [a800-mol-upgrade]: FAILED! => changed=false
  msg: connection refused
...ignoring

PLAY RECAP *********************************************************************
a800-mol-upgrade           : ok=12   changed=1    unreachable=0    failed=0    skipped=3    rescued=1    ignored=1

PLAY [Host again] **************************************************************

TASK [nvidia_driver : Read the host's facts again after the reboot] ************
fatal: [a800-mol-upgrade]: FAILED! => changed=false
  msg: 'Module result deserialization failed: No start of json char found'

PLAY RECAP *********************************************************************
a800-mol-upgrade           : ok=3    changed=0    unreachable=0    failed=1    skipped=0    rescued=0    ignored=0

CRITICAL Ansible return code was 2, command was: ansible-playbook converge.yml
"""

PYTEST = """\
E   assert (4, 16) == (20, 0)
E     +  where (4, 16) = ...
=========================== short test summary info ============================
FAILED tests/unit/test_fleet.py::test_the_overhead_comparison_runs_both_paths_alike - assert (4, 16) == (20, 0)
1 failed, 1255 passed in 840.12s
"""


def test_only_the_failure_the_recap_counts_is_listed():
    listed = failures(RESCUED_THEN_FAILED)
    fatal = [line for line in listed if "fatal:" in line]
    assert len(fatal) == 1, listed
    assert fatal[0].startswith(
        "[nvidia_driver : Read the host's facts again after the reboot] fatal: [a800-mol-upgrade]"
    )
    assert any(line.startswith("CRITICAL Ansible return code was 2") for line in listed), listed


def test_a_rescued_failure_alone_lists_nothing_of_ansible():
    passed = RESCUED_THEN_FAILED.split("PLAY [Host again]")[0]
    assert [line for line in failures(passed) if "fatal:" in line] == []


def test_pytest_failures_and_their_assertion_are_listed():
    listed = failures(PYTEST)
    assert listed[0].startswith("FAILED tests/unit/test_fleet.py::test_the_overhead_comparison_runs_both_paths_alike")
    assert "E   assert (4, 16) == (20, 0)" in listed
    assert not any("where (4, 16)" in line for line in listed), listed  # the first line of an E block only


def test_what_molecule_prints_behind_its_gutter_is_read():
    log = (
        "  \x1b[2m│\x1b[0m E           AssertionError: assert [('A800VllmDo...', 'warning')] ==\n"
        "  \x1b[2m│\x1b[0m FAILED tests/test_monitoring.py::test_stopping_an_engine[ansible://gw] - Ass\n"
    )
    assert failures(log) == [
        "FAILED tests/test_monitoring.py::test_stopping_an_engine[ansible://gw] - Ass",
        "E           AssertionError: assert [('A800VllmDo...', 'warning')] ==",
    ]


def test_the_tasks_molecule_found_changed_are_named():
    log = "CRITICAL Idempotence test failed because of the following tasks:\n*  => weights : Read the prewarm job\n"
    assert failures(log) == [
        "CRITICAL Idempotence test failed because of the following tasks:",
        "*  => weights : Read the prewarm job",
    ]


def test_the_script_reads_the_logs_it_is_given(tmp_path):
    log = tmp_path / "item-driver-upgrade.log"
    log.write_text(RESCUED_THEN_FAILED)
    run = subprocess.run([sys.executable, str(ROOT / "tests/testbed/lane_failures.py"), str(log)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert run.stdout.splitlines()[0] == "== item-driver-upgrade: 2 failure line(s)"


def test_the_changed_tasks_of_a_run_are_named():
    text = RESCUED_THEN_FAILED.split("PLAY [Host again]")[0]
    assert changed_tasks(text, "a800-mol-upgrade") == ["nvidia_driver : Roll back to the driver that ran before"]
    assert recap(text, "a800-mol-upgrade").startswith("a800-mol-upgrade : ok=12 changed=1 unreachable=0 failed=0 ")
    message = unchanged_message(text, "a800-mol-upgrade")
    assert "changed=1" in message and "Roll back to the driver that ran before" in message
    assert unchanged_message(text, "other") == "recap: (no recap for other); changed tasks: none named"


def test_what_each_run_of_a_task_did_is_read():
    host = "a800-mol-upgrade"
    assert task_outcomes(RESCUED_THEN_FAILED, host, "nvidia_driver : Install the pinned driver") == ["fatal"]
    assert task_outcomes(RESCUED_THEN_FAILED, host, "nvidia_driver : Roll back to the driver that ran before") == [
        "changed"
    ]
    assert task_outcomes(RESCUED_THEN_FAILED, "other", "nvidia_driver : Install the pinned driver") == []
    assert task_outcomes(RESCUED_THEN_FAILED, host, "nvidia_driver : Not a task of this run") == []
