"""TEST DOUBLE's stand-in of the real module `vllm.v1.attention.backends.mla.flashmla_sparse`: the FlashMLA sparse
backend's selection rules only (SM90 / SM100; BF16 or its own FP8 KV cache format)."""

from __future__ import annotations

from typing import ClassVar

from vllm.platforms.interface import DeviceCapability
from vllm.v1.attention.backends.mla import SparseMLABackendStandIn


class FlashMLASparseBackend(SparseMLABackendStandIn):
    supported_dtypes: ClassVar[list[str]] = ["bfloat16"]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "bfloat16", "fp8_ds_mla", "fp8"]

    @staticmethod
    def get_name() -> str:
        return "FLASHMLA_SPARSE"

    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return capability.major in [9, 10]
