"""The fleet's cost, measured: the same streamed load through the gateway (nginx + vllm-router) and straight to the
serving hosts, side by side in one run, at each concurrency level.

Direct, the level's streams are spread over the serving hosts by the client itself (round robin: 16 streams over two
hosts are 8 + 8, run at once), so that both paths put the same load on the same servers and only the proxies differ.
Reported per level: p50 / p99 of TTFT and of the end-to-end latency on each path, the latency the gateway adds (ms),
and the throughput ratio gateway / direct (output tokens per second). Figures, never a verdict: the only failure is
a request that did not complete. Standard library only (bench_client), as it runs on the gateway host.
"""

from __future__ import annotations

import threading
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.bench_client import percentile, run_load


def spread(concurrency: int, hosts: int) -> list[int]:
    """`concurrency` streams over `hosts` hosts, round robin: 4 over 2 -> [2, 2], 1 over 2 -> [1, 0]."""
    return [concurrency // hosts + (1 if i < concurrency % hosts else 0) for i in range(hosts)]


def figures(requests: list[dict], duration: float) -> dict[str, Any]:
    """p50/p99 TTFT and E2E latency (ms) and output throughput of a run's request records."""
    done = [r for r in requests if r.get("success")]
    ttft = [r["ttft_s"] for r in done]
    e2el = [r["e2el_s"] for r in done]
    tokens = sum(r["output_tokens"] for r in done)
    return {
        "completed": len(done),
        "failed": len(requests) - len(done),
        "p50_ttft_ms": percentile(ttft, 50) * 1000,
        "p99_ttft_ms": percentile(ttft, 99) * 1000,
        "p50_e2el_ms": percentile(e2el, 50) * 1000,
        "p99_e2el_ms": percentile(e2el, 99) * 1000,
        "output_throughput": tokens / duration if duration > 0 else 0.0,
        "duration_s": duration,
    }


def direct(urls: list[str], concurrency: int, requests_per_stream: int, **load: Any) -> dict[str, Any]:
    """The level's streams spread over `urls`, each host's share run at once in its own thread."""
    shares = [(url, c) for url, c in zip(urls, spread(concurrency, len(urls)), strict=True) if c > 0]
    results: list[dict] = [{} for _ in shares]

    def one(index: int, url: str, streams: int) -> None:
        results[index] = run_load(url, concurrency=streams, num_requests=streams * requests_per_stream, **load)

    threads = [threading.Thread(target=one, args=(i, url, c)) for i, (url, c) in enumerate(shares)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = [r for result in results for r in result.get("requests", [])]
    errors = [e for result in results for e in result.get("errors", [])]
    return {**figures(records, max(r.get("duration", 0.0) for r in results)), "errors": errors[:5]}


def through(url: str, concurrency: int, requests_per_stream: int, **load: Any) -> dict[str, Any]:
    result = run_load(url, concurrency=concurrency, num_requests=concurrency * requests_per_stream, **load)
    return {**figures(result["requests"], result["duration"]), "errors": result["errors"][:5]}


def compare(
    gateway_url: str,
    gateway_key: str,
    direct_urls: list[str],
    direct_key: str | None,
    model: str,
    levels: list[int],
    requests_per_stream: int = 2,
    prompt_tokens: int = 80,
    max_tokens: int = 64,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Each level through the gateway, then direct; the table of both and what the gateway adds."""
    load = {"model": model, "prompt_tokens": prompt_tokens, "max_tokens": max_tokens, "timeout_s": timeout_s}
    rows = []
    for level in levels:
        gateway = through(gateway_url, level, requests_per_stream, api_key=gateway_key, **load)
        straight = direct(direct_urls, level, requests_per_stream, api_key=direct_key, **load)
        rows.append(
            {
                "concurrency": level,
                "gateway": gateway,
                "direct": straight,
                "added_ms": {
                    name: gateway[name] - straight[name]
                    for name in ("p50_ttft_ms", "p99_ttft_ms", "p50_e2el_ms", "p99_e2el_ms")
                },
                "throughput_ratio": (
                    gateway["output_throughput"] / straight["output_throughput"]
                    if straight["output_throughput"]
                    else 0.0
                ),
            }
        )
    return {
        "levels": rows,
        "hosts": len(direct_urls),
        "completed": sum(r[p]["completed"] for r in rows for p in ("gateway", "direct")),
        "failed": sum(r[p]["failed"] for r in rows for p in ("gateway", "direct")),
        "requests_per_stream": requests_per_stream,
        "prompt_tokens": prompt_tokens,
        "max_tokens": max_tokens,
    }


def markdown(result: dict[str, Any]) -> str:
    """The overhead table: one row per level."""
    lines = [
        f"Gateway (nginx + vllm-router) against direct to the {result['hosts']} serving hosts (the client spreading "
        f"the streams), {result['requests_per_stream']} requests per stream, {result['prompt_tokens']} prompt and "
        f"{result['max_tokens']} output tokens; {result['completed']} requests completed, {result['failed']} failed.",
        "",
        "| streams | TTFT p50 direct / gateway (ms) | TTFT p99 direct / gateway | E2E p50 direct / gateway | "
        "E2E p99 direct / gateway | added p50 / p99 E2E (ms) | throughput gateway / direct |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["levels"]:
        d, g, a = row["direct"], row["gateway"], row["added_ms"]
        lines.append(
            f"| {row['concurrency']} | {d['p50_ttft_ms']:.1f} / {g['p50_ttft_ms']:.1f} | "
            f"{d['p99_ttft_ms']:.1f} / {g['p99_ttft_ms']:.1f} | {d['p50_e2el_ms']:.1f} / {g['p50_e2el_ms']:.1f} | "
            f"{d['p99_e2el_ms']:.1f} / {g['p99_e2el_ms']:.1f} | {a['p50_e2el_ms']:+.1f} / {a['p99_e2el_ms']:+.1f} | "
            f"{row['throughput_ratio']:.3f} |"
        )
    return "\n".join(lines) + "\n"
