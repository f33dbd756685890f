"""TEST DOUBLE of `vllm.utils`: only what the launch check imports."""
