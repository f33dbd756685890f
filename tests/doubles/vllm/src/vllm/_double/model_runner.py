"""The model side of the double's engine: one sparse-attention decoder layer of the checkpoint built from the
stand-in modules (vllm/model_executor, vllm/v1/attention), run the way vLLM's GPU model runner runs the model at
startup. All 78 layers are alike, so one stands for them.

* `ModelRunner(...)`: the layer's `Indexer` (deepseek_v2.py), whose `SparseAttnIndexer` may refuse to start;
* `init_attention(backend)`: the selected backend's metadata builder and implementation;
* `profile_run()`: one dummy batch of `max_num_batched_tokens` prefill tokens (gpu_model_runner.profile_run):
  the indexer's prefill logits (DeepGEMM or the Triton fallback), then the MLA layer with the backend's metadata;
* `capture_cudagraphs()`: decode batches of every capture size inside `kernels.graph_capture()` (not with
  --enforce-eager): a Triton kernel first launched there fails (vLLM issue #48285).
"""

from __future__ import annotations

from typing import Any

from vllm._double import kernels
from vllm._double.tensor import empty
from vllm.model_executor.layers.attention.mla_attention import MLAAttention
from vllm.model_executor.models.deepseek_v2 import Indexer
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.attention.backends.mla.indexer import DeepseekV32IndexerMetadataBuilder

HEAD_SIZE = 576
CAPTURE_SIZES = (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 256, 512)


class ModelRunner:
    def __init__(
        self,
        config: dict[str, Any],
        *,
        tensor_parallel_size: int,
        max_model_len: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        num_speculative_tokens: int = 0,
        block_size: int = 64,
    ) -> None:
        self.config = config
        self.hidden_size = int(config.get("hidden_size", 6144))
        self.num_heads = max(int(config.get("num_attention_heads", 64)) // tensor_parallel_size, 1)
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.block_size = block_size
        self.uniform_decode_query_len = 1 + num_speculative_tokens
        topk_indices_buffer = empty(max_num_batched_tokens, config["index_topk"], dtype="int32")
        self.indexer = Indexer(
            config,
            max_model_len,
            block_size,
            max_num_batched_tokens,
            topk_indices_buffer,
            prefix="model.layers.0.self_attn.indexer",
        )
        self.indexer_builder = DeepseekV32IndexerMetadataBuilder(
            block_size, head_dim=self.indexer.head_dim, decode_threshold=self.uniform_decode_query_len
        )
        self.topk_indices_buffer = topk_indices_buffer
        self.attn: MLAAttention | None = None
        self.attn_builder: Any = None

    def init_attention(self, backend: Any) -> None:
        """The selected backend's builder and implementation; a backend the double models only for its selection
        (no builder) leaves the MLA layer out of the runs."""
        backend_class = backend.get_class()
        try:
            builder_cls = backend_class.get_builder_cls()
            impl_cls = backend_class.get_impl_cls()
        except NotImplementedError:
            return
        self.attn_builder = builder_cls(self.block_size, self.config["index_topk"], self.max_num_batched_tokens)
        impl = impl_cls(
            num_heads=self.num_heads,
            head_size=HEAD_SIZE,
            scale=HEAD_SIZE**-0.5,
            topk_indices_buffer=self.topk_indices_buffer,
        )
        self.attn = MLAAttention(impl)

    def _batch(self, num_reqs: int, query_len: int, seq_len: int) -> CommonAttentionMetadata:
        num_tokens = num_reqs * query_len
        return CommonAttentionMetadata(
            query_start_loc=empty(num_reqs + 1, dtype="int32"),
            query_start_loc_cpu=[i * query_len for i in range(num_reqs + 1)],
            seq_lens=empty(num_reqs, dtype="int32"),
            num_reqs=num_reqs,
            num_actual_tokens=num_tokens,
            max_query_len=query_len,
            max_seq_len=seq_len,
            block_table_tensor=empty(num_reqs, -(-self.max_model_len // self.block_size), dtype="int32"),
            slot_mapping=empty(num_tokens, dtype="int64"),
        )

    def _forward(self, common: CommonAttentionMetadata) -> None:
        num_tokens = common.num_actual_tokens
        hidden_states = empty(num_tokens, self.hidden_size)
        qr = empty(num_tokens, self.indexer.q_lora_rank)
        positions = empty(num_tokens, dtype="int64")
        self.indexer.forward(hidden_states, qr, positions, None, self.indexer_builder.build(0, common))
        if self.attn is not None:
            attn_metadata = self.attn_builder.build(0, common)
            q = empty(num_tokens, self.num_heads, HEAD_SIZE)
            kv_c_normed = empty(num_tokens, 512)
            k_pe = empty(num_tokens, 1, 64)
            kv_cache = empty(1, self.block_size, HEAD_SIZE)
            self.attn.forward(q, kv_c_normed, k_pe, kv_cache, attn_metadata)

    def profile_run(self) -> None:
        num_reqs = min(self.max_num_seqs, self.max_num_batched_tokens)
        query_len = max(self.max_num_batched_tokens // num_reqs, 1)
        self._forward(self._batch(num_reqs, query_len, query_len))

    def cudagraph_sizes(self) -> list[int]:
        return [size for size in CAPTURE_SIZES if size <= self.max_num_seqs]

    def capture_cudagraphs(self) -> None:
        """Uniform decode batches, the largest first, as vLLM captures them."""
        with kernels.graph_capture():
            for size in reversed(self.cudagraph_sizes()):
                query_len = self.uniform_decode_query_len
                self._forward(self._batch(size, query_len, self.max_model_len))
