"""OVERLAY of the test double: the TRITON_MLA_SPARSE backend (vllm-project/vllm PR #38476), which makes sparse
MLA models runnable on compute capability 8.x. Its prefill path without `sparse_mla_force_mqa` reaches the
unimplemented dense forward_mha, as in the real backend."""

NAME = "TRITON_MLA_SPARSE"
MIN_CAPABILITY = (8, 0)
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16")
IMPLEMENTS_FORWARD_MHA = False
