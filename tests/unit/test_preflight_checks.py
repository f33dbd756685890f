"""The preflight filters (plugins/filter/preflight.py) on GPU facts parsed from real and synthetic nvidia-smi output."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.a800.vllm.plugins.filter import checks as check_printers
from ansible_collections.a800.vllm.plugins.filter import preflight
from ansible_collections.a800.vllm.plugins.filter.preflight import preflight_checks
from ansible_collections.a800.vllm.plugins.module_utils import nvidia_smi
from ansible_collections.a800.vllm.plugins.module_utils.checks import failure_lines as preflight_failures
from ansible_collections.a800.vllm.plugins.module_utils.checks import table_lines as preflight_table
from ansible_collections.a800.vllm.plugins.module_utils.nvidia_smi import (
    QUERY_FIELDS,
    parse_fabric_states,
    parse_query_csv,
    parse_topology,
    summarize,
)
from conftest import read_fixture

# As roles/preflight/vars/main.yml builds it from the prod profile and BOM: templated values arrive as strings.
REQUIREMENTS = {
    "gpu_count": "8",
    "compute_capability": "8.0",
    "min_gpu_memory_mib": "81000",
    "memory_reason": "~57 GB weights + 13.2 GB KV cache + 2.4 GB CUDA graphs per GPU",
    "min_driver_version": "575.51.03",
    "ram_headroom_gb": "64",
    "weights_size_gb": "433",
    "cold_gb_per_s": "0.33",
    "keep_resident": False,
    "driver_pin": "580.95.05",
    "allow_missing_driver": True,
}
NEED_RAM_GIB = 462.9  # (433 GB + 64 GB) in GiB, rounded to 0.1
NEED_DISK_GIB = 403.3  # 433 GB in GiB

# As serving_host_facts returns them: a host that holds the weights already.
HOST = {
    "mem_total_gib": 1007.5,
    "mem_available_gib": 990.2,
    "page_cache_gib": 2.1,
    "cpus": 128,
    "kernel": "6.8.0-49-generic",
    "weights": {
        "path": "/data/models/GLM-5.2-NVFP4",
        "exists": True,
        "measured_at": "/data/models/GLM-5.2-NVFP4",
        "mount_point": "/data",
        "fs_type": "xfs",
        "device": "/dev/nvme1n1",
        "free_gib": 3100.4,
        "total_gib": 3576.3,
        "shards": 88,
        "size_gib": 403.27,
    },
    "secure_boot": "disabled",
}


def gpu_facts(
    query: str,
    topo: str | None = "synthetic/a800-x8-topo.txt",
    q: str | None = "synthetic/a800-x8-q.txt",
    fields: tuple[str, ...] = QUERY_FIELDS,
    **row_changes,
) -> dict:
    """gpu_facts as nvidia_gpu_facts sets them, from fixture files; row_changes override fields of every GPU."""
    rows = parse_query_csv(read_fixture(query), fields)
    for row in rows:
        row.update(row_changes)
    facts = {
        "driver_installed": True,
        "driver_loaded": False,
        "count": 0,
        "gpus": [],
        "error": None,
        "nvidia_smi": "/usr/bin/nvidia-smi",
    }
    facts.update(
        summarize(
            rows, parse_topology(read_fixture(topo)) if topo else {}, parse_fabric_states(read_fixture(q)) if q else []
        )
    )
    facts["driver_loaded"] = True
    return facts


def a800() -> dict:
    return gpu_facts("synthetic/a800-x8-query.csv")


def no_driver() -> dict:
    return {
        "driver_installed": False,
        "driver_loaded": False,
        "count": 0,
        "gpus": [],
        "error": "nvidia-smi not found: the NVIDIA driver is not installed",
        "nvidia_smi": None,
    }


def host(**changes) -> dict:
    result = copy.deepcopy(HOST)
    weights = changes.pop("weights", {})
    result["weights"].update(weights)
    result.update(changes)
    return result


def req(**changes) -> dict:
    return dict(REQUIREMENTS, **changes)


def by_name(checks: list[dict]) -> dict[str, dict]:
    names = [c["name"] for c in checks]
    assert len(names) == len(set(names)), f"a check is reported twice: {names}"
    return {c["name"]: c for c in checks}


def failed(checks: list[dict]) -> list[str]:
    return [c["name"] for c in checks if c["status"] == "fail"]


# --- whole hosts -----------------------------------------------------------------------------------------


def test_good_a800_host_passes_every_fail_level_check():
    checks = preflight_checks(a800(), HOST, REQUIREMENTS)
    assert failed(checks) == []
    assert preflight_failures(checks) == []
    status = {c["name"]: c["status"] for c in checks}
    for name in (
        "gpu_count",
        "gpu_uniform",
        "compute_capability",
        "gpu_memory",
        "driver_version",
        "persistence_mode",
        "nvswitch",
        "ram",
        "weights_storage",
    ):
        assert status[name] == "pass", name
    assert status["topology"] == "warn"  # dual-socket PCIe: SYS links
    assert "driver_pin" not in status  # the driver is the pinned one
    assert "pcie_link" not in status


def test_every_check_record_has_the_documented_keys():
    for check in preflight_checks(a800(), HOST, REQUIREMENTS):
        assert set(check) == {"name", "status", "fact", "measured", "expected", "detail", "fix"}
        assert check["status"] in ("pass", "warn", "fail", "pending")
        assert check["fact"].startswith(("gpu_facts.", "host_facts."))
        if check["status"] == "pass":
            assert check["fix"] == ""
        else:
            assert check["fix"]


def test_native_typed_requirements_give_the_same_result():
    native = req(gpu_count=8, min_gpu_memory_mib=81000, ram_headroom_gb=64, weights_size_gb=433)
    assert preflight_checks(a800(), HOST, native) == preflight_checks(a800(), HOST, REQUIREMENTS)


def test_four_gpu_host_fails_gpu_count_only():
    facts = gpu_facts("synthetic/a800-x8-query.csv", topo="synthetic/topo-4gpu-nic-sys.txt")
    four = summarize(facts["gpus"][:4], facts["topology"], [])
    facts.update(four)
    checks = preflight_checks(facts, HOST, REQUIREMENTS)
    assert failed(checks) == ["gpu_count"]
    check = by_name(checks)["gpu_count"]
    assert (check["measured"], check["expected"]) == (4, 8)
    assert by_name(checks)["topology"]["status"] == "pass"  # NODE at worst


def test_more_gpus_than_needed_is_a_warning():
    checks = preflight_checks(a800(), HOST, req(gpu_count="4"))
    assert failed(checks) == []
    assert by_name(checks)["gpu_count"]["status"] == "warn"


def test_h100_host_fails_compute_capability_only():
    # 8x H100 80GB (HBM3): the real H200 capture with the H100's name and memory, on 8 GPUs.
    rows = parse_query_csv(read_fixture("h200-x2/query.csv"), QUERY_FIELDS)
    rows = [dict(rows[i % 2], index=i, name="NVIDIA H100 80GB HBM3", **{"memory.total": 81559}) for i in range(8)]
    facts = dict(no_driver(), driver_installed=True, driver_loaded=True, error=None)
    facts.update(
        summarize(
            rows, parse_topology(read_fixture("h200-x2/topo.txt")), parse_fabric_states(read_fixture("h200-x2/q.txt"))
        )
    )
    checks = preflight_checks(facts, HOST, REQUIREMENTS)
    assert failed(checks) == ["compute_capability"]
    check = by_name(checks)["compute_capability"]
    assert check["measured"] == ["9.0"]
    assert check["expected"] == "8.0"
    assert "sm80" in check["fix"]
    assert by_name(checks)["driver_pin"]["status"] == "warn"  # 580.159.04 is not the pin


def test_real_h200_host_reports_count_and_compute_capability():
    facts = gpu_facts("h200-x2/query.csv", topo="h200-x2/topo.txt", q="h200-x2/q.txt")
    checks = preflight_checks(facts, HOST, REQUIREMENTS)
    assert failed(checks) == ["gpu_count", "compute_capability"]
    assert by_name(checks)["gpu_memory"]["status"] == "pass"  # 143771 MiB
    assert by_name(checks)["driver_version"]["status"] == "pass"  # 580.159.04 >= 575.51.03 (not as strings)
    assert by_name(checks)["topology"]["status"] == "pass"
    assert "NVSwitch present" in by_name(checks)["nvswitch"]["detail"]


def test_40gb_cards_fail_gpu_memory_only():
    facts = gpu_facts("synthetic/a800-x8-query.csv", name="NVIDIA A800 40GB Active", **{"memory.total": 40960})
    checks = preflight_checks(facts, HOST, REQUIREMENTS)
    assert failed(checks) == ["gpu_memory"]
    check = by_name(checks)["gpu_memory"]
    assert check["measured"] == 40960
    assert check["expected"] == ">= 81000"
    assert "81000 MiB" in check["detail"]
    assert "KV cache" in check["detail"]  # the profile's memory_reason


def test_memory_reason_empty_from_jinja_default_falls_back():
    # roles/preflight/vars/main.yml passes memory_reason | default('') : an empty reason is no reason
    facts = gpu_facts("synthetic/a800-x8-query.csv", **{"memory.total": 40960})
    check = by_name(preflight_checks(facts, HOST, req(memory_reason="")))["gpu_memory"]
    assert "()" not in check["detail"]
    assert "KV cache" in check["detail"]


def test_unknown_memory_fails_gpu_memory():
    facts = gpu_facts("synthetic/a800-x8-query.csv", **{"memory.total": None})
    assert "gpu_memory" in failed(preflight_checks(facts, HOST, REQUIREMENTS))


def test_mixed_gpus_fail_uniformity():
    facts = gpu_facts("synthetic/query-mixed-models.csv")
    checks = preflight_checks(facts, HOST, REQUIREMENTS)
    assert failed(checks) == ["gpu_uniform"]
    assert "NVIDIA A100 80GB PCIe" in by_name(checks)["gpu_uniform"]["detail"]


def test_several_problems_are_all_reported():
    facts = gpu_facts(
        "synthetic/a800-x8-query.csv", **{"memory.total": 40960, "compute_cap": "9.0", "driver_version": "535.183.01"}
    )
    facts.update(summarize(facts["gpus"][:4], facts["topology"], []))
    small = host(mem_total_gib=251.5, weights={"exists": False, "shards": 0, "size_gib": 0.0, "free_gib": 120.0})
    checks = preflight_checks(facts, small, req(keep_resident=True))  # locked resident: too little RAM fails
    expected = ["gpu_count", "compute_capability", "gpu_memory", "driver_version", "ram", "weights_storage"]
    assert failed(checks) == expected
    lines = preflight_failures(checks)
    assert len(lines) == len(expected)
    fact_expected = {
        "gpu_count": ("gpu_facts.count", "expected 8"),
        "compute_capability": ("gpu_facts.compute_caps", "expected 8.0"),
        "gpu_memory": ("gpu_facts.memory_mib_min", "expected >= 81000"),
        "driver_version": ("gpu_facts.driver_version", "expected >= 575.51.03"),
        "ram": ("host_facts.mem_total_gib", f"expected >= {NEED_RAM_GIB}"),
        "weights_storage": ("host_facts.weights.free_gib", f"expected >= {NEED_DISK_GIB}"),
    }
    for name, line in zip(expected, lines, strict=True):
        fact, want = fact_expected[name]
        assert line.startswith(f"{name}: ")
        assert fact in line
        assert want in line
        fix = line.split("Fix: ", 1)[1]
        assert fix.strip() == by_name(checks)[name]["fix"]
    assert "= 4," in lines[0]  # the measured value
    assert "= ['9.0']," in lines[1]


def test_failures_lists_only_failed_checks():
    checks = preflight_checks(a800(), HOST, REQUIREMENTS)
    assert any(c["status"] == "warn" for c in checks)
    assert preflight_failures(checks) == []


# --- driver states ---------------------------------------------------------------------------------------


def test_missing_driver_is_pending_when_allowed():
    checks = preflight_checks(no_driver(), HOST, req(allow_missing_driver=True))
    gpu = [c for c in checks if c["fact"].startswith("gpu_facts.")]
    assert [(c["name"], c["status"]) for c in gpu] == [("nvidia_driver", "pending")]
    assert "580.95.05" in gpu[0]["fix"]  # the pin it will install
    assert failed(checks) == []
    # the host checks still run
    assert {"ram", "weights_storage"} <= set(by_name(checks))


@pytest.mark.parametrize("allow", [False, "false", "False", "no"])
def test_missing_driver_fails_when_not_allowed(allow):
    # -e preflight_allow_missing_driver=false arrives as a string
    checks = preflight_checks(no_driver(), HOST, req(allow_missing_driver=allow))
    assert failed(checks) == ["nvidia_driver"]
    assert by_name(checks)["nvidia_driver"]["fact"] == "gpu_facts.driver_installed"


@pytest.mark.parametrize("allow", [True, "true", "True", "yes"])
def test_missing_driver_allowed_spellings(allow):
    checks = preflight_checks(no_driver(), HOST, req(allow_missing_driver=allow))
    assert by_name(checks)["nvidia_driver"]["status"] == "pending"


def test_missing_driver_allowed_by_default():
    requirements = {k: v for k, v in REQUIREMENTS.items() if k != "allow_missing_driver"}
    assert by_name(preflight_checks(no_driver(), HOST, requirements))["nvidia_driver"]["status"] == "pending"


def test_driver_installed_not_loaded_fails():
    message = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running."
    )
    facts = dict(no_driver(), driver_installed=True, nvidia_smi="/usr/bin/nvidia-smi", error=message)
    checks = preflight_checks(facts, HOST, REQUIREMENTS)
    assert failed(checks) == ["nvidia_driver"]
    check = by_name(checks)["nvidia_driver"]
    assert check["measured"] == message
    assert message in check["detail"]
    (line,) = preflight_failures(checks)
    assert "gpu_facts.error" in line and "Fix:" in line and "reboot" in line


def test_old_driver_below_minimum_fails():
    facts = gpu_facts("synthetic/a800-x8-query.csv", driver_version="535.183.01")
    checks = preflight_checks(facts, HOST, REQUIREMENTS)
    assert failed(checks) == ["driver_version"]
    check = by_name(checks)["driver_version"]
    assert (check["measured"], check["expected"]) == ("535.183.01", ">= 575.51.03")
    assert "580.95.05" in check["fix"]
    assert by_name(checks)["driver_pin"]["status"] == "warn"


def test_pre_r510_driver_fails_version_but_knows_compute_capability():
    facts = gpu_facts(
        "synthetic/old-driver-query-nounits.csv", fields=tuple(f for f in QUERY_FIELDS if f != "compute_cap")
    )
    checks = preflight_checks(facts, HOST, REQUIREMENTS)
    assert failed(checks) == ["driver_version"]
    assert by_name(checks)["compute_capability"]["measured"] == ["8.0"]  # from "NVIDIA A100 80GB PCIe"


def test_driver_at_minimum_passes_and_newer_passes():
    for version in ("575.51.03", "580.159.04", "1000.0.1"):
        facts = gpu_facts("synthetic/a800-x8-query.csv", driver_version=version)
        assert by_name(preflight_checks(facts, HOST, REQUIREMENTS))["driver_version"]["status"] == "pass", version
    facts = gpu_facts("synthetic/a800-x8-query.csv", driver_version="575.51.02")
    assert by_name(preflight_checks(facts, HOST, REQUIREMENTS))["driver_version"]["status"] == "fail"


def test_secure_boot_is_judged_with_the_driver_source_not_here():
    # nvidia_driver_install_checks (tests/unit/test_platforms.py) judges Secure Boot against bom.nvidia_driver.source
    assert "secure_boot" not in by_name(preflight_checks(no_driver(), host(secure_boot="enabled"), REQUIREMENTS))


# --- RAM and weights storage -----------------------------------------------------------------------------


@pytest.mark.parametrize(("ram", "status"), [(462.8, "warn"), (251.5, "warn"), (462.9, "pass"), (503.5, "pass")])
def test_ram_below_weights_and_headroom_warns(ram, status):
    checks = preflight_checks(a800(), host(mem_total_gib=ram), REQUIREMENTS)
    check = by_name(checks)["ram"]
    assert check["status"] == status
    assert check["expected"] == f">= {NEED_RAM_GIB}"
    assert check["measured"] == ram
    assert failed(checks) == []  # the run goes on: the server works, its restarts are cold


def test_ram_warning_states_the_cold_load_cost_and_the_skipped_prewarm():
    check = by_name(preflight_checks(a800(), host(mem_total_gib=251.5), REQUIREMENTS))["ram"]
    # 433 GB at the profile's 0.33 GB/s (docs/article.md#load-times: ~22 min cold) = 1312 s
    assert "below the 462.9 GiB (433 GB weights + 64 GB headroom)" in check["detail"]
    assert "every server restart is a cold load from disk, ~22 min for 433 GB at 0.33 GB/s" in check["detail"]
    assert "docs/article.md#load-times" in check["detail"]
    assert "the weights phase skips the page-cache prewarm" in check["detail"]
    assert "at least 462.9 GiB" in check["fix"] and "~22 min per restart" in check["fix"]


@pytest.mark.parametrize(
    ("changes", "minutes"),
    [
        ({"cold_gb_per_s": "0.165"}, "~44 min for 433 GB at 0.165 GB/s"),
        ({"weights_size_gb": 216.5}, "~11 min for 216.5 GB"),
    ],
)
def test_cold_load_minutes_come_from_the_profile(changes, minutes):
    check = by_name(preflight_checks(a800(), host(mem_total_gib=100.0), req(**changes)))["ram"]
    assert check["status"] == "warn"
    assert minutes in check["detail"]


@pytest.mark.parametrize("lock", [True, "true", "yes"])
def test_ram_below_weights_and_headroom_fails_when_locked_resident(lock):
    checks = preflight_checks(a800(), host(mem_total_gib=462.8), req(keep_resident=lock))
    assert failed(checks) == ["ram"]
    check = by_name(checks)["ram"]
    assert check["detail"] == (
        "RAM: found 462.8 GiB, need at least 462.9 GiB (433 GB weights + 64 GB headroom) to lock the weights "
        "resident (weights_keep_resident: true)"
    )
    assert "set weights_keep_resident: false" in check["fix"] and "~22 min" in check["fix"]
    (line,) = preflight_failures(checks)
    assert line.startswith("ram: ") and f"expected >= {NEED_RAM_GIB}" in line


@pytest.mark.parametrize("lock", [False, "false", "False", "no"])
def test_not_locked_spellings_warn(lock):
    check = by_name(preflight_checks(a800(), host(mem_total_gib=251.5), req(keep_resident=lock)))["ram"]
    assert check["status"] == "warn"


def test_enough_ram_passes_when_locked_resident_too():
    check = by_name(preflight_checks(a800(), host(mem_total_gib=462.9), req(keep_resident=True)))["ram"]
    assert check["status"] == "pass" and check["fix"] == ""
    assert check["detail"] == "RAM 462.9 GiB holds the 433 GB of weights in the page cache"


def test_weights_missing_with_room_warns():
    h = host(weights={"exists": False, "shards": 0, "size_gib": 0.0, "free_gib": 500.0})
    check = by_name(preflight_checks(a800(), h, REQUIREMENTS))["weights_storage"]
    assert check["status"] == "warn"
    assert "/data/models/GLM-5.2-NVFP4" in check["detail"]


def test_weights_missing_without_room_fails():
    h = host(weights={"exists": False, "shards": 0, "size_gib": 0.0, "free_gib": 403.2})
    checks = preflight_checks(a800(), h, REQUIREMENTS)
    assert failed(checks) == ["weights_storage"]
    assert by_name(checks)["weights_storage"]["expected"] == f">= {NEED_DISK_GIB}"


def test_empty_weights_directory_is_not_weights():
    h = host(weights={"exists": True, "shards": 0, "size_gib": 0.0, "free_gib": 3100.4})
    assert by_name(preflight_checks(a800(), h, REQUIREMENTS))["weights_storage"]["status"] == "warn"


def test_weights_present_pass():
    check = by_name(preflight_checks(a800(), HOST, REQUIREMENTS))["weights_storage"]
    assert check["status"] == "pass"
    assert "88 shards" in check["detail"]


# --- GPU warnings ----------------------------------------------------------------------------------------


def test_sys_topology_warns_and_node_passes():
    sys_check = by_name(preflight_checks(a800(), HOST, REQUIREMENTS))["topology"]
    assert (sys_check["status"], sys_check["measured"]) == ("warn", "SYS")
    assert "NCCL_P2P_DISABLE" in sys_check["fix"]
    node = gpu_facts("synthetic/a800-x8-query.csv", topo="synthetic/topo-4gpu-nic-sys.txt")
    node_check = by_name(preflight_checks(node, HOST, REQUIREMENTS))["topology"]
    assert (node_check["status"], node_check["measured"]) == ("pass", "NODE")


def test_unreadable_topology_warns():
    facts = a800()
    facts["topology"] = {"error": "no GPU header line in topo -m output"}
    check = by_name(preflight_checks(facts, HOST, REQUIREMENTS))["topology"]
    assert check["status"] == "warn"
    assert check["measured"] == "no GPU header line in topo -m output"


def test_degraded_link_and_persistence_warn():
    facts = gpu_facts("synthetic/query-degraded-link.csv")
    facts["gpus"][2]["persistence_mode"] = False
    facts["persistence_mode_all"] = False
    checks = by_name(preflight_checks(facts, HOST, REQUIREMENTS))
    assert checks["pcie_link"]["status"] == "warn"
    assert checks["pcie_link"]["measured"] == [5]
    assert "GPU 5" in checks["pcie_link"]["detail"]
    assert checks["persistence_mode"]["status"] == "warn"


def test_nvswitch_absent_on_pcie_host():
    check = by_name(preflight_checks(a800(), HOST, REQUIREMENTS))["nvswitch"]
    assert check["measured"] is False
    assert "no Fabric Manager" in check["detail"]


# --- the table -------------------------------------------------------------------------------------------


def test_table_aligns_columns_and_counts():
    checks = preflight_checks(a800(), host(mem_total_gib=251.5), req(keep_resident=True))
    lines = preflight_table(checks)
    assert len(lines) == len(checks) + 1
    body = lines[:-1]
    width = max(len(c["name"]) for c in checks)
    for line, check in zip(body, checks, strict=True):
        assert line.startswith(check["status"].upper())
        assert line[8 : 8 + len(check["name"])] == check["name"]  # names start in one column
        assert line[8 + width + 2 :] == check["detail"]  # details start in one column
    assert len({line.index(c["detail"]) for line, c in zip(body, checks, strict=True)}) == 1
    statuses = [c["status"] for c in checks]
    expected = ", ".join(f"{statuses.count(s)} {s}" for s in ("pass", "warn", "fail", "pending") if s in statuses)
    assert lines[-1] == expected
    assert "1 fail" in lines[-1]


def test_table_counts_pending():
    lines = preflight_table(preflight_checks(no_driver(), HOST, REQUIREMENTS))
    assert lines[0].startswith("PENDING nvidia_driver  ")
    assert lines[-1] == "2 pass, 1 pending"  # ram, weights_storage; nvidia_driver pending


def test_table_of_no_checks():
    assert preflight_table([]) == ["no checks"]


def test_filter_plugin_exports():
    assert preflight.FilterModule().filters() == {"preflight_checks": preflight_checks}
    # The printers of every check record live beside it (module_utils/checks.py), under the names the roles call.
    assert check_printers.FilterModule().filters() == {
        "preflight_failures": preflight_failures,
        "preflight_table": preflight_table,
    }


# --- GPU state: MIG, ECC, page retirement, row remapping (issue 31, item 13) ------------------------------------
# Decided: MIG on (now or at the next reset) and a row remapping failure fail; ECC off, pages pending retirement and a
# pending row remapping warn (vLLM runs; docs/field.md#gpu-state-mig-ecc-retired-pages-and-row-remapping says why).

STATE_CHECKS = ("mig_mode", "ecc_mode", "retired_pages_pending", "row_remap_pending", "row_remap_failure")


def state_facts(query: str = "synthetic/a800-x8-query-state.csv", per_gpu: dict | None = None, **row_changes) -> dict:
    """gpu_facts of the 8x A800 read with the preflight's whole query (the GPU state too); per_gpu: {index: changes}."""
    rows = parse_query_csv(read_fixture(query), nvidia_smi.PREFLIGHT_FIELDS)
    for row in rows:
        row.update(row_changes)
        row.update((per_gpu or {}).get(row["index"], {}))
    facts = dict(no_driver(), driver_installed=True, driver_loaded=True, error=None)
    facts.update(
        summarize(
            rows,
            parse_topology(read_fixture("synthetic/a800-x8-topo.txt")),
            parse_fabric_states(read_fixture("synthetic/a800-x8-q.txt")),
        )
    )
    return facts


def state_checks(facts: dict) -> dict[str, dict]:
    return by_name(preflight_checks(facts, HOST, REQUIREMENTS))


def test_healthy_state_passes_every_state_check():
    checks = state_checks(state_facts())
    for name in STATE_CHECKS:
        assert checks[name]["status"] == "pass", name
        assert checks[name]["fix"] == ""
    assert checks["mig_mode"]["detail"] == "MIG mode off on every GPU (8 report it)"
    assert checks["ecc_mode"]["detail"] == "ECC on at every GPU (8 report it)"
    # the A800 prints [N/A] for pages pending retirement: it remaps rows instead
    assert "Ampere and later GPUs remap rows instead" in checks["retired_pages_pending"]["detail"]
    assert failed(preflight_checks(state_facts(), HOST, REQUIREMENTS)) == []


def test_real_h200_state_passes():
    rows = parse_query_csv(read_fixture("h200-x1/query-state.csv"), nvidia_smi.PREFLIGHT_FIELDS)
    facts = dict(no_driver(), driver_installed=True, driver_loaded=True, error=None)
    facts.update(summarize(rows, None, []))
    checks = state_checks(facts)
    assert [checks[name]["status"] for name in STATE_CHECKS] == ["pass"] * 5


def test_mig_enabled_fails_with_the_commands_that_turn_it_off():
    checks = state_checks(state_facts(**{"mig.mode.current": "Enabled", "mig.mode.pending": "Enabled"}))
    mig = checks["mig_mode"]
    assert mig["status"] == "fail"
    assert (mig["fact"], mig["measured"], mig["expected"]) == ("gpu_facts.state.mig_enabled", list(range(8)), [])
    assert mig["detail"].startswith("MIG mode is on at GPUs 0, 1, 2, 3, 4, 5, 6, 7")
    assert "tensor parallel" in mig["detail"]
    assert "`for i in 0 1 2 3 4 5 6 7; do sudo nvidia-smi -i $i -mig 0; done`" in mig["fix"]
    assert "`for i in 0 1 2 3 4 5 6 7; do sudo nvidia-smi -i $i -r; done`" in mig["fix"] and "reboot" in mig["fix"]
    assert "-dgi" in mig["fix"]  # MIG instances go first
    (line,) = [x for x in preflight_failures(list(checks.values())) if x.startswith("mig_mode: ")]
    assert "gpu_facts.state.mig_enabled" in line and "Fix: turn MIG off" in line


def test_mig_on_one_gpu_names_only_that_gpu():
    mig = state_checks(state_facts(per_gpu={5: {"mig.mode.current": "Enabled", "mig.mode.pending": "Enabled"}}))[
        "mig_mode"
    ]
    assert (mig["status"], mig["measured"]) == ("fail", [5])
    assert "`sudo nvidia-smi -i 5 -mig 0`" in mig["fix"] and "`sudo nvidia-smi -i 5 -r`" in mig["fix"]


def test_mig_turning_on_at_the_next_reset_fails_before_the_reboot_makes_it_so():
    mig = state_checks(state_facts(per_gpu={2: {"mig.mode.pending": "Enabled"}}))["mig_mode"]
    assert (mig["status"], mig["measured"]) == ("fail", [2])
    assert "GPU 2 turns it on at the next GPU reset or reboot (pending Enabled)" in mig["detail"]
    assert "`sudo nvidia-smi -i 2 -mig 0`" in mig["fix"]
    assert "-r`" not in mig["fix"]  # MIG is off now: setting it back needs no reset


def test_mig_already_set_to_go_off_needs_only_the_reset():
    mig = state_checks(state_facts(per_gpu={3: {"mig.mode.current": "Enabled", "mig.mode.pending": "Disabled"}}))[
        "mig_mode"
    ]
    assert mig["status"] == "fail"
    assert "GPU 3 is already set to turn it off at the next GPU reset" in mig["detail"]
    assert "-mig 0" not in mig["fix"]
    assert "`sudo nvidia-smi -i 3 -r`" in mig["fix"]


def test_ecc_disabled_warns_with_the_command_and_the_reboot():
    facts = state_facts(per_gpu={4: {"ecc.mode.current": "Disabled", "ecc.mode.pending": "Disabled"}})
    checks = preflight_checks(facts, HOST, REQUIREMENTS)
    ecc = by_name(checks)["ecc_mode"]
    assert (ecc["status"], ecc["measured"]) == ("warn", [4])
    assert "ECC is off at GPU 4" in ecc["detail"] and "vLLM still runs" in ecc["detail"]
    assert ecc["fix"].startswith("`sudo nvidia-smi -i 4 -e 1`, then reboot")
    assert failed(checks) == []  # a warning: the run goes on


def test_ecc_already_set_to_come_on_needs_only_the_reboot():
    ecc = state_checks(state_facts(per_gpu={2: {"ecc.mode.current": "Disabled", "ecc.mode.pending": "Enabled"}}))[
        "ecc_mode"
    ]
    assert ecc["status"] == "warn"
    assert ecc["fix"].startswith("reboot") and "-e 1" not in ecc["fix"]


def test_ecc_turning_off_at_the_next_reboot_warns():
    ecc = state_checks(state_facts(per_gpu={6: {"ecc.mode.pending": "Disabled"}}))["ecc_mode"]
    assert (ecc["status"], ecc["measured"]) == ("warn", [6])
    assert "GPU 6 turns it off at the next reboot (pending Disabled)" in ecc["detail"]
    assert "`sudo nvidia-smi -i 6 -e 1`" in ecc["fix"]


def test_pages_pending_retirement_warn_with_the_reset():
    # a GPU that retires pages (before Ampere): the flag is Yes on GPU 1
    check = state_checks(state_facts(per_gpu={1: {"retired_pages.pending": True}}))["retired_pages_pending"]
    assert (check["status"], check["measured"]) == ("warn", [1])
    assert "Pending Page Blacklist: Yes" in check["detail"]
    assert "`sudo nvidia-smi -i 1 -r`" in check["fix"] and "reboot" in check["fix"]


def test_pending_row_remap_warns_with_the_reset():
    checks = preflight_checks(state_facts(per_gpu={4: {"remapped_rows.pending": True}}), HOST, REQUIREMENTS)
    check = by_name(checks)["row_remap_pending"]
    assert (check["status"], check["fact"], check["measured"]) == ("warn", "gpu_facts.state.remapped_rows_pending", [4])
    assert "next GPU reset" in check["detail"]
    assert "`sudo nvidia-smi -i 4 -r`" in check["fix"] and "reboot" in check["fix"]
    assert failed(checks) == []


def test_row_remap_failure_fails_with_the_rma():
    checks = preflight_checks(state_facts(per_gpu={5: {"remapped_rows.failure": True}}), HOST, REQUIREMENTS)
    assert failed(checks) == ["row_remap_failure"]
    check = by_name(checks)["row_remap_failure"]
    assert check["measured"] == [5]
    assert "tensor parallel 8 needs every GPU" in check["detail"]
    assert "replace the GPU" in check["fix"] and "RMA" in check["fix"] and "field diagnostic" in check["fix"]
    assert "`nvidia-smi -q -d ROW_REMAPPER -i 5`" in check["fix"]


def test_every_fault_at_once_is_reported_together():
    facts = state_facts("synthetic/a800-x8-query-state-faults.csv")
    checks = preflight_checks(facts, HOST, REQUIREMENTS)
    assert failed(checks) == ["mig_mode", "row_remap_failure"]
    status = {c["name"]: c["status"] for c in checks}
    assert (status["ecc_mode"], status["row_remap_pending"], status["retired_pages_pending"]) == (
        "warn",
        "warn",
        "pass",
    )
    assert by_name(checks)["mig_mode"]["measured"] == [1, 3]
    assert by_name(checks)["ecc_mode"]["measured"] == [2, 6]
    assert by_name(checks)["row_remap_pending"]["measured"] == [4, 5]
    lines = preflight_failures(checks)
    assert [line.split(":")[0] for line in lines] == ["mig_mode", "row_remap_failure"]
    assert all("Fix: " in line for line in lines)


def test_a_state_word_the_parser_does_not_know_warns_as_printed():
    check = state_checks(state_facts(per_gpu={0: {"mig.mode.current": "Pending Reset"}}))["mig_mode"]
    assert check["status"] == "warn"
    assert "GPU 0 mig.mode.current = 'Pending Reset'" in check["detail"]
    assert "nvidia-smi --query-gpu=index,mig.mode.current --format=csv" in check["fix"]


def test_state_not_reported_or_not_read_passes_and_says_so():
    na = state_checks(state_facts(**{"remapped_rows.pending": None, "remapped_rows.failure": None}))
    assert na["row_remap_pending"]["status"] == "pass"
    assert "not reported by these GPUs" in na["row_remap_pending"]["detail"]
    # facts read with the identity fields only (a driver without the state fields, or facts of an older release)
    old = state_checks(a800())
    for name in STATE_CHECKS:
        assert old[name]["status"] == "pass", name
    assert "not read (mig.mode.current is not a field of this driver's --query-gpu)" in old["mig_mode"]["detail"]
