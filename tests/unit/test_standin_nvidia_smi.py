"""The test bed's stand-in nvidia-smi speaks the real tool's formats, as the project's parser reads them.

The stand-in (tests/testbed/standin-nvidia/bin/nvidia-smi) is run as a subprocess with a temporary hardware
config (NVIDIA_STANDIN_CONFIG). Its `-pm` writes under /var/lib/nvidia-standin and is not exercised here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ansible_collections.a800.vllm.plugins.module_utils import nvidia_smi
from ansible_collections.a800.vllm.plugins.module_utils.nvidia_smi import (
    QUERY_FIELDS,
    NvidiaSmiError,
    invalid_field,
    nvswitch_present,
    parse_driver_version,
    parse_fabric_states,
    parse_query_csv,
    parse_topology,
    summarize,
)
from conftest import NVIDIA_SMI_FIXTURES, REAL_H200, STANDIN_NVIDIA_SMI, ansible_adhoc, read_fixture, strip_rc

DRIVER = "580.95.05"  # the stand-in reads its version from a package file absent here: give it in the config
QUERY = "--query-gpu=" + ",".join(QUERY_FIELDS)
FORMATS = ["--format=csv", "--format=csv,noheader", "--format=csv,noheader,nounits"]
USAGE_FIELDS = ("index", "memory.used", "memory.total", "utilization.gpu", "temperature.gpu", "power.draw", "clocks.sm")

H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "architecture": "Hopper",
    "memory_mib": 81559,
    "compute_cap": "9.0",
    "pcie_gen": 5,
}


@pytest.fixture
def smi(tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    """smi(config, *args): run the stand-in with the hardware config `config` (merged over its defaults)."""
    counter = iter(range(1000))

    def run(config: dict | None, *args: str) -> subprocess.CompletedProcess:
        path = tmp_path / f"gpus-{next(counter)}.json"
        path.write_text(json.dumps(dict({"driver": DRIVER}, **(config or {}))))
        env = dict(os.environ, NVIDIA_STANDIN_CONFIG=str(path))
        return subprocess.run(
            [sys.executable, str(STANDIN_NVIDIA_SMI), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    return run


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def query_rows(smi, config: dict | None, fmt: str) -> list[dict]:
    return parse_query_csv(ok(smi(config, QUERY, fmt)), QUERY_FIELDS)


def shape(cell: str) -> str:
    """A cell with its numbers blanked: '81920 MiB' -> 'N MiB', '9.0' -> 'N'."""
    return re.sub(r"[0-9]+(\.[0-9]+)?", "N", cell)


# --- --query-gpu -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_default_is_eight_a800(smi, fmt):
    rows = query_rows(smi, None, fmt)
    assert [r["index"] for r in rows] == list(range(8))
    assert len({r["uuid"] for r in rows}) == 8
    assert len({r["pci.bus_id"] for r in rows}) == 8
    for row in rows:
        assert row["name"] == "NVIDIA A800 80GB PCIe"
        assert row["memory.total"] == 81920
        assert row["compute_cap"] == "8.0"
        assert row["driver_version"] == DRIVER
        assert isinstance(row["persistence_mode"], bool)
        assert (row["pcie.link.gen.current"], row["pcie.link.gen.max"]) == (4, 4)
        assert (row["pcie.link.width.current"], row["pcie.link.width.max"]) == (16, 16)


def test_formats_agree(smi):
    assert query_rows(smi, None, FORMATS[0]) == query_rows(smi, None, FORMATS[1]) == query_rows(smi, None, FORMATS[2])


@pytest.mark.parametrize("fmt", FORMATS)
def test_four_gpus(smi, fmt):
    rows = query_rows(smi, {"count": 4}, fmt)
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    assert summarize(rows, None, [])["count"] == 4


@pytest.mark.parametrize("fmt", FORMATS)
def test_h100(smi, fmt):
    facts = summarize(query_rows(smi, H100, fmt), None, [])
    assert facts["models"] == ["NVIDIA H100 80GB HBM3"]
    assert facts["compute_caps"] == ["9.0"]
    assert facts["compute_cap_source"] == "nvidia-smi"
    assert facts["memory_mib_min"] == 81559
    assert facts["gpus"][0]["pcie.link.gen.max"] == 5


@pytest.mark.parametrize("fmt", FORMATS)
def test_40gb_cards(smi, fmt):
    facts = summarize(query_rows(smi, {"name": "NVIDIA A800 40GB Active", "memory_mib": 40960}, fmt), None, [])
    assert facts["memory_mib_min"] == 40960
    assert facts["models"] == ["NVIDIA A800 40GB Active"]
    assert facts["homogeneous"] is True


def test_header_is_the_real_header(smi):
    real_header = read_fixture(REAL_H200 / "query.csv").splitlines()[0]
    out = ok(smi(None, QUERY, "--format=csv")).splitlines()
    assert out[0] == real_header
    assert "memory.total [MiB]" in out[0]


def test_usage_header_is_the_real_header(smi):
    # clocks.sm prints as clocks.current.sm; units in brackets for %, W, MHz but not for the temperature
    real_header = read_fixture(REAL_H200 / "query-usage.csv").splitlines()[0]
    out = ok(smi(None, "--query-gpu=" + ",".join(USAGE_FIELDS), "--format=csv")).splitlines()
    assert out[0] == real_header
    real_row = read_fixture(REAL_H200 / "query-usage.csv").splitlines()[1]
    assert [shape(c) for c in out[1].split(", ")] == [shape(c) for c in real_row.split(", ")]


@pytest.mark.parametrize(
    ("fmt", "real_file"),
    [(FORMATS[0], "query.csv"), (FORMATS[1], "query-noheader.csv"), (FORMATS[2], "query-nounits.csv")],
)
def test_values_look_like_the_real_ones(smi, fmt, real_file):
    real_lines = strip_rc(read_fixture(REAL_H200 / real_file)).splitlines()
    lines = ok(smi(None, QUERY, fmt)).splitlines()
    assert len(lines) == 8 + (fmt == FORMATS[0])
    real_row, row = real_lines[-1].split(", "), lines[-1].split(", ")
    assert len(row) == len(real_row) == len(QUERY_FIELDS)  # ", " separates every cell
    for field, real_cell, cell in zip(QUERY_FIELDS, real_row, row, strict=True):
        if field in ("name", "driver_version", "persistence_mode"):
            continue
        if field == "uuid":
            assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", cell)
        elif field == "pci.bus_id":
            assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9A-F]", cell)
        else:
            assert shape(cell) == shape(real_cell), field
    memory = row[QUERY_FIELDS.index("memory.total")]
    assert memory == ("81920" if "nounits" in fmt else "81920 MiB")


def test_nounits_header_has_no_brackets(smi):
    header = ok(smi(None, QUERY, "--format=csv,nounits")).splitlines()[0]
    assert "[" not in header and "MiB" not in header
    assert header.split(", ") == list(QUERY_FIELDS)
    rows = parse_query_csv(ok(smi(None, QUERY, "--format=csv,nounits")))
    assert rows[0]["memory.total"] == 81920


def test_unknown_field_is_the_real_error(smi):
    result = smi(None, "--query-gpu=index,no_such_field", "--format=csv")
    assert result.returncode == 2
    real = read_fixture(REAL_H200 / "query-bad-field.txt")
    assert real.rstrip().endswith("# rc=2")
    assert result.stdout + result.stderr == strip_rc(real)
    assert invalid_field(result.stdout + result.stderr) == "no_such_field"


def test_old_driver_without_compute_cap(smi, synthetic):
    config = {"unsupported_fields": ["compute_cap"], "driver": "470.256.02"}
    result = smi(config, QUERY, "--format=csv,noheader,nounits")
    assert result.returncode == 2
    text = result.stdout + result.stderr
    assert invalid_field(text) == "compute_cap"
    assert text == strip_rc(synthetic("old-driver-query-bad-field.txt"))
    with pytest.raises(NvidiaSmiError):
        parse_query_csv(text, QUERY_FIELDS)
    # what nvidia_gpu_facts does next: ask again without compute_cap, derive it from the product name
    fields = [f for f in QUERY_FIELDS if f != "compute_cap"]
    retry = ok(smi(config, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"))
    facts = summarize(parse_query_csv(retry, fields), None, [])
    assert facts["compute_caps"] == ["8.0"]
    assert "product name" in facts["compute_cap_source"]
    assert facts["driver_version"] == "470.256.02"


@pytest.mark.parametrize("marker", ["[N/A]", "[Not Supported]"])
def test_na_fields(smi, marker):
    config = {"na_fields": {"memory.total": marker, "pcie.link.width.current": marker}}
    out = ok(smi(config, QUERY, "--format=csv"))
    assert f", {marker}, " in out.splitlines()[1]
    rows = parse_query_csv(out, QUERY_FIELDS)
    assert all(r["memory.total"] is None and r["pcie.link.width.current"] is None for r in rows)
    assert all(r["pcie.link.width.max"] == 16 for r in rows)


def test_driver_failure(smi):
    message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    result = smi({"fail": message}, QUERY, "--format=csv,noheader,nounits")
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert invalid_field(result.stdout + result.stderr) is None


def test_bad_format_is_refused(smi):
    result = smi(None, QUERY, "--format=json")
    assert result.returncode == 2
    assert '"--format" must be specified with "csv"' in result.stdout


# --- topo -m, -q, --version, -L --------------------------------------------------------------------------


def test_topology_default_is_dual_socket_pcie(smi):
    out = ok(smi(None, "topo", "-m"))
    assert "\x1b[4m" in out  # ANSI underline on the header, as the real tool prints it
    topo = parse_topology(out)
    assert topo["gpus"] == [f"GPU{i}" for i in range(8)]
    assert topo["worst"] == "SYS"
    assert topo["classes"] == ["PIX", "NODE", "SYS"]
    assert topo["links"]["GPU0"]["GPU1"] == "PIX"
    assert topo["links"]["GPU0"]["GPU7"] == "SYS"


def test_topology_nvswitch_and_override(smi):
    assert parse_topology(ok(smi({"nvswitch": True}, "topo", "-m")))["worst"] == "NV"
    assert parse_topology(ok(smi({"topology": "PXB"}, "topo", "-m")))["classes"] == ["PXB"]
    four = parse_topology(ok(smi({"count": 4}, "topo", "-m")))
    assert four["gpus"] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert four["worst"] == "SYS"


def test_topology_follows_the_real_layout(smi):
    # the same header cells after the GPUs as the real capture
    real = read_fixture(REAL_H200 / "topo.txt").splitlines()[0]
    mine = ok(smi({"count": 2, "nvswitch": True}, "topo", "-m")).splitlines()[0]
    assert mine.split("\t")[3:] == real.split("\t")[3:]
    assert parse_topology(ok(smi({"count": 2, "nvswitch": True}, "topo", "-m")))["links"] == {
        "GPU0": {"GPU1": "NV12"},
        "GPU1": {"GPU0": "NV12"},
    }


def test_q_fabric_na_without_nvswitch(smi):
    out = ok(smi(None, "-q"))
    states = parse_fabric_states(out)
    assert states == ["N/A"] * 8
    assert nvswitch_present(states) is False
    assert parse_driver_version(out) == DRIVER


def test_q_fabric_with_nvswitch(smi):
    states = parse_fabric_states(ok(smi({"nvswitch": True, "count": 4}, "-q")))
    assert len(states) == 4
    assert all(s in ("Completed", "Not Started") for s in states)
    assert nvswitch_present(states) is True


def test_q_key_column_matches_the_real_one(smi):
    def column(text: str, key: str) -> int:
        line = next(line for line in text.splitlines() if line.strip().startswith(key))
        return line.index(":")

    real = read_fixture(REAL_H200 / "q.txt")
    mine = ok(smi(None, "-q"))
    for key in ("Driver Version", "Product Name", "Persistence Mode"):
        assert column(mine, key) == column(real, key), key


def test_version(smi):
    out = ok(smi(None, "--version"))
    assert parse_driver_version(out) == DRIVER
    real = strip_rc(read_fixture(REAL_H200 / "version.txt"))
    assert [line.split(":")[0] for line in out.splitlines()] == [line.split(":")[0] for line in real.splitlines()]


def test_gpu_list_matches_query(smi):
    lines = ok(smi({"count": 3}, "-L")).splitlines()
    rows = query_rows(smi, {"count": 3}, FORMATS[2])
    assert lines == [f"GPU {r['index']}: {r['name']} (UUID: {r['uuid']})" for r in rows]


# --- GPU state: MIG, ECC, page retirement, row remapping (issue 31, item 13) ------------------------------------
# The new names are read from the parser's module inside each test, so that each test fails on its own without them.

REAL_H200_X1 = NVIDIA_SMI_FIXTURES / "h200-x1"  # recorded on a real H200 with the preflight's whole query


def state_query() -> str:
    return "--query-gpu=" + ",".join(nvidia_smi.PREFLIGHT_FIELDS)


def state_of(smi, config: dict | None) -> dict:
    rows = parse_query_csv(ok(smi(config, state_query(), "--format=csv,noheader,nounits")), nvidia_smi.PREFLIGHT_FIELDS)
    return summarize(rows, None, [])["state"]


def test_state_header_is_the_real_header(smi):
    real = read_fixture(REAL_H200_X1 / "query-state.csv").splitlines()[0]
    assert ok(smi(None, state_query(), "--format=csv")).splitlines()[0] == real


@pytest.mark.parametrize(
    ("fmt", "real_file"),
    [
        ("--format=csv", "query-state.csv"),
        ("--format=csv,noheader", "query-state-noheader.csv"),
        ("--format=csv,noheader,nounits", "query-state-nounits.csv"),
    ],
)
def test_default_state_prints_what_the_real_h200_prints(smi, fmt, real_file):
    # MIG disabled, ECC enabled, nothing pending: `Disabled, Disabled, Enabled, Enabled, [N/A], No, No`
    real_row = strip_rc(read_fixture(REAL_H200_X1 / real_file)).splitlines()[-1].split(", ")
    row = ok(smi(None, state_query(), fmt)).splitlines()[-1].split(", ")
    n = len(nvidia_smi.STATE_FIELDS)
    assert row[-n:] == real_row[-n:] == ["Disabled", "Disabled", "Enabled", "Enabled", "[N/A]", "No", "No"]
    assert len(row) == len(real_row) == len(nvidia_smi.PREFLIGHT_FIELDS)


def test_default_state_is_healthy(smi):
    state = state_of(smi, None)
    assert state["fields"] == list(nvidia_smi.STATE_FIELDS)
    assert state["mig_enabled"] == state["ecc_disabled"] == state["remapped_rows_pending"] == []
    assert state["remapped_rows_failure"] == state["retired_pages_pending"] == []
    assert state["reported"]["mig.mode.current"] == list(range(8))
    assert state["reported"]["retired_pages.pending"] == []  # [N/A] on the A800, as on the real H200


def test_state_for_every_gpu_from_the_config(smi):
    state = state_of(smi, {"count": 2, "mig_mode": "Enabled", "ecc_mode": "Disabled", "remapped_rows_pending": "Yes"})
    assert state["mig_enabled"] == state["ecc_disabled"] == state["remapped_rows_pending"] == [0, 1]
    assert state["mig_pending_disabled"] == state["ecc_pending_enabled"] == []  # the pending modes follow


def test_pending_modes_and_one_gpu_from_the_config(smi):
    config = {
        "ecc_mode": "Disabled",
        "ecc_mode_pending": "Enabled",
        "per_gpu": {
            "3": {"mig.mode.current": "Enabled", "mig.mode.pending": "Disabled"},
            "5": {"remapped_rows.pending": "Yes", "remapped_rows.failure": "Yes"},
            "6": {"retired_pages.pending": "Yes"},
            "7": {"remapped_rows.pending": "[Not Supported]"},
        },
    }
    state = state_of(smi, config)
    assert state["ecc_disabled"] == state["ecc_pending_enabled"] == list(range(8))
    assert state["mig_enabled"] == state["mig_pending_disabled"] == [3]
    assert state["remapped_rows_pending"] == state["remapped_rows_failure"] == [5]
    assert state["retired_pages_pending"] == [6]
    assert 7 not in state["reported"]["remapped_rows.pending"]


def test_driver_without_a_state_field_answers_as_the_real_one(smi):
    result = smi({"unsupported_fields": ["remapped_rows.failure"]}, state_query(), "--format=csv")
    assert result.returncode == 2
    assert invalid_field(result.stdout + result.stderr) == "remapped_rows.failure"
    real = strip_rc(read_fixture(REAL_H200_X1 / "query-bad-state-field.txt"))
    assert result.stdout == real.replace("remapped_rows.no_such", "remapped_rows.failure")


def test_q_state_sections_follow_the_real_layout(smi):
    def section(text: str, title: str) -> list[tuple[str, int]]:
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.strip() == title)
        out = []
        for line in lines[start + 1 :]:
            if len(line) - len(line.lstrip()) <= 4 or ":" not in line:  # the next section, or a sub-heading
                break
            out.append((line.split(":")[0].strip(), line.index(":")))
        return out

    real, mine = read_fixture(REAL_H200 / "q.txt"), ok(smi(None, "-q"))
    assert section(mine, "MIG Mode") == section(real, "MIG Mode")
    assert section(mine, "ECC Mode") == section(real, "ECC Mode")
    assert section(mine, "Retired Pages") == section(real, "Retired Pages")
    # Remapped Rows: the real one goes on with the bank histogram (a sub-heading), which the stand-in leaves out
    assert section(mine, "Remapped Rows") == section(real, "Remapped Rows")
    failing = ok(smi({"per_gpu": {"0": {"remapped_rows.pending": "Yes"}}}, "-q"))
    assert "        Pending                                        : Yes" in failing
    assert "        Pending Page Blacklist                         : N/A" in mine  # [N/A] without brackets in -q


def test_module_reads_the_state_and_asks_again_without_an_unknown_field(tmp_path, monkeypatch):
    """nvidia_gpu_facts against the stand-in: the whole query, and a driver that does not know one state field."""
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip(f"ansible not installed beside {sys.executable}")
    config = tmp_path / "gpus.json"
    config.write_text(
        json.dumps(
            {
                "driver": DRIVER,
                "unsupported_fields": ["remapped_rows.failure"],
                "per_gpu": {"2": {"mig.mode.current": "Enabled", "mig.mode.pending": "Enabled"}},
            }
        )
    )
    monkeypatch.setenv("NVIDIA_STANDIN_CONFIG", str(config))
    rc, out, raw = ansible_adhoc(
        "localhost", "-c", "local", "-i", "localhost,", "-m", "a800.vllm.nvidia_gpu_facts",
        "-a", f"nvidia_smi={STANDIN_NVIDIA_SMI}",
    )  # fmt: skip
    assert rc == 0 and out, raw
    facts = out["plays"][0]["tasks"][0]["hosts"]["localhost"]["ansible_facts"]["gpu_facts"]
    assert facts["driver_loaded"] is True and facts["count"] == 8
    assert facts["unsupported_fields"] == ["remapped_rows.failure"]
    assert facts["state"]["fields"] == [f for f in nvidia_smi.STATE_FIELDS if f != "remapped_rows.failure"]
    assert facts["state"]["mig_enabled"] == [2]
    assert facts["gpus"][0]["ecc.mode.current"] == "Enabled"
