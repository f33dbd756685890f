"""MLA attention backends of the test double. The sparse backends for sm90+ are built in; the sm80 sparse
backend (TRITON_MLA_SPARSE, vllm-project/vllm PR #38476) exists only once the overlay adds its module."""
