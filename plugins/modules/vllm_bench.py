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

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import urllib.parse  # noqa: E402
import urllib.request  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.bench_client import calibrate, run_load  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.bench_judge import (  # noqa: E402
    annotate,
    judge,
    parse_vllm_result,
    summary_lines,
)
from ansible_collections.a800.vllm.plugins.module_utils.checks import worst  # noqa: E402

HELP_TIMEOUT_S = 300.0  # `vllm bench serve --help` imports vLLM: ~20 s, more on a busy host


class BenchError(Exception):
    """The benchmark tool could not be run."""


def model_root(base_url: str, model: str, api_key: str | None) -> str | None:
    """The `root` (weights directory) that /v1/models gives for `model`, None when unknown."""
    request = urllib.request.Request(base_url.rstrip("/") + "/v1/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as response:
            cards = json.loads(response.read()).get("data") or []
    except (OSError, ValueError):
        return None
    return next((c.get("root") for c in cards if c.get("id") == model), None)


class VllmBenchInContainer:
    """`vllm bench serve` run with `docker exec` in the serving container; its --save-result file read back."""

    def __init__(self, docker: str, container: str, base_url: str, model: str, tokenizer: str | None, **kw: Any):
        self.docker, self.container = docker, container
        self.base_url, self.model, self.tokenizer = base_url, model, tokenizer
        self.api_key: str | None = kw.get("api_key")
        self.fixed_length: bool = kw.get("fixed_length", True)
        self.timeout_s: float = kw.get("timeout_s", 1800.0)
        self.seed = 0

    def _exec(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        prefix = [self.docker, "exec"]
        if self.api_key:  # by name only: the key stays out of the process list
            env["OPENAI_API_KEY"] = self.api_key
            prefix += ["-e", "OPENAI_API_KEY"]
        try:
            return subprocess.run(
                [*prefix, self.container, *argv],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                env=env,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BenchError(f"{self.docker} exec {self.container} {' '.join(argv[:3])}: {exc}") from exc

    def available(self) -> tuple[bool, str]:
        try:
            run = self._exec(["vllm", "bench", "serve", "--help"], HELP_TIMEOUT_S)
        except BenchError as exc:
            return False, str(exc)
        if run.returncode != 0:
            tail = (run.stderr.strip() or run.stdout.strip()).splitlines()[-1:] or [""]
            return False, f"`vllm bench serve --help` in {self.container} exited {run.returncode}: {tail[0][:200]}"
        return True, f"`vllm bench serve` is available in container {self.container}"

    def argv(self, concurrency: int, requests: int, prompt_tokens: int, max_tokens: int, directory: str) -> list[str]:
        argv = ["vllm", "bench", "serve", "--backend", "openai-chat", "--base-url", self.base_url]
        argv += ["--endpoint", "/v1/chat/completions", "--model", self.model]
        if self.tokenizer:
            argv += ["--tokenizer", self.tokenizer]
        argv += ["--trust-remote-code", "--dataset-name", "random", "--random-input-len", str(prompt_tokens)]
        argv += ["--random-output-len", str(max_tokens), "--num-prompts", str(requests)]
        argv += ["--max-concurrency", str(concurrency), "--seed", str(self.seed)]
        if self.fixed_length:
            argv.append("--ignore-eos")
        argv += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99", "--disable-tqdm"]
        return [
            *argv,
            "--save-result",
            "--save-detailed",
            "--result-dir",
            directory,
            "--result-filename",
            "result.json",
        ]

    def __call__(self, concurrency: int, requests: int, prompt_tokens: int, max_tokens: int, seed: int) -> dict:
        self.seed = seed
        directory = f"/tmp/vllm-bench-{uuid.uuid4().hex[:12]}"
        try:
            run = self._exec(self.argv(concurrency, requests, prompt_tokens, max_tokens, directory), self.timeout_s)
            if run.returncode != 0:
                tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-5:])
                raise BenchError(f"vllm bench serve exited {run.returncode}: {tail}")
            read = self._exec(["cat", f"{directory}/result.json"], 60)
            if read.returncode != 0:
                raise BenchError(f"cannot read the result file {directory}/result.json: {read.stderr.strip()}")
            try:
                document = json.loads(read.stdout)
            except ValueError as exc:
                raise BenchError(f"the result file {directory}/result.json is not JSON: {exc}") from exc
        finally:
            self._exec(["rm", "-rf", directory], 60)
        return parse_vllm_result(document, prompt_tokens=prompt_tokens, max_tokens=max_tokens)


def client_runner(
    base_url: str, model: str, api_key: str | None, tokens_per_word: float, **kw: Any
) -> Callable[..., dict[str, Any]]:
    def run(concurrency: int, requests: int, prompt_tokens: int, max_tokens: int, seed: int) -> dict[str, Any]:
        result = run_load(
            base_url,
            model,
            api_key,
            concurrency,
            requests,
            prompt_tokens,
            max_tokens,
            tokens_per_word=tokens_per_word,
            seed=seed,
            **kw,
        )
        return annotate(result)

    return run


class GpuSampler:
    """`nvidia-smi --query-gpu=utilization.gpu` every `interval` seconds in a thread, between start() and stop()."""

    def __init__(self, nvidia_smi: str, interval: float = 1.0) -> None:
        self.nvidia_smi, self.interval = nvidia_smi, interval
        self.samples: list[list[float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                out = subprocess.run(
                    [self.nvidia_smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout
                values = [float(v) for v in out.split()]
            except (OSError, ValueError, subprocess.TimeoutExpired):
                continue
            if values:
                self.samples.append(values)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, Any] | None:
        self._stop.set()
        self._thread.join()
        if not self.samples:
            return None
        gpus = min(len(s) for s in self.samples)
        per_gpu = [sum(s[i] for s in self.samples) / len(self.samples) for i in range(gpus)]
        return {
            "samples": len(self.samples),
            "mean_pct": round(sum(per_gpu) / gpus, 1),
            "per_gpu_mean_pct": [round(v, 1) for v in per_gpu],
        }


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


def container_url(base_url: str) -> str:
    parts = urllib.parse.urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"http://127.0.0.1:{port}"


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
