"""vLLM-style log lines: `(Worker_TP0 pid=42) INFO 11-30 09:12:01 [cuda.py:487] message`."""

from __future__ import annotations

import os
import sys
import time

# Seconds the simulated clock (startup.Clock) ran ahead of the real one: the lines' stamps follow the simulated A800
# start, so that a ledger read from the stamps (plugins/module_utils/vllm_log.py ledger()) adds up with the `took`
# figures the double logs. Docker's own --timestamps stay real.
SKEW_S = 0.0


def skew(seconds: float) -> None:
    global SKEW_S
    SKEW_S += max(seconds, 0.0)


def line(level: str, where: str, msg: str, proc: str | None = None) -> str:
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() + SKEW_S))
    prefix = f"({proc} pid={os.getpid()}) " if proc else ""
    return f"{prefix}{level} {stamp} [{where}] {msg}"


def emit(level: str, where: str, msg: str, proc: str | None = None) -> None:
    """vLLM writes its log lines to stdout (tracebacks and progress bars go to stderr)."""
    sys.stdout.write(line(level, where, msg, proc) + "\n")
    sys.stdout.flush()


def info(where: str, msg: str, proc: str | None = None) -> None:
    emit("INFO", where, msg, proc)


def warning(where: str, msg: str, proc: str | None = None) -> None:
    emit("WARNING", where, msg, proc)


def error(where: str, msg: str, proc: str | None = None) -> None:
    emit("ERROR", where, msg, proc)


def raw(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def traceback(proc: str | None, frames: list[tuple[str, int, str, str]], exc: str) -> None:
    """A Python traceback as vLLM's workers print it, one log line per frame line."""
    prefix = f"({proc} pid={os.getpid()}) " if proc else ""
    out = [f"{prefix}Traceback (most recent call last):"]
    for path, lineno, func, code in frames:
        out.append(f'{prefix}  File "{path}", line {lineno}, in {func}')
        out.append(f"{prefix}    {code}")
    out.append(f"{prefix}{exc}")
    raw("\n".join(out) + "\n")
