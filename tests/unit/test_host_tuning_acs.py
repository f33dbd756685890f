"""Turning PCIe ACS redirection off (roles/host_tuning, host_tuning_acs_method): the kernel argument for a list of
bridges and its GRUB drop-in, NCCL's setpci loop run against stand-in lspci/setpci, its boot unit, and the verdict on
the ACS bits read again (plugins/module_utils/pcie_acs.py)."""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter import pcie_acs as acs_filters
from ansible_collections.a800.vllm.plugins.module_utils import pcie_acs
from ansible_collections.a800.vllm.plugins.module_utils.checks import check
from ansible_collections.a800.vllm.plugins.module_utils.checks import failure_lines as preflight_failures
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
# The test bed's stand-in setpci (tests/testbed/identities/bin/setpci): the devices' ACS control registers from a
# config, refused writes under kernel lockdown as the real tool reports them (a warning, exit status 0).
STANDIN_SETPCI = ROOT / "tests" / "testbed" / "identities" / "bin" / "setpci"
LOCKDOWN_ON = "none [integrity] confidentiality\n"  # /sys/kernel/security/lockdown under Secure Boot (Ubuntu)


def fake_tools(
    tmp_path: Path,
    locked: tuple[str, ...] = (),
    tools: tuple[str, ...] = ("lspci", "setpci"),
    lockdown: str | None = None,
) -> dict:
    """A bin directory with the stand-in tools and awk, and the environment that runs the loop against it."""
    devices = parse_lspci(read(ACS_ON / "lspci-vvv.txt"))
    state = {
        "devices": [{"slot": d["slot"], "class": d["class"], "description": d["description"]} for d in devices],
        "acs": [d["slot"] for d in devices if d["acs_ctl"] is not None],
        "locked": list(locked),
    }
    (tmp_path / "pci.json").write_text(json.dumps(state))
    if lockdown is not None:
        (tmp_path / "lockdown").write_text(lockdown)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"lspci": FAKE_LSPCI.replace("{python}", sys.executable), "setpci": standin("setpci")}
    for name in tools:
        (bin_dir / name).write_text(scripts[name])
        (bin_dir / name).chmod(0o755)
    (bin_dir / "awk").symlink_to(shutil.which("awk"))
    env = {
        "PATH": str(bin_dir),
        "FAKE_PCI": str(tmp_path / "pci.json"),
        "NVIDIA_STANDIN_PCI": str(tmp_path / "pci.json"),
        "NVIDIA_STANDIN_PCI_STATE": str(tmp_path / "pci-state.json"),
        "NVIDIA_STANDIN_LOCKDOWN": str(tmp_path / "lockdown"),
        "NVIDIA_STANDIN_PCI_LOG": str(tmp_path / "log"),
    }
    return {"env": env, "log": tmp_path / "log", "state": state}


def standin(name: str) -> str:
    """A stand-in of tests/testbed/identities/bin, run by this interpreter (its shebang is the sim host's)."""
    text = read(ROOT / "tests" / "testbed" / "identities" / "bin" / name)
    return f"#!{sys.executable}\n" + text.split("\n", 1)[1]


def run_script(shell: str, fake: dict) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which(shell), str(SCRIPT)], env=fake["env"], capture_output=True, text=True)


def calls(fake: dict) -> list[tuple[bool, str, str]]:
    """The setpci calls as (verbose, device, register[=value])."""
    lines = fake["log"].read_text().splitlines() if fake["log"].exists() else []
    return [(words[0] == "-v", words[-2], words[-1]) for words in map(str.split, lines)]


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
    writes = [bdf for _, bdf, op in log if op == "ECAP_ACS+0x6.w=0000"]
    probes = [bdf for verbose, bdf, op in log if verbose and op == "ECAP_ACS+0x6.w"]
    read_back = [bdf for verbose, bdf, op in log if not verbose and op == "ECAP_ACS+0x6.w"]
    assert writes == REDIRECTING  # exactly the devices with the capability, in lspci's order
    assert sorted(writes) == sorted(fake["state"]["acs"])
    assert probes == [d["slot"] for d in fake["state"]["devices"]]  # every device is probed first
    assert read_back == writes  # and every write is read back
    assert all(op in ("ECAP_ACS+0x6.w", "ECAP_ACS+0x6.w=0000") for _, _, op in log)  # nothing else is written
    for bdf in writes:  # each write follows its own probe, and its read-back follows it
        probe, write = log.index((True, bdf, "ECAP_ACS+0x6.w")), log.index((True, bdf, "ECAP_ACS+0x6.w=0000"))
        assert probe < write < log.index((False, bdf, "ECAP_ACS+0x6.w"))
    gpus = {"0000:19:00.0", "0000:1a:00.0", "0000:3b:00.0", "0000:3c:00.0"}
    assert not gpus & set(writes)
    assert (
        run.stdout.strip().splitlines()[-1]
        == "a800-acs-disable: ACS control register cleared on 14 device(s), 0 failed"
    )


@pytest.mark.parametrize("shell", SHELLS)
def test_script_fails_when_a_write_fails_and_still_writes_the_rest(shell, tmp_path):
    # firmware that keeps one register as it is: the write is taken, the value read back is still 001d
    fake = fake_tools(tmp_path, locked=("0000:18:00.0",))
    run = run_script(shell, fake)
    assert run.returncode == 1
    assert "could not write the ACS control register of 0000:18:00.0 (it reads '001d' after the write" in run.stderr
    writes = [bdf for _, bdf, op in calls(fake) if op == "ECAP_ACS+0x6.w=0000"]
    assert writes == REDIRECTING  # the others were written all the same
    assert "cleared on 13 device(s), 1 failed" in run.stdout


@pytest.mark.parametrize("shell", SHELLS)
def test_script_counts_the_writes_a_locked_down_kernel_refused(shell, tmp_path):
    """Under lockdown setpci only warns and exits 0 (pciutils does not check its writes): the loop must not report
    the registers as cleared. Before the read-back it did: `cleared on 14 device(s), 0 failed`, exit status 0."""
    fake = fake_tools(tmp_path, lockdown=LOCKDOWN_ON)
    run = run_script(shell, fake)
    assert run.stderr.count("pcilib: sysfs_write: write failed: Operation not permitted") == 14
    assert run.returncode == 1
    assert run.stdout.strip().splitlines()[-1] == (
        "a800-acs-disable: ACS control register cleared on 0 device(s), 14 failed"
    )
    assert "cat /sys/kernel/security/lockdown" in run.stderr


def test_script_clears_every_register_with_lockdown_none(tmp_path):
    # (no lockdown file at all, no lockdown LSM: test_script_writes_0000_to_every_device_with_acs)
    fake = fake_tools(tmp_path, lockdown="[none] integrity confidentiality\n")
    run = run_script("sh", fake)
    assert run.returncode == 0, run.stderr
    assert "cleared on 14 device(s), 0 failed" in run.stdout


@pytest.mark.parametrize("missing", ["lspci", "setpci"])
def test_script_fails_without_pciutils(missing, tmp_path):
    fake = fake_tools(tmp_path, tools=tuple(t for t in ("lspci", "setpci") if t != missing))
    run = run_script("sh", fake)
    assert run.returncode == 1
    assert f"{missing} not found (install pciutils)" in run.stderr
    assert calls(fake) == []


# --- the stand-in setpci itself (tests/testbed/identities/bin/setpci) ---------------------------------------------


def setpci(fake: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(STANDIN_SETPCI), *args], env=fake["env"], capture_output=True, text=True, check=False
    )


def test_standin_setpci_reads_and_writes_like_setpci(tmp_path):
    fake = fake_tools(tmp_path)
    assert setpci(fake, "-s", "0000:18:00.0", "ECAP_ACS+0x6.w").stdout == "001d\n"
    assert setpci(fake, "-v", "-s", "0000:18:00.0", "ECAP_ACS+0x6.w").stdout == (
        "0000:18:00.0 (ecap 000d @f24) @f2a = 001d\n"
    )
    write = setpci(fake, "-v", "-s", "0000:18:00.0", "ECAP_ACS+0x6.w=0000")
    assert (write.returncode, write.stdout, write.stderr) == (0, "0000:18:00.0 (ecap 000d @f24) @f2a 0000\n", "")
    assert setpci(fake, "-s", "0000:18:00.0", "ECAP_ACS+0x6.w").stdout == "0000\n"  # until the next boot
    assert setpci(fake, "-s", "0000:18:01.0", "ECAP_ACS+0x6.w").stdout == "001d\n"  # the others as they were
    none = setpci(fake, "-v", "-s", "0000:19:00.0", "ECAP_ACS+0x6.w")  # a GPU: no ACS capability
    assert none.returncode == 1 and "Extended capability 000d not found" in none.stderr
    assert setpci(fake, "-s", "0000:18:00.0", "COMMAND").returncode == 1  # only the loop's forms


@pytest.mark.parametrize("mode", ["integrity", "confidentiality"])
def test_standin_setpci_refuses_writes_under_lockdown_as_the_kernel(mode, tmp_path):
    text = " ".join(f"[{m}]" if m == mode else m for m in ("none", "integrity", "confidentiality")) + "\n"
    fake = fake_tools(tmp_path, lockdown=text)
    write = setpci(fake, "-v", "-s", "0000:18:00.0", "ECAP_ACS+0x6.w=0000")
    assert write.returncode == 0  # setpci does not check its writes
    assert write.stderr == "pcilib: sysfs_write: write failed: Operation not permitted\n"
    assert setpci(fake, "-s", "0000:18:00.0", "ECAP_ACS+0x6.w").stdout == "001d\n"  # unchanged
    assert setpci(fake, "-v", "-s", "0000:18:00.0", "ECAP_ACS+0x6.w").returncode == 0  # reading is allowed


def test_identity_installs_the_standin_where_the_loop_finds_it():
    """The identity puts setpci in /usr/local/sbin (before /usr/sbin on systemd's PATH, so the unit runs it) and
    writes the lockdown file the simulated hosts read (inventories/sim), in securityfs's format."""
    task = yaml.safe_load((ROOT / "tests/testbed/tasks/sim_host_identity.yml").read_text())[0]
    cmd = task["ansible.builtin.shell"]["cmd"]
    assert '/bin/setpci\') | quote }} "$c:/usr/local/sbin/setpci"' in cmd
    sim = yaml.safe_load((ROOT / "inventories/sim/group_vars/all/simulated_host.yml").read_text())
    assert f"tee {sim['host_tuning_lockdown_file']} >/dev/null" in cmd
    assert 'NVIDIA_STANDIN_LOCKDOWN", "' + sim["host_tuning_lockdown_file"] + '"' in read(STANDIN_SETPCI)
    env = jinja2.Environment()
    env.filters["regex_replace"] = lambda value, pattern, replacement: re.sub(pattern, replacement, value)
    rendered = env.from_string(task["vars"]["__lockdown"]).render(sim_host={"lockdown": "integrity"})
    assert rendered.strip() == "none [integrity] confidentiality"


# --- kernel lockdown against the ACS method (the preflight's acs_lockdown check) --------------------------------


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("none [integrity] confidentiality\n", "integrity"),
        ("[none] integrity confidentiality\n", "none"),
        ("none integrity [confidentiality]", "confidentiality"),
        (None, None),  # no file: no lockdown LSM
        ("garbled\n", "garbled"),
    ],
)
def test_parse_lockdown(text, mode):
    assert pcie_acs.parse_lockdown(text) == mode


def test_setpci_under_lockdown_fails_and_names_the_methods_that_work():
    result = pcie_acs.acs_lockdown_check(LOCKDOWN_ON, True, "setpci")
    assert set(result) == set(check("x", "pass"))  # the project's check record
    assert (result["name"], result["status"], result["measured"]) == ("acs_lockdown", "fail", "integrity")
    assert result["fact"] == "/sys/kernel/security/lockdown"
    assert "refuses every write of setpci to PCI config space" in result["detail"]
    assert "nothing was changed" in result["detail"]
    for name in ("host_tuning_acs_method: kernel", "host_tuning_acs_method: bios", "host_tuning_disable_acs: false"):
        assert name in result["fix"]
    assert "host_tuning_reboot_allowed" in result["fix"] and "Secure Boot" in result["fix"]
    line = preflight_failures([result])[0]
    assert line.startswith("acs_lockdown: the kernel is locked down (integrity") and "Fix: set" in line


@pytest.mark.parametrize(
    ("text", "disable", "method", "status"),
    [
        ("none integrity [confidentiality]\n", True, "setpci", "fail"),
        ("none integrity [confidentiality]\n", "true", "setpci", "fail"),  # -e host_tuning_disable_acs=true
        (LOCKDOWN_ON, True, "kernel", "pass"),  # the kernel clears the bits itself at boot
        (LOCKDOWN_ON, True, "bios", "pass"),
        (LOCKDOWN_ON, False, "setpci", "pass"),  # nothing is written
        (LOCKDOWN_ON, "false", "setpci", "pass"),
        ("[none] integrity confidentiality\n", True, "setpci", "pass"),
        (None, True, "setpci", "pass"),  # no lockdown LSM
        ("unreadable: Permission denied", True, "setpci", "warn"),
        (LOCKDOWN_ON, True, "noacs", "fail"),  # not a method: the variable is named
    ],
)
def test_lockdown_check_cases(text, disable, method, status):
    result = pcie_acs.acs_lockdown_check(text, disable, method)
    assert result["status"] == status, result
    assert (result["fix"] == "") == (status == "pass")
    if method == "noacs":
        assert result["fact"] == "host_tuning_acs_method" and "setpci, kernel, bios" in result["fix"]


def test_lockdown_check_filter_is_exported():
    assert acs_filters.FilterModule().filters()["acs_lockdown_check"](LOCKDOWN_ON, True, "setpci")["status"] == "fail"


def test_role_checks_the_lockdown_before_it_installs_anything():
    acs = yaml.safe_load((ROLE / "tasks" / "acs.yml").read_text())
    prepare = next(t for t in acs if t.get("ansible.builtin.include_tasks") == "acs_prepare.yml")
    assert prepare["when"] == "host_tuning_disable_acs | bool"
    names = [t["name"] for t in acs]  # nothing is installed before the method is prepared
    assert names.index(prepare["name"]) < names.index("NCCL's setpci loop at every boot")
    tasks = yaml.safe_load((ROLE / "tasks" / "acs_prepare.yml").read_text())
    names = [t["name"] for t in tasks]
    include = names.index("Check that the ACS method can work here (a locked-down kernel refuses setpci's writes)")
    stop = names.index("Stop before anything is installed when it cannot")
    assert include < stop < names.index("Install pciutils (lspci reads the ACS bits, setpci writes them)")
    assert tasks[include]["ansible.builtin.include_tasks"] == "preflight.yml"
    assert "a800.vllm.preflight_failures" in tasks[stop]["ansible.builtin.fail"]["msg"]
    preflight = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
    assert preflight[0]["ansible.builtin.slurp"]["src"] == "{{ host_tuning_lockdown_file }}"
    # the preflight role runs the same tasks, and reports their records with its own
    main = yaml.safe_load((ROOT / "roles" / "preflight" / "tasks" / "main.yml").read_text())
    include_role = next(t["ansible.builtin.include_role"] for t in main if "host_tuning" in str(t))
    assert include_role == {"name": "host_tuning", "tasks_from": "preflight.yml"}
    results = next(t for t in main if t["name"] == "Check the facts against the model profile")
    assert "host_tuning_preflight_results" in results["ansible.builtin.set_fact"]["preflight_results"]


def test_lockdown_file_is_a_documented_variable():
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert spec["host_tuning_lockdown_file"]["default"] == defaults["host_tuning_lockdown_file"]
    assert defaults["host_tuning_lockdown_file"] == pcie_acs.LOCKDOWN_FILE == "/sys/kernel/security/lockdown"


def test_role_preflight_tasks_judge_the_lockdown_file(tmp_path):
    """roles/host_tuning/tasks/preflight.yml run by ansible-playbook on local hosts, one per lockdown file."""
    cases = {
        "locked": (LOCKDOWN_ON, "setpci", "fail"),
        "kernel": (LOCKDOWN_ON, "kernel", "pass"),
        "unlocked": ("[none] integrity confidentiality\n", "setpci", "pass"),
        "nofile": (None, "setpci", "pass"),
    }
    hosts = {}
    for name, (text, method, _) in cases.items():
        path = tmp_path / f"{name}-lockdown"
        if text is not None:
            path.write_text(text)
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "host_tuning_lockdown_file": str(path),
            "host_tuning_disable_acs": True,
            "host_tuning_acs_method": method,
        }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    out = tmp_path / "out"
    out.mkdir()
    play = {
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"ansible.builtin.include_role": {"name": "host_tuning", "tasks_from": "preflight.yml"}},
            {
                "ansible.builtin.copy": {
                    "content": "{{ host_tuning_preflight_results | to_json }}",
                    "dest": str(out) + "/{{ inventory_hostname }}.json",
                    "mode": "0644",
                }
            },
        ],
    }
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_HOME=str(ROOT / ".ansible-home"))
    playbook = Path(sys.executable).parent / "ansible-playbook"
    if not playbook.exists():
        pytest.skip(f"ansible-playbook not installed beside {sys.executable}")
    run = subprocess.run(
        [str(playbook), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for name, (_, _, status) in cases.items():
        (result,) = json.loads((out / f"{name}.json").read_text())
        assert result["status"] == status, (name, result)
    assert json.loads((out / "nofile.json").read_text())[0]["measured"] is None
    assert json.loads((out / "locked.json").read_text())[0]["measured"] == "integrity"


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
