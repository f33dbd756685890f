"""The Python API and CLI (a800vllm/): typed events and the Result from recorded ansible-runner events (no
container), then real runs against simulated A800 hosts of the test bed: a good host and a 4-GPU host, inventories
that do not parse or match nothing, an unreachable host, the CLI's exit codes and --json. A full deploy of the good
host (~4 min on 2 cores), then status and verify, runs with A800VLLM_API_DEPLOY=1."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from ansible_collections.a800.vllm.plugins.module_utils import vllm_log
from conftest import ROOT

from a800vllm import (
    PHASES,
    DeployError,
    LoadProgress,
    Outcome,
    PlayStarted,
    PrewarmProgress,
    ResultBuilder,
    TaskResult,
    TaskStarted,
    TaskStatus,
    parse_event,
    run,
)
from a800vllm.cli import main, parse_extravars
from a800vllm.display import ProgressDisplay
from a800vllm.events import parse_duration
from a800vllm.runner import ConfigurationError, prepare_inventory, runner_env

RECORDED = Path(__file__).parent / "recorded"
SIM_GROUP_VARS = ROOT / "inventories" / "sim" / "group_vars"
GOOD, FOUR_GPU = "a800-api-ok", "a800-api-4gpu"
SIM_HOSTS = [{"name": GOOD}, {"name": FOUR_GPU, "gpus": {"count": 4}}]
GPU_COUNT_LINE = f"{FOUR_GPU}: preflight failed: gpu_count: GPU count: found 4, expected 8"


def servers(*names: str) -> dict[str, Any]:
    """An inventory dict: the hosts in a800_servers, reached through the Docker connection (simulated hosts)."""
    hosts = {name: {"ansible_connection": "community.docker.docker"} for name in names}
    return {"all": {"children": {"a800_servers": {"hosts": hosts}}}}


def recorded(name: str) -> list[dict[str, Any]]:
    """Events recorded from real runs (ansible-runner 2.4.3, trimmed to the keys the package reads)."""
    return json.loads((RECORDED / f"{name}.json").read_text(encoding="utf-8"))


def build(events: list[dict[str, Any]], status: str, rc: int):
    builder = ResultBuilder()
    for event in events:
        builder.feed(event)
    return builder.build(status=status, rc=rc, playbook="site.yml", tags="preflight")


def progress_event(host: str, role: str, msg: str) -> dict[str, Any]:
    return {
        "event": "runner_on_ok",
        "event_data": {"host": host, "role": role, "play": "p", "task": "Show the progress", "res": {"msg": msg}},
    }


# --- results and events from recorded runs -------------------------------------------------------------------


def test_a_failed_preflight_names_the_host_and_the_failed_checks():
    result = build(recorded("preflight-4gpu"), "failed", 2)
    assert result.outcome is Outcome.FAILED and result.exit_code == 1 and not result.ok
    assert result.hosts[GOOD].failures == 0 and result.hosts[GOOD].ok == 19 and result.hosts[GOOD].skipped == 1
    assert result.hosts[FOUR_GPU].failures == 1
    assert result.failed_hosts == [FOUR_GPU] and result.unreachable_hosts == []
    failure = result.failures[0]
    assert failure.phase == "preflight" and failure.task == "Stop when a check failed"
    assert failure.checks == ("gpu_count", "tensor_parallel_gpus")
    assert result.message.startswith(GPU_COUNT_LINE)
    assert "Preflight failed on" not in result.message  # the header line is dropped, the host leads
    assert {c["name"] for c in result.preflight[FOUR_GPU] if c["status"] == "fail"} == set(failure.checks)
    assert set(result.preflight) == {GOOD, FOUR_GPU}


def test_recorded_events_become_typed_events():
    raw = recorded("preflight-4gpu")
    events = [event for item in raw for event in parse_event(item)]
    plays = [e for e in events if isinstance(e, PlayStarted)]
    assert plays[0].play.startswith("Preflight") and plays[0].pattern == "a800_servers"
    starts = [e for e in events if isinstance(e, TaskStarted)]
    assert sum(e.host is None for e in starts) == sum(r["event"] == "playbook_on_task_start" for r in raw)
    assert {e.host for e in starts if e.host} == {GOOD, FOUR_GPU}
    results = [e for e in events if isinstance(e, TaskResult)]
    failed = [e for e in results if e.status is TaskStatus.FAILED]
    assert len(failed) == 1 and failed[0].host == FOUR_GPU and failed[0].role == "preflight"
    assert "gpu_count: GPU count: found 4, expected 8" in failed[0].message
    assert any(e.status is TaskStatus.SKIPPED for e in results)
    assert sum(e.status is TaskStatus.OK for e in results) == sum(r["event"] == "runner_on_ok" for r in raw)


def test_an_unparsable_inventory_is_an_error_not_a_success():
    result = build(recorded("inventory-unparsable"), "failed", 1)
    assert result.outcome is Outcome.ERROR and result.exit_code == 2
    assert any("Completely failed to parse inventory source" in line for line in result.errors)
    assert "YAML parsing failed" in result.message


def test_an_inventory_without_servers_is_an_error_although_ansible_succeeds():
    result = build(recorded("inventory-no-servers"), "successful", 0)
    assert result.outcome is Outcome.NO_HOSTS and result.exit_code == 2 and not result.ok
    assert "no host ran" in result.message and "a800_servers" in result.message


def test_a_limit_matching_nothing_is_no_hosts():
    result = build(recorded("limit-no-match"), "failed", 1)
    assert result.outcome is Outcome.NO_HOSTS and result.exit_code == 2


def test_unreachable_ignored_and_rescued():
    unreachable = [
        {
            "event": "runner_on_unreachable",
            "event_data": {"host": "h1", "role": "preflight", "task": "Read the GPUs", "res": {"msg": "ssh: timeout"}},
        },
        {"event": "playbook_on_stats", "event_data": {"dark": {"h1": 1}, "processed": {"h1": 1}, "ok": {"h1": 1}}},
    ]
    result = build(unreachable, "failed", 4)
    assert result.outcome is Outcome.UNREACHABLE and result.exit_code == 3
    assert result.unreachable_hosts == ["h1"] and result.hosts["h1"].unreachable == 1
    assert result.message == "h1: preflight unreachable: ssh: timeout"
    ignored = [
        {"event": "runner_on_failed", "event_data": {"host": "h1", "task": "t", "ignore_errors": True, "res": {}}},
        {"event": "runner_on_failed", "event_data": {"host": "h2", "task": "rescued", "res": {"msg": "x"}}},
        {"event": "playbook_on_stats", "event_data": {"processed": {"h1": 1, "h2": 1}, "rescued": {"h2": 1}}},
    ]
    assert build(ignored, "successful", 0).outcome is Outcome.OK


def test_failed_checks_of_verify_and_serve_and_a_failure_without_checks():
    checks = [{"name": "chat_408", "status": "fail"}, {"name": "models", "status": "pass"}]
    events = [
        {"event": "runner_on_failed", "event_data": {"host": "h1", "role": "verify", "task": "Stop", "res": {}}},
        {"event": "runner_on_failed", "event_data": {"host": "h2", "role": "serve", "task": "Stop", "res": {}}},
        {
            "event": "runner_on_failed",
            "event_data": {"host": "h3", "play": "Status - state", "task": "Stop", "res": {"msg": "down"}},
        },
        {
            "event": "playbook_on_stats",
            "event_data": {
                "failures": {"h1": 1, "h2": 1, "h3": 1},
                "processed": {"h1": 1, "h2": 1, "h3": 1},
                "artifact_data": {
                    "verify": {"h1": {"summary": {"ok": False}, "checks": checks}},
                    "serve_checks": {"h2": [{"name": "dtype", "status": "fail"}]},
                },
            },
        },
    ]
    failures = {f.host: f for f in build(events, "failed", 2).failures}
    assert failures["h1"].checks == ("chat_408",) and failures["h1"].phase == "verify"
    assert failures["h2"].checks == ("dtype",)
    assert failures["h3"].checks == () and str(failures["h3"]) == "h3: status failed: down"


def test_the_status_summary_lists_the_alerts_that_fire():
    """`a800vllm status` shows the monitoring hosts' firing alerts (a800vllm/playbooks/status.yml, key `alerts`)."""
    from a800vllm.cli import summary

    firing = [{"alert": "A800VllmDown", "host": "h1", "severity": "critical", "summary": "s"}]
    events = [
        {
            "event": "playbook_on_stats",
            "event_data": {
                "processed": {"h1": 1, "gw": 1},
                "failures": {"h1": 1},
                "artifact_data": {"alerts": {"gw": firing}, "status": {"h1": {"message": "not running"}}},
            },
        }
    ]
    text = summary(build(events, "failed", 2))
    assert "gw                       alerts: 1 firing: A800VllmDown (h1, critical)" in text
    start = {"name": "start_ledger", "status": "warn", "detail": "the start took 7 min 2 s: model loading 401 s"}
    events[0]["event_data"]["artifact_data"]["status"]["h1"] = {"message": "ready", "start": start}
    assert "  last start (warn): the start took 7 min 2 s: model loading 401 s" in summary(build(events, "failed", 2))
    quiet = [
        {"event": "playbook_on_stats", "event_data": {"processed": {"gw": 1}, "artifact_data": {"alerts": {"gw": []}}}}
    ]
    assert "alerts: 0 firing" in summary(build(quiet, "successful", 0))


def test_result_as_json():
    document = json.loads(build(recorded("preflight-4gpu"), "failed", 2).to_json())
    assert document["outcome"] == "failed" and document["exit_code"] == 1 and document["ok"] is False
    assert document["hosts"][FOUR_GPU]["failures"] == 1
    assert document["failures"][0]["checks"] == ["gpu_count", "tensor_parallel_gpus"]
    assert document["data"]["preflight"][GOOD]


# --- progress events ---------------------------------------------------------------------------------------


def test_recorded_serve_progress_lines():
    events = [e for raw in recorded("serve-progress") for e in parse_event(raw) if isinstance(e, LoadProgress)]
    assert [e.phase for e in events] == ["starting"] * 6 + ["kv_cache", "ready"]
    assert {e.container for e in events} == {"glm52-nvfp4"} and events[-1].host == GOOD


@pytest.mark.parametrize(
    ("progress", "elapsed", "expected"),
    [
        ({"phase": "loading_weights", "shards_done": 37, "shards_total": 80, "percent": 46}, 161, (37, 80, 46, 1)),
        ({"phase": "loading_weights", "shards_done": 1, "shards_total": 80, "percent": 1}, 3800, (1, 80, 1, 1)),
        (
            {"phase": "loading_weights", "shards_done": 2, "shards_total": 3, "percent": 66, "load_pass": 2},
            20,
            (2, 3, 66, 2),
        ),
        ({"phase": "loading_weights", "shards_done": 0, "shards_total": 80, "percent": 0}, None, (0, 80, 0, 1)),
    ],
)
def test_load_progress_parses_the_serve_roles_own_lines(progress, elapsed, expected):
    """The lines come from the producer itself (plugins/module_utils/vllm_log.py summary_line)."""
    eta = vllm_log.eta_s(progress, elapsed) if elapsed else None
    line = "glm52-nvfp4: " + vllm_log.summary_line(progress, eta)
    events = parse_event(progress_event(GOOD, "serve", line))
    assert isinstance(events[0], TaskResult) and events[0].status is TaskStatus.OK
    load = events[1]
    assert isinstance(load, LoadProgress) and load.phase == "loading_weights" and load.container == "glm52-nvfp4"
    assert (load.shards_done, load.shards_total, load.percent, load.load_pass) == expected
    if eta is None:
        assert load.eta_s is None
    else:
        assert load.eta_s == parse_duration(vllm_log.format_duration(eta))
        assert abs(load.eta_s - eta) < (60 if eta >= 3600 else 1)


@pytest.mark.parametrize(
    ("phase", "extra"),
    [
        ("starting", {"elapsed_s": 5}),
        ("weights_loaded", {"load_gib": 53.2, "load_seconds": 370}),
        ("kv_cache", {"kv_cache_tokens": 173247}),
        ("graphs", {"graph_seconds": 65}),
        ("api_starting", {}),
        ("ready", {"elapsed_s": 400}),
    ],
)
def test_every_phase_line_of_a_start(phase, extra):
    line = "glm52-nvfp4: " + vllm_log.summary_line({"phase": phase, **extra}, None)
    load = parse_event(progress_event(GOOD, "serve", line))[1]
    assert isinstance(load, LoadProgress) and load.phase == phase and load.shards_done is None


def test_durations():
    assert parse_duration("3 min 10 s") == 190 and parse_duration("45 s") == 45
    assert parse_duration("1 h 2 min") == 3720 and parse_duration("unknown") is None


def _prewarm_message(progress: dict[str, Any]) -> str:
    """The weights role's own progress message, rendered from roles/weights/tasks/wait.yml."""
    tasks = yaml.safe_load((ROOT / "roles" / "weights" / "tasks" / "wait.yml").read_text(encoding="utf-8"))
    template = next(t for t in tasks if t["name"] == "Show the progress")["ansible.builtin.debug"]["msg"]
    return jinja2.Environment().from_string(template).render(__p=progress)


def test_prewarm_progress_parses_the_weights_roles_own_line():
    msg = _prewarm_message({"done_bytes": 150e9, "total_bytes": 433e9, "gbps": 2.1, "eta_s": 135})
    prewarm = parse_event(progress_event(GOOD, "weights", msg))[1]
    assert isinstance(prewarm, PrewarmProgress)
    assert (prewarm.done_gb, prewarm.total_gb, prewarm.gbps, prewarm.eta_s) == (150.0, 433.0, 2.1, 135.0)
    assert round(prewarm.percent) == 35
    empty = parse_event(progress_event(GOOD, "weights", _prewarm_message({})))[1]
    assert isinstance(empty, PrewarmProgress) and empty.eta_s is None and empty.total_gb == 0


def test_other_debug_messages_are_no_progress():
    assert len(parse_event(progress_event(GOOD, "serve", "glm52-nvfp4: something else"))) == 1
    other = progress_event(GOOD, "serve", "glm52-nvfp4: ready: x")
    other["event_data"]["task"] = "Show the checks"
    assert len(parse_event(other)) == 1


# --- display, CLI arguments, inventory, environment -------------------------------------------------------


def _display_events() -> list[Any]:
    line = "glm52-nvfp4: " + vllm_log.summary_line(
        {"phase": "loading_weights", "shards_done": 37, "shards_total": 80, "percent": 46}, 190
    )
    return [
        PlayStarted("Serve - x", "a800_servers"),
        TaskStarted("Watch the log and /health", "serve", "Serve - x", GOOD),
        parse_event(progress_event(GOOD, "serve", line))[1],
        TaskResult(FOUR_GPU, "Stop", "serve", "Serve - x", TaskStatus.FAILED, "launch would fail:\nline 2"),
    ]


def test_plain_display_prints_lines():
    out = io.StringIO()
    display = ProgressDisplay(out, live=False)
    for event in _display_events():
        display(event)
    display.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "== Serve - x"
    assert lines[1] == f"{GOOD}: glm52-nvfp4 loading weights [#########...........] 37/80 shards, ETA 3 min 10 s"
    assert lines[2] == f"{FOUR_GPU}: FAILED Stop: launch would fail:"
    assert "\x1b" not in out.getvalue()


def test_live_display_redraws_one_line_per_host():
    out = io.StringIO()
    display = ProgressDisplay(out, live=True)
    for event in _display_events():
        display(event)
    text = out.getvalue()
    assert "\x1b[1F" in text  # the host's line is redrawn in place
    printed, block = text.rsplit("\x1b[J", 1)
    assert f"{FOUR_GPU}: FAILED Stop: launch would fail:\n" in printed  # the failure stays, above the live block
    assert block.splitlines() == [  # one line per host, in host order
        f"\x1b[2K{FOUR_GPU}: failed at Stop",
        f"\x1b[2K{GOOD}: glm52-nvfp4 loading weights [#########...........] 37/80 shards, ETA 3 min 10 s",
    ]
    display.close()
    assert out.getvalue().endswith("\x1b[2F\x1b[J")  # the live block is erased at the end


def test_parse_extravars(tmp_path):
    varfile = tmp_path / "vars.yml"
    varfile.write_text("serve_port: 8002\n")
    assert parse_extravars(["a=1", "b=x=y", '{"c": true}', f"@{varfile}"]) == {
        "a": "1",
        "b": "x=y",
        "c": True,
        "serve_port": 8002,
    }
    with pytest.raises(ValueError):
        parse_extravars(["novalue"])


def test_usage_errors_exit_2(capsys):
    assert main(["preflight", "-e", "novalue"]) == 2
    with pytest.raises(SystemExit) as info:
        main(["nosuchphase"])
    assert info.value.code == 2
    assert main(["preflight", "--project-dir", "/nonexistent", "-q"]) == 2
    assert "no project directory" in capsys.readouterr().err


def test_inventory_preparation(tmp_path):
    inventory = {"all": {"children": {"a800_servers": {"hosts": {GOOD: {}}}}}}
    path = prepare_inventory(inventory, SIM_GROUP_VARS, tmp_path, ROOT)
    assert json.loads((Path(path) / "hosts.json").read_text()) == inventory
    assert (Path(path) / "group_vars").resolve() == SIM_GROUP_VARS.resolve()
    assert prepare_inventory("prod", None, tmp_path, ROOT) == str(ROOT / "prod")
    assert prepare_inventory("h1,h2,", None, tmp_path, ROOT) == "h1,h2,"
    assert prepare_inventory(None, None, tmp_path, ROOT) is None
    with pytest.raises(ConfigurationError):
        prepare_inventory("prod", SIM_GROUP_VARS, tmp_path, ROOT)


def test_runner_environment_and_phases():
    env = runner_env(ROOT)
    assert env["ANSIBLE_CONFIG"] == str(ROOT / "ansible.cfg")
    assert env["ANSIBLE_INVENTORY_UNPARSED_FAILED"] == "true"
    assert env["ANSIBLE_HOST_KEY_CHECKING"] in ("true", os.environ.get("ANSIBLE_HOST_KEY_CHECKING"))
    assert PHASES["bench"].tags == "bench" and PHASES["bench"].extravars == {"bench_enabled": True}
    assert PHASES["deploy"].playbook == "site.yml" and PHASES["deploy"].tags is None
    assert Path(PHASES["status"].playbook).is_file()


# --- real runs against simulated A800 hosts ----------------------------------------------------------------


live = pytest.mark.usefixtures("testbed_images")  # the simulated host's image, built by the fixture


def _sim(state: str) -> None:
    run("tests/api/sim.yml", extravars={"api_sim_hosts": SIM_HOSTS, "api_sim_state": state})


@pytest.fixture(scope="module")
def sim_inventory(tmp_path_factory, testbed_images) -> Iterator[Path]:
    """Fresh simulated hosts a800-api-ok (8 GPUs, nothing installed) and a800-api-4gpu (4 GPUs, the stand-in driver
    installed, as on a server that has one), in an inventory with the simulated host's group_vars; removed after."""
    directory = tmp_path_factory.mktemp("api-inventory")
    (directory / "hosts.yml").write_text(yaml.safe_dump(servers(GOOD, FOUR_GPU)))
    (directory / "group_vars").symlink_to(SIM_GROUP_VARS, target_is_directory=True)
    _sim("absent")
    _sim("present")
    try:
        run(
            "tests/testbed/prepare-standin-nvidia.yml",
            inventory=directory,
            limit=FOUR_GPU,
            extravars={"testbed_install_toolkit": False},
        )
        yield directory
    finally:
        _sim("absent")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "a800vllm", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@live
def test_preflight_streams_events_returns_each_hosts_checks_and_raises_naming_the_4_gpu_host(sim_inventory):
    """One preflight of both hosts, the inventory given as a mapping with its group_vars (the file form: the tests
    below): the good host's checks and events come back, the 4-GPU host fails it by name."""
    events: list[Any] = []
    before = signal.getsignal(signal.SIGINT)
    inventory = servers(GOOD, FOUR_GPU)
    with pytest.raises(DeployError) as info:
        run("preflight", inventory=inventory, group_vars=SIM_GROUP_VARS, on_event=events.append)
    result = info.value.result
    assert str(info.value).startswith(GPU_COUNT_LINE)
    assert result.outcome is Outcome.FAILED and result.exit_code == 1 and result.tags == "preflight"
    assert result.failed_hosts == [FOUR_GPU] and result.hosts[GOOD].failures == 0 and result.hosts[GOOD].ok > 5
    assert result.failures[0].checks == ("gpu_count", "tensor_parallel_gpus")
    assert set(result.preflight) == {GOOD, FOUR_GPU}
    checks = {c["name"]: c for c in result.preflight[GOOD]}
    assert checks["ram"]["status"] == "pass" and checks["nvidia_driver"]["status"] == "pending"
    assert any(isinstance(e, PlayStarted) and e.play.startswith("Preflight") for e in events)
    assert any(isinstance(e, TaskStarted) and e.host == GOOD and e.role == "preflight" for e in events)
    assert any(isinstance(e, TaskResult) and e.host == GOOD and e.status is TaskStatus.OK for e in events)
    assert signal.getsignal(signal.SIGINT) is before  # ansible-runner's handler does not stay behind


@live
def test_inventories_that_run_no_host_are_errors(sim_inventory, tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("all:\n  children:\n    a800_servers:\n      hosts:\n        x: [1\n")
    with pytest.raises(DeployError) as info:
        run("preflight", inventory=broken)
    assert info.value.result.outcome is Outcome.ERROR and "parse inventory" in str(info.value)
    empty = {"all": {"children": {"other": {"hosts": {"foo": {}}}}}}
    assert run("preflight", inventory=empty, raise_on_failure=False).outcome is Outcome.NO_HOSTS
    with pytest.raises(DeployError, match="no host ran"):
        run("preflight", inventory=sim_inventory, limit="no-such-host")


@live
def test_cli_exit_codes_and_json(sim_inventory, tmp_path):
    good = cli("preflight", "-i", str(sim_inventory), "--limit", GOOD, "--json")
    assert good.returncode == 0, good.stdout + good.stderr
    document = json.loads(good.stdout)
    assert document["ok"] is True and document["hosts"][GOOD]["failures"] == 0 and document["data"]["preflight"]
    status = cli("status", "-i", str(sim_inventory), "--json", "-q")
    assert status.returncode == 1 and status.stderr == ""
    document = json.loads(status.stdout)
    assert sorted(document["failed_hosts"]) == [FOUR_GPU, GOOD] and document["outcome"] == "failed"
    assert document["data"]["status"][GOOD]["container_status"] == "missing"
    broken = tmp_path / "broken.yml"
    broken.write_text("all: [1\n")
    assert cli("preflight", "-i", str(broken), "-q").returncode == 2
    # an SSH host whose port refuses (loopback port 9): unreachable, as a server that is down is (the preflight's
    # first task is raw, which the Docker connection reports as a failed command, not as a lost connection)
    absent = tmp_path / "absent.yml"
    down = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_user": "nobody"}
    absent.write_text(yaml.safe_dump({"all": {"children": {"a800_servers": {"hosts": {"a800-api-absent": down}}}}}))
    (tmp_path / "group_vars").symlink_to(SIM_GROUP_VARS, target_is_directory=True)
    unreachable = cli("preflight", "-i", str(absent))
    assert unreachable.returncode == 3 and "a800-api-absent: preflight unreachable" in unreachable.stdout


@pytest.mark.skipif(os.environ.get("A800VLLM_API_DEPLOY") != "1", reason="a full deploy: A800VLLM_API_DEPLOY=1")
@live
def test_deploy_then_status_and_verify(sim_inventory):
    events: list[Any] = []
    result = run("deploy", inventory=sim_inventory, limit=GOOD, on_event=events.append)
    assert result.ok, result.message
    assert result.serve[GOOD]["state"] == "ready" and result.verify[GOOD]["summary"]["ok"] is True
    assert {"preflight", "weights", "image", "serve_checks", "serve", "verify"} <= set(result.data)
    assert any(isinstance(e, LoadProgress) and e.host == GOOD and e.phase == "ready" for e in events)
    assert any(isinstance(e, TaskResult) and e.status is TaskStatus.CHANGED for e in events)
    status = cli("status", "-i", str(sim_inventory), "--limit", GOOD, "--json", "-q")
    assert status.returncode == 0, status.stdout
    state = json.loads(status.stdout)["data"]["status"][GOOD]
    assert state["state"] == "ready"
    # where the last start's time went, judged against the profile's budget (a warning is the page cache's)
    assert state["ledger"]["ready"] is True and [p["phase"] for p in state["ledger"]["phases"]][-1] == "api_server"
    assert state["start"]["name"] == "start_ledger" and state["start"]["status"] in ("pass", "warn"), state["start"]
    verify = run("verify", inventory=sim_inventory, limit=GOOD)
    assert verify.ok and verify.verify[GOOD]["summary"]["fail"] == 0
