"""TEST DOUBLE of the vLLM package (tests/doubles/vllm): reproduces the observable contract of vLLM 0.26.0
serving GLM-5.2-NVFP4 for this project's tests. Not vLLM; see tests/doubles/vllm/README.md."""

__version__ = "0.26.0"
