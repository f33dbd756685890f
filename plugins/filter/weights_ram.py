"""Filter: whether the page cache can hold the model weights (the preflight's ram check and the weights role's
prewarm decide with the same function).

The logic lives in plugins/module_utils/weights_ram.py (pure Python, unit-tested), imported through the collection.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.weights_ram import ram_fit


def weights_ram_fit(
    ram_gib: Any, weights_gb: Any, headroom_gb: Any, cold_gb_per_s: Any, keep_resident: Any = False
) -> dict[str, Any]:
    """host_facts.mem_total_gib | weights_ram_fit(size_gb, headroom_gb, cold_gb_per_s, keep_resident): status
    pass/warn/fail, prewarm (bool), the cold load a restart costs, detail, fix and note."""
    return ram_fit(ram_gib, weights_gb, headroom_gb, cold_gb_per_s, keep_resident)


class FilterModule:
    def filters(self) -> dict:
        return {"weights_ram_fit": weights_ram_fit}
