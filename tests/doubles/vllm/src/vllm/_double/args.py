"""`vllm serve` argument parsing of the test double, held to the parser of real vLLM 0.32.0.

What a command line does at argparse level is what real `vllm serve` does: every option of the real parser is known
(REAL_OPTIONS, in the real parser's order), so a unique prefix of an option resolves and an ambiguous one fails with
the same candidates in the same order (argparse's allow_abbrev, as in vLLM: `--kv-cache-dtyp` could match
`--kv-cache-dtype, --kv-cache-dtype-skip-layers`); the options the double reproduces (MODELLED) convert their values
with functions named and behaving like vLLM's (human_readable_int: 64k = 64000, 64K = 65536; optional_type: "" and
"None" give None; parse_dataclass: a JSON object), with vLLM 0.32's choices and nargs; FlexibleArgumentParser's
rewriting is reproduced (`--max_model_len` = `--max-model-len`, `--opt.key value` merged into `--opt`'s JSON, `-O3`,
`--model X` moved to the front). Errors exit 2 with `vllm serve: error: ...`; unrecognized arguments with
`vllm: error: unrecognized arguments: ...` (vLLM's top-level `vllm` parser reports them).

The table is literal, so that the package stays self-contained in the double's image (it is copied there without
the repository): tests/double_tests/test_args_table.py holds it to tests/fixtures/vllm-serve-options/real-0.32.json,
which scripts/record_vllm_serve_options.py records from the real parser (`--double-table` prints REAL_OPTIONS).

As in 0.32, --compilation-config's short form is -cc (-O3 is --optimization-level) and there is no
--disable-log-requests. Where the double still differs: a real option outside MODELLED is refused (exit 2, `argument
--X: not reproduced by the vLLM test double`) where vLLM accepts it, so that no test passes on a flag the double
ignores; the JSON of --attention-config / --compilation-config is checked to be an object, not field by field;
`--config FILE` is not read; defaults are the double's where it models v0.26.0 (no default model: a model is required;
--gpu-memory-utilization 0.9, vLLM 0.32: 0.92); and after argparse, parse() keeps the double's own checks
(--enable-auto-tool-choice without --tool-call-parser: exit 2 here, a TypeError in vLLM).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from typing import Any

REAL_VERSION = "0.32.0"
# Every option of real `vllm serve` 0.32.0, in its parser's order: nargs (1: one value, 0: none) and option strings.
# Printed by `.venv-vllm/bin/python scripts/record_vllm_serve_options.py --double-table`; do not edit by hand.
REAL_OPTIONS = """
0 -h --help
0 --headless
1 --api-server-count -asc
1 --config
0 --grpc
+ --lora-modules
1 --chat-template
1 --chat-template-content-format
0 --trust-request-chat-template --no-trust-request-chat-template
0 --trust-request-mm-kwargs --no-trust-request-mm-kwargs
1 --default-chat-template-kwargs
1 --response-role
0 --return-tokens-as-token-ids --no-return-tokens-as-token-ids
0 --enable-auto-tool-choice --no-enable-auto-tool-choice
0 --exclude-tools-when-tool-choice-none --no-exclude-tools-when-tool-choice-none
1 --tool-call-parser
1 --tool-parser-plugin
1 --tool-strict-level
1 --tool-server
1 --max-log-len
0 --enable-prompt-tokens-details --no-enable-prompt-tokens-details
0 --enable-per-request-metrics --no-enable-per-request-metrics
0 --enable-server-load-tracking --no-enable-server-load-tracking
0 --enable-force-include-usage --no-enable-force-include-usage
1 --sse-keep-alive-interval
0 --enable-tokenizer-info-endpoint --no-enable-tokenizer-info-endpoint
0 --enable-log-outputs --no-enable-log-outputs
0 --enable-log-deltas --no-enable-log-deltas
0 --cohere-is-reasoning-model --no-cohere-is-reasoning-model
1 --cohere-format
1 --anthropic-disabled-thinking-effort
0 --log-error-stack --no-log-error-stack
0 --tokens-only --no-tokens-only
0 --enable-scale-out --no-enable-scale-out
1 --fingerprint-mode
1 --fingerprint-value
1 --host
1 --port
1 --grpc-port
1 --data-parallel-supervisor-port
1 --dp-supervisor-probe-interval-s
1 --dp-supervisor-probe-timeout-s
1 --dp-supervisor-probe-failure-threshold
1 --uds
1 --uvicorn-log-level
0 --disable-uvicorn-access-log --no-disable-uvicorn-access-log
1 --disable-access-log-for-endpoints
0 --allow-credentials --no-allow-credentials
1 --allowed-origins
1 --allowed-methods
1 --allowed-headers
+ --api-key
1 --ssl-keyfile
1 --ssl-certfile
1 --ssl-ca-certs
0 --enable-ssl-refresh --no-enable-ssl-refresh
1 --ssl-cert-reqs
1 --ssl-ciphers
1 --root-path
1 --middleware
0 --enable-request-id-headers --no-enable-request-id-headers
0 --disable-fastapi-docs --no-disable-fastapi-docs
1 --h11-max-incomplete-event-size
1 --h11-max-header-count
0 --enable-offline-docs --no-enable-offline-docs
0 --enable-flash-late-interaction --no-enable-flash-late-interaction
1 --model
1 --runner
1 --convert
1 --tokenizer
1 --tokenizer-mode
0 --trust-remote-code --no-trust-remote-code
1 --dtype
1 --seed
1 --hf-config-path
1 --allowed-local-media-path
+ --allowed-media-domains
1 --revision
1 --code-revision
1 --tokenizer-revision
1 --max-model-len
1 --quantization -q
1 --quantization-config
0 --allow-deprecated-quantization --no-allow-deprecated-quantization
0 --enforce-eager --no-enforce-eager
0 --enable-return-routed-experts --no-enable-return-routed-experts
0 --return-sampling-mask --no-return-sampling-mask
1 --max-logprobs
1 --logprobs-mode
0 --use-fp64-gumbel --no-use-fp64-gumbel
0 --enable-trace-replay --no-enable-trace-replay
0 --disable-sliding-window --no-disable-sliding-window
0 --disable-cascade-attn --no-disable-cascade-attn
0 --skip-tokenizer-init --no-skip-tokenizer-init
0 --enable-prompt-embeds --no-enable-prompt-embeds
+ --served-model-name
1 --config-format
? --hf-token
1 --hf-overrides
1 --model-class-overrides
1 --pooler-config
1 --generation-config
1 --override-generation-config
0 --enable-sleep-mode --no-enable-sleep-mode
0 --sleep-mode-offload-cudagraph --no-sleep-mode-offload-cudagraph
+ --sleep-preserve-parameter-names
0 --enable-cumem-allocator --no-enable-cumem-allocator
0 --enable-nccl-comm-suspend --no-enable-nccl-comm-suspend
1 --model-impl
+ --logits-processors
1 --io-processor-plugin
1 --renderer-num-workers
1 --load-format
1 --download-dir
1 --safetensors-load-strategy
1 --safetensors-prefetch-num-threads
1 --safetensors-prefetch-block-size
1 --model-loader-extra-config
+ --ignore-patterns
0 --use-tqdm-on-load --no-use-tqdm-on-load
1 --pt-load-map-location
1 --attention-backend
1 --mamba-backend
1 --mamba-ssu-algorithm
0 --enable-mamba-cache-stochastic-rounding --no-enable-mamba-cache-stochastic-rounding
1 --mamba-cache-philox-rounds
1 --reasoning-parser
1 --reasoning-parser-plugin
1 --distributed-executor-backend
1 --pipeline-parallel-size -pp
1 --master-addr
1 --master-port
1 --nnodes -n
1 --node-rank -r
1 --distributed-timeout-seconds
1 --cpu-distributed-timeout-seconds
0 --numa-bind --no-numa-bind
+ --numa-bind-nodes
+ --numa-bind-cpus
1 --device-ids
1 --tensor-parallel-size -tp
1 --decode-context-parallel-size -dcp
1 --dcp-comm-backend
0 --dcp-q-replicate --no-dcp-q-replicate
1 --dcp-kv-cache-interleave-size
1 --cp-kv-cache-interleave-size
1 --prefill-context-parallel-size -pcp
1 --data-parallel-size -dp
1 --data-parallel-rank -dpn
1 --data-parallel-start-rank -dpr
1 --data-parallel-size-local -dpl
1 --data-parallel-address -dpa
1 --data-parallel-rpc-port -dpp
1 --data-parallel-backend -dpb
0 --data-parallel-hybrid-lb --no-data-parallel-hybrid-lb -dph
0 --data-parallel-external-lb --no-data-parallel-external-lb -dpe
0 --data-parallel-multi-port-external-lb -dpm
0 --enable-hc-sp --no-enable-hc-sp
0 --enable-expert-parallel --no-enable-expert-parallel -ep
0 --enable-batch-sharded-sampling --no-enable-batch-sharded-sampling
0 --enable-ep-weight-filter --no-enable-ep-weight-filter
1 --all2all-backend
0 --enable-dbo --no-enable-dbo
0 --enable-shm-tensor-arena --no-enable-shm-tensor-arena
1 --ubatch-size
0 --enable-elastic-ep --no-enable-elastic-ep
1 --elastic-ep-max-dp-size
1 --dbo-decode-token-threshold
1 --dp-sync-interval
1 --dbo-prefill-token-threshold
0 --disable-nccl-for-dp-synchronization --no-disable-nccl-for-dp-synchronization
0 --enable-eplb --no-enable-eplb
1 --eplb-config
1 --expert-placement-strategy
1 --max-parallel-loading-workers
0 --ray-workers-use-nsight --no-ray-workers-use-nsight
0 --disable-custom-all-reduce --no-disable-custom-all-reduce
1 --worker-cls
1 --worker-extension-cls
0 --enable-fault-tolerance --no-enable-fault-tolerance
1 --fault-tolerance-config
1 --block-size
1 --gpu-memory-utilization --device-memory-utilization
1 --kv-cache-memory-bytes
1 --kv-cache-dtype
1 --num-gpu-blocks-override
0 --enable-prefix-caching --no-enable-prefix-caching
1 --prefix-caching-hash-algo
1 --prefix-cache-retention-interval
+ --kv-cache-dtype-skip-layers
0 --kv-sharing-fast-prefill --no-kv-sharing-fast-prefill
0 --swa-bounded-replay --no-swa-bounded-replay
1 --mamba-cache-dtype
1 --mamba-ssm-cache-dtype
1 --mamba-block-size
1 --prefix-match-unit
1 --mamba-cache-mode
0 --enable-mamba-shared-prefix-checkpoint --no-enable-mamba-shared-prefix-checkpoint
1 --replayssm-buffer-len
0 --use-replayssm --no-use-replayssm
1 --kv-offloading-size
1 --kv-offloading-backend
1 --offload-backend
1 --cpu-offload-gb
+ --cpu-offload-params
1 --offload-group-size
1 --offload-num-in-group
1 --offload-prefetch-step
+ --offload-params
0 --language-model-only --no-language-model-only
1 --limit-mm-per-prompt
0 --enable-mm-embeds --no-enable-mm-embeds
1 --media-io-kwargs
1 --mm-processor-kwargs
1 --mm-processor-cache-gb
1 --mm-processor-cache-type
1 --mm-hasher-algorithm
1 --mm-shm-cache-max-object-size-mb
0 --mm-encoder-only --no-mm-encoder-only
1 --mm-encoder-tp-mode
1 --mm-encoder-attn-backend
1 --mm-encoder-attn-dtype
1 --mm-encoder-fp8-scale-path
1 --mm-encoder-fp8-scale-save-path
1 --mm-encoder-fp8-scale-save-margin
0 --interleave-mm-strings --no-interleave-mm-strings
0 --skip-mm-profiling --no-skip-mm-profiling
1 --video-pruning-rate
1 --video-pruning-method
1 --mm-tensor-ipc
1 --mm-processor-device
1 --mm-ipc-gpu-memory-gb
0 --mm-device-do-normalize --no-mm-device-do-normalize
0 --enable-lora --no-enable-lora
1 --max-loras
1 --max-lora-rank
1 --lora-dtype
0 --enable-tower-connector-lora --no-enable-tower-connector-lora
1 --max-cpu-loras
0 --fully-sharded-loras --no-fully-sharded-loras
+ --lora-target-modules
1 --default-mm-loras
0 --specialize-active-lora --no-specialize-active-lora
0 --enable-mixed-moe-lora-format --no-enable-mixed-moe-lora-format
0 --enable-moe-shared-loras --no-enable-moe-shared-loras
1 --max-lora-cls-labels
1 --logging-config
1 --log-level
1 --log-config-file
1 --show-hidden-metrics-for-version
1 --otlp-traces-endpoint
+ --collect-detailed-traces
1 --per-request-spec-decode-metrics
0 --kv-cache-metrics --no-kv-cache-metrics
1 --kv-cache-metrics-sample
1 --custom-histogram-buckets
0 --cudagraph-metrics --no-cudagraph-metrics
0 --enable-layerwise-nvtx-tracing --no-enable-layerwise-nvtx-tracing
0 --enable-mfu-metrics --no-enable-mfu-metrics
0 --enable-logging-iteration-details --no-enable-logging-iteration-details
1 --jit-monitor-mode
0 --jit-monitor-verbose --no-jit-monitor-verbose
1 --max-num-batched-tokens
1 --max-num-scheduled-tokens
1 --max-num-seqs
1 --max-num-active-seqs
1 --max-num-queued-reqs
1 --max-num-queued-tokens
1 --long-prefill-token-threshold
0 --long-prefill-token-threshold-adaptive --no-long-prefill-token-threshold-adaptive
1 --scheduling-policy
0 --enable-chunked-prefill --no-enable-chunked-prefill
0 --disable-chunked-mm-input --no-disable-chunked-mm-input
1 --scheduler-cls
0 --scheduler-reserve-full-isl --no-scheduler-reserve-full-isl
1 --watermark
1 --prefill-schedule-interval
0 --disable-hybrid-kv-cache-manager --no-disable-hybrid-kv-cache-manager
0 --async-scheduling --no-async-scheduling
1 --stream-interval
+ --cudagraph-capture-sizes
1 --max-cudagraph-capture-size
1 --ir-op-priority
0 --enable-flashinfer-autotune --no-enable-flashinfer-autotune
1 --moe-backend
1 --linear-backend
1 --sparse-indexer-topk-backend
1 --speculative-config -sc
1 --spec-method
1 --spec-model
1 --spec-tokens
1 --watermark-config
1 --diffusion-config -dc
1 --kv-transfer-config
1 --kv-events-config
1 --ec-transfer-config
1 --ec-manager-config
1 --compilation-config -cc
1 --attention-config -ac
1 --engram-config
1 --reasoning-config
1 --kernel-config
1 --additional-config
1 --structured-outputs-config
1 --aux-output-config
1 --profiler-config
1 --optimization-level
1 --performance-mode
1 --weight-transfer-config
0 --disable-log-stats
0 --aggregate-engine-logging
0 --fail-on-environ-validation --no-fail-on-environ-validation
1 --shutdown-timeout
1 --gdn-prefill-backend
1 --kda-prefill-backend
1 --kda-decode-backend
0 --enable-log-requests --no-enable-log-requests
"""
# The values of the options the double reproduces, as vLLM 0.32 lists them (the order of its error messages).
DTYPES = ["auto", "bfloat16", "float", "float16", "float32", "half"]
KV_CACHE_DTYPES = [
    "auto",
    "bfloat16",
    "float16",
    "fp8",
    "fp8_ds_mla",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_per_token_head",
    "int4_per_token_head",
    "int8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
    "nvfp4_ds_mla",
    "turboquant_3bit_nc",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_k8v4",
    "ultraquant_4bit",
]
SAFETENSORS_LOAD_STRATEGIES = ["eager", "lazy", "prefetch", "torchao", None]  # None: optional_type gives it
UVICORN_LOG_LEVELS = ["critical", "debug", "error", "info", "trace", "warning"]
REASONING_PARSERS = [
    "deepseek_r1",
    "deepseek_v3",
    "glm45",
    "glm47",
    "gpt_oss",
    "granite",
    "kimi_k2",
    "mistral",
    "qwen3",
    "step3",
]
TOOL_CALL_PARSERS = [
    "deepseek_v3",
    "deepseek_v31",
    "glm45",
    "glm47",
    "granite",
    "hermes",
    "kimi_k2",
    "llama3_json",
    "mistral",
    "openai",
    "pythonic",
    "qwen3_coder",
    "qwen3_xml",
]


# --- vLLM's value converters (vllm/utils/argparse_utils.py, vllm/engine/arg_utils.py), same names and messages ----
def human_readable_int(value: str) -> int:
    """64k -> 64000, 64K -> 65536, 25.6k -> 25600 (decimal k/m/g/t, binary K/M/G/T), or a plain integer."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
        try:
            return int(number) * binary[suffix]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean to use "
                f"{number}{suffix.lower()} instead?"
            ) from exc
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    """human_readable_int, and -1 or "auto" (any case) for auto-detection (-1)."""
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    return human_readable_int(value)


def parse_type(return_type):
    def _parse_type(val: str):
        try:
            return return_type(val)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"Value {val} cannot be converted to {return_type}.") from exc

    return _parse_type


def optional_type(return_type):
    def _optional_type(val: str):
        if val == "" or val == "None":
            return None
        return parse_type(return_type)(val)

    return _optional_type


def _expand_json_human_readable_numbers(val: str) -> str:
    """Bare 64k-style numbers in JSON (outside strings) as integers, as vLLM does before validating a config."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', val)
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b", lambda m: str(human_readable_int(m.group())), parts[i])
    return "".join(parts)


def dataclass_json(config: str):
    """vLLM's parse_dataclass for a config class (pydantic validates the JSON): the double checks that it is a JSON
    object and words the failure as pydantic's first lines do; the fields are not checked. A mapping is returned."""
    cls = type(config, (), {})  # the config's name only (for the option table)

    def parse_dataclass(val: str, cls=cls) -> dict[str, Any]:
        try:
            parsed = json.loads(_expand_json_human_readable_numbers(val))
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(
                f"1 validation error for {cls.__name__}\n  Invalid JSON: {exc.msg.lower()} at line {exc.lineno} "
                f"column {exc.colno} [type=json_invalid, input_value={val!r}, input_type=str]"
            ) from exc
        if not isinstance(parsed, dict):
            raise argparse.ArgumentTypeError(
                f"1 validation error for {cls.__name__}\n  Input should be an object [type=dataclass_type, "
                f"input_value={parsed!r}, input_type={type(parsed).__name__}]"
            )
        return parsed

    return parse_dataclass


BOOL = argparse.BooleanOptionalAction
# The options the double reproduces: add_argument keywords (the option strings come from REAL_OPTIONS). Type,
# choices, nargs and action are vLLM 0.32's; defaults are the double's where they differ (see the docstring).
MODELLED: dict[str, dict[str, Any]] = {
    "--host": {"type": optional_type(str), "default": None},
    "--port": {"type": int, "default": 8000},
    "--shutdown-timeout": {"type": int, "default": 0},
    "--uvicorn-log-level": {"type": str, "choices": UVICORN_LOG_LEVELS, "default": "info"},
    "--api-key": {"type": optional_type(str), "nargs": "+", "default": None},
    "--enable-auto-tool-choice": {"action": BOOL, "default": False},
    "--tool-call-parser": {"type": optional_type(str), "default": None},
    "--max-log-len": {"type": optional_type(int), "default": None},
    "--model": {"type": str, "default": None},
    "--trust-remote-code": {"action": BOOL, "default": False},
    "--dtype": {"type": str, "choices": DTYPES, "default": "auto"},
    "--seed": {"type": int, "default": 0},
    "--max-model-len": {"type": human_readable_int_or_auto, "default": None},
    "--enforce-eager": {"action": BOOL, "default": False},
    "--served-model-name": {"type": optional_type(str), "nargs": "+", "default": None},
    "--load-format": {"type": str, "default": "auto"},
    "--safetensors-load-strategy": {"type": optional_type(str), "choices": SAFETENSORS_LOAD_STRATEGIES},
    "--reasoning-parser": {"type": str, "default": ""},
    "--pipeline-parallel-size": {"type": int, "default": 1},
    "--tensor-parallel-size": {"type": int, "default": 1},
    "--disable-custom-all-reduce": {"action": BOOL, "default": False},
    "--block-size": {"type": int, "default": None},
    "--gpu-memory-utilization": {"type": float, "default": 0.9},
    "--kv-cache-memory-bytes": {"type": optional_type(human_readable_int), "default": None},
    "--kv-cache-dtype": {"type": str, "choices": KV_CACHE_DTYPES, "default": "auto"},
    "--enable-prefix-caching": {"action": BOOL, "default": None},
    "--max-num-batched-tokens": {"type": human_readable_int, "default": None},
    "--max-num-seqs": {"type": int, "default": None},
    "--speculative-config": {"type": optional_type(json.loads), "default": None},
    "--compilation-config": {"type": dataclass_json("CompilationConfig"), "default": None},
    "--optimization-level": {"type": str, "default": 2},
    "--max-cudagraph-capture-size": {"type": int, "default": None},
    "--cudagraph-capture-sizes": {"type": int, "nargs": "+", "default": None},
    # vLLM parses the name as a string; AttentionConfig resolves it through AttentionBackendEnum (startup.py)
    "--attention-backend": {"type": optional_type(str), "default": None},
    "--attention-config": {"type": dataclass_json("AttentionConfig"), "default": None},
    "--disable-log-stats": {"action": "store_true"},
    "--enable-log-requests": {"action": BOOL, "default": False},
}


class NotReproduced(argparse.Action):
    """A real option the double does not reproduce: known (for abbreviations), refused when given."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise argparse.ArgumentError(
            self, f"not reproduced by the vLLM test double (an option of vllm serve {REAL_VERSION})"
        )


def real_options() -> list[tuple[Any, list[str]]]:
    """REAL_OPTIONS as (nargs, option strings), nargs as argparse takes it (None: one value)."""
    rows = []
    for line in REAL_OPTIONS.strip().splitlines():
        nargs, *strings = line.split()
        rows.append(({"1": None, "0": 0}.get(nargs, nargs), strings))
    return rows


class ServeParser(argparse.ArgumentParser):
    """parse_args rewrites the command line first, as vLLM's FlexibleArgumentParser.parse_args does."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        return super().parse_args(flexible(sys.argv[1:] if args is None else args), namespace)


def make_parser() -> argparse.ArgumentParser:
    """The `vllm serve` parser (what vllm.entrypoints.openai.cli_args.make_arg_parser of the double returns)."""
    p = ServeParser(prog="vllm serve", usage="vllm serve [model_tag] [options]")
    p.add_argument("model_tag", nargs="?", default=None)
    for nargs, strings in real_options():
        if strings == ["-h", "--help"]:  # argparse's own, first as in vLLM's parser
            continue
        spec = MODELLED.get(strings[0])
        if spec is None:
            p.add_argument(*strings, action=NotReproduced, nargs=nargs, default=argparse.SUPPRESS,
                           help=argparse.SUPPRESS)  # fmt: skip
        elif spec.get("action") is BOOL:  # argparse adds the --no- forms itself
            p.add_argument(*[s for s in strings if not (s.startswith("--no-") and "--" + s[5:] in strings)], **spec)
        else:
            p.add_argument(*strings, **spec)
    return p


def flexible(args: list[str]) -> list[str]:
    """The rewriting of vLLM's FlexibleArgumentParser.parse_args for `vllm serve ARGS` (without --config files)."""
    args = list(args)
    model_idx = next((i for i, arg in enumerate(args) if re.match(r"^--model(=.+|$)", arg)), None)
    if model_idx is not None:  # `--model X` goes to the front, as the positional model
        if args[model_idx] == "--model":
            model_tag, rest = args[model_idx + 1], model_idx + 2
        else:
            model_tag, rest = args[model_idx].removeprefix("--model="), model_idx + 1
        args = [model_tag, *args[:model_idx], *args[rest:]]
    if (
        args
        and args[0].startswith("-")
        and not any(re.match(r"^--config(=.+|$)", arg) for arg in args)
        and any(re.match(r"^--served[-_]model[-_]name(=.+|$)", arg) for arg in args)
    ):
        raise ValueError(
            "`model` should be provided as the first positional argument when using `vllm serve`. i.e. "
            "`vllm serve <model> --<arg> <value>`."
        )
    name = re.compile(r"(?<=--)[^\.]*")  # everything between the first -- and the first .

    def dashes(match: re.Match) -> str:
        return match.group(0).replace("_", "-")

    processed: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--help="):
            processed.append("--help")
        elif arg.startswith("--"):
            if "=" in arg:
                key, value = arg.split("=", 1)
                processed.append(f"{name.sub(dashes, key, count=1)}={value}")
            else:
                processed.append(name.sub(dashes, arg, count=1))
        elif arg.startswith("-O") and arg != "-O":  # -O3, -O=3, -Odecode
            processed += ["--optimization-level", arg[3:] if arg[2] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            processed.append("--optimization-level")
        else:
            processed.append(arg)

    def merge(original: dict[str, Any], update: dict[str, Any]) -> None:
        for k, v in update.items():
            if isinstance(v, dict) and isinstance(original.get(k), dict):
                merge(original[k], v)
            elif isinstance(v, list) and isinstance(original.get(k), list):
                original[k] += v
            else:
                original[k] = v

    delete: set[int] = set()
    dict_args: defaultdict[str, dict[str, Any]] = defaultdict(dict)
    for i, arg in enumerate(processed):  # --opt.key value / --opt.key=value / --opt.list+ a,b
        if i in delete or (arg.startswith("--") and "." not in arg) or not (arg.startswith("-") and "." in arg):
            continue
        if "=" in arg:
            arg, value_str = arg.split("=", 1)
            if "." not in arg:  # the '.' was in the value
                continue
        else:
            value_str = processed[i + 1]
            delete.add(i + 1)
        if arg.endswith("+"):
            arg, value_str = arg[:-1], json.dumps(list(value_str.split(",")))
        key, *keys = arg.split(".")
        try:
            value: Any = json.loads(value_str)
        except json.JSONDecodeError:
            try:
                value = human_readable_int(value_str)
            except (ValueError, argparse.ArgumentTypeError):
                value = value_str
        for part in reversed(keys):
            value = {part: value}
        merge(dict_args[key], value)
        delete.add(i)
    processed = [a for i, a in enumerate(processed) if i not in delete]
    for key, value in dict_args.items():
        processed += [key, json.dumps(value)]
    return processed


def parse_args(argv: list[str]) -> argparse.Namespace:
    """argv (after `vllm serve`) parsed as real `vllm serve` parses it, argparse level only: exit 2 with
    `vllm serve: error: ...`, or `vllm: error: unrecognized arguments: ...` from the top-level parser."""
    parser = make_parser()
    args, unknown = parser.parse_known_args(flexible(argv))
    if unknown:  # reported by vLLM's top-level `vllm` parser, not by `vllm serve`
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"vllm: error: unrecognized arguments: {' '.join(unknown)}\n")
        sys.exit(2)
    return args


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse like `vllm serve` (parse_args), then the double's own checks and simplifications: a model is required,
    one served name and one API key are kept (the first), --max-model-len auto (-1) is None (the model's length)."""
    parser = make_parser()
    args = parse_args(argv)
    args.model = args.model_tag or args.model
    if not args.model:
        parser.error("the following arguments are required: model_tag")
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        parser.error("--enable-auto-tool-choice requires --tool-call-parser to be set")
    args.served_model_name = next((name for name in args.served_model_name or [] if name), None) or args.model
    args.api_key = next((key for key in args.api_key or [] if key), None)
    if args.max_model_len == -1:
        args.max_model_len = None
    return args


def check_parsers(args: argparse.Namespace) -> str | None:
    """vLLM resolves parser names after argparse, before loading: an unknown name is a KeyError (exit 1)."""
    if args.reasoning_parser and args.reasoning_parser not in REASONING_PARSERS:
        return (
            f"KeyError: \"Reasoning parser '{args.reasoning_parser}' not found. Available parsers: "
            f'{", ".join(REASONING_PARSERS)}"'
        )
    if args.tool_call_parser and args.tool_call_parser not in TOOL_CALL_PARSERS:
        return (
            f"KeyError: \"Tool parser '{args.tool_call_parser}' not found. Available parsers: "
            f'{", ".join(TOOL_CALL_PARSERS)}"'
        )
    return None
