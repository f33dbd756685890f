"""Whether the page cache can hold the weights (plugins/module_utils/weights_ram.py): the one decision of the
preflight's `ram` check and of the weights role's prewarm, with its numbers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter import preflight, weights_ram
from ansible_collections.a800.vllm.plugins.module_utils.weights_ram import duration, ram_fit
from conftest import ROOT, ansible_adhoc

PROD_PROFILE = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"]
WEIGHTS_GB = PROD_PROFILE["weights"]["size_gb"]  # 433
HEADROOM_GB = PROD_PROFILE["hardware"]["ram_headroom_gb"]  # 64
COLD_GB_PER_S = PROD_PROFILE["load_time"]["cold_gb_per_s"]  # 0.33: the article's ~22 min for 433 GB
WEIGHTS_TASKS = ROOT / "roles" / "weights" / "tasks" / "main.yml"


def fit(ram, keep_resident=False, **changes):
    args = {"weights_gb": WEIGHTS_GB, "headroom_gb": HEADROOM_GB, "cold_gb_per_s": COLD_GB_PER_S, **changes}
    return ram_fit(ram, args["weights_gb"], args["headroom_gb"], args["cold_gb_per_s"], keep_resident)


def test_the_profile_is_the_article_s():
    """The figures below are the prod profile's; the profile's rate is the article's cold load (docs/article.md)."""
    assert (WEIGHTS_GB, HEADROOM_GB, COLD_GB_PER_S) == (433, 64, 0.33)
    article = (ROOT / "docs" / "article.md").read_text()
    assert "about 22 minutes cold" in article


@pytest.mark.parametrize(
    ("ram", "keep", "status", "prewarm"),
    [
        (1007.5, False, "pass", True),
        (462.9, False, "pass", True),  # (433 + 64) GB = 462.9 GiB exactly
        (462.8, False, "warn", False),
        (251.5, False, "warn", False),
        (462.8, True, "fail", False),
        (251.5, "true", "fail", False),
        (462.9, True, "pass", True),
    ],
)
def test_pass_warn_fail(ram, keep, status, prewarm):
    decision = fit(ram, keep)
    assert decision["status"] == status
    assert decision["prewarm"] is prewarm and decision["fits"] is prewarm
    assert decision["need_gib"] == 462.9
    assert decision["ram_gib"] == ram


def test_warning_names_the_cost_of_every_restart():
    decision = fit(251.5)
    assert decision["cold_load_s"] == 1312  # 433 GB / 0.33 GB/s
    assert decision["cold_load"] == "~22 min"
    assert decision["detail"] == (
        "RAM: found 251.5 GiB, below the 462.9 GiB (433 GB weights + 64 GB headroom) that keep the weights in the "
        "page cache: every server restart is a cold load from disk, ~22 min for 433 GB at 0.33 GB/s "
        "(model_profile.load_time.cold_gb_per_s, docs/article.md#load-times), and the weights phase skips the "
        "page-cache prewarm"
    )
    assert decision["note"].startswith("prewarm skipped: 251.5 GiB of RAM cannot hold 433 GB of weights next to 64 GB")
    assert "~22 min" in decision["note"]


@pytest.mark.parametrize(
    ("weights_gb", "rate", "cold"),
    [(433, 0.33, "~22 min"), (433, 0.165, "~44 min"), (866, 0.33, "~44 min"), (2, 0.33, "~6 s"), (30, 0.33, "~2 min")],
)
def test_cold_load_is_computed_from_size_and_rate(weights_gb, rate, cold):
    decision = fit(1.0, weights_gb=weights_gb, cold_gb_per_s=rate)
    assert decision["cold_load"] == cold
    assert f"{cold} for {weights_gb:g} GB at {rate:g} GB/s" in decision["detail"]


def test_locked_resident_fails_with_the_variable_and_the_fix():
    decision = fit(251.5, True)
    assert "to lock the weights resident (weights_keep_resident: true)" in decision["detail"]
    assert decision["fix"].startswith("set weights_keep_resident: false (every restart is then a cold load")
    assert "at least 462.9 GiB" in decision["fix"]


@pytest.mark.parametrize(
    ("changes", "variable"),
    [
        ({"cold_gb_per_s": 0}, "model_profile.load_time.cold_gb_per_s"),
        ({"cold_gb_per_s": "fast"}, "model_profile.load_time.cold_gb_per_s"),
        ({"weights_gb": None}, "model_profile.weights.size_gb"),
        ({"headroom_gb": -1}, "ram_headroom_gb"),
    ],
)
def test_bad_input_names_the_variable(changes, variable):
    with pytest.raises(ValueError, match=variable.replace(".", r"\.")):
        fit(251.5, **changes)


def test_duration():
    assert duration(1312) == "~22 min"
    assert duration(89) == "~89 s"
    assert duration(90) == "~2 min"


def test_preflight_and_the_weights_filter_decide_alike():
    requirements = {
        "weights_size_gb": str(WEIGHTS_GB),
        "ram_headroom_gb": str(HEADROOM_GB),
        "cold_gb_per_s": str(COLD_GB_PER_S),
    }
    for ram in (100.0, 462.8, 462.9, 1007.5):
        for keep in (False, True):
            host = {"mem_total_gib": ram, "weights": {}}
            (record,) = [
                c for c in preflight.host_checks(host, dict(requirements, keep_resident=keep)) if c["name"] == "ram"
            ]
            decision = weights_ram.weights_ram_fit(ram, WEIGHTS_GB, HEADROOM_GB, COLD_GB_PER_S, keep)
            assert (record["status"], record["detail"], record["fix"]) == (
                decision["status"],
                decision["detail"],
                decision["fix"],
            )


def test_weights_role_skips_the_prewarm_on_the_decision():
    """The role reads the decision (weights_ram_fit) before it starts the prewarm, and says why it skips it."""
    tasks = {t["name"]: t for t in yaml.safe_load(WEIGHTS_TASKS.read_text())}
    names = list(tasks)
    decide = tasks["Decide whether the page cache can hold the weights"]
    assert "a800.vllm.weights_ram_fit(" in decide["ansible.builtin.set_fact"]["weights_ram_fit"]
    assert "weights_keep_resident" in decide["ansible.builtin.set_fact"]["weights_ram_fit"]
    start = tasks["Start the prewarm in the background"]
    assert "weights_ram_fit.prewarm" in start["when"]
    skip = tasks["Say why the prewarm is skipped"]
    assert skip["ansible.builtin.debug"]["msg"] == "{{ weights_ram_fit.note }}"
    assert "not weights_ram_fit.prewarm" in skip["when"]
    locked = tasks["Locked weights need RAM for the weights and the headroom"]
    assert locked["when"] == "weights_ram_fit.status == 'fail'"
    assert names.index("Decide whether the page cache can hold the weights") < names.index(
        "Start the prewarm in the background"
    )


def test_filter_runs_in_ansible():
    """The FQCN the weights role uses resolves in Ansible and returns the decision as data."""
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip(f"ansible not installed beside {sys.executable}")
    expr = "{{ 251.5 | a800.vllm.weights_ram_fit(433, 64, 0.33, false) }}"
    rc, out, raw = ansible_adhoc("localhost", "-c", "local", "-i", "localhost,", "-m", "debug", "-a", f"msg={expr}")
    assert rc == 0 and out, raw
    msg = out["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    assert msg["status"] == "warn" and msg["prewarm"] is False and msg["cold_load"] == "~22 min"
