"""OVERLAY of the test double: the sparse indexer after the sm80 patch (is_deep_gemm_supported() guard, Triton
fallback), copied over the installed vllm package like the real patch files."""

PATCHED = True


def indexer_log_line() -> str | None:
    return "DeepGEMM not supported on this platform; using Triton fallback for sparse attention indexer."
