#!/usr/bin/env python3
"""Generate a small stand-in checkpoint (test data) shaped like GLM-5.2-NVFP4's.

Real safetensors shards (8-byte header length, JSON header, tensor data), a model.safetensors.index.json whose
`metadata.total_size` declares the real model's size (433 GB by default) so that the vLLM test double does its
memory and timing arithmetic as for the real weights, and a config.json with the sparse-attention fields.

    make_test_weights.py --out DIR [--shards 8] [--shard-mib 64] [--declared-gb 433]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
from pathlib import Path

CONFIG = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "hidden_size": 6144,
    "num_hidden_layers": 78,
    "num_attention_heads": 64,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "index_topk": 2048,
    "max_position_embeddings": 202752,
    "num_nextn_predict_layers": 1,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
}


def write_shard(path: Path, name: str, size: int) -> None:
    header = json.dumps(
        {"__metadata__": {"format": "pt"}, name: {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}
    ).encode()
    header += b" " * (-len(header) % 8)
    chunk = os.urandom(1024 * 1024)
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        left = size
        while left > 0:
            handle.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--shard-mib", type=int, default=64)
    ap.add_argument("--declared-gb", type=float, default=433)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for k in range(1, a.shards + 1):
        shard = f"model-{k:05d}-of-{a.shards:05d}.safetensors"
        tensor = f"model.layers.{k - 1}.packed_weight"
        weight_map[tensor] = shard
        target = a.out / shard
        if not target.exists() or target.stat().st_size < a.shard_mib * 1024 * 1024:
            write_shard(target, tensor, a.shard_mib * 1024 * 1024)
    index = {"metadata": {"total_size": int(a.declared_gb * 1e9)}, "weight_map": weight_map}
    (a.out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (a.out / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    print(f"{a.shards} shards of {a.shard_mib} MiB in {a.out} (declared {a.declared_gb:g} GB)")


if __name__ == "__main__":
    main()
