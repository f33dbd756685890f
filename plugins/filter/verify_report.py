"""Filters: turn what the verification observed into check records, and summarize them.

The records are the project's check records (plugins/module_utils/checks.py), so that verify.json, report.md, the
play's output and set_stats all show the same thing.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils import nvidia_smi
from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, PENDING, WARN, check, counts
from ansible_collections.a800.vllm.plugins.module_utils.vllm_log import format_duration, ledger_growth

GIB = 1024**3
GB = 1e9


def verify_marker_checks(markers: dict) -> list[dict]:
    """Required log markers found, forbidden ones absent (the vllm_readiness module's `markers`)."""
    checks = []
    for kind, want in (("required", True), ("forbidden", False)):
        for index, marker in enumerate(markers.get(kind) or []):
            ok = bool(marker.get("found")) == want
            name = marker.get("name") or f"{kind}_{index}"
            checks.append(
                check(
                    f"log:{name}",
                    PASS if ok else FAIL,
                    "the server log since its start (docker logs)",
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
        check(
            "gpus_visible",
            PASS if len(gpus) >= tp else FAIL,
            "nvidia-smi --query-gpu on the host",
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
            check(
                "weights_per_gpu",
                PASS if ok else WARN,
                "the server log: Model loading took N GiB",
                round(got_gb, 1),
                f"{want_gb} GB +- {tolerance} %",
                f"the engine reports {got_gib} GiB ({got_gb:.1f} GB) of weights per GPU (article: ~{want_gb} GB)",
                "a different checkpoint or tensor parallel size than the profile's",
            )
        )
    return checks


def verify_kv_capacity_check(progress: dict, max_num_seqs: Any) -> dict:
    """How many full-length requests the KV cache holds at once (the engine's `Maximum concurrency for N tokens per
    request: Xx`), against max_num_seqs: the scheduler admits up to max_num_seqs requests, and when they are long it
    runs out of KV blocks and preempts (recomputes) some. A warning with the value to use, not a failure: short
    requests fit many more."""
    name, fact = "kv_capacity", "startup.kv_concurrency"
    concurrency = (progress or {}).get("kv_concurrency")
    if not concurrency:
        return check(name, PENDING, fact, None, "logged", "the engine's log has no 'Maximum concurrency' line")
    holds, length = float(concurrency["requests"]), int(concurrency["tokens_per_request"])
    full = int(holds)
    tokens = (progress or {}).get("kv_cache_tokens")
    cache = f"the KV cache ({tokens:,} tokens)" if tokens else "the KV cache"
    seqs = int(max_num_seqs) if str(max_num_seqs or "").isdigit() else None
    detail = f"{cache} holds {holds:.2f} requests of {length:,} tokens (max_model_len) at once"
    if seqs is None or seqs <= full:
        return check(name, PASS, fact, holds, f">= max_num_seqs ({seqs})", detail + f"; max_num_seqs is {seqs}")
    return check(
        name,
        WARN,
        fact,
        holds,
        f">= max_num_seqs ({seqs})",
        detail + f", fewer than max_num_seqs {seqs}: {seqs} long requests at once run out of KV blocks and the "
        "scheduler preempts (recomputes) some",
        f"set model_profile.launch.max_num_seqs to {max(full, 1)} for full-length requests, or keep {seqs} when most "
        "requests are short; more KV: a higher gpu_memory_utilization or a lower max_model_len",
    )


def verify_summary(checks: list[dict]) -> dict:
    by_status = {s: n for s, n in counts(checks).items() if s != PENDING}
    return {**by_status, "total": len(checks), "ok": by_status[FAIL] == 0}


# What usually cuts each phase of a start (the warning's fix names those that are slow).
START_CUTS = {
    "p2p_check": "vLLM runs this check only with VLLM_SKIP_P2P_CHECK=0 (its default is 1, trusting the driver) and "
    "only for custom all-reduce, which it turns off on more than two PCIe-only GPUs: unset it, or keep ~/.cache/vllm "
    "across containers (the result is cached there)",
    "model_loading": "the weights in the page cache before the start (the weights role's prewarm; from disk the "
    "article's restart takes ~22 min instead of ~6)",
    "torch_compile": "the compile cache kept across containers (~/.cache/vllm/torch_compile_cache); "
    "model_profile.launch.optimization_level 0 skips it, at the cost of the decode speed (docs/phases.md)",
    "kv_cache": "a smaller profiling run (max_num_batched_tokens)",
    "cuda_graphs": "fewer capture sizes: model_profile.launch.max_cudagraph_capture_size, or a lower max_num_seqs "
    "(one A800 report: 256 -> 32 cut 86 s to 66 s)",
    "api_server": "read the log between the engine's init and Application startup complete",
}


def verify_start_ledger_check(ledger: dict, last_report: str | None = None, budget: dict | None = None) -> dict:
    """The start's ledger as a check: where its time went (vllm_readiness's `ledger`); a warning naming each phase
    over its budget (model_profile.baselines.start_s, seconds per phase) and, when the last report on the control
    node (its verify.json text, '' or None when there is none) was of another start of this server, each phase that
    grew since (the second start of a host should not be slower than the first)."""
    name, fact = "start_ledger", "the server log since its start: the engine's own phase timings"
    if not (ledger or {}).get("ready"):
        return check(
            name, PENDING, fact, None, "logged", "the log shows no complete start (Application startup complete.)"
        )
    phases = ledger.get("phases") or []
    listed = ", ".join(f"{p['label']} {p['s']:g} s" for p in phases) or "no phase timings logged"
    total = ledger.get("total_s")
    detail = f"the start took {format_duration(total)}" if total is not None else "the start's total is unknown"
    detail += f": {listed}" + (f", other {ledger['other_s']:g} s" if ledger.get("other_s") is not None else "")
    budget = {key: float(value) for key, value in (budget or {}).items() if value is not None}
    expected = "each phase within its budget" if budget else "logged"
    over = [p for p in phases if p["phase"] in budget and p["s"] > budget[p["phase"]]]
    problems = [f"{p['label']} {p['s']:g} s, over its budget of {budget[p['phase']]:g} s" for p in over]
    slow = {p["phase"] for p in over}
    try:
        last = (json.loads(last_report) if last_report else {}).get("ledger") or {}
    except (ValueError, AttributeError):
        last = {}
    if last and last.get("started_at") != ledger.get("started_at"):
        grew = ledger_growth(last, ledger)
        if grew:
            problems.append(
                f"slower than the last start ({last.get('started_at')}): " + "; ".join(g["text"] for g in grew)
            )
            slow |= {g["phase"] for g in grew}
        else:
            detail += f"; no phase slower than the last start's ({last.get('started_at')})"
    if not problems:
        return check(name, PASS, fact, total, expected, detail)
    cuts = "; ".join(f"{p['label']}: {START_CUTS[p['phase']]}" for p in phases if p["phase"] in slow)
    return check(name, WARN, fact, total, expected, detail + "; " + "; ".join(problems), cuts)


VERIFY_QUERY = ("index", "name", "memory.used", "memory.total", "utilization.gpu")


def nvidia_smi_rows(stdout: str) -> list[dict]:
    """`nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits`,
    read by the project's parser ([N/A] and friends become None)."""
    rows = nvidia_smi.parse_query_csv(stdout, VERIFY_QUERY)

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


def _dcgm_check(monitoring: dict, host: str, where: str) -> list[dict]:
    """dcgm-exporter on this host, when it runs one (monitoring_dcgm_enabled): scraped and up, else a warning naming
    the exporter. Never a failure: the GPU metrics and their alerts are blind without it, but the server serves, so the
    host stays green in its report and in the fleet (docs/monitoring.md#a-missing-exporter)."""
    if str(monitoring.get("dcgm_expected", False)).strip().lower() not in ("true", "1", "yes"):
        return []
    up = monitoring.get("dcgm_up")
    up = None if up in (None, "", "None") else str(up)
    container = monitoring.get("dcgm_container") or "a800-dcgm-exporter"
    query = f'up{{job="dcgm",host="{host}"}}'
    if up == "1":
        return [check("monitoring:dcgm", PASS, where, up, "1", f"dcgm-exporter ({container}) is scraped: {query} is 1")]
    return [
        check(
            "monitoring:dcgm", WARN, where, up, "1",
            f"dcgm-exporter ({container}) is not scraped: {query} is {up if up is not None else 'absent'}; the GPU "
            "panels and the XID, temperature and row-remap alerts see nothing from this host (it still serves)",
            f"on {host}: docker ps -a --filter name={container} and docker logs {container}, then run the monitoring "
            "phase again (playbooks/monitoring.yml); a host without dcgm-exporter sets monitoring_dcgm_enabled: false",
        )
    ]  # fmt: skip


def verify_monitoring_checks(monitoring: dict, host: str) -> list[dict]:
    """What the monitoring host's Prometheus says of this host (roles/verify/tasks/monitoring.yml): its /metrics is
    scraped (up == 1), every alert rule is loaded, none of them fires for it, and its dcgm-exporter (when it runs one)
    is scraped, a warning otherwise."""
    if not monitoring:
        return []
    where = f"Prometheus {monitoring.get('prometheus_url', '')}"
    up = monitoring.get("up")
    firing = [a for a in monitoring.get("firing") or [] if a.get("host") == host]
    loaded, expected = monitoring.get("rules_loaded", 0), monitoring.get("rules_expected", 0)
    return [
        check(
            "monitoring:scraped", PASS if up == "1" else FAIL, where, up, "1",
            f"up{{job=\"vllm\",host=\"{host}\"}} is {up if up is not None else 'absent'}",
            f"check that {monitoring.get('monitoring_host', 'the monitoring host')} reaches this host's port "
            "(serve_publish_address, a firewall) and see its targets page /targets",
        ),
        check(
            "monitoring:rules", PASS if expected and loaded == expected else FAIL, where, loaded, expected,
            f"{loaded} of {expected} alert rules loaded; dashboard: {monitoring.get('dashboard', '')}",
            "run the monitoring phase (playbooks/monitoring.yml) and read journalctl -u prometheus",
        ),
        check(
            "monitoring:alerts", WARN if firing else PASS, where, len(firing), 0,
            "; ".join(f"{a['alert']}: {a['summary']}" for a in firing) or "no alert fires for this host",
            "see the alert's summary; python -m a800vllm status lists every firing alert",
        ),
        *_dcgm_check(monitoring, host, where),
    ]  # fmt: skip


class FilterModule:
    def filters(self) -> dict:
        return {
            "verify_marker_checks": verify_marker_checks,
            "verify_gpu_checks": verify_gpu_checks,
            "verify_summary": verify_summary,
            "verify_kv_capacity_check": verify_kv_capacity_check,
            "verify_start_ledger_check": verify_start_ledger_check,
            "verify_monitoring_checks": verify_monitoring_checks,
            "nvidia_smi_rows": nvidia_smi_rows,
        }
