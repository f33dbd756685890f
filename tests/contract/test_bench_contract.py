"""Contract suite of the benchmark: the project's client (plugins/module_utils/bench_client.py) and the real
`vllm bench serve` (vLLM 0.32.0 CPU build in .venv-vllm) run against the same servers and count the same requests and
tokens, the client keeps up with 16 streams, the vllm_bench module judges the double's figures against the article's
bands with every check it owes, and it drives the real `vllm bench serve` CLI.

What cannot be noisy is asserted (completed requests, token counts, the figures present and positive, check names
and shapes); how closely the two tools agree and how fast the double is are benchmark figures, printed here
(`pytest -m contract -s`) and measured properly, with repeated rounds and medians, by `make bench`
(tests/contract/bench_agreement.py, scripts/bench-client-overhead, tests/doubles/vllm/bench_speed.py), which never
fail on a figure. What was measured there is in bench_agreement.py's docstring.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "tests" / "doubles" / "vllm"), str(ROOT / "collections")]

import bench_agreement  # noqa: E402
import real_vllm  # noqa: E402
import yaml  # noqa: E402
from ansible_collections.a800.vllm.plugins.modules import vllm_bench  # noqa: E402
from bench_agreement import COMPARED, ratios, table  # noqa: E402
from conftest import load_script  # noqa: E402
from harness import Launcher, free_port, make_installs, make_weights  # noqa: E402

pytestmark = pytest.mark.contract
MODEL = real_vllm.SERVED_MODEL_NAME
BASELINES = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"][
    "baselines"
]


def assert_figures_present(result: dict) -> None:
    """Every compared figure is a positive finite number (what a broken parser or a stream read wrongly loses)."""
    for key in COMPARED:
        assert isinstance(result[key], int | float) and math.isfinite(result[key]) and result[key] > 0, (key, result)


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


def test_client_and_vllm_bench_serve_count_alike_on_the_double(doubles, tiny_model, tmp_path):
    """A server whose timing is a model: both tools complete the same requests and read every figure from it (the
    ratios are printed; `make bench` measures them). The prompts stay under the double's 80 tokens, where its
    prefill time is flat."""
    run = doubles(1)
    vllm, client = bench_agreement.on_the_double(run.url, tiny_model, tmp_path)
    print("\n" + table("vllm bench serve vs the client, the double at speed 1, 4 x 12 requests", [("", vllm, client)]))
    assert (vllm["completed"], client["completed"]) == (12, 12)
    assert (vllm["total_output_tokens"], client["total_output_tokens"]) == (12 * 48, 12 * 48)
    assert_figures_present(vllm)
    assert_figures_present(client)
    assert set(ratios(vllm, client)) == set(COMPARED)


def test_client_keeps_16_streams_at_4x_the_article_peak(doubles):
    """At 4x the article's peak rate (16 streams, 1560 tok/s modeled) the client completes every stream and measures
    a decode figure, next to the reference client (aiohttp, as in vllm bench serve) in the same script. The overhead
    ratio is printed here and measured by `make bench` (scripts/bench-client-overhead)."""
    overhead = load_script(ROOT / "scripts" / "bench-client-overhead")
    run = doubles(4)
    modeled = overhead.total_throughput(16) * 4
    figures = overhead.measure(run.url, 16, 256, modeled, repeat=1)
    for name, f in figures.items():
        print(
            f"\n{name:9} decode {f['decode']:.0f} tok/s of {modeled:.0f} modeled: ratio {f['ratio']:.3f}, "
            f"{f['cpu_us_per_token']:.0f} us CPU per token, {100 * f['cpu_share']:.1f} % of a core"
        )
    assert (figures["client"]["completed"], figures["reference"]["completed"]) == (16, 16)
    assert figures["client"]["decode"] > 0 and figures["client"]["cpu_us_per_token"] > 0, figures


def test_the_module_judges_the_double_against_every_band(doubles, capsys):
    """The vllm_bench module (the client path) against the double at real speed: one check per band of the article,
    each a verdict with its measured figure and the band it was held to. Whether the double lands inside the bands
    is a speed figure: printed here, and by `make bench` (tests/doubles/vllm/bench_speed.py)."""
    run = doubles(1)
    module = vllm_bench
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
    by_name = {c["name"]: c for c in bench["checks"]}
    assert by_name["requests"]["status"] == "pass", by_name["requests"]  # every request completed
    for name, check in by_name.items():
        assert check["status"] in ("pass", "warn", "fail"), check
        if name != "requests":
            assert isinstance(check["measured"], int | float) and check["measured"] > 0, check
            assert check["expected"], check
    assert bench["status"] in ("pass", "warn", "fail") and len(bench["summary"]) >= len(by_name)


# --- the real vLLM ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real(tmp_path_factory, tiny_model):
    server = real_vllm.RealVllm(free_port(), tiny_model, log_path=tmp_path_factory.mktemp("bench-real") / "vllm.log")
    server.start()
    yield server
    server.stop()


def test_client_and_vllm_bench_serve_count_alike_on_real_vllm(real, tiny_model, tmp_path):
    """One round, both tools at the same time on the real server: each completes every request with the fixed
    output length (ignore_eos) and reads every figure; the ratios are printed (`make bench` runs three rounds and
    prints their medians)."""
    rows = bench_agreement.on_real_vllm(real.base_url, tiny_model, tmp_path, seeds=(1,), requests=16, output=64)
    print("\n" + table("vllm bench serve and the client at the same time, real vLLM (CPU), 4 x 16 requests", rows))
    ((_, vllm, client),) = rows
    assert (vllm["completed"], client["completed"]) == (16, 16)
    assert (vllm["total_output_tokens"], client["total_output_tokens"]) == (16 * 64, 16 * 64)
    assert_figures_present(vllm)
    assert_figures_present(client)


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
    module = vllm_bench
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
