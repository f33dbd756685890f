"""Reading a vLLM container's log: load progress, the model profile's log markers, and a diagnosis of failures
against an error catalogue that is data (roles/a800/defaults/main/catalogue.yml: `a800_error_catalogue`, which the
serve role's `serve_error_catalogue` points at).

Pure functions over lists of log lines (no I/O, no Ansible import): the vllm_readiness module uses them on the
serving host, the unit tests on the control node. The startup lines recognised here are those of vLLM 0.26 … 0.32
(and of the test double in tests/doubles/vllm):

    Loading safetensors checkpoint shards:  46% Completed | 37/80 [02:41<03:10,  0.23it/s]   (tqdm, `\\r`-separated)
    Model loading took 54.1 GiB memory and 352.0 seconds
    GPU KV cache size: 1,234,567 tokens                          (`CPU KV cache size` on the CPU build)
    Graph capturing finished in 66 secs, took 2.40 GiB
    Starting vLLM API server 0 on http://0.0.0.0:8001             (0.32: `Starting vLLM server on http://…`)
    Application startup complete.

and, for the ledger of a start (ledger()), the lines in which the engine times its own phases:

    Loading weights took 0.01 seconds                             (model_loader/default_loader.py)
    torch.compile took 41.20 s in total                           (compilation/monitor.py; one per compiled graph;
                                                                  `takes` in older releases)
    init engine (profile, create kv cache, warmup model) took 0.06 s   (v1/engine/core.py; older: `… seconds`,
                                                                   0.32 adds `(compilation: … s)`)
    generating GPU P2P access cache in /root/.cache/vllm/gpu_p2p_access_cache_for_0,1.json
                                                                  (distributed/device_communicators/all_reduce_utils.py)
    Warming up model for the compilation...                       (the CPU build's compile, to `Warming up done.`;
                                                                  v1/worker/cpu_model_runner.py)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# The phases of a start, in order; `phase` is the furthest one the log has reached.
PHASES = ("starting", "loading_weights", "weights_loaded", "kv_cache", "graphs", "api_starting", "ready")

SHARDS_RE = re.compile(r"Loading safetensors checkpoint shards:\s*(\d+)% Completed \| (\d+)/(\d+)")
# tqdm's elapsed time on the same line: `[02:41<03:10, …]` or `[1:02:41<…]`
BAR_ELAPSED_RE = re.compile(r"\|\s*\d+/\d+ \[(?:(\d+):)?(\d+):(\d+)<")
MODEL_LOADED_RE = re.compile(r"Model loading took ([\d.]+) GiB memory and ([\d.]+) seconds")
KV_CACHE_RE = re.compile(r"(?:GPU|CPU) KV cache size: ([\d,]+) tokens")
# vLLM 0.32 logs it on the KV cache size's line, older releases (and the double) on the next one.
KV_CONCURRENCY_RE = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
GRAPHS_RE = re.compile(r"Graph capturing finished in ([\d.]+) secs")
API_STARTING_RE = re.compile(r"Starting vLLM (?:API )?server")
READY_LINE = "Application startup complete."
# The ledger's lines (vLLM 0.26 ... 0.32 and the double; the seconds are the engine's own figures)
WEIGHTS_TOOK_RE = re.compile(r"Loading weights took ([\d.]+) s")
COMPILE_TOOK_RE = re.compile(r"torch\.compile (?:took|takes) ([\d.]+) s in total")  # `takes` before 0.3x
ENGINE_INIT_RE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
ENGINE_INIT_COMPILE_RE = re.compile(r"\(compilation: ([\d.]+) s")
P2P_CHECK_RE = re.compile(r"generating GPU P2P access cache in")
# The CPU build compiles in its warm-up and logs no `torch.compile took` (v1/worker/cpu_model_runner.py): the time
# between these two lines, by their stamps
CPU_COMPILE_START = "Warming up model for the compilation..."
CPU_COMPILE_DONE = "Warming up done."
# vLLM's own line prefix: `INFO 11-30 09:06:31 [file.py:12]` (month-day, no year)
VLLM_STAMP_RE = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[")
# The engine is gone while the API server process may still run (and answer /health with 503).
ENGINE_DEAD_RE = re.compile(
    r"EngineCore encountered a fatal error|Engine core initialization failed|EngineDeadError|EngineCore failed to start"
)
TRACEBACK_RE = re.compile(r"Traceback \(most recent call last\)")

MAX_MATCH_LINES = 5  # matching lines kept per diagnosis
CONTEXT_LINES = 15  # lines of context ending at the first match
TRACEBACK_LOOKBACK = 60  # how far back a traceback's header is looked for, to keep it in the context
MAX_LINE_CHARS = 1000  # lines in results are cut to this (vLLM's config line runs to several KB)


def split_lines(text: str) -> list[str]:
    """The log's lines, split on `\\n` and on `\\r` (tqdm redraws its bar with `\\r`); empty lines dropped."""
    return [line for line in re.split(r"\r\n|\r|\n", text) if line.strip()]


def clip(line: str, limit: int = MAX_LINE_CHARS) -> str:
    """A line cut to `limit` characters (with an ellipsis), for results that people read."""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _bar_elapsed(line: str) -> float | None:
    match = BAR_ELAPSED_RE.search(line)
    if not match:
        return None
    hours, minutes, seconds = match.groups()
    return int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)


def _concurrency(match: re.Match) -> dict[str, Any]:
    return {"tokens_per_request": int(match.group(1).replace(",", "")), "requests": float(match.group(2))}


def progress(lines: Iterable[str]) -> dict[str, Any]:
    """Load progress from the log: the latest shard progress line and the furthest phase reached.

    Keys: phase (one of PHASES), shards_done, shards_total, percent, load_elapsed_s (tqdm's own elapsed time on
    the latest shard line), load_pass (1 for the first run of the shard bar, 2 when it starts again: a speculative
    drafter such as MTP loads its weights from the checkpoint in a second pass), load_gib and load_seconds
    (`Model loading took`), kv_cache_tokens, kv_concurrency ({tokens_per_request, requests}: how many requests of
    that length the KV cache holds at once), graph_seconds. Values not seen yet are None."""
    result: dict[str, Any] = {
        "phase": "starting",
        "shards_done": None,
        "shards_total": None,
        "percent": None,
        "load_elapsed_s": None,
        "load_pass": None,
        "load_gib": None,
        "load_seconds": None,
        "kv_cache_tokens": None,
        "kv_concurrency": None,
        "graph_seconds": None,
    }
    reached = 0

    def reach(phase: str) -> None:
        nonlocal reached
        reached = max(reached, PHASES.index(phase))

    for line in lines:
        if match := SHARDS_RE.search(line):
            previous = result["shards_done"]
            result["percent"], result["shards_done"], result["shards_total"] = (int(g) for g in match.groups())
            if previous is None or result["shards_done"] < previous:
                result["load_pass"] = (result["load_pass"] or 0) + 1
            result["load_elapsed_s"] = _bar_elapsed(line)
            reach("loading_weights")
        elif match := MODEL_LOADED_RE.search(line):
            result["load_gib"], result["load_seconds"] = float(match.group(1)), float(match.group(2))
            reach("weights_loaded")
        elif match := KV_CACHE_RE.search(line):
            result["kv_cache_tokens"] = int(match.group(1).replace(",", ""))
            reach("kv_cache")
            if concurrency := KV_CONCURRENCY_RE.search(line):
                result["kv_concurrency"] = _concurrency(concurrency)
        elif match := KV_CONCURRENCY_RE.search(line):
            result["kv_concurrency"] = _concurrency(match)
        elif match := GRAPHS_RE.search(line):
            result["graph_seconds"] = float(match.group(1))
            reach("graphs")
        elif API_STARTING_RE.search(line):
            reach("api_starting")
        elif READY_LINE in line:
            reach("ready")
    result["phase"] = PHASES[reached]
    return result


STAMP_RESOLUTION_S = 1.0
_DAYS_BEFORE = (0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335)


def vllm_stamps(lines: Sequence[str]) -> list[float | None]:
    """Seconds of each line's own vLLM time stamp (`INFO 11-30 09:06:31 [...]`), relative to an arbitrary origin, for
    differences within one log; a line without one (tqdm's bar, uvicorn's `INFO:     Application startup complete.`,
    a traceback) takes the last stamp before it (None before the first). The stamps carry no year: one that goes
    back more than a day is taken as the next year's."""
    stamps: list[float | None] = []
    last: float | None = None
    year_s = 0.0
    for line in lines:
        match = VLLM_STAMP_RE.search(line)
        if match:
            month, day, hour, minute, second = (int(g) for g in match.groups())
            # day of a 366-day year (Feb 29 exists), enough for differences inside one log
            stamp = year_s + (_DAYS_BEFORE[month - 1] + day - 1) * 86400.0 + hour * 3600 + minute * 60 + second
            if last is not None and stamp < last - 86400:
                year_s += 366 * 86400.0
                stamp += 366 * 86400.0
            last = stamp
        stamps.append(last)
    return stamps


# The ledger's phases, in the order a start runs them, with the words people read.
LEDGER_PHASES = (
    ("p2p_check", "P2P check"),
    ("model_loading", "model loading (weights)"),
    ("torch_compile", "torch.compile"),
    ("kv_cache", "KV-cache profiling and allocation"),
    ("cuda_graphs", "CUDA graph capture"),
    ("api_server", "API server up"),
)


def ledger(lines: Sequence[str]) -> dict[str, Any]:
    """Where a start's time went, from its log: the seconds of each phase the engine reports (weights and model
    loading, torch.compile, the engine's init - its profiling run, KV cache and warmup, CUDA graph capture - from the
    engine's own `took` figures), the P2P check and the API server's start from the lines' time stamps, and the
    total from the first line to `Application startup complete.`.

    The stamps are vLLM's own, to the second (vllm_stamps()). Keys: phases (LEDGER_PHASES order, only those the log
    shows: {phase, label, s}), weights_s (the part of model loading spent reading the weights), total_s (None until the
    start completes), other_s (the total less the phases: process start, imports, configuration, distributed
    set-up; None when the phases' figures exceed the wall time, as the test double's simulated ones do), ready."""
    stamps = vllm_stamps(lines)
    figures: dict[str, float] = {}
    compile_s = 0.0
    compile_seen = False
    first = next((s for s in stamps if s is not None), None)
    engine_ready_at = ready_at = None
    cpu_compile_from = cpu_compile_s = None
    for index, line in enumerate(lines):
        if match := MODEL_LOADED_RE.search(line):
            figures["model_loading"] = float(match.group(2))
        elif match := WEIGHTS_TOOK_RE.search(line):
            figures["weights"] = float(match.group(1))
        elif match := COMPILE_TOOK_RE.search(line):
            compile_s += float(match.group(1))
            compile_seen = True
        elif match := GRAPHS_RE.search(line):
            figures["cuda_graphs"] = float(match.group(1))
        elif match := ENGINE_INIT_RE.search(line):
            figures["engine_init"] = float(match.group(1))
            if not compile_seen and (inner := ENGINE_INIT_COMPILE_RE.search(line)):
                compile_s, compile_seen = float(inner.group(1)), True
            engine_ready_at = stamps[index]
        elif CPU_COMPILE_START in line:
            cpu_compile_from = stamps[index]
        elif CPU_COMPILE_DONE in line and cpu_compile_from is not None and stamps[index] is not None:
            cpu_compile_s = stamps[index] - cpu_compile_from
        elif P2P_CHECK_RE.search(line):
            after = next((s for s in stamps[index + 1 :] if s is not None and s != stamps[index]), stamps[index])
            if stamps[index] is not None and after is not None:
                figures["p2p_check"] = round(after - stamps[index], 2)
        elif READY_LINE in line and ready_at is None:
            ready_at = stamps[index]
    if compile_seen:
        figures["torch_compile"] = round(compile_s, 2)
    elif cpu_compile_s is not None:
        figures["torch_compile"] = round(cpu_compile_s, 2)
    if "model_loading" not in figures and "weights" in figures:
        figures["model_loading"] = figures["weights"]  # the CPU build logs no `Model loading took`
    if "engine_init" in figures:
        rest = figures["engine_init"] - figures.get("torch_compile", 0.0) - figures.get("cuda_graphs", 0.0)
        figures["kv_cache"] = round(max(rest, 0.0), 2)
    if engine_ready_at is not None and ready_at is not None:
        figures["api_server"] = round(max(ready_at - engine_ready_at, 0.0), 2)
    phases = [{"phase": name, "label": label, "s": figures[name]} for name, label in LEDGER_PHASES if name in figures]
    total = round(ready_at - first, 2) if ready_at is not None and first is not None else None
    counted = sum(p["s"] for p in phases)
    # the stamps count whole seconds: a total up to STAMP_RESOLUTION_S short of the phases still holds them
    other = round(max(total - counted, 0.0), 2) if total is not None and total >= counted - STAMP_RESOLUTION_S else None
    return {
        "phases": phases,
        "weights_s": figures.get("weights"),
        "total_s": total,
        "other_s": other,
        "ready": ready_at is not None,
    }


def ledger_growth(previous: Mapping[str, Any] | None, current: Mapping[str, Any], min_s: float = 5.0) -> list[dict]:
    """The phases that took longer in `current` than in `previous` (another start's ledger), by more than `min_s`
    seconds and 10 %, the largest growth first: {phase, label, before, after, text}, the text e.g.
    `CUDA graph capture 66 s -> 86 s (+20 s)`; [] without a previous ledger."""
    if not previous:
        return []
    before = {p["phase"]: p["s"] for p in previous.get("phases") or []}
    grew = []
    for phase in current.get("phases") or []:
        old, new = before.get(phase["phase"]), phase["s"]
        if old is not None and new - old > max(min_s, 0.1 * old):
            text = f"{phase['label']} {old:g} s -> {new:g} s (+{new - old:.0f} s)"
            grew.append({"phase": phase["phase"], "label": phase["label"], "before": old, "after": new, "text": text})
    return sorted(grew, key=lambda g: g["after"] - g["before"], reverse=True)


def start_metrics(ledger: Mapping[str, Any], container: str) -> str:
    """node exporter's textfile format (Prometheus' exposition format) for a server's last start: the seconds of each
    phase of its ledger and the total, labelled with the container."""
    out = [
        "# HELP a800_vllm_start_phase_seconds Seconds each phase of the server's last start took, from the engine's "
        "own log lines.",
        "# TYPE a800_vllm_start_phase_seconds gauge",
    ]
    out += [
        f'a800_vllm_start_phase_seconds{{container="{container}",phase="{phase["phase"]}"}} {phase["s"]:g}'
        for phase in (ledger or {}).get("phases") or []
    ]
    if (ledger or {}).get("total_s") is not None:
        out += [
            "# HELP a800_vllm_start_seconds Seconds from the server's first log line to Application startup complete.",
            "# TYPE a800_vllm_start_seconds gauge",
            f'a800_vllm_start_seconds{{container="{container}"}} {ledger["total_s"]:g}',
        ]
    return "\n".join(out) + "\n"


def eta_s(progress_now: Mapping[str, Any], elapsed_s: float | None) -> float | None:
    """Seconds until the remaining shards are loaded, at the rate so far; None when unknown.

    The rate is shards done over the loader's own elapsed time (tqdm's, `load_elapsed_s`) when the log gives it,
    else over `elapsed_s` (time since the start was requested, which also counts the start-up before loading).
    0.0 once every shard is loaded or the log is past loading."""
    if PHASES.index(progress_now.get("phase") or "starting") >= PHASES.index("weights_loaded"):
        return 0.0
    done, total = progress_now.get("shards_done"), progress_now.get("shards_total")
    if not total or done is None:
        return None
    if done >= total:
        return 0.0
    spent = progress_now.get("load_elapsed_s") or elapsed_s
    if not done or not spent or spent <= 0:
        return None
    return round((total - done) * spent / done, 1)


def format_duration(seconds: float) -> str:
    """`3 min 10 s`, `45 s`, `1 h 2 min`."""
    seconds = max(round(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def summary_line(progress_now: Mapping[str, Any], eta: float | None) -> str:
    """One line for Ansible's output, e.g. `loading weights: shards 37/80 (46 %), ETA 3 min 10 s`."""
    phase = progress_now.get("phase") or "starting"
    elapsed = progress_now.get("elapsed_s")
    after = f" after {format_duration(elapsed)}" if elapsed is not None else ""
    if phase == "starting":
        return f"starting: no weight shard loaded yet{after}"
    if phase == "loading_weights":
        done, total, pct = progress_now.get("shards_done"), progress_now.get("shards_total"), progress_now["percent"]
        eta_text = "ETA unknown" if eta is None else f"ETA {format_duration(eta)}"
        again = f" (pass {progress_now['load_pass']})" if (progress_now.get("load_pass") or 1) > 1 else ""
        return f"loading weights{again}: shards {done}/{total} ({pct} %), {eta_text}"
    if phase == "weights_loaded":
        gib, secs = progress_now.get("load_gib"), progress_now.get("load_seconds")
        return f"weights loaded ({gib:.1f} GiB per GPU in {format_duration(secs)}): profiling memory{after}"
    if phase == "kv_cache":
        return f"KV cache allocated ({progress_now['kv_cache_tokens']:,} tokens): capturing CUDA graphs{after}"
    if phase == "graphs":
        return f"CUDA graphs captured in {format_duration(progress_now['graph_seconds'])}: starting the API server"
    if phase == "api_starting":
        return f"API server starting{after}"
    return f"ready: application startup complete{after}"


def markers(
    lines: Sequence[str], required: Sequence[Mapping[str, str]], forbidden: Sequence[Mapping[str, str]]
) -> dict[str, Any]:
    """The model profile's log markers (`{pattern, meaning}`, regular expressions searched per line).

    Returns {required: [...], forbidden: [...], missing: [meanings of required markers not found],
    forbidden_found: [meanings of forbidden markers found], ok: bool}; each marker as
    {pattern, meaning, found, line (the first matching line, or None)}."""

    def check(marker: Mapping[str, str]) -> dict[str, Any]:
        regex = re.compile(marker["pattern"])
        line = next((candidate for candidate in lines if regex.search(candidate)), None)
        return {
            "name": marker.get("name", ""),
            "pattern": marker["pattern"],
            "meaning": marker.get("meaning", ""),
            "found": line is not None,
            "line": None if line is None else clip(line),
        }

    req = [check(marker) for marker in required]
    forb = [check(marker) for marker in forbidden]
    missing = [m["meaning"] or m["pattern"] for m in req if not m["found"]]
    found = [m["meaning"] or m["pattern"] for m in forb if m["found"]]
    return {
        "required": req,
        "forbidden": forb,
        "missing": missing,
        "forbidden_found": found,
        "ok": not (missing or found),
    }


def catalogue_errors(catalogue: Sequence[Any]) -> list[str]:
    """What is wrong with an error catalogue (empty when it is usable): every entry needs a name, a pattern that
    compiles, a cause and a fix; `fatal`, when present, is a bool; names are unique."""
    errors: list[str] = []
    seen: set[str] = set()
    for index, entry in enumerate(catalogue):
        where = f"entry {index}"
        if not isinstance(entry, Mapping):
            errors.append(f"{where}: not a mapping")
            continue
        where = f"entry {index} ({entry.get('name', '?')})"
        for key in ("name", "pattern", "cause", "fix"):
            if not isinstance(entry.get(key), str) or not entry.get(key):
                errors.append(f"{where}: `{key}` must be a non-empty string")
        if "fatal" in entry and not isinstance(entry["fatal"], bool):
            errors.append(f"{where}: `fatal` must be true or false")
        if isinstance(entry.get("pattern"), str):
            try:
                re.compile(entry["pattern"])
            except re.error as exc:
                errors.append(f"{where}: pattern does not compile: {exc}")
        if entry.get("name") in seen:
            errors.append(f"{where}: duplicate name")
        seen.add(entry.get("name"))
    return errors


def _context(lines: Sequence[str], index: int) -> list[str]:
    """The CONTEXT_LINES lines ending at `index`; when the traceback this line belongs to starts earlier, its
    `Traceback (most recent call last):` header is kept too (followed by `…`)."""
    start = max(index - CONTEXT_LINES + 1, 0)
    window = [clip(line) for line in lines[start : index + 1]]
    if any(TRACEBACK_RE.search(line) for line in lines[start : index + 1]):
        return window
    for back in range(start - 1, max(index - TRACEBACK_LOOKBACK, -1), -1):
        if TRACEBACK_RE.search(lines[back]):
            return [clip(lines[back]), "…", *window]
    return window


def diagnose(lines: Sequence[str], catalogue: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every catalogue entry whose pattern matches a log line, in catalogue order (the first is the primary
    diagnosis): {name, cause, fix, fatal, lines (up to 5 matching lines), context (the lines ending at the first
    match)}. An empty list when nothing matches."""
    found: list[dict[str, Any]] = []
    for entry in catalogue:
        regex = re.compile(entry["pattern"])
        hits = [i for i, line in enumerate(lines) if regex.search(line)]
        if not hits:
            continue
        found.append(
            {
                "name": entry["name"],
                "cause": entry["cause"],
                "fix": entry["fix"],
                "fatal": bool(entry.get("fatal", True)),
                "lines": [clip(lines[i]) for i in hits[:MAX_MATCH_LINES]],
                "context": _context(lines, hits[0]),
            }
        )
    return found


def engine_dead(lines: Iterable[str]) -> str | None:
    """The first line saying the engine core died (the API server may live on, /health then answers 503)."""
    return next((line for line in lines if ENGINE_DEAD_RE.search(line)), None)
