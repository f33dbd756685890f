"""The test bed's double of "GPUs lost on systemctl daemon-reload" (docs/testbed.md): the stand-in hook's protection
decision and record, the sim host's generator marking unprotected containers, the stand-in
`nvidia-ctk system create-dev-char-symlinks`, and the injected nvidia-smi failing as NVML does.

Pure Python on temporary directories: device nodes are stood in for by links to /dev/null and /dev/zero (real
character devices), except where a test needs mknod (then it runs only as root, as on the CI machines).
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, STANDIN_NVIDIA_SMI, load_script

BIN = ROOT / "tests" / "testbed" / "standin-nvidia" / "bin"
HOOK_PATH = BIN / "nvidia-container-runtime-hook"
CTK_PATH = BIN / "nvidia-ctk"
GENERATOR_PATH = ROOT / "tests" / "testbed" / "sim-host" / "standin_runc_reload.py"
DEVICES_PATH = ROOT / "tests" / "testbed" / "sim-host" / "standin_nvidia_devices.py"
NVML_LOST = "Failed to initialize NVML: Unknown Error"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root (the CI machines run as root)")


@pytest.fixture(scope="module")
def hook():
    return load_script(HOOK_PATH, "standin_hook")


@pytest.fixture(scope="module")
def generator():
    return load_script(GENERATOR_PATH, "standin_runc_reload")


@pytest.fixture(scope="module")
def smi():
    return load_script(STANDIN_NVIDIA_SMI, "standin_nvidia_smi")


def fake_dev(tmp_path: Path, gpus: int = 2, missing: tuple[str, ...] = ()) -> Path:
    """A /dev whose NVIDIA nodes are links to real character devices (GPUs to /dev/null, the rest to /dev/zero)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    names = [f"nvidia{i}" for i in range(gpus)] + ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
    for name in names:
        if name not in missing:
            (dev / name).symlink_to("/dev/null" if name.startswith("nvidia") and name[6:].isdigit() else "/dev/zero")
    return dev


def link_all(hook, dev: Path, dev_char: Path, indices: list[int], skip: tuple[str, ...] = ()) -> None:
    """/dev/char links for every device the container gets, as create-dev-char-symlinks would (absolute targets)."""
    dev_char.mkdir(exist_ok=True)
    for path, major, minor in hook.container_devices(indices, dev):
        link = dev_char / f"{major}:{minor}"
        if Path(path).name not in skip and not link.is_symlink():
            link.symlink_to(path)


# --- the hook: which devices, protected or not ----------------------------------------------------------------------


def test_visible_indices(hook):
    assert hook.visible_indices("all", 8) == list(range(8))
    assert hook.visible_indices("0,2", 8) == [0, 2]
    assert hook.visible_indices("GPU-aaa,GPU-bbb", 8) == [0, 1]


def test_container_devices_are_its_gpus_and_the_control_nodes(hook, tmp_path):
    devices = hook.container_devices([1], tmp_path / "nodev")  # nodes absent: the stand-in driver's numbers
    assert devices == [
        (str(tmp_path / "nodev" / "nvidia1"), 195, 1),
        (str(tmp_path / "nodev" / "nvidiactl"), 195, 255),
        (str(tmp_path / "nodev" / "nvidia-uvm"), 510, 0),
        (str(tmp_path / "nodev" / "nvidia-uvm-tools"), 510, 1),
    ]
    null = os.stat("/dev/null").st_rdev
    devices = hook.container_devices([0], fake_dev(tmp_path))  # nodes present: their own numbers
    assert devices[0][1:] == (os.major(null), os.minor(null))


def test_unprotected_without_dev_char(hook, tmp_path):
    dev = fake_dev(tmp_path)
    protected, detail = hook.protection(hook.container_devices([0, 1], dev), tmp_path / "char")
    assert protected is False
    assert not any(d["ok"] for d in detail)


def test_protected_when_every_node_has_its_link(hook, tmp_path):
    dev, dev_char = fake_dev(tmp_path), tmp_path / "char"
    link_all(hook, dev, dev_char, [0, 1])
    protected, detail = hook.protection(hook.container_devices([0, 1], dev), dev_char)
    assert protected is True, detail
    assert all(Path(d["link"]).parent == dev_char for d in detail)


def test_one_missing_link_is_unprotected(hook, tmp_path):
    # /dev/zero stands in for the three control nodes, so they share one link: drop the GPU's instead
    dev, dev_char = fake_dev(tmp_path), tmp_path / "char"
    link_all(hook, dev, dev_char, [1])  # GPU 1's link (195:1 here: /dev/null's numbers) ...
    protected, _ = hook.protection(hook.container_devices([0, 1], dev), dev_char)
    assert protected is True  # ... /dev/null stands in for both GPUs: same numbers, same link
    (dev_char / f"{os.major(os.stat('/dev/null').st_rdev)}:{os.minor(os.stat('/dev/null').st_rdev)}").unlink()
    protected, detail = hook.protection(hook.container_devices([0, 1], dev), dev_char)
    assert protected is False
    assert [d["ok"] for d in detail] == [False, False, True, True, True]


def test_missing_node_or_wrong_target_is_unprotected(hook, tmp_path):
    dev, dev_char = fake_dev(tmp_path, missing=("nvidia-uvm",)), tmp_path / "char"
    link_all(hook, dev, dev_char, [0])
    assert hook.protection(hook.container_devices([0], dev), dev_char)[0] is False  # no node, no link resolves to it
    devices = [(str(dev / "nvidia0"), 1, 3)]
    (tmp_path / "char2").mkdir()
    (tmp_path / "char2" / "1:3").symlink_to("/dev/zero")  # a link to another device
    assert hook.protection(devices, tmp_path / "char2")[0] is False
    (tmp_path / "char3").mkdir()
    (tmp_path / "char3" / "1:3").symlink_to(os.path.relpath(dev / "nvidia0", tmp_path / "char3"))  # relative: fine
    assert hook.protection(devices, tmp_path / "char3")[0] is True


def bundle_for(tmp_path: Path, cid: str, env: list[str]) -> tuple[Path, Path]:
    bundle, rootfs = tmp_path / "bundles" / cid, tmp_path / "rootfs" / cid
    bundle.mkdir(parents=True)
    rootfs.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps({"root": {"path": str(rootfs)}, "process": {"env": env}}))
    return bundle, rootfs


@pytest.fixture
def run_hook(hook, tmp_path, monkeypatch):
    """run_hook(cid, env, linked=False): the hook's prestart for a container, on a fake /dev; returns its record."""
    dev = fake_dev(tmp_path, gpus=8)
    monkeypatch.setattr(hook, "HW", tmp_path / "gpus.json")
    monkeypatch.setattr(hook, "RECORDS", tmp_path / "records")
    monkeypatch.setattr(hook, "DEV", dev)
    monkeypatch.setattr(hook, "DEV_CHAR", tmp_path / "char")
    monkeypatch.setattr(hook.shutil, "which", lambda _name: None)  # no stand-in nvidia-smi to inject here

    def run(cid: str, env: list[str], linked: bool = False) -> dict | None:
        if linked:
            link_all(hook, dev, tmp_path / "char", list(range(8)))
        bundle, _ = bundle_for(tmp_path, cid, env)
        state = {"ociVersion": "1.0.2", "id": cid, "status": "creating", "pid": os.getpid(), "bundle": str(bundle)}
        monkeypatch.setattr(sys, "argv", [str(HOOK_PATH), "prestart"])
        monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(state)))
        assert hook.main() == 0
        path = tmp_path / "records" / f"{cid}.json"
        return json.loads(path.read_text()) if path.exists() else None

    return run


def test_hook_records_unprotected_container(run_hook, tmp_path):
    rec = run_hook("c1", ["NVIDIA_VISIBLE_DEVICES=all"])
    assert rec["protected"] is False
    assert rec["rootfs"] == str(tmp_path / "rootfs" / "c1")
    assert rec["bundle"] == str(tmp_path / "bundles" / "c1")
    assert len(rec["devices"]) == 8 + 3


def test_hook_records_protected_container(run_hook):
    rec = run_hook("c2", ["NVIDIA_VISIBLE_DEVICES=0,1"], linked=True)
    assert rec["protected"] is True
    assert [Path(d["path"]).name for d in rec["devices"]] == [
        "nvidia0",
        "nvidia1",
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
    ]


def test_hook_ignores_containers_without_gpus(run_hook):
    assert run_hook("c3", ["PATH=/bin"]) is None
    assert run_hook("c4", ["NVIDIA_VISIBLE_DEVICES=void"]) is None


def test_restarted_container_loses_its_old_marker(run_hook, tmp_path):
    marker = tmp_path / "rootfs" / "c5" / "etc/nvidia-standin/nvml-lost"  # left from before the restart
    marker.parent.mkdir(parents=True)
    marker.write_text("x")
    rec = run_hook("c5", ["NVIDIA_VISIBLE_DEVICES=0"])
    assert not marker.exists()
    assert rec["nvml_lost"] is False


# --- the generator: what one daemon-reload does ----------------------------------------------------------------------


def write_record(records: Path, tmp_path: Path, cid: str, protected: bool, pid: int | None = None) -> Path:
    records.mkdir(exist_ok=True)
    bundle, rootfs = tmp_path / "b" / cid, tmp_path / "r" / cid
    bundle.mkdir(parents=True)
    rootfs.mkdir(parents=True)
    (bundle / "config.json").write_text("{}")
    rec = {"id": cid, "pid": pid if pid is not None else os.getpid(), "bundle": str(bundle), "rootfs": str(rootfs)}
    (records / f"{cid}.json").write_text(json.dumps({**rec, "protected": protected, "nvml_lost": False}))
    return rootfs


def test_reload_marks_unprotected_and_spares_protected(generator, tmp_path):
    records = tmp_path / "records"
    lost = write_record(records, tmp_path, "unprotected", False)
    kept = write_record(records, tmp_path, "protected", True)
    result = generator.reload(records)
    assert result == {"dropped": [], "marked": ["unprotected"], "protected": ["protected"], "errors": []}
    assert (lost / "etc/nvidia-standin/nvml-lost").exists()
    assert not (kept / "etc/nvidia-standin/nvml-lost").exists()
    assert json.loads((records / "unprotected.json").read_text())["nvml_lost"] is True
    # every reload re-applies the rules: the lost one stays lost, the protected one stays fine
    again = generator.reload(records)
    assert again["marked"] == [] and again["protected"] == ["protected"] and again["errors"] == []
    assert (lost / "etc/nvidia-standin/nvml-lost").exists()


def test_reload_drops_records_of_gone_containers(generator, tmp_path):
    records = tmp_path / "records"
    write_record(records, tmp_path, "removed", False)
    write_record(records, tmp_path, "exited", False, pid=2**22 + 1)  # above pid_max: no such process
    (tmp_path / "b" / "removed" / "config.json").unlink()  # docker rm: the bundle is gone
    result = generator.reload(records)
    assert sorted(result["dropped"]) == ["exited", "removed"]
    assert result["marked"] == []
    assert list(records.glob("*.json")) == []
    assert not (tmp_path / "r" / "removed" / "etc").exists()


def test_reload_survives_bad_records_and_is_bounded(generator, tmp_path, monkeypatch):
    records = tmp_path / "records"
    write_record(records, tmp_path, "good", False)
    (records / "bad.json").write_text("{not json")
    (records / "odd.json").write_text(json.dumps({"bundle": str(tmp_path / "b" / "good")}))  # no rootfs
    result = generator.reload(records)
    assert result["marked"] == ["good"]
    assert len(result["errors"]) == 2
    assert generator.reload(records, deadline_s=-1)["errors"] == ["deadline reached"]
    # main() never fails a reload, whatever the state of /run
    monkeypatch.setattr(generator, "RECORDS", tmp_path / "records" / "bad.json")
    monkeypatch.setattr(generator, "LOG", tmp_path / "nodir" / "x" / "reload.log")
    assert generator.main() == 0
    assert generator.reload(tmp_path / "none")["errors"] == []


def test_generator_as_systemd_runs_it(tmp_path):
    """Run as a generator (three output directories, nothing on /run to do): exit 0, no units, under a second."""
    dirs = [str(tmp_path / d) for d in ("normal", "early", "late")]
    run = subprocess.run([sys.executable, str(GENERATOR_PATH), *dirs], capture_output=True, text=True, timeout=10)
    assert run.returncode == 0, run.stderr
    assert not any(Path(d).exists() and any(Path(d).iterdir()) for d in dirs)


# --- the injected nvidia-smi after the loss ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["-L"], ["--query-gpu=index,name", "--format=csv"], ["-q"], ["topo", "-m"], ["--version"], []],
    ids=["L", "query", "q", "topo", "version", "bare"],
)
def test_nvidia_smi_after_the_loss(tmp_path, args):
    hw = tmp_path / "etc" / "gpus.json"
    hw.parent.mkdir()
    hw.write_text(json.dumps({"driver": "580.95.05"}))
    env = dict(os.environ, NVIDIA_STANDIN_CONFIG=str(hw))
    cmd = [sys.executable, str(STANDIN_NVIDIA_SMI), *args]
    assert subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30).returncode == 0
    (hw.parent / "nvml-lost").write_text("x")
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
    assert (run.returncode, run.stdout, run.stderr) == (255, NVML_LOST + "\n", "")


@pytest.mark.parametrize("python", [True, False], ids=["with-python", "busybox"])
def test_injected_wrapper_after_the_loss(hook, tmp_path, python):
    """The wrapper the hook writes into the container, with its absolute paths moved under tmp_path."""
    etc, lib, bindir = tmp_path / "etc/nvidia-standin", tmp_path / "usr/lib/nvidia-standin", tmp_path / "bin"
    for d in (etc, lib, bindir):
        d.mkdir(parents=True)
    (lib / "L.txt").write_text("GPU 0: NVIDIA A800 80GB PCIe (UUID: GPU-x)\n")
    (lib / "nvidia-smi.py").write_text("print('python nvidia-smi')\n")
    for tool in ["cat"] + (["python3"] if python else []):
        (bindir / tool).symlink_to(sys.executable if tool == "python3" else "/bin/cat")
    text = hook.WRAPPER.replace("/etc/nvidia-standin", str(etc)).replace("/usr/lib/nvidia-standin", str(lib))
    wrapper = tmp_path / "nvidia-smi"
    wrapper.write_text(text)
    env = {"PATH": str(bindir)}

    def run():
        return subprocess.run(["/bin/sh", str(wrapper), "-L"], env=env, capture_output=True, text=True, timeout=30)

    before = run()
    assert before.returncode == 0
    assert before.stdout == ("python nvidia-smi\n" if python else (lib / "L.txt").read_text())
    (etc / "nvml-lost").write_text("x")
    after = run()
    assert (after.returncode, after.stdout) == (255, NVML_LOST + "\n")


# --- the stand-in driver's device nodes ----------------------------------------------------------------------------


def test_device_nodes_of_the_stand_in_driver(smi):
    assert smi.device_nodes(2) == [
        ("nvidia0", 195, 0),
        ("nvidia1", 195, 1),
        ("nvidiactl", 195, 255),
        ("nvidia-uvm", 510, 0),
        ("nvidia-uvm-tools", 510, 1),
    ]


def test_the_doubles_agree_on_the_device_numbers(smi, hook):
    ctk = load_script(CTK_PATH, "standin_ctk")
    assert smi.NVIDIA_MAJOR == hook.NVIDIA_MAJOR == ctk.NVIDIA_MAJOR == 195
    assert smi.UVM_MAJOR == hook.UVM_MAJOR == ctk.UVM_MAJOR
    links = {(Path(p).name, ma, mi) for p, ma, mi in ctk.all_possible("/", 8)}
    assert set(smi.device_nodes(8)) <= links
    assert {
        (Path(p).name, ma, mi) for p, ma, mi in hook.container_devices(list(range(8)), Path("/nonexistent"))
    } == set(smi.device_nodes(8))


@as_root
def test_ensure_device_nodes_creates_the_missing_ones(smi, tmp_path):
    created = smi.ensure_device_nodes(2, tmp_path)
    assert sorted(Path(p).name for p in created) == sorted(n for n, _, _ in smi.device_nodes(2))
    st = (tmp_path / "nvidiactl").stat()
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, 255)
    assert stat.S_IMODE(st.st_mode) == 0o666
    assert smi.ensure_device_nodes(2, tmp_path) == []  # idempotent
    assert not (tmp_path / "char").exists()  # never a /dev/char link


# --- nvidia-ctk system create-dev-char-symlinks -------------------------------------------------------------------


def ctk(tmp_path: Path, *args: str, count: int = 2) -> subprocess.CompletedProcess:
    hw = tmp_path / "gpus.json"
    hw.write_text(json.dumps({"count": count}))
    env = dict(os.environ, NVIDIA_STANDIN_CONFIG=str(hw))
    return subprocess.run(
        [sys.executable, str(CTK_PATH), "system", "create-dev-char-symlinks", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_create_all_links_every_possible_node(tmp_path):
    char, root = tmp_path / "char", tmp_path / "root"
    run = ctk(tmp_path, "--create-all", "--dev-char-path", str(char), f"--driver-root={root}")
    assert run.returncode == 0, run.stderr
    names = ["nvidia-modeset", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1"]
    numbers = ["195:254", "195:255", "510:0", "510:1", "195:0", "195:1"]
    assert run.stderr.splitlines() == [
        f"INFO[0000] Creating link {char}/{num} => {root}/dev/{name}" for num, name in zip(numbers, names, strict=True)
    ]
    assert run.stdout == ""
    for num, name in zip(numbers, names, strict=True):
        target = os.readlink(char / num)
        assert os.path.isabs(target) and target == f"{root}/dev/{name}"
    again = ctk(tmp_path, "--create-all", "--dev-char-path", str(char), f"--driver-root={root}")
    assert again.returncode == 0
    warnings = [line for line in again.stderr.splitlines() if line.startswith("WARN")]
    assert (
        warnings[1] == f"WARN[0000] Could not create symlink: symlink {root}/dev/nvidiactl {char}/195:255: file exists"
    )
    assert len(warnings) == 6


def test_create_all_default_root_targets_dev(tmp_path):
    char = tmp_path / "char"
    assert ctk(tmp_path, "--create-all", f"--dev-char-path={char}", count=8).returncode == 0
    assert os.readlink(char / "195:0") == "/dev/nvidia0"
    assert os.readlink(char / "195:255") == "/dev/nvidiactl"
    assert os.readlink(char / "510:0") == "/dev/nvidia-uvm"
    assert len(list(char.iterdir())) == 8 + 4


def test_dry_run_creates_nothing(tmp_path):
    char = tmp_path / "char"
    run = ctk(tmp_path, "--create-all", "--dry-run", "--dev-char-path", str(char))
    assert run.returncode == 0
    assert f"INFO[0000] Creating link {char}/195:0 => /dev/nvidia0" in run.stderr.splitlines()
    assert not char.exists()


def test_flags_only_with_create_all_warn(tmp_path):
    run = ctk(tmp_path, "--create-device-nodes", "--load-kernel-modules", "--dev-char-path", str(tmp_path / "c"))
    assert run.returncode == 0
    assert "WARN[0000] create-device-nodes is only applicable when create-all is set; ignoring" in run.stderr
    assert "WARN[0000] load-kernel-modules is only applicable when create-all is set; ignoring" in run.stderr
    assert ctk(tmp_path, "--no-such-flag").returncode == 1


@as_root
def test_existing_nodes_only_without_create_all(tmp_path):
    root, char = tmp_path / "root", tmp_path / "char"
    (root / "dev").mkdir(parents=True)
    os.mknod(root / "dev/nvidia0", 0o666 | stat.S_IFCHR, os.makedev(195, 0))
    os.mknod(root / "dev/nvidiactl", 0o666 | stat.S_IFCHR, os.makedev(195, 255))
    (root / "dev/nvidia-notadevice").write_text("x")
    run = ctk(tmp_path, "--driver-root", str(root), "--dev-char-path", str(char))
    assert run.returncode == 0, run.stderr
    assert sorted(os.listdir(char)) == ["195:0", "195:255"]


@as_root
def test_links_made_by_ctk_protect_a_container(hook, smi, tmp_path):
    """The three doubles together: the driver's nodes, nvidia-ctk's links, the hook's decision."""
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    smi.ensure_device_nodes(2, root / "dev")
    devices = hook.container_devices([0, 1], root / "dev")
    assert hook.protection(devices, root / "dev/char")[0] is False
    assert (
        ctk(tmp_path, "--create-all", "--driver-root", str(root), "--dev-char-path", str(root / "dev/char")).returncode
        == 0
    )
    assert hook.protection(devices, root / "dev/char")[0] is True


def test_devices_boot_script_without_a_driver_does_nothing(tmp_path, monkeypatch):
    devices = load_script(DEVICES_PATH, "standin_nvidia_devices")
    monkeypatch.setattr(devices, "SMI", tmp_path / "no-nvidia-smi")
    assert devices.main() == 0
