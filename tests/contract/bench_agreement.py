#!/usr/bin/env python3
"""Agreement of the project's benchmark client (plugins/module_utils/bench_client.py) with the real `vllm bench
serve` (vLLM 0.32.0 CPU build in .venv-vllm): a benchmark that prints the ratios client / vllm bench serve, never
a pass or a fail on them (`make bench` runs it in CI; tests/contract/test_bench_contract.py keeps the exact part:
request and token counts, field shapes).

    tests/contract/bench_agreement.py [--rounds 3] [--requests 48]

Two servers, one after the other:
  * the vLLM test double at speed 1 (its timing is a model, little CPU): vllm bench serve, then the client, with
    the same 12 requests of < 80 prompt tokens at concurrency 4 (the double's prefill is flat there);
  * the real vLLM on the tiny model (built in a temporary directory): in each round both tools run at the same
    time, share the server, with the same concurrency (4), prompt length (80 tokens), output length (128,
    ignore_eos) and request count; the median of the rounds' ratios is printed.

What has been seen on the 2-core CI machine: on the double, all figures agree within 1.5 %; on the real vLLM,
output throughput within 1.5 % in 13 of 15 rounds (5.7 % and 9.9 % in the other two; 12 % in a run on a VM loaded
by other jobs), mean TPOT within 5 % in 7 of 8, mean TTFT 0.55-1.25x (median 0.8: a TTFT of ~100 ms on this
server is made of scheduling delays of tens of ms, and the vllm bench serve process — a 2 GB Python with torch —
gets the CPU back later on a loaded machine). Exits 0 unless a server failed to start or a tool failed to run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for _path in (str(HERE), str(ROOT / "tests" / "doubles" / "vllm"), str(ROOT / "collections")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import real_vllm  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils import bench_client, bench_judge  # noqa: E402
from harness import Launcher, free_port, make_installs, make_weights  # noqa: E402

MODEL = real_vllm.SERVED_MODEL_NAME
COMPARED = ("output_throughput", "decode_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_input_tokens")


def vllm_bench_argv(
    base_url: str, tokenizer: Path, result: Path, concurrency: int, requests: int, prompt: int, output: int, seed: int
) -> list[str]:
    """The real `vllm bench serve` (CLI of .venv-vllm), as the vllm_bench module runs it in the container."""
    return real_vllm.vllm_cli(
        *("bench", "serve", "--backend", "openai-chat", "--base-url", base_url, "--endpoint", "/v1/chat/completions"),
        *("--model", MODEL, "--tokenizer", str(tokenizer), "--dataset-name", "random"),
        *("--random-input-len", str(prompt), "--random-output-len", str(output), "--num-prompts", str(requests)),
        *("--max-concurrency", str(concurrency), "--seed", str(seed), "--ignore-eos", "--disable-tqdm"),
        *("--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99", "--save-result"),
        *("--save-detailed", "--result-dir", str(result.parent), "--result-filename", result.name),
    )


def vllm_bench(argv: list[str], client: Callable[[], dict] | None = None) -> tuple[dict, dict | None]:
    """Run vllm bench serve and return its parsed result; with `client` (a callable), run it in this process as soon
    as vllm bench serve starts its main run (after ~20 s of imports), so that both load the server at the same time.
    Raises RuntimeError with the output's tail when vllm bench serve fails."""
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
    if proc.wait() != 0:
        raise RuntimeError("vllm bench serve failed:\n" + "".join(seen)[-3000:])
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


def on_the_double(base_url: str, tokenizer: Path, workdir: Path, requests: int = 12) -> tuple[dict, dict]:
    """vllm bench serve, then the client with the prompt length it measured, 4 streams x `requests` x 48 tokens."""
    vllm, _ = vllm_bench(vllm_bench_argv(base_url, tokenizer, workdir / "double.json", 4, requests, 80, 48, seed=1))
    calibration = bench_client.calibrate(base_url, MODEL)
    prompt = round(vllm["mean_input_tokens"] - calibration["template_tokens"])
    client = bench_judge.annotate(bench_client.run_load(base_url, MODEL, None, 4, requests, prompt, 48))
    return vllm, client


def on_real_vllm(
    base_url: str, tokenizer: Path, workdir: Path, seeds: tuple[int, ...], requests: int = 48, output: int = 128
) -> list[tuple[str, dict, dict]]:
    """One round per seed, both tools at the same time at concurrency 4 (other prompts each round: no prefix-cache
    hits); rows of (label, vllm bench serve's figures, the client's)."""
    calibration = bench_client.calibrate(base_url, MODEL)
    if calibration["error"] is not None:
        raise RuntimeError(f"calibration failed: {calibration['error']}")
    rows = []
    for seed in seeds:

        def client(seed: int = seed) -> dict:
            per_word = calibration["tokens_per_word"]
            return bench_client.run_load(
                base_url, MODEL, None, 4, requests, 80, output, tokens_per_word=per_word, seed=seed
            )

        argv = vllm_bench_argv(base_url, tokenizer, workdir / f"real-{seed}.json", 4, requests, 80, output, seed)
        vllm, result = vllm_bench(argv, client)
        if result is None:
            raise RuntimeError("vllm bench serve never started its main run")
        rows.append((f"round {seed}", vllm, bench_judge.annotate(result)))
    return rows


def median_ratios(rows: list[tuple[str, dict, dict]]) -> dict[str, float]:
    return {k: statistics.median(c[k] / v[k] for _, v, c in rows) for k in COMPARED}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds on the real vLLM (median printed)")
    parser.add_argument("--requests", type=int, default=48, help="requests per tool and round on the real vLLM")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="a800-bench-agreement-") as tmp:
        base = Path(tmp)
        tokenizer = real_vllm.build_model(base / "tiny-model")
        launcher = Launcher(base, make_installs(base / "installs"), make_weights(base / "weights"))
        try:
            run = launcher.start(env={"VLLM_TEST_DOUBLE_SPEED": "1"})
            if "Application startup complete." not in run.log:
                print(run.log, file=sys.stderr)
                return 1
            vllm, client = on_the_double(run.url, tokenizer, base)
            print(
                table(
                    "vllm bench serve vs the client, the vLLM test double at speed 1, 4 x 12 requests",
                    [("", vllm, client)],
                )
            )
        finally:
            launcher.stop_all()
        with real_vllm.RealVllm(free_port(), tokenizer, log_path=base / "vllm.log") as server:
            rows = on_real_vllm(server.base_url, tokenizer, base, tuple(range(1, args.rounds + 1)), args.requests)
        title = f"\nvllm bench serve and the client at the same time, real vLLM (CPU), 4 x {args.requests} requests"
        print(table(title, rows))
        median = median_ratios(rows)
        print("median ratios (client / vllm bench serve): " + ", ".join(f"{k} {v:.3f}" for k, v in median.items()))
        print(
            "double ratios (client / vllm bench serve): "
            + ", ".join(f"{k} {v:.3f}" for k, v in ratios(vllm, client).items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
