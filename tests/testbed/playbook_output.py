"""What an ansible-playbook run printed (the default callback's text), read for the tests' assertions, so that a
failed assertion says what it saw: the host's recap line and the tasks that changed on it.

    from playbook_output import unchanged_message
    assert " changed=0 " in recap(text, host), unchanged_message(text, host)
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;]*m")
HEADER = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(?P<name>.*)\]")


def _lines(text: str) -> list[str]:
    return [ANSI.sub("", line).rstrip() for line in text.splitlines()]


def recap(text: str, host: str) -> str:
    """The host's line of the last PLAY RECAP, whitespace folded ('' when there is none)."""
    lines = [line for line in _lines(text) if re.match(rf"^{re.escape(host)}\s+: ok=", line)]
    return " ".join(lines[-1].split()) + " " if lines else ""


def changed_tasks(text: str, host: str) -> list[str]:
    """The names of the tasks and handlers that reported `changed: [host]`, in order, each once."""
    names: list[str] = []
    task = "?"
    for line in _lines(text):
        if match := HEADER.match(line):
            task = match["name"]
        elif line.startswith(f"changed: [{host}]") and task not in names:
            names.append(task)
    return names


def task_outcomes(text: str, host: str, task: str) -> list[str]:
    """What each run of `task` (a task's or handler's printed name) did on host, in order: ok, changed, skipping,
    fatal or failed (the first line of a looped task)."""
    outcomes: list[str] = []
    current = None
    line_of_host = re.compile(rf"^(ok|changed|skipping|fatal|failed): \[{re.escape(host)}\]")
    for line in _lines(text):
        if match := HEADER.match(line):
            current = match["name"]
        elif current == task and (outcome := line_of_host.match(line)):
            outcomes.append(outcome[1])
            current = None
    return outcomes


def unchanged_message(text: str, host: str) -> str:
    """The failure message of an idempotence assertion: the recap and the tasks that changed."""
    changed = changed_tasks(text, host)
    return f"recap: {recap(text, host) or '(no recap for ' + host + ')'}; changed tasks: {changed or 'none named'}"
