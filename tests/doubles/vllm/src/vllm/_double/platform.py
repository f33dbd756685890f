"""The GPUs the double is given, and the attention backend vLLM 0.26.0 would pick on them.

GPUs come from the `nvidia-smi` that the (stand-in) NVIDIA container hook puts into the container, as the real
toolkit does; no GPU visible means vLLM cannot infer a device. Backend rules (docs/vllm.md): sparse MLA models
need FLASHMLA_SPARSE/FLASHINFER_MLA_SPARSE (sm90+) or TRITON_MLA_SPARSE (sm80, patched images only);
VLLM_ATTENTION_BACKEND is ignored by 0.26.0; `--attention-backend` or `"backend"` in `--attention-config`
selects a backend explicitly.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from dataclasses import dataclass

SPARSE_BACKENDS_SM90 = ("FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE")
TRITON_SPARSE_MODULE = "vllm.v1.attention.backends.mla.triton_mla_sparse"


@dataclass
class Gpu:
    index: int
    name: str
    memory_mib: int
    capability: tuple[int, int]


class PlatformError(Exception):
    """A startup failure, with the exception line vLLM prints."""


def visible_gpus() -> list[Gpu]:
    smi = shutil.which("nvidia-smi")
    if not smi:
        raise PlatformError(
            "RuntimeError: Failed to infer device type, please set the environment variable "
            "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue."
        )
    out = subprocess.run(
        [smi, "--query-gpu=index,name,memory.total,compute_cap", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise PlatformError(f"RuntimeError: NVML: {out.stdout.strip() or out.stderr.strip()}")
    gpus = []
    for row in out.stdout.strip().splitlines():
        index, name, mem, cap = (c.strip() for c in row.split(","))
        major, minor = cap.split(".")
        gpus.append(Gpu(int(index), name, int(float(mem)), (int(major), int(minor))))
    if not gpus:
        raise PlatformError("RuntimeError: Failed to infer device type")
    return gpus


def triton_sparse_available() -> bool:
    return importlib.util.find_spec(TRITON_SPARSE_MODULE) is not None


def _reasons(backend: str, capability: tuple[int, int], kv_cache_dtype: str) -> list[str]:
    if backend in SPARSE_BACKENDS_SM90:
        return [] if capability >= (9, 0) else ["compute capability not supported"]
    if backend == "TRITON_MLA_SPARSE":
        if not triton_sparse_available():
            return ["ImportError: No module named 'vllm.v1.attention.backends.mla.triton_mla_sparse'"]
        reasons = []
        if capability < (8, 0):
            reasons.append("compute capability not supported")
        if kv_cache_dtype not in ("auto", "float16", "bfloat16"):
            reasons.append("kv_cache_dtype not supported")
        return reasons
    return ["sparse attention not supported"]


def select_backend(capability: tuple[int, int], kv_cache_dtype: str, explicit: str | None) -> tuple[str, str]:
    """(backend, log line) for a sparse MLA model, or PlatformError with vLLM's message."""
    config = (
        f"AttentionSelectorConfig(head_size=576, dtype=torch.bfloat16, kv_cache_dtype={kv_cache_dtype}, "
        "block_size=64, use_mla=True, has_sink=False, use_sparse=True)"
    )
    if explicit:
        reasons = _reasons(explicit, capability, kv_cache_dtype)
        if reasons:
            reason = f"[{reasons[0]}]" if reasons[0].startswith("ImportError") else str(reasons)
            raise PlatformError(
                f"ValueError: Selected backend AttentionBackendEnum.{explicit} is not valid for "
                f"this configuration. Reason: {reason}"
            )
        return explicit, f"Using {explicit} backend."
    candidates = [*SPARSE_BACKENDS_SM90]
    if triton_sparse_available():
        candidates.append("TRITON_MLA_SPARSE")
    valid = [b for b in candidates if not _reasons(b, capability, kv_cache_dtype)]
    if not valid:
        reasons = ", ".join(f"{b}: [{', '.join(_reasons(b, capability, kv_cache_dtype))}]" for b in candidates)
        raise PlatformError(
            f"ValueError: No valid attention backend found for cuda with {config}. Reasons: {{{reasons}}}."
        )
    return valid[0], f"Using {valid[0]} attention backend out of potential backends: [{', '.join(valid)}]."
