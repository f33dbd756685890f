"""TEST DOUBLE's stand-in of the real module `vllm.v1.attention.backends.mla.xpu_mla_sparse` (v0.26.0): the XPU
sparse MLA backend, whose metadata class the sm80 TRITON_MLA_SPARSE backend reuses. v0.26.0's
`XPUMLASparseMetadata` has no `num_decodes` / `num_prefills` / `num_decode_tokens` (vLLM PR #52066 adds them), which
the shared MLA layer reads from every MLA metadata. Tensors are shapes (vllm/_double/tensor.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from vllm._double.tensor import empty
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)


class XPUMLASparseBackend(AttentionBackend):
    supported_dtypes: ClassVar[list[str]] = ["float16", "bfloat16"]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float16", "bfloat16"]

    @staticmethod
    def get_name() -> str:
        return "XPU_MLA_SPARSE"

    @staticmethod
    def get_metadata_cls() -> type[XPUMLASparseMetadata]:
        return XPUMLASparseMetadata

    @staticmethod
    def get_builder_cls() -> type[XPUMLASparseMetadataBuilder]:
        return XPUMLASparseMetadataBuilder

    @staticmethod
    def get_impl_cls() -> type[XPUMLASparseImpl]:
        return XPUMLASparseImpl

    @classmethod
    def is_mla(cls) -> bool:
        return True

    @classmethod
    def is_sparse(cls) -> bool:
        return True

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return [576]


@dataclass
class XPUMLASparseMetadata(AttentionMetadata):
    num_reqs: int
    max_query_len: int
    max_seq_len: int

    num_actual_tokens: int  # Number of tokens excluding padding.
    query_start_loc: Any
    slot_mapping: Any

    block_table: Any
    req_id_per_token: Any

    block_size: int = 1
    topk_tokens: int = 2048


class XPUMLASparseMetadataBuilder(AttentionMetadataBuilder[XPUMLASparseMetadata]):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.NEVER

    def __init__(self, block_size: int, topk_tokens: int, max_num_batched_tokens: int, device: str = "cuda:0"):
        """vLLM's builder takes (kv_cache_spec, layer_names, vllm_config, device); these are the values it reads."""
        self.block_size = block_size
        self.topk_tokens = topk_tokens
        self.device = device
        self.req_id_per_token_buffer = empty(max_num_batched_tokens, dtype="int32", device=device)

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> XPUMLASparseMetadata:
        num_tokens = common_attn_metadata.num_actual_tokens
        req_id_per_token = self.req_id_per_token_buffer[:num_tokens]

        metadata = XPUMLASparseMetadata(
            num_reqs=common_attn_metadata.num_reqs,
            max_query_len=common_attn_metadata.max_query_len,
            max_seq_len=common_attn_metadata.max_seq_len,
            num_actual_tokens=common_attn_metadata.num_actual_tokens,
            query_start_loc=common_attn_metadata.query_start_loc,
            slot_mapping=common_attn_metadata.slot_mapping,
            block_table=common_attn_metadata.block_table_tensor,
            req_id_per_token=req_id_per_token,
            block_size=self.block_size,
            topk_tokens=self.topk_tokens,
        )
        return metadata


class XPUMLASparseImpl(AttentionImpl):
    is_sparse = True

    def __init__(self, num_heads: int, head_size: int, scale: float, **kwargs: Any) -> None:
        super().__init__(num_heads, head_size, scale, **kwargs)
        self.topk_indices_buffer = kwargs.get("topk_indices_buffer")

    def _forward_bf16_kv(self, q: Any, kv_c_and_k_pe_cache: Any, topk_indices: Any, attn_metadata: Any) -> Any:
        raise NotImplementedError("the XPU kernels are not part of the test double")

    def forward_mqa(self, q: Any, kv_c_and_k_pe_cache: Any, attn_metadata: XPUMLASparseMetadata, layer: Any) -> Any:
        num_actual_toks = q.shape[0]
        topk_indices = self.topk_indices_buffer[:num_actual_toks]
        # what the real method reads from the metadata to turn per-request indices into global slots
        _ = (attn_metadata.req_id_per_token, attn_metadata.block_table, attn_metadata.block_size)
        _ = attn_metadata.topk_tokens
        return self._forward_bf16_kv(q, kv_c_and_k_pe_cache, topk_indices, attn_metadata), None
