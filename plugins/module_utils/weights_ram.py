"""Whether the page cache can hold the model weights: the one decision behind the preflight's `ram` check and the
weights role's prewarm (docs/field.md#servers-in-the-field, docs/article.md#load-times).

RAM at or above weights + headroom: the weights stay in the page cache, a restart loads them hot, and the weights
phase prewarms them. Below it: a warning, not a failure. The server still runs, but every restart is a cold load
from disk (its duration computed from the profile's weights size and cold load rate, the article's ~22 min for
433 GB) and the weights phase skips the prewarm, whose pages would be evicted again before the server reads them.
A failure only when the weights are to be locked resident (weights_keep_resident), which cannot work without that
RAM.

Pure Python (no Ansible import, only the collection's checks module): the preflight filter and the weights role's
filter use it on the control node, the unit tests directly.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, WARN

GIB_PER_GB = 1e9 / 1024**3


def _number(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{name} must not be negative, got {value!r}")
    return number


def _bool(value: Any) -> bool:
    """A flag that may arrive as a string: extra vars (-e flag=false) are not converted by Jinja."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def duration(seconds: float) -> str:
    """'~22 min' (from 90 s on) or '~6 s'."""
    return f"~{round(seconds / 60)} min" if seconds >= 90 else f"~{round(seconds)} s"


def ram_fit(
    ram_gib: Any, weights_gb: Any, headroom_gb: Any, cold_gb_per_s: Any, keep_resident: Any = False
) -> dict[str, Any]:
    """The decision for a host with `ram_gib` of RAM (MemTotal, GiB) serving `weights_gb` of weights (decimal GB)
    with `headroom_gb` for everything else: status (pass/warn/fail), whether the weights phase prewarms, the cold
    load a restart costs without the page cache, and the detail, fix and note a person reads."""
    ram = _number(ram_gib, "host_facts.mem_total_gib")
    weights = _number(weights_gb, "model_profile.weights.size_gb")
    headroom = _number(headroom_gb, "model_profile.hardware.ram_headroom_gb (or weights_ram_headroom_gb)")
    rate = _number(cold_gb_per_s, "model_profile.load_time.cold_gb_per_s")
    if rate == 0:
        raise ValueError("model_profile.load_time.cold_gb_per_s must be above 0 (GB/s read from disk), got 0")
    lock = _bool(keep_resident)
    need = round((weights + headroom) * GIB_PER_GB, 1)
    cold_s = weights / rate
    cold = duration(cold_s)
    fits = ram >= need
    parts = f"{weights:g} GB weights + {headroom:g} GB headroom"
    cost = (
        f"every server restart is a cold load from disk, {cold} for {weights:g} GB at {rate:g} GB/s "
        "(model_profile.load_time.cold_gb_per_s, docs/article.md#load-times)"
    )
    decision: dict[str, Any] = {
        "ram_gib": ram_gib,
        "need_gib": need,
        "weights_gb": weights,
        "headroom_gb": headroom,
        "cold_gb_per_s": rate,
        "cold_load_s": round(cold_s),
        "cold_load": cold,
        "keep_resident": lock,
        "fits": fits,
        "prewarm": fits,
        "note": "",
    }
    if fits:
        decision.update(
            status=PASS, detail=f"RAM {ram_gib} GiB holds the {weights:g} GB of weights in the page cache", fix=""
        )
    elif lock:
        decision.update(
            status=FAIL,
            detail=(
                f"RAM: found {ram_gib} GiB, need at least {need} GiB ({parts}) to lock the weights resident "
                "(weights_keep_resident: true)"
            ),
            fix=(
                f"set weights_keep_resident: false (every restart is then a cold load from disk, {cold}), or serve "
                f"on a host with at least {need} GiB of RAM"
            ),
            note=f"the weights cannot be locked resident: {ram_gib} GiB of RAM is below {need} GiB ({parts})",
        )
    else:
        decision.update(
            status=WARN,
            detail=(
                f"RAM: found {ram_gib} GiB, below the {need} GiB ({parts}) that keep the weights in the page cache: "
                f"{cost}, and the weights phase skips the page-cache prewarm"
            ),
            fix=(
                f"serve on a host with at least {need} GiB of RAM for restarts from the page cache, or plan for "
                f"{cold} per restart (model_profile.weights.size_gb, model_profile.hardware.ram_headroom_gb)"
            ),
            note=(
                f"prewarm skipped: {ram_gib} GiB of RAM cannot hold {weights:g} GB of weights next to "
                f"{headroom:g} GB of headroom (need {need} GiB), so prewarmed pages would be evicted again before "
                f"the server reads them; {cost}"
            ),
        )
    return decision
