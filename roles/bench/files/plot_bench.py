#!/usr/bin/env python3
"""Plot a bench.json (the vllm_bench module's result) into bench.png: decode throughput against concurrency with
the article's band, and TTFT against prompt length with the article's band.

    roles/bench/files/plot_bench.py reports/<host>/bench.json reports/<host>/bench.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def decode_points(bench: dict) -> tuple[list[int], list[float]]:
    """The judged decode figures; without bands (a profile with no baselines) the measured ones of each level."""
    rows = [
        (c["name"].split("@")[-1], c["measured"])
        for c in bench.get("checks", [])
        if c["name"].startswith("decode_tok_s@") and isinstance(c.get("measured"), int | float)
    ] or [
        (s["max_concurrency"], s["decode_throughput"])
        for s in (bench.get("scenarios") or {}).get("concurrency") or []
        if isinstance(s.get("decode_throughput"), int | float) and s.get("max_concurrency")
    ]
    rows.sort(key=lambda r: int(r[0]))
    return [int(r[0]) for r in rows], [float(r[1]) for r in rows]


def ttft_points(bench: dict) -> tuple[list[int], list[float]]:
    """The judged TTFT figures; without bands the measured mean of each prompt length."""
    rows = [
        (int(c["name"].split("@")[-1]), float(c["measured"]))
        for c in bench.get("checks", [])
        if c["name"].startswith("ttft_s@") and isinstance(c.get("measured"), int | float)
    ] or [
        (int(s["prompt_tokens"]), float(s["mean_ttft_ms"]) / 1000)
        for s in (bench.get("scenarios") or {}).get("ttft") or []
        if isinstance(s.get("mean_ttft_ms"), int | float) and s.get("prompt_tokens")
    ]
    rows.sort()
    return [r[0] for r in rows], [r[1] for r in rows]


def plot(bench: dict, baselines: dict, out: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs, ys = decode_points(bench)
    bands = baselines.get("decode_tok_s", {})
    for level, (low, high) in sorted(bands.items(), key=lambda kv: int(kv[0].split("_")[-1])):
        n = int(level.split("_")[-1])
        left.fill_between([n * 0.85, n * 1.15], low, high, color="tab:green", alpha=0.25, lw=0)
    left.plot(xs, ys, "o-", color="tab:blue", label="measured")
    if bands:
        left.fill_between([], [], [], color="tab:green", alpha=0.25, label="article (8x A800, TP8 + MTP)")
    left.set(xlabel="concurrent streams", ylabel="decode throughput (tok/s)", title="Throughput")
    if xs:  # a log axis needs points (a run whose every level failed has none)
        left.set(xscale="log")
        left.set_xticks(xs, [str(x) for x in xs])
    left.legend(loc="upper left")
    px, py = ttft_points(bench)
    ttft = baselines.get("ttft_s", {})
    if ttft:
        (p0, p1), (t0, t1) = ttft["prompt_tokens"], ttft["range"]
        right.fill_between([p0, p1], t0, t1, color="tab:green", alpha=0.25, lw=0, label="article")
    right.plot(px, py, "o-", color="tab:orange", label="measured (mean)")
    right.set(xlabel="prompt tokens", ylabel="time to first token (s)", title="TTFT", ylim=(0, None))
    right.legend(loc="upper left")
    fig.suptitle(f"vLLM benchmark ({bench.get('tool', '?')}): {bench.get('status', '?')}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    data = json.loads(Path(argv[1]).read_text())
    plot(data["bench"], data.get("baselines", {}), Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
