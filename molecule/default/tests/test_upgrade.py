"""The canary upgrade (playbooks/upgrade.yml) on the one simulated host: with no other server on the old release, the
canary is judged against its own figures from before its restart. A dry run prints the plan and changes nothing; a
good release is promoted; a release twice as slow to its first token (the double's VLLM_TEST_DOUBLE_TTFT_FACTOR) is
rolled back by itself, named, the launch before it back; a re-run refuses that release and changes nothing. Last (after
the idempotence proof of test_simulated_host.py): each case changes the launch."""

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
NAME = "glm52-nvfp4"
sys.path.insert(0, str(ROOT / "tests" / "testbed"))
from playbook_output import recap  # noqa: E402

# The inventory's own serve_extra_env (the double's time scale): an extra var replaces it, so each case adds to it.
SIM_ENV = yaml.safe_load((ROOT / "inventories/sim/group_vars/all/simulated_host.yml").read_text())["serve_extra_env"]
# A shorter load than the default's 16 streams (CI's two CPUs): 4 streams of decode and the TTFT at 960 tokens.
LOAD = {"concurrency": [4], "ttft_prompt_tokens": [960], "long_context": {"enabled": False}}
# The runs' reports (reports/upgrade.md among them) go here, not to the repository's reports/: the serve scenario's
# upgrade, side by side in CI, writes its own upgrade.md.
REPORTS = Path(tempfile.mkdtemp(prefix="a800-upgrade-default-"))


def upgrade(host, env: dict, *args: str) -> subprocess.CompletedProcess:
    extra = json.dumps(
        {"bench_canary_scenarios": LOAD, "serve_extra_env": {**SIM_ENV, **env}, "a800_reports_dir": str(REPORTS)}
    )
    run_env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", ANSIBLE_INVENTORY=str(INVENTORY))
    return subprocess.run(
        ["ansible-playbook", "playbooks/upgrade.yml", "-e", extra, *args],
        cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip


def said(run: subprocess.CompletedProcess) -> str:
    return " ".join((run.stdout + run.stderr).split())


def config_hash(host) -> str:
    inspect = json.loads(host.check_output(f"docker inspect {NAME}"))[0]
    return inspect["Config"]["Labels"]["io.a800-vllm.config-hash"]


def test_a_dry_run_prints_the_plan_and_changes_nothing(host):
    before = config_hash(host)
    run = subprocess.run(
        [sys.executable, "-m", "a800vllm", "upgrade", "--dry-run", "-q", "-i", str(INVENTORY),
         "-e", json.dumps({"serve_extra_env": {**SIM_ENV, "A800_RELEASE": "next"}})],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    text = said(run)
    name = host.backend.get_hostname()
    assert f"1. canary {name}:" in text and "against its own figures from before the restart" in text, text[-3000:]
    assert config_hash(host) == before


def test_a_release_that_answers_wrongly_is_rolled_back_before_it_takes_a_request(host):
    """A release that starts but answers wrongly (the double's VLLM_TEST_DOUBLE_FAULTS: a wrong product, the tool call
    left as text, no sparse backend in the log): its verification fails, so it is never benchmarked nor given back
    to the fleet, and each fault is named in the verdict. (A good release promoted, with a baseline and under load:
    molecule/serve/tests/test_fleet.py.)"""
    good = config_hash(host)
    faults = "wrong_answer,tool_call_parse_error,no_sparse_marker"
    run = upgrade(host, {"A800_RELEASE": "bad", "VLLM_TEST_DOUBLE_FAULTS": faults})
    text = said(run)
    report = (REPORTS / "upgrade.md").read_text()
    print("\n" + report)
    assert run.returncode != 0, run.stdout[-4000:]
    assert report.startswith("# Canary upgrade: roll back"), report
    for named in ("answer_17x24 failed", "tool_call_auto failed", "log:sparse_backend_in_use failed"):
        assert named in report, (named, report)
    assert "TASK [bench : Load the release and measure, new]" not in run.stdout  # wrong answers are not measured
    assert "was rolled back; no other server changed" in text
    assert config_hash(host) == good  # the launch before it runs again
    env = json.loads(host.check_output(f"docker inspect {NAME}"))[0]["Config"]["Env"]
    assert not any(e.startswith("VLLM_TEST_DOUBLE_FAULTS=") for e in env)


def test_a_release_twice_as_slow_to_its_first_token_is_rolled_back_by_itself(host):
    good = config_hash(host)
    run = upgrade(host, {"A800_RELEASE": "good", "VLLM_TEST_DOUBLE_TTFT_FACTOR": "2"})
    text = said(run)
    report = (REPORTS / "upgrade.md").read_text()
    print("\n" + report)
    assert run.returncode != 0, run.stdout[-4000:]
    assert report.startswith("# Canary upgrade: roll back"), report
    assert re.search(r"mean TTFT \(ms\) [\d.]+x the old release's, above the limit 1\.3x", text), text[-4000:]
    assert "was rolled back; no other server changed" in text
    assert config_hash(host) == good  # the launch before it runs again
    env = json.loads(host.check_output(f"docker inspect {NAME}"))[0]["Config"]["Env"]
    assert "VLLM_TEST_DOUBLE_TTFT_FACTOR=2" not in env
    rejected = json.loads(host.check_output(f"cat /etc/a800-vllm/{NAME}/rejected.json"))
    assert len(rejected) == 2, rejected  # this release and the wrong-answering one before it
    assert {r["canary"] for r in rejected.values()} == {host.backend.get_hostname()}, rejected


def test_a_rerun_refuses_the_rolled_back_release_and_changes_nothing(host):
    good = config_hash(host)
    run = upgrade(host, {"A800_RELEASE": "good", "VLLM_TEST_DOUBLE_TTFT_FACTOR": "2"})
    assert run.returncode != 0, run.stdout[-4000:]
    assert "was rolled back by the canary upgrade on" in said(run), said(run)[-3000:]
    name = host.backend.get_hostname()
    assert " changed=0 " in recap(run.stdout, name), recap(run.stdout, name)
    assert config_hash(host) == good
