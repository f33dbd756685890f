"""Typed events from ansible-runner's raw event dicts: plays, task starts and results per host, and the progress of
the two long waits (the weights prewarm and the vLLM weight load), parsed from their "Show the progress" lines."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class TaskStatus(StrEnum):
    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    SKIPPED = "skipped"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class PlayStarted:
    """A play begins (`playbook_on_play_start`)."""

    play: str
    pattern: str


@dataclass(frozen=True)
class TaskStarted:
    """A task begins: on one host (`runner_on_start`), or as a whole before its hosts (`playbook_on_task_start`,
    host None)."""

    task: str
    role: str | None
    play: str
    host: str | None


@dataclass(frozen=True)
class TaskResult:
    """A task's result on one host (`runner_on_ok` / `_failed` / `_skipped` / `_unreachable`). `ignored`: a failure
    the task itself ignores (ignore_errors), which does not fail the host."""

    host: str
    task: str
    role: str | None
    play: str
    status: TaskStatus
    message: str
    ignored: bool = False
    duration_s: float | None = None


@dataclass(frozen=True)
class PrewarmProgress:
    """The weights role's prewarm: `prewarm: X of Y GB to read, Z GB/s, ETA N s`."""

    host: str
    done_gb: float
    total_gb: float
    gbps: float | None
    eta_s: float | None
    message: str

    @property
    def percent(self) -> float:
        return 100.0 * self.done_gb / self.total_gb if self.total_gb else 100.0


@dataclass(frozen=True)
class LoadProgress:
    """The serve role's readiness wait: `<container>: loading weights: shards 37/80 (46 %), ETA 3 min 10 s`.

    phase: starting, loading_weights, weights_loaded, kv_cache, graphs, api_starting, ready (the vLLM start's phases,
    plugins/module_utils/vllm_log.py), or `unknown`. Shard counts, percent and ETA only while loading weights;
    load_pass 2 while a speculative drafter (MTP) loads its weights in a second pass."""

    host: str
    container: str
    phase: str
    message: str
    shards_done: int | None = None
    shards_total: int | None = None
    percent: int | None = None
    eta_s: float | None = None
    load_pass: int = 1


Event = PlayStarted | TaskStarted | TaskResult | PrewarmProgress | LoadProgress

PROGRESS_TASK = "Show the progress"
PREWARM_RE = re.compile(
    r"prewarm: (?P<done>[\d.]+) of (?P<total>[\d.]+) GB to read, (?P<gbps>\S+) GB/s, ETA (?P<eta>\S+) s"
)
LOAD_LINE_RE = re.compile(r"^(?P<container>[\w.-]+): (?P<message>.+)$", re.DOTALL)
LOADING_RE = re.compile(
    r"^loading weights(?: \(pass (?P<pass>\d+)\))?: shards (?P<done>\d+)/(?P<total>\d+) \((?P<pct>\d+) %\), "
    r"ETA (?P<eta>.+)$"
)
# The first words of each phase's line (vllm_log.summary_line), in the order of a start.
PHASE_PREFIXES = (
    ("starting", "starting"),
    ("loading weights", "loading_weights"),
    ("weights loaded", "weights_loaded"),
    ("KV cache allocated", "kv_cache"),
    ("CUDA graphs captured", "graphs"),
    ("API server starting", "api_starting"),
    ("ready", "ready"),
)
DURATION_RE = re.compile(r"^(?:(?P<h>\d+) h)? ?(?:(?P<m>\d+) min)? ?(?:(?P<s>\d+) s)?$")


def parse_duration(text: str) -> float | None:
    """`3 min 10 s` -> 190.0, `45 s`, `1 h 2 min`; None for `unknown` or anything else."""
    match = DURATION_RE.match(text.strip())
    if not match or not any(match.groupdict().values()):
        return None
    return float(int(match["h"] or 0) * 3600 + int(match["m"] or 0) * 60 + int(match["s"] or 0))


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_prewarm(host: str, message: str) -> PrewarmProgress | None:
    match = PREWARM_RE.search(" ".join(message.split()))
    if not match:
        return None
    return PrewarmProgress(
        host=host,
        done_gb=float(match["done"]),
        total_gb=float(match["total"]),
        gbps=_float(match["gbps"]),
        eta_s=_float(match["eta"]),
        message=match[0],
    )


def parse_load(host: str, line: str) -> LoadProgress | None:
    """A serve progress line, `<container>: <phase line>`; None when it is not one."""
    match = LOAD_LINE_RE.match(line.strip())
    if not match:
        return None
    container, message = match["container"], match["message"]
    phase = next((name for prefix, name in PHASE_PREFIXES if message.startswith(prefix)), None)
    if phase is None:
        return None
    loading = LOADING_RE.match(message)
    if phase == "loading_weights" and loading:
        return LoadProgress(
            host=host,
            container=container,
            phase=phase,
            message=message,
            shards_done=int(loading["done"]),
            shards_total=int(loading["total"]),
            percent=int(loading["pct"]),
            eta_s=parse_duration(loading["eta"]),
            load_pass=int(loading["pass"] or 1),
        )
    return LoadProgress(host=host, container=container, phase=phase, message=message)


def message_of(res: Mapping[str, Any]) -> str:
    """A task result's message: `msg` (a list joined by lines), else the first failed item's, else stderr/stdout."""
    msg = res.get("msg")
    if not msg and isinstance(res.get("results"), list):
        failed = [item for item in res["results"] if isinstance(item, Mapping) and item.get("failed")]
        if failed:
            return message_of(failed[0])
    if not msg:
        msg = res.get("stderr") or res.get("stdout") or res.get("reason") or ""
    if isinstance(msg, list):
        return "\n".join(str(line) for line in msg)
    return str(msg)


RESULT_EVENTS = {
    "runner_on_ok": TaskStatus.OK,
    "runner_on_failed": TaskStatus.FAILED,
    "runner_on_skipped": TaskStatus.SKIPPED,
    "runner_on_unreachable": TaskStatus.UNREACHABLE,
}


def parse_event(raw: Mapping[str, Any]) -> list[Event]:
    """The typed events of one raw ansible-runner event (none for the events nobody needs: verbose output, includes,
    per-item results - the task's own result follows them)."""
    kind = raw.get("event", "")
    data: Mapping[str, Any] = raw.get("event_data") or {}
    play = str(data.get("play", ""))
    task = str(data.get("task", ""))
    role = data.get("role") or None
    if kind == "playbook_on_play_start":
        return [PlayStarted(play=play, pattern=str(data.get("play_pattern", "")))]
    if kind in ("playbook_on_task_start", "runner_on_start"):
        return [TaskStarted(task=task, role=role, play=play, host=data.get("host"))]
    if kind not in RESULT_EVENTS:
        return []
    host = str(data.get("host", ""))
    res: Mapping[str, Any] = data.get("res") or {}
    status = RESULT_EVENTS[kind]
    if status is TaskStatus.OK and res.get("changed"):
        status = TaskStatus.CHANGED
    message = message_of(res)
    events: list[Event] = [
        TaskResult(
            host=host,
            task=task,
            role=role,
            play=play,
            status=status,
            message=message,
            ignored=bool(data.get("ignore_errors")) and status is TaskStatus.FAILED,
            duration_s=data.get("duration"),
        )
    ]
    if status is TaskStatus.OK and task == PROGRESS_TASK and message:
        progress = parse_prewarm(host, message) if message.startswith("prewarm:") else parse_load(host, message)
        if progress is not None:
            events.append(progress)
    return events
