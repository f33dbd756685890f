"""TEST DOUBLE's stand-in of the real module `vllm.model_executor.models.deepseek_v2` (v0.26.0): the sparse
attention `Indexer` of DeepSeek V3.2 / GLM-5 (GlmMoeDsaForCausalLM reuses it), reduced to what decides its kernels.

`use_fused_indexer_q` routes the indexer query through the Triton kernel `fused_indexer_q_rope_quant`, which
stores FP8 (fp8e4nv): v0.26.0 enables it on every CUDA GPU, though Triton cannot compile fp8e4nv below compute
capability 8.9. Tensors are shapes (vllm/_double/tensor.py)."""

from __future__ import annotations

from typing import Any

from vllm._double.tensor import empty
from vllm.model_executor.layers.sparse_attn_indexer import SparseAttnIndexer, fused_indexer_q_rope_quant
from vllm.platforms import current_platform


class DeepseekV32IndexerCache:
    """The indexer's K cache (FP8 values and FP32 scales per `quant_block_size` elements, as uint8)."""

    def __init__(self, head_dim: int, dtype: str, prefix: str, block_size: int) -> None:
        self.head_dim = head_dim
        self.dtype = dtype
        self.prefix = prefix
        self.block_size = block_size
        self.kv_cache = empty(1, block_size, head_dim, dtype=dtype)


class Indexer:
    def __init__(
        self,
        config: dict[str, Any],
        max_model_len: int,
        block_size: int,
        max_num_batched_tokens: int,
        topk_indices_buffer: Any,
        prefix: str = "",
    ):
        """vLLM's takes (vllm_config, config, hidden_size, q_lora_rank, quant_config, cache_config,
        topk_indices_buffer, prefix); the double reads the same values from the checkpoint's config.json."""
        self.config = config
        self.topk_tokens = config["index_topk"]
        self.n_head = config.get("index_n_heads", 64)  # 64
        self.head_dim = config.get("index_head_dim", 128)  # 128
        self.rope_dim = config.get("qk_rope_head_dim", 64)  # 64
        self.q_lora_rank = config.get("q_lora_rank", 2048)
        self.softmax_scale = self.head_dim**-0.5

        self.scale_fmt = "ue8m0"
        self.quant_block_size = 128  # TODO: get from config
        self.topk_indices_buffer = topk_indices_buffer

        self.k_cache = DeepseekV32IndexerCache(
            head_dim=self.head_dim + self.head_dim // self.quant_block_size * 4,
            dtype="uint8",
            prefix=f"{prefix}.k_cache",
            block_size=block_size,
        )
        self.max_model_len = max_model_len
        self.prefix = prefix
        self.max_total_seq_len = max_num_batched_tokens
        self.indexer_op = SparseAttnIndexer(
            self.k_cache,
            self.quant_block_size,
            self.scale_fmt,
            self.topk_tokens,
            self.head_dim,
            self.max_model_len,
            self.max_total_seq_len,
            self.topk_indices_buffer,
        )

        self.n_head_scale = self.n_head**-0.5
        self.use_fused_indexer_q = (
            current_platform.is_cuda()
            and self.quant_block_size == self.head_dim
            and self.head_dim == 128
            and self.rope_dim == 64
            and self.scale_fmt is not None
        )

    def forward(self, hidden_states: Any, qr: Any, positions: Any, rotary_emb: Any, attn_metadata: Any) -> Any:
        num_tokens = hidden_states.shape[0]
        q = empty(num_tokens, self.n_head, self.head_dim, dtype=hidden_states.dtype)
        kw = empty(num_tokens, self.head_dim + self.n_head, dtype=hidden_states.dtype)  # fused wk + weights_proj
        k = empty(num_tokens, self.head_dim, dtype=kw.dtype)
        weights = empty(num_tokens, self.n_head, dtype="float32")
        if self.use_fused_indexer_q and q.dtype == "bfloat16":
            q_fp8, weights = fused_indexer_q_rope_quant(
                positions, q, rotary_emb, weights, self.softmax_scale, self.n_head_scale
            )
        else:
            # RoPE, then per-token-group FP8 quantisation of q in PyTorch
            q_fp8 = empty(num_tokens, self.n_head, self.head_dim, dtype="float8_e4m3fn")
        return self.indexer_op.forward_cuda(hidden_states, q_fp8, k, weights, attn_metadata)
