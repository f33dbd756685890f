#!/usr/bin/env python3
"""Prove, inside the serving image, that the sm80 sparse-attention backend is there and whole, not just importable.

    sm80_self_check.py [--capability 8.0]

Run by the image role as the last step of the build (a failure fails the build before the image is tagged) and in
every image it serves, built here or not (docker run --rm --network none, no GPU). Standard library and the image's
own vllm package only. The names are vLLM's (vllm/v1/attention/backends/registry.py, vllm/platforms/cuda.py,
vllm/v1/attention/backends/mla/xpu_mla_sparse.py) and those of the backend work of vllm PR #38476 / #47629:

  enum        TRITON_MLA_SPARSE resolves in AttentionBackendEnum
  backend     its class imports (TritonMLASparseBackend), and accepts the compute capability
  candidates  the CUDA platform's attention candidates for the capability include it (_get_backend_priorities;
              read from the source when the platform cannot be imported without a GPU driver)
  metadata    the sparse metadata class it uses is a dataclass that constructs and carries num_decodes,
              num_prefills and num_decode_tokens (fields added with defaults; vllm PR #52066)
  indexer     the sparse attention indexer imports, and its Triton fallback (vllm/v1/attention/ops/
              mqa_logits_triton.py) imports with its logits and warm-up functions

One line per check: `sm80 self-check: ok <check>: ...` or `sm80 self-check: FAILED: <check>: <exception> (end)`,
the exception as Python prints its last line, so that the error catalogue (roles/a800/defaults/main/catalogue.yml)
names the cause and the fix. Exit status 1 when any check failed.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import importlib.util
import inspect
import sys
import traceback

BACKEND = "TRITON_MLA_SPARSE"
REGISTRY = "vllm.v1.attention.backends.registry"
PLATFORM = "vllm.platforms.cuda"
INTERFACE = "vllm.platforms.interface"
INDEXER = "vllm.model_executor.layers.sparse_attn_indexer"
FALLBACK = "vllm.v1.attention.ops.mqa_logits_triton"
FALLBACK_FUNCTIONS = ("fp8_mqa_logits_triton", "fp8_paged_mqa_logits_triton")
METADATA_COUNTS = ("num_decodes", "num_prefills", "num_decode_tokens")
# An import of the CUDA platform that fails for want of the driver (no GPU in the build) is not a patch error.
NO_DRIVER = ("libcuda", "CUDA driver", "NVIDIA driver", "libnvidia-ml")


class CheckFailed(Exception):
    """A check's own verdict (the message is the line to print)."""


def _last_line(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]


def check_enum(state: dict) -> str:
    registry = importlib.import_module(REGISTRY)
    state["member"] = registry.AttentionBackendEnum[BACKEND]
    return f"AttentionBackendEnum.{BACKEND} = {state['member'].value}"


def check_backend(state: dict) -> str:
    if "member" not in state:
        raise CheckFailed(f"skipped: AttentionBackendEnum has no {BACKEND}")
    cls = state["member"].get_class()
    state["backend"] = cls
    supports = getattr(cls, "supports_compute_capability", None)
    if callable(supports):
        interface = importlib.import_module(INTERFACE)
        if not supports(interface.DeviceCapability(*state["capability"])):
            raise CheckFailed(f"{cls.__name__}.supports_compute_capability({state['capability_text']}) is False")
    return f"{cls.__module__}.{cls.__name__}"


def _candidates_from_source(capability: tuple[int, int], why: str, backend: str = BACKEND) -> str:
    """The platform cannot be imported here: find the name in _get_backend_priorities' source instead."""
    spec = importlib.util.find_spec(PLATFORM)
    if spec is None or not spec.origin:
        raise CheckFailed(f"{PLATFORM} not found ({why})")
    with open(spec.origin, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_get_backend_priorities":
            names = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            if backend in names:
                return f"{backend} is in _get_backend_priorities (read from its source: {why})"
            raise CheckFailed(
                f"_get_backend_priorities in {spec.origin} never names {backend}: the CUDA platform would not "
                f"offer it on compute capability {capability[0]}.{capability[1]} (read from the source: {why})"
            )
    raise CheckFailed(f"{spec.origin} has no _get_backend_priorities ({why})")


def check_candidates(state: dict) -> str:
    capability = state["capability"]
    try:
        platform = importlib.import_module(PLATFORM)
        interface = importlib.import_module(INTERFACE)
    except (ImportError, OSError) as exc:
        if any(marker in str(exc) for marker in NO_DRIVER):
            return _candidates_from_source(capability, _last_line(exc))
        raise
    priorities = platform._get_backend_priorities
    wanted = {"use_mla": True, "device_capability": interface.DeviceCapability(*capability)}
    accepted = inspect.signature(getattr(priorities, "__wrapped__", priorities)).parameters
    names = [getattr(b, "name", str(b)) for b in priorities(**{k: v for k, v in wanted.items() if k in accepted})]
    if BACKEND not in names:
        raise CheckFailed(
            f"{BACKEND} is not among the CUDA platform's MLA attention candidates for compute capability "
            f"{state['capability_text']}: {', '.join(names)}"
        )
    return f"candidates for {state['capability_text']}: {', '.join(names)}"


def check_metadata(state: dict) -> str:
    backend = state.get("backend")
    if backend is None:
        raise CheckFailed(f"skipped: no {BACKEND} backend class to ask for its metadata class")
    meta = backend.get_metadata_cls()
    if not dataclasses.is_dataclass(meta):
        raise CheckFailed(f"{meta.__name__} is not a dataclass")
    required = {
        f.name: None
        for f in dataclasses.fields(meta)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    instance = meta(**required)
    for name in METADATA_COUNTS:
        getattr(instance, name)  # AttributeError: '<class>' object has no attribute '<name>', as vLLM would fail
    return f"{meta.__module__}.{meta.__name__} constructs with {', '.join(METADATA_COUNTS)}"


def check_indexer(state: dict) -> str:
    importlib.import_module(INDEXER)
    fallback = importlib.import_module(FALLBACK)
    missing = [name for name in FALLBACK_FUNCTIONS if not callable(getattr(fallback, name, None))]
    if missing:
        raise CheckFailed(f"{FALLBACK} lacks {', '.join(missing)}")
    return f"{INDEXER} and its Triton fallback {FALLBACK} import"


CHECKS = (
    ("enum", check_enum),
    ("backend", check_backend),
    ("candidates", check_candidates),
    ("metadata", check_metadata),
    ("indexer", check_indexer),
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capability", default="8.0", help="compute capability of the serving GPUs (8.0 for A800)")
    args = parser.parse_args(argv)
    major, _, minor = args.capability.partition(".")
    state = {"capability": (int(major), int(minor or 0)), "capability_text": args.capability}
    failed = 0
    for name, run in CHECKS:
        try:
            detail = run(state)
        except CheckFailed as exc:
            failed += 1
            print(f"sm80 self-check: FAILED: {name}: {exc} (end)")
        except Exception as exc:  # every error of the patched package is a finding to report
            failed += 1
            print(f"sm80 self-check: FAILED: {name}: {_last_line(exc)} (end)")
        else:
            print(f"sm80 self-check: ok {name}: {detail}")
    print(f"sm80 self-check: {len(CHECKS) - failed} of {len(CHECKS)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
