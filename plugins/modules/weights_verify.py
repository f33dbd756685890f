#!/usr/bin/python
"""Ansible module: integrity check of a safetensors checkpoint (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_verify
short_description: Check that a safetensors checkpoint is complete and undamaged before vLLM loads it
description:
  - Checks a Hugging Face model directory without loading a tensor - C(config.json) is JSON;
    C(model.safetensors.index.json) is JSON with a C(weight_map) (required with several shards); every shard it
    names exists (dangling Hugging Face cache symlinks count as missing) and holds the tensors mapped to it;
    each shard's header is sane (length, JSON, contiguous offsets, byte counts matching dtype x shape) and its
    file size is exactly 8 + header + data (shorter is C(truncated), longer is a warning).
    A single C(model.safetensors) without an index is valid.
  - Reads only the shard headers (a few KB each), unless O(manifest) is given; then it also hashes every file the
    manifest lists with SHA-256 in O(workers) parallel threads (minutes for hundreds of GB).
  - The index's C(metadata.total_size) is not compared with the files.
  - Fails when an error is found, with one line per error (C(<file>) colon C(<message>)) in C(msg). Warnings
    (C(stray_shard), C(oversized), C(unknown_dtype), C(checksum_unlisted)) do not fail it. Changes nothing;
    supports check mode.
options:
  path:
    description: The checkpoint directory (a Hugging Face snapshot directory of symlinks works).
    type: path
    required: true
  manifest:
    description:
      - A checksum file in C(sha256sum) format (C(cd DIR && sha256sum *.safetensors > SHA256SUMS)), relative to
        O(path) unless absolute. Its file names are relative to O(path).
      - Omitted, no checksum is computed.
    type: path
  workers:
    description: Threads hashing files for O(manifest); 0 means min(8, CPU count).
    type: int
    default: 0
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Check the weights' structure (seconds)
  weights_verify:
    path: /data/models/GLM-5.2-NVFP4

- name: Check the weights against their checksums
  weights_verify:
    path: /data/models/GLM-5.2-NVFP4
    manifest: SHA256SUMS
    workers: 8
  register: weights
"""

RETURN = r"""
weights_check:
  description: >-
    The check's result - ok (bool), errors and warnings (lists of {code, file, message}), shards (safetensors
    files checked), tensors, bytes (their total size), checked_checksums (files hashed), path and summary (one
    line). Also returned when the module fails.
  returned: always
  type: dict
  sample:
    ok: false
    errors:
      - code: truncated
        file: /data/models/GLM-5.2-NVFP4/model-00003-of-00008.safetensors
        message: "100 bytes missing: file is 1048576 bytes, its header declares 1048676 (8 + 168 header + 1048500 data)"
    warnings: []
    shards: 8
    tensors: 8
    bytes: 8389960
    checked_checksums: 0
    path: /data/models/GLM-5.2-NVFP4
    summary: "checkpoint BROKEN: 1 error (8 shard(s), 8 tensor(s), 0.0 GiB)"
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.weights_integrity import check_checkpoint, error_lines, summary  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "manifest": {"type": "path"},
            "workers": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    if module.params["workers"] < 0:
        module.fail_json(msg="workers must be 0 (automatic) or more")
    result = check_checkpoint(module.params["path"], module.params["manifest"], module.params["workers"] or None)
    result["summary"] = summary(result)
    for warning in result["warnings"]:
        module.warn(f"{warning['file']}: {warning['message']}")
    if not result["ok"]:
        module.fail_json(msg="\n".join(error_lines(result)), weights_check=result)
    module.exit_json(changed=False, weights_check=result)


if __name__ == "__main__":
    main()
