#!/usr/bin/env python3
"""All-reduce bandwidth check of the GPUs of one host, run under torchrun.

    torchrun --nproc_per_node=8 allreduce_check.py [--sizes-mib 64,256,1024] [--iters 20] [--timeout-s 120]

One process per GPU; backend NCCL when CUDA is available, else Gloo on the CPU (the unit tests run it so).
Rank 0 prints one line per message size,

    size_mib=64 ranks=8 time_ms=... algbw_gbps=... busbw_gbps=...

and at the end one line `RESULT {...json...}`. Bandwidths are in GB/s (1e9 bytes/s) as nccl-tests report
them: algbw = bytes / time, busbw = algbw * 2 * (n - 1) / n for all-reduce, the figure to compare with the
link speed. The time of a size is the slowest rank's mean over the timed iterations.

Every collective runs under the process group timeout (--timeout-s): a peer-to-peer path that hangs (PCIe
ACS/IOMMU redirection is the usual cause) becomes an error with a non-zero exit instead of a silent hang.
The first all-reduce of each size is checked for the right sum, so a broken transport cannot pass as fast.

Standalone on purpose: it runs inside the serving image, which has torch and nothing of this project.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

MIB = 1024 * 1024
GPU_SIZES_MIB = (64, 256, 1024)
CPU_SIZES_MIB = (1, 4)


def bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor 2(n-1)/n: the share of the data each link carries."""
    return 2.0 * (ranks - 1) / ranks if ranks > 0 else 0.0


def significant(value: float, digits: int = 6) -> float:
    """`value` rounded to `digits` significant digits: a bandwidth measured on a slow or loaded machine (0.0233 GB/s)
    keeps its precision, which rounding to fixed decimals would take away (0.023)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def fixed(value: float, digits: int = 4) -> str:
    """`value` with at least two decimals and `digits` significant ones, never in exponent form (the lines'
    `key=number` format): 270.83, 13.10, 0.02331."""
    decimals = 2 if value == 0 or not math.isfinite(value) else digits - 1 - math.floor(math.log10(abs(value)))
    return f"{value:.{max(2, decimals)}f}"


def parse_sizes(text: str) -> list[float]:
    sizes = [float(s) for s in text.replace(" ", "").split(",") if s]
    if not sizes or any(s <= 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be positive numbers of MiB, got {text!r}")
    return sizes


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mib", type=parse_sizes, default=None, help="comma-separated message sizes in MiB")
    parser.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size")
    parser.add_argument("--iters", type=int, default=20, help="timed all-reduces per size")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="process group (collective) timeout")
    parser.add_argument(
        "--dtype", choices=("bfloat16", "float16", "float32"), default=None, help="bfloat16 on GPU, float32 on CPU"
    )
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None, help="nccl when CUDA is available")
    return parser.parse_args(argv)


def log(rank: int, text: str) -> None:
    if rank == 0:
        print(text, flush=True)


def measure(size_mib: float, dtype: torch.dtype, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    ranks = dist.get_world_size()
    rank = dist.get_rank()
    element = torch.tensor([], dtype=dtype).element_size()
    numel = max(1, int(size_mib * MIB) // element)
    nbytes = numel * element
    buf = torch.full((numel,), float(rank + 1), dtype=dtype, device=device)
    dist.all_reduce(buf)
    expected = ranks * (ranks + 1) / 2  # small integers: exact in every dtype used here
    correct = bool(torch.all(buf == expected).item())
    buf.zero_()  # timed reductions of zeros stay zeros: no overflow, same traffic
    for _ in range(args.warmup):
        dist.all_reduce(buf)
    sync(device)
    barrier(device)
    start = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(buf)
    sync(device)
    elapsed = (time.perf_counter() - start) / args.iters
    # The slowest rank sets the pace of a tensor-parallel step.
    slowest = torch.tensor([elapsed], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    seconds = float(slowest.item())
    ok = torch.tensor([1 if correct else 0], dtype=torch.int32, device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    algbw = nbytes / seconds / 1e9
    return {
        "size_mib": round(nbytes / MIB, 3),
        "bytes": nbytes,
        "ranks": ranks,
        "time_ms": significant(seconds * 1e3),
        "algbw_gbps": significant(algbw),
        "busbw_gbps": significant(algbw * bus_factor(ranks)),
        "correct": bool(ok.item()),
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def barrier(device: torch.device) -> None:
    """A barrier on this rank's GPU (NCCL otherwise guesses the device and warns)."""
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()


def missing_peer_access(rank: int) -> list[str]:
    """GPU pairs without CUDA peer access (rank 0 asks for all visible GPUs); NCCL then goes through the host."""
    if rank != 0 or not torch.cuda.is_available():
        return []
    count = torch.cuda.device_count()
    return [
        f"{a}->{b}"
        for a in range(count)
        for b in range(count)
        if a != b and not torch.cuda.can_device_access_peer(a, b)
    ]


def fmt_size(size_mib: float) -> str:
    return f"{size_mib:g}"


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    cuda = torch.cuda.is_available()
    backend = args.backend or ("nccl" if cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    sizes = args.sizes_mib or list(GPU_SIZES_MIB if device.type == "cuda" else CPU_SIZES_MIB)
    timeout = datetime.timedelta(seconds=args.timeout_s)
    started = time.perf_counter()
    dist.init_process_group(backend=backend, timeout=timeout)
    rank, ranks = dist.get_rank(), dist.get_world_size()
    info: dict[str, Any] = {
        "backend": backend,
        "ranks": ranks,
        "dtype": str(dtype).replace("torch.", ""),
        "warmup": args.warmup,
        "iters": args.iters,
        "timeout_s": args.timeout_s,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": None,
        "device": "cpu",
    }
    if device.type == "cuda":
        info["device"] = torch.cuda.get_device_name(device)
        try:
            info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):
            info["nccl"] = None
        info["gpus_visible"] = torch.cuda.device_count()
        info["p2p_missing"] = missing_peer_access(rank)
    log(
        rank,
        f"# allreduce_check backend={backend} ranks={ranks} device={info['device']!r} dtype={info['dtype']} "
        f"torch={info['torch']} nccl={info['nccl']} warmup={args.warmup} iters={args.iters}",
    )
    results = []
    for size in sizes:
        record = measure(size, dtype, device, args)
        results.append(record)
        log(
            rank,
            f"size_mib={fmt_size(record['size_mib'])} ranks={ranks} time_ms={fixed(record['time_ms'])} "
            f"algbw_gbps={fixed(record['algbw_gbps'])} busbw_gbps={fixed(record['busbw_gbps'])}"
            + ("" if record["correct"] else " WRONG_SUM"),
        )
    correct = all(r["correct"] for r in results)
    summary = dict(
        info,
        sizes=results,
        max_busbw_gbps=max(r["busbw_gbps"] for r in results),
        correct=correct,
        elapsed_s=round(time.perf_counter() - started, 2),
    )
    log(rank, "RESULT " + json.dumps(summary, sort_keys=True))
    barrier(device)
    dist.destroy_process_group()
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
