"""TEST DOUBLE's stand-in of the real package `vllm.model_executor.models`."""
