"""Re-runs of the host phase over serving hosts never disturb a server (issue: serving-safe re-runs).

After test_serve.py (file order): a daemon.json change restarts dockerd and the server keeps running with its GPUs
(live-restore); a re-run with nothing changed runs both hosts side by side and reloads and restarts nothing; a
`systemctl daemon-reload` takes the GPUs from a server created without NVIDIA's /dev/char links (the test bed models
systemd's device-rule re-application, docs/testbed.md) and leaves those of a server created with them; a driver pin
change reboots the two hosts one after the other, the second only when the first serves again.
"""

from __future__ import annotations

import json
import subprocess
import time

from test_serve import H1, H2, NAME, batches, http, only_once, playbook, said, started, ts

testinfra_hosts = ["a800_servers"]


def sh(host: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", host, *cmd], capture_output=True, text=True, check=check, timeout=120)


def gpus_in_server(host: str) -> subprocess.CompletedProcess:
    return sh(host, "docker", "exec", NAME, "nvidia-smi", "-L", check=False)


def dockerd(host: str) -> str:
    return sh(host, "systemctl", "show", "-p", "MainPID", "-p", "ExecMainStartTimestampMonotonic", "docker").stdout


def daemon_json(host: str) -> dict:
    return json.loads(sh(host, "cat", "/etc/docker/daemon.json").stdout)


def wait_healthy(host: str, timeout_s: int = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if http(host, "/health")[0] == 200:
            return
        time.sleep(2)
    raise AssertionError(f"{host}: the server did not answer /health within {timeout_s} s")


def boot_time(host: str) -> float:
    """When the simulated host last booted: its container restarts with every reboot."""
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.StartedAt}}", host], capture_output=True, text=True, check=True
    )
    return ts(out.stdout.strip())


def ready_times(host: str) -> list[float]:
    logs = sh(host, "docker", "logs", "-t", NAME).stdout.splitlines()
    return [ts(line.split()[0]) for line in logs if "Application startup complete." in line]


def events(run: subprocess.CompletedProcess, statuses: tuple[str, ...] = ("ok", "changed")) -> list[tuple[str, str]]:
    """(task or handler, host) of every result with one of these statuses, in the order the run printed them."""
    task, found = "", []
    for line in run.stdout.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task = line.split("[", 1)[1].split("]")[0]
        elif line.split(":")[0] in statuses and "[" in line:
            found.append((task, line.split("[", 1)[1].split("]")[0]))
    return found


def changed(run: subprocess.CompletedProcess) -> list[str]:
    return [task for task, _ in events(run, ("changed",))]


def test_both_hosts_serve_again_with_the_rendered_launch(host):
    only_once(host)
    run = playbook()
    assert run.returncode == 0, said(run)[-3000:]
    for h in (H1, H2):
        assert http(h, "/health")[0] == 200
        assert daemon_json(h)["live-restore"] is True
        assert gpus_in_server(h).stdout.count("GPU ") == 8


def test_a_daemon_json_change_restarts_dockerd_and_the_server_keeps_running(host):
    only_once(host)
    before, engine = started(H1), dockerd(H1)
    extra = '{"container_runtime_daemon_extra": {"log-opts": {"max-size": "50m"}}}'
    run = playbook("--limit", H1, "-e", extra, playbook="playbooks/host.yml")
    assert run.returncode == 0, said(run)[-3000:]
    assert "dockerd restarts (log-opts need it; live-restore keeps the running containers)" in said(run)
    assert "container_runtime : Restart Docker (live-restore keeps the running containers)" in changed(run)
    assert dockerd(H1) != engine  # dockerd really restarted
    assert daemon_json(H1)["log-opts"] == {"max-size": "50m"}
    assert started(H1) == before  # ... and the server was never stopped
    assert gpus_in_server(H1).stdout.count("GPU ") == 8
    assert http(H1, "/health")[0] == 200


def test_a_re_run_with_nothing_changed_reloads_and_restarts_nothing(host):
    """The host phase again on both hosts, one of them just past its dockerd restart: nothing to do on either, so
    both run side by side, in one batch, and nothing changes, reloads or restarts (docs/field.md#hosts-side-by-side)."""
    only_once(host)
    before, engine, before_h2 = started(H1), dockerd(H1), started(H2)
    run = playbook(playbook="playbooks/host.yml")
    assert run.returncode == 0, said(run)[-3000:]
    assert batches(run, "Host - NVIDIA driver, container runtime and Docker, host tuning") == [[H1, H2]], said(run)[
        -6000:
    ]
    assert "side by side: serving; nothing disruptive" in said(run)
    assert changed(run) == [], said(run)[-6000:]
    assert dockerd(H1) == engine and started(H1) == before and started(H2) == before_h2
    # neither went down, so neither is waited for (only the hosts that roll wait on /health)
    waited = [(task, h) for task, h in events(run) if task.startswith("Wait until a host that was serving")]
    assert waited == [], waited


def test_a_daemon_reload_takes_the_gpus_of_a_server_created_without_the_links(host):
    """Without NVIDIA's fix: the links removed, the host phase told not to make them, the server re-created."""
    only_once(host)
    sh(H2, "sh", "-c", "rm -f /dev/char/195:* /dev/char/510:*")
    run = playbook("--limit", H2, "-e", '{"container_runtime_dev_char_links": false}', playbook="playbooks/host.yml")
    assert run.returncode == 0, said(run)[-3000:]
    sh(H2, "docker", "restart", NAME)  # created again, now without the links
    wait_healthy(H2)
    assert gpus_in_server(H2).stdout.count("GPU ") == 8
    sh(H2, "systemctl", "daemon-reload")
    lost = gpus_in_server(H2)
    assert lost.returncode != 0
    assert "Failed to initialize NVML: Unknown Error" in lost.stdout + lost.stderr


def test_with_the_links_a_daemon_reload_leaves_the_gpus(host):
    """With NVIDIA's fix (the default): the host phase makes the links; a server created after them keeps its GPUs."""
    only_once(host)
    run = playbook("--limit", H2, playbook="playbooks/host.yml")
    assert run.returncode == 0, said(run)[-3000:]
    assert "container_runtime : Create the /dev/char links" in changed(run)
    assert sh(H2, "test", "-f", "/lib/udev/rules.d/71-nvidia-dev-char.rules", check=False).returncode == 0
    sh(H2, "docker", "restart", NAME)  # NVIDIA: a container that lost its GPUs must be created again
    wait_healthy(H2)
    sh(H2, "systemctl", "daemon-reload")
    kept = gpus_in_server(H2)
    assert kept.returncode == 0 and kept.stdout.count("GPU ") == 8, kept.stdout + kept.stderr


def test_a_driver_pin_change_reboots_the_hosts_one_after_the_other(host):
    only_once(host)
    began = time.time()
    run = playbook(
        "-e",
        "nvidia_driver_version=580.105.08",
        "-e",
        "nvidia_driver_reboot_allowed=true",
        playbook="playbooks/host.yml",
    )
    assert run.returncode == 0, said(run)[-3000:]
    for h in (H1, H2):
        assert boot_time(h) > began  # both rebooted ...
        assert sh(h, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").stdout.split()[0] == (
            "580.105.08"
        )
        assert http(h, "/health")[0] == 200  # ... and serve again
    order = events(run)
    rebooted = [h for task, h in order if task == "nvidia_driver : Reboot to load the pinned driver"]
    assert rebooted == [H1, H2]
    # the wait's name ends with where it waits, e.g. "(publishes 8001 ...)": found by its start
    wait = "Wait until a host that was serving"
    waited = [i for i, (task, h) in enumerate(order) if task.startswith(wait) and h == H1]
    assert waited, order
    h1_served = waited[0]
    assert h1_served < order.index(("nvidia_driver : Reboot to load the pinned driver", H2))
    h1_ready_after_reboot = [t for t in ready_times(H1) if t > boot_time(H1)]
    assert h1_ready_after_reboot, "host 1's server did not start again after its reboot"
    assert boot_time(H2) > h1_ready_after_reboot[0]  # host 2 went down only after host 1 served again
    # in the scenario's fleet each host left the router before its reboot, and came back verified
    for h in (H1, H2):
        assert f"{h}: out of the router on a800-mol-serve-gw" in said(run)
        assert f"{h}: back in the router on a800-mol-serve-gw" in said(run)
    assert ("verify : Judge everything", H1) in order and ("verify : Judge everything", H2) in order
