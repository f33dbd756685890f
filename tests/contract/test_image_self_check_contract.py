"""The image role's sm80 self-check (roles/image/files/sm80_self_check.py) held to the real vLLM package.

The test double's package has vLLM's module paths and names; this runs the same script against the real vLLM
(CPU build of upstream 0.32.0 in .venv-vllm), which has no TRITON_MLA_SPARSE: the script must reach the real
registry, metadata and indexer modules by the names it uses, fail the way a stock image fails, with the real
messages, and those messages must be the error catalogue's. The metadata check constructs the real
XPUMLASparseMetadata, which has had the counts with defaults since vLLM PR #52066.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.image_inputs import image_self_check_diagnosis
from real_vllm import vllm_env, vllm_python

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles" / "image" / "files" / "sm80_self_check.py"
CATALOGUE = yaml.safe_load((ROOT / "roles/a800/defaults/main/catalogue.yml").read_text())["a800_error_catalogue"]

pytestmark = pytest.mark.contract


def real(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([vllm_python(), *args], capture_output=True, text=True, env=vllm_env(), timeout=300)


@pytest.fixture(scope="module")
def stock() -> subprocess.CompletedProcess:
    return real(str(SCRIPT), "--capability", "8.0")


def script(code: str) -> str:
    """Run `code` with the real vLLM's Python, the self-check script's functions in `ns`; its stdout."""
    run = real("-c", "import runpy, sys; ns = runpy.run_path(sys.argv[1])\n" + code, str(SCRIPT))
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def line(run: subprocess.CompletedProcess, check: str) -> str:
    return next(x for x in run.stdout.splitlines() if x.startswith("sm80 self-check: ") and f" {check}: " in x)


def test_a_stock_vllm_fails_the_check_with_the_real_registry_message(stock):
    assert stock.returncode == 1, stock.stdout + stock.stderr
    assert "Unknown attention backend: 'TRITON_MLA_SPARSE'. Valid options are:" in line(stock, "enum")
    assert "FLASHMLA_SPARSE" in line(stock, "enum")  # the real enum's members, listed by vLLM itself


def test_the_real_indexer_imports_and_its_missing_fallback_is_named(stock):
    assert "No module named 'vllm.v1.attention.ops.mqa_logits_triton'" in line(stock, "indexer")


def test_the_catalogue_names_the_cause_of_a_stock_image(stock):
    names = [d["name"] for d in image_self_check_diagnosis(stock.stdout, CATALOGUE)]
    assert names[:1] == ["sparse_backend_missing"]
    assert "sparse_indexer_fallback_missing" in names


def test_the_metadata_check_constructs_the_real_sparse_metadata_class():
    out = script(
        "from vllm.v1.attention.backends.mla.xpu_mla_sparse import XPUMLASparseBackend\n"
        "print(ns['check_metadata']({'backend': XPUMLASparseBackend}))"
    )
    assert "XPUMLASparseMetadata constructs with num_decodes, num_prefills, num_decode_tokens" in out


def test_the_platform_candidates_are_read_from_the_real_source():
    """The CPU build cannot import vllm.platforms.cuda (no CUDA extension), as a CUDA image without a driver may not:
    reading _get_backend_priorities from the source must find the real function, a name it has and one it lacks."""
    out = script(
        "f = ns['_candidates_from_source']\n"
        "print(f((8, 0), 'no driver', 'FLASHMLA_SPARSE'))\n"
        "try:\n    f((8, 0), 'no driver')\nexcept Exception as exc:\n    print('refused:', exc)\n"
    )
    assert "FLASHMLA_SPARSE is in _get_backend_priorities" in out
    assert "refused: _get_backend_priorities in " in out and "never names TRITON_MLA_SPARSE" in out
