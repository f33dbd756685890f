"""PCIe ACS / IOMMU report: lspci -vvv, /proc/cmdline and /sys/class/iommu parsing and the risk level."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ansible_collections.a800.vllm.plugins.module_utils import pcie_acs
from ansible_collections.a800.vllm.plugins.module_utils.pcie_acs import (
    bridges_above,
    format_flags,
    iommu_mode,
    parse_cmdline,
    parse_flags,
    parse_lspci,
    redirect_enabled,
    summarize,
)
from conftest import FIXTURES, ansible_adhoc

LSPCI = FIXTURES / "lspci"
SYNTHETIC = LSPCI / "synthetic"  # hand-made, see ../README.md
REAL_H200 = LSPCI / "h200-x2"  # captured on a real 2x H200 machine (a Firecracker guest) with capture.sh

ACS_ON = "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
ACS_OFF = "SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def host(name: str, base: Path = SYNTHETIC) -> dict:
    """summarize() of a fixture directory, read the way the module reads a host."""
    d = base / name
    iommu = [line for line in read(d / "iommu.txt").splitlines() if line and not line.startswith("#")]
    groups = [
        line.split()[1]
        for line in read(d / "iommu-groups.txt").splitlines()
        if line and not line.startswith("#") and len(line.split()) > 1
    ]
    return summarize(read(d / "lspci-vvv.txt"), read(d / "cmdline.txt"), len(iommu), groups)


# --- flags and devices ---------------------------------------------------------------------------------


def test_flags_round_trip():
    flags = parse_flags(ACS_ON)
    assert flags["ReqRedir"] and flags["CmpltRedir"] and flags["SrcValid"]
    assert not flags["TransBlk"] and not flags["DirectTrans"]
    assert format_flags(flags) == ACS_ON
    assert list(flags) == ["SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans"]


@pytest.mark.parametrize(
    ("ctl", "redirect"),
    [
        (ACS_ON, True),
        (ACS_OFF, False),
        ("SrcValid+ TransBlk- ReqRedir+ CmpltRedir- UpstreamFwd+ EgressCtrl- DirectTrans-", True),
        ("SrcValid+ TransBlk- ReqRedir- CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-", True),
        ("SrcValid+ TransBlk+ ReqRedir- CmpltRedir- UpstreamFwd+ EgressCtrl- DirectTrans-", False),
    ],
)
def test_redirect_is_reqredir_or_cmpltredir(ctl, redirect):
    assert redirect_enabled({"acs_ctl": parse_flags(ctl)}) is redirect


def test_no_acs_capability_is_no_redirect():
    assert redirect_enabled({"acs_ctl": None}) is False


def test_parse_dual_socket_plx_box():
    devices = parse_lspci(read(SYNTHETIC / "a800-x8-plx-acs-on" / "lspci-vvv.txt"))
    assert len(devices) == 29
    by_slot = {d["slot"]: d for d in devices}
    gpus = [d for d in devices if d["gpu"]]
    assert [g["slot"] for g in gpus] == [
        "0000:19:00.0",
        "0000:1a:00.0",
        "0000:3b:00.0",
        "0000:3c:00.0",
        "0000:9b:00.0",
        "0000:9c:00.0",
        "0000:b4:00.0",
        "0000:b5:00.0",
    ]
    assert all(g["driver"] == "nvidia" and "A800" in g["description"] for g in gpus)
    assert all(g["class"] == "3D controller" and g["acs_ctl"] is None for g in gpus)
    assert sum(d["bridge"] for d in devices) == 18  # the host bridge is not a PCI-to-PCI bridge
    assert not by_slot["0000:00:00.0"]["bridge"]

    root = by_slot["0000:16:02.0"]
    assert root["port_type"] == "Root Port"
    assert (root["secondary"], root["subordinate"]) == (0x17, 0x1B)
    assert root["acs_ctl"]["ReqRedir"] and root["acs_cap"]["ReqRedir"]
    assert root["driver"] == "pcieport"

    upstream = by_slot["0000:17:00.0"]
    assert upstream["port_type"] == "Upstream Port"
    assert upstream["acs_ctl"] is None  # the switch's upstream port has no ACS capability here
    assert "PEX 88096" in upstream["description"]

    down = by_slot["0000:18:00.0"]
    assert down["port_type"] == "Downstream Port"
    assert format_flags(down["acs_ctl"]) == ACS_ON
    assert down["acs_cap"]["EgressCtrl"] and not down["acs_ctl"]["EgressCtrl"]

    nic = by_slot["0000:1b:00.0"]
    assert nic["class"] == "Infiniband controller" and not nic["gpu"] and not nic["bridge"]


def test_bridges_above_a_gpu_follow_the_bus_ranges():
    devices = parse_lspci(read(SYNTHETIC / "a800-x8-plx-acs-on" / "lspci-vvv.txt"))
    by_slot = {d["slot"]: d for d in devices}
    assert [b["slot"] for b in bridges_above(by_slot["0000:19:00.0"], devices)] == [
        "0000:16:02.0",
        "0000:17:00.0",
        "0000:18:00.0",
    ]
    assert [b["slot"] for b in bridges_above(by_slot["0000:b5:00.0"], devices)] == [
        "0000:b1:02.0",
        "0000:b2:00.0",
        "0000:b3:01.0",
    ]
    # the NVMe disk sits behind its own root port only
    assert [b["slot"] for b in bridges_above(by_slot["0000:4b:00.0"], devices)] == ["0000:4a:02.0"]


def test_slots_without_domain_and_with_class_ids():
    text = (
        "17:00.0 PCI bridge [0604]: PLX Technology, Inc. PEX 8747 48-Lane [10b5:8747] (rev ca) "
        "(prog-if 00 [Normal decode])\n"
        "\tBus: primary=17, secondary=18, subordinate=18, sec-latency=0\n"
        "\tCapabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00\n"
        "\tCapabilities: [f24 v1] Access Control Services\n"
        f"\t\tACSCap:\t{ACS_ON}\n\t\tACSCtl:\t{ACS_ON}\n\n"
        "18:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A800 PCIe 80GB] [10de:20f5] (rev a1)\n"
        "\tKernel driver in use: nvidia\n"
    )
    devices = parse_lspci(text)
    assert [d["class"] for d in devices] == ["PCI bridge", "3D controller"]
    assert devices[0]["slot"] == "17:00.0" and devices[0]["port_type"] == "Downstream Port"
    assert [b["slot"] for b in bridges_above(devices[1], devices)] == ["17:00.0"]
    assert summarize(text, "", 0)["gpu_path_redirect"] == ["17:00.0"]


def test_other_pci_domain_is_not_above():
    text = (
        "0001:00:01.0 PCI bridge: Some Root Port\n"
        "\tBus: primary=00, secondary=01, subordinate=ff, sec-latency=0\n"
        f"\t\tACSCtl:\t{ACS_ON}\n\n"
        "0000:05:00.0 3D controller: NVIDIA Corporation Device 20f5\n"
    )
    devices = parse_lspci(text)
    assert bridges_above(devices[1], devices) == []
    report = summarize(text, "", 0)
    assert report["redirect_bridges"] == ["0001:00:01.0"] and report["gpu_path_redirect"] == []
    assert report["risk"] == "low"


def test_rc_trailer_and_blank_input():
    assert parse_lspci("") == []
    assert parse_lspci("# rc=0\n") == []


# --- kernel command line and IOMMU mode ----------------------------------------------------------------


def test_cmdline_iommu_and_acs_arguments():
    args = parse_cmdline(
        "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro intel_iommu=on iommu=pt pci=realloc,noacs "
        "pcie_acs_override=downstream\n# rc=0\n"
    )
    assert args["intel_iommu"] == "on" and args["iommu"] == "pt"
    # `noacs` is no mainline option (docs/field.md#pcie-acs-and-iommu); the parser still notices it
    assert args["pci"] == ["realloc", "noacs"] and args["pci_noacs"] is True
    assert args["pcie_acs_override"] == "downstream"
    assert args["amd_iommu"] is None and args["disable_acs_redir"] is None


def test_cmdline_disable_acs_redir_and_init_arguments():
    args = parse_cmdline("ro amd_iommu=on pci=disable_acs_redir=0000:18:00.0;0000:18:01.0 -- iommu=pt pci=x,noacs")
    assert args["amd_iommu"] == "on"
    assert args["disable_acs_redir"] == "0000:18:00.0;0000:18:01.0"
    # what follows `--` goes to init, not to the kernel
    assert args["iommu"] is None and args["pci_noacs"] is False


@pytest.mark.parametrize(
    ("cmdline", "count", "groups", "mode"),
    [
        ("intel_iommu=on", 8, [], "translated"),
        ("intel_iommu=on iommu=pt", 8, [], "passthrough"),
        ("iommu.passthrough=1", 2, [], "passthrough"),
        ("intel_iommu=on iommu=pt", 0, [], "off"),  # nothing registered in /sys/class/iommu
        ("", 4, [], "translated"),  # kernel default: DMA remapping
        ("", 4, ["identity", "identity"], "passthrough"),  # built with passthrough by default
        ("iommu=pt", 4, ["identity", "DMA-FQ"], "translated"),  # the groups are the truth
        ("intel_iommu=off", None, [], "off"),
        ("", None, [], "unknown"),
    ],
)
def test_iommu_mode(cmdline, count, groups, mode):
    assert iommu_mode(parse_cmdline(cmdline), count, groups) == mode


# --- the report on whole hosts -------------------------------------------------------------------------


def test_plx_box_with_acs_redirect_is_high_risk():
    report = host("a800-x8-plx-acs-on")
    assert report["risk"] == "high"
    assert report["lspci"] == "ok"
    assert len(report["gpus"]) == 8
    # 4 root ports and 8 switch downstream ports above the GPUs; the NVMe root port and the NIC's port are not
    assert len(report["gpu_path_redirect"]) == 12
    assert "0000:4a:02.0" in report["redirect_bridges"] and "0000:4a:02.0" not in report["gpu_path_redirect"]
    assert "0000:18:02.0" in report["redirect_bridges"] and "0000:18:02.0" not in report["gpu_path_redirect"]
    assert report["iommu"] == {"active": True, "count": 8, "mode": "translated"}
    assert report["cmdline"]["intel_iommu"] == "on"
    down = next(d for d in report["acs_devices"] if d["slot"] == "0000:18:00.0")
    assert down == {
        "slot": "0000:18:00.0",
        "description": "PLX Technology, Inc. PEX 88096 98-Lane, 6-Port PCI Express Gen 4 Switch (rev b0) "
        "(prog-if 00 [Normal decode])",
        "port_type": "Downstream Port",
        "acs_ctl": ACS_ON,
        "redirect": True,
        "above_gpus": ["0000:19:00.0"],
    }
    msg = report["message"]
    assert "12 PCIe bridge(s) above the GPUs" in msg and "0000:18:00.0 (Downstream Port, PLX Technology" in msg
    assert "(rev b0)" not in msg and "and 8 more" in msg
    assert "NCCL P2P" in msg
    for fix in (
        "BIOS",
        "`setpci -s <bdf> ECAP_ACS+0x6.w=0000`",
        "`pci=disable_acs_redir=<bridge>;<bridge>...`",
        "`lspci -vvv`",
        "ReqRedir- CmpltRedir-",
        "intel_iommu=on iommu=pt",
        "NCCL_P2P_DISABLE=1",
        "host_tuning_acs_method",
    ):
        assert fix in report["fix"]
    assert "noacs" not in report["fix"] and "pcie_acs_override" not in report["fix"]  # neither is mainline
    assert "noacs" not in msg  # this command line has no such option
    assert report["summary"].startswith("PCIe ACS/IOMMU risk high: ACS redirection")
    assert ". Fix: turn ACS redirection off with one of: (1) the BIOS" in report["summary"]
    json.dumps(report)  # facts must be plain JSON


def test_noacs_on_the_command_line_is_named_as_doing_nothing():
    """A host booted with the old advice (`noacs` among the pci= options) still redirects: the report says why."""
    text = read(SYNTHETIC / "a800-x8-plx-acs-on" / "lspci-vvv.txt")
    report = summarize(text, "ro intel_iommu=on iommu=pt pci=realloc,noacs", 8, ["identity"])
    assert report["risk"] == "high" and report["cmdline"]["pci_noacs"] is True
    assert (
        "the `noacs` option among this command line's pci= options is not a mainline kernel option" in report["message"]
    )
    assert "noacs" not in summarize(text, "ro intel_iommu=on", 8)["message"]


def test_same_box_with_acs_disabled_is_no_risk():
    report = host("a800-x8-plx-acs-off")
    assert report["risk"] == "none"
    assert report["redirect_bridges"] == [] and report["gpu_path_redirect"] == []
    assert len(report["acs_devices"]) == 14 and not any(d["redirect"] for d in report["acs_devices"])
    assert report["iommu"]["mode"] == "passthrough"
    assert report["cmdline"]["pci_noacs"] is False and report["cmdline"]["iommu"] == "pt"
    assert "14 device(s) with ACS, none redirecting" in report["message"]
    assert report["fix"] == ""
    assert report["summary"] == "PCIe ACS/IOMMU risk none: " + report["message"]


def test_box_without_acs_capability_is_no_risk():
    report = host("a800-x8-no-acs-cap")
    assert report["risk"] == "none"
    assert report["acs_devices"] == []
    assert len(report["gpus"]) == 8 and report["gpus"][0] == "19:00.0"  # lspci without -D
    assert report["iommu"] == {"active": False, "count": 0, "mode": "off"}
    assert "no device reports the ACS capability" in report["message"]


def test_lspci_as_non_root_is_unknown():
    text = read(SYNTHETIC / "a800-x8-plx-nonroot" / "lspci-vvv.txt")
    report = summarize(text, "intel_iommu=on", 8)
    assert report["risk"] == "unknown"
    assert report["lspci"] == "access denied"
    assert "root" in report["message"] and "become" in report["fix"]
    assert len(report["gpus"]) == 8  # the devices are still listed


def test_lspci_missing_is_unknown_not_an_error():
    report = summarize(None, "ro quiet", 0, lspci_error="lspci not installed")
    assert report["risk"] == "unknown"
    assert report["lspci"] == "lspci not installed"
    assert report["message"] == "ACS state unknown: lspci not installed"
    assert "pciutils" in report["fix"]
    assert report["summary"].startswith("PCIe ACS/IOMMU risk unknown: ACS state unknown: lspci not installed. Fix:")
    assert report["iommu"]["mode"] == "off"


def test_no_redirect_but_translating_iommu_is_low():
    text = read(SYNTHETIC / "a800-x8-plx-acs-off" / "lspci-vvv.txt")
    report = summarize(text, "intel_iommu=on", 8, ["DMA-FQ"])
    assert report["risk"] == "low"
    assert "translates DMA" in report["message"] and "iommu=pt" in report["fix"]


def test_redirect_only_off_the_gpu_path_is_low():
    text = read(SYNTHETIC / "a800-x8-plx-acs-off" / "lspci-vvv.txt")
    head, nvme_port = text.split("0000:4a:02.0 PCI bridge", 1)
    nvme_port = nvme_port.replace(f"ACSCtl:\t{ACS_OFF}", f"ACSCtl:\t{ACS_ON}", 1)
    report = summarize(head + "0000:4a:02.0 PCI bridge" + nvme_port, "iommu=pt", 8, ["identity"])
    assert report["redirect_bridges"] == ["0000:4a:02.0"]
    assert report["gpu_path_redirect"] == []
    assert report["risk"] == "low"
    assert "not above a GPU" in report["message"]


def test_redirect_with_passthrough_iommu_is_still_high():
    text = read(SYNTHETIC / "a800-x8-plx-acs-on" / "lspci-vvv.txt")
    report = summarize(text, "intel_iommu=on iommu=pt", 8, ["identity"])
    assert report["risk"] == "high"
    assert report["iommu"]["mode"] == "passthrough"


def test_without_gpus_in_the_listing_every_redirect_counts():
    text = read(SYNTHETIC / "a800-x8-plx-acs-on" / "lspci-vvv.txt").replace("NVIDIA Corporation", "Vendor 10de")
    report = summarize(text, "", 8)
    assert report["gpus"] == []
    assert report["risk"] == "high"
    assert len(report["gpu_path_redirect"]) == 14
    assert "no NVIDIA GPU in the listing" in report["message"]


# --- the real capture on 2x H200 -------------------------------------------------------------------------


def test_real_h200_capture_has_no_lspci():
    """The H200 machine (a Firecracker guest) has no pciutils: capture.sh recorded the shell's error."""
    text = read(REAL_H200 / "lspci-vvv.txt")
    assert "lspci: command not found" in text and "# rc=127" in text
    assert parse_lspci(text) == []


def test_real_h200_sysfs_decode():
    """capture.sh's sysfs fallback (lspci's layout): two H200s straight on the root bus, no bridge, no ACS."""
    text = read(REAL_H200 / "sysfs-acs.txt")
    devices = parse_lspci(text)
    assert len(devices) == 8
    gpus = [d for d in devices if d["gpu"]]
    assert [g["slot"] for g in gpus] == ["0000:00:06.0", "0000:00:07.0"]
    assert all(g["description"].startswith("Device [10de:2335]") and g["driver"] == "nvidia" for g in gpus)
    assert not any(d["bridge"] for d in devices)
    assert all(d["acs_ctl"] is None for d in devices)


def test_real_h200_report():
    iommu = [line for line in read(REAL_H200 / "iommu.txt").splitlines() if line and not line.startswith("#")]
    groups = [line for line in read(REAL_H200 / "iommu-groups.txt").splitlines() if not line.startswith("#")]
    assert iommu == [] and groups == []
    report = summarize(read(REAL_H200 / "sysfs-acs.txt"), read(REAL_H200 / "cmdline.txt"), len(iommu), groups)
    assert report["risk"] == "none"
    assert report["iommu"] == {"active": False, "count": 0, "mode": "off"}
    assert report["cmdline"]["pci"] == ["realloc=off"]
    assert report["cmdline"]["iommu"] is None and report["cmdline"]["pci_noacs"] is False
    # the same host read the way the module reads it when lspci is missing
    missing = summarize(None, read(REAL_H200 / "cmdline.txt"), 0, [], lspci_error="lspci not installed")
    assert missing["risk"] == "unknown" and "lspci not installed" in missing["message"]


# --- the module, run by Ansible with a stand-in lspci ----------------------------------------------------


def test_module_returns_facts_in_check_mode(tmp_path):
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip(f"ansible not installed beside {sys.executable}")
    fake = tmp_path / "lspci"  # test double: prints the synthetic listing whatever it is asked
    fake.write_text(f"#!/bin/sh\ncat '{SYNTHETIC / 'a800-x8-plx-acs-on' / 'lspci-vvv.txt'}'\n")
    fake.chmod(0o755)
    rc, out, raw = ansible_adhoc("localhost", "-c", "local", "-i", "localhost,", "--check",
                                 "-m", "a800.vllm.pcie_acs_facts", "-a", f"lspci={fake}")  # fmt: skip
    assert rc == 0 and out, raw
    task = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    facts = task["ansible_facts"]["pcie_acs_facts"]
    assert task["changed"] is False
    assert facts["risk"] == "high" and facts["lspci"] == "ok" and facts["lspci_path"] == str(fake)
    assert facts["summary"].startswith("PCIe ACS/IOMMU risk high")  # what roles/host_tuning shows
    assert len(facts["gpu_path_redirect"]) == 12
    assert facts["risk"] in pcie_acs.RISK_LEVELS
    assert facts["iommu"]["mode"] in ("off", "passthrough", "translated", "unknown")  # this machine's own
