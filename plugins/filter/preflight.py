"""Filters: the preflight checks of a host's facts against the model profile.

Every check returns one record — name, status (pass/warn/fail/pending), the fact it read, the measured and
expected values, and the fix — so that all of a host's problems are reported together, and the same
records feed the playbook output, set_stats for ansible-runner callers, and the reports.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, PENDING, WARN, check, counts
from ansible_collections.a800.vllm.plugins.module_utils.debian_version import compare_versions
from ansible_collections.a800.vllm.plugins.module_utils.pcie_acs import FIX_ACS
from ansible_collections.a800.vllm.plugins.module_utils.weights_ram import ram_fit

GIB_PER_GB = 1e9 / 1024**3


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text or ""))


def _bool(value: Any) -> bool:
    """A flag that may arrive as a string: extra vars (-e flag=false) are not converted by Jinja."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def _gpu_count_check(gpu: dict, req: dict) -> list[dict]:
    checks = []
    count, want = gpu.get("count", 0), int(req["gpu_count"])
    if count < want:
        checks.append(
            check(
                "gpu_count",
                FAIL,
                "gpu_facts.count",
                count,
                want,
                f"GPU count: found {count}, expected {want} (tensor parallel {want})",
                f"serve this profile on a host with {want} GPUs: the weights only fit with "
                f"tensor_parallel_size {want} (model_profile.hardware.gpu_count)",
            )
        )
    elif count > want:
        checks.append(
            check(
                "gpu_count",
                WARN,
                "gpu_facts.count",
                count,
                want,
                f"GPU count: found {count}, the model uses {want}",
                "set CUDA_VISIBLE_DEVICES in the launch env to choose the GPUs",
            )
        )
    else:
        checks.append(check("gpu_count", PASS, "gpu_facts.count", count, want, f"GPU count: {count}"))
    return checks


def _gpu_uniform_check(gpu: dict, req: dict) -> list[dict]:
    checks = []
    models = gpu.get("models") or []
    if gpu.get("homogeneous", True):
        checks.append(
            check(
                "gpu_uniform",
                PASS,
                "gpu_facts.models",
                models,
                "one model on all GPUs",
                f"one GPU model on all GPUs: {', '.join(models) or '-'}",
            )
        )
    else:
        checks.append(
            check(
                "gpu_uniform",
                FAIL,
                "gpu_facts.models",
                models,
                "one model on all GPUs",
                f"mixed GPUs: {', '.join(models)}",
                "tensor parallelism needs identical GPUs (model and memory) on every rank",
            )
        )
    return checks


def _compute_capability_check(gpu: dict, req: dict) -> list[dict]:
    checks = []
    caps, want_cc = gpu.get("compute_caps") or [], str(req["compute_capability"])
    if caps == [want_cc]:
        checks.append(
            check("compute_capability", PASS, "gpu_facts.compute_caps", caps, want_cc, f"compute capability {want_cc}")
        )
    else:
        checks.append(
            check(
                "compute_capability",
                FAIL,
                "gpu_facts.compute_caps",
                caps,
                want_cc,
                f"compute capability: found {', '.join(caps) or 'unknown'}, expected {want_cc}",
                f"this profile's image and attention backend are built for sm{want_cc.replace('.', '')} "
                "(model_profile.hardware.compute_capability): use a profile made for these GPUs, "
                "or hosts of that compute capability",
            )
        )
    return checks


def _gpu_memory_check(gpu: dict, req: dict) -> list[dict]:
    checks = []
    mem, want_mem = gpu.get("memory_mib_min"), int(req["min_gpu_memory_mib"])
    if mem is not None and mem >= want_mem:
        checks.append(
            check(
                "gpu_memory", PASS, "gpu_facts.memory_mib_min", mem, f">= {want_mem}", f"GPU memory: {mem} MiB per GPU"
            )
        )
    else:
        checks.append(
            check(
                "gpu_memory",
                FAIL,
                "gpu_facts.memory_mib_min",
                mem,
                f">= {want_mem}",
                f"GPU memory: found {mem} MiB per GPU, expected at least {want_mem} MiB "
                f"({req.get('memory_reason') or 'weights share + KV cache + CUDA graphs'})",
                "serve this profile on 80 GB cards (model_profile.hardware.min_gpu_memory_mib)",
            )
        )
    return checks


def _driver_version_check(gpu: dict, req: dict) -> list[dict]:
    pin = req.get("driver_pin") or "the pinned version"
    checks = []
    drv, min_drv = gpu.get("driver_version"), str(req["min_driver_version"])
    if drv and _version(drv) >= _version(min_drv):
        checks.append(check("driver_version", PASS, "gpu_facts.driver_version", drv, f">= {min_drv}", f"driver {drv}"))
    else:
        checks.append(
            check(
                "driver_version",
                FAIL,
                "gpu_facts.driver_version",
                drv,
                f">= {min_drv}",
                f"driver: found {drv}, the serving image needs at least {min_drv}",
                f"set bom.nvidia_driver.version (now {pin}) to {min_drv} or newer and run the host phase",
            )
        )
    pinned = str(req.get("driver_pin") or "")
    if pinned and drv and drv != pinned:
        if compare_versions(drv, pinned) > 0:
            # the host phase keeps a newer driver (nvidia_driver_keep in plugins/filter/nvidia_packages.py)
            branch = "" if drv.split(".")[0] == pinned.split(".")[0] else f" and branch: '{drv.split('.')[0]}'"
            fix = (
                f"pin what runs: set bom.nvidia_driver.version: {drv}{branch}; or, to go back to {pinned}, run the "
                "host phase with -e nvidia_driver_allow_downgrade=true (a reboot needs "
                "nvidia_driver_reboot_allowed=true)"
            )
            # the table shows the detail only: a warning's fix goes in it
            detail = (
                f"driver {drv} runs, newer than the pin {pinned}: the host phase keeps it and installs nothing of the "
                f"driver (no downgrade) unless nvidia_driver_allow_downgrade is true. Fix: {fix}"
            )
        else:
            detail = f"driver {drv} differs from the pin {pinned}"
            fix = "the host phase installs the pinned driver (a reboot needs nvidia_driver_reboot_allowed)"
        checks.append(check("driver_pin", WARN, "gpu_facts.driver_version", drv, pinned, detail, fix))
    return checks


def _persistence_mode_check(gpu: dict, req: dict) -> list[dict]:
    checks = []
    if gpu.get("persistence_mode_all"):
        checks.append(
            check(
                "persistence_mode", PASS, "gpu_facts.persistence_mode_all", True, True, "persistence mode on all GPUs"
            )
        )
    else:
        checks.append(
            check(
                "persistence_mode",
                WARN,
                "gpu_facts.persistence_mode_all",
                False,
                True,
                "persistence mode is off on some GPUs (slow first CUDA init, driver unloads)",
                "the host phase enables nvidia-persistenced",
            )
        )
    return checks


def _topology_check(gpu: dict, req: dict) -> list[dict]:
    checks = []
    topo = gpu.get("topology") or {}
    worst = topo.get("worst")
    if worst == "SYS":
        checks.append(
            check(
                "topology",
                WARN,
                "gpu_facts.topology.worst",
                worst,
                "NV#/PIX/PXB/PHB/NODE",
                "GPU pairs talk across CPU sockets (SYS): tensor-parallel all-reduce is slower, and "
                "PCIe ACS/IOMMU settings can make NCCL P2P hang",
                "run the GPU communication check before loading the weights (gpu_comm_check_enabled=true); if it "
                "hangs or is slow, " + FIX_ACS,
            )
        )
    elif worst:
        checks.append(
            check(
                "topology",
                PASS,
                "gpu_facts.topology.worst",
                worst,
                "NV#/PIX/PXB/PHB/NODE",
                f"GPU interconnect: worst link {worst} ({', '.join(topo.get('classes', []))})",
            )
        )
    else:
        checks.append(
            check(
                "topology",
                WARN,
                "gpu_facts.topology",
                topo.get("error"),
                "topo -m matrix",
                "could not read nvidia-smi topo -m",
                "run `nvidia-smi topo -m` on the host",
            )
        )
    return checks


def _pcie_link_check(gpu: dict, req: dict) -> list[dict]:
    checks = []
    degraded = gpu.get("pcie_degraded") or []
    if degraded:
        checks.append(
            check(
                "pcie_link",
                WARN,
                "gpu_facts.pcie_degraded",
                degraded,
                [],
                f"PCIe link narrower than its maximum on GPU {', '.join(map(str, degraded))}",
                "reseat the card or check the riser / BIOS slot configuration",
            )
        )
    return checks


def _nvswitch_check(gpu: dict, req: dict) -> list[dict]:
    return [
        check(
            "nvswitch",
            PASS,
            "gpu_facts.nvswitch",
            bool(gpu.get("nvswitch")),
            "-",
            "NVSwitch present: the host phase installs Fabric Manager"
            if gpu.get("nvswitch")
            else "no NVSwitch (PCIe / NVLink bridges): no Fabric Manager needed",
        )
    ]


# The checks of a host whose driver answers, in the order the preflight table shows them.
GPU_CHECKS = (
    _gpu_count_check,
    _gpu_uniform_check,
    _compute_capability_check,
    _gpu_memory_check,
    _driver_version_check,
    _persistence_mode_check,
    _topology_check,
    _pcie_link_check,
    _nvswitch_check,
)


def gpu_checks(gpu: dict, req: dict) -> list[dict]:
    """The GPU checks: the driver first (pending or failed without it), then one function per check."""
    pin = req.get("driver_pin") or "the pinned version"
    if not gpu.get("driver_installed"):
        status = PENDING if _bool(req.get("allow_missing_driver", True)) else FAIL
        return [
            check(
                "nvidia_driver",
                status,
                "gpu_facts.driver_installed",
                False,
                True,
                "nvidia-smi is not installed: GPU checks wait for the driver",
                f"the host phase installs NVIDIA driver {pin} and runs the GPU checks again "
                "(ansible-playbook site.yml --tags host)",
            )
        ]
    if not gpu.get("driver_loaded"):
        return [
            check(
                "nvidia_driver",
                FAIL,
                "gpu_facts.error",
                gpu.get("error"),
                "nvidia-smi answers",
                f"nvidia-smi is installed but fails: {gpu.get('error')}",
                "load the kernel module: reboot after a driver install (nvidia_driver_reboot_allowed), "
                "check Secure Boot / MOK enrollment and `dmesg | grep -i nvrm`",
            )
        ]
    return [record for one in GPU_CHECKS for record in one(gpu, req)]


def host_checks(host: dict, req: dict) -> list[dict]:
    checks = []
    weights_gb = float(req["weights_size_gb"])
    # RAM below weights + headroom is a warning (cold restarts, no prewarm), a failure only for weights to be locked
    # resident: the weights role decides its prewarm with the same function (plugins/module_utils/weights_ram.py).
    fit = ram_fit(
        host.get("mem_total_gib", 0),
        weights_gb,
        req["ram_headroom_gb"],
        req["cold_gb_per_s"],
        _bool(req.get("keep_resident", False)),
    )
    checks.append(
        check(
            "ram",
            fit["status"],
            "host_facts.mem_total_gib",
            host.get("mem_total_gib", 0),
            f">= {fit['need_gib']}",
            fit["detail"],
            fit["fix"],
        )
    )

    w = host.get("weights") or {}
    need_gib_disk = round(weights_gb * GIB_PER_GB, 1)
    where = f"{w.get('path')} ({w.get('fs_type')} on {w.get('device')}, {w.get('free_gib')} GiB free)"
    if w.get("exists") and w.get("shards"):
        checks.append(
            check(
                "weights_storage",
                PASS,
                "host_facts.weights",
                f"{w.get('size_gib')} GiB",
                f"{need_gib_disk} GiB",
                f"weights at {where}: {w['shards']} shards, {w.get('size_gib')} GiB (the weights phase verifies them)",
            )
        )
    elif (w.get("free_gib") or 0) >= need_gib_disk:
        checks.append(
            check(
                "weights_storage",
                WARN,
                "host_facts.weights.exists",
                False,
                True,
                f"no weights yet at {where}",
                "copy the weights there before the serve phase (model_profile.weights.host_dir)",
            )
        )
    else:
        checks.append(
            check(
                "weights_storage",
                FAIL,
                "host_facts.weights.free_gib",
                w.get("free_gib"),
                f">= {need_gib_disk}",
                f"no weights at {where}, and no room for {weights_gb:g} GB",
                "point model_profile.weights.host_dir at a filesystem with room "
                "for the weights, or copy them there first",
            )
        )

    return checks


def preflight_checks(gpu: dict, host: dict, requirements: dict) -> list[dict]:
    """All preflight checks of one host."""
    req = dict(requirements, driver_installed=gpu.get("driver_installed", False))
    return gpu_checks(gpu, req) + host_checks(host, req)


def preflight_failures(checks: list[dict]) -> list[str]:
    """One line per failed check: what was found, what was expected, and the fix."""
    return [
        f"{c['name']}: {c['detail']} [{c['fact']} = {c['measured']!r}, expected {c['expected']}]. Fix: {c['fix']}"
        for c in checks
        if c["status"] == FAIL
    ]


def preflight_table(checks: list[dict]) -> list[str]:
    """The checks as aligned lines for a person to read."""
    width = max((len(c["name"]) for c in checks), default=0)
    lines = [f"{c['status'].upper():<7} {c['name']:<{width}}  {c['detail']}" for c in checks]
    by_status = counts(checks)
    lines.append(", ".join(f"{by_status[s]} {s}" for s in (PASS, WARN, FAIL, PENDING) if by_status[s]) or "no checks")
    return lines


class FilterModule:
    def filters(self) -> dict:
        return {
            "preflight_checks": preflight_checks,
            "preflight_failures": preflight_failures,
            "preflight_table": preflight_table,
        }
