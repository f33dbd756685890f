"""TEST DOUBLE's stand-in of the real module `vllm.v1.attention.backend`: the backend base class with vLLM's
`validate_configuration` reasons (the subset a sparse MLA model meets), the metadata base classes and
`CommonAttentionMetadata`. Tensors are shapes (vllm/_double/tensor.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar

from vllm.platforms.interface import DeviceCapability


class AttentionCGSupport(Enum):
    """Constants for the cudagraph support of the attention backend."""

    ALWAYS = 3
    UNIFORM_BATCH = 2
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    NEVER = 0


class AttentionBackend:
    """Abstract class for attention backends."""

    supported_dtypes: ClassVar[list[str]] = ["float16", "bfloat16"]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float16", "bfloat16"]

    @staticmethod
    def get_name() -> str:
        raise NotImplementedError

    @staticmethod
    def get_metadata_cls() -> type:
        raise NotImplementedError

    @staticmethod
    def get_builder_cls() -> type:
        raise NotImplementedError

    @staticmethod
    def get_impl_cls() -> type:
        raise NotImplementedError

    @classmethod
    def full_cls_name(cls) -> tuple[str, str]:
        return (cls.__module__, cls.__qualname__)

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []

    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        supported_head_sizes = cls.get_supported_head_sizes()
        return (not supported_head_sizes) or head_size in supported_head_sizes

    @classmethod
    def supports_dtype(cls, dtype: str) -> bool:
        return dtype in cls.supported_dtypes

    @classmethod
    def supports_kv_cache_dtype(cls, kv_cache_dtype: str | None) -> bool:
        if kv_cache_dtype is None:
            return True
        return (not cls.supported_kv_cache_dtypes) or kv_cache_dtype in cls.supported_kv_cache_dtypes

    @classmethod
    def is_mla(cls) -> bool:
        return False

    @classmethod
    def supports_sink(cls) -> bool:
        return False

    @classmethod
    def is_sparse(cls) -> bool:
        return False

    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return True

    @classmethod
    def validate_configuration(
        cls,
        head_size: int,
        dtype: str,
        kv_cache_dtype: str | None,
        block_size: int | None,
        use_mla: bool,
        has_sink: bool,
        use_sparse: bool,
        device_capability: DeviceCapability,
        **_others: Any,
    ) -> list[str]:
        invalid_reasons = []
        if not cls.supports_head_size(head_size):
            invalid_reasons.append("head_size not supported")
        if not cls.supports_dtype(dtype):
            invalid_reasons.append("dtype not supported")
        if not cls.supports_kv_cache_dtype(kv_cache_dtype):
            invalid_reasons.append("kv_cache_dtype not supported")
        if use_mla != cls.is_mla():
            invalid_reasons.append("MLA not supported" if use_mla else "non-MLA not supported")
        if has_sink and not cls.supports_sink():
            invalid_reasons.append("attention sinks not supported")
        if use_sparse != cls.is_sparse():
            invalid_reasons.append("sparse not supported" if use_sparse else "non-sparse not supported")
        if not cls.supports_compute_capability(device_capability):
            invalid_reasons.append("compute capability not supported")
        return invalid_reasons


class AttentionMetadata:
    pass


M = TypeVar("M", bound=AttentionMetadata)


class AttentionMetadataBuilder(Generic[M]):
    """Builds the metadata of one batch (`build`); `_cudagraph_support` says which batches may be captured."""

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.NEVER

    def build(
        self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False
    ) -> M:
        raise NotImplementedError


@dataclass
class CommonAttentionMetadata:
    """Per-batch attention metadata, shared across layers and backends."""

    query_start_loc: Any
    query_start_loc_cpu: list[int]
    seq_lens: Any
    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    block_table_tensor: Any
    slot_mapping: Any


class AttentionImpl:
    """What a backend's implementation is given at construction (heads, head size, scale)."""

    def __init__(self, num_heads: int, head_size: int, scale: float, **kwargs: Any) -> None:
        self.num_heads, self.head_size, self.scale = num_heads, head_size, scale
