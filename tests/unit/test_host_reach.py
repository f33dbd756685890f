"""The benchmark's own tool: host_reach (tests/testbed/bench-loop/callback_plugins), which counts, per play, the task
runs that reached a host and those that ran only on the controller. scripts/bench-loop prints its figures; here it
counts a known play."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import ROOT

PLAY = [
    {
        "name": "two hosts",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"name": "a module on the host", "ansible.builtin.command": "true", "changed_when": False},
            {"name": "controller only", "ansible.builtin.set_fact": {"x": 1}},
            {"name": "delegated", "ansible.builtin.command": "true", "delegate_to": "localhost", "changed_when": False},
            {"name": "skipped", "ansible.builtin.command": "true", "when": False},
            {"name": "on one host", "ansible.builtin.stat": {"path": "/"}, "when": "inventory_hostname == 'h1'"},
        ],
    },
    {"name": "second", "hosts": "h2", "gather_facts": False, "tasks": [{"name": "once", "ansible.builtin.ping": {}}]},
]


def test_it_counts_what_reached_each_host_play_by_play(tmp_path: Path):
    (tmp_path / "play.yml").write_text(yaml.safe_dump(PLAY, sort_keys=False))
    env = os.environ | {
        "ANSIBLE_CALLBACK_PLUGINS": str(ROOT / "tests/testbed/bench-loop/callback_plugins"),
        "ANSIBLE_CALLBACKS_ENABLED": "host_reach",
        "ANSIBLE_NOCOLOR": "1",
    }
    run = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "h1,h2,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "play.yml"],
        cwd=tmp_path, capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:]
    plays = [json.loads(line.removeprefix("HOST_REACH ")) for line in run.stdout.splitlines()
             if line.startswith("HOST_REACH ")]  # fmt: skip
    assert [(p["play"], p["host"][0], p["controller"][0]) for p in plays] == [("two hosts", 3, 4), ("second", 1, 0)]
    assert plays[0]["reached"] == {"a module on the host": 2, "on one host": 1}
