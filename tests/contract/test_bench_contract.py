"""Contract suite of the benchmark: the project's client (plugins/module_utils/bench_client.py) and the real
`vllm bench serve` (vLLM 0.32.0 CPU build in .venv-vllm) measure the same thing, the client does not slow down what
it measures, the vLLM test double lands in the article's bands, and the vllm_bench module drives the real
`vllm bench serve` CLI. Each test prints its figures (`pytest -m contract -s` shows them).

What was measured on the 2-core CI machine (its load average 5-8 from other jobs), and why the tolerances are what
they are:
  * the double (its timing is a model, little CPU): vllm bench serve and the client agree within 1.5 % on output
    throughput, decode throughput, mean TTFT, mean TPOT and input tokens; asserted at 5 %;
  * the real vLLM: run one after the other, either tool's own figures vary by +-12 % from run to run (CPU contention
    between the server's three processes, the benchmark and the other jobs), so the two tools run at the same time,
    each with the same concurrency (4), prompt length (80 tokens), output length (128, ignore_eos) and request count
    (48), and share the server. Over 15 such rounds: output throughput within 1.5 % in 13 (5.7 % and 9.9 % in the
    other two, where the server served one of them faster), mean TPOT within 5 % in 7 of 8; the test takes the
    median of three rounds and asserts 5 % (throughput, input tokens) and 10 % (TPOT). The mean TTFT does not reach
    5 %: the client's was 0.55-1.25 of vllm bench serve's, median 0.8, a TTFT of ~100 ms on this server being made of
    scheduling delays of tens of ms. The same requests timed in one process by vLLM's own request function
    (async_request_openai_chat_completions) and by the client, alternating, agreed within 5 % on the mean TTFT, and
    random-token and word prompts gave the same TTFT, so the gap comes from the vllm bench serve process (a 2 GB
    Python with torch, slower to get the CPU back on a loaded machine), not from the definition; asserted: 0.5-1.5
    (a TTFT taken at any other event of the stream, the usage chunk or the end, is 5-10x off).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "tests" / "doubles" / "vllm"), str(ROOT / "plugins" / "module_utils")]

import bench_client  # noqa: E402
import bench_judge  # noqa: E402
import real_vllm  # noqa: E402
import yaml  # noqa: E402
from harness import Launcher, free_port, make_installs, make_weights  # noqa: E402

pytestmark = pytest.mark.contract
MODEL = real_vllm.SERVED_MODEL_NAME
BASELINES = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"][
    "baselines"
]
COMPARED = ("output_throughput", "decode_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_input_tokens")


def load_path(name: str, path: Path):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def load_module(name: str):
    """plugins/modules/vllm_bench.py, its `ansible.module_utils` imports resolved to the project's module_utils."""
    sys.modules.setdefault("ansible.module_utils.bench_client", bench_client)
    sys.modules.setdefault("ansible.module_utils.bench_judge", bench_judge)
    return load_path(name, ROOT / "plugins" / "modules" / "vllm_bench.py")


def vllm_bench_argv(base_url: str, result: Path, concurrency: int, requests: int, prompt: int, output: int, seed: int):
    """The real `vllm bench serve` (CLI of .venv-vllm), as the module runs it in the container."""
    return real_vllm.vllm_cli(
        *("bench", "serve", "--backend", "openai-chat", "--base-url", base_url, "--endpoint", "/v1/chat/completions"),
        *("--model", MODEL, "--tokenizer", real_vllm.DEFAULT_MODEL_DIR, "--dataset-name", "random"),
        *("--random-input-len", str(prompt), "--random-output-len", str(output), "--num-prompts", str(requests)),
        *("--max-concurrency", str(concurrency), "--seed", str(seed), "--ignore-eos", "--disable-tqdm"),
        *("--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99", "--save-result"),
        *("--save-detailed", "--result-dir", str(result.parent), "--result-filename", result.name),
    )


def vllm_bench(argv: list[str], client=None) -> tuple[dict, object]:
    """Run vllm bench serve; with `client` (a callable), run it in this process as soon as vllm bench serve starts
    its main run (after ~20 s of imports), so that both load the server at the same time."""
    proc = subprocess.Popen(
        argv, env=real_vllm.vllm_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/tmp"
    )
    seen = []
    client_result = None
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if client is not None and "Starting main benchmark run" in line:
            client_result = client()
            break
    seen.append(proc.stdout.read())
    assert proc.wait() == 0, "".join(seen)[-3000:]
    result = Path(argv[argv.index("--result-dir") + 1]) / argv[argv.index("--result-filename") + 1]
    return bench_judge.parse_vllm_result(json.loads(result.read_text())), client_result


def ratios(vllm: dict, client: dict) -> dict[str, float]:
    return {k: client[k] / vllm[k] for k in COMPARED}


def table(title: str, rows: list[tuple[str, dict, dict]]) -> str:
    lines = [title, f"{'':10} {'figure':20} {'vllm bench':>11} {'client':>11} {'ratio':>7}"]
    for label, vllm, client in rows:
        for key in COMPARED:
            lines.append(f"{label:10} {key:20} {vllm[key]:>11.2f} {client[key]:>11.2f} {client[key] / vllm[key]:>7.3f}")
    return "\n".join(lines)


# --- the vLLM test double -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def doubles(tmp_path_factory):
    """Start the double at a speed factor: doubles(speed) -> run."""
    base = tmp_path_factory.mktemp("bench-doubles")
    launcher = Launcher(base, make_installs(base / "installs"), make_weights(base / "weights"))

    def start(speed: float):
        run = launcher.start(env={"VLLM_TEST_DOUBLE_SPEED": f"{speed:g}"})
        assert "Application startup complete." in run.log, run.log
        return run

    yield start
    launcher.stop_all()


def test_client_agrees_with_vllm_bench_serve_on_the_double(doubles, tmp_path):
    """A server whose timing is a model: both tools must read the same figures from it. The prompts stay under the
    double's 80 tokens, where its prefill time is flat: it counts vllm bench serve's random-token text as one token
    per 4 characters, which varies from prompt to prompt, and longer prompts of unequal length would start the
    streams at different times (and the double decodes faster per stream when fewer streams decode)."""
    run = doubles(1)
    vllm, _ = vllm_bench(vllm_bench_argv(run.url, tmp_path / "double.json", 4, 12, 80, 48, seed=1))
    calibration = bench_client.calibrate(run.url, MODEL)
    prompt = round(vllm["mean_input_tokens"] - calibration["template_tokens"])
    client = bench_judge.annotate(bench_client.run_load(run.url, MODEL, None, 4, 12, prompt, 48))
    print("\n" + table("vllm bench serve vs the client, the double at speed 1, 4 x 12 requests", [("", vllm, client)]))
    assert (vllm["completed"], client["completed"]) == (12, 12)
    for key, ratio in ratios(vllm, client).items():
        assert abs(ratio - 1) <= 0.05, (key, ratio)


def test_client_overhead_at_16_streams(doubles):
    """At 4x the article's peak rate (16 streams, 1560 tok/s modeled) the client sees the modeled decode throughput:
    overhead under 5 %, next to the reference client (aiohttp, as in vllm bench serve) in the same script."""
    overhead = load_path("bench_client_overhead", ROOT / "scripts" / "bench-client-overhead")
    run = doubles(4)
    modeled = overhead.total_throughput(16) * 4
    figures = overhead.measure(run.url, 16, 256, modeled, repeat=2)
    for name, f in figures.items():
        print(
            f"\n{name:9} decode {f['decode']:.0f} tok/s of {modeled:.0f} modeled: ratio {f['ratio']:.3f}, "
            f"{f['cpu_us_per_token']:.0f} us CPU per token, {100 * f['cpu_share']:.1f} % of a core"
        )
    assert figures["client"]["completed"] == 16
    assert figures["client"]["ratio"] >= 0.95, figures


def test_the_double_lands_in_the_article_bands(doubles, capsys):
    """The vllm_bench module (the client path) against the double at real speed: the judge says pass."""
    run = doubles(1)
    module = load_module("vllm_bench_contract")
    from ansible.module_utils.testing import patch_module_args

    args = {"base_url": run.url, "model": MODEL, "tool": "client", "baselines": BASELINES, "gpu_sampling": False}
    args |= {"scenarios": {"long_context": {"enabled": False}}, "output_tokens": 128, "requests_per_level": 1}
    args |= {"ttft_requests": 2, "ttft_output_tokens": 4}
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    bench = json.loads(capsys.readouterr().out)["bench"]
    with capsys.disabled():
        print("\n" + "\n".join(bench["summary"]))
    assert [c["name"] for c in bench["checks"]] == [
        "decode_tok_s@1",
        "decode_tok_s@4",
        "decode_tok_s@16",
        "ttft_s@80",
        "ttft_s@240",
        "ttft_s@480",
        "ttft_s@960",
        "requests",
    ]
    assert bench["status"] == "pass", bench["summary"]


# --- the real vLLM ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real(tmp_path_factory):
    server = real_vllm.RealVllm(port=free_port(), log_path=tmp_path_factory.mktemp("bench-real") / "vllm.log")
    server.start()
    yield server
    server.stop()


def test_client_agrees_with_vllm_bench_serve_on_real_vllm(real, tmp_path):
    """Three rounds, each tool running at the same time as the other (see the module docstring); the median of the
    rounds' ratios tolerates one round in which the server served one of them faster."""
    calibration = bench_client.calibrate(real.base_url, MODEL)
    assert calibration["error"] is None and calibration["tokens_per_word"] > 1  # the tiny BPE cuts words up
    rows = []
    for seed in (1, 2, 3):

        def client(seed: int = seed) -> dict:  # other prompts each round: no prefix-cache hits
            per_word = calibration["tokens_per_word"]
            return bench_client.run_load(
                real.base_url, MODEL, None, 4, 48, 80, 128, tokens_per_word=per_word, seed=seed
            )

        argv = vllm_bench_argv(real.base_url, tmp_path / f"real-{seed}.json", 4, 48, 80, 128, seed)
        vllm, result = vllm_bench(argv, client)
        rows.append((f"round {seed}", vllm, bench_judge.annotate(result)))
    median = {k: statistics.median(c[k] / v[k] for _, v, c in rows) for k in COMPARED}
    print("\n" + table("vllm bench serve and the client at the same time, real vLLM (CPU), 4 x 48 requests", rows))
    print("median ratios: " + ", ".join(f"{k} {v:.3f}" for k, v in median.items()))
    assert all(v["completed"] == 48 and c["completed"] == 48 for _, v, c in rows)
    assert all(c["total_output_tokens"] == 48 * 128 for _, _, c in rows)  # ignore_eos: fixed length
    assert abs(median["mean_input_tokens"] - 1) <= 0.05
    assert abs(median["output_throughput"] - 1) <= 0.05
    assert abs(median["mean_tpot_ms"] - 1) <= 0.10
    assert 0.5 <= median["mean_ttft_ms"] <= 1.5


FAKE_DOCKER = """#!{python}
# `docker exec [-e VAR]... CONTAINER CMD...` run here: `vllm` is the real CLI of .venv-vllm
import os, subprocess, sys
sys.path.insert(0, {here!r})
import real_vllm
args = sys.argv[1:]
i = 1
while args[i] == "-e":
    i += 2
cmd = args[i + 1:]
if cmd[0] == "vllm":
    cmd = real_vllm.vllm_cli(*cmd[1:])
sys.exit(subprocess.run(cmd, env=real_vllm.vllm_env()).returncode)
"""


def test_module_drives_the_real_vllm_bench_serve(real, tmp_path, capsys):
    """tool=auto finds `vllm bench serve` "in the container" (a docker that runs commands here) and the real CLI takes
    the module's flags; the result file comes back through `cat` and is judged."""
    docker = tmp_path / "docker"
    docker.write_text(FAKE_DOCKER.format(python=sys.executable, here=str(HERE)))
    docker.chmod(0o755)
    module = load_module("vllm_bench_contract_real")
    from ansible.module_utils.testing import patch_module_args

    args = {"base_url": real.base_url, "model": MODEL, "docker": str(docker), "baselines": BASELINES}
    args |= {"scenarios": {"concurrency": [4], "ttft_prompt_tokens": [], "long_context": {"enabled": False}}}
    args |= {"output_tokens": 32, "gpu_sampling": False, "container_base_url": real.base_url}
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        module.main()
    out = json.loads(capsys.readouterr().out)
    assert exit_info.value.code == 0, out
    bench = out["bench"]
    with capsys.disabled():
        print(f"\n{bench['tool_reason']}\n" + "\n".join(bench["summary"]))
    assert bench["tool"] == "vllm"
    level = bench["scenarios"]["concurrency"][0]
    assert (level["tool"], level["completed"], level["total_output_tokens"]) == ("vllm", 8, 8 * 32)
    assert level["mean_input_tokens"] > 128 and len(level["requests"]) == 8  # 128 random tokens + the template
    assert [c["name"] for c in bench["checks"]] == ["decode_tok_s@4", "requests"]
    assert bench["checks"][1]["status"] == "pass"
