"""TEST DOUBLE's stand-in of the real module `vllm.platforms`: `current_platform`, resolved lazily as in vLLM.

The double is always the CUDA platform (vllm/platforms/cuda.py); its GPUs are the ones the (stand-in) `nvidia-smi`
in the container reports (vllm/_double/platform.py), read the first time a capability is asked for.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "current_platform":
        from vllm.platforms.cuda import CudaPlatform

        platform = CudaPlatform()
        globals()["current_platform"] = platform
        return platform
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
