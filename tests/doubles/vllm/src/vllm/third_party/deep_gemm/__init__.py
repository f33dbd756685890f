"""TEST DOUBLE's stand-in of DeepGEMM as the v0.26.0 wheel vendors it (`vllm.third_party.deep_gemm`).

DeepGEMM has kernels for SM90 and SM100 only: its host code dispatches on the GPU's architecture and ends in
`DG_HOST_UNREACHABLE("Unsupported architecture")`, a C++ `DGException` that pybind11 turns into a Python
`RuntimeError` whose text is `Assertion error (<file>:<line>): Unsupported architecture`. The stand-in raises the
same on any other architecture (an A800 is SM80), at the first call, as the real library does.
"""

from __future__ import annotations

from typing import Any

# csrc/apis/attention.hpp in DeepGEMM: the dispatch of the MQA logits kernels
_ATTENTION_API = "csrc/apis/attention.hpp"


def _arch_major() -> int:
    from vllm.platforms import current_platform

    capability = current_platform.get_device_capability()
    return capability.major if capability is not None else 0


def _dispatch(line: int) -> None:
    if _arch_major() not in (9, 10):
        raise RuntimeError(f"Assertion error ({_ATTENTION_API}:{line}): Unsupported architecture")


def fp8_fp4_mqa_logits(q: Any, kv: Any, weights: Any, cu_seqlen_ks: Any, cu_seqlen_ke: Any, **kwargs: Any) -> Any:
    _dispatch(186)
    from vllm._double.tensor import empty

    return empty(q[0].shape[0], kv[0].shape[0], dtype="float32")


def fp8_fp4_paged_mqa_logits(
    q: Any, kv_cache: Any, weights: Any, context_lens: Any, block_table: Any, schedule_meta: Any, max_model_len: int,
    **kwargs: Any,
) -> Any:  # fmt: skip
    _dispatch(330)
    from vllm._double.tensor import empty

    return empty(q[0].shape[0] * q[0].shape[1], max_model_len, dtype="float32")


def get_paged_mqa_logits_metadata(context_lens: Any, block_size: int, num_sms: int) -> Any:
    _dispatch(268)
    from vllm._double.tensor import empty

    return empty(num_sms + 1, 2, dtype="int32")
