"""Lookup: what the image role reads on the controller, in one call instead of a task per file.

The image's inputs that live on the controller (the patch files, the overlay directory) are read where Ansible
runs, so a lookup reads them there directly: no worker process, no module run through a local connection, one call
per kind instead of a `stat` task looping over the patch files and a `find` task over the overlay (docs/testbed.md#
controller-reads). The records are those the image role's checks judge (plugins/filter/image_inputs.py).

    lookup('a800.vllm.controller_files', *paths)
        one record per path, in order: {path, exists, isreg, readable, text} (text only when it is a readable
        regular file, else None), as `stat` and the `file` lookup gave them
    lookup('a800.vllm.controller_files', overlay_dir, tree=true, excludes=['*.pyc'])
        one record: {exists, files: [[path relative to the directory, sha256], ...]} sorted by path, the directory's
        regular files found recursively (hidden ones too, symbolic links followed, a name matching one of `excludes`
        left out), as `find` with recurse, hidden, follow and get_checksum gave them; exists is false when the path
        is not a readable directory
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: controller_files
author: a800-vllm
short_description: Read files or a directory tree on the controller in one call
description:
  - Without tree, one record per path (exists, isreg, readable, text).
  - With tree, the regular files under one directory with their sha256, relative to it and sorted.
options:
  _terms:
    description: Controller paths (with tree, exactly one directory).
    required: true
  tree:
    description: Index one directory recursively instead of reading files.
    type: bool
    default: false
  excludes:
    description: With tree, shell patterns; a file whose name matches one is left out.
    type: list
    elements: str
    default: []
"""

RETURN = r"""
_raw:
  description: One record per path, or with tree one record of the directory.
  type: list
  elements: dict
"""


def file_record(path: str) -> dict[str, Any]:
    """What the image role judges of one patch file: whether it is there, a regular file, readable, and its text."""
    exists = os.path.exists(path)
    isreg = os.path.isfile(path)
    readable = exists and os.access(path, os.R_OK)
    text = None
    if isreg and readable:
        with open(path, encoding="utf-8", newline="") as handle:
            text = handle.read()
    return {"path": path, "exists": exists, "isreg": isreg, "readable": readable, "text": text}


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_record(directory: str, excludes: list[str]) -> dict[str, Any]:
    """The regular files under `directory` (recursively, hidden ones too, links followed) with their sha256."""
    if not (os.path.isdir(directory) and os.access(directory, os.R_OK | os.X_OK)):
        return {"exists": False, "files": []}
    files = []
    for root, _dirs, names in os.walk(directory, followlinks=True):
        for name in names:
            path = os.path.join(root, name)
            if any(fnmatch.fnmatch(name, pattern) for pattern in excludes) or not os.path.isfile(path):
                continue
            files.append([os.path.relpath(path, directory), _sha256(path)])
    return {"exists": True, "files": sorted(files)}


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        self.set_options(var_options=variables, direct=kwargs)
        paths = [str(term) for term in terms]
        if not self.get_option("tree"):
            return [file_record(path) for path in paths]
        if len(paths) != 1:
            raise AnsibleLookupError(f"controller_files with tree=true takes one directory, got {len(paths)}")
        return [tree_record(paths[0], list(self.get_option("excludes")))]
