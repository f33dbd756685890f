"""The phases are written once (a800vllm/phases.yml): site.yml imports their playbooks in that order, the Python API
and CLI offer them, the README's table is generated from them, and every tag and playbook named there exists."""

from __future__ import annotations

import yaml
from conftest import ROOT

from a800vllm.phases import PHASES, load_phases


def imported_playbooks(path) -> list[str]:
    return [play["ansible.builtin.import_playbook"] for play in yaml.safe_load(path.read_text())]


def test_site_yml_imports_the_phases_in_their_order_then_the_summary():
    data = yaml.safe_load((ROOT / "a800vllm" / "phases.yml").read_text())
    wanted = [*dict.fromkeys(p["playbook"] for p in data["phases"]), data["last"]]
    assert imported_playbooks(ROOT / "site.yml") == wanted


def test_each_phase_playbook_exists_and_carries_its_tag():
    for phase in load_phases():
        for key in ("playbook", "alone"):
            if phase.get(key):
                plays = yaml.safe_load((ROOT / phase[key]).read_text())
                tags = {t for play in plays for t in play.get("tags", [])}
                roles = {r.get("role") if isinstance(r, dict) else r for play in plays for r in play.get("roles", [])}
                assert phase["tag"] in tags | roles | {r for play in plays for r in _role_tags(play)}, (phase, key)


def _role_tags(play: dict) -> list[str]:
    return [t for r in play.get("roles", []) if isinstance(r, dict) for t in r.get("tags", [])]


def test_the_api_and_cli_offer_every_phase_in_order_with_its_opt_in():
    names = [p["name"] for p in load_phases()]
    assert list(PHASES) == ["deploy", *names, "upgrade", "status"]
    for phase in load_phases():
        api = PHASES[phase["name"]]
        assert (api.playbook, api.tags) == ("site.yml", phase["tag"])
        assert dict(api.extravars) == ({phase["opt_in"]: True} if phase.get("opt_in") else {})


def test_every_play_lists_the_role_a800_first():
    for path in [*sorted((ROOT / "playbooks").glob("*.yml")), ROOT / "a800vllm" / "playbooks" / "status.yml"]:
        for play in yaml.safe_load(path.read_text()):
            if any(key.endswith("import_playbook") for key in play):  # upgrade.yml ends with the serve phase
                continue
            roles = [r.get("role") if isinstance(r, dict) else r for r in play.get("roles", [])]
            assert roles[:1] == ["a800"], (path.name, play.get("name"))
