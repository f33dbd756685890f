"""Prometheus metrics with vLLM's names (docs/vllm.md#metrics), counters that move with the traffic."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(BUCKETS, value)
        for j in range(i, len(BUCKETS)):
            self.counts[j] += 1
        self.total += value
        self.n += 1


@dataclass
class Metrics:
    model: str
    counters: dict[str, float] = field(
        default_factory=lambda: {
            "vllm:prompt_tokens_total": 0,
            "vllm:generation_tokens_total": 0,
            "vllm:num_preemptions_total": 0,
            "vllm:spec_decode_num_drafts_total": 0,
            "vllm:spec_decode_num_draft_tokens_total": 0,
            "vllm:spec_decode_num_accepted_tokens_total": 0,
        }
    )
    histograms: dict[str, Histogram] = field(
        default_factory=lambda: {
            "vllm:time_to_first_token_seconds": Histogram(),
            "vllm:inter_token_latency_seconds": Histogram(),
            "vllm:request_time_per_output_token_seconds": Histogram(),
            "vllm:e2e_request_latency_seconds": Histogram(),
        }
    )
    finished: dict[str, int] = field(default_factory=dict)  # vllm:request_success_total by finished_reason
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0

    def render(self) -> str:
        labels = f'engine="0",model_name="{self.model}"'
        out = []
        for name, value in (
            ("vllm:num_requests_running", self.running),
            ("vllm:num_requests_waiting", self.waiting),
            ("vllm:kv_cache_usage_perc", self.kv_usage),
        ):
            out += [f"# HELP {name} {name}", f"# TYPE {name} gauge", f"{name}{{{labels}}} {float(value)}"]
        for name, value in self.counters.items():
            out += [f"# HELP {name} {name}", f"# TYPE {name} counter", f"{name}{{{labels}}} {float(value)}"]
        name = "vllm:request_success_total"
        out += [f"# HELP {name} {name}", f"# TYPE {name} counter"]
        for reason in ("stop", "length", "abort", "error", "tool_calls"):
            out.append(
                f'{name}{{engine="0",finished_reason="{reason}",model_name="{self.model}"}} '
                f"{float(self.finished.get(reason, 0))}"
            )
        for name, hist in self.histograms.items():
            out += [f"# HELP {name} {name}", f"# TYPE {name} histogram"]
            for le, count in zip(BUCKETS, hist.counts, strict=True):
                out.append(f'{name}_bucket{{{labels},le="{le}"}} {float(count)}')
            out += [
                f'{name}_bucket{{{labels},le="+Inf"}} {float(hist.n)}',
                f"{name}_count{{{labels}}} {float(hist.n)}",
                f"{name}_sum{{{labels}}} {hist.total}",
            ]
        return "\n".join(out) + "\n"
