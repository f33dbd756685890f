"""Filters: the preflight checks of a host's facts against the model profile.

Every check returns one record — name, status (pass/warn/fail/pending), the fact it read, the measured and
expected values, and the fix — so that all of a host's problems are reported together, and the same
records feed the playbook output, set_stats for ansible-runner callers, and the reports.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, PENDING, WARN, check
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


# --- GPU state (docs/field.md#gpu-state-mig-ecc-retired-pages-and-row-remapping) ------------------------------


def _gpus(indices: list, verb: str = "") -> str:
    """'GPU 3' / 'GPUs 1, 3', with a verb in the third person that agrees: _gpus([3], 'turns') = 'GPU 3 turns'."""
    one = len(indices) == 1
    plural = {"is": "are", "needs": "need", "turns": "turn"}
    return (
        ("GPU " if one else "GPUs ")
        + ", ".join(map(str, indices))
        + (f" {verb if one else plural.get(verb, verb)}" if verb else "")
    )


def _each(indices: list, command: str) -> str:
    """`sudo nvidia-smi -i 3 <command>`, or a loop over several GPUs (nvidia-smi -i takes one GPU per command)."""
    if len(indices) == 1:
        return f"`sudo nvidia-smi -i {indices[0]} {command}`"
    return f"`for i in {' '.join(map(str, indices))}; do sudo nvidia-smi -i $i {command}; done`"


def _unreadable(name: str, fact: str, unknown: list[dict], what: str) -> dict:
    """A state value nvidia-smi printed that the parser does not know: shown as printed, never taken as fine."""
    shown = ", ".join(f"GPU {u['gpu']} {u['field']} = {u['value']!r}" for u in unknown)
    fields = ",".join(sorted({u["field"] for u in unknown}))
    return check(
        name,
        WARN,
        fact,
        unknown,
        "Enabled/Disabled, Yes/No or [N/A]",
        f"{what}: nvidia-smi printed a value the preflight does not know ({shown})",
        f"read it on the host: `nvidia-smi --query-gpu=index,{fields} --format=csv` and `nvidia-smi -q`",
    )


def _state_unknown(gpu: dict, *fields: str) -> list[dict]:
    return [u for u in (gpu.get("state") or {}).get("unknown", []) if u["field"] in fields]


def _not_read(gpu: dict, field: str) -> str:
    """Why a state field has no value: not asked (the driver does not know it) or not reported by the GPUs."""
    state = gpu.get("state") or {}
    if field not in state.get("fields", []):
        return f"not read ({field} is not a field of this driver's --query-gpu)"
    return f"not reported by these GPUs ({field} is [N/A] or [Not Supported])"


def _settled(gpu: dict, name: str, fact: str, fields: tuple, what: str, fine: str, absent: str) -> list[dict]:
    """How every GPU-state check ends when nothing is wrong: a value of `fields` that the parser does not know warns
    (shown as printed); else it passes, saying how many GPUs report the first field (`{n}` in `fine`) or why none
    does (`{not_read}` in `absent`)."""
    unknown = _state_unknown(gpu, *fields)
    if unknown:
        return [_unreadable(name, "gpu_facts.state.unknown", unknown, what)]
    reported = ((gpu.get("state") or {}).get("reported") or {}).get(fields[0], [])
    detail = fine.format(n=len(reported)) if reported else absent.format(not_read=_not_read(gpu, fields[0]))
    return [check(name, PASS, fact, [], [], detail)]


def _mig_mode_check(gpu: dict, req: dict) -> list[dict]:
    state = gpu.get("state") or {}
    on, turning_on = state.get("mig_enabled", []), state.get("mig_pending_enabled", [])
    already_off = state.get("mig_pending_disabled", [])
    fact = "gpu_facts.state.mig_enabled"
    if on or turning_on:
        to_turn_off = [i for i in on if i not in already_off] + turning_on
        parts = []
        if on:
            parts.append(f"MIG mode is on at {_gpus(on)}")
        if already_off:
            parts.append(
                f"{_gpus(already_off, 'is')} already set to turn it off at the next GPU reset (pending Disabled)"
            )
        if turning_on:
            parts.append(f"{_gpus(turning_on, 'turns')} it on at the next GPU reset or reboot (pending Enabled)")
        fix = []
        if to_turn_off:
            fix.append(
                f"turn MIG off: {_each(to_turn_off, '-mig 0')} (destroy any MIG instances first: "
                f"`sudo nvidia-smi mig -i N -dci` and `sudo nvidia-smi mig -i N -dgi`)"
            )
        if on:
            fix.append(
                f"{'then ' if fix else ''}reset {_gpus(on)} with nothing running on them ({_each(on, '-r')}) or "
                "reboot: the mode changes only at a GPU reset, and stays across reboots until it is turned off"
            )
        return [
            check(
                "mig_mode",
                FAIL,
                fact,
                sorted(set(on) | set(turning_on)),
                [],
                "; ".join(parts) + ": vLLM's tensor parallel runs on whole GPUs (in MIG mode a GPU offers CUDA only "
                "its MIG instances)",
                "; ".join(fix),
            )
        ]
    return _settled(
        gpu, "mig_mode", fact, ("mig.mode.current", "mig.mode.pending"), "MIG mode",
        "MIG mode off on every GPU ({n} report it)", "MIG mode {not_read}: no MIG",
    )  # fmt: skip


def _ecc_mode_check(gpu: dict, req: dict) -> list[dict]:
    state = gpu.get("state") or {}
    off, turning_off = state.get("ecc_disabled", []), state.get("ecc_pending_disabled", [])
    reboot_only = state.get("ecc_pending_enabled", [])
    fact = "gpu_facts.state.ecc_disabled"
    if off or turning_off:
        parts = []
        if off:
            parts.append(f"ECC is off at {_gpus(off)}")
        if reboot_only:
            parts.append(f"{_gpus(reboot_only, 'is')} already set to turn it on at the next reboot (pending Enabled)")
        if turning_off:
            parts.append(f"{_gpus(turning_off, 'turns')} it off at the next reboot (pending Disabled)")
        to_enable = [i for i in off if i not in reboot_only] + turning_off
        fix = f"{_each(to_enable, '-e 1')}, then reboot" if to_enable else "reboot"
        if to_enable and reboot_only:
            fix += f" ({_gpus(reboot_only, 'needs')} only the reboot)"
        return [
            check(
                "ecc_mode",
                WARN,
                fact,
                sorted(set(off) | set(turning_off)),
                [],
                "; ".join(parts) + ": memory errors there are neither corrected nor reported, and row remapping and "
                "page retirement, which act on the errors ECC finds, cannot protect the weights and KV cache; "
                "vLLM still runs",
                fix + ": an ECC mode change takes effect at the next reboot",
            )
        ]
    return _settled(
        gpu, "ecc_mode", fact, ("ecc.mode.current", "ecc.mode.pending"), "ECC mode",
        "ECC on at every GPU ({n} report it)", "ECC {not_read}",
    )  # fmt: skip


class _Flag(NamedTuple):
    """A GPU-state check that one nvidia-smi field raises per GPU. The GPUs `gpu_facts.state[key]` lists get `status`,
    with `detail` and `fix` formatted with {gpus} ('GPU 3'), {reset} (the nvidia-smi -r command), {first} (the first
    of them) and {tp} (the tensor parallel size); none, and it ends as every state check does (_settled)."""

    name: str
    status: str
    key: str
    field: str
    what: str
    detail: str
    fix: str
    fine: str
    absent: str

    def __call__(self, gpu: dict, req: dict) -> list[dict]:
        fact = f"gpu_facts.state.{self.key}"
        flagged = (gpu.get("state") or {}).get(self.key, [])
        if not flagged:
            return _settled(gpu, self.name, fact, (self.field,), self.what, self.fine, self.absent)
        say = {"gpus": _gpus(flagged), "reset": _each(flagged, "-r"), "first": flagged[0], "tp": req.get("gpu_count")}
        return [check(self.name, self.status, fact, flagged, [], self.detail.format(**say), self.fix.format(**say))]


# Pages pending retirement, a pending row remap, a failed row remap (docs/field.md#gpu-state-...).
_FLAGS = (
    _Flag(
        "retired_pages_pending", WARN, "retired_pages_pending", "retired_pages.pending", "pages pending retirement",
        "memory pages are pending retirement at {gpus} (Pending Page Blacklist: Yes): until they are retired they "
        "can still be allocated and cause more memory errors",
        "retire them: with nothing running on the GPU, reset it ({reset}), or reboot",
        "no page pending retirement ({n} GPUs report it)",
        "page retirement {not_read}: Ampere and later GPUs remap rows instead",
    ),
    _Flag(
        "row_remap_pending", WARN, "remapped_rows_pending", "remapped_rows.pending", "pending row remapping",
        "a row remapping is pending at {gpus} (Remapped Rows / Pending: Yes): a memory row failed and its spare row "
        "takes over only at the next GPU reset; until then error containment and dynamic page offlining keep new "
        "work off it",
        "apply it: with nothing running on the GPU, reset it ({reset}), or reboot; then "
        "`nvidia-smi -q -d ROW_REMAPPER` shows Pending: No",
        "no row remapping pending ({n} GPUs report it)", "row remapping {not_read}",
    ),
    _Flag(
        "row_remap_failure", FAIL, "remapped_rows_failure", "remapped_rows.failure", "row remapping failure",
        "row remapping has failed at {gpus} (Remapping Failure Occurred: Yes): a memory bank has no spare row left "
        "for a failing one, and its errors keep coming back; tensor parallel {tp} needs every GPU",
        "replace the GPU: the row remapping failure flag is NVIDIA's RMA criterion once NVIDIA's field diagnostic "
        "confirms it; `nvidia-smi -q -d ROW_REMAPPER -i {first}` shows the counts",
        "no row remapping failure ({n} GPUs report it)", "row remapping failures {not_read}",
    ),
)  # fmt: skip


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
    _mig_mode_check,
    _ecc_mode_check,
    *_FLAGS,  # retired pages, a pending row remap, a failed row remap
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


class FilterModule:
    def filters(self) -> dict:
        return {
            "preflight_checks": preflight_checks,
        }
