"""The double's sm80 patch set (tests/doubles/vllm/patches/): real unified diffs against its vllm package, applied in
order by `git apply` and by the project's applier (plugins/module_utils/unified_diff.py) alike; the broken variants
fail as their real counterparts do (a hunk made against main, fields without defaults); and each guard, left out,
fails the start of the double with the line vLLM prints."""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.a800.vllm.plugins.module_utils.unified_diff import apply_all, parse, patch_summary
from conftest import ROOT
from harness import BROKEN_PATCHES, DOUBLE, NO_DEFAULTS, SM80_PATCHES, PatchSetError, apply_patches, make_install

SRC = DOUBLE / "src"
APPLIER = ROOT / "plugins" / "module_utils" / "unified_diff.py"
SELF_CHECK = ROOT / "roles" / "image" / "files" / "sm80_self_check.py"
FROM_MAIN = BROKEN_PATCHES / "0002-indexer-deepgemm-guard-from-main.patch"
INDEXER = "vllm/model_executor/layers/sparse_attn_indexer.py"
# vLLM issue #48285, as the error catalogue of the serve role matches it
CAPTURE_ERROR = re.compile(
    r"operation not permitted when stream is capturing|cudaErrorStreamCapture(Unsupported|Invalidated)"
    r"|Triton Error \[CUDA\]: operation not permitted"
)


def copy_of_src(dest: Path) -> Path:
    """A copy of the double's unpatched tree (the directory holding vllm/), without caches."""
    subprocess.run(["cp", "-r", str(SRC), str(dest)], check=True)
    for cache in dest.rglob("__pycache__"):
        subprocess.run(["rm", "-rf", str(cache)], check=True)
    return dest


def git_apply(tree: Path, patch: Path, *, check: bool) -> subprocess.CompletedProcess:
    """`git apply -p1` in a directory that is no git work tree (as on an image without a repository)."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    args = ["git", "apply", "-p1", *(["--check"] if check else []), str(patch)]
    return subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True, check=False)


def identical_trees(a: Path, b: Path) -> list[str]:
    """Paths that differ between two trees (missing on one side or different content)."""
    diff = filecmp.dircmp(a, b, ignore=["__pycache__"])
    out: list[str] = []

    def walk(d: filecmp.dircmp, prefix: str) -> None:
        out.extend(prefix + name for name in d.left_only + d.right_only + d.diff_files + d.funny_files)
        for name, sub in d.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(diff, "")
    return out


def test_the_sm80_patch_set_is_five_git_diffs_of_the_vllm_tree():
    assert [p.name for p in SM80_PATCHES] == [
        "0001-triton-mla-sparse-backend.patch",
        "0002-indexer-deepgemm-guard.patch",
        "0003-sm89-fused-indexer-q-guard.patch",
        "0004-xpu-sparse-metadata-fields.patch",
        "0005-indexer-cuda-graph-warmup.patch",
    ]
    for patch in [*SM80_PATCHES, *BROKEN_PATCHES.glob("*.patch")]:
        text = patch.read_text()
        assert text.startswith("diff --git a/vllm/"), patch.name
        assert not re.search(r"^(rename |copy |Binary files|GIT binary patch)", text, re.M), patch.name
        assert all(fp.hunks for fp in parse(text, patch.name))
    first = patch_summary(SM80_PATCHES[0].read_text(), SM80_PATCHES[0].name)
    assert first["created"] == [
        "vllm/v1/attention/backends/mla/triton_mla_sparse.py",
        "vllm/v1/attention/ops/mqa_logits_triton.py",
        "vllm/v1/attention/ops/triton_sparse_mla_kernel.py",
    ]
    assert set(first["files"]) - set(first["created"]) == {
        "vllm/model_executor/layers/sparse_attn_indexer.py",
        "vllm/platforms/cuda.py",
        "vllm/v1/attention/backends/registry.py",
    }


def test_each_sm80_patch_applies_in_order_with_git_apply_and_the_applier_alike(tmp_path):
    with_git = copy_of_src(tmp_path / "git")
    ours = copy_of_src(tmp_path / "ours")
    for patch in SM80_PATCHES:
        checked = git_apply(with_git, patch, check=True)
        assert checked.returncode == 0, f"{patch.name}: {checked.stderr}"
        assert git_apply(with_git, patch, check=False).returncode == 0
        log = apply_patches(ours / "vllm", [patch])
        assert log and all(" applied" in line and "offset" not in line for line in log), log
        assert identical_trees(with_git, ours) == [], patch.name
    all_at_once = make_install(tmp_path / "installs", "patched", SM80_PATCHES)
    assert identical_trees(all_at_once, ours) == []


def test_the_applier_cli_applies_the_set_from_a_manifest_as_the_image_build_does(tmp_path):
    tree = copy_of_src(tmp_path / "tree")
    manifest = tmp_path / "manifest.json"
    entries = ", ".join(f'{{"name": "{p.name}", "file": "{p}"}}' for p in SM80_PATCHES)
    manifest.write_text(f'{{"base_digest": "sha256:test-double", "patches": [{entries}]}}')
    run = subprocess.run(
        [sys.executable, str(APPLIER), "apply", str(tree / "vllm"), str(manifest)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "image patches: 5 patch files, " in run.stdout
    assert identical_trees(tree, make_install(tmp_path / "installs", "patched", SM80_PATCHES)) == []


def test_the_guard_made_against_main_is_refused_by_both_tools_naming_the_hunk(tmp_path):
    with_git = copy_of_src(tmp_path / "git")
    assert git_apply(with_git, SM80_PATCHES[0], check=False).returncode == 0
    refused = git_apply(with_git, FROM_MAIN, check=True)
    assert refused.returncode != 0
    assert f"patch failed: {INDEXER}:" in refused.stderr and "patch does not apply" in refused.stderr

    ours = copy_of_src(tmp_path / "ours")
    apply_patches(ours / "vllm", [SM80_PATCHES[0]])
    before = (ours / INDEXER).read_text()
    _state, failures, _log = apply_all(ours / "vllm", [(p.name, p.read_text()) for p in (FROM_MAIN,)])
    assert len(failures) == 1, [f.line("") for f in failures]  # the other hunks fit: only main's context differs
    line = failures[0].line("sha256:base")
    assert line.startswith(f"{FROM_MAIN.name}: {INDEXER} hunk 2 (@@ -"), line
    assert "its context does not match anywhere in the file" in line
    with pytest.raises(PatchSetError) as error:
        apply_patches(ours / "vllm", [FROM_MAIN])
    assert re.search(rf"{re.escape(FROM_MAIN.name)}: {INDEXER} hunk \d+ \(@@ ", str(error.value))
    assert (ours / INDEXER).read_text() == before  # all or nothing


def test_the_fields_without_defaults_apply_but_the_module_no_longer_imports(tmp_path):
    sm80 = [*SM80_PATCHES[:3], BROKEN_PATCHES / NO_DEFAULTS, SM80_PATCHES[4]]
    with_git = copy_of_src(tmp_path / "git")
    for patch in sm80:
        assert git_apply(with_git, patch, check=False).returncode == 0, patch.name
    tree = make_install(tmp_path / "installs", "dataclass-mistake", sm80)
    assert identical_trees(with_git, tree) == []
    run = subprocess.run(
        [sys.executable, "-c", "import vllm.v1.attention.backends.mla.xpu_mla_sparse"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    assert run.returncode == 1
    # Python 3.11 / 3.12; 3.13 appends the defaulted field: "... follows default argument 'topk_tokens'"
    assert re.search(r"TypeError: non-default argument 'num_decodes' follows default argument", run.stderr)


def test_the_metadata_fields_have_defaults_and_the_builder_routes_every_token_to_mqa(installs):
    code = (
        "from vllm.v1.attention.backends.mla.triton_mla_sparse import TritonMLASparseBackend as B\n"
        "from vllm.v1.attention.backend import CommonAttentionMetadata as C\n"
        "m = B.get_metadata_cls()(num_reqs=0, max_query_len=0, max_seq_len=0, num_actual_tokens=0,\n"
        "    query_start_loc=None, slot_mapping=None, block_table=None, req_id_per_token=None)\n"
        "print(m.num_decodes, m.num_prefills, m.num_decode_tokens)\n"
        "c = C(None, [0, 3, 8], None, 2, 8, 5, 5, None, None)\n"
        "b = B.get_builder_cls()(64, 2048, 8192).build(0, c)\n"
        "print(b.num_decodes, b.num_prefills, b.num_decode_tokens)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(installs["patched"])}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.stdout.split("\n")[:2] == ["0 0 0", "2 0 8"], run.stderr


@pytest.mark.parametrize(
    ("install", "expected"),
    [
        ("patched", "sm80 self-check: 5 of 5 passed"),
        ("unpatched", "sm80 self-check: FAILED: enum: ValueError: Unknown attention backend: 'TRITON_MLA_SPARSE'."),
        ("no-metadata-fields", "object has no attribute 'num_decodes' (end)"),
        ("dataclass-mistake", "FAILED: backend: TypeError: non-default argument 'num_decodes' follows default"),
    ],
)
def test_the_image_roles_self_check_reads_the_double_like_vllm(installs, install, expected):
    """roles/image/files/sm80_self_check.py, run against the double's package as the image build runs it."""
    env = {**os.environ, "PYTHONPATH": str(installs[install])}
    run = subprocess.run([sys.executable, str(SELF_CHECK)], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == (0 if install == "patched" else 1)
    assert expected in run.stdout, run.stdout + run.stderr


# --- each guard left out: the start fails where and as vLLM's does ----------------------------------------------
def worker_lines(run, exception: str) -> list[str]:
    """The log lines of the first worker that end with `exception` (the last line of its traceback)."""
    return [x for x in run.log.splitlines() if x.startswith("(Worker_TP0 pid=") and x.endswith(f") {exception}")]


@pytest.mark.parametrize(
    ("install", "exception"),
    [
        # 0002 missing: has_deep_gemm() is True (the wheel vendors DeepGEMM), DeepGEMM has no SM80 kernels
        ("no-deepgemm-guard", "RuntimeError: Assertion error (csrc/apis/attention.hpp:186): Unsupported architecture"),
        # 0003 missing: the fused indexer q kernel stores fp8e4nv, which Triton does not compile below SM89
        (
            "no-sm89-guard",
            "ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are "
            "('fp8e4b15', 'fp8e5')",
        ),
        # 0004 missing: v0.26.0's XPUMLASparseMetadata lacks the counts the shared MLA layer reads
        ("no-metadata-fields", "AttributeError: 'XPUMLASparseMetadata' object has no attribute 'num_decode_tokens'"),
        # broken 0004: the module does not import, so the backend class cannot be resolved
        ("dataclass-mistake", "TypeError: non-default argument 'num_decodes' follows default argument"),
    ],
)
def test_a_missing_guard_fails_the_start(launcher, install, exception):
    run = launcher.start(image=install, wait=False)
    assert launcher.finish(run) == 1
    assert len(worker_lines(run, exception)) == 1, run.log
    assert "(Worker_TP0 pid=" in run.log and "Traceback (most recent call last):" in run.log
    assert "RuntimeError: Engine core initialization failed." in run.log
    assert "Application startup complete." not in run.log


def test_without_the_warmup_cuda_graph_capture_fails_like_issue_48285(launcher):
    run = launcher.start(image="no-warmup", wait=False)
    assert launcher.finish(run) == 1
    exception = "RuntimeError: Triton Error [CUDA]: operation not permitted when stream is capturing"
    assert len(worker_lines(run, exception)) == 1, run.log
    assert [x for x in run.log.splitlines() if CAPTURE_ERROR.search(x)] == worker_lines(run, exception)
    assert "in capture_model" in run.log and "in fp8_paged_mqa_logits_triton" in run.log
    assert "Graph capturing finished" not in run.log
    assert "[sparse_attn_indexer.py:790] DeepGEMM not supported on this platform" in run.log  # 0002 is there


def test_without_the_warmup_an_eager_start_succeeds(launcher):
    run = launcher.start(["--enforce-eager"], image="no-warmup")
    assert "Application startup complete." in run.log, run.log
    assert not CAPTURE_ERROR.search(run.log)


def test_the_whole_set_starts_and_captures_graphs(launcher):
    run = launcher.start()
    assert "Application startup complete." in run.log, run.log
    assert "Graph capturing finished in" in run.log
    assert "Using TRITON_MLA_SPARSE attention backend out of potential backends: [TRITON_MLA_SPARSE]." in run.log
