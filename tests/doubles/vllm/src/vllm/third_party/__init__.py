"""TEST DOUBLE's stand-in of the real package `vllm.third_party` (libraries the v0.26.0 wheel vendors)."""
