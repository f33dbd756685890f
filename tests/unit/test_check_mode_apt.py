"""Check mode of the host phase on a host without python3-apt (issue 31, item 4;
docs/field.md#check-mode-on-a-minimal-host).

ansible.builtin.apt installs python3-apt by itself in a normal run but fails in check mode without it, which
stopped `ansible-playbook playbooks/host.yml --check --diff` on a real Ubuntu 24.04 host at its first apt task. The
apt tasks are now skipped there and previewed from dpkg (plugins/module_utils/apt_preview.py), and the run goes on.

The playbook tests run the real playbooks/host.yml in check mode against this machine (local connection, the
production inventory's group_vars). This machine's /usr/bin/python3 has python3-apt, which the apt module would
find (it probes /usr/bin/python3 and /usr/bin/python when its own interpreter lacks it), so python3-apt and
python3-debian are hidden by tests/check_mode/hide-python-apt, first on PYTHONPATH, which the module's probe passes
on; docker and systemctl are test doubles (tests/check_mode/bin): an engine that answers its version, a systemd
without the units. Nothing runs for real: every task is in check mode or reads only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.module_utils.apt_preview import (
    PREFIX,
    apt_deps,
    apt_deps_check,
    apt_preview,
    parse_dpkg,
    parse_madison,
)

ROOT = Path(__file__).resolve().parents[2]
CHECK_MODE = ROOT / "tests" / "check_mode"
HIDE = CHECK_MODE / "hide-python-apt"
DOUBLES = CHECK_MODE / "bin"

DPKG = (
    "docker.io\tii \t29.1.3-0ubuntu3~24.04.2\n"
    "nvidia-utils-580\tii \t580.82.07-0ubuntu1\n"
    "libnvidia-compute-580\trc \t580.82.07-0ubuntu1\n"  # removed, its configuration left
    "nvidia-fabricmanager-580\tun \t\n"
    "libnvidia-container1\tii \t1.17.8-1\n"
    "libnvidia-container1\tun \t\n"  # another architecture
)

# --- the preview from dpkg ------------------------------------------------------------------------------------------


def test_dpkg_query_output_is_read_per_package():
    known = parse_dpkg(DPKG)
    assert known["docker.io"] == {"status": "ii", "version": "29.1.3-0ubuntu3~24.04.2", "installed": True}
    assert not known["libnvidia-compute-580"]["installed"]  # rc: only its configuration files are left
    assert not known["nvidia-fabricmanager-580"]["installed"]
    assert known["libnvidia-container1"]["installed"]  # installed for one of the architectures dpkg lists


def test_each_package_says_what_the_real_run_would_install():
    records = apt_preview(
        DPKG,
        [
            "nvidia-utils-580=580.95.05-0ubuntu1",  # another version installed
            "libnvidia-compute-580=580.95.05-0ubuntu1",  # configuration files only
            "nvidia-dkms-580-open=580.95.05-0ubuntu1",  # never installed: dpkg-query names it on stderr only
            "docker.io=29.1.3-0ubuntu3~24.04.2",  # as wanted
            "libnvidia-container1",  # no version asked: installed is enough
        ],
    )
    assert [r["line"] for r in records] == [
        f"{PREFIX}: would install nvidia-utils-580=580.95.05-0ubuntu1 (installed: 580.82.07-0ubuntu1)",
        f"{PREFIX}: would install libnvidia-compute-580=580.95.05-0ubuntu1 (installed: none)",
        f"{PREFIX}: would install nvidia-dkms-580-open=580.95.05-0ubuntu1 (installed: none)",
        f"{PREFIX}: docker.io=29.1.3-0ubuntu3~24.04.2 is installed (29.1.3-0ubuntu3~24.04.2): nothing to do",
        f"{PREFIX}: libnvidia-container1 is installed (1.17.8-1): nothing to do",
    ]
    assert [r["install"] for r in records] == [True, True, True, False, False]


MADISON = (
    "    docker.io | 29.1.3-0ubuntu3~24.04.2 | http://archive.ubuntu.com/ubuntu noble-updates/universe amd64 Packages\n"
    "    docker.io | 24.0.7-0ubuntu4 | http://archive.ubuntu.com/ubuntu noble/universe amd64 Packages\n"
    "    docker.io | 24.0.7-0ubuntu4 | http://archive.ubuntu.com/ubuntu noble/universe Sources\n"
    "   pciutils | 1:3.10.0-2build1 | http://archive.ubuntu.com/ubuntu noble/main amd64 Packages\n"
)


def test_apt_cache_madison_says_what_apts_lists_have_now():
    assert parse_madison(MADISON) == {
        "docker.io": ["29.1.3-0ubuntu3~24.04.2", "24.0.7-0ubuntu4"],  # source packages are not installable
        "pciutils": ["1:3.10.0-2build1"],
    }
    lines = [
        r["line"]
        for r in apt_preview(
            "",
            ["docker.io=29.1.3-0ubuntu3~24.04.2", "docker.io=29.1.4-0ubuntu1", "pciutils",
             "nvidia-utils-580=580.95.05-0ubuntu1"],
            madison_out=MADISON,
        )
    ]  # fmt: skip
    assert lines == [
        f"{PREFIX}: would install docker.io=29.1.3-0ubuntu3~24.04.2 (installed: none; in apt's lists)",
        f"{PREFIX}: would install docker.io=29.1.4-0ubuntu1 (installed: none; apt's lists have "
        "29.1.3-0ubuntu3~24.04.2, 24.0.7-0ubuntu4 only)",
        f"{PREFIX}: would install pciutils (installed: none; in apt's lists)",
        # NVIDIA's repository is added (and the lists refreshed) by the real run before the install
        f"{PREFIX}: would install nvidia-utils-580=580.95.05-0ubuntu1 (installed: none; not in apt's lists now)",
    ]


def test_a_version_with_a_wildcard_matches_as_apt_matches_it():
    # the precompiled modules' user-space packages are pinned as 580.95.05-* (plugins/filter/nvidia_packages.py)
    dpkg = "nvidia-utils-580-server\tii \t580.95.05-0ubuntu0.24.04.2\n"
    assert not apt_preview(dpkg, ["nvidia-utils-580-server=580.95.05-*"])[0]["install"]
    assert apt_preview(dpkg, ["nvidia-utils-580-server=580.105.08-*"])[0]["install"]


def test_a_package_taken_only_when_installed_is_left_out_otherwise():
    # Fabric Manager moves with the driver when it is there (roles/nvidia_driver/tasks/packages.yml)
    assert apt_preview(DPKG, [], ["nvidia-fabricmanager-580=580.95.05-0ubuntu1"]) == []
    dpkg = "nvidia-fabricmanager-580\tii \t580.82.07-0ubuntu1\n"
    (record,) = apt_preview(dpkg, [], ["nvidia-fabricmanager-580=580.95.05-0ubuntu1"])
    assert record["install"] and record["installed"] == "580.82.07-0ubuntu1"


# --- what apt and deb822_repository would find ----------------------------------------------------------------------


def test_python_apt_is_looked_for_as_the_apt_module_looks_for_it():
    asked = []

    def probe(interpreters, module):
        asked.append((interpreters, module))
        return "/usr/bin/python3"

    found = apt_deps(probe, importable=lambda *names: False, executable="/opt/venv/bin/python")
    assert asked == [(["/usr/bin/python3", "/usr/bin/python"], "apt")]  # modules/apt.py main()'s list and order
    assert found["python_apt"] and found["python_apt_interpreter"] == "/usr/bin/python3"
    assert not found["python_debian"]  # deb822_repository has no fallback
    here = apt_deps(lambda *a: pytest.fail("no probe when this interpreter has it"), importable=lambda *n: True)
    assert here["python_apt_interpreter"] == sys.executable
    none = apt_deps(lambda *a: None, importable=lambda *n: False, executable="/usr/bin/python3")
    assert not none["python_apt"] and none["python_apt_interpreter"] is None


def test_the_preflight_warns_when_python3_apt_is_missing():
    missing = apt_deps_check(
        {"python_apt": False, "python_debian": False, "probed": ["/usr/bin/python3", "/usr/bin/python"]}
    )
    assert missing["status"] == "warn" and missing["name"] == "python3_apt"
    assert (
        "--check of the host phase previews apt changes from dpkg only; install python3-apt for apt's own preview: "
        "apt-get install python3-apt python3-debian" in missing["detail"]
    )
    assert missing["fix"] == "apt-get install python3-apt python3-debian"
    only_debian = apt_deps_check({"python_apt": True, "python_apt_interpreter": "/usr/bin/python3"})
    assert only_debian["status"] == "warn" and only_debian["fix"] == "apt-get install python3-debian"
    ok = apt_deps_check({"python_apt": True, "python_debian": True, "python_apt_interpreter": "/usr/bin/python3"})
    assert ok["status"] == "pass" and ok["fix"] == ""


# --- the host phase in check mode on this machine, python3-apt hidden -----------------------------------------------

pytestmark_playbook = pytest.mark.skipif(
    shutil.which("dpkg-query") is None or os.geteuid() != 0,
    reason="needs a Debian-family machine (dpkg) and root (the roles read root-only state), as the host phase does",
)

# What the real run would write on this machine: in check mode none of it may appear or change.
WRITTEN = [
    "/etc/modprobe.d/blacklist-nouveau.conf",
    "/etc/apt/apt.conf.d/51nvidia-driver-no-unattended-upgrade",
    "/etc/apt/sources.list.d/nvidia-cuda.sources",
    "/etc/apt/sources.list.d/nvidia-container-toolkit.sources",
    "/etc/apt/keyrings",
    "/etc/systemd/system/nvidia-persistenced.service.d",
    "/etc/systemd/system/gpu-serving-tuning.service",
    "/etc/systemd/system/a800-acs-disable.service",
    "/usr/local/sbin/a800-acs-disable",
    "/lib/udev/rules.d/71-nvidia-dev-char.rules",
    "/etc/docker/daemon.json",
    "/etc/sysctl.d/90-gpu-serving.conf",
    "/etc/security/limits.d/90-gpu-serving.conf",
    "/var/lib/dpkg/status",
]


def host_state() -> dict[str, str | None]:
    state: dict[str, str | None] = {}
    for path in map(Path, WRITTEN):
        if path.is_file():
            state[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            state[str(path)] = f"dir {sorted(p.name for p in path.iterdir())}"
        else:
            state[str(path)] = None
    state["dpkg selections"] = subprocess.run(
        ["dpkg", "--get-selections"], capture_output=True, text=True, check=True
    ).stdout
    return state


def inventory(tmp_path: Path, **host_vars) -> Path:
    """This machine as the one host of a800_servers, with the production inventory's group_vars."""
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "group_vars" / "all").symlink_to(ROOT / "inventories" / "prod" / "group_vars" / "all")
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,  # the venv's Python: no apt module of its own
        # what the example inventory leaves to the site: small weights, an image by digest
        "model_profile_overrides": {"weights": {"size_gb": 2, "host_dir": str(tmp_path / "weights")}},
        "image_source": "registry",
        "bom_overrides": {"vllm_image": {"digest": "sha256:" + "0" * 64}},
        **host_vars,
    }
    (inv / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"children": {"a800_servers": {"hosts": {"a800-check": host}}}}})
    )
    return inv / "hosts.yml"


def playbook(
    inv: Path, play: Path, *args: str, hide_python_apt: bool = True
) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(
        os.environ,
        PATH=f"{DOUBLES}:{os.environ['PATH']}",
        ANSIBLE_HOME=str(ROOT / ".ansible-home"),
        ANSIBLE_CACHE_PLUGIN="memory",  # never this machine's facts in the project's fact cache
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
    )
    if hide_python_apt:
        env["PYTHONPATH"] = str(HIDE)
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(play), "--check", "--diff", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = run.stdout
    document = json.loads(out[out.index("{\n") : out.rindex("}") + 1]) if "{\n" in out else {}
    return run, document


def results(document: dict) -> list[tuple[str, dict]]:
    """(task name without its role, result) of every task of every play, loop items unrolled."""
    found = []
    for play in document.get("plays", []):
        for task in play["tasks"]:
            name = task["task"]["name"].split(" : ", 1)[-1]  # "nvidia_driver : Hold the driver packages"
            for result in task["hosts"].values():
                for one in result.get("results", [result]):
                    found.append((name, one))
    return found


def messages(document: dict) -> list[str]:
    lines = []
    for _, result in results(document):
        msg = result.get("msg")
        lines.extend(msg if isinstance(msg, list) else [msg] if isinstance(msg, str) else [])
    return lines


def failures(document: dict) -> list[str]:
    return [f"{name}: {result.get('msg')}" for name, result in results(document) if result.get("failed")]


@pytestmark_playbook
def test_the_hidden_python3_apt_reproduces_the_field_failure(tmp_path):
    """The simulation is the field's host: apt itself refuses check mode there (the unchanged apt task)."""
    play = tmp_path / "apt.yml"
    task = {"name": "An apt task as the roles had it", "ansible.builtin.apt": {"name": "pciutils"}}
    play.write_text(yaml.safe_dump([{"hosts": "a800_servers", "gather_facts": False, "tasks": [task]}]))
    inv = inventory(tmp_path)
    run, document = playbook(inv, play)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert failures(document) == [
        "An apt task as the roles had it: python3-apt must be installed to use check mode. If run normally this "
        "module can auto-install it, see the auto_install_module_deps option."
    ]
    run, document = playbook(inv, play, hide_python_apt=False)
    assert run.returncode == 0, failures(document)  # unhidden, apt respawns under /usr/bin/python3 and previews


@pytestmark_playbook
def test_the_host_phase_previews_in_check_mode_without_python3_apt(tmp_path):
    before = host_state()
    run, document = playbook(
        inventory(tmp_path, host_tuning_disable_acs=True, host_tuning_acs_method="setpci",
                  nvidia_driver_fabricmanager="always"),
        ROOT / "playbooks" / "host.yml",
    )  # fmt: skip
    assert run.returncode == 0, "\n".join(failures(document)) or run.stdout[-3000:] + run.stderr[-3000:]
    assert document["stats"]["a800-check"]["failures"] == 0
    assert host_state() == before  # changed nothing
    said = messages(document)
    # what dpkg tells (this machine has none of these packages; the versions are the BOM's and the release's)
    for line in [
        "would install python3-debian (installed: none",
        "would install nvidia-driver-pinning-580.95.05 (installed: none",
        "would install nvidia-driver-cuda=580.95.05-* (installed: none",
        "would install nvidia-kernel-open-dkms=580.95.05-* (installed: none",
        "would install nvidia-fabricmanager=580.95.05-* (installed: none",
        "would install nvidia-container-toolkit=1.17.8-1 (installed: none",
        "would install libnvidia-container1=1.17.8-1 (installed: none",
        "would install pciutils (installed: none",
    ]:
        assert any(s.startswith(f"{PREFIX}: {line}") for s in said), line
    assert any(s.startswith(f"{PREFIX}: would install linux-headers-") for s in said)
    # nothing of NVIDIA's is in this machine's apt lists: check mode added no repository
    assert f"{PREFIX}: would install nvidia-driver-cuda=580.95.05-* (installed: none; not in apt's lists now)" in said
    # what it cannot tell, once per role
    for role in ("nvidia_driver", "container_runtime", "host_tuning"):
        assert len([s for s in said if s.startswith(f"not previewed without python3-apt ({role})")]) == 1, role
    assert any(
        s.startswith("check mode without python3-debian: would add /etc/apt/sources.list.d/nvidia-cuda.sources")
        for s in said
    )
    assert any(
        s.startswith("check mode: the running driver is not loaded and the driver to run is 580.95.05") for s in said
    )
    # the apt tasks themselves were skipped, and the holds and units of packages to come were previewed
    ran = results(document)
    apt = [r for name, r in ran if name.startswith(("Install the pinned driver", "Install the four toolkit"))]
    assert apt and all(r.get("skipped") for r in apt)
    holds = [
        r for name, r in ran if name in ("Hold the driver packages", "Hold the toolkit packages", "Hold Fabric Manager")
    ]
    assert holds and all(r.get("changed") and not r.get("failed") for r in holds)
    # the preflight at the end names what check mode needs
    table = next(r["msg"] for name, r in ran if name == "Show the preflight checks")
    assert any(
        line.startswith("WARN") and "python3_apt" in line and "previews apt changes from dpkg only" in line
        for line in table
    ), table


@pytestmark_playbook
def test_a_bare_hosts_docker_engine_is_previewed_in_check_mode(tmp_path):
    before = host_state()
    run, document = playbook(
        inventory(tmp_path, check_mode_engine_package="a800-check-engine", check_mode_engine_version="29.1.3-1"),
        CHECK_MODE / "docker.yml",
    )
    assert run.returncode == 0, "\n".join(failures(document)) or run.stdout[-3000:] + run.stderr[-3000:]
    assert host_state() == before
    said = messages(document)
    assert f"{PREFIX}: would install a800-check-engine=29.1.3-1 (installed: none; not in apt's lists now)" in said
    hold = next(r for name, r in results(document) if name == "Hold the Docker engine")
    assert hold["changed"] and not hold.get("failed")  # dpkg does not know it yet: the real run holds it
