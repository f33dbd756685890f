"""TEST DOUBLE's stand-in of the real module `vllm.v1.attention.backends.mla.flashinfer_mla_sparse`: the FlashInfer
sparse MLA backends' selection rules only (TRT-LLM kernels on SM100, and the SM120 variant)."""

from __future__ import annotations

from typing import ClassVar

from vllm.platforms.interface import DeviceCapability
from vllm.v1.attention.backends.mla import SparseMLABackendStandIn


class FlashInferMLASparseBackend(SparseMLABackendStandIn):
    supported_dtypes: ClassVar[list[str]] = ["bfloat16"]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "bfloat16", "fp8", "fp8_e4m3"]

    @staticmethod
    def get_name() -> str:
        return "FLASHINFER_MLA_SPARSE"

    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return capability.major == 10


class FlashInferMLASparseSM120Backend(FlashInferMLASparseBackend):
    @staticmethod
    def get_name() -> str:
        return "FLASHINFER_MLA_SPARSE_SM120"

    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return capability.major == 12
