"""Turning PCIe ACS redirection off (roles/host_tuning, host_tuning_acs_method): the kernel argument for a list of
bridges and its GRUB drop-in, NCCL's setpci loop run against stand-in lspci/setpci, its boot unit, and the verdict on
the ACS bits read again (plugins/module_utils/pcie_acs.py)."""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter import pcie_acs as acs_filters
from ansible_collections.a800.vllm.plugins.module_utils.checks import check
from ansible_collections.a800.vllm.plugins.module_utils.pcie_acs import (
    acs_verdict,
    disable_acs_redir_arg,
    grub_escape,
    parse_cmdline,
    parse_lspci,
    summarize,
)
from conftest import FIXTURES, ROOT, ansible_adhoc

ROLE = ROOT / "roles" / "host_tuning"
SCRIPT = ROLE / "files" / "a800-acs-disable.sh"
ACS_ON = FIXTURES / "lspci" / "synthetic" / "a800-x8-plx-acs-on"
ACS_OFF = FIXTURES / "lspci" / "synthetic" / "a800-x8-plx-acs-off"
ROLE_VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]

# The 14 devices of the acs-on fixture with the ACS capability (4 root ports of the GPUs, 8 switch downstream ports
# above GPUs, the NIC's downstream port 0000:18:02.0 and the NVMe root port 0000:4a:02.0), all redirecting.
REDIRECTING = [
    "0000:16:02.0",
    "0000:18:00.0",
    "0000:18:01.0",
    "0000:18:02.0",
    "0000:38:02.0",
    "0000:3a:00.0",
    "0000:3a:01.0",
    "0000:4a:02.0",
    "0000:98:02.0",
    "0000:9a:00.0",
    "0000:9a:01.0",
    "0000:b1:02.0",
    "0000:b3:00.0",
    "0000:b3:01.0",
]


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def report(fixture: Path, lspci_text: str | None = None, cmdline: str | None = None) -> dict:
    """summarize() of a fixture host, optionally with another listing or command line."""
    return summarize(
        read(fixture / "lspci-vvv.txt") if lspci_text is None else lspci_text,
        read(fixture / "cmdline.txt") if cmdline is None else cmdline,
        8,
        ["identity"],
    )


def render(template: str, **variables) -> str:
    """A role template rendered as Ansible would, with the collection's filters under their FQCNs."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ROLE / "templates")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    for name, func in acs_filters.FilterModule().filters().items():
        env.filters[f"a800.vllm.{name}"] = func
    return env.get_template(template).render(ansible_managed="Ansible managed", **ROLE_VARS, **variables)


def clear_redirect(text: str, slots: set[str]) -> str:
    """The listing after the kernel's pci=disable_acs_redir= on `slots`: ReqRedir, CmpltRedir, EgressCtrl off."""
    out, current = [], None
    for line in text.splitlines(keepends=True):
        if line[:1].strip():
            current = line.split()[0]
        if current in slots and line.strip().startswith("ACSCtl:"):
            line = line.replace("ReqRedir+", "ReqRedir-").replace("CmpltRedir+", "CmpltRedir-")
            line = line.replace("EgressCtrl+", "EgressCtrl-")
        out.append(line)
    return "".join(out)


# --- the kernel argument -----------------------------------------------------------------------------------------


def test_kernel_argument_lists_the_redirecting_bridges_sorted():
    before = report(ACS_ON)
    assert before["redirect_bridges"] == REDIRECTING
    arg = acs_filters.acs_kernel_arg(before)
    assert arg == "pci=disable_acs_redir=" + ";".join(REDIRECTING)
    # the kernel reads the same list back (parse_cmdline is what pcie_acs_facts uses on /proc/cmdline)
    assert parse_cmdline(f"ro quiet {arg}")["disable_acs_redir"].split(";") == REDIRECTING


@pytest.mark.parametrize(
    ("bridges", "active", "expected"),
    [
        (["0000:3A:00.0", "0000:18:00.0"], None, "pci=disable_acs_redir=0000:18:00.0;0000:3a:00.0"),
        (["18:00.0"], None, "pci=disable_acs_redir=0000:18:00.0"),  # lspci without -D
        (["0000:18:00.0", "0000:18:00.0"], "0000:18:00.0", "pci=disable_acs_redir=0000:18:00.0"),
        ([], "0000:18:01.0;0000:18:00.0", "pci=disable_acs_redir=0000:18:00.0;0000:18:01.0"),
        (["0000:b3:00.0"], "0000:18:00.0", "pci=disable_acs_redir=0000:18:00.0;0000:b3:00.0"),
        (["0001:00:01.0"], None, "pci=disable_acs_redir=0001:00:01.0"),
        ([], None, ""),
        ([], "", ""),
    ],
)
def test_kernel_argument_for_a_bridge_list(bridges, active, expected):
    assert disable_acs_redir_arg(bridges, active) == expected


def test_kernel_argument_is_the_same_after_the_reboot():
    """After the reboot the bridges no longer redirect and /proc/cmdline carries the list: a second run writes the
    same argument, so the GRUB drop-in does not change (idempotent)."""
    arg = acs_filters.acs_kernel_arg(report(ACS_ON))
    booted = report(
        ACS_ON,
        lspci_text=clear_redirect(read(ACS_ON / "lspci-vvv.txt"), set(REDIRECTING)),
        cmdline=read(ACS_ON / "cmdline.txt").replace(" vt.handoff", f" {arg} vt.handoff"),
    )
    assert booted["redirect_bridges"] == [] and booted["risk"] == "none"
    assert booted["cmdline"]["disable_acs_redir"] == ";".join(REDIRECTING)
    assert acs_filters.acs_kernel_arg(booted) == arg


def test_no_redirecting_bridge_no_argument():
    assert acs_filters.acs_kernel_arg(report(ACS_OFF)) == ""


def test_grub_escape():
    assert grub_escape("pci=disable_acs_redir=0000:18:00.0;0000:18:01.0") == (
        "pci=disable_acs_redir=0000:18:00.0\\;0000:18:01.0"
    )
    assert grub_escape("iommu=pt") == "iommu=pt"


@pytest.mark.parametrize("shell", SHELLS)
def test_grub_drop_in_keeps_the_list_for_grub(shell, tmp_path):
    """The rendered drop-in, sourced by the shell as update-grub does, appends the argument with every `;` written
    `\\;` (GRUB's escape, without which grub.cfg would end the linux command at the first `;`)."""
    arg = acs_filters.acs_kernel_arg(report(ACS_ON))
    dropin = tmp_path / "90-gpu-serving-acs.cfg"
    dropin.write_text(render("grub-cmdline.cfg.j2", __host_tuning_grub_arg=arg, __host_tuning_grub_reason="test"))
    run = subprocess.run(
        [
            shell,
            "-c",
            f'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"; . "{dropin}"; printf %s "$GRUB_CMDLINE_LINUX_DEFAULT"',
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    value = run.stdout
    assert value == "quiet splash " + arg.replace(";", "\\;")
    assert ";" not in value.replace("\\;", "")  # no bare `;` for GRUB's parser
    assert value.replace("\\;", ";").split()[-1] == arg  # what GRUB hands to the kernel


def test_grub_drop_in_for_iommu_passthrough(tmp_path):
    dropin = tmp_path / "90-gpu-serving-iommu.cfg"
    dropin.write_text(render("grub-cmdline.cfg.j2", __host_tuning_grub_arg="iommu=pt", __host_tuning_grub_reason="x"))
    run = subprocess.run(
        ["sh", "-c", f'GRUB_CMDLINE_LINUX_DEFAULT="ro"; . "{dropin}"; printf %s "$GRUB_CMDLINE_LINUX_DEFAULT"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout == "ro iommu=pt"


# --- NCCL's setpci loop ------------------------------------------------------------------------------------------

FAKE_LSPCI = """#!{python}
# TEST DOUBLE of lspci: `lspci -D -d "*:*:*"` prints one line per device of the fixture, anything else fails.
import json, os, sys
if sys.argv[1:] != ["-D", "-d", "*:*:*"]:
    sys.exit("fake lspci: unexpected arguments %r" % sys.argv[1:])
for dev in json.load(open(os.environ["FAKE_PCI"]))["devices"]:
    print(dev["slot"] + " " + dev["class"] + ": " + dev["description"])
"""
FAKE_SETPCI = """#!{python}
# TEST DOUBLE of setpci: `-v -s BDF ECAP_ACS+0x6.w` reads (fails without the ACS capability),
# `-v -s BDF ECAP_ACS+0x6.w=VALUE` writes; every call is logged.
import json, os, sys
state = json.load(open(os.environ["FAKE_PCI"]))
args = sys.argv[1:]
with open(os.environ["FAKE_PCI_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
if len(args) != 4 or args[:2] != ["-v", "-s"] or not args[3].startswith("ECAP_ACS+0x6.w"):
    sys.exit("fake setpci: unexpected arguments %r" % args)
bdf, op = args[2], args[3]
if bdf not in state["acs"]:
    sys.exit("setpci: Capability ACS not found")  # what a device without the capability answers: an error
if op == "ECAP_ACS+0x6.w":
    print("001d")
elif op.startswith("ECAP_ACS+0x6.w=") and bdf not in state.get("locked", []):
    print("%s:@%s->(%s) ECAP_ACS+0x6.w=%s" % (bdf, "f2a", "0000", op.split("=", 1)[1]))
else:
    sys.exit("setpci: write to %s failed" % bdf)
"""


def fake_tools(tmp_path: Path, locked: tuple[str, ...] = (), tools: tuple[str, ...] = ("lspci", "setpci")) -> dict:
    """A bin directory with the stand-in tools and awk, and the environment that runs the loop against it."""
    devices = parse_lspci(read(ACS_ON / "lspci-vvv.txt"))
    state = {
        "devices": [{"slot": d["slot"], "class": d["class"], "description": d["description"]} for d in devices],
        "acs": [d["slot"] for d in devices if d["acs_ctl"] is not None],
        "locked": list(locked),
    }
    (tmp_path / "pci.json").write_text(json.dumps(state))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("lspci", FAKE_LSPCI), ("setpci", FAKE_SETPCI)):
        if name in tools:
            (bin_dir / name).write_text(text.replace("{python}", sys.executable))
            (bin_dir / name).chmod(0o755)
    (bin_dir / "awk").symlink_to(shutil.which("awk"))
    env = {"PATH": str(bin_dir), "FAKE_PCI": str(tmp_path / "pci.json"), "FAKE_PCI_LOG": str(tmp_path / "log")}
    return {"env": env, "log": tmp_path / "log", "state": state}


def run_script(shell: str, fake: dict) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which(shell), str(SCRIPT)], env=fake["env"], capture_output=True, text=True)


def calls(fake: dict) -> list[list[str]]:
    return [line.split() for line in fake["log"].read_text().splitlines()] if fake["log"].exists() else []


def test_script_is_valid_shell():
    for shell in SHELLS:
        subprocess.run([shell, "-n", str(SCRIPT)], check=True)
    assert read(SCRIPT).startswith("#!/bin/sh\n")


@pytest.mark.parametrize("shell", SHELLS)
def test_script_writes_0000_to_every_device_with_acs(shell, tmp_path):
    fake = fake_tools(tmp_path)
    run = run_script(shell, fake)
    assert run.returncode == 0, run.stderr
    log = calls(fake)
    writes = [c[2] for c in log if c[3] == "ECAP_ACS+0x6.w=0000"]
    reads = [c[2] for c in log if c[3] == "ECAP_ACS+0x6.w"]
    assert writes == REDIRECTING  # exactly the devices with the capability, in lspci's order
    assert sorted(writes) == sorted(fake["state"]["acs"])
    assert reads == [d["slot"] for d in fake["state"]["devices"]]  # every device is probed first
    assert all(c[3] in ("ECAP_ACS+0x6.w", "ECAP_ACS+0x6.w=0000") for c in log)  # nothing else is written
    for bdf in writes:  # each write follows its own probe
        assert log.index(["-v", "-s", bdf, "ECAP_ACS+0x6.w"]) < log.index(["-v", "-s", bdf, "ECAP_ACS+0x6.w=0000"])
    gpus = {"0000:19:00.0", "0000:1a:00.0", "0000:3b:00.0", "0000:3c:00.0"}
    assert not gpus & set(writes)
    assert (
        run.stdout.strip().splitlines()[-1]
        == "a800-acs-disable: ACS control register cleared on 14 device(s), 0 failed"
    )


@pytest.mark.parametrize("shell", SHELLS)
def test_script_fails_when_a_write_fails_and_still_writes_the_rest(shell, tmp_path):
    fake = fake_tools(tmp_path, locked=("0000:18:00.0",))
    run = run_script(shell, fake)
    assert run.returncode == 1
    assert "could not write the ACS control register of 0000:18:00.0" in run.stderr
    writes = [c[2] for c in calls(fake) if c[3] == "ECAP_ACS+0x6.w=0000"]
    assert writes == REDIRECTING  # the others were written all the same
    assert "cleared on 13 device(s), 1 failed" in run.stdout


@pytest.mark.parametrize("missing", ["lspci", "setpci"])
def test_script_fails_without_pciutils(missing, tmp_path):
    fake = fake_tools(tmp_path, tools=tuple(t for t in ("lspci", "setpci") if t != missing))
    run = run_script("sh", fake)
    assert run.returncode == 1
    assert f"{missing} not found (install pciutils)" in run.stderr
    assert calls(fake) == []


def test_unit_runs_the_loop_before_docker():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read_string(render("a800-acs-disable.service.j2"))
    assert unit["Unit"]["Before"] == "docker.service"
    assert unit["Service"]["Type"] == "oneshot" and unit["Service"]["RemainAfterExit"] == "true"
    assert unit["Service"]["ExecStart"] == "/usr/local/sbin/a800-acs-disable" == ROLE_VARS["__host_tuning_acs_script"]
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    assert ROLE_VARS["__host_tuning_acs_unit"] == "a800-acs-disable.service"


def test_role_installs_the_script_where_the_unit_runs_it():
    tasks = yaml.safe_load((ROLE / "tasks" / "acs_setpci.yml").read_text())
    block = next(t for t in tasks if t["name"] == "Keep NCCL's loop at every boot")["block"]
    copy = next(t["ansible.builtin.copy"] for t in block if "ansible.builtin.copy" in t)
    assert copy["src"] == SCRIPT.name and copy["dest"] == "{{ __host_tuning_acs_script }}" and copy["mode"] == "0755"
    start = next(t["ansible.builtin.systemd_service"] for t in block if "ansible.builtin.systemd_service" in t)
    assert start["enabled"] is True and "started" in start["state"]


# --- the verdict on the bits read again --------------------------------------------------------------------------


def keys(record: dict) -> set:
    return set(record)


@pytest.mark.parametrize("method", ["setpci", "kernel"])
def test_bits_still_set_fail_with_the_fix(method):
    verdict = acs_verdict(report(ACS_ON), method)
    assert keys(verdict) == keys(check("x", "pass"))  # the project's check record
    assert verdict["name"] == "acs_redirect_off" and verdict["status"] == "fail"
    assert verdict["measured"] == REDIRECTING and verdict["expected"] == []
    assert "still on at 14 bridge(s)" in verdict["detail"]
    assert "0000:18:00.0 (Downstream Port, PLX Technology" in verdict["detail"]
    assert "ReqRedir+ CmpltRedir+" in verdict["detail"] and "and 6 more" in verdict["detail"]
    assert "lspci -vvv" in verdict["fix"] and "ReqRedir- CmpltRedir-" in verdict["fix"]
    hint = {"setpci": "journalctl -u a800-acs-disable.service", "kernel": "/proc/cmdline"}[method]
    assert hint in verdict["fix"]


def test_bits_left_by_a_partial_kernel_argument_are_named():
    """The kernel cleared all but two bridges: the verdict names those two."""
    left = {"0000:18:00.0", "0000:b3:01.0"}
    text = clear_redirect(read(ACS_ON / "lspci-vvv.txt"), set(REDIRECTING) - left)
    verdict = acs_verdict(report(ACS_ON, lspci_text=text), "kernel")
    assert verdict["status"] == "fail" and verdict["measured"] == sorted(left)
    assert "still on at 2 bridge(s) after booting with pci=disable_acs_redir=" in verdict["detail"]


def test_bits_cleared_pass():
    verdict = acs_verdict(report(ACS_OFF), "setpci")
    assert verdict["status"] == "pass" and verdict["fix"] == ""
    assert "14 device(s) with the ACS capability" in verdict["detail"]


def test_bios_only_warns_and_lists_the_ports():
    verdict = acs_verdict(report(ACS_ON), "bios")
    assert verdict["status"] == "warn"
    assert "0000:16:02.0 (Root Port" in verdict["detail"]
    assert "BIOS" in verdict["fix"] and "VT-d/AMD-Vi" in verdict["fix"]


def test_nothing_applied_in_check_mode_is_a_warning():
    assert acs_verdict(report(ACS_ON), "setpci", applied=False)["status"] == "warn"


@pytest.mark.parametrize(("method", "status"), [("setpci", "fail"), ("kernel", "fail"), ("bios", "warn")])
def test_bits_that_cannot_be_read_are_no_pass(method, status):
    missing = summarize(None, "ro", 0, lspci_error="lspci not installed (package pciutils)")
    verdict = acs_verdict(missing, method)
    assert verdict["status"] == status
    assert verdict["measured"] == "lspci not installed (package pciutils)"
    assert "pciutils" in verdict["fix"]


def test_unknown_method_names_the_variable():
    with pytest.raises(ValueError, match="host_tuning_acs_method is 'noacs': choose one of setpci, kernel, bios"):
        acs_verdict(report(ACS_ON), "noacs")


def test_argument_spec_offers_the_three_methods():
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert spec["host_tuning_acs_method"]["choices"] == ["setpci", "kernel", "bios"]
    assert spec["host_tuning_acs_method"]["default"] == defaults["host_tuning_acs_method"] == "setpci"
    assert "host_tuning_acs_kernel_args" not in spec and "host_tuning_acs_kernel_args" not in defaults
    assert spec["host_tuning_iommu_passthrough"]["default"] is defaults["host_tuning_iommu_passthrough"] is False


def test_filters_run_in_ansible():
    """The FQCNs the role uses resolve in Ansible: argument, GRUB escape and verdict from a report."""
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip(f"ansible not installed beside {sys.executable}")
    facts = json.dumps({"pcie_acs_facts": report(ACS_ON)})
    expr = (
        "{{ [pcie_acs_facts | a800.vllm.acs_kernel_arg | a800.vllm.grub_escape, "
        "(pcie_acs_facts | a800.vllm.acs_verdict('setpci')).status] }}"
    )
    rc, out, raw = ansible_adhoc(
        "localhost", "-c", "local", "-i", "localhost,", "-e", facts, "-m", "debug", "-a", f"msg={expr}"
    )
    assert rc == 0 and out, raw
    arg, status = out["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    assert arg == "pci=disable_acs_redir=" + "\\;".join(REDIRECTING)
    assert status == "fail"


def test_no_pci_noacs_is_recommended_anywhere():
    """`pci=noacs` is not a mainline option (docs/field.md#pcie-acs-and-iommu): no fix, default or doc recommends it."""
    roots = ["plugins", "roles", "README.md", "docs", "tests/api/recorded", "tests/fixtures/lspci"]
    hits = []
    for root in roots:
        path = ROOT / root
        for file in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
                if "pci=noacs" in line and "not" not in line:
                    hits.append(f"{file.relative_to(ROOT)}:{number}: {line.strip()}")
    assert hits == []
