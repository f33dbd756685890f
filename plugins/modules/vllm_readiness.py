#!/usr/bin/python
"""Ansible module: watch one window of a starting vLLM container and report ready, loading or failed (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_readiness
short_description: Watch a starting vLLM container for one window and report ready, loading or failed
description:
  - Polls a vLLM container every O(poll_s) seconds for at most O(window_s) seconds and returns as soon as something
    decisive happens. Each poll runs C(docker inspect) (state, exit code, restart count), C(docker logs) (stdout and
    stderr merged, the current run only) and a GET of O(url) (2 s timeout, 200 means healthy).
  - C(ready) - the log says C(Application startup complete.) and O(url) answers 200; returned within one poll.
  - C(failed) - the container does not exist, has exited or is restarting; or a fatal entry of O(catalogue) matches
    a log line; or the log says the engine core died; or the log says C(Application startup complete.) but O(url)
    has not answered 200 for 5 s.
  - C(stopped) - the container was stopped, not crashed (docs/vllm.md#a-stopped-server) - it exited with 0 (vLLM's
    shutdown on SIGTERM, which C(docker stop) sends first), 130 (SIGTERM while the engine loads), 143 (SIGTERM's
    default action), or 137 (SIGKILL, C(docker stop) after its grace period) under a restart policy that restarts
    a crash (always, unless-stopped), with no OOM kill, no Docker error, no fatal catalogue entry and no dead engine
    in the log. The message says when and how to start it again; a caller that waits for a start treats it as not
    ready.
  - C(loading) - the window ended and none of the above happened. Call the module again (an C(until) loop) for the
    next window; a 433 GB load takes ~6 min from the page cache, ~22 min cold.
  - Log lines from before the container's current start (a restarted, not re-created, container keeps its old log)
    are ignored, using C(docker logs --timestamps) and the container's C(StartedAt); after restarts by a restart
    policy (RestartCount > 0) the whole log is read, so that the first crash is diagnosed.
  - Every catalogue entry whose pattern matches is reported in RV(diagnosis), fatal or not; entries with C(fatal)
    false (warnings such as a dense attention fallback) never end a window early.
  - Docker holds a line in its log buffer until a newline arrives; tqdm redraws the shard progress bar with
    carriage returns only, so on a real container the shard progress may show up only when the bar completes.
  - Never changes anything; supports check mode. The module itself fails only on invalid options or when the
    docker CLI cannot be run; a failed start is reported as RV(state=failed).
options:
  container:
    description: Name or id of the vLLM container.
    type: str
    required: true
  url:
    description: The health URL of the server.
    type: str
    default: http://127.0.0.1:8001/health
  window_s:
    description: Return after at most this many seconds (C(loading) if nothing decisive happened).
    type: float
    default: 30
  poll_s:
    description: Seconds between polls.
    type: float
    default: 0.5
  catalogue:
    description:
      - The error catalogue, a list of C({name, pattern, cause, fix, fatal}) (C(serve_error_catalogue) of the serve
        role). C(pattern) is a Python regular expression searched in each log line; C(fatal) defaults to true.
      - Order matters, the first matching entry is the primary diagnosis.
    type: list
    elements: dict
    required: true
  required_markers:
    description: Log markers that a good start shows, C({pattern, meaning}) (C(model_profile.log_markers.required)).
    type: list
    elements: dict
    default: []
  forbidden_markers:
    description: Log markers that a good start never shows (C(model_profile.log_markers.forbidden)).
    type: list
    elements: dict
    default: []
  started_at:
    description:
      - When the container start was requested, in epoch seconds (for C(elapsed_s) and the ETA).
      - Omitted, the container's own C(StartedAt) is used.
    type: float
  docker:
    description: The docker CLI.
    type: str
    default: docker
  metrics_file:
    description:
      - When the start is complete, write where its time went (the ledger's phases and total) to this file in node
        exporter's textfile format, as C(a800_vllm_start_phase_seconds{container,phase}) and
        C(a800_vllm_start_seconds{container}); only when its content differs and its directory exists, never in
        check mode. Empty - no file.
    type: str
    default: ""
  live_progress:
    description:
      - Also read the line being written now through C(docker attach --no-stdin --sig-proxy=false) (ended with
        SIGKILL, never passed on to the container). The shard progress bar is redrawn with carriage returns only,
        and C(docker logs) shows an unterminated line only once it ends, so without this the load shows no progress.
    type: bool
    default: true
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Wait for vLLM, one 60 s window per try (a cold load takes ~22 min)
  vllm_readiness:
    container: glm52-nvfp4
    url: http://127.0.0.1:8001/health
    window_s: 60
    catalogue: "{{ serve_error_catalogue }}"
    required_markers: "{{ model_profile.log_markers.required }}"
    forbidden_markers: "{{ model_profile.log_markers.forbidden }}"
    started_at: "{{ serve_started_at }}"
  register: serve_readiness
  until: serve_readiness.state != 'loading'
  retries: 60
  delay: 0
  changed_when: false
"""

RETURN = r"""
state:
  description: C(ready), C(loading) (the window ended, the start goes on), C(failed) or C(stopped) (by an operator).
  returned: always
  type: str
  sample: loading
message:
  description: One line for people, the load progress or why the start failed.
  returned: always
  type: str
  sample: "loading weights: shards 37/80 (46 %), ETA 3 min 10 s"
progress:
  description:
    - The load progress read from the log (plugins/module_utils/vllm_log.py progress()) - phase (starting,
      loading_weights, weights_loaded, kv_cache, graphs, api_starting, ready), shards_done, shards_total, percent,
      load_elapsed_s, load_pass (2 while a drafter loads in a second pass), load_gib, load_seconds,
      kv_cache_tokens, kv_concurrency (tokens_per_request, requests - the full-length requests the KV cache holds at
      once), graph_seconds - plus eta_s (seconds until the
      remaining shards are loaded, null when unknown) and elapsed_s (since O(started_at), null when unknown).
  returned: always
  type: dict
  sample:
    phase: loading_weights
    shards_done: 37
    shards_total: 80
    percent: 46
    load_elapsed_s: 161
    load_pass: 1
    load_gib: null
    load_seconds: null
    kv_cache_tokens: null
    kv_concurrency: null
    graph_seconds: null
    eta_s: 188.0
    elapsed_s: 240.5
ledger:
  description:
    - Where the start's time went (plugins/module_utils/vllm_log.py ledger()) - phases (in the order a start runs
      them, those the log shows - phase, label, s - of p2p_check, model_loading, torch_compile, kv_cache,
      cuda_graphs, api_server), weights_s, total_s (first log line to C(Application startup complete.), null until
      then), other_s (the total less the phases, null when they exceed it), ready - plus started_at (the
      container's start, RFC 3339), which tells one start from another.
  returned: always
  type: dict
metrics_file_written:
  description: Whether O(metrics_file) was written (a new start's figures).
  returned: always
  type: bool
diagnosis:
  description:
    - Every catalogue entry that matches a log line, in catalogue order (the first is the primary diagnosis) -
      name, cause, fix, fatal, lines (up to 5 matching lines), context (the ~15 lines ending at the first match,
      with the traceback header).
    - When the start failed and no fatal entry matched, the first entry is C(unknown), its cause says what was
      seen (e.g. C(the container stopped (exit code 1))) and its context holds the last 30 log lines.
  returned: always
  type: list
  elements: dict
markers:
  description: The log markers (vllm_log markers()) - required and forbidden (each pattern, meaning, found, line),
    missing (meanings of required markers not found), forbidden_found, ok.
  returned: always
  type: dict
exit_code:
  description: The container's exit code (null while it runs or when it does not exist).
  returned: always
  type: int
log_tail:
  description: The last 40 lines of the log (carriage-return progress split into lines).
  returned: always
  type: list
  elements: str
container_status:
  description: Docker's status of the container (running, exited, restarting, ...), C(missing) when it does not exist.
  returned: always
  type: str
restart_count:
  description: Restarts by the container's restart policy.
  returned: always
  type: int
health_status:
  description: The HTTP status of O(url) at the last poll, null when it did not answer.
  returned: always
  type: int
silent_s:
  description: Seconds since the last log line (docker's timestamps), null when unknown. A long silence while
    loading can mean a hang (NCCL).
  returned: always
  type: float
polls:
  description: How many polls this window made.
  returned: always
  type: int
"""

import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.atomic_file import replace_if_changed  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.vllm_log import (  # noqa: E402
    READY_LINE,
    catalogue_errors,
    clip,
    diagnose,
    engine_dead,
    eta_s,
    ledger,
    markers,
    progress,
    split_lines,
    start_metrics,
    summary_line,
)

INSPECT_FORMAT = (
    '{"State":{{json .State}},"RestartCount":{{.RestartCount}},"RestartPolicy":{{json .HostConfig.RestartPolicy}}}'
)
HEALTH_TIMEOUT_S = 2.0
READY_GRACE_S = 5.0  # "Application startup complete." but /health not 200 for this long: failed
DOCKER_TIMEOUT_S = 60.0
START_SLACK_S = 1.0  # log lines this much before StartedAt still count as the current run
LOG_TAIL_LINES = 40
UNKNOWN_CONTEXT_LINES = 30
TIMESTAMP_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d) ?")


class DockerError(Exception):
    """The docker CLI could not be run, or failed for another reason than a missing container."""


@dataclass
class Observation:
    """One poll: whether the container exists, its state, its log (current run), and the health answer."""

    exists: bool
    state: dict[str, Any] = field(default_factory=dict)
    restart_count: int = 0
    restart_policy: str = ""
    lines: list[str] = field(default_factory=list)
    last_log_at: float | None = None
    log_error: str | None = None
    health_status: int | None = None


def parse_time(text: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 time as docker writes it (nanoseconds cut to microseconds); None if unusable
    (also docker's zero time 0001-01-01T00:00:00Z)."""
    match = TIMESTAMP_RE.match(text or "")
    if not match:
        return None
    base, fraction, zone = match.groups()
    stamp = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone)).timestamp()
    if stamp <= 0:
        return None
    return stamp + (float("0." + fraction) if fraction else 0.0)


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=DOCKER_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DockerError(f"cannot run {argv[0]}: {exc}") from exc


def inspect(docker: str, container: str) -> tuple[dict[str, Any], int, str] | None:
    """(State, RestartCount, the restart policy's name) of the container, None when it does not exist."""
    run = _run([docker, "inspect", "--format", INSPECT_FORMAT, container])
    if run.returncode != 0:
        if "no such" in run.stderr.lower():
            return None
        raise DockerError(f"docker inspect {container}: {run.stderr.strip() or run.stdout.strip()}")
    try:
        document = json.loads(run.stdout.strip().splitlines()[0])
    except (ValueError, IndexError) as exc:
        raise DockerError(f"docker inspect {container}: unexpected output {run.stdout[:200]!r}") from exc
    policy = str((document.get("RestartPolicy") or {}).get("Name") or "")
    return document.get("State") or {}, int(document.get("RestartCount") or 0), policy


def current_run(text: str, since: float | None) -> tuple[str, float | None]:
    """The log text without docker's timestamps, without the lines written before `since` (epoch seconds; None:
    keep all), and the time of the last line."""
    kept: list[str] = []
    last: float | None = None
    for line in text.split("\n"):
        match = TIMESTAMP_RE.match(line)
        if match:
            stamp = parse_time(line)
            line = line[match.end() :]
            if stamp is not None:
                if since is not None and stamp < since - START_SLACK_S:
                    continue
                last = stamp
        kept.append(line)
    return "\n".join(kept), last


def read_log(docker: str, container: str) -> tuple[str | None, str | None]:
    """(the whole log with docker's timestamps, stdout and stderr merged; an error message)."""
    try:
        run = subprocess.run(
            [docker, "logs", "--timestamps", container],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=DOCKER_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"docker logs: {exc}"
    if run.returncode != 0:
        return None, f"docker logs: {run.stdout.strip()[-500:]}"
    return run.stdout, None


def health(url: str, timeout: float) -> int | None:
    """The HTTP status of a GET (None when nothing answered); proxies from the environment are not used."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return None


class LiveTail:
    """The line being written now, from `docker attach`: tqdm draws the shard progress bar with `\\r` only, and Docker
    keeps an unterminated line out of `docker logs` until its newline (or 16 KB) arrives — during the whole load.
    The attach stream carries those bytes as they are written. Read-only: no stdin, no signal proxying, and the
    client is ended with SIGKILL, which it cannot pass on to the container."""

    LIMIT = 65536

    def __init__(self, docker: str, container: str) -> None:
        self._buffer = b""
        self._lock = threading.Lock()
        try:
            self._proc: subprocess.Popen | None = subprocess.Popen(
                [docker, "attach", "--no-stdin", "--sig-proxy=false", container],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            self._proc = None
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for chunk in iter(lambda: self._proc.stdout.read1(4096), b""):
            with self._lock:
                self._buffer = (self._buffer + chunk)[-self.LIMIT :]

    def partial(self) -> list[str]:
        """The unterminated last line's `\\r` segments (empty when the stream ends with a newline)."""
        with self._lock:
            tail = self._buffer.rpartition(b"\n")[2]
        return split_lines(tail.decode("utf-8", "replace"))

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        if self._proc is not None:
            self._proc.wait()


def observe(docker: str, container: str, url: str, health_timeout: float, live: LiveTail | None = None) -> Observation:
    found = inspect(docker, container)
    if found is None:
        return Observation(exists=False)
    state, restarts, policy = found
    obs = Observation(exists=True, state=state, restart_count=restarts, restart_policy=policy)
    text, obs.log_error = read_log(docker, container)
    if text is not None:
        since = parse_time(state.get("StartedAt")) if restarts == 0 else None
        text, obs.last_log_at = current_run(text, since)
        obs.lines = split_lines(text) + (live.partial() if live is not None else [])
    obs.health_status = health(url, health_timeout)
    return obs


def unknown(cause: str, lines: list[str], fix: str) -> dict[str, Any]:
    return {
        "name": "unknown",
        "cause": cause,
        "fix": fix,
        "fatal": True,
        "lines": [],
        "context": [clip(line) for line in lines[-UNKNOWN_CONTEXT_LINES:]],
    }


# Exit codes of a stop (docs/vllm.md#a-stopped-server): `docker stop` sends SIGTERM, then SIGKILL after its grace
# period (10 s by default); vLLM shuts down on SIGTERM and exits 0 once it served, and raises KeyboardInterrupt while
# it loads (130). 137 is a stop only where the restart policy would have restarted a crash.
STOP_EXIT_CODES = {
    0: "exit code 0: vLLM shut down on SIGTERM, as docker stop asks",
    130: "exit code 130: vLLM was interrupted by SIGTERM while it started",
    143: "exit code 143: ended by SIGTERM",
}
KILLED_EXIT_CODE = 137
RESTARTING_POLICIES = ("always", "unless-stopped")


def stopped_reason(container: str, obs: Observation, found: list[dict[str, Any]]) -> str | None:
    """Why the container is a clean stop, with when and how to start it again; None when it is not one."""
    state = obs.state
    if state.get("Running") or state.get("Restarting") or state.get("Status") == "restarting":
        return None
    if state.get("OOMKilled") or state.get("Error") or state.get("Dead"):
        return None
    if any(entry["fatal"] for entry in found) or engine_dead(obs.lines):
        return None
    finished = parse_time(state.get("FinishedAt"))
    code = state.get("ExitCode")
    how = STOP_EXIT_CODES.get(code)
    if how is None and code == KILLED_EXIT_CODE and obs.restart_policy in RESTARTING_POLICIES:
        how = (
            f"exit code 137: SIGKILL, docker stop after its grace period or docker kill (restart policy "
            f"{obs.restart_policy} restarts a crash)"
        )
    if finished is None or how is None:
        return None
    at = datetime.fromtimestamp(finished, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        f"stopped at {at} ({how}); not a failed start. Start it again: docker start {container} "
        "(or re-run the serve phase: python -m a800vllm serve)"
    )


def verdict(
    container: str, obs: Observation, found: list[dict[str, Any]], ready_since: float | None, now: float
) -> tuple[str, str]:
    """(state, reason) of one poll: ready, failed, stopped, or `waiting` (nothing decisive yet)."""
    if not obs.exists:
        return "failed", f"container {container!r} does not exist"
    state = obs.state
    stop = stopped_reason(container, obs, found)
    if stop:
        return "stopped", stop
    if state.get("Restarting") or state.get("Status") == "restarting" or obs.restart_count > 0:
        return "failed", f"the container crashed and is being restarted (restart count {obs.restart_count})"
    if not state.get("Running"):
        return "failed", f"the container stopped (exit code {state.get('ExitCode')})"
    fatal = next((entry for entry in found if entry["fatal"]), None)
    if fatal:
        return "failed", f"fatal error in the log ({fatal['name']})"
    dead = engine_dead(obs.lines)
    if dead:
        return "failed", f"the engine core died: {clip(dead, 200)}"
    log_ready = any(READY_LINE in line for line in obs.lines)
    if obs.health_status == 200 and (log_ready or obs.log_error):
        return "ready", "application startup complete, /health answers 200"
    if log_ready and ready_since is not None and now - ready_since >= READY_GRACE_S:
        return "failed", f"the log says {READY_LINE} but /health answered {obs.health_status} for {READY_GRACE_S:.0f} s"
    return "waiting", ""


def _unknown_entry(reason: str, obs: Observation) -> dict[str, Any]:
    if not obs.exists:
        return unknown(reason, [], "Start the container (the serve role creates it) or correct its name.")
    return unknown(reason, obs.lines, "No catalogued error in the log: read context (the last 30 log lines).")


def watch(
    params: dict[str, Any],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    wall: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Poll until something decisive happens or the window ends; the module's result (without `changed`)."""
    container, url, docker = params["container"], params["url"], params["docker"]
    catalogue = params["catalogue"]
    started = clock()
    deadline = started + params["window_s"]
    ready_since: float | None = None
    polls = 0
    live = LiveTail(docker, container) if params.get("live_progress", True) else None
    try:
        while True:
            now = clock()
            obs = observe(docker, container, url, max(min(HEALTH_TIMEOUT_S, deadline - now), 0.2), live)
            polls += 1
            now = clock()
            found = diagnose(obs.lines, catalogue)
            if any(READY_LINE in line for line in obs.lines) and obs.health_status != 200 and ready_since is None:
                ready_since = now
            state, reason = verdict(container, obs, found, ready_since, now)
            if state == "waiting" and now >= deadline:
                state = "loading"
            if state != "waiting":
                break
            sleep(max(min(params["poll_s"], deadline - clock()), 0.0))
    finally:
        if live is not None:
            live.close()
    return result(params, obs, found, state, reason, polls, wall())


def result(
    params: dict[str, Any],
    obs: Observation,
    found: list[dict[str, Any]],
    state: str,
    reason: str,
    polls: int,
    now_epoch: float,
) -> dict[str, Any]:
    started_at = params.get("started_at") or parse_time(obs.state.get("StartedAt"))
    elapsed = round(now_epoch - started_at, 1) if started_at else None
    prog = progress(obs.lines)
    prog["eta_s"] = eta_s(prog, elapsed)
    prog["elapsed_s"] = elapsed
    diagnosis = list(found)
    if state == "failed" and not any(entry["fatal"] for entry in found):
        diagnosis.insert(0, _unknown_entry(reason, obs))
    if state == "failed":
        primary = diagnosis[0]
        message = f"start failed: {reason}" + ("" if primary["name"] == "unknown" else f": {primary['cause']}")
    elif state == "stopped":
        message = reason
    else:
        message = summary_line(prog, prog["eta_s"])
        warnings = [entry["name"] for entry in found]
        if warnings:
            message += f" (warnings: {', '.join(warnings)})"
    if obs.log_error:
        message += f" [log unreadable: {obs.log_error}]"
    return {
        "state": state,
        "message": message,
        "progress": prog,
        "ledger": {**ledger(obs.lines), "started_at": obs.state.get("StartedAt")},
        "diagnosis": diagnosis,
        "markers": markers(obs.lines, params.get("required_markers") or [], params.get("forbidden_markers") or []),
        "exit_code": None if not obs.exists or obs.state.get("Running") else obs.state.get("ExitCode"),
        "log_tail": [clip(line) for line in obs.lines[-LOG_TAIL_LINES:]],
        "container_status": obs.state.get("Status", "unknown") if obs.exists else "missing",
        "restart_count": obs.restart_count,
        "health_status": obs.health_status,
        "silent_s": round(now_epoch - obs.last_log_at, 1) if obs.last_log_at else None,
        "polls": polls,
    }


def option_errors(params: dict[str, Any]) -> list[str]:
    errors = [f"catalogue: {error}" for error in catalogue_errors(params["catalogue"])]
    if params["window_s"] <= 0:
        errors.append("window_s must be positive")
    if params["poll_s"] <= 0:
        errors.append("poll_s must be positive")
    for option in ("required_markers", "forbidden_markers"):
        for index, marker in enumerate(params.get(option) or []):
            try:
                re.compile(marker["pattern"])
            except (KeyError, TypeError, re.error) as exc:
                errors.append(f"{option}[{index}]: needs a `pattern` that compiles ({exc!r})")
    return errors


def export_metrics(path: str, text: str) -> bool:
    """Write node exporter's textfile `path` when its content differs (atomic_file: renamed into place, so the
    collector never reads half a file); False, writing nothing, when the content is the same or the directory does
    not exist (no node exporter there)."""
    if not os.path.isdir(os.path.dirname(path) or "."):
        return False
    return replace_if_changed(path, text.encode(), 0o644)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "required": True},
            "url": {"type": "str", "default": "http://127.0.0.1:8001/health"},
            "window_s": {"type": "float", "default": 30.0},
            "poll_s": {"type": "float", "default": 0.5},
            "catalogue": {"type": "list", "elements": "dict", "required": True},
            "required_markers": {"type": "list", "elements": "dict", "default": []},
            "forbidden_markers": {"type": "list", "elements": "dict", "default": []},
            "started_at": {"type": "float"},
            "docker": {"type": "str", "default": "docker"},
            "live_progress": {"type": "bool", "default": True},
            "metrics_file": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    errors = option_errors(module.params)
    if errors:
        module.fail_json(msg="; ".join(errors))
    try:
        outcome = watch(module.params)
    except DockerError as exc:
        module.fail_json(msg=str(exc))
    written = False
    if module.params["metrics_file"] and outcome["state"] == "ready" and not module.check_mode:
        written = export_metrics(
            module.params["metrics_file"], start_metrics(outcome["ledger"], module.params["container"])
        )
    module.exit_json(changed=False, metrics_file_written=written, **outcome)


if __name__ == "__main__":
    main()
