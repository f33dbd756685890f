"""Engine startup of the test double: platform, memory arithmetic, loading the weights, KV cache, graphs.

Timings follow docs/article.md#load-times: 433 GB load in ~6 min from the page cache, ~22 min cold. The shard
files are really read (so the page cache matters as it does to vLLM) and each shard's simulated time is
scaled from the checkpoint's declared size (`metadata.total_size` of model.safetensors.index.json) by whether
its pages were resident before the read. VLLM_TEST_DOUBLE_TIME_SCALE (simulated seconds per real second,
default 1) shortens the waits for tests; VLLM_ENGINE_READY_TIMEOUT_S (default 600, simulated seconds) makes a
slow load fail as vLLM's does.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import hashlib
import json
import mmap
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from . import log
from .generate import faults
from .platform import Gpu, PlatformError, resolve_backend, select_backend, visible_gpus

GIB = 1024**3
HOT_RATE = 433e9 / 360  # bytes/s from the page cache (article: ~6 min)
COLD_RATE = 433e9 / 1320  # bytes/s from disk (article: ~22 min)
PREFETCH_COLD_RATE = COLD_RATE * 3.4  # --safetensors-load-strategy prefetch (vLLM PR #36012: 1500 s -> 435 s)
REPLICATED_GB = 3.0  # embeddings, MTP layer: on every rank
KV_BYTES_PER_TOKEN = (512 + 64) * 2 * 78  # MLA latent + rope, bf16, 78 layers, replicated across TP ranks
READ_CHUNK = 16 * 1024 * 1024
# torch.compile of the model at TP8 (vllm-project/vllm#19824's breakdown: Dynamo bytecode ~15 s, ~70 s in all); with
# the compiled graphs in vLLM's cache (VLLM_CACHE_ROOT, ~/.cache/vllm: the serve role mounts serve_cache_dir/vllm
# there) Dynamo still runs and the graphs are loaded instead of compiled (compilation/backends.py).
DYNAMO_S, INDUCTOR_S, CACHE_LOAD_S = 15.0, 55.0, 3.0
# CUDA-graph capture: a fixed part and one per capture size. One A800 report: max_num_seqs 256 -> 32 (51 -> 11 sizes
# by vLLM's default rule, one token per request) cut the capture from 86 s to 66 s.
CAPTURE_FIXED_S, CAPTURE_PER_SIZE_S = 60.5, 0.5

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


class StartupFailure(Exception):
    def __init__(
        self, proc: str | None, exc: str, frames: list[tuple[str, int, str, str]] | None = None, exit_code: int = 1
    ) -> None:
        super().__init__(exc)
        self.proc, self.exc, self.frames, self.exit_code = proc, exc, frames or [], exit_code


SITE = "/usr/local/lib/python3.12/dist-packages"  # where the real image installs vllm
PACKAGE_DIR = Path(__file__).resolve().parent.parent
WORKER, RUNNER = f"{SITE}/vllm/v1/worker/gpu_worker.py", f"{SITE}/vllm/v1/worker/gpu_model_runner.py"
# The engine's frames above the stand-in modules' own, for each startup step.
PROFILE_FRAMES = [
    (WORKER, 298, "determine_available_memory", "self.model_runner.profile_run()"),
    (RUNNER, 4410, "profile_run", "hidden_states, last_hidden_states = self._dummy_run("),
]
CAPTURE_FRAMES = [
    (WORKER, 402, "compile_or_warm_up_model", "cuda_graph_memory_bytes = self.model_runner.capture_model()"),
    (RUNNER, 4952, "capture_model", "self._capture_cudagraphs("),
    (RUNNER, 5071, "_capture_cudagraphs", "self._dummy_run("),
]
MODEL_INIT_FRAMES = [
    (WORKER, 274, "load_model", "self.model_runner.load_model(eep_scale_up=eep_scale_up)"),
    (f"{SITE}/vllm/model_executor/model_loader/base_loader.py", 49, "load_model", "model = initialize_model("),
]
BACKEND_NAME_FRAMES = [
    (f"{SITE}/vllm/engine/arg_utils.py", 1712, "create_engine_config", "attention_config.backend = ("),
    (f"{SITE}/vllm/config/attention.py", 96, "validate_backend_before", "return AttentionBackendEnum[value.upper()]"),
    (f"{SITE}/vllm/v1/attention/backends/registry.py", 35, "__getitem__", "raise ValueError("),
]


def failure_from(exc: BaseException, proc: str, head: list[tuple[str, int, str, str]]) -> StartupFailure:
    """A Python exception of the double's stand-in vLLM modules as the worker's traceback: `head` (the engine's
    frames above them), then the frames of the vllm package (as installed in the real image), then its last line."""
    frames = list(head)
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename).resolve()
        if PACKAGE_DIR not in path.parents or path.is_relative_to(PACKAGE_DIR / "_double"):
            continue
        frames.append((f"{SITE}/vllm/{path.relative_to(PACKAGE_DIR)}", frame.lineno or 0, frame.name, frame.line or ""))
    return StartupFailure(proc, "".join(traceback.format_exception_only(type(exc), exc)).strip(), frames)


def resident_fraction(path: str) -> float:
    """Share of a file's pages in the page cache (mincore(2))."""
    size = os.path.getsize(path)
    if size == 0:
        return 1.0
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return 0.0
        vec = ctypes.create_string_buffer(pages)
        try:
            if _libc.mincore(addr, size, vec) != 0:
                return 0.0
            return sum(b & 1 for b in vec.raw) / pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


@dataclass
class Clock:
    """Simulated time: advances as the load proceeds; real sleeps are scaled down by `scale`."""

    scale: float
    timeout_s: float
    simulated: float = 0.0

    def spend(self, seconds: float, already_real: float = 0.0) -> None:
        if self.simulated + seconds > self.timeout_s:
            remaining = max(self.timeout_s - self.simulated, 0.0)
            time.sleep(max(remaining / self.scale - already_real, 0.0))
            raise StartupFailure(
                None,
                "TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow "
                f"weight loading for large models. Waited {int(self.timeout_s)}s (configured by "
                "VLLM_ENGINE_READY_TIMEOUT_S). To increase the timeout, set the environment variable: "
                "VLLM_ENGINE_READY_TIMEOUT_S=<seconds>",
                [
                    (
                        "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core_client.py",
                        742,
                        "__init__",
                        "raise TimeoutError(",
                    )
                ],
            )
        self.simulated += seconds
        real = max(seconds / self.scale - already_real, 0.0)
        time.sleep(real)
        log.skew(seconds - (already_real + real))


@dataclass
class Engine:
    """What startup established, for the server."""

    model: str
    served_name: str
    backend: str
    gpus: list[Gpu]
    kv_tokens: int
    max_model_len: int
    max_num_seqs: int
    sparse: bool
    force_mqa: bool
    speculative: dict | None
    simulated_startup_s: float
    facts: dict = field(default_factory=dict)


def _checkpoint(model: str) -> tuple[list[str], int, dict]:
    root = Path(model)
    if not (root / "config.json").exists():
        raise StartupFailure(
            None,
            f"OSError: {model} does not appear to have a file named config.json. Checkout "
            f"'https://huggingface.co/{model}/tree/main' for available files.",
        )
    config = json.loads((root / "config.json").read_text())
    shards = sorted(glob.glob(str(root / "*.safetensors")))
    if not shards:
        raise StartupFailure("EngineCore_DP0", f"RuntimeError: Cannot find any model weights with `{model}`")
    actual = sum(os.path.getsize(s) for s in shards)
    declared = actual
    index = root / "model.safetensors.index.json"
    if index.exists():
        declared = int(json.loads(index.read_text()).get("metadata", {}).get("total_size", actual))
    return shards, declared, config


def optimization_level(args) -> int:
    """-O0..-O3 (vLLM >= 0.12, config/vllm.py OptimizationLevel): 0 is no torch.compile and no CUDA graphs."""
    value = str(args.optimization_level)
    if value not in {"0", "1", "2", "3"}:
        raise StartupFailure(None, f"ValueError: {value!r} is not a valid OptimizationLevel")
    return int(value)


def capture_sizes(args, seqs: int, spec_tokens: int) -> list[int]:
    """The batch sizes vLLM 0.32 captures CUDA graphs for (config/vllm.py, _set_cudagraph_sizes), without the
    dynamic speculative tiers and the interactivity mode: given sizes as given; else 1, 2, 4, every 8 to 255 and every
    16 from 256 up to max_cudagraph_capture_size (default min(2 x max_num_seqs x tokens per decode step, 512), and
    then the uniform decode batches of 1, 2, 4, 8.. requests too), each at most max_num_batched_tokens."""
    compilation = args.compilation_config or {}
    tokens = args.max_num_batched_tokens or 8192
    given = args.cudagraph_capture_sizes or compilation.get("cudagraph_capture_sizes")
    if given:
        return sorted({int(size) for size in given if int(size) <= tokens})
    top = args.max_cudagraph_capture_size or compilation.get("max_cudagraph_capture_size")
    query = 1 + spec_tokens
    decode: list[int] = []
    if top is None:
        top = min(seqs * query * 2, 512)
        if query > 1:
            counts = [n for n in (1, 2, 4) if n <= seqs] + list(range(8, min(seqs + 1, 256), 8))
            counts += list(range(256, seqs + 1, 16))
            decode = [n * query for n in sorted({*counts, seqs}) if n * query <= top]
        elif seqs <= top:
            decode = [seqs]
    top = min(tokens, int(top))
    sizes = [n for n in (1, 2, 4) if n <= top] + list(range(8, min(top + 1, 256), 8)) + list(range(256, top + 1, 16))
    if tokens <= top:
        sizes.append(tokens)
    return sorted(set(sizes + [n for n in decode if n <= tokens]))


def compile_cache(args, env: dict[str, str], level: int) -> Path:
    """Where this configuration's compiled graphs are kept: VLLM_CACHE_ROOT (default ~/.cache/vllm)/torch_compile_cache,
    under a hash of what vLLM's hash covers (the model, its dtype and parallelism, the compilation's settings)."""
    root = env.get("VLLM_CACHE_ROOT") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache", "vllm")
    factors = [args.model, args.dtype, args.tensor_parallel_size, args.max_num_batched_tokens, level,
               json.dumps(args.compilation_config or {}, sort_keys=True), json.dumps(args.speculative_config or {},
               sort_keys=True)]  # fmt: skip
    digest = hashlib.sha256(json.dumps(factors, default=str).encode()).hexdigest()[:10]
    return Path(root) / "torch_compile_cache" / digest / "rank_0_0" / "backbone"


def compile_model(args, env: dict[str, str], level: int, clock: Clock, worker: str) -> float:
    """torch.compile as vLLM logs it, from its cache when an earlier start with the same settings left one there;
    its simulated seconds (0 without compilation: -O0 or --enforce-eager)."""
    if level == 0 or args.enforce_eager:
        return 0.0
    cache = compile_cache(args, env, level)
    clock.spend(DYNAMO_S)
    log.info("backends.py:1167", f"Dynamo bytecode transform time: {DYNAMO_S:.2f} s", worker)
    tokens = args.max_num_batched_tokens or 8192
    if (cache / "done").is_file():
        clock.spend(CACHE_LOAD_S)
        log.info(
            "backends.py:296",
            f"Directly load the compiled graph(s) for compile range (1, {tokens}) from the cache, took "
            f"{CACHE_LOAD_S:.3f} s",
            worker,
        )
        total = DYNAMO_S + CACHE_LOAD_S
    else:
        clock.spend(INDUCTOR_S)
        line = f"Compiling a graph for compile range (1, {tokens}) takes {INDUCTOR_S:.2f} s"
        log.info("backends.py:399", line, worker)
        with contextlib.suppress(OSError):  # an unwritable cache: compiled again next time, as vLLM does
            cache.mkdir(parents=True, exist_ok=True)
            (cache / "done").write_text("compiled by the vLLM test double\n")
        total = DYNAMO_S + INDUCTOR_S
    log.info("monitor.py:20", f"torch.compile took {total:.2f} s in total", worker)
    return total


def start(args, env: dict[str, str]) -> Engine:
    scale = float(env.get("VLLM_TEST_DOUBLE_TIME_SCALE", "1"))
    clock = Clock(scale=scale, timeout_s=float(env.get("VLLM_ENGINE_READY_TIMEOUT_S", "600")))
    tp = args.tensor_parallel_size
    try:
        gpus = visible_gpus()
    except PlatformError as exc:
        raise StartupFailure("EngineCore_DP0", str(exc)) from exc
    if tp > len(gpus):
        raise StartupFailure(
            f"Worker_TP{len(gpus)}",
            "torch.AcceleratorError: CUDA error: invalid device ordinal",
            [
                (
                    "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py",
                    251,
                    "init_device",
                    "torch.cuda.set_device(self.device)",
                )
            ],
        )
    shards, declared, config = _checkpoint(args.model)
    sparse = "index_topk" in config
    attention_config = args.attention_config or {}
    force_mqa = bool(attention_config.get("sparse_mla_force_mqa", False))
    try:  # EngineArgs.create_engine_config: AttentionConfig.validate_backend_before
        explicit = resolve_backend(args.attention_backend or attention_config.get("backend"))
    except PlatformError as exc:
        raise StartupFailure(None, str(exc), BACKEND_NAME_FRAMES) from exc
    max_len = args.max_model_len or int(config.get("max_position_embeddings", 202752))
    seqs = args.max_num_seqs or 1024
    spec_tokens = int((args.speculative_config or {}).get("num_speculative_tokens", 0) or 0)
    log.info(
        "core.py:95",
        f"Initializing a V1 LLM engine (v0.26.0) with config: model='{args.model}', "
        f"dtype=torch.bfloat16, max_seq_len={args.max_model_len or config.get('max_position_embeddings', 0)}, "
        f"tensor_parallel_size={tp}, kv_cache_dtype={args.kv_cache_dtype}, "
        f"served_model_name={args.served_model_name}, enforce_eager={args.enforce_eager}",
        "EngineCore_DP0",
    )
    gpu = gpus[0]
    worker = "Worker_TP0"
    runner = None
    if sparse:
        try:  # the model's layers are built: the indexer first, then the attention layer selects its backend
            from ..model_executor.layers import sparse_attn_indexer
            from .model_runner import ModelRunner

            runner = ModelRunner(
                config,
                tensor_parallel_size=tp,
                max_model_len=max_len,
                max_num_seqs=seqs,
                max_num_batched_tokens=args.max_num_batched_tokens or 8192,
                num_speculative_tokens=spec_tokens,
            )
            indexer_line = sparse_attn_indexer.indexer_log_line()
        except (StartupFailure, PlatformError):
            raise
        except Exception as exc:  # any error of the (patched) package fails the start, as in vLLM
            raise failure_from(exc, worker, MODEL_INIT_FRAMES) from exc
        if indexer_line:
            log.info("sparse_attn_indexer.py:790", indexer_line, worker)
        try:
            backend, line = select_backend(gpu.capability, args.kv_cache_dtype, explicit)
            runner.init_attention(resolve_backend(backend))
        except PlatformError as exc:
            raise StartupFailure(
                worker,
                str(exc),
                [
                    (
                        "/usr/local/lib/python3.12/dist-packages/vllm/platforms/cuda.py",
                        471,
                        "get_attn_backend_cls",
                        "raise ValueError(",
                    )
                ],
            ) from exc
        except Exception as exc:  # e.g. a backend module that fails while it is imported
            raise failure_from(exc, worker, MODEL_INIT_FRAMES) from exc
        if "no_sparse_marker" not in faults():  # a bad release for the canary's tests (generate.py)
            log.info("cuda.py:487", line, worker)
    else:
        backend = "FLASH_ATTN"
        log.info("cuda.py:487", "Using FLASH_ATTN attention backend out of potential backends: [FLASH_ATTN].", worker)
    if gpu.capability < (10, 0) and "nvfp4" in json.dumps(config.get("quantization_config", {})).lower():
        log.info("marlin_utils_fp4.py:215", "Using 'MARLIN' NvFp4 MoE backend", worker)

    # Memory: weights / TP (+ replicated parts) must fit in memory x utilization next to activations.
    budget_gib = gpu.memory_mib / 1024 * args.gpu_memory_utilization
    per_gpu_gib = (declared / tp + REPLICATED_GB * 1e9 * declared / 433e9) / GIB
    activation_gib = 1.5 + (args.max_num_batched_tokens or 8192) * 0.55 / 1024
    level = optimization_level(args)
    graphs = not args.enforce_eager and level > 0
    graphs_gib = 2.4 if graphs else 0.0

    # Loading: every shard really read; simulated time by page-cache residency before the read.
    prefetch = args.safetensors_load_strategy == "prefetch"
    cold_rate = PREFETCH_COLD_RATE if prefetch else COLD_RATE
    actual_total = sum(os.path.getsize(s) for s in shards)
    n = len(shards)
    log.raw(f"Loading safetensors checkpoint shards:   0% Completed | 0/{n} [00:00<?, ?it/s]\r")
    loaded_gib = 0.0
    hot_bytes = 0.0
    for k, shard in enumerate(shards, 1):
        size = os.path.getsize(shard)
        share = size / actual_total if actual_total else 1 / n
        resident = resident_fraction(shard)
        started = time.monotonic()
        with open(shard, "rb") as handle:
            while handle.read(READ_CHUNK):
                pass
        nominal = declared * share
        hot_bytes += nominal * resident
        loaded_gib += per_gpu_gib * share
        if loaded_gib > budget_gib - activation_gib * 0.2:
            free = max(budget_gib - (loaded_gib - per_gpu_gib * share), 0.0)
            raise StartupFailure(
                worker,
                (
                    f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {per_gpu_gib * share:.2f} GiB. "
                    f"GPU 0 has a total capacity of {gpu.memory_mib / 1024:.2f} GiB of which {free:.2f} GiB is free. "
                    f"Of the allocated memory {loaded_gib - per_gpu_gib * share:.2f} GiB is allocated by PyTorch."
                ),
                [
                    (
                        "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/model_loader/default_loader.py",
                        272,
                        "load_weights",
                        "loaded_weights = model.load_weights(",
                    )
                ],
            )
        clock.spend(nominal * (resident / HOT_RATE + (1 - resident) / cold_rate), time.monotonic() - started)
        elapsed = clock.simulated
        pct = int(100 * k / n)
        log.raw(
            f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {k}/{n} "
            f"[{int(elapsed // 60):02d}:{int(elapsed % 60):02d}<00:00, {k / max(elapsed, 1e-6):.2f}it/s]"
            + ("\n" if k == n else "\r")
        )
    load_s = clock.simulated
    log.info("default_loader.py:314", f"Loading weights took {load_s:.2f} seconds", worker)
    log.info(
        "gpu_model_runner.py:3025", f"Model loading took {per_gpu_gib:.4f} GiB memory and {load_s:.6f} seconds", worker
    )

    compile_model(args, env, level, clock, worker)  # the profiling run's first forward compiles
    if runner is not None:  # the profiling run: one dummy forward of max_num_batched_tokens tokens
        try:
            runner.profile_run()
        except Exception as exc:
            raise failure_from(exc, worker, PROFILE_FRAMES) from exc

    kv_gib = budget_gib - per_gpu_gib - activation_gib - graphs_gib
    if kv_gib <= 0:
        raise StartupFailure(
            "EngineCore_DP0",
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine.",
        )
    kv_tokens = int(kv_gib * GIB / KV_BYTES_PER_TOKEN)
    if max_len > kv_tokens:
        raise StartupFailure(
            "EngineCore_DP0",
            (
                f"ValueError: To serve at least one request with the models's max seq len ({max_len}), "
                f"({max_len * KV_BYTES_PER_TOKEN / GIB:.2f} GiB KV cache is needed, which is larger than the available "
                f"KV cache memory ({kv_gib:.2f} GiB). Based on the available memory, the estimated maximum model "
                f"length is {kv_tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                "initializing the engine."
            ),
        )
    clock.spend(10.0)  # profiling run
    log.info("gpu_worker.py:298", f"Available KV cache memory: {kv_gib:.2f} GiB", worker)
    log.info("kv_cache_utils.py:1087", f"GPU KV cache size: {kv_tokens:,} tokens", "EngineCore_DP0")
    log.info(
        "kv_cache_utils.py:1091",
        f"Maximum concurrency for {max_len:,} tokens per request: {kv_tokens / max_len:.2f}x",
        "EngineCore_DP0",
    )
    if graphs:
        if runner is not None:
            try:
                runner.capture_cudagraphs()
            except Exception as exc:
                raise failure_from(exc, worker, CAPTURE_FRAMES) from exc
        graph_s = CAPTURE_FIXED_S + CAPTURE_PER_SIZE_S * len(capture_sizes(args, seqs, spec_tokens))
        clock.spend(graph_s)
        log.info(
            "gpu_model_runner.py:4012",
            f"Graph capturing finished in {int(graph_s)} secs, took {graphs_gib:.2f} GiB",
            worker,
        )
    log.info(
        "core.py:221",
        f"init engine (profile, create kv cache, warmup model) took {clock.simulated - load_s:.2f} seconds",
        "EngineCore_DP0",
    )
    return Engine(
        model=args.model,
        served_name=args.served_model_name,
        backend=backend,
        gpus=gpus,
        kv_tokens=kv_tokens,
        max_model_len=max_len,
        max_num_seqs=seqs,
        sparse=sparse,
        force_mqa=force_mqa,
        speculative=args.speculative_config,
        simulated_startup_s=clock.simulated,
        facts={
            "per_gpu_weights_gib": round(per_gpu_gib, 2),
            "kv_cache_gib": round(kv_gib, 2),
            "load_s": round(load_s, 1),
            "hot_share": round(hot_bytes / declared, 3) if declared else 0,
        },
    )
