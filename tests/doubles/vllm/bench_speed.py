#!/usr/bin/env python3
"""Measure the vLLM test double's speed model with the project's benchmark client, against the article's baselines.

    bench_speed.py            decode throughput at 1/4/16 streams and TTFT over 80-960 prompt tokens at real
                              speed (VLLM_TEST_DOUBLE_SPEED=1), then how many concurrent streams the double keeps
                              at full modeled speed on one core with a high speed factor.

Prints figures and verdicts against the bands; it is a benchmark, not a test, and exits 0 unless the double
failed to start.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "src"), str(HERE.parents[2] / "collections")]
from ansible_collections.a800.vllm.plugins.module_utils import bench_judge  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.bench_client import run_load  # noqa: E402
from harness import ROOT, Launcher, make_installs, make_weights  # noqa: E402
from vllm._double.generate import total_throughput  # noqa: E402

PROFILE = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"]
BASELINES = PROFILE["baselines"]
BANDS_TOK_S = {int(k.split("_")[1]): tuple(v) for k, v in BASELINES["decode_tok_s"].items()}
TTFT_BAND_S = tuple(BASELINES["ttft_s"]["range"])
MODEL = "glm-5.2-nvfp4"


def concurrent(url: str, streams: int, max_tokens: int, prompt_tokens: int = 80) -> dict:
    """One wave of `streams` requests with the project's benchmark client (plugins/module_utils/bench_client.py):
    decode tok/s = streams / mean TPOT, mean TTFT in seconds."""
    result = bench_judge.annotate(run_load(url, MODEL, None, streams, streams, prompt_tokens, max_tokens))
    return {"streams": streams, "tok_s": result["decode_throughput"] or 0.0, "ttft": result["mean_ttft_ms"] / 1000}


def verdict(value: float, band: tuple[float, float]) -> str:
    return "in band" if band[0] <= value <= band[1] else "OUT OF BAND"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        launcher = Launcher(base, make_installs(base / "installs"), make_weights(base / "weights"))
        try:
            run = launcher.start(env={"VLLM_TEST_DOUBLE_SPEED": "1"})
            if "Application startup complete." not in run.log:
                print(run.log, file=sys.stderr)
                return 1
            print("decode throughput at real speed (article, 8x A800 TP8 + MTP)")
            print(f"{'streams':>8} {'tok/s':>8} {'band':>12}  verdict")
            for streams, band in BANDS_TOK_S.items():
                r = concurrent(run.url, streams, 160)
                print(f"{streams:>8} {r['tok_s']:>8.1f} {band[0]:>5}-{band[1]:<6}  {verdict(r['tok_s'], band)}")
            print("\nTTFT by prompt length (article: 0.2-0.5 s for 80-960 tokens)")
            for tokens in (80, 240, 480, 960):
                r = concurrent(run.url, 1, 4, prompt_tokens=tokens)
                print(f"{tokens:>8} tokens  TTFT {r['ttft']:.3f} s  {verdict(r['ttft'], TTFT_BAND_S)}")
            fast = launcher.start(env={"VLLM_TEST_DOUBLE_SPEED": "100"}, extra=["--max-num-seqs", "256"])
            print("\nthe double on one core at speed factor 100 (modeled throughput x100)")
            print(f"{'streams':>8} {'tok/s':>10} {'modeled':>10} {'ratio':>6}")
            sustained = 0
            for streams in (16, 32, 64, 128, 256):
                r = concurrent(fast.url, streams, 200)
                modeled = total_throughput(streams) * 100
                ratio = r["tok_s"] / modeled
                sustained = streams if ratio >= 0.9 else sustained
                print(f"{streams:>8} {r['tok_s']:>10.0f} {modeled:>10.0f} {ratio:>6.2f}")
            print(f"\nsustained_streams_at_speed_100={sustained}")
        finally:
            launcher.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
