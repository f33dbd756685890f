"""TEST DOUBLE's stand-in of the real module `vllm.utils.deep_gemm` (v0.26.0): the compatibility wrappers around
DeepGEMM, and `is_deep_gemm_supported()`, True only on the architectures DeepGEMM has kernels for (9.0, the 10.x and
12.x families) and only when `VLLM_USE_DEEP_GEMM` (default 1) and DeepGEMM itself are there. `has_deep_gemm()` only
says that the package imports, which is True on an A800 with the v0.26.0 wheel: that is the sm80 bug.

The double has no GPU: the capability is the `capability` argument when given, else the one of the GPUs the double
reads from `nvidia-smi` (`current_platform`).
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

from vllm.platforms import current_platform
from vllm.platforms.interface import DeviceCapability
from vllm.utils.import_utils import has_deep_gemm


def _supports_arch(capability: DeviceCapability) -> bool:
    """CudaPlatform.support_deep_gemm() for a given capability: 9.0, or the 100 / 120 families."""
    return capability == (9, 0) or capability.major in (10, 12)


@functools.cache
def is_deep_gemm_supported(capability: DeviceCapability | None = None) -> bool:
    """Return `True` if DeepGEMM is supported on the current platform.
    Currently, only Hopper and Blackwell GPUs are supported.
    """
    if capability is None:
        is_supported_arch = current_platform.support_deep_gemm()
    else:
        is_supported_arch = _supports_arch(DeviceCapability(*capability))
    use_deep_gemm = os.environ.get("VLLM_USE_DEEP_GEMM", "1") not in ("0", "false", "False")
    return is_supported_arch and use_deep_gemm and has_deep_gemm()


def _lazy_init() -> Any:
    """The DeepGEMM module: an installed `deep_gemm` first, else the copy the wheel vendors."""
    try:
        return importlib.import_module("deep_gemm")
    except ImportError:
        return importlib.import_module("vllm.third_party.deep_gemm")


def fp8_fp4_mqa_logits(q: Any, kv: Any, weights: Any, cu_seqlen_ks: Any, cu_seqlen_ke: Any, **kwargs: Any) -> Any:
    return _lazy_init().fp8_fp4_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, **kwargs)


def fp8_fp4_paged_mqa_logits(
    q: Any, kv_cache: Any, weights: Any, context_lens: Any, block_table: Any, schedule_metadata: Any,
    max_model_len: int, **kwargs: Any,
) -> Any:  # fmt: skip
    return _lazy_init().fp8_fp4_paged_mqa_logits(
        q, kv_cache, weights, context_lens, block_table, schedule_metadata, max_model_len, **kwargs
    )


def get_paged_mqa_logits_metadata(context_lens: Any, block_size: int, num_sms: int) -> Any:
    return _lazy_init().get_paged_mqa_logits_metadata(context_lens, block_size, num_sms)
