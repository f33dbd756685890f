"""Checkpoint integrity check (plugins/module_utils/weights_integrity.py, module weights_verify) on small real
safetensors checkpoints written by the tests: good, missing, truncated, corrupt, inconsistent, tampered, stray,
symlinked (Hugging Face cache layout)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.a800.vllm.plugins.module_utils import weights_integrity
from ansible_collections.a800.vllm.plugins.module_utils.weights_integrity import (
    check_checkpoint,
    error_lines,
    parse_header,
    parse_manifest,
    summary,
)
from conftest import ROOT, ansible_adhoc

MAKE_TEST_WEIGHTS = ROOT / "tests" / "testbed" / "make_test_weights.py"

# shard -> tensor -> (dtype, shape, byte count): the byte counts are written out by hand, not computed by the code
# under test. Shapes of a small NVFP4-style checkpoint: BF16 embeddings, U8-packed FP4 weights with F8 scales.
LAYOUT: dict[str, dict[str, tuple[str, list[int], int]]] = {
    "model-00001-of-00003.safetensors": {
        "model.embed_tokens.weight": ("BF16", [64, 16], 2048),
        "model.norm.weight": ("F32", [64], 256),
    },
    "model-00002-of-00003.safetensors": {
        "model.layers.0.mlp.experts.0.weight_packed": ("U8", [32, 32], 1024),
        "model.layers.0.mlp.experts.0.weight_scale": ("F8_E4M3", [32, 4], 128),
        "model.layers.0.mlp.experts.0.weight_scale_2": ("F32", [], 4),
        "model.layers.0.mlp.experts.0.input_scale": ("F32", [1], 4),
    },
    "model-00003-of-00003.safetensors": {
        "lm_head.weight": ("BF16", [32, 32], 2048),
        "model.layers.0.self_attn.fp4": ("F4", [16, 16], 128),
        "model.layers.0.step": ("I64", [], 8),
    },
}
SHARD1, SHARD2, SHARD3 = LAYOUT


def encode(tensors: dict[str, tuple[str, list[int], int]], header: dict | None = None) -> bytes:
    """A safetensors file: 8-byte little-endian header length, JSON header padded to 8 bytes, data."""
    if header is None:
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name, (dtype, shape, size) in tensors.items():
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
            offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    data = b"".join(os.urandom(size) for _, _, size in tensors.values())
    return struct.pack("<Q", len(raw)) + raw + data


def make_checkpoint(root: Path, layout: dict = LAYOUT) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for shard, tensors in layout.items():
        (root / shard).write_bytes(encode(tensors))
        weight_map.update(dict.fromkeys(tensors, shard))
    index = {"metadata": {"total_size": 433_000_000_000}, "weight_map": weight_map}  # nominal, never compared
    (root / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (root / "config.json").write_text(json.dumps({"model_type": "glm_moe_dsa", "architectures": ["X"]}))
    return root


def write_manifest(root: Path, names: list[str] | None = None, out: str = "SHA256SUMS") -> Path:
    """What `sha256sum *.safetensors > SHA256SUMS` writes: `<hex>  <name>`, one line a file, in name order."""
    names = names if names is not None else sorted(p.name for p in root.glob("*.safetensors"))
    lines = [f"{hashlib.sha256((root / name).read_bytes()).hexdigest()}  {name}\n" for name in names]
    (root / out).write_text("".join(lines))
    return root / out


def codes(result: dict, kind: str = "errors") -> list[str]:
    return [item["code"] for item in result[kind]]


def only(result: dict, code: str, kind: str = "errors") -> dict:
    found = [item for item in result[kind] if item["code"] == code]
    assert len(found) == 1, result[kind]
    return found[0]


@pytest.fixture
def ckpt(tmp_path) -> Path:
    return make_checkpoint(tmp_path / "GLM-5.2-NVFP4")


# --- good checkpoints -----------------------------------------------------------------------------------------


def test_good_checkpoint_passes(ckpt):
    result = check_checkpoint(ckpt)
    assert result["ok"] is True, result["errors"]
    assert result["errors"] == [] and result["warnings"] == []
    assert result["shards"] == 3 and result["tensors"] == 9
    assert result["bytes"] == sum((ckpt / name).stat().st_size for name in LAYOUT)
    assert result["checked_checksums"] == 0
    assert summary(result).startswith("checkpoint OK: 3 shard(s), 9 tensor(s)")
    json.dumps(result)  # module results must be plain JSON


def test_good_checkpoint_with_manifest_passes(ckpt):
    manifest = write_manifest(ckpt)
    if shutil.which("sha256sum"):  # the test's manifest is byte for byte what the standard tool writes
        made = subprocess.run(
            "sha256sum *.safetensors", shell=True, cwd=ckpt, capture_output=True, text=True, check=True
        ).stdout
        assert made == manifest.read_text()
    result = check_checkpoint(ckpt, manifest="SHA256SUMS")  # relative to the checkpoint
    assert result["ok"] is True, result["errors"]
    assert result["checked_checksums"] == 3 and result["warnings"] == []
    assert check_checkpoint(ckpt, manifest=manifest, workers=1)["ok"] is True  # absolute; one worker


def test_project_test_weights_pass_despite_nominal_total_size(tmp_path):
    """make_test_weights.py's index declares 433 GB over 3 MiB of shards: total_size is not compared."""
    out = tmp_path / "weights"
    subprocess.run(
        [sys.executable, str(MAKE_TEST_WEIGHTS), "--out", str(out), "--shards", "3", "--shard-mib", "1"],
        check=True,
        capture_output=True,
    )
    assert json.loads((out / "model.safetensors.index.json").read_text())["metadata"]["total_size"] == 433e9
    write_manifest(out)
    result = check_checkpoint(out, manifest="SHA256SUMS")
    assert result["ok"] is True, result["errors"]
    assert result["shards"] == 3 and result["checked_checksums"] == 3 and result["warnings"] == []
    assert result["bytes"] > 3 * 1024 * 1024


def test_single_file_checkpoint_without_index_is_valid(tmp_path):
    root = tmp_path / "small"
    root.mkdir()
    (root / "model.safetensors").write_bytes(encode(LAYOUT[SHARD1]))
    (root / "config.json").write_text("{}")
    result = check_checkpoint(root)
    assert result["ok"] is True, result["errors"]
    assert result["shards"] == 1 and result["tensors"] == 2


def test_symlinked_snapshot_layout(tmp_path):
    """Hugging Face cache: snapshots/<rev>/<name> -> ../../blobs/<sha256>; sizes and hashes are the blobs'."""
    source = make_checkpoint(tmp_path / "download")
    repo = tmp_path / "hub" / "models--zai--GLM-5.2-NVFP4"
    snapshot = repo / "snapshots" / "0123abcd"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for item in sorted(source.iterdir()):
        blob = hashlib.sha256(item.read_bytes()).hexdigest()
        item.rename(repo / "blobs" / blob)
        (snapshot / item.name).symlink_to(Path("..", "..", "blobs", blob))
    write_manifest(snapshot)
    result = check_checkpoint(snapshot, manifest="SHA256SUMS")
    assert result["ok"] is True, result["errors"]
    assert result["checked_checksums"] == 3
    assert result["bytes"] == sum(
        (repo / "blobs" / p.resolve().name).stat().st_size for p in snapshot.glob("*.safetensors")
    )
    assert result["bytes"] > 5000  # the blobs' sizes, not the links'

    blob = (snapshot / SHARD2).resolve()
    blob.unlink()  # an interrupted download: the link is there, its blob is not
    result = check_checkpoint(snapshot, manifest="SHA256SUMS")
    assert codes(result) == ["shard_missing", "checksum_missing_file"]
    assert result["errors"][0]["file"] == str(snapshot / SHARD2)
    assert "dangling symlink to ../../blobs/" in result["errors"][0]["message"]


# --- structure errors -------------------------------------------------------------------------------------------


def test_every_missing_shard_is_listed(ckpt):
    (ckpt / SHARD1).unlink()
    (ckpt / SHARD3).unlink()
    result = check_checkpoint(ckpt)
    assert result["ok"] is False
    assert codes(result) == ["shard_missing", "shard_missing"]
    assert [e["file"] for e in result["errors"]] == [str(ckpt / SHARD1), str(ckpt / SHARD3)]
    assert result["errors"][0]["message"] == "referenced by model.safetensors.index.json (2 tensors) but absent"
    assert result["shards"] == 1
    assert error_lines(result) == [f"{ckpt / SHARD1}: {result['errors'][0]['message']}", error_lines(result)[1]]
    assert summary(result).startswith("checkpoint BROKEN: 2 errors")


def test_truncated_shard_says_how_many_bytes_are_missing(ckpt):
    shard = ckpt / SHARD2
    data = shard.read_bytes()
    shard.write_bytes(data[:-100])
    result = check_checkpoint(ckpt)
    error = only(result, "truncated")
    assert codes(result) == ["truncated"]
    assert error["file"] == str(shard)
    assert error["message"].startswith("100 bytes missing: ")
    assert f"file is {len(data) - 100} bytes, its header declares {len(data)}" in error["message"]


def test_empty_shard_is_truncated(ckpt):
    (ckpt / SHARD3).write_bytes(b"")
    result = check_checkpoint(ckpt)
    assert codes(result) == ["truncated"]
    assert "0 bytes, shorter than the 8-byte header length" in result["errors"][0]["message"]


def test_oversized_shard_is_a_warning(ckpt):
    with (ckpt / SHARD1).open("ab") as handle:
        handle.write(b"\0" * 24)
    result = check_checkpoint(ckpt)
    assert result["ok"] is True
    assert only(result, "oversized", "warnings")["message"].startswith("24 bytes more than its header declares")


def test_garbage_header_json(ckpt):
    shard = ckpt / SHARD1
    data = shard.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    shard.write_bytes(data[:8] + b"{not json" + b"#" * (length - 9) + data[8 + length :])
    result = check_checkpoint(ckpt)
    error = only(result, "header_corrupt")
    assert error["file"] == str(shard) and "header is not valid JSON" in error["message"]
    assert codes(result) == ["header_corrupt"]  # and no tensor_missing on top of it


def test_absurd_header_length(ckpt):
    shard = ckpt / SHARD1
    data = shard.read_bytes()
    shard.write_bytes(struct.pack("<Q", 2**40) + data[8:])
    error = only(check_checkpoint(ckpt), "header_corrupt")
    assert f"header length {2**40} bytes is larger than the file ({len(data)} bytes)" in error["message"]


def test_header_length_over_the_safetensors_limit(ckpt):
    shard = ckpt / SHARD1
    with shard.open("r+b") as handle:
        handle.write(struct.pack("<Q", 150_000_000))
        handle.truncate(200_000_000)  # sparse: nothing is read past the first 8 bytes
    error = only(check_checkpoint(ckpt), "header_corrupt")
    assert "exceeds safetensors' limit of 100000000 bytes" in error["message"]


def test_dtype_times_shape_inconsistent_with_offsets(ckpt):
    tensors = dict(LAYOUT[SHARD1])
    tensors["model.embed_tokens.weight"] = ("BF16", [64, 16], 1024)  # BF16 64x16 is 2048 bytes
    (ckpt / SHARD1).write_bytes(encode(tensors))
    result = check_checkpoint(ckpt)
    error = only(result, "header_corrupt")
    assert codes(result) == ["header_corrupt"]  # the file itself is as long as its offsets say
    assert (
        "tensor model.embed_tokens.weight: dtype BF16 x shape [64, 16] = 2048 bytes, "
        "but data_offsets [0, 1024] span 1024 bytes" in error["message"]
    )


def test_sub_byte_dtypes_and_unknown_dtypes():
    def header(dtype: str, shape: list[int], span: int) -> bytes:
        return json.dumps({"t": {"dtype": dtype, "shape": shape, "data_offsets": [0, span]}}).encode()

    assert parse_header(header("F4", [16, 16], 128))[1] == []
    assert parse_header(header("F6_E2M3", [4, 4], 12))[1] == []
    assert "not a whole number of bytes" in parse_header(header("F4", [3], 2))[1][0]
    assert parse_header(header("F8_E4M3", [10], 11))[1] != []
    tensors, problems, unknown = parse_header(header("Q3_K", [7], 5))
    assert problems == [] and unknown == {"Q3_K"} and list(tensors) == ["t"]


def test_offsets_with_gap_or_overlap(ckpt):
    tensors = LAYOUT[SHARD3]
    gap = {
        "lm_head.weight": {"dtype": "BF16", "shape": [32, 32], "data_offsets": [0, 2048]},
        "model.layers.0.self_attn.fp4": {"dtype": "F4", "shape": [16, 16], "data_offsets": [2056, 2184]},
        "model.layers.0.step": {"dtype": "I64", "shape": [], "data_offsets": [2048, 2056]},
    }
    (ckpt / SHARD3).write_bytes(encode(tensors, gap))  # listed out of order but contiguous: fine
    assert check_checkpoint(ckpt)["ok"] is True
    gap["model.layers.0.step"]["data_offsets"] = [2040, 2048]  # overlaps lm_head, leaves a hole at 2048
    (ckpt / SHARD3).write_bytes(encode(tensors, gap))
    message = only(check_checkpoint(ckpt), "header_corrupt")["message"]
    assert "do not start at 2048 (overlap)" in message and "do not start at 2048 (gap)" in message


def test_index_names_a_tensor_the_shard_lacks(ckpt):
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.layers.1.mlp.gate.weight"] = SHARD2
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    error = only(check_checkpoint(ckpt), "tensor_missing")
    assert error["file"] == str(ckpt / SHARD2) and "model.layers.1.mlp.gate.weight" in error["message"]


def test_stray_shard_is_a_warning(ckpt):
    shutil.copy(ckpt / SHARD1, ckpt / "model-00001-of-00002.safetensors")
    result = check_checkpoint(ckpt)
    assert result["ok"] is True and result["shards"] == 3
    warning = only(result, "stray_shard", "warnings")
    assert warning["file"] == str(ckpt / "model-00001-of-00002.safetensors")
    assert "not referenced by model.safetensors.index.json" in warning["message"]


def test_missing_or_broken_config(ckpt):
    (ckpt / "config.json").unlink()
    result = check_checkpoint(ckpt)
    assert codes(result) == ["config_missing"] and result["errors"][0]["file"] == str(ckpt / "config.json")
    (ckpt / "config.json").write_text('{"model_type": ')
    assert "not readable JSON" in only(check_checkpoint(ckpt), "config_missing")["message"]


def test_missing_and_invalid_index(ckpt):
    index = ckpt / "model.safetensors.index.json"
    text = index.read_text()
    index.unlink()
    result = check_checkpoint(ckpt)
    assert (
        codes(result) == ["index_missing"]
        and "3 shards but no model.safetensors.index.json" in (result["errors"][0]["message"])
    )
    assert result["shards"] == 3  # the shards are still checked
    index.write_text(text[:-20])
    assert codes(check_checkpoint(ckpt)) == ["index_invalid"]
    index.write_text(json.dumps({"metadata": {}}))
    assert "no weight_map" in only(check_checkpoint(ckpt), "index_invalid")["message"]


def test_no_weights_and_no_directory(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert codes(check_checkpoint(tmp_path)) == ["no_weights"]
    assert codes(check_checkpoint(tmp_path / "nowhere")) == ["path_missing"]


# --- checksums ----------------------------------------------------------------------------------------------------


def test_flipped_byte_in_data_is_caught_by_checksum_only(ckpt):
    write_manifest(ckpt)
    shard = ckpt / SHARD3
    original = shard.read_bytes()
    data = bytearray(original)
    data[-10] ^= 0xFF  # inside the last tensor's data: the header and size stay right
    shard.write_bytes(bytes(data))
    assert check_checkpoint(ckpt)["ok"] is True  # structure alone cannot see it
    result = check_checkpoint(ckpt, manifest="SHA256SUMS")
    error = only(result, "checksum_mismatch")
    assert codes(result) == ["checksum_mismatch"] and error["file"] == str(shard)
    assert error["message"] == (
        f"sha256 mismatch: manifest says {hashlib.sha256(original).hexdigest()}, "
        f"file is {hashlib.sha256(bytes(data)).hexdigest()}"
    )
    assert result["checked_checksums"] == 3


def test_manifest_names_a_missing_file_and_misses_a_shard(ckpt):
    (ckpt / "tokenizer.json").write_text("{}")
    write_manifest(ckpt, [SHARD1, SHARD2, "tokenizer.json"])
    (ckpt / "tokenizer.json").unlink()
    result = check_checkpoint(ckpt, manifest="SHA256SUMS")
    assert codes(result) == ["checksum_missing_file"]
    assert result["errors"][0]["file"] == str(ckpt / "tokenizer.json")
    assert result["errors"][0]["message"] == "listed in the checksum manifest but absent"
    assert only(result, "checksum_unlisted", "warnings")["file"] == str(ckpt / SHARD3)
    assert result["checked_checksums"] == 2


def test_manifest_missing_or_invalid(ckpt):
    assert codes(check_checkpoint(ckpt, manifest="SHA256SUMS")) == ["manifest_missing"]
    (ckpt / "SHA256SUMS").write_text("this is not a checksum list\n")
    assert codes(check_checkpoint(ckpt, manifest="SHA256SUMS")) == ["manifest_invalid", "manifest_invalid"]


def test_parse_manifest_formats():
    hex_a, hex_b, hex_c = "a" * 64, "B" * 64, "c" * 64
    text = f"# made by sha256sum\n{hex_a}  ./x.safetensors\n{hex_b} *y.safetensors\n\nSHA256 (z w.bin) = {hex_c}\n"
    text += f"\\{hex_a}  odd\\\\name\n"
    entries, problems = parse_manifest(text)
    assert problems == []
    assert entries == {"x.safetensors": hex_a, "y.safetensors": "b" * 64, "z w.bin": hex_c, "odd\\name": hex_a}
    entries, problems = parse_manifest(f"{hex_a[:-1]}  short\n{hex_a}  dup\n{hex_b}  dup\n")
    assert len(problems) == 2 and "line 1" in problems[0] and "listed twice" in problems[1]


def test_progress_is_monotonic_and_reaches_the_total(ckpt, monkeypatch):
    monkeypatch.setattr(weights_integrity, "CHUNK_BYTES", 256)  # many blocks per small file
    write_manifest(ckpt)
    total = sum((ckpt / name).stat().st_size for name in LAYOUT)
    calls: list[tuple[int, int]] = []
    result = check_checkpoint(ckpt, manifest="SHA256SUMS", workers=3, progress=lambda d, t: calls.append((d, t)))
    assert result["ok"] is True, result["errors"]
    done = [d for d, _ in calls]
    assert len(calls) > total // 256
    assert done == sorted(done) and done[0] == 0 and done[-1] == total
    assert {t for _, t in calls} == {total}


# --- the module, run by Ansible --------------------------------------------------------------------------------


def test_module_in_check_mode(tmp_path):
    """One ad-hoc run against two local hosts: one checkpoint good, one with a truncated shard."""
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip(f"ansible not installed beside {sys.executable}")
    good = make_checkpoint(tmp_path / "good")
    bad = make_checkpoint(tmp_path / "bad")
    for root in (good, bad):
        write_manifest(root)
    shutil.copy(good / SHARD1, good / "model-00001-of-00009.safetensors")  # a stray: warning only
    (bad / SHARD2).write_bytes((bad / SHARD2).read_bytes()[:-100])
    rc, out, raw = ansible_adhoc(
        *("all", "-c", "local", "-i", "good,bad,", "--check", "-m", "a800.vllm.weights_verify"),
        *("-a", "path={{ ckpts[inventory_hostname] }} manifest=SHA256SUMS workers=2"),
        *("-e", json.dumps({"ckpts": {"good": str(good), "bad": str(bad)}})),
    )
    assert rc == 2 and out, raw  # a host failed
    hosts = out["plays"][0]["tasks"][0]["hosts"]

    ok = hosts["good"]
    assert ok["changed"] is False and not ok.get("failed"), ok
    check = ok["weights_check"]
    assert check["ok"] is True and check["shards"] == 3 and check["checked_checksums"] == 3
    assert codes(check, "warnings") == ["stray_shard", "checksum_unlisted"]
    assert check["summary"].startswith("checkpoint OK: 3 shard(s)")
    assert any("not referenced by model.safetensors.index.json" in w for w in ok.get("warnings", []))

    failed = hosts["bad"]
    assert failed["failed"] is True
    shard = bad / SHARD2
    lines = failed["msg"].splitlines()  # one line per error: "<file>: <message>"
    assert len(lines) == 2
    assert lines[0].startswith(f"{shard}: 100 bytes missing: file is ")
    assert lines[1].startswith(f"{shard}: sha256 mismatch: manifest says ")
    assert codes(failed["weights_check"]) == ["truncated", "checksum_mismatch"]
