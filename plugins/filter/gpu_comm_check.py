"""Filters: read and judge the GPU all-reduce check (role gpu_comm_check).

The logic lives in plugins/module_utils/allreduce.py (pure Python, unit-tested), imported through the collection.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils import allreduce


def allreduce_parse(text: str) -> dict[str, Any]:
    """The check's stdout as data (RESULT JSON, busbw per size, max busbw)."""
    return allreduce.parse_allreduce_output(text)


def gpu_comm_check_evaluate(
    run: dict[str, Any],
    min_busbw_gbps: float,
    timeout_s: int | float,
    gpus: int,
    image: str = "",
    extra_env: dict[str, Any] | None = None,
    pcie_acs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A registered run of the check judged: status pass/fail, reason, message and figures."""
    return allreduce.evaluate(run, min_busbw_gbps, timeout_s, gpus, image=image, extra_env=extra_env, pcie_acs=pcie_acs)


class FilterModule:
    def filters(self) -> dict:
        return {"allreduce_parse": allreduce_parse, "gpu_comm_check_evaluate": gpu_comm_check_evaluate}
