#!/usr/bin/python
"""Ansible module: benchmark a vLLM endpoint (decode throughput, TTFT, long context) against the article's baselines."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_bench
short_description: Benchmark a vLLM endpoint against the article's baselines
description:
  - Runs, against the OpenAI-compatible chat endpoint under O(base_url), the load test of the article
    (C(bench.py), C(ttft_test.py), C(ctx_4x32k_test.py)) and judges each figure against O(baselines)
    (C(model_profile.baselines)).
  - C(concurrency) levels (1, 4, 16) - C(requests_per_level) streamed requests of O(prompt_tokens) prompt tokens and
    O(output_tokens) output tokens, at most C(concurrency) at a time; judged on the decode throughput,
    streams x 1000 / mean TPOT ms (prefill left out), against C(decode_tok_s.concurrency_N).
  - C(ttft) - one request at a time, O(ttft_requests) per prompt length (80-960 tokens), O(ttft_output_tokens) output
    tokens; the mean TTFT must stay under the upper end of C(ttft_s.range) (faster passes).
  - C(long_context) - C(concurrency) requests of C(prompt_tokens) (4 x 32k) at once; every request must complete
    (the article gives no figure; C(long_context.decode_tok_s) / C(long_context.ttft_s) bands in O(baselines) are
    judged when present).
  - Bands are widened by O(tolerance_pct) for a pass and by twice that for a warning; beyond, the check fails.
  - O(tool=vllm) runs C(vllm bench serve) inside O(container) (C(docker exec); the image ships it) with the random
    dataset, C(--ignore-eos), and reads its C(--save-result) file; O(tool=client) runs the project's own streaming
    client (plugins/module_utils/bench_client.py, standard library only) on the host; O(tool=auto) takes C(vllm) when
    C(vllm bench serve --help) works in the container, else the client. Both give the same figures (vLLM's names
    and definitions) to the same judge (plugins/module_utils/bench_judge.py).
  - With the client, O(calibrate_prompts) first measures how many tokens the server's tokenizer makes of the
    synthetic words (two short requests), so that a prompt of N tokens has N tokens of content, as with
    C(vllm bench serve --random-input-len N); the chat template adds a few.
  - While the highest concurrency level runs, the GPUs' utilisation is sampled with C(nvidia-smi) when it is on the
    PATH (O(gpu_sampling)) and judged against C(gpu_utilization_pct).
  - Changes nothing on the host, but puts load on the server; in check mode it sends nothing and reports skipped.
    The module fails only on invalid options, or when O(tool=vllm) is asked for and not available; a bad figure is
    a C(fail) check in RV(bench.checks), for the play to act on.
options:
  base_url:
    description: The server's base URL, without C(/v1) (the client adds C(/v1/chat/completions)).
    type: str
    default: http://127.0.0.1:8001
  model:
    description: The model id, the server's C(--served-model-name).
    type: str
    required: true
  api_key:
    description: The API key (C(Authorization Bearer)), when the server or gateway wants one.
    type: str
  scenarios:
    description: What to run.
    type: dict
    default: {}
    suboptions:
      concurrency:
        description: Concurrency levels for the decode throughput (empty list - none).
        type: list
        elements: int
        default: [1, 4, 16]
      ttft_prompt_tokens:
        description: Prompt lengths in tokens for the TTFT runs (empty list - none).
        type: list
        elements: int
        default: [80, 240, 480, 960]
      long_context:
        description: The long-context run; C(enabled=false) skips it.
        type: dict
        default: {}
        suboptions:
          enabled:
            description: Run it.
            type: bool
            default: true
          concurrency:
            description: Requests at once (and in all).
            type: int
            default: 4
          prompt_tokens:
            description: Prompt tokens per request (the server's C(--max-model-len) must hold them plus C(max_tokens)).
            type: int
            default: 32768
          max_tokens:
            description: Output tokens per request.
            type: int
            default: 256
  prompt_tokens:
    description: Prompt tokens per request at the concurrency levels.
    type: int
    default: 128
  output_tokens:
    description: Output tokens per request at the concurrency levels (fixed with O(fixed_length)).
    type: int
    default: 256
  requests_per_level:
    description:
      - Requests sent at each concurrency level, at least the level's concurrency.
      - Omitted, two per concurrent stream (two waves).
    type: int
  ttft_requests:
    description: Requests per prompt length in the TTFT runs (one at a time).
    type: int
    default: 3
  ttft_output_tokens:
    description: Output tokens per request in the TTFT runs.
    type: int
    default: 16
  fixed_length:
    description:
      - Ask for exactly the output tokens requested - C(ignore_eos), a vLLM extension of the OpenAI API
        (C(--ignore-eos) of C(vllm bench serve)). Turn off for servers or gateways that reject unknown fields; the
        figures then use the tokens actually generated (usage).
    type: bool
    default: true
  calibrate_prompts:
    description: Measure the server's tokens per synthetic word before the client's runs (see the description).
    type: bool
    default: true
  tool:
    description: C(vllm) (C(vllm bench serve) in O(container)), C(client) (the project's client), or C(auto).
    type: str
    choices: [auto, client, vllm]
    default: auto
  container:
    description: The serving container, for O(tool=vllm) / O(tool=auto).
    type: str
    default: glm52-nvfp4
  container_base_url:
    description: The server's base URL as seen inside O(container). Omitted, C(http://127.0.0.1:PORT) with the port of
      O(base_url) (the article publishes the port as is, C(-p 8001:8001)).
    type: str
  tokenizer:
    description: The tokenizer path inside O(container) for C(vllm bench serve). Omitted, the model's C(root) as
      C(/v1/models) reports it (the served weights directory, e.g. C(/models/GLM-5.2-NVFP4)).
    type: str
  docker:
    description: The docker CLI.
    type: str
    default: docker
  baselines:
    description: The article's figures, C(model_profile.baselines) - C(decode_tok_s.concurrency_N) [lo, hi] tok/s,
      C(ttft_s.prompt_tokens) [lo, hi] and C(ttft_s.range) [lo, hi] s, C(gpu_utilization_pct) [lo, hi], optional
      C(long_context.decode_tok_s) / C(long_context.ttft_s).
    type: dict
    default: {}
  tolerance_pct:
    description: How far outside a band (percent of the band's bound) a figure still passes; twice that warns.
    type: float
    default: 10
  gpu_sampling:
    description: Sample GPU utilisation with C(nvidia-smi) during the highest concurrency level, when it exists.
    type: bool
    default: true
  timeout_s:
    description: Per request (client) or per C(vllm bench serve) run, in seconds.
    type: float
    default: 1800
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Benchmark against the article's baselines
  vllm_bench:
    base_url: http://127.0.0.1:8001
    model: "{{ model_profile.served_model_name }}"
    api_key: "{{ serve_api_key | default(omit) }}"
    container: glm52-nvfp4
    baselines: "{{ model_profile.baselines }}"
    tolerance_pct: 10
  register: bench_result

- name: Only the decode throughput at 16 streams, with the project's client
  vllm_bench:
    model: glm-5.2-nvfp4
    tool: client
    scenarios: {concurrency: [16], ttft_prompt_tokens: [], long_context: {enabled: false}}
    baselines: "{{ model_profile.baselines }}"
"""

RETURN = r"""
bench:
  description: The benchmark and its verdicts.
  returned: always
  type: dict
  contains:
    tool:
      description: C(vllm) or C(client) (C(none) when skipped in check mode).
      type: str
    tool_reason:
      description: Why this tool was used.
      type: str
    calibration:
      description: The client's prompt calibration - tokens_per_word, template_tokens, probes, error (null with vllm).
      type: dict
    scenarios:
      description:
        - C(concurrency) and C(ttft) (lists) and C(long_context) (or null) - results under the keys of
          C(vllm bench serve --save-result) - duration, completed, failed, total_input_tokens, total_output_tokens,
          request_throughput, output_throughput, total_token_throughput, mean/median/std/p50/p90/p99 of
          ttft/tpot/itl/e2el in ms - plus decode_throughput, mean_input_tokens, max_concurrency, num_prompts,
          prompt_tokens, max_tokens, errors and C(requests) (per request success, ttft_s, tpot_s, e2el_s,
          output_tokens, input_tokens).
      type: dict
    gpu_utilization:
      description: C(nvidia-smi) samples during the highest concurrency level - samples, mean_pct, per_gpu_mean_pct
        (null when not sampled).
      type: dict
    checks:
      description: One record per judged figure - name (C(decode_tok_s@16), C(ttft_s@960), C(long_context@4x32768),
        C(gpu_utilization_pct), C(requests)), status (pass, warn, fail), measured, expected (the article's band),
        unit, limits (pass and warn bounds after the tolerance), detail (a sentence).
      type: list
      elements: dict
    status:
      description: The worst status of the checks.
      type: str
      sample: pass
    summary:
      description: One line per check and a last line with the counts.
      type: list
      elements: str
      sample:
        - "PASS decode_tok_s@16: decode throughput at 16 concurrent: 388.4 tok/s, article 386-393 tok/s: inside ..."
        - "bench pass: 9 pass, 0 warn, 0 fail"
    skipped:
      description: True in check mode (nothing was sent).
      type: bool
"""

import shutil  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.bench_client import calibrate  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.bench_gpu import GpuSampler  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.bench_judge import (  # noqa: E402
    judge,
    summary_lines,
)
from ansible_collections.a800.vllm.plugins.module_utils.bench_scenarios import run_scenarios  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.bench_tools import (  # noqa: E402
    BenchError,
    VllmBenchInContainer,
    client_runner,
    container_url,
    model_root,
)
from ansible_collections.a800.vllm.plugins.module_utils.checks import worst  # noqa: E402


def choose_tool(module: AnsibleModule, params: dict[str, Any]) -> tuple[str, str, VllmBenchInContainer | None]:
    if params["tool"] == "client":
        return "client", "tool=client", None
    tokenizer = params["tokenizer"] or model_root(params["base_url"], params["model"], params["api_key"])
    inside = VllmBenchInContainer(
        params["docker"],
        params["container"],
        params["container_base_url"] or container_url(params["base_url"]),
        params["model"],
        tokenizer,
        api_key=params["api_key"],
        fixed_length=params["fixed_length"],
        timeout_s=params["timeout_s"],
    )
    ok, reason = inside.available()
    if ok:
        return "vllm", reason, inside
    if params["tool"] == "vllm":
        module.fail_json(msg=f"tool=vllm: {reason}")
    return "client", f"{reason}; using the project's client", None


def bench(module: AnsibleModule, params: dict[str, Any]) -> dict[str, Any]:
    tool, reason, inside = choose_tool(module, params)
    calibration = None
    if inside is not None:
        runner: Callable[..., dict[str, Any]] = inside
    else:
        tokens_per_word = 1.0
        if params["calibrate_prompts"]:
            calibration = calibrate(params["base_url"], params["model"], params["api_key"])
            tokens_per_word = calibration["tokens_per_word"]
        runner = client_runner(
            params["base_url"],
            params["model"],
            params["api_key"],
            tokens_per_word,
            fixed_length=params["fixed_length"],
            timeout_s=params["timeout_s"],
        )
    nvidia_smi = shutil.which("nvidia-smi") if params["gpu_sampling"] else None
    sampler = GpuSampler(nvidia_smi) if nvidia_smi else None
    try:
        scenarios = run_scenarios(runner, params, sampler)
    except BenchError as exc:
        module.fail_json(msg=str(exc), bench={"tool": tool, "tool_reason": reason})
    gpu = scenarios.pop("gpu_utilization", None)
    checks = judge(scenarios, params["baselines"], params["tolerance_pct"], gpu["mean_pct"] if gpu else None)
    return {
        "tool": tool,
        "tool_reason": reason,
        "calibration": calibration,
        "scenarios": scenarios,
        "gpu_utilization": gpu,
        "checks": checks,
        "status": worst(checks),
        "summary": summary_lines(checks),
        "tolerance_pct": params["tolerance_pct"],
        "skipped": False,
    }


LONG_CONTEXT_SPEC = {
    "enabled": {"type": "bool", "default": True},
    "concurrency": {"type": "int", "default": 4},
    "prompt_tokens": {"type": "int", "default": 32768},
    "max_tokens": {"type": "int", "default": 256},
}
SCENARIOS_SPEC = {
    "concurrency": {"type": "list", "elements": "int", "default": [1, 4, 16]},
    "ttft_prompt_tokens": {"type": "list", "elements": "int", "default": [80, 240, 480, 960]},
    "long_context": {"type": "dict", "default": {}, "options": LONG_CONTEXT_SPEC},
}
ARGUMENT_SPEC = {
    "base_url": {"type": "str", "default": "http://127.0.0.1:8001"},
    "model": {"type": "str", "required": True},
    "api_key": {"type": "str", "no_log": True},
    "scenarios": {"type": "dict", "default": {}, "options": SCENARIOS_SPEC},
    "prompt_tokens": {"type": "int", "default": 128},
    "output_tokens": {"type": "int", "default": 256},
    "requests_per_level": {"type": "int"},
    "ttft_requests": {"type": "int", "default": 3},
    "ttft_output_tokens": {"type": "int", "default": 16},
    "fixed_length": {"type": "bool", "default": True},
    "calibrate_prompts": {"type": "bool", "default": True},
    "tool": {"type": "str", "choices": ["auto", "client", "vllm"], "default": "auto"},
    "container": {"type": "str", "default": "glm52-nvfp4"},
    "container_base_url": {"type": "str"},
    "tokenizer": {"type": "str"},
    "docker": {"type": "str", "default": "docker"},
    "baselines": {"type": "dict", "default": {}},
    "tolerance_pct": {"type": "float", "default": 10.0},
    "gpu_sampling": {"type": "bool", "default": True},
    "timeout_s": {"type": "float", "default": 1800.0},
}


def validate(params: dict[str, Any]) -> str | None:
    """Why the options cannot work, or None."""
    plan = params["scenarios"]
    counts = [*(plan["concurrency"] or []), params["output_tokens"], params["prompt_tokens"], params["ttft_requests"]]
    counts += [*(plan["ttft_prompt_tokens"] or []), params["ttft_output_tokens"]]
    if plan["long_context"]["enabled"]:
        counts += [plan["long_context"]["concurrency"], plan["long_context"]["max_tokens"]]
    if any(n < 1 for n in counts):
        return "concurrency levels, prompt and output token counts and request counts must be at least 1"
    if params["tolerance_pct"] < 0:
        return "tolerance_pct must not be negative"
    if not params["base_url"].startswith(("http://", "https://")):
        return f"base_url must start with http:// or https://, not {params['base_url']!r}"
    return None


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    problem = validate(params)
    if problem:
        module.fail_json(msg=problem)
    if module.check_mode:
        module.exit_json(
            changed=False,
            skipped=True,
            msg="check mode: the benchmark puts load on the server, nothing was sent",
            bench={"tool": "none", "skipped": True, "checks": [], "status": "pass", "summary": []},
        )
    module.exit_json(changed=False, bench=bench(module, params))


if __name__ == "__main__":
    main()
