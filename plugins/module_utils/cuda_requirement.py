"""The driver an image's CUDA needs: its `NVIDIA_REQUIRE_CUDA` read, its `cuda>=X.Y` clause mapped to the lowest
Linux driver of that CUDA release (docs/field.md#cuda-version-of-the-image).

The NVIDIA container toolkit checks `NVIDIA_REQUIRE_CUDA` at `docker run` against the host's driver and refuses the
container with `nvidia-container-cli: requirement error: unsatisfied condition: cuda>=13.0` when it is not met
(*Specialized Configurations with Docker*, the toolkit's documentation). The serve phase reads the variable from
the image's `Config.Env` and judges it before anything restarts (rule `image_cuda_driver` in
plugins/filter/vllm_launch_rules.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# CUDA release (major, minor) -> the lowest Linux x86_64 driver of its GA release: CUDA Toolkit release notes, table
# "CUDA Toolkit and Corresponding Driver Versions" (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html).
# Add a release here, with the table's value, before serving an image built on it.
CUDA_MIN_DRIVER: dict[tuple[int, int], str] = {
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}

_CUDA_CLAUSE = re.compile(r"(?:^|\s)cuda>=(\d+)\.(\d+)(?:\.\d+)*(?=\s|,|$)")


def version_tuple(text: Any) -> tuple[int, ...]:
    """A driver version as numbers ("580.65.06" -> (580, 65, 6)); () when there are none."""
    return tuple(int(p) for p in re.findall(r"\d+", str(text or "")))


def env_value(env: Iterable[str] | Mapping[str, Any] | None, name: str) -> str | None:
    """A variable of a `Config.Env` list ("NAME=value" strings, as `docker inspect` gives it) or of a mapping;
    None when it is not set."""
    if env is None:
        return None
    if isinstance(env, Mapping):
        value = env.get(name)
        return None if value is None else str(value)
    found = None
    for item in env:
        key, sep, value = str(item).partition("=")
        if sep and key == name:
            found = value  # the last one wins, as in a process environment
    return found


def parse_require_cuda(text: str | None) -> tuple[int, int] | None:
    """The CUDA release of a requirement's `cuda>=X.Y` clause ("cuda>=13.0 brand=..." -> (13, 0)); None when the
    text has no such clause. The `brand=...,driver>=N,driver<M` clauses are alternatives for older datacenter driver
    branches (forward compatibility); they are not read here."""
    match = _CUDA_CLAUSE.search(text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def min_driver_for_cuda(cuda: tuple[int, int], table: Mapping[tuple[int, int], str] | None = None) -> dict[str, Any]:
    """The driver floor of a CUDA release from the table: ``{"exact": "580.65.06"}`` when the release is in it;
    otherwise the bounds the neighbouring releases give (drivers only rise with CUDA): ``at_least`` (the floor of the
    newest older release: any lower driver certainly fails) and ``enough`` (the floor of the oldest newer release:
    that driver certainly works), each None when there is no such neighbour."""
    table = CUDA_MIN_DRIVER if table is None else table
    if cuda in table:
        return {"exact": table[cuda], "at_least": table[cuda], "enough": table[cuda]}
    older = [v for v in table if v < cuda]
    newer = [v for v in table if v > cuda]
    return {
        "exact": None,
        "at_least": table[max(older)] if older else None,
        "enough": table[min(newer)] if newer else None,
    }


def newest_cuda_for_driver(driver: Any, table: Mapping[tuple[int, int], str] | None = None) -> tuple[int, int] | None:
    """The newest CUDA release of the table that this driver runs (None when it runs none of them)."""
    table = CUDA_MIN_DRIVER if table is None else table
    have = version_tuple(driver)
    fits = [cuda for cuda, floor in table.items() if have >= version_tuple(floor)]
    return max(fits) if fits else None
