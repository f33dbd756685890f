"""Filters: turn what the verification observed into check records, and summarize them.

The records have the preflight shape (name, status, measured, expected, detail, fix) so that verify.json,
report.md, the play's output and set_stats all show the same thing.
"""

from __future__ import annotations

from typing import Any

GIB = 1024**3
GB = 1e9


def _record(name: str, status: str, measured: Any, expected: Any, detail: str, fix: str = "") -> dict:
    return {"name": name, "status": status, "measured": measured, "expected": expected, "detail": detail,
            "fix": fix if status != "pass" else ""}  # fmt: skip


def verify_marker_checks(markers: dict) -> list[dict]:
    """Required log markers found, forbidden ones absent (the vllm_readiness module's `markers`)."""
    checks = []
    for kind, want in (("required", True), ("forbidden", False)):
        for index, marker in enumerate(markers.get(kind) or []):
            ok = bool(marker.get("found")) == want
            name = marker.get("name") or f"{kind}_{index}"
            checks.append(
                _record(
                    f"log:{name}",
                    "pass" if ok else "fail",
                    "found" if marker.get("found") else "absent",
                    ("present: " if want else "absent: ") + marker.get("pattern", ""),
                    marker.get("meaning", "") + (f" — log: {marker['line']}" if marker.get("line") else ""),
                    "a dense backend means the backend selection did not take effect: check --attention-backend and "
                    "the image's TRITON_MLA_SPARSE (image role)"
                    if name == "no_dense_fallback" or (want and "SPARSE" in marker.get("pattern", ""))
                    else "read the server log (docker logs) around this line",
                )
            )
    return checks


def verify_gpu_checks(gpus: list[dict], tensor_parallel: Any, progress: dict, baselines: dict, tolerance: Any) -> list:
    """Every tensor-parallel GPU visible, and the weights on each GPU as the log reports them against the article's
    ~57 GB per GPU. nvidia-smi's per-GPU memory and utilisation go into the report as measured figures."""
    tp = int(tensor_parallel)
    tol = float(tolerance) / 100
    checks = [
        _record(
            "gpus_visible",
            "pass" if len(gpus) >= tp else "fail",
            len(gpus),
            f">= {tp} (tensor parallel)",
            "; ".join(f"GPU {g['index']}: {g['memory_used_mib']} MiB used, {g['utilization_pct']} %" for g in gpus),
            "check the driver and the container runtime (host phase)",
        )
    ]
    want_gb = float((baselines.get("memory_per_gpu_gb") or {}).get("weights") or 0)
    got_gib = progress.get("load_gib")
    if want_gb and got_gib is not None:
        got_gb = float(got_gib) * GIB / GB
        ok = abs(got_gb - want_gb) <= want_gb * tol
        checks.append(
            _record(
                "weights_per_gpu",
                "pass" if ok else "warn",
                round(got_gb, 1),
                f"{want_gb} GB +- {tolerance} %",
                f"the engine reports {got_gib} GiB ({got_gb:.1f} GB) of weights per GPU (article: ~{want_gb} GB)",
                "a different checkpoint or tensor parallel size than the profile's",
            )
        )
    return checks


def verify_summary(checks: list[dict]) -> dict:
    counts = {s: sum(c["status"] == s for c in checks) for s in ("pass", "warn", "fail")}
    return {**counts, "total": len(checks), "ok": counts["fail"] == 0}


def nvidia_smi_rows(stdout: str) -> list[dict]:
    """`nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits`."""
    rows = []
    for line in stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue

        def number(text: str) -> int | None:
            return int(float(text)) if text.replace(".", "", 1).isdigit() else None

        rows.append({"index": number(parts[0]), "name": parts[1], "memory_used_mib": number(parts[2]),
                     "memory_total_mib": number(parts[3]), "utilization_pct": number(parts[4])})  # fmt: skip
    return rows


class FilterModule:
    def filters(self) -> dict:
        return {
            "verify_marker_checks": verify_marker_checks,
            "verify_gpu_checks": verify_gpu_checks,
            "verify_summary": verify_summary,
            "nvidia_smi_rows": nvidia_smi_rows,
        }
