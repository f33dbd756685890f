"""Read the output of the all-reduce check (roles/gpu_comm_check/files/allreduce_check.py) and judge it.

Pure Python (no Ansible import, only the collection's checks module): the gpu_comm_check filters use it on the
control node, the unit tests directly. The check prints, from rank 0, one line per message size and one JSON line
at the end:

    size_mib=64 ranks=8 time_ms=5.123 algbw_gbps=13.10 busbw_gbps=22.93
    RESULT {"backend": "nccl", "ranks": 8, "sizes": [...], "max_busbw_gbps": 22.93, "correct": true, ...}

Bandwidths are GB/s (1e9 bytes/s) as nccl-tests define them: algbw = bytes / time and, for all-reduce,
busbw = algbw * 2(n-1)/n, the figure comparable to a link's speed whatever the number of GPUs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS
from ansible_collections.a800.vllm.plugins.module_utils.pcie_acs import FIX_ACS_OFF

_SIZE_LINE = re.compile(r"^size_mib=\S+(?:\s+\w+=\S+)+")
_PAIR = re.compile(r"(\w+)=(\S+)")
# What a hang looks like once a timeout turned it into an error (NCCL watchdog, Gloo, the rendezvous store).
_HANG = re.compile(
    r"Watchdog caught collective operation timeout|collective operation timeout|NCCL communicator was aborted"
    r"|Timed out waiting|timed out after|wait timeout|DistStoreError.*timed? ?out|Socket Timeout",
    re.IGNORECASE,
)
# Known failures of the docker run itself, with the fix; first match wins.
_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"Unable to find image|pull access denied|No such image|manifest unknown|repository does not exist"),
        "the image is not on the host: run the image phase first, or point gpu_comm_check_image at an image "
        "that is there (docker images)",
    ),
    (
        re.compile(r"could not select device driver|nvidia-container-cli|unknown or invalid runtime name: nvidia"),
        "Docker cannot give the container GPUs: the NVIDIA container toolkit is not configured for Docker "
        "(run the host phase, then `docker run --rm --gpus all <image> nvidia-smi`)",
    ),
    (
        re.compile(r"timeout: failed to run command|docker: (?:command )?not found|No such file or directory.*docker"),
        "docker is not installed or not on the PATH of the remote user",
    ),
    (
        re.compile(r"permission denied while trying to connect to the Docker daemon"),
        "the remote user may not use Docker: run the role with become: true",
    ),
    (
        re.compile(r"\"?torchrun\"?: executable file not found|exec: \"torchrun\""),
        "the image has no torchrun: use the serving image (it ships PyTorch), gpu_comm_check_image",
    ),
    (
        re.compile(r"CUDA out of memory|OutOfMemoryError|cudaErrorMemoryAllocation"),
        "the GPUs are full: stop the serving container (or any GPU job) before the check, or use smaller "
        "gpu_comm_check_sizes_mib",
    ),
    (
        re.compile(r"invalid device ordinal|CUDA error: invalid device"),
        "fewer GPUs are visible in the container than gpu_comm_check_gpus asks for: check nvidia-smi on the host",
    ),
)

# The ACS fix names the three mechanisms that exist and the lspci re-check (plugins/module_utils/pcie_acs.py,
# docs/field.md#pcie-acs-and-iommu).
FIX_ACS = FIX_ACS_OFF
FIX_P2P = (
    FIX_ACS_OFF + "; fallback: NCCL_P2P_DISABLE=1 (gpu_comm_check_extra_env here, and the same variable in the "
    "serving container's environment), which is slower but does not hang"
)


def bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor 2(n-1)/n."""
    return 2.0 * (ranks - 1) / ranks if ranks > 0 else 0.0


def algbw_gbps(nbytes: int | float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s): the message size over the time of one all-reduce."""
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw_gbps(algbw: float, ranks: int) -> float:
    """Bus bandwidth of an all-reduce in GB/s: algbw * 2(n-1)/n."""
    return algbw * bus_factor(ranks)


def _number(value: str) -> int | float | str:
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value else number


def parse_size_line(line: str) -> dict[str, Any] | None:
    """'size_mib=64 ranks=2 time_ms=0.25 ... busbw_gbps=270.83' -> {'size_mib': 64, 'ranks': 2, ...}."""
    line = line.strip()
    if not _SIZE_LINE.match(line):
        return None
    record: dict[str, Any] = {key: _number(value) for key, value in _PAIR.findall(line)}
    if line.endswith("WRONG_SUM"):
        record["correct"] = False
    return record


def _size_key(size_mib: Any) -> str:
    return f"{float(size_mib):g}"


def parse_allreduce_output(text: str) -> dict[str, Any]:
    """The check's output as data: the RESULT JSON when present, else what the per-size lines say.

    Returns found (a RESULT line was read), result (the JSON or None), sizes (one record per size),
    busbw_gbps ({"64": 270.8, ...}), max_busbw_gbps, ranks, correct, nccl_warnings and errors.
    """
    lines = (text or "").splitlines()
    result: dict[str, Any] | None = None
    errors: list[str] = []
    size_lines: list[dict[str, Any]] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("RESULT "):
            try:
                result = json.loads(stripped[len("RESULT ") :])
            except json.JSONDecodeError as exc:
                errors.append(f"RESULT line is not JSON: {exc}")
            continue
        record = parse_size_line(stripped)
        if record is not None:
            size_lines.append(record)
    sizes = list(result.get("sizes") or []) if result else size_lines
    busbw = {_size_key(s["size_mib"]): s.get("busbw_gbps") for s in sizes if "size_mib" in s}
    values = [v for v in busbw.values() if isinstance(v, (int, float))]
    if result and isinstance(result.get("max_busbw_gbps"), (int, float)):
        max_busbw: float | None = result["max_busbw_gbps"]
    else:
        max_busbw = max(values) if values else None
    ranks = (result or {}).get("ranks") or next((s.get("ranks") for s in sizes if s.get("ranks")), None)
    correct = bool(result.get("correct", True)) if result else all(s.get("correct", True) for s in sizes)
    return {
        "found": result is not None,
        "result": result,
        "sizes": sizes,
        "busbw_gbps": busbw,
        "max_busbw_gbps": max_busbw,
        "ranks": ranks,
        "correct": correct,
        "nccl_warnings": [line.strip() for line in lines if "NCCL WARN" in line][:20],
        "errors": errors,
    }


def _tail(text: str, count: int) -> list[str]:
    return [line for line in (text or "").splitlines() if line.strip()][-count:]


def _acs_note(pcie_acs: dict[str, Any] | None) -> str:
    """What the PCIe ACS report (pcie_acs_facts) adds to a failure message."""
    report = pcie_acs or {}
    risk = report.get("risk")
    if risk in ("high", "low"):
        return f" PCIe ACS report (pcie_acs_facts): risk {risk}: {report.get('message', '')}."
    if risk == "none":
        return " PCIe ACS report (pcie_acs_facts): no ACS redirection above the GPUs."
    if risk == "unknown":
        return f" PCIe ACS report (pcie_acs_facts): {report.get('message') or 'ACS state unknown'}."
    return ""


def evaluate(
    run: dict[str, Any],
    min_busbw_gbps: float,
    timeout_s: int | float,
    gpus: int,
    image: str = "",
    extra_env: dict[str, Any] | None = None,
    pcie_acs: dict[str, Any] | None = None,
    tail_lines: int = 15,
) -> dict[str, Any]:
    """Judge one run of the check (a registered command result: rc, stdout, stderr).

    Returns the record the role stores as gpu_comm_check_result: status (pass/fail), reason (ok, timeout,
    exit, no_result, wrong_result, low_busbw), message, the figures (busbw per size, max) and the context.
    """
    stdout, stderr = run.get("stdout") or "", run.get("stderr") or ""
    output = stdout + ("\n" + stderr if stderr else "")
    rc = run.get("rc")
    parsed = parse_allreduce_output(stdout)
    result = parsed["result"] or {}
    threshold = float(min_busbw_gbps)
    record: dict[str, Any] = {
        "status": FAIL,
        "reason": "",
        "message": "",
        "rc": rc,
        "image": image,
        "gpus": int(gpus),
        "ranks": parsed["ranks"],
        "device": result.get("device"),
        "torch": result.get("torch"),
        "nccl": result.get("nccl"),
        "dtype": result.get("dtype"),
        "p2p_missing": result.get("p2p_missing") or [],
        "sizes": parsed["sizes"],
        "busbw_gbps": parsed["busbw_gbps"],
        "max_busbw_gbps": parsed["max_busbw_gbps"],
        "min_busbw_gbps": threshold,
        "timeout_s": timeout_s,
        "extra_env": dict(extra_env or {}),
        "nccl_warnings": parsed["nccl_warnings"],
        "output_tail": _tail(output, tail_lines),
    }
    last = "\n".join(record["output_tail"]) or "(no output)"
    acs = _acs_note(pcie_acs)
    p2p_off = str((extra_env or {}).get("NCCL_P2P_DISABLE", "0")).strip().lower() in ("1", "true", "yes", "on")
    where = f"{gpus} GPUs" + (f" ({result['device']})" if result.get("device") else "")

    if rc in (124, 137) or (rc not in (0, None) and _HANG.search(output)):
        what = f"did not finish in {timeout_s} s" if rc in (124, 137) else "timed out inside NCCL/the process group"
        if p2p_off:
            cause = (
                "even with NCCL_P2P_DISABLE=1, so not (only) PCIe peer-to-peer: run it again with "
                "gpu_comm_check_extra_env NCCL_DEBUG=INFO and look for the transport that stalls (SHM needs "
                "--ipc=host, NET needs working interfaces), and check that no other job holds the GPUs"
            )
        else:
            cause = (
                "typical cause PCIe ACS/IOMMU redirecting GPU peer-to-peer traffic through the root complex, "
                f"where NCCL P2P hangs (vllm#9920, nccl#2079). Fix: {FIX_P2P}"
            )
        record.update(
            reason="timeout",
            message=f"all-reduce on {where} {what}: {cause}.{acs} Last lines:\n{last}",
        )
        return record
    if rc != 0:
        hint = next((fix for pattern, fix in _HINTS if pattern.search(output)), "")
        record.update(
            reason="exit",
            message=(
                f"all-reduce check on {where} exited with status {rc}"
                + (f": {hint}" if hint else "")
                + (f". NCCL warnings: {'; '.join(parsed['nccl_warnings'][:3])}" if parsed["nccl_warnings"] else "")
                + f". Last lines:\n{last}"
            ),
        )
        return record
    if not parsed["found"]:
        record.update(
            reason="no_result",
            message=f"all-reduce check on {where} exited 0 but printed no RESULT line. Last lines:\n{last}",
        )
        return record
    if not parsed["correct"]:
        record.update(
            reason="wrong_result",
            message=(
                f"all-reduce on {where} returned wrong sums: the GPU-to-GPU transport corrupts data (faulty "
                f"P2P path, riser or driver); try NCCL_P2P_DISABLE=1 to confirm, then check the PCIe links and "
                f"the driver.{acs}"
            ),
        )
        return record
    max_busbw = float(parsed["max_busbw_gbps"] or 0.0)
    per_size = ", ".join(f"{size} MiB {bw:.1f}" for size, bw in parsed["busbw_gbps"].items())
    if max_busbw < threshold:
        record.update(
            reason="low_busbw",
            message=(
                f"all-reduce bus bandwidth on {where}: measured {max_busbw:.1f} GB/s at best ({per_size} GB/s), "
                f"below gpu_comm_check_min_busbw_gbps={threshold:g} GB/s. 8x A800 PCIe Gen4 with working "
                f"peer-to-peer reach roughly 10-20 GB/s; less means NCCL is not using peer-to-peer (PCIe ACS "
                f"redirection or IOMMU translation, NCCL_P2P_DISABLE set) or a GPU link runs below Gen4 x16 "
                f"(gpu_facts.pcie_degraded): every tensor-parallel step waits on this all-reduce, so decoding "
                f"is correspondingly slower. "
                + (
                    f"CUDA reports no peer access for GPU pairs {', '.join(record['p2p_missing'][:8])}. "
                    if record["p2p_missing"]
                    else ""
                )
                + (
                    "NCCL_P2P_DISABLE=1 is set in gpu_comm_check_extra_env, so peer-to-peer is off by request: "
                    f"fix ACS/IOMMU ({FIX_ACS}) and drop it, or lower the threshold to accept the slower path."
                    if p2p_off
                    else f"Fix: {FIX_ACS}; reseat or re-slot GPUs whose link is degraded."
                )
                + acs
            ),
        )
        return record
    record.update(
        status=PASS,
        reason="ok",
        message=(
            f"all-reduce on {where}: bus bandwidth {max_busbw:.1f} GB/s at best ({per_size} GB/s), threshold "
            f"{threshold:g} GB/s"
        ),
    )
    return record
