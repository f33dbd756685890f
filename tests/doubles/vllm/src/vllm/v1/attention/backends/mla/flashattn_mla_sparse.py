"""TEST DOUBLE's stand-in of the real module `vllm.v1.attention.backends.mla.flashattn_mla_sparse`: the
FlashAttention (FA3) sparse MLA backend's selection rules only (SM90; FP16/BF16 KV cache)."""

from __future__ import annotations

from typing import ClassVar

from vllm.platforms.interface import DeviceCapability
from vllm.v1.attention.backends.mla import SparseMLABackendStandIn


class FlashAttnMLASparseBackend(SparseMLABackendStandIn):
    supported_dtypes: ClassVar[list[str]] = ["float16", "bfloat16"]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float16", "bfloat16"]

    @staticmethod
    def get_name() -> str:
        return "FLASH_ATTN_MLA_SPARSE"

    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return capability.major == 9
