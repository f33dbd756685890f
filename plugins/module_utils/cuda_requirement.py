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

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, PENDING, WARN, check

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


def image_cuda_driver_check(image: Mapping[str, Any] | None, driver: Any) -> dict[str, Any]:
    """Rule ``image_cuda_driver``: the running driver against the serving image's NVIDIA_REQUIRE_CUDA
    (docs/field.md#cuda-version-of-the-image); the container toolkit refuses `docker run` below it, after the old
    server was stopped. ``image``: {inspected, name, ref, require_cuda}; the serve phase's launch rules and the
    preflight (when the image is already on the host) judge with it."""
    name, fact = "image_cuda_driver", "gpu_facts.driver_version"
    if image is None or not image.get("inspected"):
        what = (image or {}).get("name") or (image or {}).get("ref") or "the serving image"
        return check(name, PENDING, "image NVIDIA_REQUIRE_CUDA", None, "read", f"{what} is not on the host yet")
    label = image.get("name") or image.get("ref")
    require = image.get("require_cuda")
    cuda = parse_require_cuda(require)
    if require is None or cuda is None:
        detail = (
            f"{label} declares no NVIDIA_REQUIRE_CUDA"
            if require is None
            else f"the NVIDIA_REQUIRE_CUDA of {label} has no cuda>= clause ({require[:80]!r})"
        )
        return check(name, PASS, fact, driver, "no CUDA requirement", detail + ": the toolkit checks no CUDA release")
    clause = f"cuda>={cuda[0]}.{cuda[1]}"
    floor = min_driver_for_cuda(cuda)
    expected = f">= {floor['exact']}" if floor["exact"] else f">= {floor['at_least'] or '?'} (CUDA {clause[6:]})"
    need = floor["exact"] or floor["at_least"] or floor["enough"]
    if not driver:
        return check(
            name,
            PENDING,
            fact,
            None,
            expected,
            f"{label} requires {clause}; no driver answers yet (the host phase installs bom.nvidia_driver)",
        )
    have = version_tuple(driver)
    if floor["at_least"] and have < version_tuple(floor["at_least"]):
        newest = newest_cuda_for_driver(driver)
        other = (
            "; or serve the CUDA 12.9 image (the -cu129 tag of vllm/vllm-openai, >= 575.51.03) as bom.vllm_image.base"
            if newest == (12, 9)
            else f"; or serve an image built on CUDA {newest[0]}.{newest[1]}"
            if newest
            else ""
        )
        return check(
            name,
            FAIL,
            fact,
            driver,
            expected,
            f"{label} requires {clause} (NVIDIA_REQUIRE_CUDA): CUDA {clause[6:]} needs driver {floor['at_least']} or "
            f"newer, the host runs {driver}; docker run would fail with `nvidia-container-cli: requirement error: "
            f"unsatisfied condition: {clause}` after the running server was stopped",
            f"set bom.nvidia_driver.version to {floor['at_least']} or newer (bom.nvidia_driver.branch "
            f"{floor['at_least'].split('.')[0]} or later) and run the host phase (--tags host){other}",
        )
    if floor["exact"] or (floor["enough"] and have >= version_tuple(floor["enough"])):
        return check(name, PASS, fact, driver, expected, f"{label} requires {clause}; driver {driver} >= {need}")
    return check(
        name,
        WARN,
        fact,
        driver,
        expected,
        f"{label} requires {clause}, which the driver table does not list: driver {driver} is at least the floor of "
        "the older CUDA releases, but may be too old for this one",
        f"add CUDA {clause[6:]} with its minimum driver (CUDA Toolkit release notes) to CUDA_MIN_DRIVER in "
        "plugins/module_utils/cuda_requirement.py",
    )
