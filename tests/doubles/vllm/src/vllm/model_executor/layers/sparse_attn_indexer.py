"""TEST DOUBLE's stand-in of the real module `vllm.model_executor.layers.sparse_attn_indexer` (v0.26.0): the sparse
attention indexer of DeepSeek V3.2 / GLM-5, shaped like the real one where the sm80 patch set changes it.

v0.26.0 computes the indexer's MQA logits with DeepGEMM on CUDA (`fp8_fp4_mqa_logits` for prefills,
`fp8_fp4_paged_mqa_logits` for decodes) and refuses to start only when DeepGEMM does not import
(`has_deep_gemm()`). The wheel vendors DeepGEMM, so on an A800 it starts and the first forward fails in DeepGEMM,
which has no SM80 kernels. Tensors are shapes and kernels are stand-ins (vllm/_double/tensor.py, kernels.py).
"""

from __future__ import annotations

from typing import Any

from vllm._double import kernels
from vllm._double.tensor import empty
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.deep_gemm import fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits
from vllm.utils.import_utils import has_deep_gemm

logger = init_logger(__name__)


def indexer_log_line() -> str | None:
    """The line the indexer logs when it is built (the double's engine prints it); v0.26.0 has no fallback to
    announce."""
    return None


def fused_indexer_q_rope_quant(
    positions: Any, q: Any, cos_sin_cache: Any, weights: Any, softmax_scale: float, n_head_scale: float
) -> tuple[Any, Any]:
    """Triton kernel `_fused_indexer_q_rope_quant_kernel`: RoPE on the indexer query, then quantisation to FP8
    (torch.float8_e4m3fn, Triton's fp8e4nv)."""
    kernels.launch("_fused_indexer_q_rope_quant_kernel", fp8="fp8e4nv")
    return empty(*q.shape, dtype="float8_e4m3fn"), weights


def _xpu_fp8_mqa_logits(*args: Any) -> Any:
    raise NotImplementedError("the XPU kernels are not part of the test double")


def sparse_attn_indexer(
    hidden_states: Any,
    k_cache_prefix: str,
    kv_cache: Any,
    q_fp8: Any,
    k: Any,
    weights: Any,
    quant_block_size: int,
    scale_fmt: str | None,
    topk_tokens: int,
    head_dim: int,
    max_model_len: int,
    total_seq_lens: int,
    topk_indices_buffer: Any,
    attn_metadata: Any,
) -> Any:
    """The indexer's custom op: top-k token indices per query token (vLLM reads `attn_metadata` from the forward
    context; the double passes it)."""
    has_decode = attn_metadata.num_decodes > 0
    has_prefill = attn_metadata.num_prefills > 0
    num_decode_tokens = attn_metadata.num_decode_tokens

    if has_prefill:
        prefill_metadata = attn_metadata.prefill
        for chunk in prefill_metadata.chunks:
            k_fp8 = empty(chunk.total_seq_lens, head_dim, dtype="float8_e4m3fn")
            k_scale = empty(chunk.total_seq_lens, 4, dtype="uint8")
            if current_platform.is_xpu():
                logits = _xpu_fp8_mqa_logits(
                    q_fp8[chunk.token_start : chunk.token_end],
                    k_fp8,
                    k_scale,
                    weights[chunk.token_start : chunk.token_end],
                    chunk.cu_seqlen_ks,
                    chunk.cu_seqlen_ke,
                )
            else:
                logits = fp8_fp4_mqa_logits(
                    (q_fp8[chunk.token_start : chunk.token_end], None),
                    (k_fp8, k_scale),
                    weights[chunk.token_start : chunk.token_end],
                    chunk.cu_seqlen_ks,
                    chunk.cu_seqlen_ke,
                    clean_logits=False,
                )
            del logits

    if has_decode:
        decode_metadata = attn_metadata.decode
        batch_size = decode_metadata.seq_lens.shape[0]
        next_n = num_decode_tokens // batch_size
        padded_q_fp8_decode_tokens = empty(batch_size, next_n, *q_fp8.shape[1:], dtype=q_fp8.dtype)
        num_padded_tokens = batch_size * next_n
        seq_lens = decode_metadata.seq_lens[:batch_size]
        if current_platform.is_xpu():
            logits = _xpu_fp8_mqa_logits(
                padded_q_fp8_decode_tokens,
                kv_cache,
                weights[:num_padded_tokens],
                seq_lens,
                decode_metadata.block_table,
                max_model_len,
            )
        else:
            logits = fp8_fp4_paged_mqa_logits(
                (padded_q_fp8_decode_tokens, None),
                kv_cache,
                weights[:num_padded_tokens],
                seq_lens,
                decode_metadata.block_table,
                decode_metadata.schedule_metadata,
                max_model_len=max_model_len,
                clean_logits=False,
            )
        del logits

    return topk_indices_buffer


class SparseAttnIndexer:
    """Sparse Attention Indexer Custom Op Layer. This layer is extracted as a
    separate custom op since it involves heavy custom kernels like `mqa_logits`,
    `paged_mqa_logits` and `top_k_per_row`, etc. Those kernels maybe requires
    specific memory layout or implementation for different hardware backends to
    achieve optimal performance.
    """

    def __init__(
        self,
        k_cache: Any,
        quant_block_size: int,
        scale_fmt: str | None,
        topk_tokens: int,
        head_dim: int,
        max_model_len: int,
        max_total_seq_len: int,
        topk_indices_buffer: Any,
    ):
        self.k_cache = k_cache
        self.quant_block_size = quant_block_size
        self.scale_fmt = scale_fmt
        self.topk_tokens = topk_tokens
        self.head_dim = head_dim
        self.max_model_len = max_model_len
        self.max_total_seq_len = max_total_seq_len
        self.topk_indices_buffer = topk_indices_buffer
        if current_platform.is_cuda() and not has_deep_gemm():
            raise RuntimeError(
                "Sparse Attention Indexer CUDA op requires DeepGEMM support in the current vLLM environment."
            )
        # Decode context parallelism is not used by this deployment (one rank per GPU, TP only).
        self.dcp_world_size = 1
        self.dcp_rank = 0
        self.skip_topk_buffer_clear = False

    def forward_cuda(self, hidden_states: Any, q_fp8: Any, k: Any, weights: Any, attn_metadata: Any) -> Any:
        return sparse_attn_indexer(
            hidden_states,
            self.k_cache.prefix,
            self.k_cache.kv_cache,
            q_fp8,
            k,
            weights,
            self.quant_block_size,
            self.scale_fmt,
            self.topk_tokens,
            self.head_dim,
            self.max_model_len,
            self.max_total_seq_len,
            self.topk_indices_buffer,
            attn_metadata,
        )
