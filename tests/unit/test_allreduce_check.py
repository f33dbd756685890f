"""The all-reduce check: the real script under torchrun (CPU, Gloo), its output parsed and judged, and the role.

The script runs with the CPU torch of .venv-vllm (installed in CI before these tests). The parser and the
judgement are tested on the real 2x H200 run (tests/fixtures/allreduce/h200-x2*.txt, NCCL over NVLink) and
on small synthetic outputs written inline below.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.a800.vllm.plugins.module_utils import allreduce
from ansible_collections.a800.vllm.plugins.module_utils.allreduce import (
    algbw_gbps,
    bus_factor,
    busbw_gbps,
    evaluate,
    parse_allreduce_output,
    parse_size_line,
)
from conftest import FIXTURES, ROOT

SCRIPT = ROOT / "roles" / "gpu_comm_check" / "files" / "allreduce_check.py"
VLLM_BIN = ROOT / ".venv-vllm" / "bin"
TORCH_PYTHON = VLLM_BIN / "python"
ALLREDUCE = FIXTURES / "allreduce"
LINE = re.compile(
    r"^size_mib=(?P<size>[0-9.]+) ranks=(?P<ranks>\d+) time_ms=(?P<time>[0-9.]+) "
    r"algbw_gbps=(?P<algbw>[0-9.]+) busbw_gbps=(?P<busbw>[0-9.]+)$"
)

needs_torch = pytest.mark.skipif(
    not TORCH_PYTHON.exists(),
    reason=".venv-vllm (CPU torch) is not installed: the CI installs it before these tests run",
)


def read(name: str) -> str:
    return (ALLREDUCE / name).read_text(encoding="utf-8")


def torch_env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


# --- the real script, 2 ranks on Gloo ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_run() -> subprocess.CompletedProcess:
    if not TORCH_PYTHON.exists():
        pytest.skip(".venv-vllm (CPU torch) is not installed: the CI installs it before these tests run")
    return subprocess.run(
        [
            str(TORCH_PYTHON),
            *("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT)),
            *("--sizes-mib", "1,2", "--warmup", "1", "--iters", "3", "--timeout-s", "60"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=torch_env(),
        cwd=ROOT,
    )


@needs_torch
def test_cpu_run_prints_one_line_per_size(cpu_run):
    assert cpu_run.returncode == 0, cpu_run.stdout + cpu_run.stderr
    lines = [LINE.match(line) for line in cpu_run.stdout.splitlines() if line.startswith("size_mib=")]
    assert all(lines), cpu_run.stdout
    assert [m["size"] for m in lines] == ["1", "2"]  # rank 0 alone prints
    assert {m["ranks"] for m in lines} == {"2"}
    result = json.loads(next(line for line in cpu_run.stdout.splitlines() if line.startswith("RESULT "))[7:])
    for m, size in zip(lines, result["sizes"], strict=True):
        assert float(m["time"]) > 0  # a measured duration: a loaded machine only makes it longer
        # the figures printed are the RESULT's (the speed itself is this machine's, printed and not judged)
        # (four significant digits in the line, six in RESULT: a slow machine's 0.3704 GB/s is not 0.37)
        assert float(m["time"]) == pytest.approx(size["time_ms"], rel=1e-3)
        assert float(m["busbw"]) == pytest.approx(size["busbw_gbps"], rel=1e-3)
        assert len(m["busbw"].replace(".", "").lstrip("0")) >= 4, m["busbw"]
        # 2 ranks: busbw = algbw * 2(2-1)/2 = algbw
        assert float(m["busbw"]) == pytest.approx(float(m["algbw"]), rel=1e-3)
        print(f"\nBENCH all-reduce CPU/Gloo 2 ranks: {m['size']} MiB in {m['time']} ms, busbw {m['busbw']} GB/s")


@needs_torch
def test_cpu_run_result_json(cpu_run):
    results = [line for line in cpu_run.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == 1
    result = json.loads(results[0][len("RESULT ") :])
    assert result["backend"] == "gloo" and result["device"] == "cpu" and result["dtype"] == "float32"
    assert result["ranks"] == 2 and result["correct"] is True
    assert result["iters"] == 3 and result["warmup"] == 1 and result["timeout_s"] == 60
    assert result["torch"].startswith("2.") and result["nccl"] is None
    assert [s["size_mib"] for s in result["sizes"]] == [1.0, 2.0]
    for size in result["sizes"]:
        assert size["bytes"] == int(size["size_mib"] * 1024 * 1024)
        # six significant digits whatever the machine's speed: a loaded CI machine's 0.0233 GB/s is not 0.023
        assert size["algbw_gbps"] == pytest.approx(algbw_gbps(size["bytes"], size["time_ms"] / 1e3), rel=1e-4)
        assert size["busbw_gbps"] == pytest.approx(busbw_gbps(size["algbw_gbps"], 2), rel=1e-5)
        assert size["correct"] is True
    assert result["max_busbw_gbps"] == max(s["busbw_gbps"] for s in result["sizes"])


@needs_torch
def test_cpu_run_parsed_and_judged(cpu_run):
    parsed = parse_allreduce_output(cpu_run.stdout)
    assert parsed["found"] and parsed["correct"] and parsed["ranks"] == 2
    assert list(parsed["busbw_gbps"]) == ["1", "2"]
    # the per-size lines and the RESULT JSON say the same
    for line in cpu_run.stdout.splitlines():
        record = parse_size_line(line)
        if record:
            # the line keeps four significant digits (at least two decimals)
            assert parsed["busbw_gbps"][f"{record['size_mib']:g}"] == pytest.approx(record["busbw_gbps"], rel=1e-3)
    run = {"rc": cpu_run.returncode, "stdout": cpu_run.stdout, "stderr": cpu_run.stderr}
    # no bandwidth floor: how fast Gloo is here is the machine's; the floor's verdicts: test_low_bus_bandwidth
    verdict = evaluate(run, min_busbw_gbps=0, timeout_s=60, gpus=2)
    assert verdict["status"] == "pass" and verdict["reason"] == "ok"
    assert verdict["max_busbw_gbps"] == max(parsed["busbw_gbps"].values())
    assert verdict["device"] == "cpu" and verdict["ranks"] == 2


@needs_torch
def test_missing_peer_becomes_a_timeout_error():
    """Rank 1 never comes: the process group timeout turns the wait into an error, and it is judged a hang."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(torch_env(), RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    proc = subprocess.run(
        [str(TORCH_PYTHON), str(SCRIPT), "--sizes-mib", "1", "--timeout-s", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode != 0
    verdict = evaluate({"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}, 8, 300, 2)
    assert verdict["reason"] == "timeout", proc.stderr[-2000:]
    assert "timed out inside NCCL/the process group" in verdict["message"]


@needs_torch
def test_script_bus_factor_matches_nccl_tests():
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(SCRIPT.parent)!r})\n"
        f"import {SCRIPT.stem} as m\n"
        "print(json.dumps([m.bus_factor(n) for n in range(1, 9)]))\n"
    )
    out = subprocess.run([str(TORCH_PYTHON), "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == [bus_factor(n) for n in range(1, 9)]


# --- the formula -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ranks", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_factor(ranks, factor):
    assert bus_factor(ranks) == factor


def test_bandwidths():
    # 1 GiB in 3.2578 ms on 2 ranks (the real H200 run)
    algbw = algbw_gbps(1024**3, 3.2578e-3)
    assert algbw == pytest.approx(329.59, abs=0.01)
    assert busbw_gbps(algbw, 2) == algbw
    assert busbw_gbps(10.0, 8) == pytest.approx(17.5)
    assert algbw_gbps(100, 0) == 0.0


# --- the real 2x H200 run --------------------------------------------------------------------------------


def test_real_h200_run_parsed():
    parsed = parse_allreduce_output(read("h200-x2.txt"))
    assert parsed["found"] and parsed["correct"] and parsed["errors"] == []
    assert parsed["ranks"] == 2
    assert parsed["busbw_gbps"] == {"64": 270.831, "256": 301.48, "1024": 329.586}
    assert parsed["max_busbw_gbps"] == 329.586
    result = parsed["result"]
    assert result["device"] == "NVIDIA H200" and result["backend"] == "nccl" and result["dtype"] == "bfloat16"
    assert result["nccl"] == "2.28.9" and result["torch"] == "2.11.0+cu130" and result["cuda"] == "13.0"
    assert result["p2p_missing"] == [] and result["gpus_visible"] == 2


def test_real_h200_lines_agree_with_result_and_formula():
    text = read("h200-x2.txt")
    records = [r for r in map(parse_size_line, text.splitlines()) if r]
    assert [r["size_mib"] for r in records] == [64, 256, 1024]
    parsed = parse_allreduce_output(text)
    for record, size in zip(records, parsed["sizes"], strict=True):
        assert record["busbw_gbps"] == pytest.approx(size["busbw_gbps"], abs=0.006)
        assert size["algbw_gbps"] == pytest.approx(algbw_gbps(size["bytes"], size["time_ms"] / 1e3), rel=1e-3)
        assert size["busbw_gbps"] == pytest.approx(busbw_gbps(size["algbw_gbps"], 2), abs=1e-3)


def test_real_h200_judged_against_the_a800_threshold():
    verdict = evaluate({"rc": 0, "stdout": read("h200-x2.txt"), "stderr": ""}, 8, 300, 2, image="img")
    assert verdict["status"] == "pass"
    assert verdict["busbw_gbps"]["1024"] == 329.586 and verdict["max_busbw_gbps"] == 329.586
    assert verdict["device"] == "NVIDIA H200" and verdict["nccl"] == "2.28.9" and verdict["image"] == "img"
    assert "329.6 GB/s at best" in verdict["message"]
    json.dumps(verdict)


def test_real_h200_without_p2p():
    """NCCL_P2P_DISABLE=1 on the same machine: through host memory, about a tenth of NVLink."""
    text = read("h200-x2-p2p-disabled.txt")
    assert text.startswith("# NCCL_P2P_DISABLE=1")
    parsed = parse_allreduce_output(text)
    assert parsed["busbw_gbps"] == {"64": 28.367, "256": 28.581, "1024": 28.637}
    run = {"rc": 0, "stdout": text, "stderr": ""}
    assert evaluate(run, 8, 300, 2, extra_env={"NCCL_P2P_DISABLE": "1"})["status"] == "pass"
    low = evaluate(run, 100, 300, 2, extra_env={"NCCL_P2P_DISABLE": "1"})
    assert low["reason"] == "low_busbw"
    assert "measured 28.6 GB/s" in low["message"] and "gpu_comm_check_min_busbw_gbps=100 GB/s" in low["message"]
    assert "peer-to-peer is off by request" in low["message"]


def test_real_h200_nccl_info_output_still_parses():
    parsed = parse_allreduce_output(read("h200-x2-nccl-info.txt"))
    assert parsed["found"] and list(parsed["busbw_gbps"]) == ["64"]
    assert "NCCL INFO" in read("h200-x2-nccl-info.txt")


# --- parsing edge cases (synthetic outputs) --------------------------------------------------------------

A800_LINES = """\
# allreduce_check backend=nccl ranks=8 device='NVIDIA A800 80GB PCIe' dtype=bfloat16 (synthetic)
size_mib=64 ranks=8 time_ms=9.100 algbw_gbps=7.37 busbw_gbps=12.90
size_mib=256 ranks=8 time_ms=33.000 algbw_gbps=8.13 busbw_gbps=14.23
"""


def test_lines_without_result_are_read():
    parsed = parse_allreduce_output(A800_LINES)
    assert not parsed["found"]
    assert parsed["busbw_gbps"] == {"64": 12.9, "256": 14.23}
    assert parsed["max_busbw_gbps"] == 14.23 and parsed["ranks"] == 8
    # run exited 0 but the RESULT line is missing: not a pass
    assert evaluate({"rc": 0, "stdout": A800_LINES}, 8, 300, 8)["reason"] == "no_result"


def test_wrong_sum_marker_and_bad_json():
    text = "size_mib=1 ranks=2 time_ms=1.0 algbw_gbps=1.05 busbw_gbps=1.05 WRONG_SUM\nRESULT {not json\n"
    parsed = parse_allreduce_output(text)
    assert parsed["correct"] is False and not parsed["found"]
    assert parsed["errors"] and "not JSON" in parsed["errors"][0]


def test_nothing_to_parse():
    parsed = parse_allreduce_output("")
    assert parsed == {
        "found": False,
        "result": None,
        "sizes": [],
        "busbw_gbps": {},
        "max_busbw_gbps": None,
        "ranks": None,
        "correct": True,
        "nccl_warnings": [],
        "errors": [],
    }


def _result(max_busbw: float, correct: bool = True, p2p_missing: list[str] | None = None) -> str:
    sizes = [{"size_mib": 64.0, "busbw_gbps": max_busbw, "ranks": 8, "correct": correct}]
    body = {"ranks": 8, "device": "NVIDIA A800 80GB PCIe", "sizes": sizes, "max_busbw_gbps": max_busbw}
    body["p2p_missing"] = p2p_missing or []
    return "RESULT " + json.dumps(dict(body, correct=correct, nccl="2.27.3", torch="2.9.0+cu129"))


# --- the judgement ---------------------------------------------------------------------------------------

ACS_HIGH = {"risk": "high", "message": "ACS redirection (ReqRedir+/CmpltRedir+) is on at 12 PCIe bridge(s)"}


@pytest.mark.parametrize("rc", [124, 137])
def test_wall_clock_timeout(rc):
    verdict = evaluate({"rc": rc, "stdout": "NCCL version 2.27.3\n", "stderr": ""}, 8, 300, 8, pcie_acs=ACS_HIGH)
    assert verdict["status"] == "fail" and verdict["reason"] == "timeout"
    msg = verdict["message"]
    assert msg.startswith("all-reduce on 8 GPUs did not finish in 300 s: typical cause PCIe ACS/IOMMU")
    for text in ("ECAP_ACS+0x6.w=0000", "pci=disable_acs_redir=", "lspci -vvv", "intel_iommu=on iommu=pt",
                 "NCCL_P2P_DISABLE=1", "BIOS"):  # fmt: skip
        assert text in msg
    assert "noacs" not in msg
    assert "risk high: ACS redirection" in msg and msg.endswith("NCCL version 2.27.3")


def test_timeout_without_output():
    assert evaluate({"rc": 124, "stdout": "", "stderr": ""}, 8, 60, 8)["message"].endswith("(no output)")


def test_nccl_watchdog_timeout_inside_the_run():
    stderr = (
        "[rank3]:[E] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, "
        "NumelIn=33554432, Timeout(ms)=200000) ran for 200012 milliseconds before timing out.\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError\n"
    )
    verdict = evaluate({"rc": 1, "stdout": "", "stderr": stderr}, 8, 300, 8)
    assert verdict["reason"] == "timeout"
    assert "timed out inside NCCL/the process group" in verdict["message"]


def test_hang_with_p2p_already_disabled_points_elsewhere():
    verdict = evaluate({"rc": 124, "stdout": ""}, 8, 300, 8, extra_env={"NCCL_P2P_DISABLE": "1"})
    assert verdict["reason"] == "timeout"
    assert "even with NCCL_P2P_DISABLE=1" in verdict["message"] and "NCCL_DEBUG=INFO" in verdict["message"]


@pytest.mark.parametrize(
    ("rc", "stderr", "hint"),
    [
        (125, "Unable to find image 'vllm/vllm-openai:v0.26.0-glm52-sm80' locally\n", "run the image phase first"),
        (
            125,
            'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
            "NVIDIA container toolkit",
        ),
        (127, "timeout: failed to run command 'docker': No such file or directory\n", "docker is not installed"),
        (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n", "stop the serving container"),
        (1, "permission denied while trying to connect to the Docker daemon socket\n", "become: true"),
    ],
)
def test_exit_with_hint(rc, stderr, hint):
    verdict = evaluate({"rc": rc, "stdout": "", "stderr": stderr}, 8, 300, 8)
    assert verdict["reason"] == "exit"
    assert f"exited with status {rc}" in verdict["message"] and hint in verdict["message"]
    assert stderr.strip().splitlines()[-1] in verdict["message"]  # the last lines are shown


def test_exit_shows_only_the_last_lines_and_nccl_warnings():
    stdout = "\n".join(f"line {i}" for i in range(40)) + "\nvm:1:2 [0] NCCL WARN Cuda failure 'peer access'\n"
    verdict = evaluate({"rc": 1, "stdout": stdout, "stderr": ""}, 8, 300, 8)
    assert verdict["reason"] == "exit"
    assert len(verdict["output_tail"]) == 15
    assert "line 39" in verdict["message"] and "line 10\n" not in verdict["message"]
    assert "NCCL warnings: vm:1:2 [0] NCCL WARN Cuda failure 'peer access'" in verdict["message"]


def test_wrong_sums_fail():
    verdict = evaluate({"rc": 0, "stdout": _result(15.0, correct=False)}, 8, 300, 8)
    assert verdict["reason"] == "wrong_result" and "wrong sums" in verdict["message"]


def test_low_bus_bandwidth():
    verdict = evaluate({"rc": 0, "stdout": _result(3.2)}, 8, 300, 8, pcie_acs=ACS_HIGH)
    assert verdict["status"] == "fail" and verdict["reason"] == "low_busbw"
    msg = verdict["message"]
    assert "measured 3.2 GB/s" in msg and "gpu_comm_check_min_busbw_gbps=8 GB/s" in msg
    assert "10-20 GB/s" in msg and "tensor-parallel" in msg and "risk high" in msg
    assert "pci=disable_acs_redir=" in msg and "host_tuning_acs_method" in msg and "noacs" not in msg


def test_low_bus_bandwidth_names_gpus_without_peer_access():
    verdict = evaluate({"rc": 0, "stdout": _result(4.1, p2p_missing=["0->4", "4->0"])}, 8, 300, 8)
    assert verdict["reason"] == "low_busbw" and verdict["p2p_missing"] == ["0->4", "4->0"]
    assert "no peer access for GPU pairs 0->4, 4->0" in verdict["message"]


def test_a800_like_figures_pass_the_default_threshold():
    verdict = evaluate({"rc": 0, "stdout": _result(14.2)}, 8, 300, 8, pcie_acs={"risk": "none", "message": "x"})
    assert verdict["status"] == "pass" and verdict["max_busbw_gbps"] == 14.2
    assert verdict["device"] == "NVIDIA A800 80GB PCIe" and verdict["nccl"] == "2.27.3"


def test_filter_plugin_loads_module_utils_by_path():
    from ansible_collections.a800.vllm.plugins.filter import (
        gpu_comm_check,  # plugins/filter, on sys.path through conftest
    )

    filters = gpu_comm_check.FilterModule().filters()
    assert set(filters) == {"allreduce_parse", "gpu_comm_check_evaluate"}
    assert filters["allreduce_parse"](read("h200-x2.txt"))["max_busbw_gbps"] == 329.586
    verdict = filters["gpu_comm_check_evaluate"]({"rc": 0, "stdout": read("h200-x2.txt")}, 8, 300, 2)
    assert verdict["status"] == "pass"
    assert allreduce.PASS == "pass"


# --- the role, with a stand-in docker --------------------------------------------------------------------

FAKE_DOCKER = """#!/bin/sh
# Test double of docker for the gpu_comm_check role: records its arguments, then plays one behaviour.
echo "$*" >> "$FAKE_DOCKER_LOG"
case "$1" in
  rm) echo "Error response from daemon: No such container: $3" >&2; exit 1 ;;
esac
if [ "$FAKE_DOCKER_MODE" = hang ]; then exec sleep 600; fi
cat "$FAKE_DOCKER_OUTPUT"
"""


def run_role(tmp_path: Path, mode: str, extra_vars: dict) -> tuple[subprocess.CompletedProcess, dict, list[str]]:
    playbook_bin = Path(sys.executable).parent / "ansible-playbook"
    if not playbook_bin.exists():
        pytest.skip(f"ansible-playbook not installed beside {sys.executable}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    log = tmp_path / "docker.log"
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: gpu_comm_check\n",
    )
    all_vars = {
        "a800_bom": {
            "vllm_image": {"base": "vllm/vllm-openai:test", "name": "vllm/vllm-openai:test-sm80"}
        },  # what the role a800 merges in a play; the check runs the base image
        "gpu_facts": {"count": 2},
        "gpu_comm_check_acs_report": False,
        "ansible_python_interpreter": sys.executable,
        **extra_vars,
    }
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        FAKE_DOCKER_LOG=str(log),
        FAKE_DOCKER_MODE=mode,
        FAKE_DOCKER_OUTPUT=str(ALLREDUCE / "h200-x2.txt"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_SHOW_CUSTOM_STATS="1",
        ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(
        [str(playbook_bin), "-i", "localhost,", "-c", "local", str(playbook), "-e", json.dumps(all_vars)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = json.loads(proc.stdout[proc.stdout.index("{\n") : proc.stdout.rindex("}") + 1])
    return proc, out, log.read_text().splitlines() if log.exists() else []


def _task(out: dict, name: str) -> dict:
    tasks = out["plays"][0]["tasks"]
    return next(t["hosts"]["localhost"] for t in tasks if t["task"]["name"].endswith(name))


def test_role_passes_and_returns_stats(tmp_path):
    proc, out, calls = run_role(tmp_path, "output", {"gpu_comm_check_sizes_mib": [64, 256, 1024]})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    run = [c for c in calls if c.startswith("run ")]
    assert len(run) == 1 and calls.count("rm --force gpu-comm-check") == 2  # before, and in the always block
    assert run[0] == (
        "run --rm --name gpu-comm-check --gpus all --ipc=host --ulimit memlock=-1 --ulimit stack=67108864 "
        "--env=NCCL_DEBUG=WARN -v " + run[0].split(" -v ")[1].split(" ")[0] + " --entrypoint torchrun "
        "vllm/vllm-openai:test --standalone --nproc_per_node=2 /check/allreduce_check.py --sizes-mib 64,256,1024 "
        "--iters 20 --timeout-s 200"
    )
    mount = run[0].split(" -v ")[1].split(" ")[0]
    assert mount.endswith("/allreduce_check.py:/check/allreduce_check.py:ro")
    assert not Path(mount.split(":")[0]).parent.exists()  # the scratch directory is gone
    stats = out["global_custom_stats"]["gpu_comm_check"]["localhost"]
    assert stats["status"] == "pass" and stats["busbw_gbps"] == {"64": 270.831, "256": 301.48, "1024": 329.586}
    assert stats["min_busbw_gbps"] == 8.0 and stats["gpus"] == 2
    assert out["stats"]["localhost"]["changed"] == 0


def test_role_hang_is_killed_cleaned_up_and_named(tmp_path):
    proc, out, calls = run_role(
        tmp_path, "hang", {"gpu_comm_check_timeout_s": 3, "gpu_comm_check_extra_env": {"NCCL_P2P_DISABLE": "0"}}
    )
    assert proc.returncode != 0
    failed = _task(out, "Stop when the GPUs cannot all-reduce fast enough")
    assert failed["failed"] is True
    assert "did not finish in 3 s: typical cause PCIe ACS/IOMMU" in failed["msg"]
    assert calls[-1] == "rm --force gpu-comm-check"  # the always block removed the container
    run = next(c for c in calls if c.startswith("run "))
    assert "--env=NCCL_DEBUG=WARN --env=NCCL_P2P_DISABLE=0" in run and "--timeout-s 30" in run
    assert out["global_custom_stats"]["gpu_comm_check"]["localhost"]["reason"] == "timeout"


@needs_torch
def test_figures_keep_significant_digits_not_fixed_decimals():
    """A slow machine's bandwidth keeps its precision in RESULT (six digits) and in the lines (four)."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); from allreduce_check import fixed, significant; "
        "print(json.dumps([significant(0.023305573151080734), significant(329.58612), significant(0.0), "
        "fixed(0.0233056), fixed(270.8312), fixed(13.1), fixed(0.0)]))"
    )
    run = subprocess.run([str(TORCH_PYTHON), "-c", code, str(SCRIPT.parent)], capture_output=True, text=True,
                         env=torch_env(), timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout) == [0.0233056, 329.586, 0.0, "0.02331", "270.83", "13.10", "0.00"]
