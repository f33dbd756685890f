"""The two ways the vllm_bench module loads a server: the real `vllm bench serve` inside the serving container
(VllmBenchInContainer), or the project's client (client_runner); each a callable that runs one load level and
returns its figures in vllm bench serve's names."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.bench_client import run_load
from ansible_collections.a800.vllm.plugins.module_utils.bench_judge import annotate, parse_vllm_result

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


def container_url(base_url: str) -> str:
    parts = urllib.parse.urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"http://127.0.0.1:{port}"
