"""The outcome of a run as data: per-host stats, the roles' set_stats data, and each failed host with the failed
task, its message and the failed checks. Built from the raw ansible-runner events (ResultBuilder), so that it can
be tested with recorded events."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from .events import message_of


class Outcome(StrEnum):
    OK = "ok"  # every host ran and none failed
    FAILED = "failed"  # a host failed a task (a check, a start, a verification)
    UNREACHABLE = "unreachable"  # a host could not be reached, none failed
    NO_HOSTS = "no_hosts"  # the inventory and --limit matched no host of the plays
    ERROR = "error"  # ansible-playbook stopped before any host ran: inventory or playbook error
    CANCELED = "canceled"  # interrupted (SIGINT/SIGTERM)


EXIT_CODES = {
    Outcome.OK: 0,
    Outcome.FAILED: 1,
    Outcome.ERROR: 2,
    Outcome.NO_HOSTS: 2,
    Outcome.UNREACHABLE: 3,
    Outcome.CANCELED: 130,
}

NO_HOSTS_ERROR = "leaves us with no hosts to target"
# The set_stats key holding each role's check records ({name, status, ...}), per host.
CHECK_KEYS = {
    "preflight": "preflight",
    "serve": "serve_checks",
    "verify": "verify",
    "bench": "bench",
    "gateway": "gateway",
}


@dataclass(frozen=True)
class HostStats:
    ok: int = 0
    changed: int = 0
    failures: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass(frozen=True)
class HostFailure:
    """Why a host failed: the phase (the role, else the play's first word), the task, its message and, when the
    task stopped on failed checks, their names."""

    host: str
    phase: str
    task: str
    message: str
    checks: tuple[str, ...] = ()
    unreachable: bool = False

    def __str__(self) -> str:
        lines = message_lines(self.message, self.host) or ["(no message)"]
        verb = "unreachable" if self.unreachable else "failed"
        head = f"{self.host}: {self.phase} {verb}: {lines[0]}"
        return "\n".join([head, *(f"  {line}" for line in lines[1:])])


@dataclass
class Result:
    outcome: Outcome
    status: str  # ansible-runner's: successful, failed, canceled, ...
    rc: int
    playbook: str
    tags: str | None = None
    limit: str | None = None
    hosts: dict[str, HostStats] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)  # set_stats: preflight, weights, image, serve, verify, ...
    failures: list[HostFailure] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # ansible's [ERROR]/[WARNING] lines outside the tasks
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    @property
    def failed_hosts(self) -> list[str]:
        return [f.host for f in self.failures if not f.unreachable]

    @property
    def unreachable_hosts(self) -> list[str]:
        return [f.host for f in self.failures if f.unreachable]

    def phase_data(self, key: str) -> dict[str, Any]:
        """One set_stats key, {host: data} ({} when the phase did not run)."""
        value = self.data.get(key)
        return value if isinstance(value, dict) else {}

    @property
    def preflight(self) -> dict[str, Any]:
        return self.phase_data("preflight")

    @property
    def serve(self) -> dict[str, Any]:
        return self.phase_data("serve")

    @property
    def verify(self) -> dict[str, Any]:
        return self.phase_data("verify")

    @property
    def bench(self) -> dict[str, Any]:
        return self.phase_data("bench")

    @property
    def message(self) -> str:
        """What went wrong, one block per problem ("" when ok)."""
        if self.outcome in (Outcome.FAILED, Outcome.UNREACHABLE):
            return "\n".join(str(f) for f in self.failures)
        if self.outcome is Outcome.NO_HOSTS:
            return "no host ran: the inventory and --limit match no host of the plays" + (
                f" ({'; '.join(self.errors)})" if self.errors else ""
            )
        if self.outcome is Outcome.ERROR:
            return f"ansible-playbook stopped before any host ran (rc {self.rc}, {self.status})" + (
                ": " + "\n".join(self.errors) if self.errors else ""
            )
        if self.outcome is Outcome.CANCELED:
            return "the run was interrupted"
        return ""

    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)
        document.update(
            ok=self.ok,
            exit_code=self.exit_code,
            message=self.message,
            failed_hosts=self.failed_hosts,
            unreachable_hosts=self.unreachable_hosts,
        )
        return document

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)


class DeployError(RuntimeError):
    """A run that did not succeed: a failed or unreachable host, an inventory that does not parse, or no host at
    all. `result` holds everything that is known."""

    def __init__(self, result: Result) -> None:
        super().__init__(result.message or f"the run ended {result.outcome}")
        self.result = result


def message_lines(message: str, host: str) -> list[str]:
    """The message's lines without a header such as `Preflight failed on <host>:`."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":") and host in lines[0]:
        lines = lines[1:]
    return lines


def failed_check_names(data: Mapping[str, Any], host: str, role: str | None, message: str) -> tuple[str, ...]:
    """The failed checks behind a failure: the records with status `fail` that the failing role returned for the
    host (preflight, serve_checks, verify's checks, ...); without a role, those named in the message."""

    def records(value: Any) -> list[Mapping[str, Any]]:
        if isinstance(value, Mapping):
            value = value.get("checks")
        return [r for r in value if isinstance(r, Mapping)] if isinstance(value, list) else []

    def failed(key: str) -> list[str]:
        per_host = data.get(key)
        found = records(per_host.get(host)) if isinstance(per_host, Mapping) else []
        return [str(r.get("name")) for r in found if r.get("status") == "fail"]

    if role in CHECK_KEYS and (names := failed(CHECK_KEYS[role])):
        return tuple(names)
    names = [n for key in data for n in failed(key) if f"{n}:" in message]
    return tuple(dict.fromkeys(names))


def phase_of(role: str | None, play: str) -> str:
    """The role, else the play's first word: "Status - the server's state" -> status."""
    return role or (play.split(" - ")[0].strip().lower() or "run")


class ResultBuilder:
    """Folds the raw events of one run into a Result."""

    def __init__(self) -> None:
        self.stats: Mapping[str, Any] | None = None
        self.last_failure: dict[str, Mapping[str, Any]] = {}  # host -> event_data of its last counted failure
        self.errors: list[str] = []
        self.unmatched_patterns: list[str] = []

    def feed(self, raw: Mapping[str, Any]) -> None:
        kind = raw.get("event", "")
        data: Mapping[str, Any] = raw.get("event_data") or {}
        if kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            self.last_failure[str(data.get("host", ""))] = {**data, "_unreachable": kind == "runner_on_unreachable"}
        elif kind == "playbook_on_stats":
            self.stats = data
        elif kind == "playbook_on_no_hosts_matched":
            self.unmatched_patterns.append(str(data.get("play_pattern", "")))
        elif kind in ("verbose", "warning", "error"):
            for line in str(raw.get("stdout", "")).splitlines():
                line = line.strip()
                if line.startswith(("[ERROR]", "[WARNING]", "ERROR!")) and line not in self.errors:
                    self.errors.append(line)

    def build(self, *, status: str, rc: int, playbook: str, tags: str | None = None, limit: str | None = None,
              duration_s: float = 0.0) -> Result:  # fmt: skip
        stats = self.stats or {}
        artifact = stats.get("artifact_data")
        data: dict[str, Any] = dict(artifact) if isinstance(artifact, Mapping) else {}
        hosts = self._hosts(stats)
        failures = self._failures(stats, data)
        if status == "canceled":
            outcome = Outcome.CANCELED
        elif any(not f.unreachable for f in failures):
            outcome = Outcome.FAILED
        elif failures:
            outcome = Outcome.UNREACHABLE
        elif any(NO_HOSTS_ERROR in e for e in self.errors):  # --limit matched nothing: ansible-playbook refuses
            outcome = Outcome.NO_HOSTS
        elif self.stats is None or rc != 0 or status != "successful":
            outcome = Outcome.ERROR
        elif not stats.get("processed"):
            outcome = Outcome.NO_HOSTS
        else:
            outcome = Outcome.OK
        return Result(
            outcome=outcome,
            status=status,
            rc=rc,
            playbook=playbook,
            tags=tags,
            limit=limit,
            hosts=hosts,
            data=data,
            failures=failures,
            errors=list(self.errors),
            duration_s=round(duration_s, 1),
        )

    @staticmethod
    def _hosts(stats: Mapping[str, Any]) -> dict[str, HostStats]:
        def count(key: str, host: str) -> int:
            per_host = stats.get(key) or {}
            return int(per_host.get(host, 0))

        names = sorted({h for key in ("processed", "ok", "failures", "dark") for h in (stats.get(key) or {})})
        return {
            h: HostStats(
                ok=count("ok", h),
                changed=count("changed", h),
                failures=count("failures", h),
                unreachable=count("dark", h),
                skipped=count("skipped", h),
                rescued=count("rescued", h),
                ignored=count("ignored", h),
            )
            for h in names
        }

    def _failures(self, stats: Mapping[str, Any], data: Mapping[str, Any]) -> list[HostFailure]:
        """A host whose stats count a failure or an unreachable, with its last failed task (a rescued failure is not
        counted by Ansible and is not reported)."""
        failing = {h for key in ("failures", "dark") for h, n in (stats.get(key) or {}).items() if n}
        if self.stats is None:  # no recap (ansible-playbook died): every failure seen counts
            failing = set(self.last_failure)
        failures = []
        for host in sorted(failing):
            event = self.last_failure.get(host, {})
            role, play = event.get("role") or None, str(event.get("play", ""))
            message = message_of(event.get("res") or {})
            unreachable = bool(event.get("_unreachable")) or (
                not (stats.get("failures") or {}).get(host) and bool((stats.get("dark") or {}).get(host))
            )
            failures.append(
                HostFailure(
                    host=host,
                    phase=phase_of(role, play),
                    task=str(event.get("task", "")),
                    message=message,
                    checks=() if unreachable else failed_check_names(data, host, role, message),
                    unreachable=unreachable,
                )
            )
        return failures
