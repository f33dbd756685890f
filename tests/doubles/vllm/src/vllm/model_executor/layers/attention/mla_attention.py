"""TEST DOUBLE's stand-in of the real module `vllm.model_executor.layers.attention.mla_attention` (v0.26.0): the
shared MLA attention layer, which reads the decode/prefill split from ANY backend's metadata: `num_decode_tokens`
when it writes the KV cache, then `num_decodes` / `num_prefills` / `num_decode_tokens` in `forward_impl`, and the
dense-MHA prefill fields when a sparse backend gets tokens outside the MQA part. Tensors are shapes."""

from __future__ import annotations

from typing import Any


class MLAAttention:
    def __init__(self, impl: Any, kv_cache_dtype: str = "auto") -> None:
        self.impl = impl
        self.kv_cache_dtype = kv_cache_dtype

    def update_kv_cache(
        self,
        kv_c_normed: Any,
        k_pe: Any,
        kv_cache: Any,
        slot_mapping: Any,
        attn_metadata: Any,
        kv_cache_dtype: str,
    ) -> None:
        if slot_mapping is None:
            return
        _ = (
            kv_c_normed,
            k_pe,
            slot_mapping,
            attn_metadata.num_decode_tokens if attn_metadata is not None else None,
        )

    def forward_impl(self, q: Any, kv_c_normed: Any, k_pe: Any, kv_cache: Any, attn_metadata: Any) -> Any:
        assert (
            attn_metadata.num_decodes is not None
            and attn_metadata.num_prefills is not None
            and attn_metadata.num_decode_tokens is not None
        )
        num_mqa_tokens = attn_metadata.num_decode_tokens
        num_mha_tokens = q.shape[0] - num_mqa_tokens
        if self.impl.is_sparse and num_mha_tokens > 0:
            _ = (attn_metadata.prefill_max_seq_len, attn_metadata.topk_tokens)
        output = None
        if num_mqa_tokens > 0:
            output, _lse = self.impl.forward_mqa(q[:num_mqa_tokens], kv_cache, attn_metadata, self)
        return output

    def forward(self, q: Any, kv_c_normed: Any, k_pe: Any, kv_cache: Any, attn_metadata: Any) -> Any:
        slot_mapping = attn_metadata.slot_mapping
        self.update_kv_cache(kv_c_normed, k_pe, kv_cache, slot_mapping, attn_metadata, self.kv_cache_dtype)
        return self.forward_impl(q, kv_c_normed, k_pe, kv_cache, attn_metadata)
