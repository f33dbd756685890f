"""TEST DOUBLE's stand-in of the real module `vllm.v1.attention.backends.mla.indexer` (v0.26.0): the metadata of the
DeepSeek V3.2 / GLM-5 sparse-attention indexer. Decode `seq_lens` are made 2-D (`[B, 1]`, `[B, next_n]` with MTP)
for DeepGEMM's paged MQA logits, and DeepGEMM's scheduling metadata is computed whenever the package imports
(`has_deep_gemm()`), on any architecture. Tensors are shapes (vllm/_double/tensor.py)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, ClassVar

from vllm._double.tensor import empty
from vllm.platforms import current_platform
from vllm.utils.deep_gemm import get_paged_mqa_logits_metadata
from vllm.utils.import_utils import has_deep_gemm
from vllm.v1.attention.backend import (
    AttentionCGSupport,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)


@dataclass
class DeepseekV32IndexerPrefillChunkMetadata:
    cu_seqlen_ks: Any
    cu_seqlen_ke: Any
    cu_seq_lens: Any
    total_seq_lens: int
    token_start: int
    token_end: int
    num_reqs: int


@dataclass
class DeepseekV32IndexerPrefillMetadata:
    chunks: list[DeepseekV32IndexerPrefillChunkMetadata]


@dataclass
class DeepSeekV32IndexerDecodeMetadata:
    block_table: Any
    seq_lens: Any
    decode_lens: Any
    requires_padding: bool
    schedule_metadata: Any


@dataclass
class DeepseekV32IndexerMetadata(AttentionMetadata):
    seq_lens: Any
    num_reqs: int
    max_query_len: int
    max_seq_len: int
    num_actual_tokens: int
    query_start_loc: Any
    slot_mapping: Any
    head_dim: int
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    num_prefill_tokens: int
    decode: DeepSeekV32IndexerDecodeMetadata | None = None
    prefill: DeepseekV32IndexerPrefillMetadata | None = None


def split_decodes_and_prefills(
    common_attn_metadata: CommonAttentionMetadata, decode_threshold: int = 1
) -> tuple[int, int, int, int]:
    """(num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens): decodes are the requests of at most
    `decode_threshold` query tokens, at the front of the batch."""
    starts = common_attn_metadata.query_start_loc_cpu
    query_lens = [b - a for a, b in itertools.pairwise(starts)]
    num_decodes = next((i for i, n in enumerate(query_lens) if n > decode_threshold), len(query_lens))
    num_decode_tokens = sum(query_lens[:num_decodes])
    return (
        num_decodes,
        len(query_lens) - num_decodes,
        num_decode_tokens,
        common_attn_metadata.num_actual_tokens - num_decode_tokens,
    )


class DeepseekV32IndexerMetadataBuilder(AttentionMetadataBuilder[DeepseekV32IndexerMetadata]):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH

    def __init__(self, block_size: int, head_dim: int = 128, decode_threshold: int = 1, num_sms: int = 108):
        """vLLM's builder takes (kv_cache_spec, layer_names, vllm_config, device); these are the values it reads
        (an A800 has 108 SMs)."""
        self.block_size = block_size
        self.head_dim = head_dim
        self.reorder_batch_threshold = decode_threshold
        self.num_sms = num_sms
        self.scheduler_metadata_buffer = None

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> DeepseekV32IndexerMetadata:
        num_reqs = common_attn_metadata.num_reqs
        num_tokens = common_attn_metadata.num_actual_tokens

        num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens = split_decodes_and_prefills(
            common_attn_metadata, decode_threshold=self.reorder_batch_threshold
        )

        prefill_metadata = None
        if num_prefills > 0:
            chunk = DeepseekV32IndexerPrefillChunkMetadata(
                cu_seqlen_ks=empty(num_prefill_tokens, dtype="int32"),
                cu_seqlen_ke=empty(num_prefill_tokens, dtype="int32"),
                cu_seq_lens=empty(num_prefills + 1, dtype="int32"),
                total_seq_lens=num_prefill_tokens,
                token_start=num_decode_tokens,
                token_end=num_tokens,
                num_reqs=num_prefills,
            )
            prefill_metadata = DeepseekV32IndexerPrefillMetadata(chunks=[chunk])

        decode_metadata = None
        if num_decodes > 0:
            seq_lens = common_attn_metadata.seq_lens[:num_decodes]
            next_n = num_decode_tokens // num_decodes
            # deep_gemm paged MQA logits requires 2D context_lens
            seq_lens = empty(num_decodes, next_n, dtype="int32") if next_n > 1 else seq_lens.unsqueeze(-1)
            if current_platform.is_cuda() and has_deep_gemm():
                self.scheduler_metadata_buffer = get_paged_mqa_logits_metadata(seq_lens, self.block_size, self.num_sms)
            decode_metadata = DeepSeekV32IndexerDecodeMetadata(
                block_table=common_attn_metadata.block_table_tensor[:num_decodes],
                seq_lens=seq_lens,
                decode_lens=empty(num_decodes, dtype="int32"),
                requires_padding=False,
                schedule_metadata=self.scheduler_metadata_buffer,
            )

        return DeepseekV32IndexerMetadata(
            seq_lens=common_attn_metadata.seq_lens,
            num_reqs=num_reqs,
            max_query_len=common_attn_metadata.max_query_len,
            max_seq_len=common_attn_metadata.max_seq_len,
            num_actual_tokens=num_tokens,
            query_start_loc=common_attn_metadata.query_start_loc,
            slot_mapping=common_attn_metadata.slot_mapping,
            head_dim=self.head_dim,
            num_decodes=num_decodes,
            num_decode_tokens=num_decode_tokens,
            num_prefills=num_prefills,
            num_prefill_tokens=num_prefill_tokens,
            decode=decode_metadata,
            prefill=prefill_metadata,
        )
