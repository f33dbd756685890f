"""Where a run's time goes, play by play: the tasks that reached a host (ran a module there) and the tasks that ran
only on the controller, with their summed seconds (scripts/bench-loop enables it; a benchmark tool, not a test).

A task reached the host when its action runs a module there: every action but the controller-side ones below, and
not delegated to localhost. Its time is from its start on a host to its result there. At the end it prints one line
per play, `HOST_REACH <json>`, which bench-loop reads.
"""

from __future__ import annotations

import json
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: host_reach
type: aggregate
short_description: tasks that reached a host, and their seconds, per play
description: One HOST_REACH line per play at the end of the run (tests/testbed/bench-loop).
"""

# Actions that never run a module on the target (their action plugins work on the controller).
CONTROLLER_SIDE = {
    "add_host", "assert", "debug", "fail", "group_by", "include_role", "import_role", "include_tasks",
    "import_tasks", "include_vars", "meta", "set_fact", "set_stats", "validate_argument_spec", "pause",
    "report_files",  # a800.vllm.report_files writes on the controller (plugins/action/report_files.py)
}  # fmt: skip


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "host_reach"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._plays: list[dict] = []
        self._started: dict[tuple[str, str], float] = {}

    def v2_playbook_on_play_start(self, play) -> None:
        self._plays.append({"play": play.get_name(), "host": [0, 0.0], "controller": [0, 0.0], "reached": {}})

    def v2_runner_on_start(self, host, task) -> None:
        self._started[(host.get_name(), task._uuid)] = time.monotonic()

    def _done(self, result, skipped: bool = False) -> None:
        began = self._started.pop((result._host.get_name(), result._task._uuid), None)
        if skipped or began is None or not self._plays:
            return
        task = result._task
        action = task.action.rsplit(".", 1)[-1]
        delegated = (task.delegate_to or "") in ("localhost", "127.0.0.1")
        side = "controller" if action in CONTROLLER_SIDE or delegated else "host"
        play = self._plays[-1]
        play[side][0] += 1
        play[side][1] += time.monotonic() - began
        if side == "host":
            name = task.get_name()
            play["reached"][name] = play["reached"].get(name, 0) + 1

    def v2_runner_on_ok(self, result) -> None:
        self._done(result)

    def v2_runner_on_failed(self, result, ignore_errors: bool = False) -> None:
        self._done(result)

    def v2_runner_on_skipped(self, result) -> None:
        self._done(result, skipped=True)

    def v2_runner_on_unreachable(self, result) -> None:
        self._done(result)

    def v2_playbook_on_stats(self, stats) -> None:
        for play in self._plays:
            play["host"][1] = round(play["host"][1], 2)
            play["controller"][1] = round(play["controller"][1], 2)
            self._display.display("HOST_REACH " + json.dumps(play))
