"""The GPUs the double is given, and the attention backend vLLM 0.26.0 picks on them, DERIVED from the double's
stand-ins of vLLM's modules (so a patched package behaves as patched):

* candidates: the sparse backends among `vllm.platforms.cuda._get_backend_priorities(True, capability)`, in
  order (v0.26.0 on 8.x/9.x: FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE; the sm80 patch set appends TRITON_MLA_SPARSE);
* each candidate's reasons: its class (`AttentionBackendEnum.X.get_class()`) and `validate_configuration`, an
  import failure being the reason `ImportError: ...`, as in `CudaPlatformBase.get_valid_backends`;
* an explicit backend (`--attention-backend X` or `"backend"` in `--attention-config`) is `AttentionBackendEnum[X]`,
  whose unknown names fail with the enum's own message (`Unknown attention backend: 'X'. Valid options are: ...`).

GPUs come from the `nvidia-smi` that the (stand-in) NVIDIA container hook puts into the container, as the real
toolkit does; no GPU visible means vLLM cannot infer a device. VLLM_ATTENTION_BACKEND is ignored by 0.26.0.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

HEAD_SIZE = 576  # MLA: kv_lora_rank 512 + qk_rope_head_dim 64
BLOCK_SIZE = 64


@dataclass
class Gpu:
    index: int
    name: str
    memory_mib: int
    capability: tuple[int, int]


class PlatformError(Exception):
    """A startup failure, with the exception line vLLM prints."""


@functools.cache
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


def resolve_backend(name: str | None) -> Any:
    """`--attention-backend NAME` as vLLM's AttentionConfig validator reads it: None for automatic selection,
    else the enum member; PlatformError with the enum's ValueError for a name the package does not have."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    if name is None or name.lower() == "auto":
        return None
    try:
        return AttentionBackendEnum[name.upper()]
    except ValueError as exc:
        raise PlatformError(f"ValueError: {exc}") from exc


def sparse_candidates(capability: tuple[int, int]) -> list[Any]:
    """The sparse MLA backends the CUDA platform offers on this capability, in its order."""
    from vllm.platforms.cuda import _get_backend_priorities
    from vllm.platforms.interface import DeviceCapability

    return [b for b in _get_backend_priorities(True, DeviceCapability(*capability)) if "SPARSE" in b.name]


def _reasons(backend: Any, capability: tuple[int, int], kv_cache_dtype: str) -> list[str]:
    """vLLM's reasons why `backend` cannot serve this sparse MLA model; [] when it can. Exceptions other than an
    import failure propagate, as they do from vLLM's selection (a module that fails while it is imported)."""
    from vllm.platforms.interface import DeviceCapability

    try:
        backend_class = backend.get_class()
    except (ImportError, OSError) as exc:
        return [f"{type(exc).__name__}: {exc}"]
    return backend_class.validate_configuration(
        head_size=HEAD_SIZE,
        dtype="bfloat16",
        kv_cache_dtype=kv_cache_dtype,
        block_size=BLOCK_SIZE,
        use_mla=True,
        has_sink=False,
        use_sparse=True,
        device_capability=DeviceCapability(*capability),
    )


def select_backend(capability: tuple[int, int], kv_cache_dtype: str, explicit: Any = None) -> tuple[str, str]:
    """(backend name, log line) for a sparse MLA model, or PlatformError with vLLM's message. `explicit` is an
    AttentionBackendEnum member (resolve_backend) or None."""
    config = (
        f"AttentionSelectorConfig(head_size={HEAD_SIZE}, dtype=torch.bfloat16, kv_cache_dtype={kv_cache_dtype}, "
        f"block_size={BLOCK_SIZE}, use_mla=True, has_sink=False, use_sparse=True)"
    )
    if explicit is not None:
        reasons = _reasons(explicit, capability, kv_cache_dtype)
        if reasons:
            reason = f"[{reasons[0]}]" if reasons[0].startswith(("ImportError", "OSError")) else str(reasons)
            raise PlatformError(
                f"ValueError: Selected backend {explicit} is not valid for this configuration. Reason: {reason}"
            )
        return explicit.name, f"Using {explicit.name} backend."
    candidates = sparse_candidates(capability)
    reasons = {b: _reasons(b, capability, kv_cache_dtype) for b in candidates}
    valid = [b.name for b in candidates if not reasons[b]]
    if not valid:
        text = ", ".join(f"{b.name}: [{', '.join(r)}]" for b, r in reasons.items())
        raise PlatformError(
            f"ValueError: No valid attention backend found for cuda with {config}. Reasons: {{{text}}}."
        )
    return valid[0], f"Using {valid[0]} attention backend out of potential backends: [{', '.join(valid)}]."
