"""The image role's unified-diff applier (plugins/module_utils/unified_diff.py), held to the standard tools.

Every diff here is made by `git diff` (as the recipe in docs/sm80-image.md makes them) from two real trees; the
applier's result must equal what `git apply` and GNU `patch --fuzz=0` make of the same diff, and it must refuse
what they refuse (a hunk whose context is gone) — with the patch file, the file, the hunk and the base digest named,
and nothing written.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.a800.vllm.plugins.module_utils import unified_diff as ud

MODULE = Path(ud.__file__)
DIGEST = "sha256:" + "ab" * 32
INDEXER = "".join(f"line {n}\n" for n in range(1, 41))

pytestmark = pytest.mark.skipif(not (shutil.which("git") and shutil.which("patch")), reason="needs git and patch")


def git_diff(tmp: Path, before: dict[str, str], after: dict[str, str]) -> str:
    """`git diff --no-renames` of two states of a vllm/ tree, paths a/vllm/... b/vllm/..."""
    repo = tmp / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    for state in (before, after):
        for path in list((repo / "vllm").rglob("*")) if (repo / "vllm").exists() else []:
            if path.is_file():
                path.unlink()
        for rel, text in state.items():
            (repo / "vllm" / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / "vllm" / rel).write_text(text)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "state"], check=True)
    return subprocess.run([*git, "diff", "--no-renames", "HEAD~1", "HEAD", "--", "vllm/"], check=True,
                          capture_output=True, text=True).stdout  # fmt: skip


def tree(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "vllm"
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def read_tree(pkg: Path) -> dict[str, str]:
    return {str(p.relative_to(pkg)): p.read_text() for p in sorted(pkg.rglob("*")) if p.is_file()}


def run_applier(pkg: Path, patches: list[tuple[str, str]], tmp: Path) -> subprocess.CompletedProcess:
    ctx = tmp / "ctx"
    (ctx / "patches").mkdir(parents=True, exist_ok=True)
    entries = []
    for name, text in patches:
        (ctx / "patches" / name).write_text(text)
        entries.append(
            {"name": name, "file": f"patches/{name}", "sha256": ud.hashlib.sha256(text.encode()).hexdigest()}
        )
    (ctx / "manifest.json").write_text(json.dumps({"base_digest": DIGEST, "patches": entries}))
    return subprocess.run([sys.executable, str(MODULE), "apply", str(pkg), str(ctx / "manifest.json")],
                          capture_output=True, text=True)  # fmt: skip


def reference(tool: str, base: dict[str, str], patch: str, tmp: Path) -> tuple[int, dict[str, str]]:
    """What git apply / GNU patch (no fuzz) make of the patch on a copy of the base tree."""
    root = tmp / f"ref-{tool}"
    if root.exists():
        shutil.rmtree(root)
    pkg = tree(root, base)
    cmd = ["git", "apply", "-p1", "-"] if tool == "git" else ["patch", "-p1", "--fuzz=0", "--batch", "--quiet"]
    rc = subprocess.run(cmd, cwd=root, input=patch, capture_output=True, text=True).returncode
    return rc, read_tree(pkg) if pkg.exists() else {}


CHANGES = {
    "a change in the middle": (
        {"layers/sparse_attn_indexer.py": INDEXER},
        {"layers/sparse_attn_indexer.py": INDEXER.replace("line 20\n", "line twenty\nguard\n")},
    ),
    "a new file and a deleted one": (
        {"a.py": "a = 1\n", "gone.py": "x = 1\ny = 2\n"},
        {"a.py": "a = 1\n", "backends/mla/triton_mla_sparse.py": "NAME = 'TRITON_MLA_SPARSE'\n"},
    ),
    "two hunks and no newline at the end": (
        {"m.py": INDEXER + "last"},
        {"m.py": INDEXER.replace("line 3\n", "line three\n") + "last changed"},
    ),
}


@pytest.mark.parametrize("case", CHANGES)
def test_result_equals_git_apply_and_gnu_patch(tmp_path: Path, case: str) -> None:
    before, after = CHANGES[case]
    diff = git_diff(tmp_path, before, after)
    pkg = tree(tmp_path / "ours", before)
    result = run_applier(pkg, [("0001-change.patch", diff)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert read_tree(pkg) == after
    for tool in ("git", "patch"):
        assert reference(tool, before, diff, tmp_path) == (0, after), tool


def test_a_moved_hunk_applies_at_its_offset_like_the_tools(tmp_path: Path) -> None:
    before = {"i.py": INDEXER}
    diff = git_diff(tmp_path, before, {"i.py": INDEXER.replace("line 30\n", "line thirty\n")})
    base = {"i.py": "".join(f"new {n}\n" for n in range(5)) + INDEXER}  # the release has five more lines on top
    pkg = tree(tmp_path / "ours", base)
    result = run_applier(pkg, [("0001.patch", diff)], tmp_path)
    assert result.returncode == 0, result.stdout
    assert "hunk 1 applied (offset +5 lines)" in result.stdout
    assert reference("git", base, diff, tmp_path) == (0, read_tree(pkg))


def test_a_hunk_that_does_not_fit_fails_naming_patch_file_hunk_and_base_and_writes_nothing(tmp_path: Path) -> None:
    before = {"i.py": INDEXER, "other.py": "o = 1\n"}
    good = git_diff(tmp_path, before, {"i.py": INDEXER, "other.py": "o = 2\n"})
    main = INDEXER.replace("line 3\n", "line three\n").replace("line 30\n", "line thirty\n")
    written_against_main = git_diff(tmp_path, {"i.py": main}, {"i.py": main.replace("line 31\n", "guard\n")})
    pkg = tree(tmp_path / "ours", before)
    result = run_applier(pkg, [("0001-good.patch", good), ("0002-main.patch", written_against_main)], tmp_path)
    assert result.returncode == 1
    failed = [line for line in result.stdout.splitlines() if "FAILED" in line]
    assert len(failed) == 1, result.stdout
    assert "0002-main.patch: vllm/i.py hunk 1 (@@ -28,7 +28,7 @@" in failed[0]
    assert '"line thirty"' in failed[0] and '"line 30"' in failed[0]
    assert DIGEST in failed[0]
    assert read_tree(pkg) == before  # the good patch before it was not written either
    for tool in ("git", "patch"):
        assert reference(tool, before, written_against_main, tmp_path)[0] != 0, tool


def test_a_patch_already_in_the_base_is_named_so(tmp_path: Path) -> None:
    after = {"i.py": INDEXER.replace("line 20\n", "guard\n")}
    diff = git_diff(tmp_path, {"i.py": INDEXER}, after)
    pkg = tree(tmp_path / "ours", after)
    result = run_applier(pkg, [("0001.patch", diff)], tmp_path)
    assert result.returncode == 1
    assert "its result is already in the file (the base has this change)" in result.stdout


def test_patches_apply_in_order_each_on_the_result_of_the_one_before(tmp_path: Path) -> None:
    one = {"i.py": INDEXER.replace("line 20\n", "step one\n")}
    two = {"i.py": one["i.py"].replace("step one\n", "step two\n")}
    first, second = git_diff(tmp_path, {"i.py": INDEXER}, one), git_diff(tmp_path, one, two)
    pkg = tree(tmp_path / "ours", {"i.py": INDEXER})
    assert run_applier(pkg, [("0001.patch", first), ("0002.patch", second)], tmp_path).returncode == 0
    assert read_tree(pkg) == two
    pkg2 = tree(tmp_path / "reversed", {"i.py": INDEXER})
    assert run_applier(pkg2, [("0002.patch", second), ("0001.patch", first)], tmp_path).returncode == 1


def test_a_patch_file_changed_after_the_manifest_was_written_is_refused(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, {"i.py": INDEXER}, {"i.py": INDEXER.replace("line 2\n", "two\n")})
    pkg = tree(tmp_path / "ours", {"i.py": INDEXER})
    ctx = tmp_path / "ctx"
    (ctx / "patches").mkdir(parents=True)
    (ctx / "patches" / "p.patch").write_text(diff)
    (ctx / "manifest.json").write_text(json.dumps({"patches": [{"name": "p.patch", "file": "patches/p.patch",
                                                                "sha256": "0" * 64}]}))  # fmt: skip
    result = subprocess.run([sys.executable, str(MODULE), "apply", str(pkg), str(ctx / "manifest.json")],
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 1 and "the manifest says" in result.stdout
    assert read_tree(pkg) == {"i.py": INDEXER}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "diff --git a/vllm/a.py b/vllm/b.py\nsimilarity index 90%\nrename from vllm/a.py\n", "rename", id="rename"
        ),
        pytest.param(
            "diff --git a/vllm/w.bin b/vllm/w.bin\nBinary files a/vllm/w.bin and b/vllm/w.bin differ\n",
            "binary",
            id="binary",
        ),
        pytest.param(
            "--- a/setup.py\n+++ b/setup.py\n@@ -1 +1 @@\n-a\n+b\n",
            "not a file of the vllm/ tree",
            id="outside-the-package",
        ),
        pytest.param(
            "--- a/vllm/../etc/x\n+++ b/vllm/../etc/x\n@@ -1 +1 @@\n-a\n+b\n", "not a file of the vllm/", id="dot-dot"
        ),
        pytest.param(
            "--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1,3 +1,3 @@\n-a\n+b\n", "promises 3 old", id="hunk-header-count"
        ),
        pytest.param("just some text\n", "no file changes found", id="not-a-diff"),
        pytest.param("--- a/vllm/a.py\n+++ b/vllm/a.py\n", "no hunk", id="header-only"),
    ],
)
def test_malformed_patches_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ud.PatchFormatError, match=message):
        ud.parse(text, "p.patch")


def test_summary_names_files_hunks_and_sha256(tmp_path: Path) -> None:
    after = {"a.py": INDEXER.replace("line 3\n", "3\n").replace("line 33\n", "x\n"), "new.py": "n = 1\n"}
    diff = git_diff(tmp_path, {"a.py": INDEXER}, after)
    summary = ud.patch_summary(diff, "0001.patch")
    assert summary["files"] == ["vllm/a.py", "vllm/new.py"]
    assert summary["created"] == ["vllm/new.py"]
    assert summary["hunks"] == 3
    assert len(summary["sha256"]) == 64
