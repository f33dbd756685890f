"""Filters: turn what the verification observed into check records, and summarize them.

The records have the preflight shape (name, status, measured, expected, detail, fix) so that verify.json,
report.md, the play's output and set_stats all show the same thing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
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


VERIFY_QUERY = ("index", "name", "memory.used", "memory.total", "utilization.gpu")


def _nvidia_smi() -> ModuleType:
    """The project's nvidia-smi parser (plugins/module_utils/nvidia_smi.py): controller-side plugins cannot import
    module_utils through `ansible.module_utils`, so it is loaded by path."""
    name = "a800_vllm_module_utils_nvidia_smi"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "module_utils" / "nvidia_smi.py"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def nvidia_smi_rows(stdout: str) -> list[dict]:
    """`nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits`,
    read by the project's parser ([N/A] and friends become None)."""
    rows = _nvidia_smi().parse_query_csv(stdout, VERIFY_QUERY)

    def pct(value: str | None) -> int | None:
        return None if value is None else int(float(value))

    return [
        {
            "index": r["index"],
            "name": r["name"],
            "memory_used_mib": r["memory.used"],
            "memory_total_mib": r["memory.total"],
            "utilization_pct": pct(r["utilization.gpu"]),
        }
        for r in rows
    ]


class FilterModule:
    def filters(self) -> dict:
        return {
            "verify_marker_checks": verify_marker_checks,
            "verify_gpu_checks": verify_gpu_checks,
            "verify_summary": verify_summary,
            "nvidia_smi_rows": nvidia_smi_rows,
        }
