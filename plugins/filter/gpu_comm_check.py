"""Filters: read and judge the GPU all-reduce check (role gpu_comm_check).

The logic lives in plugins/module_utils/allreduce.py (pure Python, unit-tested). Controller-side plugins
cannot import the project's module_utils through `ansible.module_utils`, so this file loads it by path.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_NAME = "a800_vllm_module_utils_allreduce"


def _allreduce() -> ModuleType:
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    path = Path(__file__).resolve().parent.parent / "module_utils" / "allreduce.py"
    spec = importlib.util.spec_from_file_location(_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    spec.loader.exec_module(module)
    return module


def allreduce_parse(text: str) -> dict[str, Any]:
    """The check's stdout as data (RESULT JSON, busbw per size, max busbw)."""
    return _allreduce().parse_allreduce_output(text)


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
    return _allreduce().evaluate(
        run, min_busbw_gbps, timeout_s, gpus, image=image, extra_env=extra_env, pcie_acs=pcie_acs
    )


class FilterModule:
    def filters(self) -> dict:
        return {"allreduce_parse": allreduce_parse, "gpu_comm_check_evaluate": gpu_comm_check_evaluate}
