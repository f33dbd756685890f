"""Benchmark results against the article's baselines, and `vllm bench serve --save-result` files read into the same
result shape as the project's client (bench_client.run_load), so that both tools feed one judge.

A result is a dict under the keys of `vllm bench serve --save-result`: duration, completed, failed,
total_input_tokens, total_output_tokens, request_throughput, output_throughput, total_token_throughput,
max_concurrency, num_prompts, mean/median/std/p50/p90/p99 of ttft, tpot, itl, e2el in ms; plus tool, prompt_tokens,
max_tokens, errors, and `decode_throughput` (added by `annotate`).

Decode throughput, what the article's "single-stream decode 74-85 tok/s, 4 concurrent 160-196, 16 concurrent
386-393" measures, is the output tokens after each request's first over the time during which requests were decoding
(`decode_throughput`). It leaves the prefill out (`output_throughput`, total output tokens over the whole run,
includes every TTFT and the ramp, so it reads lower: 256 tokens at one stream, 80 tok/s and a 0.2 s TTFT give
75.5 tok/s).

Judging, with t = tolerance_pct / 100 and the article's band [lo, hi]:
  throughput (higher is better): pass at >= lo x (1 - t), warn at >= lo x (1 - 2t), else fail; above hi is a pass
      with a note (faster than the article);
  latency (TTFT, lower is better): pass at <= hi x (1 + t), warn at <= hi x (1 + 2t), else fail; below lo is a pass
      with a note;
  TTFT is judged for the prompt lengths inside the article's range (80-960 tokens), on the mean over the requests;
  requests: any failed request fails the `requests` check;
  long context (4 x 32k): every request must complete, and where the baselines hold `long_context` bands
      (decode_tok_s, ttft_s), they are judged like the others.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, PENDING, WARN, check, counts, worst

DEFAULT_TOLERANCE_PCT = 10.0
RESULT_KEYS = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "spec_decode_acceptance_length",
    "spec_decode_acceptance_rate",
)
METRICS = ("ttft", "tpot", "itl", "e2el")
ERRORS_KEPT = 5


def streams(result: dict[str, Any]) -> int:
    """How many requests ran at once: the concurrency limit, at most the number of completed requests."""
    limit = result.get("max_concurrency") or result.get("num_prompts") or result.get("completed") or 0
    return max(0, min(int(limit), int(result.get("completed") or 0)))


def decode_spans(result: dict[str, Any]) -> list[tuple[float, float, int]] | None:
    """(first token, last token, tokens after the first) of every completed request, in seconds on one clock;
    None without per-request times (a `vllm bench serve` file saved without --save-detailed)."""
    records = [r for r in result.get("requests") or [] if r.get("success")]
    if not records or any(r.get("start_s") is None or r.get("output_tokens") is None for r in records):
        return None
    return [
        (r["start_s"] + r["ttft_s"], r["start_s"] + r["e2el_s"], int(r["output_tokens"]) - 1)
        for r in records
        if r["output_tokens"] > 1
    ]


def union_length(spans: list[tuple[float, float, int]]) -> float:
    """Seconds covered by at least one of the spans."""
    total, end = 0.0, float("-inf")
    for low, high, _ in sorted(spans):
        if high > end:
            total += high - max(low, end)
            end = high
    return total


def decode_throughput(result: dict[str, Any]) -> float | None:
    """Total decode tok/s: the tokens after each request's first, over the time during which at least one request
    was decoding (first to last token, the union over the requests). With a single stream it is 1000 / mean TPOT;
    with several it stays right when they do not all decode at once (the server caps its batch below the
    concurrency, or requests start late). Without per-request times: streams x 1000 / mean TPOT, which assumes that
    all streams decode together. None when no request had two output tokens."""
    spans = decode_spans(result)
    if spans:
        covered = union_length(spans)
        return sum(tokens for _, _, tokens in spans) / covered if covered > 0 else None
    tpot = result.get("mean_tpot_ms")
    if spans is not None or not tpot or not streams(result):
        return None
    return streams(result) * 1000.0 / tpot


def annotate(result: dict[str, Any]) -> dict[str, Any]:
    """The result with `decode_throughput` and `mean_input_tokens` added (in place; returned for chaining)."""
    result["decode_throughput"] = decode_throughput(result)
    completed = result.get("completed") or 0
    result["mean_input_tokens"] = (result.get("total_input_tokens") or 0) / completed if completed else None
    return result


def parse_vllm_result(
    document: dict[str, Any], prompt_tokens: int | None = None, max_tokens: int | None = None
) -> dict[str, Any]:
    """A `vllm bench serve --save-result` JSON document (vLLM 0.2x-0.3x) as a result (see the module docstring).
    With `--save-detailed` the per-request lists become `requests` records like the client's."""
    result: dict[str, Any] = {k: document[k] for k in RESULT_KEYS if k in document}
    for key, value in document.items():
        if any(key.endswith(f"_{metric}_ms") for metric in METRICS):
            result[key] = value
    num_prompts = document.get("num_prompts")
    result.update(
        tool="vllm",
        backend=document.get("backend") or document.get("endpoint_type"),
        max_concurrency=document.get("max_concurrency") or num_prompts,
        num_prompts=num_prompts,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        errors=[e for e in document.get("errors") or [] if e][:ERRORS_KEPT],
    )
    if isinstance(document.get("ttfts"), list) and isinstance(document.get("latencies"), list):
        result["requests"] = _detailed(document)
    return annotate(result)


def _detailed(document: dict[str, Any]) -> list[dict[str, Any]]:
    records = []
    outputs = document.get("output_lens") or []
    inputs = document.get("input_lens") or []
    errors = document.get("errors") or []
    ttfts, latencies = document["ttfts"], document["latencies"]
    starts = document.get("start_times") or []
    starts_min = min(starts) if starts else 0.0
    for i in range(min(len(ttfts), len(latencies))):
        ttft, latency = ttfts[i], latencies[i]
        tokens = outputs[i] if i < len(outputs) else None
        error = errors[i] if i < len(errors) else None
        if error or not tokens:
            records.append({"success": False, "error": error or "no output"})
            continue
        records.append(
            {
                "success": True,
                "start_s": starts[i] - starts_min if i < len(starts) else None,
                "ttft_s": ttft,
                "tpot_s": (latency - ttft) / (tokens - 1) if tokens > 1 else None,
                "e2el_s": latency,
                "output_tokens": tokens,
                "input_tokens": inputs[i] if i < len(inputs) else None,
            }
        )
    return records


def _pct(value: float) -> str:
    return f"{value:g}"


def _record(
    name: str, status: str, measured: float | None, band: list[float], unit: str, limits: dict[str, float], detail: str
) -> dict[str, Any]:
    """A check record of a figure against its band, with the unit and the pass/warn limits it was held to."""
    rounded = None if measured is None else round(measured, 3)
    limits = {k: round(v, 3) for k, v in limits.items()}
    return check(name, status, "", rounded, list(band), detail, unit=unit, limits=limits)


def judge_higher(
    name: str, measured: float | None, band: list[float], tolerance_pct: float, unit: str, what: str
) -> dict[str, Any]:
    """A throughput-like figure against [lo, hi]: pass down to lo(1-t), warn down to lo(1-2t); above hi passes."""
    low, high = float(band[0]), float(band[1])
    t = tolerance_pct / 100
    limits = {"pass": round(low * (1 - t), 9), "warn": round(low * (1 - 2 * t), 9)}  # 74 x 0.9 is 66.6, not 66.60..01
    article = f"article {low:g}-{high:g} {unit}"
    if measured is None:
        return _record(name, "fail", None, band, unit, limits, f"{what}: not measured ({article})")
    if measured >= limits["pass"]:
        status = PASS
        if measured > high:
            note = "above the article's band"
        elif measured < low:
            note = f"below the band, within the {_pct(tolerance_pct)} % tolerance"
        else:
            note = "inside the band"
    elif measured >= limits["warn"]:
        status, note = WARN, f"below the band by more than {_pct(tolerance_pct)} %"
    else:
        status, note = FAIL, f"below the band by more than {_pct(2 * tolerance_pct)} %"
    return _record(name, status, measured, band, unit, limits, f"{what}: {measured:.1f} {unit}, {article}: {note}")


def judge_lower(
    name: str, measured: float | None, band: list[float], tolerance_pct: float, unit: str, what: str
) -> dict[str, Any]:
    """A latency against [lo, hi]: pass up to hi(1+t), warn up to hi(1+2t); below lo (faster) passes."""
    low, high = float(band[0]), float(band[1])
    t = tolerance_pct / 100
    limits = {"pass": round(high * (1 + t), 9), "warn": round(high * (1 + 2 * t), 9)}
    article = f"article {low:g}-{high:g} {unit}"
    if measured is None:
        return _record(name, "fail", None, band, unit, limits, f"{what}: not measured ({article})")
    if measured <= limits["pass"]:
        status = PASS
        if measured < low:
            note = "faster than the article's band"
        elif measured > high:
            note = f"above the band, within the {_pct(tolerance_pct)} % tolerance"
        else:
            note = "inside the band"
    elif measured <= limits["warn"]:
        status, note = WARN, f"slower than the band by more than {_pct(tolerance_pct)} %"
    else:
        status, note = FAIL, f"slower than the band by more than {_pct(2 * tolerance_pct)} %"
    return _record(name, status, measured, band, unit, limits, f"{what}: {measured:.3f} {unit}, {article}: {note}")


def _seconds(result: dict[str, Any], key: str = "mean_ttft_ms") -> float | None:
    return result[key] / 1000 if result.get("completed") and result.get(key) is not None else None


def _band(value: Any) -> list[float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return [float(value[0]), float(value[1])]
    return None


def judge(
    scenarios: dict[str, Any],
    baselines: dict[str, Any],
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
    gpu_utilization_pct: float | None = None,
) -> list[dict[str, Any]]:
    """Check records for the scenarios' results: {"concurrency": [result, ...], "ttft": [result, ...],
    "long_context": result or None}, against `baselines` (model_profile.baselines)."""
    checks: list[dict[str, Any]] = []
    decode_bands = baselines.get("decode_tok_s") or {}
    for result in scenarios.get("concurrency") or []:
        level = int(result.get("max_concurrency") or 0)
        band = _band(decode_bands.get(f"concurrency_{level}"))
        if band is None:
            continue
        measured = decode_throughput(result)
        record = judge_higher(
            f"decode_tok_s@{level}", measured, band, tolerance_pct, "tok/s", f"decode throughput at {level} concurrent"
        )
        if result.get("output_throughput") is not None:
            record["detail"] += f" (output throughput incl. prefill {result['output_throughput']:.1f} tok/s)"
        checks.append(record)
    ttft = baselines.get("ttft_s") or {}
    ttft_band = _band(ttft.get("range"))
    lengths = _band(ttft.get("prompt_tokens")) or [0.0, float("inf")]
    for result in scenarios.get("ttft") or []:
        prompt = int(result.get("prompt_tokens") or 0)
        if ttft_band is None or not lengths[0] <= prompt <= lengths[1]:
            continue
        record = judge_lower(
            f"ttft_s@{prompt}", _seconds(result), ttft_band, tolerance_pct, "s", f"mean TTFT at {prompt} prompt tokens"
        )
        if result.get("p90_ttft_ms") is not None and result.get("completed"):
            record["detail"] += f" (p90 {result['p90_ttft_ms'] / 1000:.3f} s)"
        checks.append(record)
    long_context = scenarios.get("long_context")
    if long_context:
        checks.extend(judge_long_context(long_context, baselines.get("long_context") or {}, tolerance_pct))
    gpu_band = _band(baselines.get("gpu_utilization_pct"))
    if gpu_utilization_pct is not None and gpu_band is not None:
        checks.append(
            judge_higher(
                "gpu_utilization_pct",
                gpu_utilization_pct,
                gpu_band,
                tolerance_pct,
                "%",
                "mean GPU utilisation at the highest concurrency",
            )
        )
    checks.append(judge_requests(scenarios))
    return checks


def judge_long_context(result: dict[str, Any], bands: dict[str, Any], tolerance_pct: float) -> list[dict[str, Any]]:
    """4 x 32k: every request completes (the article gives no figure); optional bands `decode_tok_s`, `ttft_s`."""
    wanted = int(result.get("num_prompts") or 0)
    completed = int(result.get("completed") or 0)
    level = int(result.get("max_concurrency") or wanted)
    prompt = int(result.get("prompt_tokens") or 0)
    mean_input = (result.get("total_input_tokens") or 0) / completed if completed else 0
    ttft = _seconds(result)
    decode = decode_throughput(result)
    figures = (
        f"mean TTFT {ttft:.2f} s, decode {decode or 0:.1f} tok/s, {mean_input:.0f} input tokens per request"
        if completed
        else "; ".join(result.get("errors") or ["no request completed"])
    )
    status = PASS if completed == wanted and wanted > 0 else FAIL
    detail = f"{completed}/{wanted} requests of {prompt} prompt tokens completed at {level} concurrent: {figures}"
    checks = [
        check(
            f"long_context@{level}x{prompt}",
            status,
            "",
            completed,
            [wanted, wanted],
            detail,
            unit="requests",
            limits={},
        )
    ]
    if completed and _band(bands.get("decode_tok_s")):
        checks.append(
            judge_higher("long_context_decode_tok_s", decode, bands["decode_tok_s"], tolerance_pct, "tok/s", "decode")
        )
    if completed and _band(bands.get("ttft_s")):
        checks.append(judge_lower("long_context_ttft_s", ttft, bands["ttft_s"], tolerance_pct, "s", "mean TTFT"))
    return checks


def judge_requests(scenarios: dict[str, Any]) -> dict[str, Any]:
    """Fail when any request of any scenario failed."""
    results = [*(scenarios.get("concurrency") or []), *(scenarios.get("ttft") or [])]
    if scenarios.get("long_context"):
        results.append(scenarios["long_context"])
    sent = sum(int(r.get("num_prompts") or 0) for r in results)
    failed = [r for r in results if r.get("failed") or int(r.get("completed") or 0) < int(r.get("num_prompts") or 0)]
    lost = sum(int(r.get("num_prompts") or 0) - int(r.get("completed") or 0) for r in failed)
    detail = f"{sent - lost}/{sent} requests completed"
    if failed:
        first = next((e for r in failed for e in r.get("errors") or []), "no error text")
        detail += f"; failures at {', '.join(_label(r) for r in failed)}; first error: {str(first)[:300]}"
    status = FAIL if failed else PASS
    return check("requests", status, "", sent - lost, [sent, sent], detail, unit="requests", limits={})


def _label(result: dict[str, Any]) -> str:
    return f"concurrency {result.get('max_concurrency')} x {result.get('prompt_tokens')} prompt tokens"


def summary_lines(checks: list[dict[str, Any]]) -> list[str]:
    """One line per check, `STATUS name: detail`, then the overall status."""
    lines = [f"{c['status'].upper():4} {c['name']}: {c['detail']}" for c in checks]
    by_status = {s: n for s, n in counts(checks).items() if s != PENDING}  # a figure is measured or not: no pending
    lines.append(f"bench {worst(checks)}: " + ", ".join(f"{n} {s}" for s, n in by_status.items()))
    return lines
