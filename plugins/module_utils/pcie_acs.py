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

Turning redirection off (docs/field.md#pcie-acs-and-iommu): the BIOS switch, NCCL's setpci loop at boot, or the
mainline kernel argument `pci=disable_acs_redir=<bdf>;<bdf>...`; each is proven by reading these bits again, not
by the kernel command line. `disable_acs_redir_arg`, `grub_escape` and `acs_verdict` serve roles/host_tuning.

A locked-down kernel (Secure Boot turns lockdown on: docs/field.md#kernel-lockdown-and-setpci) refuses every write
from user space to PCI config space, so the setpci method cannot work there; `acs_lockdown_check` refuses it in the
preflight, before anything is installed, and names the methods that still work (kernel, bios).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, WARN, check

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

# The three mechanisms that exist (docs/field.md#pcie-acs-and-iommu), each named with the role variable that applies
# it, and the re-check that proves it: the ACS control bits read again, not the kernel command line.
ACS_METHODS: tuple[str, ...] = ("setpci", "kernel", "bios")
RECHECK = "re-check with `lspci -vvv` (as root): every ACSCtl line must read ReqRedir- CmpltRedir-"
FIX_ACS_OFF = (
    "turn ACS redirection off with one of: (1) the BIOS: disable PCIe ACS for the switch and root ports "
    "(host_tuning_acs_method=bios lists them; with the IOMMU on, Linux sets the bits again at boot, so also "
    "turn VT-d/AMD-Vi off or use 2 or 3); (2) at every boot, NCCL's loop `setpci -s <bdf> ECAP_ACS+0x6.w=0000` "
    "over every device with the ACS capability (host_tuning_disable_acs=true, host_tuning_acs_method=setpci: "
    "a oneshot unit before docker.service, no reboot); (3) the mainline kernel argument "
    "`pci=disable_acs_redir=<bridge>;<bridge>...` (host_tuning_acs_method=kernel, needs a reboot); then "
    + RECHECK
    + ". Set the IOMMU to passthrough as well (`iommu=pt`, Intel: `intel_iommu=on iommu=pt`; "
    "host_tuning_iommu_passthrough=true)"
)
FIX_ACS = (
    FIX_ACS_OFF + ". Fallback when none can be used: NCCL_P2P_DISABLE=1 in the serving container (all-reduce "
    "through host memory, slower)"
)
# What to look at when a mechanism was applied and the bits are still set.
FIX_STILL_ON = {
    "setpci": (
        "read `journalctl -u a800-acs-disable.service` (every device the loop wrote, and any write that failed); "
        "`systemctl restart a800-acs-disable.service` applies it again; firmware that locks the register, or a "
        "locked-down kernel (`cat /sys/kernel/security/lockdown`), needs the BIOS switch "
        "(host_tuning_acs_method=bios) or host_tuning_acs_method=kernel"
    ),
    "kernel": (
        "check that /proc/cmdline carries the pci=disable_acs_redir= list (the boot loader regenerated, the host "
        "rebooted) and `dmesg | grep -i acs` for devices the kernel could not change; otherwise use "
        "host_tuning_acs_method=setpci or the BIOS switch"
    ),
    "bios": (
        "disable PCIe ACS for these ports in the BIOS setup (the setting's name and menu differ by vendor) and "
        "reboot; with the IOMMU on (VT-d/AMD-Vi), Linux sets the bits again at boot: turn it off in the BIOS if "
        "nothing needs it, or use host_tuning_acs_method=setpci or kernel"
    ),
}
FIX_IOMMU = (
    "set the IOMMU to passthrough: boot with `iommu=pt` (Intel: `intel_iommu=on iommu=pt`, AMD: `iommu=pt`; "
    "host_tuning_iommu_passthrough=true) or choose passthrough in the BIOS; if NCCL still hangs, "
    "NCCL_P2P_DISABLE=1 (slower)"
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
                + (
                    "; the `noacs` option among this command line's pci= options is not a mainline kernel option "
                    "and changes nothing"
                    if cmdline["pci_noacs"]
                    else ""
                )
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


# --- turning redirection off (roles/host_tuning) -----------------------------------------------------------------

_BDF = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])$")


def _full_bdf(device: str) -> str:
    """'18:00.0' -> '0000:18:00.0' (lowercase); other device forms of the kernel's syntax stay as they are."""
    text = device.strip()
    match = _BDF.match(text)
    if not match:
        return text
    domain = (match.group("domain") or "0000").lower()
    return f"{domain}:{match.group('bus').lower()}:{match.group('dev').lower()}.{match.group('fn')}"


def disable_acs_redir_arg(bridges: Iterable[str] | None, active: str | None = None) -> str:
    """`pci=disable_acs_redir=<bdf>;<bdf>...` for the bridges with redirection on (pcie_acs_facts.redirect_bridges)
    and the devices of the running command line's own list (pcie_acs_facts.cmdline.disable_acs_redir), sorted and
    without repeats: once the argument works the bridges no longer redirect, and the argument stays the same on
    every later run. '' when there is no device."""
    devices = {_full_bdf(d) for d in bridges or [] if d and d.strip()}
    devices |= {_full_bdf(d) for d in (active or "").split(";") if d.strip()}
    return f"pci=disable_acs_redir={';'.join(sorted(devices))}" if devices else ""


def grub_escape(arg: str) -> str:
    """A kernel argument as it must stand in GRUB_CMDLINE_LINUX_DEFAULT="...": `;` separates commands in grub.cfg
    (GRUB's shell-like scripting, docs/field.md#pcie-acs-and-iommu), so it is written `\\;`, which the shell that
    reads /etc/default/grub keeps inside double quotes and GRUB passes on to the kernel as `;`."""
    return arg.replace(";", "\\;")


def _ports(report: dict[str, Any], slots: list[str], shown: int = 8) -> str:
    """'0000:18:00.0 (Downstream Port, PLX ...; ACSCtl: ... ReqRedir+ CmpltRedir+ ...), ...' for the first `shown`."""
    by_slot = {d["slot"]: d for d in report.get("acs_devices") or []}
    names = [
        f"{slot} ({_short(by_slot[slot])}; ACSCtl: {by_slot[slot]['acs_ctl']})" if slot in by_slot else slot
        for slot in slots[:shown]
    ]
    return ", ".join(names) + (f" and {len(slots) - shown} more" if len(slots) > shown else "")


def acs_verdict(report: dict[str, Any], method: str, applied: bool = True) -> dict[str, Any]:
    """The check record of the ACS control bits read again after host_tuning applied `method` (setpci, kernel or
    bios): pass when no bridge redirects; fail when a mechanism was applied and bridges still have
    ReqRedir+/CmpltRedir+ (or the bits could not be read); a warning for bios, which applies nothing."""
    if method not in ACS_METHODS:
        raise ValueError(f"host_tuning_acs_method is {method!r}: choose one of {', '.join(ACS_METHODS)}")
    what = {
        "setpci": "after a800-acs-disable.service (NCCL's setpci loop) ran",
        "kernel": "after booting with pci=disable_acs_redir=",
        "bios": "(host_tuning_acs_method=bios applies nothing: the BIOS setting counts)",
    }[method]
    if not applied:
        what = f"(check mode: host_tuning_acs_method={method} not applied yet)"
    bad = WARN if method == "bios" or not applied else FAIL
    if report.get("lspci") != "ok":
        return check(
            "acs_redirect_off",
            bad,
            "pcie_acs_facts.lspci",
            report.get("lspci"),
            "ok",
            f"the ACS control bits could not be read again {what}: {report.get('message') or 'lspci not run'}",
            f"{report.get('fix') or 'install pciutils and run as root'}; then {RECHECK}",
        )
    left = list(report.get("redirect_bridges") or [])
    count = len(report.get("acs_devices") or [])
    if not left:
        return check(
            "acs_redirect_off",
            PASS,
            "pcie_acs_facts.redirect_bridges",
            [],
            [],
            f"ACS redirection is off on every bridge ({count} device(s) with the ACS capability, read again with "
            f"lspci -vvv) {what}",
        )
    return check(
        "acs_redirect_off",
        bad,
        "pcie_acs_facts.redirect_bridges",
        left,
        [],
        f"ACS redirection (ReqRedir+/CmpltRedir+) is still on at {len(left)} bridge(s) {what}: {_ports(report, left)}",
        f"{FIX_STILL_ON[method]}; then {RECHECK}",
    )


# --- kernel lockdown (docs/field.md#kernel-lockdown-and-setpci) ---------------------------------------------------

LOCKDOWN_FILE = "/sys/kernel/security/lockdown"
# The modes that refuse setpci's writes: both include LOCKDOWN_PCI_ACCESS (security/lockdown, include/linux/security.h).
LOCKED_MODES: tuple[str, ...] = ("integrity", "confidentiality")
LOCKDOWN_MODES: tuple[str, ...] = ("none", *LOCKED_MODES)


def parse_lockdown(text: str | None) -> str | None:
    """The active mode of /sys/kernel/security/lockdown: `none [integrity] confidentiality` -> 'integrity' (the
    bracketed one). None without the file (text None: no lockdown LSM in this kernel); the text itself, stripped,
    when it names no bracketed mode (a check then shows it)."""
    if text is None:
        return None
    match = re.search(r"\[([a-z]+)\]", text)
    return match.group(1) if match else text.strip()


def acs_lockdown_check(
    lockdown_text: str | None, disable_acs: Any, method: str, source: str = LOCKDOWN_FILE
) -> dict[str, Any]:
    """The check record of the ACS method against the kernel's lockdown (read-only; for the preflight and for
    roles/host_tuning before it installs anything): fail for host_tuning_acs_method=setpci on a locked-down kernel,
    which refuses every write of setpci to PCI config space (pciutils only warns and exits 0, so the loop cannot
    tell); pass for the kernel and bios methods, which write nothing from user space."""
    mode = parse_lockdown(lockdown_text)
    shown = f"no {source} (no lockdown LSM, or securityfs not mounted)" if mode is None else f"lockdown {mode}"
    enabled = str(disable_acs).strip().lower() in ("1", "true", "yes", "on", "y", "t")
    name, fact = "acs_lockdown", source
    expected = "host_tuning_acs_method kernel or bios under lockdown"
    if not enabled:
        return check(
            name, PASS, fact, mode, expected, f"{shown}: host_tuning_disable_acs is false, no ACS register is written"
        )
    if method not in ACS_METHODS:
        return check(
            name,
            FAIL,
            "host_tuning_acs_method",
            method,
            " | ".join(ACS_METHODS),
            f"host_tuning_acs_method is {method!r}: not a method the role knows",
            f"set host_tuning_acs_method to one of {', '.join(ACS_METHODS)}",
        )
    if method != "setpci":
        how = {
            "kernel": "the kernel clears the bits itself at boot (pci=disable_acs_redir=); lockdown restricts only "
            "user space's direct PCI access",
            "bios": "nothing is written from the host",
        }[method]
        return check(name, PASS, fact, mode, expected, f"{shown}: host_tuning_acs_method={method}, {how}")
    if mode in LOCKED_MODES:
        return check(
            name,
            FAIL,
            fact,
            mode,
            expected,
            f"the kernel is locked down ({mode}; Secure Boot turns lockdown on): it refuses every write of setpci to "
            "PCI config space (kernel_lockdown(7): direct PCI access), so host_tuning_acs_method=setpci cannot turn "
            "ACS redirection off, and setpci does not even exit non-zero; nothing was changed",
            "set host_tuning_acs_method: kernel (pci=disable_acs_redir=<bridges> in GRUB, applied by the kernel at "
            "boot: a reboot, host_tuning_reboot_allowed: true) or host_tuning_acs_method: bios (switch PCIe ACS off "
            "in the BIOS setup; the report lists the ports); or boot without Secure Boot, which lifts the automatic "
            "lockdown; or host_tuning_disable_acs: false to report only",
        )
    if mode not in (None, "none"):
        return check(
            name,
            WARN,
            fact,
            mode,
            expected,
            f"the lockdown state {mode!r} names no mode in brackets: setpci's writes may be refused",
            f"read it on the host: cat {source} (the bracketed mode is active); under integrity or confidentiality "
            "use host_tuning_acs_method: kernel or bios",
        )
    return check(name, PASS, fact, mode, expected, f"{shown}: setpci may write the ACS control registers")
