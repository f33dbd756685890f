"""TEST DOUBLE's stand-in of the real module `vllm.utils.import_utils`: `resolve_obj_by_qualname` and
`has_deep_gemm`, which is True in v0.26.0 because its wheel vendors DeepGEMM (`vllm.third_party.deep_gemm`, here a
stand-in that refuses architectures DeepGEMM has no kernels for)."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def resolve_obj_by_qualname(qualname: str) -> Any:
    """Resolve an object by its fully-qualified class name."""
    module_name, obj_name = qualname.rsplit(".", 1)
    module = importlib.import_module(module_name)
    return getattr(module, obj_name)


def _has_module(module_name: str) -> bool:
    """Return True if *module_name* can be found in the current environment."""
    try:
        return importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError:
        return False


def has_deep_gemm() -> bool:
    """Whether the optional `deep_gemm` package is available.

    Prefers an externally installed ``deep_gemm`` package (so users can
    override with a newer version), then falls back to the vendored copy
    bundled in the vLLM wheel.
    """
    return _has_module("deep_gemm") or _has_module("vllm.third_party.deep_gemm")
