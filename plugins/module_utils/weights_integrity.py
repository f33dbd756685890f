"""Integrity check of a safetensors checkpoint directory (a Hugging Face model folder).

Pure Python (no Ansible import), so the same code serves the weights_verify module on the hosts and the unit
tests on the control node. What it checks, without loading a tensor:

- config.json exists and is a JSON object;
- model.safetensors.index.json (required when there are several shards) is JSON with a weight_map; every shard
  it names exists (a dangling Hugging Face cache symlink counts as missing), and each shard's header holds the
  tensors the index maps to it; *.safetensors files the index does not name are reported as warnings;
- each shard's header (8-byte little-endian length, JSON) is sane: the length is within the file and within
  safetensors' own 100 MB limit, the JSON is an object of {dtype, shape, data_offsets}, the offsets start at 0
  and are contiguous, and each tensor's byte count matches dtype x shape for the dtypes the format defines;
- each shard's file size equals 8 + header length + the end of its data: shorter is `truncated` (an interrupted
  copy), longer is an `oversized` warning;
- with a checksum manifest (`sha256sum *.safetensors > SHA256SUMS`), every listed file's SHA-256, hashed in
  parallel threads (hashlib releases the GIL on large buffers).

Only the headers are read (a few KB per shard) unless a manifest asks for checksums. The index's
`metadata.total_size` is never compared with the files: it counts tensor bytes (and the test weights declare the
real model's nominal size there).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
SHARD_SUFFIX = ".safetensors"
MAX_HEADER_BYTES = 100_000_000  # safetensors refuses larger headers
CHUNK_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_WORKERS = 8
MAX_LISTED = 5  # names listed in one message before "and N more"

# Bits per element of every dtype the safetensors format defines (the reference implementation's Dtype enum).
DTYPE_BITS: dict[str, int] = {
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}

# Error codes (the check fails) and warning codes (reported, the check still passes).
ERROR_CODES = (
    "path_missing",
    "config_missing",
    "index_missing",
    "index_invalid",
    "no_weights",
    "shard_missing",
    "read_error",
    "header_corrupt",
    "truncated",
    "tensor_missing",
    "manifest_missing",
    "manifest_invalid",
    "checksum_missing_file",
    "checksum_mismatch",
)
WARNING_CODES = ("stray_shard", "oversized", "unknown_dtype", "checksum_unlisted")

_MANIFEST_LINE = re.compile(r"^(?P<hex>[0-9a-fA-F]{64}) [ *](?P<name>.+)$")
_MANIFEST_TAG = re.compile(r"^SHA256 \((?P<name>.+)\) = (?P<hex>[0-9a-fA-F]{64})$")

_ESCAPE = re.compile(r"\\(.)")  # sha256sum escapes \ and newlines in names
_UNESCAPE = {"\\": "\\", "n": "\n", "r": "\r"}

Progress = Callable[[int, int], None]


def default_workers() -> int:
    """min(8, CPU count): enough to keep NVMe or a network filesystem busy without starving the host."""
    return max(1, min(DEFAULT_MAX_WORKERS, os.cpu_count() or 1))


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Report:
    def __init__(self) -> None:
        self.errors: list[dict[str, str]] = []
        self.warnings: list[dict[str, str]] = []

    def error(self, code: str, file: str, message: str) -> None:
        self.errors.append({"code": code, "file": file, "message": message})

    def warn(self, code: str, file: str, message: str) -> None:
        self.warnings.append({"code": code, "file": file, "message": message})


def _missing_reason(path: str) -> str:
    """Why a path that is not a readable file is not one: a dangling symlink (a Hugging Face cache blob that was
    never downloaded), a directory, or simply absent."""
    if os.path.islink(path) and not os.path.exists(path):
        return f"dangling symlink to {os.readlink(path)} (its target does not exist)"
    if os.path.isdir(path):
        return "is a directory, not a file"
    return "absent"


# --- one shard ----------------------------------------------------------------------------------------------


def parse_header(raw: bytes) -> tuple[dict[str, Any] | None, list[str], set[str]]:
    """(tensors by name, problems, unknown dtypes) of a safetensors JSON header.

    Problems are what makes the header unusable: not JSON, not an object, entries without dtype/shape/offsets,
    offsets that do not start at 0 or are not contiguous (a gap or an overlap), and byte counts that differ from
    dtype x shape. Unknown dtypes are not problems (the format grows); their byte counts are not checked.
    """
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, [f"header is not valid JSON ({exc})"], set()
    if not isinstance(header, dict):
        return None, [f"header is a JSON {type(header).__name__}, not an object"], set()
    tensors: dict[str, Any] = {}
    problems: list[str] = []
    unknown: set[str] = set()
    for name, info in header.items():
        if name == "__metadata__":
            if info is not None and not isinstance(info, dict):
                problems.append("__metadata__ is not an object")
            continue
        if not isinstance(info, dict):
            problems.append(f"tensor {name}: entry is not an object")
            continue
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str):
            problems.append(f"tensor {name}: no dtype")
            continue
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            problems.append(f"tensor {name}: shape {shape!r} is not a list of non-negative integers")
            continue
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_is_int(o) and o >= 0 for o in offsets)
            or offsets[1] < offsets[0]
        ):
            problems.append(f"tensor {name}: data_offsets {offsets!r} are not [begin, end] with begin <= end")
            continue
        tensors[name] = info
        bits = DTYPE_BITS.get(dtype)
        if bits is None:
            unknown.add(dtype)
            continue
        count = math.prod(shape)
        span = offsets[1] - offsets[0]
        if count * bits % 8:
            problems.append(f"tensor {name}: {count} elements of {dtype} ({bits} bits) are not a whole number of bytes")
        elif count * bits // 8 != span:
            problems.append(
                f"tensor {name}: dtype {dtype} x shape {shape} = {count * bits // 8} bytes, "
                f"but data_offsets {offsets} span {span} bytes"
            )
    expected = 0
    for name, info in sorted(tensors.items(), key=lambda item: tuple(item[1]["data_offsets"])):
        begin, end = info["data_offsets"]
        if begin != expected:
            kind = "gap" if begin > expected else "overlap"
            problems.append(f"tensor {name}: data_offsets {[begin, end]} do not start at {expected} ({kind})")
        expected = max(expected, end)
    return tensors, problems, unknown


def check_shard(path: str, report: _Report) -> dict[str, Any]:
    """Checks one safetensors file's header and size, reading only the header. Returns {size, tensors} (tensors
    is None when the header cannot be read)."""
    result: dict[str, Any] = {"size": 0, "tensors": None}
    try:
        size = os.stat(path).st_size
        result["size"] = size
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                report.error("truncated", path, f"file is {size} bytes, shorter than the 8-byte header length")
                return result
            (length,) = struct.unpack("<Q", head)
            if length > size - 8:
                report.error(
                    "header_corrupt",
                    path,
                    f"header length {length} bytes is larger than the file ({size} bytes): "
                    "cut inside the header, or not a safetensors file",
                )
                return result
            if length > MAX_HEADER_BYTES:
                report.error(
                    "header_corrupt",
                    path,
                    f"header length {length} bytes exceeds safetensors' limit of {MAX_HEADER_BYTES} bytes "
                    "(not a safetensors file, or its first bytes are damaged)",
                )
                return result
            raw = handle.read(length)
    except OSError as exc:
        report.error("read_error", path, f"cannot read: {exc.strerror or exc}")
        return result
    tensors, problems, unknown = parse_header(raw)
    if problems:
        report.error("header_corrupt", path, "; ".join(problems[:MAX_LISTED]) + _more(problems))
    if unknown:
        report.warn(
            "unknown_dtype", path, f"dtype(s) {', '.join(sorted(unknown))} unknown to this check: sizes not verified"
        )
    if tensors is None:
        return result
    result["tensors"] = tensors
    data_end = max((info["data_offsets"][1] for info in tensors.values()), default=0)
    expected = 8 + length + data_end
    if size < expected:
        report.error(
            "truncated",
            path,
            f"{expected - size} bytes missing: file is {size} bytes, its header declares {expected} "
            f"(8 + {length} header + {data_end} data)",
        )
    elif size > expected:
        report.warn(
            "oversized",
            path,
            f"{size - expected} bytes more than its header declares: file is {size} bytes, expected {expected} "
            f"(8 + {length} header + {data_end} data)",
        )
    return result


def _more(items: list[str]) -> str:
    return f"; and {len(items) - MAX_LISTED} more problem(s)" if len(items) > MAX_LISTED else ""


# --- checksum manifest ----------------------------------------------------------------------------------------


def parse_manifest(text: str) -> tuple[dict[str, str], list[str]]:
    """({relative name: lowercase sha256 hex}, problems) of `sha256sum` output.

    Accepts the default format (`<hex>  <name>`, `<hex> *<name>` in binary mode), sha256sum's escaped names
    (a line starting with a backslash) and the BSD format of `sha256sum --tag` (`SHA256 (<name>) = <hex>`).
    Blank lines and # comments are skipped; `./name` is the same as `name`.
    """
    entries: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        escaped = line.startswith("\\")
        body = line[1:] if escaped else line.rstrip("\r")
        match = _MANIFEST_LINE.match(body) or _MANIFEST_TAG.match(body)
        if match is None:
            problems.append(f"line {number} is not '<sha256 hex>  <file name>': {stripped[:80]!r}")
            continue
        name = match.group("name")
        if escaped:
            name = _ESCAPE.sub(lambda m: _UNESCAPE.get(m.group(1), m.group(0)), name)
        name = os.path.normpath(name)
        if name in entries and entries[name] != match.group("hex").lower():
            problems.append(f"line {number}: {name} is listed twice with different checksums")
        entries[name] = match.group("hex").lower()
    return entries, problems


def sha256_file(path: str, on_bytes: Callable[[int], None] | None = None, chunk: int | None = None) -> str:
    """The SHA-256 hex digest of a file, read in `chunk`-byte blocks (default CHUNK_BYTES) into one reused
    buffer; on_bytes(count) after each block."""
    digest = hashlib.sha256()
    buffer = bytearray(chunk or CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
            if on_bytes is not None:
                on_bytes(count)
    return digest.hexdigest()


def verify_checksums(
    root: str,
    entries: dict[str, str],
    report: _Report,
    workers: int,
    progress: Progress | None = None,
) -> int:
    """Hashes every file the manifest lists (relative to root) in a pool of `workers` threads and reports
    mismatches and missing files. Calls progress(done_bytes, total_bytes) after each block read, from the
    worker threads but one call at a time, done_bytes never decreasing. Returns the number of files hashed."""
    files: list[tuple[str, str, int]] = []
    for name, expected in sorted(entries.items()):
        path = os.path.join(root, name)
        if os.path.isfile(path):
            files.append((path, expected, os.stat(path).st_size))
        else:
            report.error("checksum_missing_file", path, f"listed in the checksum manifest but {_missing_reason(path)}")
    total = sum(size for _, _, size in files)
    lock = threading.Lock()
    done = 0

    def advance(count: int) -> None:
        nonlocal done
        with lock:
            done += count
            if progress is not None:
                progress(done, max(total, done))

    def one(item: tuple[str, str, int]) -> tuple[str, str, str | None, str | None]:
        path, expected, _ = item
        try:
            return path, expected, sha256_file(path, advance), None
        except OSError as exc:
            return path, expected, None, str(exc.strerror or exc)

    if progress is not None:
        progress(0, total)
    hashed = 0
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(files) or 1))) as pool:
        for path, expected, actual, failure in pool.map(one, files):
            if failure is not None:
                report.error("read_error", path, f"cannot read for its checksum: {failure}")
                continue
            hashed += 1
            if actual != expected:
                report.error("checksum_mismatch", path, f"sha256 mismatch: manifest says {expected}, file is {actual}")
    return hashed


# --- the checkpoint -----------------------------------------------------------------------------------------


def _shard_files(root: str) -> list[str]:
    """Names of the *.safetensors entries of a directory, dangling symlinks included."""
    return sorted(name for name in os.listdir(root) if name.endswith(SHARD_SUFFIX))


def _read_index(root: str, report: _Report) -> dict[str, list[str]] | None:
    """{shard name: [tensor names]} from model.safetensors.index.json; None when absent or unusable (reported)."""
    index_path = os.path.join(root, INDEX_NAME)
    try:
        with open(index_path, encoding="utf-8") as handle:
            index = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        report.error("index_invalid", index_path, f"not readable JSON ({exc})")
        return None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        report.error("index_invalid", index_path, "no weight_map (an object of tensor name -> shard file)")
        return None
    shards: dict[str, list[str]] = {}
    bad: list[str] = []
    for tensor, shard in weight_map.items():
        normal = os.path.normpath(shard) if isinstance(shard, str) and shard else ""
        if not normal or os.path.isabs(normal) or normal.startswith(".."):
            bad.append(tensor)
            continue
        shards.setdefault(normal, []).append(tensor)
    if bad:
        report.error(
            "index_invalid",
            index_path,
            f"weight_map entries without a file name inside the checkpoint: {_listed(bad)}",
        )
    return shards


def check_checkpoint(
    path: str | os.PathLike[str],
    manifest: str | os.PathLike[str] | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Checks a checkpoint directory; see the module docstring for what is checked.

    manifest: a sha256sum file (relative to path unless absolute); its names are relative to path.
    workers: threads hashing files for the manifest (None or 0: min(8, CPU count)).
    progress: progress(done_bytes, total_bytes) while hashing.

    Returns {ok, errors, warnings, shards, tensors, bytes, checked_checksums, path}: errors and warnings are
    lists of {code, file, message}; shards the number of safetensors files checked, bytes their total size.
    """
    root = os.fspath(path)
    report = _Report()
    result: dict[str, Any] = {
        "ok": False,
        "path": root,
        "errors": report.errors,
        "warnings": report.warnings,
        "shards": 0,
        "tensors": 0,
        "bytes": 0,
        "checked_checksums": 0,
    }
    if not os.path.isdir(root):
        report.error("path_missing", root, f"checkpoint directory {_missing_reason(root)}")
        return result

    config = os.path.join(root, CONFIG_NAME)
    try:
        with open(config, encoding="utf-8") as handle:
            if not isinstance(json.load(handle), dict):
                report.error("config_missing", config, "config.json is not a JSON object")
    except FileNotFoundError:
        report.error("config_missing", config, f"config.json {_missing_reason(config)}")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        report.error("config_missing", config, f"config.json is not readable JSON ({exc})")

    present = _shard_files(root)
    index = _read_index(root, report)
    index_path = os.path.join(root, INDEX_NAME)
    if index is not None:
        to_check = sorted(index)
        for stray in sorted(set(present) - set(index)):
            report.warn(
                "stray_shard",
                os.path.join(root, stray),
                f"not referenced by {INDEX_NAME}: ignored by the loader (left from another revision or download?)",
            )
    else:
        to_check = present
        if not present and not os.path.exists(index_path):
            report.error("no_weights", root, f"no *.safetensors file and no {INDEX_NAME}")
        elif len(present) > 1 and not os.path.exists(index_path):
            report.error(
                "index_missing",
                index_path,
                f"{len(present)} shards but no {INDEX_NAME}: the tensor-to-shard map is missing "
                "(an interrupted download?)",
            )

    for name in to_check:
        shard_path = os.path.join(root, name)
        if not os.path.isfile(shard_path):
            referenced = f"referenced by {INDEX_NAME} ({_plural(len(index[name]), 'tensor')})" if index else "listed"
            report.error("shard_missing", shard_path, f"{referenced} but {_missing_reason(shard_path)}")
            continue
        shard = check_shard(shard_path, report)
        result["shards"] += 1
        result["bytes"] += shard["size"]
        if shard["tensors"] is None:
            continue
        result["tensors"] += len(shard["tensors"])
        if index is not None:
            lacking = [t for t in index[name] if t not in shard["tensors"]]
            if lacking:
                report.error(
                    "tensor_missing",
                    shard_path,
                    f"{INDEX_NAME} maps {_plural(len(lacking), 'tensor')} to this shard that its header lacks: "
                    f"{_listed(lacking)} (a shard of another revision?)",
                )

    if manifest is not None:
        manifest_path = os.path.join(root, os.fspath(manifest))  # an absolute manifest stays as it is
        try:
            with open(manifest_path, encoding="utf-8") as handle:
                entries, problems = parse_manifest(handle.read())
        except FileNotFoundError:
            report.error("manifest_missing", manifest_path, f"checksum manifest {_missing_reason(manifest_path)}")
        except (OSError, UnicodeDecodeError) as exc:
            report.error("manifest_missing", manifest_path, f"checksum manifest not readable ({exc})")
        else:
            if problems:
                report.error("manifest_invalid", manifest_path, "; ".join(problems[:MAX_LISTED]) + _more(problems))
            if not entries:
                report.error("manifest_invalid", manifest_path, "lists no file (expected sha256sum output)")
            for name in present:
                if name not in entries:
                    report.warn("checksum_unlisted", os.path.join(root, name), "not in the checksum manifest")
            result["checked_checksums"] = verify_checksums(
                root, entries, report, workers or default_workers(), progress
            )

    result["ok"] = not report.errors
    return result


def error_lines(result: dict[str, Any]) -> list[str]:
    """One line per error: `<file>: <message>`."""
    return [f"{item['file']}: {item['message']}" for item in result["errors"]]


def summary(result: dict[str, Any]) -> str:
    """One line about the whole check."""
    gib = result["bytes"] / 1024**3
    sums = f", {result['checked_checksums']} checksum(s) checked" if result["checked_checksums"] else ""
    head = f"{result['shards']} shard(s), {result['tensors']} tensor(s), {gib:.1f} GiB{sums}"
    if result["ok"]:
        return f"checkpoint OK: {head}, {_plural(len(result['warnings']), 'warning')}"
    return f"checkpoint BROKEN: {_plural(len(result['errors']), 'error')} ({head})"
