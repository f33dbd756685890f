"""Parse nvidia-smi output into plain data.

Pure Python (no Ansible import), so the same code serves the nvidia_gpu_facts module on the hosts and the
unit tests on the control node. Robust to what real drivers print: units in headers and values, `[N/A]`,
`[Not Supported]`, odd spacing, ANSI escapes in `topo -m`, drivers that do not know `compute_cap` (or a state field).

The preflight asks for PREFLIGHT_FIELDS in one `--query-gpu` call: the identity, memory, driver and link fields
(QUERY_FIELDS) and the GPU state (STATE_FIELDS: MIG mode, ECC mode, pages pending retirement, pending row remappings,
row remapping failures; docs/field.md#gpu-state-mig-ecc-retired-pages-and-row-remapping). Driver 580 prints the
state as words, with and without `nounits` (tests/fixtures/nvidia-smi/h200-x1, a real H200):
`Disabled, Disabled, Enabled, Enabled, [N/A], No, No`. Modes stay the words `Enabled`/`Disabled`, the pending and
failure flags become booleans (`Yes`/`No`), `[N/A]`/`[Not Supported]` become None (the A100/A800 and H100/H200 print
`[N/A]` for `retired_pages.pending`: they remap rows instead of retiring pages), and a word the parser does not know
is kept as it was printed, so that a check can show it instead of guessing.
"""

from __future__ import annotations

import re
from typing import Any

# The fields the preflight reads, in the order asked for.
QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "compute_cap",
    "driver_version",
    "persistence_mode",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
)
# The GPU state the preflight judges (plugins/filter/preflight.py), in the order asked for after QUERY_FIELDS. Field
# names of the driver's own `nvidia-smi --help-query-gpu` (tests/fixtures/nvidia-smi/h200-x2/help-query-gpu.txt,
# driver 580.159.04).
STATE_FIELDS: tuple[str, ...] = (
    "mig.mode.current",
    "mig.mode.pending",
    "ecc.mode.current",
    "ecc.mode.pending",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
# What nvidia_gpu_facts asks for; a driver that does not know one of OPTIONAL_FIELDS is asked again without it.
PREFLIGHT_FIELDS: tuple[str, ...] = QUERY_FIELDS + STATE_FIELDS
OPTIONAL_FIELDS: frozenset[str] = frozenset({"compute_cap", *STATE_FIELDS})

# Values that nvidia-smi prints for "no value".
_MISSING = {"[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]", ""}
_INT_FIELDS = {
    "index",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
}
_MIB_FIELDS = {"memory.total", "memory.used", "memory.free"}
_MODE_FIELDS = {"mig.mode.current", "mig.mode.pending", "ecc.mode.current", "ecc.mode.pending"}
_FLAG_FIELDS = {"retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure"}
_MODES = {"enabled": "Enabled", "disabled": "Disabled"}
_FLAGS = {"yes": True, "no": False, "true": True, "false": False, "1": True, "0": False}
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")
_HEADER_CELL = re.compile(r"^[a-z][a-z0-9_.]*( \[[^\]]+\])?$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')

# Compute capability by product name, for drivers older than the `compute_cap` query field (R510).
_CC_BY_NAME: tuple[tuple[str, str], ...] = (
    (r"\bB(100|200)\b|GB200", "10.0"),
    (r"\bH(100|200|800|20)\b|GH200", "9.0"),
    (r"\bL(4|40S?)\b|RTX (4090|6000 Ada)|\bAda\b", "8.9"),
    (r"\bA(10G?|2|16|40|6000)\b|RTX (30[5-9]0|A[0-9]+)", "8.6"),
    (r"\bA(100|800|30)\b", "8.0"),
    (r"\bV100\b|TITAN V", "7.0"),
    (r"\bT4\b|RTX 20[0-9]0|Quadro RTX", "7.5"),
)


class NvidiaSmiError(ValueError):
    """nvidia-smi output that cannot be understood; the message says what was expected."""


def invalid_field(text: str) -> str | None:
    """The field named by nvidia-smi's 'is not a valid field to query' error, if that is the error."""
    match = _INVALID_FIELD.search(text)
    return match.group(1) if match else None


def _missing(value: str) -> bool:
    return value.strip().lower() in _MISSING


def _number(value: str) -> float:
    match = re.match(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)", value)
    if not match:
        raise NvidiaSmiError(f"expected a number, got {value!r}")
    return float(match.group(1))


def _convert(field: str, raw: str) -> Any:
    value = raw.strip()
    if _missing(value):
        return None
    if field in _MIB_FIELDS:
        number = _number(value)
        if value.upper().endswith("GIB"):
            number *= 1024
        return int(number)
    if field in _INT_FIELDS:
        return int(_number(value))
    if field == "persistence_mode":
        return value.lower() == "enabled"
    if field in _MODE_FIELDS:
        return _MODES.get(value.lower(), value)
    if field in _FLAG_FIELDS:
        return _FLAGS.get(value.lower(), value)
    if field == "compute_cap":
        return f"{_number(value):.1f}"
    if field == "pci.bus_id":
        return value.upper()
    return value


def parse_query_csv(text: str, fields: tuple[str, ...] | list[str] | None = None) -> list[dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` as dicts keyed by field.

    With a header, the header names the columns (units in brackets are dropped); without one, `fields`
    must give them in order. Missing values become None.
    """
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not lines:
        return []
    bad = invalid_field(text)
    if bad:
        raise NvidiaSmiError(f'nvidia-smi does not know the field "{bad}"')
    first = [cell.strip() for cell in lines[0].split(",")]
    if all(_HEADER_CELL.match(cell) for cell in first):
        columns = [_HEADER_UNIT.sub("", cell) for cell in first]
        lines = lines[1:]
    elif fields is not None:
        columns = list(fields)
    else:
        raise NvidiaSmiError("CSV without a header needs the list of fields")
    # Headers use canonical names (clocks.sm prints as clocks.current.sm): key the rows by the asked names.
    if fields is not None and len(fields) == len(columns):
        columns = list(fields)
    rows = []
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(columns):
            # A GPU name never contains a comma in practice; a mismatch means a garbled line.
            raise NvidiaSmiError(f"expected {len(columns)} comma-separated values, got {len(cells)}: {line!r}")
        rows.append({col: _convert(col, cell) for col, cell in zip(columns, cells, strict=True)})
    return rows


def compute_cap_from_name(name: str) -> str | None:
    """Compute capability of a GPU product name, for drivers without the `compute_cap` field."""
    for pattern, cc in _CC_BY_NAME:
        if re.search(pattern, name):
            return cc
    return None


# Link classes of `nvidia-smi topo -m`, best first.
TOPOLOGY_RANK: tuple[str, ...] = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")


def _link_class(cell: str) -> str | None:
    cell = cell.strip()
    if cell.startswith("NV") and cell[2:].isdigit():
        return "NV"
    return cell if cell in TOPOLOGY_RANK else None


def parse_topology(text: str) -> dict[str, Any]:
    """The GPU-to-GPU matrix of `nvidia-smi topo -m`, and its worst (slowest) link class.

    Returns {"gpus": [...], "links": {"GPU0": {"GPU1": "PIX", ...}}, "worst": "SYS", "classes": [...]}.
    NIC rows and columns are ignored.
    """
    lines = [_ANSI.sub("", line).rstrip("\n") for line in text.splitlines()]
    # The header is the first line naming GPU0 that is not itself a GPU row (it starts with a tab).
    header_idx = next((i for i, line in enumerate(lines) if re.search(r"\bGPU0\b", line) and line[:1].isspace()), None)
    if header_idx is None:
        raise NvidiaSmiError("no GPU header line in topo -m output")
    header = [c.strip() for c in lines[header_idx].split("\t") if c.strip()]
    gpu_cols = [c for c in header if re.fullmatch(r"GPU\d+", c)]
    links: dict[str, dict[str, str]] = {}
    for line in lines[header_idx + 1 :]:
        if not re.match(r"^GPU\d+\t", line):
            if links:
                break
            continue
        cells = line.split("\t")
        row = cells[0].strip()
        links[row] = {}
        for col, cell in zip(gpu_cols, cells[1 : 1 + len(gpu_cols)], strict=False):
            cls = _link_class(cell)
            if col != row and cls:
                links[row][col] = cell.strip()
    classes = sorted({_link_class(v) for row in links.values() for v in row.values()} - {None}, key=TOPOLOGY_RANK.index)
    return {
        "gpus": gpu_cols,
        "links": links,
        "classes": classes,
        "worst": classes[-1] if classes else None,
    }


def parse_fabric_states(text: str) -> list[str]:
    """The `Fabric / State` value of each GPU in `nvidia-smi -q` (e.g. 'Completed', 'N/A')."""
    states = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Fabric":
            for follow in lines[i + 1 : i + 4]:
                key, _, value = follow.partition(":")
                if key.strip() == "State":
                    states.append(value.strip())
                    break
    return states


def nvswitch_present(fabric_states: list[str], nvswitch_devices: int = 0) -> bool:
    """NVSwitch systems report a fabric state (Fabric Manager's job) or expose nvswitch device nodes."""
    return nvswitch_devices > 0 or any(s and s.upper() != "N/A" for s in fabric_states)


def parse_driver_version(text: str) -> str | None:
    """Driver version from `nvidia-smi --version` or `-q`."""
    match = re.search(r"DRIVER version\s*:\s*([0-9.]+)|Driver Version\s*:\s*([0-9.]+)", text, re.IGNORECASE)
    if not match:
        return None
    return match.group(1) or match.group(2)


def version_tuple(version: str) -> tuple[int, ...]:
    """'580.95.05' -> (580, 95, 5) for comparisons."""
    return tuple(int(p) for p in re.findall(r"\d+", version))


def gpu_state(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """The GPU state of STATE_FIELDS as lists of GPU indices, for the preflight's checks.

    fields: the state fields the rows carry (a driver that does not know one was asked without it); mig_enabled:
    MIG on now; mig_pending_enabled: off now, on at the next reset; mig_pending_disabled: on now, already set to go
    off at the next reset; ecc_disabled: ECC off now; ecc_pending_enabled: off now, on at the next reboot;
    ecc_pending_disabled: on now, off at the next reboot; retired_pages_pending, remapped_rows_pending,
    remapped_rows_failure: the flag is Yes; reported: per field, the GPUs that gave a value (not [N/A] /
    [Not Supported]); unknown: values the parser does not know, [{"gpu", "field", "value"}].
    """
    fields = [f for f in STATE_FIELDS if any(f in g for g in gpus)]

    def having(test) -> list[Any]:
        return [g.get("index") for g in gpus if test(g)]

    unknown = []
    for g in gpus:
        for f in fields:
            value = g.get(f)
            known = value is None or (value in _MODES.values() if f in _MODE_FIELDS else isinstance(value, bool))
            if not known:
                unknown.append({"gpu": g.get("index"), "field": f, "value": value})
    return {
        "fields": fields,
        "mig_enabled": having(lambda g: g.get("mig.mode.current") == "Enabled"),
        "mig_pending_enabled": having(
            lambda g: g.get("mig.mode.current") != "Enabled" and g.get("mig.mode.pending") == "Enabled"
        ),
        "mig_pending_disabled": having(
            lambda g: g.get("mig.mode.current") == "Enabled" and g.get("mig.mode.pending") == "Disabled"
        ),
        "ecc_disabled": having(lambda g: g.get("ecc.mode.current") == "Disabled"),
        "ecc_pending_enabled": having(
            lambda g: g.get("ecc.mode.current") == "Disabled" and g.get("ecc.mode.pending") == "Enabled"
        ),
        "ecc_pending_disabled": having(
            lambda g: g.get("ecc.mode.current") != "Disabled" and g.get("ecc.mode.pending") == "Disabled"
        ),
        "retired_pages_pending": having(lambda g: g.get("retired_pages.pending") is True),
        "remapped_rows_pending": having(lambda g: g.get("remapped_rows.pending") is True),
        "remapped_rows_failure": having(lambda g: g.get("remapped_rows.failure") is True),
        "reported": {f: having(lambda g, f=f: g.get(f) is not None) for f in fields},
        "unknown": unknown,
    }


def summarize(
    rows: list[dict[str, Any]], topology: dict[str, Any] | None, fabric_states: list[str], nvswitch_devices: int = 0
) -> dict[str, Any]:
    """The GPU facts the preflight asserts on, from parsed query rows and topology."""
    gpus = []
    cc_source = "nvidia-smi"
    for row in rows:
        gpu = dict(row)
        if not gpu.get("compute_cap"):
            gpu["compute_cap"] = compute_cap_from_name(gpu.get("name") or "")
            cc_source = "product name (driver without compute_cap)"
        gpus.append(gpu)
    names = sorted({g.get("name") for g in gpus if g.get("name")})
    memories = [g["memory.total"] for g in gpus if g.get("memory.total") is not None]
    caps = sorted({g["compute_cap"] for g in gpus if g.get("compute_cap")})
    drivers = sorted({g["driver_version"] for g in gpus if g.get("driver_version")})
    return {
        "count": len(gpus),
        "gpus": gpus,
        "models": names,
        "homogeneous": len(names) <= 1 and len(set(memories)) <= 1,
        "memory_mib_min": min(memories) if memories else None,
        "compute_caps": caps,
        "compute_cap_source": cc_source,
        "driver_version": drivers[0] if len(drivers) == 1 else (drivers or [None])[0],
        "persistence_mode_all": bool(gpus) and all(g.get("persistence_mode") for g in gpus),
        "pcie_degraded": [
            g["index"]
            for g in gpus
            if g.get("pcie.link.width.current")
            and g.get("pcie.link.width.max")
            and g["pcie.link.width.current"] < g["pcie.link.width.max"]
        ],
        "topology": topology or {},
        "nvswitch": nvswitch_present(fabric_states, nvswitch_devices),
        "state": gpu_state(gpus),
    }
