"""The benchmark's plan run level by level: concurrency levels, TTFT over prompt lengths, the long context."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.bench_gpu import GpuSampler


def level_requests(concurrency: int, requests_per_level: int | None) -> int:
    return 2 * concurrency if requests_per_level is None else max(requests_per_level, concurrency)


def run_scenarios(
    runner: Callable[..., dict[str, Any]], params: dict[str, Any], sampler: GpuSampler | None
) -> dict[str, Any]:
    """The scenarios' results (see RETURN), each run with its own seed (different prompts: no prefix-cache hits)."""
    plan = params["scenarios"]
    seed = 1
    scenarios: dict[str, Any] = {"concurrency": [], "ttft": [], "long_context": None}
    levels = plan["concurrency"] or []
    for level in levels:
        sample = sampler is not None and level == max(levels) and "gpu_utilization" not in scenarios
        if sample:
            sampler.start()
        requests = level_requests(level, params["requests_per_level"])
        scenarios["concurrency"].append(runner(level, requests, params["prompt_tokens"], params["output_tokens"], seed))
        if sample:
            scenarios["gpu_utilization"] = sampler.stop()
        seed += 1
    for prompt in plan["ttft_prompt_tokens"] or []:
        scenarios["ttft"].append(runner(1, params["ttft_requests"], prompt, params["ttft_output_tokens"], seed))
        seed += 1
    long_context = plan["long_context"]
    if long_context["enabled"] and long_context["prompt_tokens"] > 0:
        n = long_context["concurrency"]
        scenarios["long_context"] = runner(n, n, long_context["prompt_tokens"], long_context["max_tokens"], seed)
    return scenarios
