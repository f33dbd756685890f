"""Sparse attention indexer of the test double (unpatched v0.26.0 behaviour: DeepGEMM only)."""

PATCHED = False


def indexer_log_line() -> str | None:
    """The line the indexer logs when it starts; the unpatched indexer has no fallback to announce."""
    return None
