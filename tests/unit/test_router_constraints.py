"""The gateway's router as it is installed: vllm-router's wheel leaves its dependencies unpinned, so the fleet role
installs it with a constraints file of the repository (roles/fleet/files, named by the BOM), and the offline bundle
downloads the same set for each release's Python. The file must pin exactly one version of every package pip
resolves on each gateway Python, and nothing else; wheels of another Python must be refused by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.fleet import fleet_router_constraints, fleet_router_wheel_problems
from conftest import ROOT
from packaging.utils import canonicalize_name

BOM = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/bom.yml").read_text())["bom"]
CONSTRAINTS = ROOT / "roles/fleet/files" / BOM["vllm_router"]["constraints"]
PLATFORMS = [
    yaml.safe_load(p.read_text())["a800_platform"] for p in sorted((ROOT / "roles/a800/vars/platform").glob("*.yml"))
]
PYTHONS = sorted({p["python"] for p in PLATFORMS})
PIP_TIMEOUT_S = 600  # a safety net: a resolution from pip's cache returns in seconds
VERSION = BOM["vllm_router"]["version"]


def pins(python: str) -> dict[str, str]:
    lines = fleet_router_constraints(CONSTRAINTS.read_text(), python).splitlines()
    return {canonicalize_name(line.split("==")[0]): line.split("==")[1] for line in lines}


def test_every_release_names_its_python_and_the_gateways_run_these():
    assert {p["key"]: p["python"] for p in PLATFORMS} == {
        "Debian_12": "3.11",
        "Ubuntu_22.04": "3.10",
        "Ubuntu_24.04": "3.12",
    }


@pytest.mark.parametrize("python", PYTHONS)
def test_the_constraints_pin_one_version_of_each_package_and_the_boms_router(python):
    text = fleet_router_constraints(CONSTRAINTS.read_text(), python)
    names = [canonicalize_name(line.split("==")[0]) for line in text.splitlines()]
    assert len(names) == len(set(names)), f"a package pinned twice for {python}"
    assert pins(python)["vllm-router"] == VERSION
    assert all(";" not in line and "==" in line for line in text.splitlines())


def test_a_second_pin_of_one_package_for_one_python_is_refused():
    with pytest.raises(ValueError, match=r"uvicorn is pinned twice for Python 3\.12 \(0\.55\.0 and 0\.54\.0\)"):
        fleet_router_constraints('uvicorn==0.55.0\nuvicorn==0.54.0; python_version >= "3.11"\n', "3.12")
    with pytest.raises(ValueError, match="must pin one version"):
        fleet_router_constraints("uvicorn>=0.54\n", "3.12")


def test_a_marker_picks_the_pin_of_each_python():
    text = 'fastapi==0.165.0; python_version >= "3.11"\nfastapi==0.162.5; python_version < "3.11"\n'
    assert fleet_router_constraints(text, "3.10") == "fastapi==0.162.5\n"
    assert fleet_router_constraints(text, "3.12") == "fastapi==0.165.0\n"


@pytest.mark.parametrize("python", PYTHONS)
def test_pip_resolves_the_router_to_exactly_the_pinned_set(python, tmp_path: Path):
    """Complete: pip's own resolver (from the package index, as the gateway's pip), for that Python's CPython and a
    manylinux platform, installs the router with the constraints; every package it would install is pinned, at that
    version, and every pin is used. A dependency the file lacks would be resolved to whatever the index has."""
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(fleet_router_constraints(CONSTRAINTS.read_text(), python))
    report = tmp_path / "report.json"
    # fmt: off
    run = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--disable-pip-version-check", "--report", str(report), "--target", str(tmp_path / "target"),
         "--only-binary=:all:", "--implementation", "cp", "--python-version", python,
         "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
         f"vllm-router=={VERSION}", "-c", str(constraints)],
        capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False,
    )
    # fmt: on
    assert run.returncode == 0, f"pip cannot install the pinned set on Python {python}:\n{run.stderr[-3000:]}"
    installs = json.loads(report.read_text())["install"]
    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}
    assert resolved == pins(python)


def manifest(python: str, files: list[str], version: str = VERSION) -> dict:
    return {
        "items": [
            {"kind": "apt", "name": "Ubuntu_22.04", "path": "apt/Ubuntu_22.04"},
            {"kind": "router_wheels", "name": "Ubuntu_22.04", "python": python, "version": version,
             "path": "router-wheels/Ubuntu_22.04", "files": files},
        ]
    }  # fmt: skip


CP310 = [
    "constraints.txt",
    f"vllm_router-{VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl",
    "aiohttp-3.14.5-cp310-cp310-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "idna-3.20-py3-none-any.whl",
]
CP312 = [f.replace("cp310", "cp312") for f in CP310]


def test_wheels_for_cp310_are_refused_for_a_cp312_gateway_naming_both():
    problems = fleet_router_wheel_problems(manifest("cp310", CP310), "cp312", VERSION, "/srv/a800-bundle")
    assert len(problems) == 1
    assert "cp310 (Ubuntu_22.04)" in problems[0] and "this gateway's python3 is cp312" in problems[0]
    assert "/srv/a800-bundle" in problems[0]


def test_wheels_for_the_gateways_python_are_accepted():
    assert fleet_router_wheel_problems(manifest("cp312", CP312), "cp312", VERSION, "/b") == []
    assert fleet_router_wheel_problems(manifest("cp310", CP310), "cp310", VERSION, "/b") == []


def test_a_wheel_of_another_python_in_the_gateways_set_is_named():
    files = [*CP312, "multidict-7.2.1-cp311-cp311-manylinux2014_x86_64.whl"]
    problems = fleet_router_wheel_problems(manifest("cp312", files), "cp312", VERSION, "/b")
    assert problems == [
        "the offline bundle's router-wheels/Ubuntu_22.04/multidict-7.2.1-cp311-cp311-manylinux2014_x86_64.whl is not "
        "for cp312: collect the bundle again (make bundle) with the gateway's release in bundle_platforms, copy it to "
        "the gateway, or set fleet_router_bundle to '' and give pip an index (fleet_router_pip_args)"
    ]


def test_another_router_version_no_router_wheels_and_no_manifest_are_refused():
    [other] = fleet_router_wheel_problems(manifest("cp312", CP312, "0.1.16"), "cp312", VERSION, "/b")
    assert "vllm-router 0.1.16 for cp312, the BOM pins " + VERSION in other
    [none] = fleet_router_wheel_problems({"items": [{"kind": "apt", "name": "x"}]}, "cp312", VERSION, "/b")
    assert "/b has no vllm-router wheels" in none
    [missing] = fleet_router_wheel_problems(None, "cp312", VERSION, "/b")
    assert "fleet_router_bundle is /b, but /b/manifest.json is not on this gateway" in missing
    [bad] = fleet_router_wheel_problems(manifest("cp312", CP312), "cp", VERSION, "/b")
    assert "not a CPython tag" in bad
