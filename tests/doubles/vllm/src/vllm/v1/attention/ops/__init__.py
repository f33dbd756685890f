"""TEST DOUBLE's stand-in of the real package `vllm.v1.attention.ops` (attention kernels). v0.26.0's kernels are
not reproduced; the sm80 patch set adds the Triton fallback of the sparse indexer (mqa_logits_triton.py) and the
sparse MLA kernel (triton_sparse_mla_kernel.py) here."""
