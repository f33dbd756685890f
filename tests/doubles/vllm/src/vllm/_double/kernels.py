"""Triton kernels of the test double: what the sm80 patch set depends on, without a GPU.

* A kernel is compiled at its first launch (Triton's JIT, and the autotuner benchmarking its configs) and cached
  for the process.
* During CUDA-graph capture (`graph_capture()`, which vLLM enters to capture its graphs unless --enforce-eager)
  that first launch fails as it does on a GPU: loading a module and the autotuner's timing runs are not permitted
  on a capturing stream, and Triton's launcher reports the driver's `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`
  (`gpuAssert` in triton/backends/nvidia/driver.c) as `RuntimeError: Triton Error [CUDA]: operation not permitted
  when stream is capturing` (vLLM issue #48285).
* A kernel that stores `fp8e4nv` (torch.float8_e4m3fn) does not compile below compute capability 8.9: Triton's
  CUDA backend supports only `fp8e4b15` and `fp8e5` there (triton/backends/nvidia/compiler.py) and its type
  lowering raises `type fp8e4nv not supported in this architecture` (triton/language/core.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_compiled: set[str] = set()
_capturing = False


@contextmanager
def graph_capture() -> Iterator[None]:
    """The stream is capturing while inside (torch.cuda.graph in vLLM's CUDA-graph wrapper)."""
    global _capturing
    _capturing = True
    try:
        yield
    finally:
        _capturing = False


def is_compiled(name: str) -> bool:
    return name in _compiled


def launch(name: str, *, fp8: str | None = None) -> None:
    """Launch the Triton kernel `name` (the JIT function's name); `fp8` is the FP8 type it stores, if any."""
    if name in _compiled:
        return
    if fp8 == "fp8e4nv":
        from vllm.platforms import current_platform

        if not current_platform.has_device_capability(89):
            raise ValueError(
                "type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')"
            )
    if _capturing:
        raise RuntimeError("Triton Error [CUDA]: operation not permitted when stream is capturing")
    _compiled.add(name)
