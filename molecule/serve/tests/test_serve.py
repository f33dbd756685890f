"""The serving phase on two simulated A800 hosts, after site.yml converged them (and a re-run changed nothing).

The tests run in file order: the server is up; the API key never leaks; each failure mode stops before a
restart with its rule, or fails at runtime with its diagnosis and the last known-good server restored; a change
rolls over the hosts one at a time and stops at the first failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(ROOT / "tests" / "testbed"))
from playbook_output import recap, task_outcomes, unchanged_message  # noqa: E402

INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
SIM_VARS = yaml.safe_load((ROOT / "inventories/sim/group_vars/all/simulated_host.yml").read_text())
PATCHES = ROOT / "tests/doubles/vllm/patches"
# The inventory's image_patch_files, its {{ simulated_patch_dir }} resolved.
SIM_PATCH_FILES = [
    str(PATCHES / Path(p).relative_to("{{ simulated_patch_dir }}")) for p in SIM_VARS["image_patch_files"]
]
IMAGE = "vllm/vllm-openai:v0.26.0-glm52-sm80"
H1, H2 = "a800-mol-serve-1", "a800-mol-serve-2"
NAME = "glm52-nvfp4"
STATE = f"/etc/a800-vllm/{NAME}"
# The servers' key of the scenario's fleet (inventory/fleet.yml): they publish to the scenario's network.
FLEET = yaml.safe_load((Path(__file__).parents[1] / "inventory/fleet.yml").read_text())["all"]["children"]
SERVE_KEY = FLEET["a800_servers"]["vars"]["serve_api_key"]
# The gateway host of the scenario is not a serving host.
testinfra_hosts = ["a800_servers"]


def only_once(host) -> None:
    """Tests that drive playbooks themselves run once (testinfra parametrizes every test over both hosts)."""
    if host.backend.get_hostname() != H1:
        pytest.skip("drives the playbooks once, from the first host's run")


def playbook(*args: str, playbook: str = "playbooks/serve.yml") -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", ANSIBLE_INVENTORY=str(INVENTORY))
    return subprocess.run(
        ["ansible-playbook", playbook, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )


def said(run: subprocess.CompletedProcess) -> str:
    """The run's output (stdout and stderr: ansible-core 2.19 prints task errors on stderr) with whitespace
    collapsed: the YAML callback folds long messages across lines."""
    return " ".join((run.stdout + run.stderr).split())


def container(name: str) -> dict:
    out = subprocess.run(
        ["docker", "exec", name, "docker", "inspect", NAME], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)[0]


def image(name: str) -> dict:
    out = subprocess.run(
        ["docker", "exec", name, "docker", "image", "inspect", IMAGE], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)[0]


def image_id(name: str) -> str:
    return image(name)["Id"]


def patch_set(replacement: str | Path, replaces: str = "0001-") -> str:
    """-e image_patch_files: the simulated host's sm80 patch set with the file whose name starts with `replaces`
    swapped for `replacement`."""
    files = [str(replacement) if Path(p).name.startswith(replaces) else p for p in SIM_PATCH_FILES]
    return json.dumps({"image_patch_files": files})


def config_hash(name: str) -> str:
    return container(name)["Config"]["Labels"]["io.a800-vllm.config-hash"]


def started(name: str) -> str:
    return container(name)["State"]["StartedAt"]


def http(name: str, path: str) -> tuple[int, str]:
    out = subprocess.run(
        [
            "docker",
            "exec",
            name,
            "curl",
            "-s",
            "-o",
            "/dev/stdout",
            "-w",
            "\n%{http_code}",
            "-H",
            f"Authorization: Bearer {SERVE_KEY}",
            f"http://127.0.0.1:8001{path}",
        ],
        capture_output=True,
        text=True,
    )
    body, _, code = out.stdout.rpartition("\n")
    return int(code or 0), body


def profile_override(**launch) -> str:
    """-e model_profile_overrides: the simulated host's own overrides plus launch changes (extra vars replace)."""
    merged = dict(SIM_VARS["model_profile_overrides"], launch=launch)
    return json.dumps({"model_profile_overrides": merged})


def ts(docker_time: str) -> float:
    return datetime.fromisoformat(docker_time[:26].rstrip("Z") + "+00:00").timestamp()


def test_server_is_up_with_the_sparse_backend(host):
    state = host.check_output(f"docker inspect -f '{{{{.State.Status}}}} {{{{.RestartCount}}}}' {NAME}")
    assert state == "running 0"
    log = host.check_output(f"docker logs {NAME} 2>&1")
    assert "Using TRITON_MLA_SPARSE backend." in log
    assert "Application startup complete." in log
    code, body = http(host.backend.get_hostname(), "/v1/models")
    assert code == 200 and json.loads(body)["data"][0]["id"] == "glm-5.2-nvfp4"


def test_launch_is_recorded_and_the_key_file_is_private(host):
    launch = json.loads(host.file(f"{STATE}/launch.json").content_string)
    assert launch["labels"]["io.a800-vllm.config-hash"] == config_hash(host.backend.get_hostname())
    assert "--attention-backend TRITON_MLA_SPARSE" in launch["command_line"]
    assert host.file(f"{STATE}/last-good.json").exists
    key = host.file(f"{STATE}/api-key")
    assert key.mode == 0o600 and key.user == "root"


def test_the_api_key_never_leaks(host):
    """With an API key: the server enforces it, verification passes with it, and the key appears nowhere — not in
    the run's verbose output, `docker inspect`, the server log, the launch file or the reports."""
    only_once(host)
    key = "sk-molecule-" + os.urandom(12).hex()
    run = playbook("--limit", H1, "--tags", "serve,verify", "-v", "-e", f"serve_api_key={key}", playbook="site.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert http(H1, "/v1/models")[0] == 401  # enforced
    inspect = subprocess.run(["docker", "exec", H1, "docker", "inspect", NAME], capture_output=True, text=True).stdout
    logs = subprocess.run(["docker", "exec", H1, "docker", "logs", NAME], capture_output=True, text=True)
    launch = subprocess.run(["docker", "exec", H1, "cat", f"{STATE}/launch.json"], capture_output=True, text=True)
    reports = "".join(p.read_text() for p in (ROOT / "reports" / H1).glob("*") if p.is_file())
    assert "answer_17x24" in reports
    for where, text in {"output": run.stdout + run.stderr, "docker inspect": inspect, "server log": logs.stdout
                        + logs.stderr, "launch.json": launch.stdout, "reports": reports}.items():  # fmt: skip
        assert key not in text, f"the API key leaked into the {where}"
    key_file = subprocess.run(["docker", "exec", H1, "stat", "-c", "%a %U", f"{STATE}/api-key"], capture_output=True,
                              text=True).stdout.split()  # fmt: skip
    assert key_file == ["600", "root"]
    # back to the scenario's key: the key file changes, so the server restarts once
    assert playbook("--limit", H1).returncode == 0
    assert http(H1, "/v1/models")[0] == 200


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # One launch rule shows the serve phase's own validation stopping before any restart. The other rules go
        # through that same validation, and each rule's verdict and message is held where it costs no server:
        # sparse_mla_force_mqa, tensor_parallel_memory, ready_timeout and value_ranges in
        # tests/unit/test_vllm_launch.py, tensor_parallel_memory and value_ranges in preflight-negative (site.yml),
        # value_ranges against the real engine in the contract suite. (They ran here too, ~125 s of CI's critical
        # item, until stop 47.)
        pytest.param(["-e", profile_override(kv_cache_dtype="bf16")], ["kv_cache_dtype", "bfloat16"], id="bf16"),
        pytest.param(
            ["-e", patch_set("/nonexistent/0001-triton-mla-sparse-backend.patch")],
            ["image_patch_files", "/nonexistent/0001-triton-mla-sparse-backend.patch does not exist"],
            id="patch-file-missing",
        ),
        pytest.param(
            ["-e", patch_set(PATCHES / "broken/0002-indexer-deepgemm-guard-from-main.patch", replaces="0002-")],
            [
                "image patches: FAILED: 0002-indexer-deepgemm-guard-from-main.patch: "
                "vllm/model_executor/layers/sparse_attn_indexer.py hunk ",
                "its context does not match",
                "; base image sha256:",
            ],
            id="hunk-does-not-apply",
        ),
        pytest.param(
            [
                "-e",
                patch_set(PATCHES / "broken/0004-xpu-sparse-metadata-fields-without-defaults.patch", replaces="0004-"),
            ],
            ["sm80 self-check: FAILED: ", "non-default argument", "DIAGNOSIS dataclass_field_order"],
            id="dataclass-field-order",
        ),
    ],
)
def test_failure_mode_stops_before_any_restart(host, args, says):
    only_once(host)
    before, hash_before, image_before = started(H1), config_hash(H1), image_id(H1)
    run = playbook("--limit", H1, *args)
    assert run.returncode != 0
    for text in says:
        assert text in said(run), run.stdout[-4000:]
    assert started(H1) == before and config_hash(H1) == hash_before  # the running server was left alone
    assert image_id(H1) == image_before  # and nothing was tagged in the image's name
    assert http(H1, "/health")[0] == 200


def test_the_preflight_runs_the_images_own_parser_when_the_image_is_there(host):
    """A command line the image's vllm does not take fails the preflight (read-only, nothing changed), not the serve
    phase, and before the rest of the host is read. (An unknown flag, a value of the wrong kind or a flag without its
    value is refused one step earlier, by the recorded table, before the host is read: test_settings,
    test_profile_schema; a prefix that fits several flags of the served release is the image parser's.)"""
    only_once(host)
    before = started(H1)
    extra = '{"serve_extra_args": ["--max-num", "8"]}'
    run = playbook("--limit", H1, "-e", extra, playbook="playbooks/preflight.yml")
    assert run.returncode != 0
    # The error line is a Python list's repr, which may escape apostrophes.
    text = said(run).replace("\\'", "'")
    assert "vllm_argument_parser: the image's vllm parser rejects the command line" in text, run.stdout[-3000:]
    assert "ambiguous option: --max-num could match" in text, run.stdout[-3000:]
    assert "(nothing else was read from it)" in text, run.stdout[-3000:]
    assert task_outcomes(run.stdout, H1, "preflight : Read the GPUs from nvidia-smi") == [], run.stdout[-3000:]
    assert " changed=0 " in recap(run.stdout, H1), unchanged_message(run.stdout, H1)
    # The documented escape (an image on the host that the run replaces) lets it through as a warning among the rules.
    skipped = '{"serve_extra_args": ["--max-num", "8"], "serve_validate_skip": ["vllm_argument_parser"]}'
    run = playbook("--limit", H1, "-e", skipped, playbook="playbooks/preflight.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert re.search(r"WARN +vllm_argument_parser", run.stdout), run.stdout[-3000:]
    assert task_outcomes(run.stdout, H1, "preflight : Read the GPUs from nvidia-smi") != [], run.stdout[-3000:]
    assert started(H1) == before


def test_the_image_is_built_from_the_patch_set_and_labelled(host):
    """The label names every patch file in order with its sha256, the base's digest and the patch commit; the
    patched package on the host is what the diffs make of the base (TRITON_MLA_SPARSE is its backend)."""
    only_once(host)
    labels = image(H1)["Config"]["Labels"]
    files = [Path(p) for p in SIM_PATCH_FILES]
    recorded = json.loads(labels["io.a800-vllm.patch-files"])
    assert [p["name"] for p in recorded] == [f.name for f in files]
    assert [p["sha256"] for p in recorded] == [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    assert labels["io.a800-vllm.patch-commit"] == SIM_VARS["image_patch_commit"]
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    code = (
        "from vllm.v1.attention.backends.registry import AttentionBackendEnum as E; print(E['TRITON_MLA_SPARSE'].value)"
    )
    check = subprocess.run(
        [
            "docker",
            "exec",
            H1,
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "python3",
            IMAGE,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
    )
    assert check.stdout.strip() == "vllm.v1.attention.backends.mla.triton_mla_sparse.TritonMLASparseBackend", (
        check.stderr
    )


def test_runtime_failure_is_diagnosed_and_the_last_good_launch_restored(host):
    """A ready timeout that validation was told to skip: the engine gives up, the log names the cause, the
    previous server comes back."""
    only_once(host)
    hash_before = config_hash(H1)
    run = playbook("--limit", H1, "-e", "serve_ready_timeout_s=60", "-e", '{"serve_validate_skip": ["ready_timeout"]}')
    assert run.returncode != 0
    assert "DIAGNOSIS engine_ready_timeout" in said(run), run.stdout[-4000:]
    assert "VLLM_ENGINE_READY_TIMEOUT_S" in said(run)
    assert "ROLLBACK: restored the last known-good launch " + hash_before in said(run)
    assert config_hash(H1) == hash_before and http(H1, "/health")[0] == 200
    failed_logs = subprocess.run(
        ["docker", "exec", H1, "sh", "-c", f"ls {STATE}/failed-*.log"], capture_output=True, text=True
    ).stdout
    assert failed_logs.strip()


def batches(run: subprocess.CompletedProcess, play: str) -> list[list[str]]:
    """The hosts of each batch of `play`, in order: Ansible prints a play's banner again for each batch of serial."""
    parts = [part.split("\nPLAY [")[0] for part in run.stdout.split(f"PLAY [{play}]")[1:]]
    return [sorted(set(re.findall(r"^\w+: \[(a800-mol-serve-\d)\]", part, re.M))) for part in parts]


def test_only_what_goes_down_rolls(host):
    """A server stopped by hand restarts, alone and after the one that keeps running. (A host phase with nothing to
    do on either host runs both side by side: test_serving_safe.py, after its dockerd restart.)"""
    only_once(host)
    converged = playbook()  # both hosts run the inventory's launch first, whatever the tests before changed
    assert converged.returncode == 0, converged.stdout[-4000:] + converged.stderr[-2000:]
    before_h2 = started(H2)
    subprocess.run(["docker", "exec", H1, "docker", "stop", NAME], check=True, capture_output=True)
    run = playbook()
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert batches(run, "Serve - the vLLM server") == [[H2], [H1]], run.stdout[-6000:]
    assert started(H2) == before_h2  # kept running
    assert http(H1, "/health")[0] == 200


def test_a_failing_change_stops_at_the_first_host(host):
    only_once(host)
    before_h2, hash_h2 = started(H2), config_hash(H2)
    run = playbook(
        "-e", "serve_ready_timeout_s=60", "-e", '{"serve_validate_skip": ["ready_timeout"], "serve_rollback": false}'
    )
    assert run.returncode != 0
    assert "no rollback: serve_rollback is false" in said(run)
    assert started(H2) == before_h2 and config_hash(H2) == hash_h2  # never reached
    assert http(H2, "/health")[0] == 200
