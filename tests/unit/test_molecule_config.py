"""The Molecule scenarios share one configuration: .config/molecule/config.yml, which `molecule` reads first (its
--base-config default, found at the root of the git repository) and on which it deep-merges each scenario's
molecule.yml (molecule/config.py, Config._combine: mappings key by key, a list or a value replaces). Each scenario is
loaded here through Molecule's own code, as its CLI loads it (no container, no Docker), and the settings the test bed
relies on must be in force in every one; no scenario may repeat what the shared file already sets."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT

SHARED = ROOT / ".config/molecule/config.yml"
SCENARIOS = sorted(path.parent.name for path in (ROOT / "molecule").glob("*/molecule.yml"))


@pytest.fixture(scope="module")
def molecule(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The base configuration `molecule` finds and, per scenario, the merged configuration and what Molecule derives
    from it, loaded as `molecule list` loads them (from the repository root, MOLECULE_PROJECT_DIRECTORY unset). Each
    scenario's ephemeral directory (state file, inventory) is a temporary one: a Molecule run in this checkout is not
    disturbed."""
    scenarios: dict[str, dict[str, Any]] = {}
    root = logging.getLogger()  # importing molecule.shell configures the root logger: restored after
    saved = (root.handlers[:], root.level, root.propagate)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(ROOT)
            for name in ("MOLECULE_PROJECT_DIRECTORY", "MOLECULE_GLOB", "MOLECULE_EPHEMERAL_DIRECTORY"):
                mp.delenv(name, raising=False)
            # Molecule asks the toolchain's ansible-config and ansible for the runtime, found as the CLI finds them.
            mp.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
            from molecule.command import base
            from molecule.shell import ENV_FILE, LOCAL_CONFIG_SEARCH
            from molecule.util import lookup_config_file

            found = lookup_config_file(LOCAL_CONFIG_SEARCH)
            # What molecule.shell.main passes to every subcommand when no option is given.
            args = {"debug": False, "verbose": 0, "base_config": [found] if found else [], "env_file": ENV_FILE}
            for name in SCENARIOS:
                mp.setenv("MOLECULE_EPHEMERAL_DIRECTORY", str(tmp_path_factory.mktemp(f"molecule-{name}")))
                (config,) = base.get_configs(args, {"subcommand": "list"}, glob_str=f"molecule/{name}/molecule.yml")
                provisioner = config.provisioner
                assert provisioner is not None
                playbooks = provisioner.playbooks
                scenarios[name] = {
                    "data": config.config_data,
                    "env": provisioner.env,  # what ansible-playbook is started with
                    "playbooks": {"create": playbooks.create, "destroy": playbooks.destroy},
                    "converge": playbooks.converge,
                    "links": provisioner.links,
                }
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        root.propagate = saved[2]
    return {"found": found, "scenarios": scenarios}


def test_molecule_finds_the_shared_configuration(molecule):
    assert molecule["found"] == str(SHARED), (
        "molecule does not find .config/molecule/config.yml: it looks for it at the root of the git repository it "
        "runs in (molecule/util.py, lookup_config_file)"
    )


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_runs_with_the_test_beds_settings(molecule, name):
    scenario = molecule["scenarios"][name]
    data = scenario["data"]
    assert data["prerun"] is False
    assert data["dependency"]["name"] == "galaxy"
    assert data["dependency"]["enabled"] is False
    assert data["driver"]["name"] == "default"
    assert data["driver"]["options"]["managed"] is True
    assert data["provisioner"]["name"] == "ansible"
    env = scenario["env"]
    assert env["ANSIBLE_PIPELINING"] == "true"
    assert env["ANSIBLE_CALLBACK_RESULT_FORMAT"] == "yaml"
    assert env["ANSIBLE_ROLES_PATH"] == f"{ROOT}/roles"
    assert env["ANSIBLE_COLLECTIONS_PATH"] == f"{ROOT}/collections:{ROOT}/.ansible-home/collections"
    assert scenario["links"]["group_vars"] == f"{ROOT}/inventories/sim/group_vars"
    # The shared create/destroy playbooks, resolved from the scenario's directory as Molecule resolves them.
    assert scenario["playbooks"] == {s: str(ROOT / f"molecule/shared/{s}.yml") for s in ("create", "destroy")}
    assert scenario["converge"] in (str(ROOT / "site.yml"), str(ROOT / "molecule" / name / "converge.yml"))
    verifier = data["verifier"]
    if (ROOT / "molecule" / name / "tests").is_dir():
        assert verifier["name"] == "testinfra"
        assert verifier["enabled"] is True
        assert verifier["options"]["durations"] == "0"
    else:
        assert verifier["enabled"] is False


def leaves(tree: dict[str, Any], path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every value of a mapping that is not itself a mapping, by its path of keys."""
    out: dict[tuple[str, ...], Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out |= leaves(value, (*path, key))
        else:
            out[(*path, key)] = value
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_no_scenario_repeats_the_shared_configuration(name):
    shared = leaves(yaml.safe_load(SHARED.read_text()))
    own = leaves(yaml.safe_load((ROOT / "molecule" / name / "molecule.yml").read_text()))
    repeated = sorted(".".join(path) for path, value in own.items() if path in shared and shared[path] == value)
    assert repeated == [], f"molecule/{name}/molecule.yml repeats .config/molecule/config.yml: {repeated}"


@pytest.mark.parametrize("name", SCENARIOS)
def test_no_scenario_writes_what_the_shared_keys_would_replace(name):
    """The shared file writes provisioner.env and provisioner.playbooks, the keys Molecule moves to ansible.env and
    ansible.playbooks after the merge, replacing those: a scenario's own ansible.env would be dropped without a word."""
    own = yaml.safe_load((ROOT / "molecule" / name / "molecule.yml").read_text())
    replaced = sorted(f"ansible.{key}" for key in ("env", "playbooks") if key in (own.get("ansible") or {}))
    assert replaced == [], f"molecule/{name}/molecule.yml: write {replaced} under provisioner, as the shared file does"
