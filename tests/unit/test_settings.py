"""Settings judged before anything is read from a host (plugins/filter/settings.py): the play-level variables
(roles/preflight/meta/argument_specs.yml, entry point `plays`) and the serve role's settings (its argument spec and
the container values, roles/serve/tasks/settings.yml) — and the preflight playbook stopping on them in its first
step. Also where the host phase waits for a serving host's /health (plugins/filter/serve_inspect.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.serve_inspect import serve_published_health
from ansible_collections.a800.vllm.plugins.filter.settings import a800_settings_checks, serve_settings_checks
from conftest import ROOT

PLAYS = yaml.safe_load((ROOT / "roles/preflight/meta/argument_specs.yml").read_text())["argument_specs"]["plays"]
SERVE = yaml.safe_load((ROOT / "roles/serve/meta/argument_specs.yml").read_text())["argument_specs"]["main"]
SERVE_DEFAULTS = yaml.safe_load((ROOT / "roles/serve/defaults/main/main.yml").read_text())


def plays(**values) -> dict[str, dict]:
    return {c["name"]: c for c in a800_settings_checks(values, PLAYS["options"], "roles/preflight/README.md")}


def serve(**values) -> dict[str, dict]:
    return {c["name"]: c for c in serve_settings_checks(values, SERVE["options"])}


# --- play-level settings --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, "1", 3, "100%", "25%", [1, 5, "20%"]])
def test_a_batch_ansible_serial_reads_is_accepted(batch):
    assert plays(a800_host_batch=batch) == {}


@pytest.mark.parametrize(
    ("batch", "says"),
    [
        (0, "0 hosts at a time: Ansible's serial runs every host at once for a count below 1"),
        ("-2", "-2 hosts at a time"),
        ("0%", "0% is outside 1%..100%"),
        ("150%", "150% is outside 1%..100%"),
        ("two", "'two' is neither a count nor a percentage"),
        ([1, 0], "0 hosts at a time"),
        ([], "an empty list"),
    ],
)  # fmt: skip
def test_a_batch_that_would_run_every_host_at_once_or_none_is_refused(batch, says):
    record = plays(a800_host_batch=batch)["a800_host_batch"]
    assert record["status"] == "fail" and says in record["detail"]
    assert record["fix"].startswith("set a800_host_batch to a count of at least 1") and "README" in record["fix"]


@pytest.mark.parametrize(
    ("values", "name", "says"),
    [
        ({"a800_host_ready_timeout_s": "soon"}, "a800_host_ready_timeout_s", "'soon' is not an integer"),
        ({"a800_host_ready_timeout_s": 0}, "a800_host_ready_timeout_s", "0 is below 10"),
        ({"gpu_comm_check_enabled": "maybe"}, "gpu_comm_check_enabled", "'maybe' is not true or false"),
        ({"gateway_enabled": "perhaps"}, "gateway_enabled", "'perhaps' is not true or false"),
        ({"fleet_bench_enabled": [1]}, "fleet_bench_enabled", "is not true or false"),
    ],
)  # fmt: skip
def test_play_level_knobs_of_the_wrong_type_or_range_are_named(values, name, says):
    found = plays(**values)
    assert list(found) == [name] and says in found[name]["detail"]


def test_every_play_level_variable_with_a_default_has_a_spec():
    """Each variable the playbooks read with default() is a knob of the spec `plays`, or a fact the plays set."""
    import re

    facts = {"fleet_drained", "preflight_results", "preflight_checked_driver", "gpu_facts", "serve_report", "groups",
             "a800_proxy_env", "bench_canary_figures", "verify_checks", "host_plan",
             "preflight_host_facts_read"}  # fmt: skip
    read = set()
    for path in [*(ROOT / "playbooks").glob("*.yml"), ROOT / "site.yml"]:
        read |= set(re.findall(r"([a-z_][a-z0-9_]*)(?:\.[a-z_]+)*\s*\|\s*default\(", path.read_text()))
    read -= {name for name in read if name.startswith("__")}
    assert read - facts == set(PLAYS["options"])


# --- serve settings -------------------------------------------------------------------------------------------------
def test_the_serve_defaults_fit():
    values = {k: v for k, v in SERVE_DEFAULTS.items() if "{{" not in str(v)}
    assert serve(**values) == {}


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("serve_shm_size", "lots", "'lots' is not a size docker_container reads"),
        ("serve_shm_size", "32gb", "'32gb' is not a size docker_container reads"),
        ("serve_shm_size", "0", "'0' is not a positive size"),
        ("serve_ipc_host", "maybe", "'maybe' is none of true, false, auto"),
        ("serve_gpus", 0, "0 is neither all nor a positive count of GPUs"),
        ("serve_ulimits", ["memlock=-1"], "memlock=-1: not name:soft[:hard]"),
        ("serve_port", 70000, "70000 is not a port (1..65535)"),
        ("serve_port", "eighty", "'eighty' is not an integer"),
        ("serve_restart_policy", "sometimes", "'sometimes' is not one of no, always, unless-stopped, on-failure"),
        ("serve_argcheck", "perhaps", "'perhaps' is not true or false"),
    ],
)  # fmt: skip
def test_a_serve_value_docker_or_the_role_would_refuse_is_named(name, value, says):
    found = serve(**{name: value})
    assert list(found) == [name] and says in found[name]["detail"], found
    assert found[name]["fix"].startswith(f"set {name} to ")


@pytest.mark.parametrize("size", ["32g", "32G", "64m", "1.5g", "34359738368"])
def test_shm_sizes_docker_container_reads_are_accepted(size):
    assert serve(serve_shm_size=size) == {}


def test_a_mapping_of_the_wrong_type_is_named_without_its_value():
    found = serve(serve_extra_env=["HF_TOKEN=sk-very-secret"])  # a list: the environment may hold a token
    assert list(found) == ["serve_extra_env"] and "sk-very-secret" not in json.dumps(found), found


# --- the preflight playbook stops on them, before anything is read from the host ------------------------------------
@pytest.fixture
def one_host(tmp_path) -> Path:
    """One server reached locally with the prod group_vars; the run must stop before any task reads it."""
    hosts = {"all": {"children": {"a800_servers": {"hosts": {"a800-settings": {"ansible_connection": "local"}}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (tmp_path / "group_vars").symlink_to(ROOT / "inventories/prod/group_vars", target_is_directory=True)
    return tmp_path


def preflight(inventory: Path, extra: dict) -> tuple[int, str]:
    """playbooks/preflight.yml over `inventory` with `extra` (the local Python for the hosts): rc and output."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/preflight.yml", "-i", str(inventory)]
    extra = extra | {"ansible_python_interpreter": sys.executable}
    run = subprocess.run(
        [*argv, "-e", json.dumps(extra)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    return run.returncode, run.stdout + run.stderr


def test_the_preflight_refuses_a_batch_of_0_a_bad_shm_size_a_bad_launch_value_and_an_unknown_flag_first(one_host):
    rc, out = preflight(
        one_host,
        {
            "a800_host_batch": 0,
            "serve_shm_size": "lots",
            "model_profile_overrides": {"launch": {"gpu_memory_utilization": 1.5}},  # a launch rule, no host fact
            "serve_extra_args": ["--max-log-len", "100", "--max-num-seq", "64", "--enable-prefix-cachng"],
        },
    )
    assert rc == 2, out
    assert "TASK [preflight : Stop on settings that cannot work (nothing was read from the host)]" in out
    assert "a800_host_batch: 0 hosts at a time: Ansible's serial runs every host at once" in out
    assert "serve_shm_size: 'lots' is not a size docker_container reads" in out
    assert "value_ranges: model_profile.launch.gpu_memory_utilization = 1.5 is outside (0," in out
    # the recorded table: the misspelt flag, not the prefix --max-num-seq that argparse takes for --max-num-seqs
    assert "serve_extra_args: --enable-prefix-cachng is not a flag of vllm serve; did you mean" in out
    assert "--max-num-seq is not" not in out and "--max-log-len is not" not in out
    assert "TASK [preflight : Read the operating system" not in out  # nothing was read from the host
    assert "changed=0" in out and "failed=1" in out


def test_the_preflight_refuses_a_bad_gateway_key_before_reading_any_host(one_host):
    """The fleet's settings come first (playbooks/preflight.yml): the servers' preflight never starts."""
    hosts = yaml.safe_load((one_host / "hosts.yml").read_text())
    hosts["all"]["children"]["a800_gateways"] = {"hosts": {"gw-settings": {"ansible_connection": "local"}}}
    (one_host / "hosts.yml").write_text(yaml.safe_dump(hosts))
    key = "tooshrt"
    rc, out = preflight(one_host, {"fleet_gateway_keys": [{"id": "team-a", "key": key}]})
    assert rc == 2, out
    assert "The fleet gateway cannot be set up as given; nothing was changed" in out
    assert "fleet_gateway_keys[0] (id team-a): key is shorter than" in out
    assert key not in out  # a key is never printed
    assert "PLAY [Preflight - read-only facts" not in out  # no server was read


def test_the_serve_phase_runs_the_same_settings_check_before_it_renders_the_launch():
    main = yaml.safe_load((ROOT / "roles/serve/tasks/main.yml").read_text())
    assert main[0]["ansible.builtin.include_tasks"] == "decide.yml"  # what the serve phase's plan runs too
    tasks = yaml.safe_load((ROOT / "roles/serve/tasks/decide.yml").read_text())
    assert tasks[0]["ansible.builtin.include_tasks"] == "settings.yml"
    assert "serve_settings_checks" in tasks[1]["ansible.builtin.fail"]["msg"]
    assert tasks[2]["ansible.builtin.include_tasks"] == "facts.yml"


# --- the host phase waits on the port the running server publishes --------------------------------------------------
RECORDED = json.loads((ROOT / "tests/fixtures/docker-inspect/stopped-states.json").read_text())["host_phase_inspect"]


def test_the_health_url_is_the_published_port_not_a_changed_serve_port():
    text = json.dumps(RECORDED["published-8000-on-18473"])  # a running server published on 127.0.0.1:18473
    found = serve_published_health(text, 8001)
    assert found == {
        "serving": True,
        "url": "http://127.0.0.1:18473/health",
        "port": 18473,
        "detail": "publishes 18473 (serve_port is 8001)",
    }


@pytest.mark.parametrize(
    ("inspect", "url"),
    [
        ({"running": True, "ports": {"8001/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8001"},
                                                 {"HostIp": "::", "HostPort": "8001"}]}}, "http://127.0.0.1:8001/health"),
        ({"running": True, "ports": {"8000/tcp": [{"HostIp": "10.0.0.5", "HostPort": "8000"}],
                                     "9000/tcp": [{"HostIp": "", "HostPort": "8002"}]}}, "http://127.0.0.1:8002/health"),
        ({"running": True, "ports": {"8000/tcp": [{"HostIp": "10.0.0.5", "HostPort": "8000"}]}},
         "http://10.0.0.5:8000/health"),
        ({"running": True, "ports": {}}, "http://127.0.0.1:8002/health"),  # the host network: its own port
    ],
    ids=["both-families", "serve-port-wins", "one-interface", "host-network"],
)  # fmt: skip
def test_the_health_url_follows_the_bindings(inspect, url):
    assert serve_published_health(json.dumps(inspect), 8002)["url"] == url


@pytest.mark.parametrize("text", ["", '{"running": false, "ports": {}}', "Error: No such object: glm52-nvfp4"])
def test_a_host_that_does_not_serve_is_not_waited_for(text):
    assert serve_published_health(text, 8001)["serving"] is False


def test_the_host_phase_waits_on_the_published_port():
    plan, play = yaml.safe_load((ROOT / "playbooks/host.yml").read_text())[:2]  # the plan reads it, before any change
    wait = next(t for t in play["post_tasks"] if t["name"].startswith("Wait until a host that was serving"))
    assert wait["ansible.builtin.uri"]["url"] == "{{ __host_serving_at.url }}"
    keep = next(t for t in plan["pre_tasks"] if t["name"] == "Keep where the running server answers /health")
    assert "serve_published_health(serve_port)" in keep["ansible.builtin.set_fact"]["__host_serving_at"]
