"""TEST DOUBLE's stand-in of the real module `vllm.platforms.cuda` (v0.26.0): the attention candidates of
`_get_backend_priorities` with v0.26.0's branches, and `CudaPlatform`, whose GPUs are the ones the double reads from
the `nvidia-smi` in the container (vllm/_double/platform.py). No torch, no driver library: it imports anywhere."""

from __future__ import annotations

from functools import cache

from vllm.platforms.interface import DeviceCapability, Platform
from vllm.v1.attention.backends.registry import AttentionBackendEnum


def _is_quantized_kv_cache(kv_cache_dtype: str | None) -> bool:
    return kv_cache_dtype is not None and kv_cache_dtype.startswith("fp8")


@cache
def _get_backend_priorities(
    use_mla: bool,
    device_capability: DeviceCapability,
    num_heads: int | None = None,
    kv_cache_dtype: str | None = None,
    use_non_causal: bool = False,
) -> list[AttentionBackendEnum]:
    """Get backend priorities with lazy import to avoid circular dependency."""
    if use_mla:
        if device_capability.major == 10:
            if _is_quantized_kv_cache(kv_cache_dtype):
                # Prefer FlashInfer for fp8 kv cache
                sparse_backends = [
                    AttentionBackendEnum.FLASHINFER_MLA_SPARSE,
                    AttentionBackendEnum.FLASHMLA_SPARSE,
                ]
            elif num_heads is not None and num_heads <= 16:
                # BF16 KV cache: prefer FlashInfer at low head counts (FlashMLA uses padding)
                sparse_backends = [
                    AttentionBackendEnum.FLASHINFER_MLA_SPARSE,
                    AttentionBackendEnum.FLASHMLA_SPARSE,
                ]
            else:
                sparse_backends = [
                    AttentionBackendEnum.FLASHMLA_SPARSE,
                    AttentionBackendEnum.FLASHINFER_MLA_SPARSE,
                ]
            return [
                AttentionBackendEnum.FLASHINFER_MLA,
                AttentionBackendEnum.TOKENSPEED_MLA,
                AttentionBackendEnum.CUTLASS_MLA,
                AttentionBackendEnum.FLASH_ATTN_MLA,
                AttentionBackendEnum.FLASHMLA,
                AttentionBackendEnum.TRITON_MLA,
                *sparse_backends,
            ]
        elif device_capability.major == 12:
            return [
                AttentionBackendEnum.TRITON_MLA,
                AttentionBackendEnum.FLASHINFER_MLA_SPARSE_SM120,
            ]
        else:
            sparse_tail = [
                AttentionBackendEnum.FLASH_ATTN_MLA_SPARSE,
                AttentionBackendEnum.FLASHMLA_SPARSE,
            ]
            return [
                AttentionBackendEnum.FLASH_ATTN_MLA,
                AttentionBackendEnum.FLASHMLA,
                AttentionBackendEnum.FLASHINFER_MLA,
                AttentionBackendEnum.TRITON_MLA,
                *sparse_tail,
            ]
    else:
        if device_capability.major == 10 and not use_non_causal:
            return [
                AttentionBackendEnum.FLASHINFER,
                AttentionBackendEnum.FLASH_ATTN,
                AttentionBackendEnum.TRITON_ATTN,
                AttentionBackendEnum.FLEX_ATTENTION,
            ]
        else:
            return [
                AttentionBackendEnum.FLASH_ATTN,
                AttentionBackendEnum.FLASHINFER,
                AttentionBackendEnum.TRITON_ATTN,
                AttentionBackendEnum.FLEX_ATTENTION,
            ]


class CudaPlatform(Platform):
    device_name: str = "cuda"
    device_type: str = "cuda"

    def is_cuda(self) -> bool:
        return True

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability | None:
        from vllm._double.platform import visible_gpus

        return DeviceCapability(*visible_gpus()[device_id].capability)

    @classmethod
    def support_deep_gemm(cls) -> bool:
        """Currently, only Hopper and Blackwell GPUs are supported."""
        return (
            cls.is_device_capability(90) or cls.is_device_capability_family(100) or cls.is_device_capability_family(120)
        )
