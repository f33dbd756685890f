"""The vllm_readiness module (plugins/modules/vllm_readiness.py): its poll loop driven by a fake docker CLI (a
script in tmp_path that plays a scripted container, poll by poll) and a local HTTP server answering /health."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from conftest import ROOT

CATALOGUE = yaml.safe_load((ROOT / "roles/a800/defaults/main/catalogue.yml").read_text())["a800_error_catalogue"]
LOG_MARKERS = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"][
    "log_markers"
]


from ansible_collections.a800.vllm.plugins.modules import vllm_readiness as readiness  # noqa: E402

# The fake docker: `inspect` and `logs` answer the n-th call with the n-th element of the container's script
# (the last one from then on), and record every call. A missing script means a missing container.
FAKE_DOCKER = """#!{python}
import json, pathlib, sys
root = pathlib.Path({root!r})
args = sys.argv[1:]
with (root / "calls.log").open("a") as calls:
    calls.write(json.dumps(args) + "\\n")
script = root / (args[-1] + ".json")
if not script.exists():
    sys.stderr.write("Error: No such object: " + args[-1] + "\\n")
    sys.exit(1)
plays = json.loads(script.read_text())
counter = root / (args[-1] + "." + args[0])
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
if args[0] == "inspect":
    state = plays["states"][min(n, len(plays["states"]) - 1)]
    document = {{"State": state, "RestartCount": plays.get("restarts", 0), "RestartPolicy": plays.get("policy")}}
    sys.stdout.write(json.dumps(document) + "\\n")
elif args[0] == "logs":
    sys.stdout.write(plays["logs"][min(n, len(plays["logs"]) - 1)])
elif args[0] == "attach":  # the bytes written since the attach: a progress bar redrawn with \\r, no newline yet
    import time
    sys.stdout.write(plays.get("attach", ""))
    sys.stdout.flush()
    time.sleep(30)
"""

STARTED_EPOCH = int(time.time()) - 120 + 0.123456  # the container started two minutes ago
STARTED_AT = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(STARTED_EPOCH)) + ".123456789Z"  # as docker writes it
RUNNING = {"Status": "running", "Running": True, "Restarting": False, "ExitCode": 0, "StartedAt": STARTED_AT}


def exited(code: int) -> dict:
    return {**RUNNING, "Status": "exited", "Running": False, "ExitCode": code}


def stamped(lines: list[str], at: float = STARTED_EPOCH + 1) -> str:
    """Lines as `docker logs --timestamps` prints them (one second apart from `at`)."""
    out = []
    for i, line in enumerate(lines):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at + i)) + ".000000000Z"
        out.append(f"{stamp} {line}\n")
    return "".join(out)


def bar(k: int, n: int = 80) -> str:
    return f"Loading safetensors checkpoint shards: {int(100 * k / n):3d}% Completed | {k}/{n} [00:{k:02d}<00:00]"


BOOT = [
    "(APIServer pid=7) INFO 11-30 09:00:01 [api_server.py:1885] vLLM API server version 0.26.0",
    "(Worker_TP0 pid=9) INFO 11-30 09:00:05 [sparse_attn_indexer.py:790] DeepGEMM not supported on this platform; "
    "using Triton fallback for sparse attention indexer.",
    "(Worker_TP0 pid=9) INFO 11-30 09:00:05 [cuda.py:487] Using TRITON_MLA_SPARSE attention backend out of potential "
    "backends: [TRITON_MLA_SPARSE].",
]
# tqdm's carriage returns inside one docker log line, as docker stores a bar ended by its newline
LOADING = [*BOOT, "\r".join(bar(k) for k in range(0, 38))]
LOADED = [*BOOT, "\r".join(bar(k) for k in range(0, 81))]
READY = [
    *LOADED,
    "(Worker_TP0 pid=9) INFO 11-30 09:06:01 [gpu_model_runner.py:3025] Model loading took 54.06 GiB memory and "
    "352.1 seconds",
    "(EngineCore_DP0 pid=8) INFO 11-30 09:06:12 [kv_cache_utils.py:1087] GPU KV cache size: 173,612 tokens",
    "(Worker_TP0 pid=9) INFO 11-30 09:07:17 [gpu_model_runner.py:4012] Graph capturing finished in 65 secs, took "
    "2.40 GiB",
    "(APIServer pid=7) INFO 11-30 09:07:18 [api_server.py:1981] Starting vLLM API server 0 on http://0.0.0.0:8001",
    "(APIServer pid=7) INFO 11-30 09:07:18 [on.py:62] Application startup complete.",
]
OOM = [
    *LOADING,
    "(Worker_TP0 pid=9) Traceback (most recent call last):",
    '(Worker_TP0 pid=9)   File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/model_loader/'
    'default_loader.py", line 272, in load_weights',
    "(Worker_TP0 pid=9)     loaded_weights = model.load_weights(",
    "(Worker_TP0 pid=9) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 27.06 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 21.10 GiB is free.",
    "(APIServer pid=7) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
    "{'EngineCore_DP0': 1}",
]


class Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):
        self.send_response(type(self).status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def health(monkeypatch):
    """A local /health: health.status = 200 / 503; health.url. Its GET may take up to the (fake) window's end, not
    2 s of real time: on a loaded machine a late answer must not read as no answer."""
    monkeypatch.setattr(readiness, "HEALTH_TIMEOUT_S", 30.0)
    handler = type("H", (Health,), {"status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/health"
    yield handler
    server.shutdown()
    server.server_close()


@pytest.fixture
def docker(tmp_path):
    """The fake docker CLI; docker.play(name, states=[...], logs=[...], restarts=0) scripts a container."""

    class Fake:
        path = tmp_path / "bin" / "docker"
        root = tmp_path

        def play(
            self, name: str, states: list[dict], logs: list[str], restarts: int = 0, attach: str = "", policy=None
        ) -> None:
            script = {"states": states, "logs": logs, "restarts": restarts, "attach": attach, "policy": policy}
            (tmp_path / f"{name}.json").write_text(json.dumps(script))

        def calls(self, command: str) -> int:
            lines = (tmp_path / "calls.log").read_text().splitlines() if (tmp_path / "calls.log").exists() else []
            return sum(1 for line in lines if json.loads(line)[0] == command)

    fake = Fake()
    fake.path.parent.mkdir()
    fake.path.write_text(FAKE_DOCKER.format(python=sys.executable, root=str(tmp_path)))
    fake.path.chmod(0o755)
    return fake


class Clock:
    """watch()'s clock, sleep and wall clock, faked: time moves only when watch() sleeps, so poll counts, windows,
    grace periods and elapsed times are exact however long the fake docker takes to answer on a loaded machine.
    `on_sleep` runs (in real time) at each sleep, for tests that wait for something real to happen."""

    def __init__(self, wall_at_zero: float = STARTED_EPOCH + 120) -> None:
        self.now = 0.0
        self.wall_at_zero = wall_at_zero  # the epoch seconds at which watch() starts: two minutes after StartedAt
        self.sleeps: list[float] = []
        self.on_sleep = lambda: None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        self.on_sleep()

    def wall(self) -> float:
        return self.wall_at_zero + self.now


def watch(params: dict, clock: Clock | None = None) -> dict:
    """readiness.watch on a fake clock; the real seconds it took are printed, never asserted."""
    clock = clock or Clock()
    real = time.monotonic()
    result = readiness.watch(params, clock=clock.monotonic, sleep=clock.sleep, wall=clock.wall)
    print(f"\nBENCH vllm_readiness watch: {time.monotonic() - real:.2f} s wall for {result['polls']} polls")
    return result


def params(docker, health=None, **overrides) -> dict:
    return {
        "container": "glm52-nvfp4",
        "url": health.url if health else "http://127.0.0.1:9/health",
        "window_s": 10.0,
        "poll_s": 0.02,
        "catalogue": CATALOGUE,
        "required_markers": LOG_MARKERS["required"],
        "forbidden_markers": LOG_MARKERS["forbidden"],
        "started_at": None,
        "docker": str(docker.path),
        **overrides,
    }


def wait_until(condition, limit_s: float = 30.0) -> None:
    """Wait for something that happens in real time (a subprocess's output); the limit only stops a hang, the
    test's assertions decide."""
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


# --- live progress ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("live", [True, False])
def test_progress_of_the_unterminated_bar_comes_from_attach(docker, health, live, monkeypatch):
    """docker logs holds back the bar until its newline; the attach stream has it while it is drawn."""
    health.status = 503
    docker.play("glm52-nvfp4", [RUNNING], [stamped(BOOT)], attach="\r".join(bar(k) for k in range(0, 21)))
    tails = []

    class Recorded(readiness.LiveTail):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            tails.append(self)

    monkeypatch.setattr(readiness, "LiveTail", Recorded)
    clock = Clock()
    # the attach stream arrives in its own time: each sleep waits (30 s at most) until the bar came through it
    clock.on_sleep = lambda: wait_until(lambda: not tails or tails[0].partial())
    result = watch(params(docker, health, window_s=0.5, poll_s=0.125, live_progress=live), clock)
    assert result["state"] == "loading" and result["polls"] == 5 and clock.now == 0.5
    if live:
        assert result["progress"]["shards_done"] == 20 and result["progress"]["shards_total"] == 80
        assert "20/80" in result["message"]
    else:
        assert result["progress"]["shards_done"] is None
    assert docker.calls("attach") == (1 if live else 0) and len(tails) == (1 if live else 0)


# --- ready ---------------------------------------------------------------------------------------------------------
def test_ready_within_one_poll_of_the_startup_line(docker, health):
    """/health answers 200 all along, but ready needs the log line too: the third poll shows it, and returns."""
    docker.play("glm52-nvfp4", [RUNNING], [stamped(LOADING), stamped(LOADED), stamped(READY), stamped(READY)])
    clock = Clock()
    result = watch(params(docker, health), clock)
    assert result["state"] == "ready"
    assert result["polls"] == 3 and docker.calls("logs") == 3
    assert clock.sleeps == [0.02, 0.02]  # one poll interval between polls, and no wait for the 10 s window
    assert result["health_status"] == 200
    assert result["progress"]["phase"] == "ready" and result["progress"]["kv_cache_tokens"] == 173612
    assert result["markers"]["ok"] is True
    assert result["diagnosis"] == []
    assert result["exit_code"] is None
    assert result["message"].startswith("ready: application startup complete")
    assert result["log_tail"][-1].endswith("Application startup complete.")


def test_ready_reports_warnings_without_waiting(docker, health):
    dense = [line.replace("TRITON_MLA_SPARSE", "FLASH_ATTN") for line in READY]
    docker.play("glm52-nvfp4", [RUNNING], [stamped(dense)])
    result = watch(params(docker, health))
    assert result["state"] == "ready" and result["polls"] == 1
    assert [(d["name"], d["fatal"]) for d in result["diagnosis"]] == [("dense_attention_fallback", False)]
    assert "(warnings: dense_attention_fallback)" in result["message"]
    assert result["markers"]["ok"] is False


def test_startup_line_with_health_503_fails_after_the_grace(docker, health, monkeypatch):
    monkeypatch.setattr(readiness, "READY_GRACE_S", 1.0)
    health.status = 503
    docker.play("glm52-nvfp4", [RUNNING], [stamped(READY)])
    clock = Clock()
    result = watch(params(docker, health, poll_s=0.25), clock)
    assert result["state"] == "failed"
    # the line is seen at 0 s; polls at 0.25, 0.5 and 0.75 s are within the grace, the one at 1 s fails
    assert result["health_status"] == 503 and result["polls"] == 5 and clock.now == 1.0
    assert result["diagnosis"][0]["name"] == "unknown"
    assert "answered 503 for 1 s" in result["diagnosis"][0]["cause"]


# --- failed --------------------------------------------------------------------------------------------------------
def test_crashed_container_is_diagnosed(docker, health):
    health.status = 503
    docker.play("glm52-nvfp4", [RUNNING, RUNNING, exited(1)], [stamped(LOADING), stamped(LOADING), stamped(OOM)])
    result = watch(params(docker, health))
    assert result["state"] == "failed"
    assert result["polls"] == 3
    assert result["exit_code"] == 1 and result["container_status"] == "exited"
    primary = result["diagnosis"][0]
    assert primary["name"] == "cuda_out_of_memory"
    assert "tensor_parallel_size" in primary["fix"]
    assert primary["context"][-1].endswith("21.10 GiB is free.")
    assert any("Traceback (most recent call last)" in line for line in primary["context"])
    assert result["message"].startswith("start failed: the container stopped (exit code 1): A GPU ran out of memory")
    assert result["markers"]["forbidden_found"] == ["a Python exception", "GPU memory exhausted"]


def test_fatal_line_fails_while_the_container_still_runs(docker, health):
    timeout = "TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow weight"
    docker.play("glm52-nvfp4", [RUNNING], [stamped(LOADING), stamped([*LOADING, timeout])])
    result = watch(params(docker, health))
    assert result["state"] == "failed" and result["polls"] == 2
    assert result["exit_code"] is None
    assert [d["name"] for d in result["diagnosis"]] == ["engine_ready_timeout"]
    assert "serve_ready_timeout_s" in result["diagnosis"][0]["fix"]


def test_dead_engine_behind_a_running_api_server_fails(docker, health):
    health.status = 503
    dead = [*READY, "(EngineCore_DP0 pid=8) ERROR 11-30 09:09:00 [core.py:868] EngineCore encountered a fatal error."]
    docker.play("glm52-nvfp4", [RUNNING], [stamped(dead)])
    result = watch(params(docker, health))
    assert result["state"] == "failed" and result["polls"] == 1
    assert result["diagnosis"][0]["name"] == "unknown"
    assert result["diagnosis"][0]["cause"].startswith("the engine core died: (EngineCore_DP0 pid=8) ERROR")
    assert result["diagnosis"][0]["context"][-1].endswith("EngineCore encountered a fatal error.")


def test_unknown_crash_keeps_the_last_30_lines(docker, health):
    lines = [f"(APIServer pid=7) INFO line {i}" for i in range(50)]
    docker.play("glm52-nvfp4", [exited(137)], [stamped(lines)])
    result = watch(params(docker, health))
    assert result["state"] == "failed" and result["exit_code"] == 137
    (entry,) = result["diagnosis"]
    assert entry["name"] == "unknown"
    assert entry["cause"] == "the container stopped (exit code 137)"
    assert entry["context"] == lines[-30:]
    assert result["log_tail"] == lines[-40:]


def test_restart_policy_restarts_are_a_failure_with_the_whole_log(docker, health):
    first_run = stamped([*LOADING, "RuntimeError: Failed to infer device type"], at=STARTED_EPOCH - 600)
    docker.play("glm52-nvfp4", [RUNNING], [first_run + stamped(BOOT)], restarts=2)
    result = watch(params(docker, health))
    assert result["state"] == "failed" and result["restart_count"] == 2
    assert result["diagnosis"][0]["name"] == "no_gpu_visible"


# --- stopped by an operator (docker stop), recorded states: tests/fixtures/docker-inspect/stopped-states.json -------
RECORDED = json.loads((ROOT / "tests/fixtures/docker-inspect/stopped-states.json").read_text())["states"]


def recorded(name: str) -> tuple[dict, dict]:
    """(State, HostConfig.RestartPolicy) as recorded."""
    return RECORDED[name]["State"], RECORDED[name]["RestartPolicy"]


def test_docker_stop_is_reported_as_stopped_with_how_to_start_it_again(docker, health):
    state, policy = recorded("docker-stop")  # exit code 0 after SIGTERM: vLLM's shutdown once it served
    docker.play("glm52-nvfp4", [state], [stamped(READY)], policy=policy)
    result = watch(params(docker, health))
    assert result["state"] == "stopped" and result["exit_code"] == 0
    assert result["message"].startswith("stopped at 2026-12-03 12:40:07 UTC (exit code 0: vLLM shut down on SIGTERM")
    assert "docker start glm52-nvfp4" in result["message"] and "python -m a800vllm serve" in result["message"]
    assert "start failed" not in result["message"] and "No catalogued error" not in json.dumps(result)
    assert [d["name"] for d in result["diagnosis"]] == []


def test_docker_stop_past_its_grace_period_is_a_stop_under_a_restarting_policy(docker, health):
    state, policy = recorded("docker-stop-past-grace")  # SIGKILL: 137; unless-stopped would have restarted a crash
    docker.play("glm52-nvfp4", [state], [stamped(LOADING)], policy=policy)
    result = watch(params(docker, health))
    assert result["state"] == "stopped" and result["exit_code"] == 137
    assert "exit code 137: SIGKILL" in result["message"] and "docker start glm52-nvfp4" in result["message"]


@pytest.mark.parametrize(
    ("change", "policy"),
    [
        ({"ExitCode": 137}, "no"),  # SIGKILL without a restarting policy: a crash as much as a stop
        ({"OOMKilled": True}, "unless-stopped"),
        ({"Error": "failed to create shim task"}, "unless-stopped"),
        ({"ExitCode": 1}, "unless-stopped"),
    ],
    ids=["sigkill-policy-no", "oom-killed", "docker-error", "exit-1"],
)  # fmt: skip
def test_an_exit_that_is_not_a_stop_stays_a_failed_start(docker, health, change, policy):
    state, _ = recorded("docker-stop-past-grace")
    docker.play("glm52-nvfp4", [{**state, **change}], [stamped(LOADING)], policy={"Name": policy})
    result = watch(params(docker, health))
    assert result["state"] == "failed" and result["message"].startswith("start failed: the container stopped")


def test_a_clean_exit_with_a_fatal_error_in_the_log_is_a_failed_start(docker, health):
    state, policy = recorded("docker-stop")
    docker.play("glm52-nvfp4", [state], [stamped(OOM)], policy=policy)
    result = watch(params(docker, health))
    assert result["state"] == "failed" and result["diagnosis"][0]["name"] == "cuda_out_of_memory"


def test_a_recorded_crash_is_a_failed_start(docker, health):
    state, policy = recorded("crash-exit-1")
    docker.play("glm52-nvfp4", [state], [stamped(LOADING)], policy=policy)
    result = watch(params(docker, health))
    assert result["state"] == "failed" and result["exit_code"] == 1
    assert result["diagnosis"][0]["cause"] == "the container stopped (exit code 1)"


def test_missing_container(docker, health):
    result = watch(params(docker, health, container="nosuch"))
    assert result["state"] == "failed" and result["container_status"] == "missing"
    assert result["message"] == "start failed: container 'nosuch' does not exist"
    assert result["diagnosis"][0]["name"] == "unknown" and result["exit_code"] is None


def test_docker_that_cannot_run_is_an_error(tmp_path):
    with pytest.raises(readiness.DockerError, match="cannot run"):
        readiness.inspect(str(tmp_path / "no-docker"), "glm52-nvfp4")


# --- loading -------------------------------------------------------------------------------------------------------
def test_loading_after_the_window(docker, health):
    health.status = 503
    docker.play("glm52-nvfp4", [RUNNING], [stamped(LOADING)])
    clock = Clock()
    result = watch(params(docker, health, window_s=1.0, poll_s=0.25, started_at=clock.wall() - 74), clock)
    assert result["state"] == "loading" and result["polls"] == 5  # at 0, 0.25, 0.5, 0.75 and 1 s
    assert clock.now == 1.0 and sum(clock.sleeps) == 1.0  # it waited out the window, and not longer
    prog = result["progress"]
    assert (prog["phase"], prog["shards_done"], prog["shards_total"]) == ("loading_weights", 37, 80)
    assert prog["eta_s"] == pytest.approx(43 * 37 / 37, abs=0.1)  # tqdm's elapsed on the bar: 00:37
    assert prog["elapsed_s"] == 75.0  # requested 74 s before the watch began, which lasted its 1 s window
    assert result["message"] == "loading weights: shards 37/80 (46 %), ETA 43 s"
    assert result["diagnosis"] == [] and result["markers"]["missing"] == [LOG_MARKERS["required"][2]["meaning"]]


def test_warnings_do_not_end_the_window(docker, health):
    hang = "(Worker_TP0 pid=9) INFO [shm_broadcast.py:512] No available shared memory broadcast block found in 60 s"
    docker.play("glm52-nvfp4", [RUNNING], [stamped([*LOADING, hang])])
    result = watch(params(docker, health, window_s=0.5, poll_s=0.25))
    assert result["state"] == "loading" and result["polls"] == 3  # the whole window: at 0, 0.25 and 0.5 s
    assert [d["name"] for d in result["diagnosis"]] == ["nccl_warning_or_hang"]
    assert result["message"].endswith("(warnings: nccl_warning_or_hang)")


def test_lines_of_an_earlier_run_are_ignored(docker, health):
    """A restarted (not re-created) container keeps its old log: only lines since StartedAt count."""
    health.status = 503
    old = stamped([*READY, "Bus error (core dumped)"], at=STARTED_EPOCH - 3600)
    docker.play("glm52-nvfp4", [RUNNING], [old + stamped(LOADING)])
    result = watch(params(docker, health, window_s=0.5, poll_s=0.25))
    assert result["state"] == "loading"
    assert result["progress"]["phase"] == "loading_weights" and result["diagnosis"] == []
    assert not any("startup complete" in line or "Bus error" in line for line in result["log_tail"])
    assert result["log_tail"][-1] == bar(37)
    assert result["progress"]["elapsed_s"] == 120.5  # from the container's StartedAt (no started_at given)


def test_current_run_strips_timestamps_and_keeps_unstamped_lines():
    text = stamped(["old"], at=STARTED_EPOCH - 5) + stamped(["new"]) + "no stamp\n"
    kept, last = readiness.current_run(text, STARTED_EPOCH)
    assert kept.split("\n") == ["new", "no stamp", ""]
    assert last == pytest.approx(STARTED_EPOCH + 1, abs=1)


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2026-11-30T09:00:00.123456789Z", 1796029200.123456),
        ("2026-11-30T10:00:00+01:00", 1796029200),
        ("0001-01-01T00:00:00Z", None),
        ("", None),
    ],
)
def test_parse_time(text, epoch):
    assert readiness.parse_time(text) == (None if epoch is None else pytest.approx(epoch, abs=1e-5))


# --- main(): AnsibleModule, check mode ----------------------------------------------------------------------------
def run_main(args: dict, capsys) -> tuple[int, dict]:
    from ansible.module_utils.testing import patch_module_args

    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        readiness.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_main_in_check_mode_reports_a_failed_start_without_failing(docker, capsys):
    line = "vllm serve: error: argument --kv-cache-dtype: invalid choice: 'bf16' (choose from 'auto', 'bfloat16')"
    docker.play("glm52-nvfp4", [exited(2)], [stamped([line])])
    args = {"container": "glm52-nvfp4", "docker": str(docker.path), "catalogue": CATALOGUE, "_ansible_check_mode": True}
    code, result = run_main(args, capsys)
    assert code == 0 and "failed" not in result
    assert result["changed"] is False
    assert result["state"] == "failed" and result["exit_code"] == 2
    assert result["diagnosis"][0]["name"] == "kv_cache_dtype_bf16"


def test_main_writes_a_complete_starts_ledger_for_node_exporter_once(docker, health, capsys, tmp_path):
    """metrics_file: the ready start's phases and total in node exporter's textfile format, written when they differ
    (the next watch of the same start writes nothing), never in check mode nor where the directory is missing."""
    textfile = tmp_path / "a800-vllm-start.prom"
    docker.play("glm52-nvfp4", [RUNNING] * 5, [stamped(READY)] * 5)
    base = {"container": "glm52-nvfp4", "docker": str(docker.path), "catalogue": CATALOGUE, "url": health.url,
            "window_s": 5, "poll_s": 0.02}  # fmt: skip
    code, result = run_main({**base, "metrics_file": str(textfile), "_ansible_check_mode": True}, capsys)
    assert code == 0 and result["state"] == "ready" and result["metrics_file_written"] is False
    assert not textfile.exists()
    code, result = run_main({**base, "metrics_file": str(textfile)}, capsys)
    assert result["metrics_file_written"] is True and result["changed"] is False
    lines = textfile.read_text().splitlines()
    assert 'a800_vllm_start_phase_seconds{container="glm52-nvfp4",phase="model_loading"} 352.1' in lines
    assert 'a800_vllm_start_phase_seconds{container="glm52-nvfp4",phase="cuda_graphs"} 65' in lines
    assert 'a800_vllm_start_seconds{container="glm52-nvfp4"} 437' in lines  # 09:00:01 to 09:07:18
    assert run_main({**base, "metrics_file": str(textfile)}, capsys)[1]["metrics_file_written"] is False
    missing = run_main({**base, "metrics_file": str(tmp_path / "none" / "a800-vllm-start.prom")}, capsys)[1]
    assert missing["metrics_file_written"] is False and missing["state"] == "ready"


def test_main_fails_on_a_broken_catalogue(docker, capsys):
    broken = [{"name": "x", "pattern": "(", "cause": "c", "fix": "f"}]
    code, result = run_main({"container": "glm52-nvfp4", "docker": str(docker.path), "catalogue": broken}, capsys)
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith("catalogue: entry 0 (x): pattern does not compile")
    assert docker.calls("inspect") == 0


def test_main_fails_when_docker_cannot_run(tmp_path, capsys):
    args = {"container": "glm52-nvfp4", "docker": str(tmp_path / "no-docker"), "catalogue": CATALOGUE}
    code, result = run_main(args, capsys)
    assert code == 1 and "cannot run" in result["msg"]


def test_invalid_options_fail_the_module():
    bad = {
        "catalogue": [{"name": "x", "pattern": "(", "cause": "c", "fix": "f"}],
        "window_s": 0,
        "poll_s": 1,
        "required_markers": [{"meaning": "no pattern"}],
        "forbidden_markers": [],
    }
    errors = readiness.option_errors(bad)
    assert errors[0].startswith("catalogue: entry 0 (x): pattern does not compile")
    assert "window_s must be positive" in errors
    assert any(error.startswith("required_markers[0]: needs a `pattern`") for error in errors)
    assert readiness.option_errors({**bad, "catalogue": CATALOGUE, "window_s": 1, "required_markers": []}) == []


def test_documentation_blocks_are_valid_yaml():
    documentation = yaml.safe_load(readiness.DOCUMENTATION)
    assert set(documentation["options"]) == {
        "container",
        "url",
        "window_s",
        "poll_s",
        "catalogue",
        "required_markers",
        "forbidden_markers",
        "started_at",
        "docker",
        "live_progress",
        "metrics_file",
    }
    returned = yaml.safe_load(readiness.RETURN)
    assert {"state", "progress", "ledger", "message", "diagnosis", "markers", "exit_code", "log_tail"} <= set(returned)
    assert "metrics_file_written" in returned
    assert yaml.safe_load(readiness.EXAMPLES)[0]["vllm_readiness"]["container"] == "glm52-nvfp4"
