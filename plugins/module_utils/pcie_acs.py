"""PCIe ACS / IOMMU state of a host from `lspci -vvv`, /proc/cmdline and /sys/class/iommu, as plain data.

Pure Python (no Ansible import): the pcie_acs_facts module uses it on the hosts, the unit tests on the
control node.

Why it matters: a PCIe bridge (CPU root port or PCIe switch port, e.g. PLX/Broadcom PEX) with ACS
*P2P Request Redirect* (`ReqRedir+`) or *Completion Redirect* (`CmpltRedir+`) enabled sends every
peer-to-peer transaction of the devices below it up to the root complex instead of across the switch.
GPU-to-GPU copies (NCCL P2P, hence vLLM tensor-parallel all-reduce) then run slowly, or hang when the
IOMMU translates DMA addresses (vllm#9920, nccl#2079). Linux turns the redirect bits on itself when an
IOMMU is enabled, so the kernel command line matters as much as the BIOS.

`lspci -vvv` shows the capability only to root (others see `Capabilities: <access denied>`):

    0000:18:00.0 PCI bridge: PLX Technology, Inc. PEX 88096 ... (prog-if 00 [Normal decode])
            Bus: primary=17, secondary=19, subordinate=19, sec-latency=0
            Capabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00
            Capabilities: [f24 v1] Access Control Services
                    ACSCap: SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+
                    ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
"""

from __future__ import annotations

import re
from typing import Any

# The ACS control bits that keep peer-to-peer traffic from going straight across a bridge. The kernel's
# pci=disable_acs_redir= clears exactly these three; ReqRedir and CmpltRedir are the ones seen in practice.
REDIRECT_FLAGS: tuple[str, ...] = ("ReqRedir", "CmpltRedir", "EgressCtrl")
RISK_LEVELS: tuple[str, ...] = ("none", "low", "high", "unknown")

_HEADER = re.compile(r"^(?P<slot>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<rest>\S.*)$")
_CLASS_ID = re.compile(r"\s*\[[0-9a-fA-F]{4}\]\s*$")
_FLAG = re.compile(r"([A-Za-z][A-Za-z0-9_]*)([+-])")
_BUS = re.compile(r"Bus:\s*primary=([0-9a-fA-F]+),\s*secondary=([0-9a-fA-F]+),\s*subordinate=([0-9a-fA-F]+)")
_EXPRESS = re.compile(r"Capabilities:\s*\[[^\]]*\]\s*Express\s*(?:\(v\d+\)\s*)?(?P<type>[^,(]+?)\s*(?:\(|,|$)")
_GPU_CLASSES = ("3D controller", "VGA compatible controller", "Display controller")
_NVIDIA = re.compile(r"NVIDIA|\[10de:", re.IGNORECASE)
_PASSTHROUGH_VALUES = {"pt", "passthrough", "1", "on", "y", "yes"}
_OFF_VALUES = {"off", "0", "n", "no", "disabled"}

FIX_ACS = (
    "disable ACS for the PCIe switches / root ports in the BIOS (and set the IOMMU to passthrough, or turn "
    "VT-d/AMD-Vi off if nothing needs it), or boot with `pci=noacs iommu=pt` (Intel: `intel_iommu=on iommu=pt`; "
    "kernels without pci=noacs: `pci=disable_acs_redir=<bridge>;<bridge>...`); until the next boot "
    "`setpci -s <bridge> ECAP_ACS+0x6.w=0000` clears it. Fallback when the BIOS or kernel cannot be changed: "
    "NCCL_P2P_DISABLE=1 in the serving container (all-reduce through host memory, slower)"
)
FIX_IOMMU = (
    "set the IOMMU to passthrough: boot with `iommu=pt` (Intel: `intel_iommu=on iommu=pt`, AMD: `iommu=pt`) or "
    "choose passthrough in the BIOS; if NCCL still hangs, NCCL_P2P_DISABLE=1 (slower)"
)


def _lines(text: str) -> list[str]:
    """Lines without the `# rc=N` trailer of the capture script."""
    return [line.rstrip("\r\n") for line in text.splitlines() if not line.startswith("# rc=")]


def parse_flags(text: str) -> dict[str, bool]:
    """'SrcValid+ TransBlk- ReqRedir+' -> {'SrcValid': True, 'TransBlk': False, 'ReqRedir': True}."""
    return {name: sign == "+" for name, sign in _FLAG.findall(text)}


def format_flags(flags: dict[str, bool]) -> str:
    return " ".join(f"{name}{'+' if on else '-'}" for name, on in flags.items())


def _split_header(rest: str) -> tuple[str, str]:
    """'PCI bridge [0604]: PLX ... (rev ab)' -> ('PCI bridge', 'PLX ... (rev ab)')."""
    cls, sep, desc = rest.partition(": ")
    if not sep:
        return "", rest.strip()
    return _CLASS_ID.sub("", cls).strip(), desc.strip()


def _domain_bus(slot: str) -> tuple[str, int]:
    parts = slot.split(":")
    domain = parts[0].lower().zfill(4) if len(parts) == 3 else "0000"
    return domain, int(parts[-2], 16)


def parse_lspci(text: str) -> list[dict[str, Any]]:
    """The devices of `lspci -vvv` (also `lspci -D -vvv`, `-nn`), one dict each.

    Keys: slot, class, description, bridge, gpu, port_type, driver, secondary/subordinate (bridges),
    acs_cap / acs_ctl (flag dicts, None without the capability), access_denied.
    """
    devices: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in _lines(text):
        header = _HEADER.match(line)
        if header and not line[:1].isspace():
            cls, desc = _split_header(header.group("rest"))
            current = {
                "slot": header.group("slot").lower(),
                "class": cls,
                "description": desc,
                "bridge": "bridge" in cls.lower() and "host bridge" not in cls.lower(),
                "gpu": cls in _GPU_CLASSES and bool(_NVIDIA.search(desc)),
                "port_type": None,
                "driver": None,
                "secondary": None,
                "subordinate": None,
                "acs_cap": None,
                "acs_ctl": None,
                "access_denied": False,
            }
            devices.append(current)
            continue
        if current is None or not line.strip():
            continue
        body = line.strip()
        if body.startswith("ACSCap:"):
            current["acs_cap"] = parse_flags(body[len("ACSCap:") :])
        elif body.startswith("ACSCtl:"):
            current["acs_ctl"] = parse_flags(body[len("ACSCtl:") :])
        elif body.startswith("Capabilities:") and "<access denied>" in body:
            current["access_denied"] = True
        elif body.startswith("Kernel driver in use:"):
            current["driver"] = body.split(":", 1)[1].strip()
        elif body.startswith("Bus:"):
            bus = _BUS.search(body)
            if bus:
                current["secondary"], current["subordinate"] = int(bus.group(2), 16), int(bus.group(3), 16)
        elif body.startswith("Capabilities:") and current["port_type"] is None:
            express = _EXPRESS.search(body)
            if express:
                current["port_type"] = express.group("type").strip()
    return devices


def redirect_enabled(device: dict[str, Any]) -> bool:
    """ACS redirection is on at this device (ReqRedir+, CmpltRedir+ or EgressCtrl+ in ACSCtl)."""
    ctl = device.get("acs_ctl") or {}
    return any(ctl.get(flag) for flag in REDIRECT_FLAGS)


def bridges_above(device: dict[str, Any], devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bridges whose secondary..subordinate bus range holds this device's bus (same PCI domain)."""
    domain, bus = _domain_bus(device["slot"])
    above = []
    for bridge in devices:
        if not bridge["bridge"] or bridge["secondary"] is None or bridge["subordinate"] is None:
            continue
        if _domain_bus(bridge["slot"])[0] == domain and bridge["secondary"] <= bus <= bridge["subordinate"]:
            above.append(bridge)
    return above


def _option(value: str) -> str:
    return value.strip().lower()


def parse_cmdline(text: str) -> dict[str, Any]:
    """The IOMMU/ACS-related arguments of /proc/cmdline (init arguments after `--` are ignored)."""
    tokens = " ".join(_lines(text)).split()
    if "--" in tokens:
        tokens = tokens[: tokens.index("--")]
    args: dict[str, str] = {}
    pci_options: list[str] = []
    for token in tokens:
        key, _, value = token.partition("=")
        if key == "pci":
            pci_options += [opt for opt in value.split(",") if opt]
        elif key in ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough", "pcie_acs_override"):
            args[key] = value
    disable_redir = next((opt.split("=", 1)[1] for opt in pci_options if opt.startswith("disable_acs_redir=")), None)
    return {
        "iommu": args.get("iommu"),
        "intel_iommu": args.get("intel_iommu"),
        "amd_iommu": args.get("amd_iommu"),
        "iommu_passthrough": args.get("iommu.passthrough"),
        "pci": pci_options,
        "pci_noacs": "noacs" in pci_options,
        "disable_acs_redir": disable_redir,
        "pcie_acs_override": args.get("pcie_acs_override"),
    }


def iommu_mode(cmdline: dict[str, Any], iommu_count: int | None, group_types: list[str] | None = None) -> str:
    """'off' (no IOMMU active), 'passthrough' (identity mapping) or 'translated' (DMA remapping).

    The IOMMU groups' `type` files (identity / DMA / DMA-FQ) are the truth when known; else sysfs says
    whether an IOMMU is active at all, and the command line says whether it passes DMA through.
    """
    types = {t.strip().lower() for t in group_types or [] if t.strip()}
    if types:
        return "passthrough" if types <= {"identity"} else "translated"
    if iommu_count == 0:
        return "off"
    iommu = _option(cmdline.get("iommu") or "")
    vendor_opts = {
        opt for key in ("intel_iommu", "amd_iommu") for opt in _option(cmdline.get(key) or "").split(",") if opt
    }
    passthrough = iommu == "pt" or _option(cmdline.get("iommu_passthrough") or "") in _PASSTHROUGH_VALUES
    if passthrough:
        return "passthrough"
    if iommu in _OFF_VALUES or "off" in vendor_opts:
        return "off" if iommu_count is None else "translated"
    if iommu_count is None and not vendor_opts and not iommu:
        return "unknown"
    return "translated"


def summarize(
    lspci_text: str | None,
    cmdline_text: str = "",
    iommu_count: int | None = None,
    group_types: list[str] | None = None,
    lspci_error: str | None = None,
) -> dict[str, Any]:
    """The ACS / IOMMU report of a host: risk level (none/low/high/unknown), message, fix and summary.

    lspci_text None (with lspci_error saying why, e.g. 'lspci not installed') gives risk 'unknown'.
    """
    cmdline = parse_cmdline(cmdline_text)
    mode = iommu_mode(cmdline, iommu_count, group_types)
    iommu = {"active": None if iommu_count is None else iommu_count > 0, "count": iommu_count, "mode": mode}
    devices = parse_lspci(lspci_text) if lspci_text is not None else []
    gpus = [d for d in devices if d["gpu"]]
    acs = [d for d in devices if d["acs_ctl"] is not None]
    redirect = [d for d in acs if redirect_enabled(d)]
    denied = any(d["access_denied"] for d in devices) and not acs

    above_gpu: dict[str, list[str]] = {}
    for gpu in gpus:
        for bridge in bridges_above(gpu, devices):
            above_gpu.setdefault(bridge["slot"], []).append(gpu["slot"])
    # Without GPUs in the listing (driver-less names, filtered output) every redirecting bridge counts.
    on_gpu_path = [d for d in redirect if d["slot"] in above_gpu] if gpus else redirect
    elsewhere = [d for d in redirect if d not in on_gpu_path]

    report: dict[str, Any] = {
        "lspci": "ok",
        "devices": len(devices),
        "bridges": sum(d["bridge"] for d in devices),
        "gpus": [g["slot"] for g in gpus],
        "acs_devices": [
            {
                "slot": d["slot"],
                "description": d["description"],
                "port_type": d["port_type"],
                "acs_ctl": format_flags(d["acs_ctl"]),
                "redirect": redirect_enabled(d),
                "above_gpus": above_gpu.get(d["slot"], []),
            }
            for d in acs
        ],
        "redirect_bridges": [d["slot"] for d in redirect],
        "gpu_path_redirect": [d["slot"] for d in on_gpu_path],
        "iommu": iommu,
        "cmdline": cmdline,
        "risk": "none",
        "message": "",
        "fix": "",
    }
    scope = "above the GPUs" if gpus else "(no NVIDIA GPU in the listing: all bridges counted)"
    if lspci_text is None or lspci_error:
        report.update(
            lspci=lspci_error or "not run",
            risk="unknown",
            message=f"ACS state unknown: {lspci_error or 'lspci was not run'}",
            fix="install pciutils (lspci) and run the report as root",
        )
    elif denied:
        report.update(
            lspci="access denied",
            risk="unknown",
            message="ACS state unknown: lspci shows the PCIe capabilities only to root (Capabilities: <access denied>)",
            fix="run the report with become: true",
        )
    elif on_gpu_path:
        # Switch ports first: their redirect bits are what turn GPU-to-GPU traffic around.
        ordered = sorted(on_gpu_path, key=lambda d: d["port_type"] == "Root Port")
        names = ", ".join(f"{d['slot']} ({_short(d)})" for d in ordered[:4])
        more = f" and {len(ordered) - 4} more" if len(ordered) > 4 else ""
        report.update(
            risk="high",
            message=(
                f"ACS redirection (ReqRedir+/CmpltRedir+) is on at {len(on_gpu_path)} PCIe bridge(s) {scope}: "
                f"{names}{more}. GPU peer-to-peer traffic goes up to the root complex instead of across the "
                f"switch: NCCL P2P (tensor-parallel all-reduce) is slow or hangs; IOMMU {mode}"
            ),
            fix=FIX_ACS,
        )
    elif mode == "translated":
        report.update(
            risk="low",
            message=(
                "no ACS redirection above the GPUs, but the IOMMU translates DMA (no passthrough): GPU "
                "peer-to-peer can be slower or fail"
                + (f"; ACS redirection is on at {len(elsewhere)} other bridge(s)" if elsewhere else "")
            ),
            fix=FIX_IOMMU,
        )
    elif elsewhere:
        report.update(
            risk="low",
            message=(
                f"ACS redirection is on at {len(elsewhere)} bridge(s) that are not above a GPU "
                f"({', '.join(d['slot'] for d in elsewhere[:6])}): no effect on GPU peer-to-peer; IOMMU {mode}"
            ),
            fix="nothing for GPU-to-GPU traffic; for GPUDirect RDMA the NIC's path matters: " + FIX_ACS,
        )
    else:
        detail = f"{len(acs)} device(s) with ACS, none redirecting" if acs else "no device reports the ACS capability"
        report.update(
            risk="none",
            message=f"PCIe ACS does not redirect GPU peer-to-peer traffic ({detail}); IOMMU {mode}",
        )
    # One line for people: the risk, what was found, and the fix.
    report["summary"] = f"PCIe ACS/IOMMU risk {report['risk']}: {report['message']}" + (
        f". Fix: {report['fix']}" if report["fix"] else ""
    )
    return report


def _short(device: dict[str, Any]) -> str:
    text = re.sub(r"\s*\((?:rev|prog-if) [^()]*\)", "", device["description"]).strip()
    return f"{device['port_type']}, {text}" if device.get("port_type") else text
