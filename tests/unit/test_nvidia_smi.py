"""The nvidia-smi parser (plugins/module_utils/nvidia_smi.py) on real and synthetic output."""

from __future__ import annotations

import re

import pytest
from ansible_collections.a800.vllm.plugins.module_utils import nvidia_smi
from ansible_collections.a800.vllm.plugins.module_utils.nvidia_smi import (
    QUERY_FIELDS,
    NvidiaSmiError,
    compute_cap_from_name,
    invalid_field,
    nvswitch_present,
    parse_driver_version,
    parse_fabric_states,
    parse_query_csv,
    parse_topology,
    summarize,
    version_tuple,
)
from conftest import NVIDIA_SMI_FIXTURES, read_fixture, strip_rc

H200_UUIDS = ["GPU-c5d0cbba-f6fe-5e29-c3c9-336ce9f697c3", "GPU-f0bfff09-a92d-2f25-c80d-b7fa340b4110"]
OLD_DRIVER_FIELDS = tuple(f for f in QUERY_FIELDS if f != "compute_cap")


# --- the real capture: 2x NVIDIA H200 ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["query.csv", "query-noheader.csv", "query-nounits.csv"])
def test_real_h200_query_all_formats(real, name):
    rows = parse_query_csv(real(name), QUERY_FIELDS)
    assert [r["index"] for r in rows] == [0, 1]
    assert [r["uuid"] for r in rows] == H200_UUIDS
    assert [r["pci.bus_id"] for r in rows] == ["00000000:00:06.0", "00000000:00:07.0"]
    for row in rows:
        assert set(row) == set(QUERY_FIELDS)
        assert row["name"] == "NVIDIA H200"
        assert row["memory.total"] == 143771
        assert row["compute_cap"] == "9.0"
        assert row["driver_version"] == "580.159.04"
        assert row["persistence_mode"] is True
        assert (row["pcie.link.gen.current"], row["pcie.link.gen.max"]) == (5, 5)
        assert (row["pcie.link.width.current"], row["pcie.link.width.max"]) == (16, 16)


def test_real_h200_header_names_columns_without_fields(real):
    # With a header the field list is optional: the header names the columns, its units dropped.
    rows = parse_query_csv(real("query.csv"))
    assert list(rows[0]) == list(QUERY_FIELDS)
    assert rows == parse_query_csv(real("query.csv"), QUERY_FIELDS)


def test_real_rc_line_is_not_a_row(real):
    text = real("query-nounits.csv")
    assert text.rstrip().endswith("# rc=0")
    assert len(parse_query_csv(text, QUERY_FIELDS)) == 2
    assert parse_query_csv(text, QUERY_FIELDS) == parse_query_csv(strip_rc(text), QUERY_FIELDS)


def test_noheader_without_field_list_is_an_error(real):
    with pytest.raises(NvidiaSmiError, match="needs the list of fields"):
        parse_query_csv(real("query-noheader.csv"))


def test_real_usage_query_keys_by_asked_names(real):
    # clocks.sm is printed as clocks.current.sm; with the asked names given, rows are keyed by them.
    asked = ("index", "memory.used", "memory.total", "utilization.gpu", "temperature.gpu", "power.draw", "clocks.sm")
    rows = parse_query_csv(real("query-usage.csv"), asked)
    assert [r["memory.used"] for r in rows] == [0, 0]
    assert [r["memory.total"] for r in rows] == [143771, 143771]
    assert [r["clocks.sm"] for r in rows] == ["375 MHz", "405 MHz"]
    # Without them, by the header's (canonical) names.
    assert "clocks.current.sm" in parse_query_csv(real("query-usage.csv"))[0]


def test_real_bad_field(real):
    text = real("query-bad-field.txt")
    assert invalid_field(text) == "no_such_field"
    with pytest.raises(NvidiaSmiError, match="no_such_field"):
        parse_query_csv(text, ("index", "no_such_field"))


def test_invalid_field_none_for_other_text(real):
    assert invalid_field(real("query.csv")) is None
    assert invalid_field("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.") is None


def test_real_topology_nvlink(real):
    text = real("topo.txt")
    assert "\x1b[4m" in text  # the capture really has the ANSI escapes
    topo = parse_topology(text)
    assert topo["gpus"] == ["GPU0", "GPU1"]
    assert topo["links"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    assert topo["classes"] == ["NV"]
    assert topo["worst"] == "NV"


def test_real_fabric_states_and_nvswitch(real):
    states = parse_fabric_states(real("q.txt"))
    assert states == ["Completed", "Completed"]
    assert nvswitch_present(states) is True


def test_real_driver_version(real):
    assert parse_driver_version(real("version.txt")) == "580.159.04"
    assert parse_driver_version(real("q.txt")) == "580.159.04"


def test_real_h200_summary(real):
    rows = parse_query_csv(real("query-nounits.csv"), QUERY_FIELDS)
    facts = summarize(rows, parse_topology(real("topo.txt")), parse_fabric_states(real("q.txt")))
    assert facts["count"] == 2
    assert facts["models"] == ["NVIDIA H200"]
    assert facts["homogeneous"] is True
    assert facts["memory_mib_min"] == 143771
    assert facts["compute_caps"] == ["9.0"]
    assert facts["compute_cap_source"] == "nvidia-smi"
    assert facts["driver_version"] == "580.159.04"
    assert facts["persistence_mode_all"] is True
    assert facts["pcie_degraded"] == []
    assert facts["topology"]["worst"] == "NV"
    assert facts["nvswitch"] is True


def test_real_gpu_list_matches_query(real):
    # -L and the query agree on the GPUs (uuids in order).
    lines = [line for line in strip_rc(real("L.txt")).splitlines() if line]
    assert [line.split("UUID: ")[1].rstrip(")") for line in lines] == H200_UUIDS


# --- synthetic: the 8x A800 80GB PCIe target host ----------------------------------------------------------


@pytest.mark.parametrize("name", ["a800-x8-query.csv", "a800-x8-query-noheader.csv", "a800-x8-query-nounits.csv"])
def test_synthetic_a800_all_formats(synthetic, name):
    rows = parse_query_csv(synthetic(name), QUERY_FIELDS)
    assert [r["index"] for r in rows] == list(range(8))
    assert len({r["uuid"] for r in rows}) == 8
    for row in rows:
        assert row["name"] == "NVIDIA A800 80GB PCIe"
        assert row["memory.total"] == 81920
        assert row["compute_cap"] == "8.0"
        assert row["driver_version"] == "580.95.05"
        assert row["persistence_mode"] is True
        assert (row["pcie.link.gen.current"], row["pcie.link.gen.max"]) == (4, 4)
        assert (row["pcie.link.width.current"], row["pcie.link.width.max"]) == (16, 16)


def test_synthetic_a800_summary(synthetic):
    rows = parse_query_csv(synthetic("a800-x8-query.csv"), QUERY_FIELDS)
    facts = summarize(
        rows, parse_topology(synthetic("a800-x8-topo.txt")), parse_fabric_states(synthetic("a800-x8-q.txt"))
    )
    assert facts["count"] == 8
    assert facts["models"] == ["NVIDIA A800 80GB PCIe"]
    assert facts["homogeneous"] is True
    assert facts["memory_mib_min"] == 81920
    assert facts["compute_caps"] == ["8.0"]
    assert facts["driver_version"] == "580.95.05"
    assert facts["pcie_degraded"] == []
    assert facts["topology"]["worst"] == "SYS"
    assert facts["nvswitch"] is False


def test_na_and_not_supported_become_none(synthetic):
    rows = parse_query_csv(synthetic("query-na-values.csv"), QUERY_FIELDS)
    assert rows[0]["persistence_mode"] is None
    assert rows[0]["pcie.link.gen.current"] is None
    assert rows[0]["pcie.link.width.current"] is None
    assert rows[0]["pcie.link.gen.max"] == 4
    assert rows[0]["memory.total"] == 81920
    assert rows[1]["memory.total"] is None
    assert rows[1]["persistence_mode"] is True
    facts = summarize(rows, None, [])
    assert facts["memory_mib_min"] == 81920  # the unknown value is left out, not taken as 0
    assert facts["persistence_mode_all"] is False  # unknown is not "on"
    assert facts["pcie_degraded"] == []  # unknown width is not a degraded link
    assert facts["topology"] == {}


@pytest.mark.parametrize("raw", ["[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "[Insufficient Permissions]"])
def test_missing_markers_in_numeric_fields(raw):
    text = f"index, memory.total [MiB], pcie.link.width.max\n0, {raw}, {raw}\n"
    row = parse_query_csv(text)[0]
    assert row == {"index": 0, "memory.total": None, "pcie.link.width.max": None}


def test_extra_spaces(synthetic):
    rows = parse_query_csv(synthetic("query-extra-spaces.csv"), QUERY_FIELDS)
    assert len(rows) == 2
    assert rows[0]["name"] == "NVIDIA A800 80GB PCIe"
    assert rows[0]["memory.total"] == 81920
    assert rows[0]["driver_version"] == "580.95.05"
    assert rows[0]["pcie.link.width.max"] == 16
    assert rows[1]["index"] == 1
    assert rows[1]["compute_cap"] == "8.0"
    assert rows[1]["persistence_mode"] is True
    assert [r["pci.bus_id"] for r in rows] == ["00000000:3B:00.0", "00000000:3D:00.0"]  # upper-cased


def test_extra_spaces_parse_like_clean_output(synthetic):
    spaced = parse_query_csv(synthetic("query-extra-spaces.csv"), QUERY_FIELDS)
    clean = parse_query_csv(synthetic("a800-x8-query.csv"), QUERY_FIELDS)
    for a, b in zip(spaced, clean[:2], strict=True):
        assert {k: v for k, v in a.items() if k != "pci.bus_id"} == {k: v for k, v in b.items() if k != "pci.bus_id"}


def test_memory_in_gib_is_converted():
    assert parse_query_csv("memory.total [GiB]\n80 GiB\n") == [{"memory.total": 81920}]


def test_old_driver_without_compute_cap(synthetic):
    error = synthetic("old-driver-query-bad-field.txt")
    assert invalid_field(error) == "compute_cap"
    with pytest.raises(NvidiaSmiError, match="compute_cap"):
        parse_query_csv(error, QUERY_FIELDS)
    # the module retries without the field
    rows = parse_query_csv(synthetic("old-driver-query-nounits.csv"), OLD_DRIVER_FIELDS)
    assert len(rows) == 8
    assert all("compute_cap" not in r for r in rows)
    assert rows[0]["driver_version"] == "470.256.02"
    facts = summarize(rows, None, [])
    assert facts["compute_caps"] == ["8.0"]  # from the product name "NVIDIA A100 80GB PCIe"
    assert all(g["compute_cap"] == "8.0" for g in facts["gpus"])
    assert facts["compute_cap_source"] != "nvidia-smi"
    assert "product name" in facts["compute_cap_source"]


def test_unknown_model_on_old_driver_has_no_compute_cap():
    rows = [{"index": 0, "name": "NVIDIA Mystery GPU", "memory.total": 1024}]
    facts = summarize(rows, None, [])
    assert facts["compute_caps"] == []
    assert facts["gpus"][0]["compute_cap"] is None


def test_old_driver_retry_with_header_form(synthetic):
    # the header form of the retry names its 11 columns itself
    header = ", ".join(f"{f} [MiB]" if f == "memory.total" else f for f in OLD_DRIVER_FIELDS)
    text = header + "\n" + synthetic("old-driver-query-nounits.csv")
    rows = parse_query_csv(text)
    assert list(rows[0]) == list(OLD_DRIVER_FIELDS)
    assert rows[7]["memory.total"] == 81920


def test_topology_dual_socket_pcie_with_nics(synthetic):
    topo = parse_topology(synthetic("a800-x8-topo.txt"))
    assert topo["gpus"] == [f"GPU{i}" for i in range(8)]
    assert sorted(topo["links"]) == [f"GPU{i}" for i in range(8)]  # no NIC rows
    for row, cols in topo["links"].items():
        assert sorted(cols) == sorted(g for g in topo["gpus"] if g != row)  # no NIC columns, no self
    assert topo["links"]["GPU0"]["GPU1"] == "PIX"
    assert topo["links"]["GPU0"]["GPU2"] == "NODE"
    assert topo["links"]["GPU0"]["GPU4"] == "SYS"
    assert topo["links"]["GPU7"]["GPU6"] == "PIX"
    assert topo["classes"] == ["PIX", "NODE", "SYS"]
    assert topo["worst"] == "SYS"


def test_topology_nic_links_do_not_count(synthetic):
    # the only SYS links are to the NIC: the GPUs themselves are at worst NODE
    text = synthetic("topo-4gpu-nic-sys.txt")
    assert "SYS" in text
    topo = parse_topology(text)
    assert topo["gpus"] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert "NIC0" not in topo["links"]
    assert topo["classes"] == ["PIX", "NODE"]
    assert topo["worst"] == "NODE"


def test_topology_without_matrix_is_an_error():
    with pytest.raises(NvidiaSmiError):
        parse_topology("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")


def test_topology_worst_mixed_nvlink_and_pcie():
    text = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"
        "GPU0\t X \tNV4\tPHB\t0-7\n"
        "GPU1\tNV4\t X \tPXB\t0-7\n"
        "GPU2\tPHB\tPXB\t X \t0-7\n"
    )
    topo = parse_topology(text)
    assert topo["classes"] == ["NV", "PXB", "PHB"]
    assert topo["worst"] == "PHB"


def test_degraded_link(synthetic):
    rows = parse_query_csv(synthetic("query-degraded-link.csv"), QUERY_FIELDS)
    assert rows[5]["pcie.link.width.current"] == 8
    facts = summarize(rows, None, [])
    # GPU 5 runs at x8 of x16; gen 1 of 4 on idle GPUs is power saving and not reported
    assert facts["pcie_degraded"] == [5]


def test_mixed_models_not_homogeneous(synthetic):
    facts = summarize(parse_query_csv(synthetic("query-mixed-models.csv"), QUERY_FIELDS), None, [])
    assert facts["homogeneous"] is False
    assert facts["models"] == ["NVIDIA A100 80GB PCIe", "NVIDIA A800 80GB PCIe"]
    assert facts["compute_caps"] == ["8.0"]


def test_same_model_different_memory_not_homogeneous(synthetic):
    rows = parse_query_csv(synthetic("a800-x8-query.csv"), QUERY_FIELDS)
    rows[3]["memory.total"] = 40960
    facts = summarize(rows, None, [])
    assert facts["homogeneous"] is False
    assert facts["memory_mib_min"] == 40960


def test_fabric_na_means_no_nvswitch(synthetic):
    states = parse_fabric_states(synthetic("a800-x8-q.txt"))
    assert states == ["N/A"] * 8
    assert nvswitch_present(states) is False
    assert nvswitch_present(states, nvswitch_devices=6) is True  # device nodes are evidence enough
    assert nvswitch_present([]) is False
    assert nvswitch_present(["Not Started"]) is True  # NVSwitch without Fabric Manager running yet


def test_synthetic_driver_version(synthetic):
    assert parse_driver_version(synthetic("a800-x8-version.txt")) == "580.95.05"
    assert parse_driver_version(synthetic("a800-x8-q.txt")) == "580.95.05"
    assert parse_driver_version("No devices were found\n") is None


def test_garbled_line_is_an_error(synthetic):
    with pytest.raises(NvidiaSmiError, match="expected 12 comma-separated values, got 7"):
        parse_query_csv(synthetic("query-garbled.csv"), QUERY_FIELDS)


def test_garbled_noheader_line_is_an_error(synthetic):
    lines = synthetic("a800-x8-query-nounits.csv").splitlines()
    lines[4] += ", 16"  # one cell too many
    with pytest.raises(NvidiaSmiError, match="got 13"):
        parse_query_csv("\n".join(lines), QUERY_FIELDS)


def test_driver_failure_message_is_an_error():
    text = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    with pytest.raises(NvidiaSmiError):
        parse_query_csv(text, QUERY_FIELDS)


def test_non_number_in_numeric_field_is_an_error():
    with pytest.raises(NvidiaSmiError, match="expected a number"):
        parse_query_csv("index, memory.total [MiB]\n0, lots MiB\n")


def test_empty_output_has_no_rows():
    assert parse_query_csv("", QUERY_FIELDS) == []
    assert parse_query_csv("# rc=0\n", QUERY_FIELDS) == []


# --- compute capability by product name, versions --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        ("NVIDIA A800 80GB PCIe", "8.0"),
        ("NVIDIA A800-SXM4-80GB", "8.0"),
        ("NVIDIA A100 80GB PCIe", "8.0"),
        ("NVIDIA A100-SXM4-40GB", "8.0"),
        ("NVIDIA H100 80GB HBM3", "9.0"),
        ("NVIDIA H100 PCIe", "9.0"),
        ("NVIDIA H200", "9.0"),
        ("NVIDIA H800", "9.0"),
        ("NVIDIA L40S", "8.9"),
        ("NVIDIA A10", "8.6"),
        ("NVIDIA A10G", "8.6"),
        ("Tesla V100-SXM2-32GB", "7.0"),
        ("Tesla T4", "7.5"),
        ("NVIDIA Mystery GPU", None),
        ("", None),
    ],
)
def test_compute_cap_from_name(name, cc):
    assert compute_cap_from_name(name) == cc


@pytest.mark.parametrize(
    ("text", "expected"),
    [("580.95.05", (580, 95, 5)), ("580.159.04", (580, 159, 4)), ("575.51.03", (575, 51, 3)), ("0.0", (0, 0))],
)
def test_version_tuple(text, expected):
    assert version_tuple(text) == expected


def test_version_tuple_orders_numerically():
    # as strings "580.159.04" sorts before "580.95.05"; as versions it is newer
    assert version_tuple("580.159.04") > version_tuple("580.95.05")
    assert version_tuple("535.183.01") < version_tuple("575.51.03")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DRIVER version      : 580.95.05\n", "580.95.05"),
        ("Driver Version                                         : 535.183.01\n", "535.183.01"),
        ("NVIDIA-SMI version  : 580.95.05\nNVML version        : 580.95\n", None),
    ],
)
def test_parse_driver_version(text, expected):
    assert parse_driver_version(text) == expected


def test_query_fields_are_the_captured_ones(real):
    # capture.sh and the module ask for the same fields in the same order
    header = real("query.csv").splitlines()[0]
    names = [cell.split(" [")[0].strip() for cell in header.split(",")]
    assert tuple(names) == nvidia_smi.QUERY_FIELDS


# --- GPU state: MIG, ECC, page retirement, row remapping (issue 31, item 13) ------------------------------------
# The new names are read from the module inside each test (nvidia_smi.X), so that each test fails on its own where
# they are missing.

H200_X1_UUID = "GPU-eae2da8a-1ea4-d2fd-79ef-bd90468e8082"


@pytest.mark.parametrize("name", ["query-state.csv", "query-state-noheader.csv", "query-state-nounits.csv"])
def test_real_h200_state_query_all_formats(name):
    # recorded on a real H200, driver 580.159.04: `Disabled, Disabled, Enabled, Enabled, [N/A], No, No`
    rows = parse_query_csv(read_fixture(f"h200-x1/{name}"), nvidia_smi.PREFLIGHT_FIELDS)
    assert len(rows) == 1
    row = rows[0]
    assert list(row) == list(nvidia_smi.QUERY_FIELDS + nvidia_smi.STATE_FIELDS)
    assert (row["index"], row["uuid"], row["memory.total"], row["driver_version"]) == (
        0,
        H200_X1_UUID,
        143771,
        "580.159.04",
    )
    assert row["mig.mode.current"] == row["mig.mode.pending"] == "Disabled"
    assert row["ecc.mode.current"] == row["ecc.mode.pending"] == "Enabled"
    assert row["retired_pages.pending"] is None  # [N/A]: Hopper remaps rows instead of retiring pages
    assert row["remapped_rows.pending"] is False
    assert row["remapped_rows.failure"] is False


def test_real_h200_state_header_has_no_units_and_names_the_fields():
    header = read_fixture("h200-x1/query-state.csv").splitlines()[0]
    names = [cell.strip() for cell in header.split(",")]
    assert names[-len(nvidia_smi.STATE_FIELDS) :] == list(nvidia_smi.STATE_FIELDS)
    assert tuple(cell.split(" [")[0] for cell in names) == nvidia_smi.PREFLIGHT_FIELDS
    # without the field list the header names the columns as well
    assert parse_query_csv(read_fixture("h200-x1/query-state.csv")) == parse_query_csv(
        read_fixture("h200-x1/query-state.csv"), nvidia_smi.PREFLIGHT_FIELDS
    )


def test_real_h200_state_summary_is_healthy():
    rows = parse_query_csv(read_fixture("h200-x1/query-state-nounits.csv"), nvidia_smi.PREFLIGHT_FIELDS)
    state = summarize(rows, None, [])["state"]
    assert state["fields"] == list(nvidia_smi.STATE_FIELDS)
    for key in (
        "mig_enabled",
        "mig_pending_enabled",
        "ecc_disabled",
        "ecc_pending_disabled",
        "retired_pages_pending",
        "remapped_rows_pending",
        "remapped_rows_failure",
    ):
        assert state[key] == [], key
    assert state["reported"]["retired_pages.pending"] == []  # every GPU printed [N/A]
    assert state["reported"]["remapped_rows.pending"] == [0]
    assert state["unknown"] == []


def test_real_unknown_state_field_is_named_for_the_retry():
    text = read_fixture("h200-x1/query-bad-state-field.txt")
    assert invalid_field(text) == "remapped_rows.no_such"
    assert "remapped_rows.pending" in nvidia_smi.OPTIONAL_FIELDS  # nvidia_gpu_facts asks again without such a field
    assert "index" not in nvidia_smi.OPTIONAL_FIELDS and "name" not in nvidia_smi.OPTIONAL_FIELDS


def test_real_help_offers_the_commands_of_the_fixes():
    # the fixes name `-mig 0`, `-e 1`, `-r` and `-i N`: this driver's own -h has them
    text = read_fixture("h200-x1/help.txt")
    for option in ("-mig  --multi-instance-gpu=", "-e,   --ecc-config=", "-r    --gpu-reset", "-i,   --id="):
        assert option in text, option
    for field in nvidia_smi.STATE_FIELDS:  # and driver 580's --help-query-gpu knows every state field
        assert f'"{field}"' in read_fixture("h200-x2/help-query-gpu.txt"), field


def test_synthetic_a800_state_is_healthy():
    rows = parse_query_csv(read_fixture("synthetic/a800-x8-query-state.csv"), nvidia_smi.PREFLIGHT_FIELDS)
    assert len(rows) == 8
    state = summarize(rows, None, [])["state"]
    assert state["mig_enabled"] == state["ecc_disabled"] == state["remapped_rows_pending"] == []
    assert state["reported"]["mig.mode.current"] == list(range(8))


def test_synthetic_faults_each_gpu_its_own():
    rows = parse_query_csv(read_fixture("synthetic/a800-x8-query-state-faults.csv"), nvidia_smi.PREFLIGHT_FIELDS)
    state = summarize(rows, None, [])["state"]
    assert state["mig_enabled"] == [1, 3]
    assert state["mig_pending_enabled"] == []
    assert state["mig_pending_disabled"] == [3]  # -mig 0 was run, the reset is still to come
    assert state["ecc_disabled"] == [2]
    assert state["ecc_pending_enabled"] == [2]  # -e 1 was run, the reboot is still to come
    assert state["ecc_pending_disabled"] == [6]
    assert state["remapped_rows_pending"] == [4, 5]
    assert state["remapped_rows_failure"] == [5]
    assert state["retired_pages_pending"] == []
    assert rows[7]["remapped_rows.pending"] is None and rows[7]["remapped_rows.failure"] is None  # [Not Supported]
    assert 7 not in state["reported"]["remapped_rows.pending"]
    assert state["unknown"] == []


@pytest.mark.parametrize(("raw", "value"), [("Yes", True), ("No", False), ("yes", True), (" No ", False)])
def test_state_flags(raw, value):
    # ([N/A] and [Not Supported] are None for every field, these too: test_synthetic_faults_each_gpu_its_own)
    text = f"index, remapped_rows.pending, retired_pages.pending\n0, {raw}, {raw}\n"
    row = parse_query_csv(text)[0]
    assert row["remapped_rows.pending"] is value
    assert row["retired_pages.pending"] is value


@pytest.mark.parametrize(("raw", "value"), [("enabled", "Enabled"), ("DISABLED", "Disabled")])
def test_state_modes(raw, value):
    # the driver's words in any case become its own spelling (Enabled / Disabled), which the summary compares
    row = parse_query_csv(f"index, mig.mode.current, ecc.mode.current\n0, {raw}, {raw}\n")[0]
    assert row["mig.mode.current"] == row["ecc.mode.current"] == value


def test_unknown_state_words_are_kept_and_reported():
    # a word the parser does not know is kept as printed, never guessed as fine or faulty
    text = "index, mig.mode.current, remapped_rows.pending\n0, Partial, Maybe\n1, Disabled, No\n"
    rows = parse_query_csv(text)
    assert rows[0]["mig.mode.current"] == "Partial" and rows[0]["remapped_rows.pending"] == "Maybe"
    state = summarize(rows, None, [])["state"]
    assert state["mig_enabled"] == [] and state["remapped_rows_pending"] == []
    assert state["unknown"] == [
        {"gpu": 0, "field": "mig.mode.current", "value": "Partial"},
        {"gpu": 0, "field": "remapped_rows.pending", "value": "Maybe"},
    ]


def test_pre_ampere_gpu_retires_pages():
    # a V100 has no row remapper ([N/A]) and reports pages pending retirement instead
    text = (
        "index, name, retired_pages.pending, remapped_rows.pending, remapped_rows.failure\n"
        "0, Tesla V100-SXM2-32GB, Yes, [N/A], [N/A]\n"
    )
    state = summarize(parse_query_csv(text), None, [])["state"]
    assert state["retired_pages_pending"] == [0]
    assert state["reported"]["remapped_rows.pending"] == []


def test_rows_without_state_fields_have_an_empty_state():
    # the identity-only query (QUERY_FIELDS, as recorded in h200-x2): nothing read, nothing claimed
    state = summarize(parse_query_csv(read_fixture("synthetic/a800-x8-query.csv"), QUERY_FIELDS), None, [])["state"]
    assert state["fields"] == [] and state["mig_enabled"] == [] and state["unknown"] == []


def test_capture_script_records_the_preflight_query():
    # capture.sh (what the lead runs on a real GPU host) asks for exactly the module's PREFLIGHT_FIELDS
    script = (NVIDIA_SMI_FIXTURES / "capture.sh").read_text()
    values = dict(line.split("=", 1) for line in script.splitlines() if re.match(r"^(q|state)=", line))
    assert tuple(f"{values['q']},{values['state']}".split(",")) == nvidia_smi.PREFLIGHT_FIELDS
    assert "run query-state.csv nvidia-smi --query-gpu=$q,$state --format=csv\n" in script
