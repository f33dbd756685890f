"""MLA attention backends of the test double (stand-ins of vllm/v1/attention/backends/mla/). v0.26.0's sparse
backends for sm90+ and the XPU one are here; the sm80 sparse backend (TRITON_MLA_SPARSE, vllm-project/vllm PR
#38476 / #47629) exists only once the sm80 patch set (tests/doubles/vllm/patches/sm80/) has added its module."""

from vllm.v1.attention.backend import AttentionBackend


class SparseMLABackendStandIn(AttentionBackend):
    """The double's common part of the sm90+ sparse MLA backends, which vLLM spells out in each: MLA, sparse, head
    size 576 (the stand-ins below differ only in name, dtypes and compute capability)."""

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return [576]

    @classmethod
    def is_mla(cls) -> bool:
        return True

    @classmethod
    def is_sparse(cls) -> bool:
        return True
