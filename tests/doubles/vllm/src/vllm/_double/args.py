"""`vllm serve` argument parsing of the test double: the flags this deployment uses, with vLLM's choices and
its argparse behaviour (exit 2 and `vllm serve: error: ...` on a bad value, an unknown flag or bad JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

DTYPES = ["auto", "half", "float16", "bfloat16", "float", "float32"]
KV_CACHE_DTYPES = ["auto", "bfloat16", "float16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]
LOAD_FORMATS = [
    "auto",
    "pt",
    "safetensors",
    "npcache",
    "dummy",
    "tensorizer",
    "sharded_state",
    "gguf",
    "bitsandbytes",
    "mistral",
    "runai_streamer",
    "runai_streamer_sharded",
    "fastsafetensors",
]
SAFETENSORS_LOAD_STRATEGIES = ["lazy", "eager", "prefetch", "torchao"]
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


def _json(value: str) -> dict[str, Any]:
    """JSON options parsed by json.loads (speculative, compilation): vLLM's message on failure."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"Value {value} cannot be converted to {json.loads!r}.") from exc
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"Value {value} cannot be converted to {json.loads!r}.")
    return parsed


def _attention_config(value: str) -> dict[str, Any]:
    """--attention-config is validated by a pydantic model in vLLM: its error names the model."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"1 validation error for AttentionConfig\n  Invalid JSON: {exc.msg.lower()} at line {exc.lineno} column "
            f"{exc.colno} [type=json_invalid, input_value={value!r}, input_type=str]"
        ) from exc
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("1 validation error for AttentionConfig\n  Input should be an object")
    return parsed


def _bytes(value: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    if value[-1:].lower() in units:
        return int(float(value[:-1]) * units[value[-1].lower()])
    return int(value)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm serve", usage="vllm serve [model_tag] [options]")
    p.add_argument("model_tag", nargs="?", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--dtype", choices=DTYPES, default="auto")
    p.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--kv-cache-memory-bytes", type=_bytes, default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--block-size", type=int, default=None)
    # vLLM parses the name as a string; AttentionConfig resolves it through AttentionBackendEnum (startup.py)
    p.add_argument("--attention-backend", type=str, default=None)
    p.add_argument("--attention-config", "-ac", type=_attention_config, default=None)
    p.add_argument("--speculative-config", "-sc", type=_json, default=None)
    p.add_argument("--compilation-config", "-O", type=_json, default=None)
    p.add_argument("--reasoning-parser", default=None)
    p.add_argument("--tool-call-parser", default=None)
    p.add_argument("--enable-auto-tool-choice", action="store_true")
    p.add_argument("--load-format", choices=LOAD_FORMATS, default="auto")
    p.add_argument("--safetensors-load-strategy", choices=SAFETENSORS_LOAD_STRATEGIES, default=None)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--uvicorn-log-level", default="info")
    p.add_argument("--disable-log-requests", action="store_true")
    p.add_argument("--enable-log-requests", action="store_true")
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--max-log-len", type=int, default=None)
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse like `vllm serve`; argparse exits 2 with `vllm serve: error: ...` on bad input."""
    parser = make_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by vLLM's top-level `vllm` parser, not by `vllm serve`
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"vllm: error: unrecognized arguments: {' '.join(unknown)}\n")
        sys.exit(2)
    args.model = args.model or args.model_tag
    if not args.model:
        parser.error("the following arguments are required: model_tag")
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        parser.error("--enable-auto-tool-choice requires --tool-call-parser to be set")
    args.served_model_name = (args.served_model_name or [args.model])[0]
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
