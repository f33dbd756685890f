"""Which hosts run side by side in the host and serve phases (plugins/filter/rolling.py), and the batches Ansible
cuts from the phases' own `hosts` and `serial` (playbooks/host.yml, playbooks/serve.yml) on a real ansible-core run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.rolling import container_runtime_plan, host_plan, roll_batches
from conftest import ROOT

TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1"]  # fmt: skip
VERSION = "1.17.8-1"
PROXY = "[Service]\nEnvironment=HTTP_PROXY=http://proxy.example:3128\n"


def dpkg(versions: dict[str, str], status: str = "ii") -> str:
    """What `dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'` prints (the abbreviation ends in a
    space; a package never installed is not listed)."""
    return "".join(f"{name} {version} {status} \n" for name, version in versions.items())


def runtime(proxy_wanted: str = PROXY, **now) -> dict:
    base = {"dockerd": True, "toolkit": dpkg(dict.fromkeys(TOOLKIT, VERSION)), "proxy_now": PROXY}
    return container_runtime_plan(base | {"daemon_json": "none"} | now, TOOLKIT, VERSION, proxy_wanted)


def test_batches_put_the_quiet_hosts_first_then_roll_the_rest():
    assert roll_batches(["h2", "h4"], 1) == [2, 1]
    assert roll_batches([], 1) == [1]  # never a first batch of 0: Ansible would run every host at once
    assert roll_batches(None, "100%") == ["100%"]
    assert roll_batches(["h2"], [1, "50%"]) == [1, 1, "50%"]


def test_an_empty_list_of_rolling_batches_is_refused():
    with pytest.raises(Exception, match="empty"):
        roll_batches(["h1"], [])


def test_a_runtime_at_its_versions_restarts_nothing():
    assert runtime() == {"restart": False, "reasons": [], "toolkit_current": True}
    # SIGHUP: containers untouched
    assert runtime(daemon_json="reload") == {"restart": False, "reasons": [], "toolkit_current": True}


@pytest.mark.parametrize(
    ("toolkit", "current"),
    [
        (dict.fromkeys(TOOLKIT, VERSION), True),
        (dict.fromkeys(TOOLKIT, VERSION) | {"libnvidia-container1": "1.17.7-1"}, False),  # one at another version
        ({p: VERSION for p in TOOLKIT[:3]}, False),  # one missing
    ],
)  # fmt: skip
def test_the_toolkit_install_is_skipped_only_when_every_package_is_at_the_version(toolkit, current):
    """roles/container_runtime/tasks/main.yml skips its apt install on toolkit_current: apt would change nothing."""
    assert runtime(toolkit=dpkg(toolkit))["toolkit_current"] is current
    assert runtime(toolkit=dpkg(dict.fromkeys(TOOLKIT, VERSION), status="rc"))["toolkit_current"] is False
    held = dpkg(dict.fromkeys(TOOLKIT, VERSION), status="hi")
    assert runtime(toolkit=held)["toolkit_current"] is True  # on hold, installed: apt would change nothing either


@pytest.mark.parametrize(
    ("now", "says"),
    [
        ({"dockerd": False}, "no Docker engine is installed"),
        ({"toolkit": dpkg(dict.fromkeys(TOOLKIT, VERSION) | {"libnvidia-container1": "1.17.7-1"})},
         "libnvidia-container1 1.17.7-1"),
        ({"toolkit": dpkg({p: VERSION for p in TOOLKIT[:3]})}, "libnvidia-container1 not installed"),
        ({"toolkit": dpkg(dict.fromkeys(TOOLKIT, VERSION), status="rc")}, "nvidia-container-toolkit not installed"),
        ({"proxy_now": ""}, "proxy drop-in changes"),
        ({"daemon_json": "restart"}, "a reload does not apply"),
    ],
)  # fmt: skip
def test_what_restarts_dockerd_is_named(now, says):
    plan = runtime(**now)
    assert plan["restart"] is True
    assert any(says in reason for reason in plan["reasons"]), plan["reasons"]


def test_a_removed_proxy_is_a_change():
    assert runtime(proxy_wanted="")["restart"] is True
    assert runtime(proxy_wanted="", proxy_now="")["restart"] is False


def test_a_host_runs_side_by_side_only_when_nothing_takes_it_down():
    stays = {"reboot": False, "detail": "driver 580.95.05 runs and stays: no reboot"}
    reboots = {"reboot": True, "detail": "no driver runs: the install ends with a reboot"}
    quiet = host_plan(stays, runtime(), True)
    assert quiet["side_by_side"] is True and "580.95.05" in quiet["detail"] and quiet["detail"].startswith("serving")
    assert quiet["serving_undisturbed"] is True  # its running server proves the GPUs in a container
    assert host_plan(stays, runtime(), False)["serving_undisturbed"] is False  # nothing runs: the check runs
    assert host_plan(reboots, runtime(), True) == {
        "side_by_side": False,
        "serving_undisturbed": False,
        "detail": "serving; rolls: no driver runs: the install ends with a reboot",
    }
    restart = host_plan(stays, runtime(daemon_json="restart"), False)
    assert restart["side_by_side"] is False and restart["detail"].startswith("not serving; rolls: daemon.json")
    assert restart["detail"].endswith("(driver 580.95.05 runs and stays: no reboot)")  # the driver's verdict too
    assert restart["serving_undisturbed"] is False
    assert host_plan(None, runtime(), True)["side_by_side"] is False  # not planned: rolls


def ansible_playbook(where: Path, play: list, *args: str) -> tuple[int, str]:
    """`play` written to where/play.yml and run there by ansible-playbook with the collection: rc and the output
    (stdout, then stderr), plain whatever the caller's colour settings."""
    (where / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = os.environ | {"ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "ANSIBLE_NOCOLOR": "1",
                        "ANSIBLE_FORCE_COLOR": "0"}  # fmt: skip
    run = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), *args, "play.yml"],
        cwd=where, capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    return run.returncode, re.sub(r"\x1b\[[0-9;]*m", "", run.stdout + run.stderr)


def phase_play(playbook: str, name: str) -> dict:
    plays = yaml.safe_load((ROOT / playbook).read_text())
    return next(play for play in plays if play["name"] == name)


@pytest.mark.parametrize(
    ("playbook", "name", "group"),
    [
        ("playbooks/host.yml", "Host - NVIDIA driver, container runtime and Docker, host tuning",
         "a800_run_host_side_by_side"),
        ("playbooks/serve.yml", "Serve - the vLLM server", "a800_run_serve_side_by_side"),
    ],
)  # fmt: skip
def test_the_phase_runs_its_quiet_hosts_as_one_batch_then_rolls_the_rest(tmp_path: Path, playbook, name, group):
    """The phase's own `hosts` and `serial`, after a group_by as its plan does, on ansible-core: hosts h2 and h4 are
    quiet, h1 and h3 are not, a800_host_batch is 1 (the serve phase rolls one at a time anyway)."""
    play = phase_play(playbook, name)
    assert group in play["hosts"] and group in str(play["serial"])
    inventory = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
            "children": {
                "a800_servers": {"hosts": {h: {"quiet": h in ("h2", "h4")} for h in ("h1", "h2", "h3", "h4")}}
            },
        }
    }
    test_playbook = [
        {"name": "plan", "hosts": "a800_servers", "gather_facts": False,
         "tasks": [{"ansible.builtin.group_by": {"key": f"{{{{ '{group}' if quiet else 'rolling' }}}}"}}]},
        {"name": "phase", "hosts": play["hosts"], "serial": play["serial"], "gather_facts": False,
         "tasks": [{"name": "batch", "ansible.builtin.debug": {"msg": "in this batch"}}]},
    ]  # fmt: skip
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    rc, out = ansible_playbook(tmp_path, test_playbook, "-i", "inventory.yml")
    assert rc == 0, out[-5000:]
    # The hosts of one batch run side by side: they print in the order they finish, which the load decides.
    batches = [sorted(re.findall(r"^ok: \[(h\d)\]", part, re.M)) for part in out.split("TASK [batch]")[1:]]
    assert batches == [["h2", "h4"], ["h1"], ["h3"]], out[-3000:]


@pytest.mark.parametrize(
    ("side_by_side", "says"),
    [
        (True, "runs beside other hosts, because the host phase's plan found that its driver would not reboot"),
        (False, "is reached over a local connection: Ansible will not reboot the machine it runs on"),
    ],
)
def test_a_host_planned_side_by_side_never_reboots(tmp_path: Path, side_by_side, says):
    """roles/nvidia_driver/tasks/reboot.yml with the reboot permitted: a host the plan put side by side stops before
    the reboot. (Over a local connection the next guard stops it anyway, so this test never reboots anything.)"""
    play = [{
        "name": "reboot guard", "hosts": "localhost", "gather_facts": False,
        "vars": {"nvidia_driver_reboot_allowed": True, "nvidia_driver_drain_from": [],
                 "__nvidia_driver_decision": {"version": "580.95.05"},
                 "gpu_facts": {"driver_loaded": True, "driver_version": "570.86.15"},
                 "host_plan": {"side_by_side": side_by_side, "detail": "serving; nothing disruptive"}},
        "tasks": [{"ansible.builtin.include_tasks": str(ROOT / "roles/nvidia_driver/tasks/reboot.yml")}],
    }]  # fmt: skip
    rc, out = ansible_playbook(tmp_path, play, "-i", "localhost,", "-c", "local",
                               "-e", f"ansible_python_interpreter={sys.executable}")  # fmt: skip
    said = " ".join(out.split())
    assert rc == 2, said[-3000:]
    assert says in said, said[-3000:]
    assert "TASK [Reboot to load the pinned driver]" not in out


@pytest.mark.parametrize("there", [True, False])
def test_the_proxy_drop_in_is_removed_only_where_the_plan_read_one(tmp_path: Path, there):
    """roles/container_runtime/tasks/proxy.yml without a proxy, after the plan's own read of the drop-in (host_read in
    tasks/plan.yml): a drop-in that is there is removed (dockerd restarts), and where the plan read none the removal is
    not asked (no module run). The role's two handlers are stood in for by debug tasks of their names."""
    dropin = tmp_path / "a800-proxy.conf"
    if there:
        dropin.write_text('[Service]\nEnvironment="HTTP_PROXY=http://proxy.example:3128"\n')
    rc, out = run_proxy_yml(tmp_path, dropin, proxy={})
    assert rc == 0, out[-3000:]
    removal = out.split("TASK [Remove dockerd's proxy drop-in (no proxy set)]")[1].split("TASK [")[0]
    assert ("changed: [localhost]" if there else "skipping: [localhost]") in removal, out[-3000:]
    assert not dropin.exists()
    assert ("stand-in for container_runtime restart docker" in out) is there


@pytest.mark.parametrize("now", ["as written", "another proxy", "none"])
def test_the_proxy_drop_in_is_written_only_where_the_plan_read_another(tmp_path: Path, now):
    """The same with a proxy set: the plan read the drop-in as proxy.yml would write it, so the write is skipped (no
    module run) and dockerd keeps running; another proxy's drop-in, or none, is written and dockerd restarts."""
    proxy = {"http": "http://proxy.example:3128", "no_proxy": "localhost,127.0.0.1"}
    dropin = tmp_path / "a800-proxy.conf"
    if now != "none":
        rc, out = run_proxy_yml(tmp_path / "first", dropin, proxy=proxy)  # writes it as the role writes it
        assert rc == 0 and dropin.exists(), out[-3000:]
        if now == "another proxy":
            dropin.write_text(dropin.read_text().replace("proxy.example", "old-proxy.example"))
    written = dropin.read_text() if dropin.exists() else ""
    rc, out = run_proxy_yml(tmp_path, dropin, proxy=proxy)
    assert rc == 0, out[-3000:]
    write = out.split("TASK [Write dockerd's proxy drop-in]")[1].split("TASK [")[0]
    assert ("skipping: [localhost]" if now == "as written" else "changed: [localhost]") in write, out[-3000:]
    assert ("stand-in for container_runtime restart docker" in out) is (now != "as written")
    assert "proxy.example:3128" in dropin.read_text() and "old-proxy" not in dropin.read_text()
    assert (dropin.read_text() == written) is (now == "as written")


def run_proxy_yml(tmp_path: Path, dropin: Path, proxy: dict) -> tuple[int, str]:
    """The plan's read (tasks/plan.yml) then tasks/proxy.yml, with the role's vars and its defaults' paths under
    tmp_path."""
    tmp_path.mkdir(exist_ok=True)
    plan = yaml.safe_load((ROOT / "roles/container_runtime/tasks/plan.yml").read_text())
    read = next(task for task in plan if "a800.vllm.host_read" in task)
    play = [{
        "name": "proxy", "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROOT / "roles/container_runtime/vars/main.yml")],
        "vars": {"container_runtime_proxy": proxy, "container_runtime_proxy_dropin": str(dropin),
                 "container_runtime_dev_char_udev_rule": str(tmp_path / "71-nvidia-dev-char.rules"),
                 "container_runtime_daemon_json": str(tmp_path / "daemon.json"),
                 "container_runtime_cdi_spec": str(tmp_path / "cdi" / "nvidia.yaml")},
        "tasks": [read, {"ansible.builtin.include_tasks": str(ROOT / "roles/container_runtime/tasks/proxy.yml")}],
        "handlers": [{"name": n, "ansible.builtin.debug": {"msg": f"stand-in for {n}"}}
                     for n in ("container_runtime systemd units", "container_runtime restart docker")],
    }]  # fmt: skip
    return ansible_playbook(tmp_path, play, "-i", "localhost,", "-c", "local",
                            "-e", f"ansible_python_interpreter={sys.executable}")  # fmt: skip
