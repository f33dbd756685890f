"""TEST DOUBLE's stand-in of the real package `vllm.model_executor.layers.attention`."""
