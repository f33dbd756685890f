"""The image role's build-time text patcher (roles/image/files/apply_text_patches.py): applies exactly what it is
told, and fails the build, writing nothing, when a search text does not occur exactly `count` times."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "roles" / "image" / "files" / "apply_text_patches.py"
patcher = load_script(SCRIPT)

INDEXER = "if has_deep_gemm():\n    use_deep_gemm()\n"


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    root = tmp_path / "vllm"
    (root / "model_executor" / "layers").mkdir(parents=True)
    (root / "model_executor" / "layers" / "sparse_attn_indexer.py").write_text(INDEXER + "x = 1\nx = 1\n")
    (root / "other.py").write_text("a = 1\n")
    return root


def run(pkg: Path, patches: list[dict], tmp_path: Path) -> subprocess.CompletedProcess:
    spec = tmp_path / "patches.json"
    spec.write_text(json.dumps(patches))
    return subprocess.run([sys.executable, str(SCRIPT), str(pkg), str(spec)], capture_output=True, text=True)


def test_applies_a_patch(pkg: Path, tmp_path: Path) -> None:
    patch = {
        "path": "model_executor/layers/sparse_attn_indexer.py",
        "search": "if has_deep_gemm():",
        "replace": "if is_deep_gemm_supported():",
    }
    result = run(pkg, [patch], tmp_path)
    assert result.returncode == 0, result.stderr
    text = (pkg / "model_executor" / "layers" / "sparse_attn_indexer.py").read_text()
    assert "if is_deep_gemm_supported():" in text
    assert "has_deep_gemm" not in text
    assert "1 applied" in result.stdout


def test_count_must_match_exactly(pkg: Path, tmp_path: Path) -> None:
    target = pkg / "model_executor" / "layers" / "sparse_attn_indexer.py"
    before = target.read_text()
    result = run(pkg, [{"path": str(target.relative_to(pkg)), "search": "x = 1\n", "replace": "x = 2\n"}], tmp_path)
    assert result.returncode == 1
    assert "occurs 2 times, expected 1" in result.stderr
    assert target.read_text() == before


def test_count_of_several(pkg: Path) -> None:
    rel = "model_executor/layers/sparse_attn_indexer.py"
    patcher.apply_patches(pkg, [{"path": rel, "search": "x = 1\n", "replace": "x = 2\n", "count": 2}])
    assert (pkg / rel).read_text().count("x = 2\n") == 2


def test_search_not_found_fails_and_writes_nothing(pkg: Path) -> None:
    patches = [
        {"path": "other.py", "search": "a = 1", "replace": "a = 2"},
        {"path": "other.py", "search": "missing", "replace": "b"},
    ]
    with pytest.raises(patcher.PatchError, match="occurs 0 times, expected 1"):
        patcher.apply_patches(pkg, patches)
    assert (pkg / "other.py").read_text() == "a = 1\n"


def test_patches_of_one_file_apply_in_order(pkg: Path) -> None:
    patches = [
        {"path": "other.py", "search": "a = 1", "replace": "a = 2"},
        {"path": "other.py", "search": "a = 2", "replace": "a = 3"},
    ]
    patcher.apply_patches(pkg, patches)
    assert (pkg / "other.py").read_text() == "a = 3\n"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"path": "../evil.py", "search": "a", "replace": "b"}, "without '..'"),
        ({"path": "/etc/passwd", "search": "a", "replace": "b"}, "must be relative"),
        ({"path": "absent.py", "search": "a", "replace": "b"}, "does not exist"),
        ({"path": "other.py", "search": "", "replace": "b"}, "non-empty string"),
        ({"path": "other.py", "search": "a", "replace": "b", "count": 0}, "positive integer"),
        ({"path": "other.py", "search": "a", "replace": None}, "'replace' must be a string"),
    ],
)
def test_rejects_malformed_patches(pkg: Path, patch: dict, message: str) -> None:
    with pytest.raises(patcher.PatchError, match=message):
        patcher.apply_patches(pkg, [patch])


def test_no_patches_is_fine(pkg: Path, tmp_path: Path) -> None:
    result = run(pkg, [], tmp_path)
    assert result.returncode == 0
    assert "0 applied" in result.stdout
