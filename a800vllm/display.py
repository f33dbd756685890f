"""What the CLI shows while a run goes on: on a terminal one line per host, redrawn in place (its current task, or
the weight load / prewarm progress), with failures and changes printed above; otherwise plain lines."""

from __future__ import annotations

import shutil
from typing import TextIO

from .events import Event, LoadProgress, PlayStarted, PrewarmProgress, TaskResult, TaskStarted, TaskStatus

CLEAR_LINE = "\x1b[2K"
CLEAR_DOWN = "\x1b[J"


def bar(percent: float, width: int = 20) -> str:
    filled = max(0, min(width, round(width * percent / 100)))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "ETA ?"
    minutes, secs = divmod(round(seconds), 60)
    return f"ETA {minutes} min {secs:02d} s" if minutes else f"ETA {secs} s"


def progress_line(event: LoadProgress | PrewarmProgress) -> str:
    if isinstance(event, PrewarmProgress):
        rate = f"{event.gbps:g} GB/s" if event.gbps is not None else "? GB/s"
        return (
            f"{event.host}: prewarm {bar(event.percent)} {event.done_gb:.1f}/{event.total_gb:.1f} GB, {rate}, "
            f"{eta_text(event.eta_s)}"
        )
    if event.phase == "loading_weights" and event.shards_total:
        again = f" (pass {event.load_pass})" if event.load_pass > 1 else ""
        return (
            f"{event.host}: {event.container} loading weights{again} {bar(event.percent or 0)} "
            f"{event.shards_done}/{event.shards_total} shards, {eta_text(event.eta_s)}"
        )
    return f"{event.host}: {event.container}: {event.message}"


class ProgressDisplay:
    """Call it with each event; close() at the end. live: redraw in place (default: when the stream is a TTY)."""

    def __init__(self, stream: TextIO, live: bool | None = None) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.lines: dict[str, str] = {}  # host -> its current line (live mode)
        self.drawn = 0
        self.pending_play: str | None = None  # printed once one of its tasks runs (a play its tags skip stays silent)

    def __call__(self, event: Event) -> None:
        if isinstance(event, PlayStarted):
            self.pending_play = event.play
            return
        if isinstance(event, TaskStarted | TaskResult) and event.host and self.pending_play is not None:
            self._print(f"== {self.pending_play}")
            self.pending_play = None
        if isinstance(event, TaskStarted) and event.host:
            self._status(event.host, f"{event.host}: {event.task}")
        elif isinstance(event, LoadProgress | PrewarmProgress):
            line = progress_line(event)
            if self.live:
                self._status(event.host, line)
            else:
                self._print(line)
        elif isinstance(event, TaskResult):
            if event.status in (TaskStatus.FAILED, TaskStatus.UNREACHABLE):
                first = next((ln.strip() for ln in event.message.splitlines() if ln.strip()), "")
                ignored = " (ignored)" if event.ignored else ""
                self._print(f"{event.host}: {event.status.upper()}{ignored} {event.task}: {first}")
                if not event.ignored:
                    self._status(event.host, f"{event.host}: {event.status} at {event.task}")
            elif event.status is TaskStatus.CHANGED:
                self._print(f"{event.host}: changed: {event.task}")

    def close(self) -> None:
        self._erase()
        self.lines.clear()
        self.stream.flush()

    def _status(self, host: str, line: str) -> None:
        if not self.live:
            return
        self.lines[host] = line
        self._erase()
        self._draw()

    def _print(self, line: str) -> None:
        if self.live:
            self._erase()
        self.stream.write(self._fit(line) + "\n" if self.live else line + "\n")
        if self.live:
            self._draw()
        self.stream.flush()

    def _erase(self) -> None:
        if self.drawn:
            self.stream.write(f"\x1b[{self.drawn}F{CLEAR_DOWN}")
            self.drawn = 0

    def _draw(self) -> None:
        for host in sorted(self.lines):
            self.stream.write(CLEAR_LINE + self._fit(self.lines[host]) + "\n")
        self.drawn = len(self.lines)
        self.stream.flush()

    @staticmethod
    def _fit(line: str) -> str:
        width = shutil.get_terminal_size((120, 24)).columns
        return line if len(line) < width else line[: width - 2] + "…"
