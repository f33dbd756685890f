"""The kernel parameters set now (roles/host_tuning: read with the role's files, then "Set the kernel parameters now
where the running kernel differs"): one read of the running values, only the differing ones set. The role's own
script (vars/main.yml, __host_tuning_sysctl_script), with the argv the role gives it, runs against a STAND-IN sysctl
(tests/unit, a script over a directory of values) under dash and bash."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from jinja2 import StrictUndefined
from jinja2.nativetypes import NativeEnvironment

ROLE = ROOT / "roles" / "host_tuning"
SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]

# TEST DOUBLE of procps' sysctl: -n KEY prints the value (tabs between words, as the kernel's multi-word values
# are printed) or fails as sysctl does for a key the kernel lacks; -q -w KEY=VALUE writes it and logs the write.
STANDIN_SYSCTL = r"""#!/bin/sh
state=$SYSCTL_STATE
if [ "$1" = -n ]; then
  f=$state/$2
  [ -f "$f" ] || { echo "sysctl: cannot stat /proc/sys/$2: No such file or directory" >&2; exit 255; }
  tr ' ' '\t' < "$f"; echo; exit 0
fi
if [ "$1" = -q ] && [ "$2" = -w ]; then
  key=${3%%=*}
  [ -f "$state/$key" ] || { echo "sysctl: cannot stat /proc/sys/$key" >&2; exit 255; }
  printf '%s' "${3#*=}" > "$state/$key"; echo "$3" >> "$state/.writes"; exit 0
fi
echo "stand-in sysctl: unexpected $*" >&2; exit 2
"""


def argv(shell: str, sysctls: dict, apply: bool) -> list[str]:
    """The role's own argv (vars/main.yml, __host_tuning_sysctl_argv, rendered as Ansible renders it to a list): its
    script, yes or no, then a KEY=VALUE word each; `sh` replaced by the shell under test."""
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    rendered = (
        NativeEnvironment(undefined=StrictUndefined)
        .from_string(role_vars["__host_tuning_sysctl_argv"])
        .render(
            __host_tuning_sysctl_script=role_vars["__host_tuning_sysctl_script"],
            __host_tuning_sysctl_apply="yes" if apply else "no",
            host_tuning_sysctls=sysctls,
        )
    )
    assert rendered[:2] == ["sh", "-c"], rendered
    return [shell, *rendered[1:]]


def run(tmp_path: Path, shell: str, sysctls: dict, kernel: dict, apply: bool) -> subprocess.CompletedProcess:
    state = tmp_path / "state"
    if not state.exists():
        state.mkdir()
        for key, value in kernel.items():
            (state / key).write_text(value)
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "sysctl").write_text(STANDIN_SYSCTL)
        (tmp_path / "bin" / "sysctl").chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", SYSCTL_STATE=str(state))
    return subprocess.run(argv(shell, sysctls, apply), env=env, capture_output=True, text=True, check=False)


def writes(tmp_path: Path) -> list[str]:
    log = tmp_path / "state" / ".writes"
    return log.read_text().splitlines() if log.exists() else []


def defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["host_tuning_sysctls"]


@pytest.mark.parametrize("shell", SHELLS)
def test_only_the_differing_values_are_set_and_a_second_run_sets_none(tmp_path, shell):
    wanted = defaults()
    kernel = {key: str(value) for key, value in wanted.items()} | {"vm.swappiness": "60", "vm.max_map_count": "65530"}
    first = run(tmp_path, shell, wanted, kernel, apply=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["vm.swappiness: 60 -> 1", "vm.max_map_count: 65530 -> 1048576"]
    assert writes(tmp_path) == ["vm.swappiness=1", "vm.max_map_count=1048576"]
    second = run(tmp_path, shell, wanted, kernel, apply=True)
    assert (second.returncode, second.stdout, len(writes(tmp_path))) == (0, "", 2), second


@pytest.mark.parametrize("shell", SHELLS)
def test_without_apply_it_says_what_differs_and_sets_nothing(tmp_path, shell):
    kernel = {"vm.swappiness": "60", "kernel.numa_balancing": "0"}
    out = run(tmp_path, shell, {"vm.swappiness": 1, "kernel.numa_balancing": 0, "vm.absent": 5}, kernel, apply=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["vm.swappiness: 60 -> 1", "vm.absent: (not in this kernel) -> 5"]
    assert writes(tmp_path) == []


@pytest.mark.parametrize("shell", SHELLS)
def test_a_multi_word_value_printed_with_tabs_is_the_same_value(tmp_path, shell):
    wanted = {"net.ipv4.tcp_rmem": "4096 87380 16777216"}
    same = run(tmp_path, shell, wanted, {"net.ipv4.tcp_rmem": "4096 87380 16777216"}, apply=True)
    assert (same.returncode, same.stdout, writes(tmp_path)) == (0, "", []), same


@pytest.mark.parametrize("shell", SHELLS)
def test_a_key_the_kernel_lacks_fails_where_it_would_be_set(tmp_path, shell):
    out = run(tmp_path, shell, {"vm.absent": 5}, {}, apply=True)
    assert out.returncode != 0
    assert "cannot stat /proc/sys/vm.absent" in out.stderr
