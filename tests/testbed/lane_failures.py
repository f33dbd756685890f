#!/usr/bin/env python3
"""The failures that failed a lane item, read from that item's own log (tests/testbed/run-scenarios.sh).

    lane_failures.py ITEM_LOG [ITEM_LOG ...]

A scenario's log holds failures that were meant to happen: the preflight-negative scenario's refused runs, a rescued
task (the driver-upgrade scenario's rollback), `ignore_errors` tasks. Listing every `fatal:` line of every log
hid the real cause among them. This prints, for each log given (the run-scenarios script passes only the items
that failed):
  - pytest's and testinfra's `FAILED`/`ERROR` summary lines and the first `E   ` line of each failure;
  - of each ansible-playbook run (the text up to its PLAY RECAP), the last `fatal:` of each host that the recap
    counts as failed (failed=N > 0) or unreachable: a rescued or ignored failure leaves failed=0 and is left out;
  - Molecule's CRITICAL lines (a step that failed) and the tasks its idempotence step names (`*  => role : task`).
Standard library only: it runs before the toolchain is known to be installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
GUTTER = re.compile(r"^\s*│ ?")
FATAL = re.compile(r"^(?:fatal|failed): \[(?P<host>[^\]]+)\](?:: .*)?")
RECAP_HOST = re.compile(
    r"^(?P<host>\S+)\s+: ok=\d+\s+changed=\d+\s+unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)"
)
PYTEST = re.compile(r"^(?:FAILED|ERROR) \S+\.py\S*(?: - .*)?$")
ASSERTION = re.compile(r"^E\s{3}")
CRITICAL = re.compile(r"^(?:CRITICAL|ERROR)\s+(?!.*\bignoring\b).*")
IDEMPOTENCE_TASK = re.compile(r"^\*\s+=> \S")  # Molecule's idempotence step names each changed task so
TASK = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(?P<name>.*)\]")
WIDTH = 400


def cut(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."


def ansible_failures(lines: list[str]) -> list[str]:
    """Each playbook run's unrescued, unignored failures: the host's last fatal line, with its task."""
    found: list[str] = []
    last: dict[str, tuple[str, str]] = {}  # host -> (task, fatal line) of the current playbook run
    task = ""
    in_recap = False
    for index, line in enumerate(lines):
        if match := TASK.match(line):
            task, in_recap = match["name"], False
            continue
        if line.startswith("PLAY RECAP"):
            in_recap = True
            continue
        if in_recap:
            if match := RECAP_HOST.match(line):
                host = match["host"]
                if (int(match["failed"]) or int(match["unreachable"])) and host in last:
                    failed_task, fatal = last[host]
                    found.append(f"[{failed_task}] {cut(fatal)}")
            elif line.strip() == "" and last:
                pass
            elif not line.startswith(" "):
                in_recap, last = False, {}
            continue
        if match := FATAL.match(line):
            ignored = any("...ignoring" in following for following in lines[index + 1 : index + 4])
            if not ignored:
                last[match["host"]] = (task, line)
    return found


def failures(text: str) -> list[str]:
    # Molecule 26 indents what a step prints behind a "│" gutter
    lines = [GUTTER.sub("", ANSI.sub("", line)).rstrip() for line in text.splitlines()]
    found = [cut(line) for line in lines if PYTEST.match(line)]
    # the first line of each failure's E block (the assertion; the lines under it are its repr or a log)
    assertions = [
        cut(line)
        for i, line in enumerate(lines)
        if ASSERTION.match(line) and not (i and re.match(r"E(\s|$)", lines[i - 1]))
    ]
    found += assertions[:12]
    found += ansible_failures(lines)
    found += [cut(line) for line in lines if CRITICAL.match(line) or IDEMPOTENCE_TASK.match(line)]
    return list(dict.fromkeys(found))


def main(argv: list[str]) -> int:
    for name in argv:
        path = Path(name)
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        item = path.stem
        listed = failures(text)
        print(f"== {item}: {len(listed)} failure line(s)")
        for line in listed[:40]:
            print(f"   {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
