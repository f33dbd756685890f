"""The vLLM test double's startup contract: arguments, platform and backend rules, memory, loading."""

from __future__ import annotations

import re
import time

import pytest
import requests
from ansible_collections.a800.vllm.plugins.module_utils import vllm_log
from conftest import evict_from_page_cache, locked_in_memory

LOAD_TOOK = re.compile(r"Loading weights took ([0-9.]+) seconds")
# The double's load model (README): 433 GB in 360 simulated seconds from the page cache, 1320 from disk; a load's
# time is the declared size x (resident share / hot rate + missing share / cold rate), so it lies between the two.
HOT_S, COLD_S = 360, 1320


def wait_for_log(run, line: str, bound_s: float = 300) -> None:
    """Wait until `run`'s log holds `line` (the bound is a safety net for a saturated machine)."""
    began = time.monotonic()
    while line not in run.log:
        assert run.proc.poll() is None, f"the double exited before logging {line!r}:\n{run.log[-3000:]}"
        assert time.monotonic() - began < bound_s, f"no {line!r} after {bound_s:g} s:\n{run.log[-3000:]}"
        time.sleep(0.05)


def started(run) -> bool:
    return "Application startup complete." in run.log and run.proc.poll() is None


# --- arguments: argparse errors exit 2, parser names fail with exit 1 before loading -----------------------------
@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--kv-cache-dtype", "bf16", "argument --kv-cache-dtype: invalid choice: 'bf16' (choose from"),
        ("--dtype", "bf16", "argument --dtype: invalid choice: 'bf16' (choose from"),
        ("--tensor-parallel-size", "8.5", "argument --tensor-parallel-size/-tp: invalid int value: '8.5'"),
        ("--attention-config", "{bad json", "argument --attention-config/-ac: 1 validation error for AttentionConfig"),
        ("--speculative-config", '{"method": "mtp",', "argument --speculative-config/-sc: Value {"),
    ],
)
def test_bad_arguments_exit_2_at_parse_time(launcher, flag, value, message):
    run = launcher.start([flag] + ([value] if value else []), wait=False)
    assert launcher.finish(run) == 2
    assert "vllm serve: error: " + message in run.log
    assert "Loading safetensors" not in run.log


def test_unknown_flag_is_reported_by_the_top_level_parser(launcher):
    run = launcher.start(["--no-such-flag"], wait=False)
    assert launcher.finish(run) == 2
    assert "vllm: error: unrecognized arguments: --no-such-flag" in run.log


@pytest.mark.parametrize(("flag", "name"), [("--reasoning-parser", "glm99"), ("--tool-call-parser", "nosuch")])
def test_unknown_parser_names_fail_with_exit_1_before_loading(launcher, flag, name):
    run = launcher.start([flag, name], wait=False)
    assert launcher.finish(run) == 1
    kind = "Reasoning" if flag == "--reasoning-parser" else "Tool"
    assert f"KeyError: \"{kind} parser '{name}' not found. Available parsers:" in run.log
    assert "Loading safetensors" not in run.log


# --- platform: the sparse backend on sm80 needs the patched image --------------------------------------------------
def test_unpatched_image_on_sm80_has_no_sparse_backend(launcher):
    run = launcher.start(image="unpatched", wait=False)
    assert launcher.finish(run) == 1
    assert "ValueError: No valid attention backend found for cuda" in run.log
    assert (
        "Reasons: {FLASH_ATTN_MLA_SPARSE: [compute capability not supported], "
        "FLASHMLA_SPARSE: [compute capability not supported]}."
    ) in run.log
    assert "RuntimeError: Engine core initialization failed." in run.log


def test_patched_image_logs_the_articles_two_lines(launcher):
    run = launcher.start()
    assert started(run), run.log
    assert (
        "[sparse_attn_indexer.py:790] DeepGEMM not supported on this platform; using Triton fallback for "
        "sparse attention indexer."
    ) in run.log
    assert (
        "[cuda.py:487] Using TRITON_MLA_SPARSE attention backend out of potential backends: [TRITON_MLA_SPARSE]."
    ) in run.log
    assert requests.get(run.url + "/health", timeout=5).status_code == 200


def test_backend_environment_variable_is_ignored(launcher):
    run = launcher.start(image="unpatched", env={"VLLM_ATTENTION_BACKEND": "TRITON_MLA_SPARSE"}, wait=False)
    assert launcher.finish(run) == 1
    assert "No valid attention backend found" in run.log


@pytest.mark.parametrize("how", ["flag", "attention-config"])
def test_backend_selected_explicitly(launcher, how):
    if how == "flag":
        run = launcher.start(["--attention-backend", "TRITON_MLA_SPARSE"])
    else:
        run = launcher.start(["--attention-config", '{"sparse_mla_force_mqa": true, "backend": "TRITON_MLA_SPARSE"}'])
    assert started(run), run.log
    assert "Using TRITON_MLA_SPARSE backend." in run.log


@pytest.mark.parametrize("how", ["flag", "attention-config"])
def test_explicit_backend_missing_from_unpatched_image(launcher, how):
    """The name goes through the image's AttentionBackendEnum, which v0.26.0 lacks it in: the enum's own error,
    raised while the engine config is made, before anything loads."""
    if how == "flag":
        run = launcher.start(["--attention-backend", "TRITON_MLA_SPARSE"], image="unpatched", wait=False)
    else:
        config = '{"sparse_mla_force_mqa": true, "backend": "TRITON_MLA_SPARSE"}'
        run = launcher.start(["--attention-config", config], image="unpatched", wait=False)
    assert launcher.finish(run) == 1
    assert "ValueError: Unknown attention backend: 'TRITON_MLA_SPARSE'. Valid options are: FLASH_ATTN, " in run.log
    assert ", FLASHMLA_SPARSE, " in run.log and "in create_engine_config" in run.log
    assert "Loading safetensors" not in run.log


def test_backend_names_are_read_like_vllm_reads_them(launcher):
    """Any string parses (vLLM's flag is a str); the enum lookup upper-cases it and "auto" means automatic."""
    auto = launcher.start(["--attention-backend", "auto"])
    assert started(auto), auto.log
    assert "Using TRITON_MLA_SPARSE attention backend out of potential backends" in auto.log
    lower = launcher.start(["--attention-backend", "triton_mla_sparse"])
    assert started(lower), lower.log
    assert "Using TRITON_MLA_SPARSE backend." in lower.log
    unknown = launcher.start(["--attention-backend", "no_such_backend"], wait=False)
    assert launcher.finish(unknown) == 1
    assert "ValueError: Unknown attention backend: 'NO_SUCH_BACKEND'. Valid options are: " in unknown.log


def test_explicit_backend_the_gpu_cannot_run(launcher):
    run = launcher.start(["--attention-backend", "FLASHMLA_SPARSE"], wait=False)
    assert launcher.finish(run) == 1
    assert (
        "ValueError: Selected backend AttentionBackendEnum.FLASHMLA_SPARSE is not valid for this configuration. "
        "Reason: ['compute capability not supported']"
    ) in run.log


def test_fp8_kv_cache_has_no_backend_on_sm80(launcher):
    run = launcher.start(["--kv-cache-dtype", "fp8"], wait=False)
    assert launcher.finish(run) == 1
    assert "TRITON_MLA_SPARSE: [kv_cache_dtype not supported]" in run.log


@pytest.mark.parametrize("image", ["unpatched", "patched"])
def test_hopper_uses_its_own_sparse_backends_and_deepgemm(launcher, image):
    """v0.26.0's candidates for 9.x (vllm/platforms/cuda.py) put FlashAttention's sparse MLA first (the patch
    appends TRITON_MLA_SPARSE after them); DeepGEMM runs the indexer, so no Triton fallback is announced."""
    run = launcher.start(image=image, gpus={"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0"})
    assert started(run), run.log
    valid = "[FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE" + (", TRITON_MLA_SPARSE]" if image == "patched" else "]")
    assert f"Using FLASH_ATTN_MLA_SPARSE attention backend out of potential backends: {valid}." in run.log
    assert "DeepGEMM not supported" not in run.log


def test_no_gpu_visible(launcher):
    run = launcher.start(env={"PATH": "/usr/bin:/bin"}, wait=False)
    assert launcher.finish(run) == 1
    assert "Failed to infer device type" in run.log


# --- memory: weights / TP + KV + graphs must fit -------------------------------------------------------------------
def test_tp4_of_433_gb_runs_out_of_memory(launcher):
    run = launcher.start(["--tensor-parallel-size", "4"], gpus={"count": 4}, wait=False)
    assert launcher.finish(run) == 1
    assert "torch.OutOfMemoryError: CUDA out of memory." in run.log


def test_tp8_on_40_gb_cards_runs_out_of_memory(launcher):
    run = launcher.start(gpus={"name": "NVIDIA A100-PCIE-40GB", "memory_mib": 40960}, wait=False)
    assert launcher.finish(run) == 1
    assert "CUDA out of memory" in run.log


def test_more_ranks_than_gpus(launcher):
    run = launcher.start(gpus={"count": 4}, wait=False)
    assert launcher.finish(run) == 1
    assert "invalid device ordinal" in run.log


def test_tp8_fits_and_reports_kv_cache(launcher):
    run = launcher.start()
    assert started(run), run.log
    assert re.search(r"Model loading took 5\d\.\d+ GiB memory", run.log)
    assert re.search(r"GPU KV cache size: [\d,]+ tokens", run.log)
    assert "Graph capturing finished in" in run.log


# --- after the weights: torch.compile and its cache, the CUDA graphs, -O0 ------------------------------------------
def phases(run) -> dict[str, float]:
    """The start's ledger as the serve role reads it (vllm_log.ledger): seconds per phase."""
    return {p["phase"]: p["s"] for p in vllm_log.ledger(vllm_log.split_lines(run.log))["phases"]}


def test_a_second_start_loads_the_graphs_the_first_compiled(launcher):
    """vLLM's compile cache (VLLM_CACHE_ROOT): the second start with the same settings finds the compiled graphs
    and loads them; Dynamo's bytecode transform still runs (vllm-project/vllm#19824's figures: 15 s of ~70 s)."""
    first = launcher.start()
    second = launcher.start()
    assert started(first) and started(second), second.log
    assert "Compiling a graph for compile range (1, 8192) takes" in first.log
    assert "Directly load the compiled graph(s) for compile range (1, 8192) from the cache" in second.log
    assert "Compiling a graph" not in second.log
    assert (phases(first)["torch_compile"], phases(second)["torch_compile"]) == (70.0, 18.0)
    # another compilation setting is another entry of the cache: compiled again
    third = launcher.start(["--max-num-batched-tokens", "4096"])
    assert started(third) and "Compiling a graph for compile range (1, 4096) takes" in third.log, third.log


def test_O0_starts_without_compiling_or_capturing_graphs(launcher):
    run = launcher.start(["-O0"])
    assert started(run), run.log
    assert "torch.compile took" not in run.log and "Graph capturing finished" not in run.log
    assert {"torch_compile", "cuda_graphs"} & set(phases(run)) == set()


def test_fewer_capture_sizes_capture_faster(launcher):
    """vLLM 0.32's sizes for 16 requests of 6 tokens a step (MTP 5): 1, 2, 4, 8..192 by 8, and the decode batches
    6, 12, 24, 48, 96 (29 sizes); --max-cudagraph-capture-size 96 leaves 1, 2, 4, 8..96 (15)."""
    default = launcher.start()
    fewer = launcher.start(["--max-cudagraph-capture-size", "96"])
    assert started(default) and started(fewer), fewer.log
    assert (phases(default)["cuda_graphs"], phases(fewer)["cuda_graphs"]) == (75.0, 68.0)


# --- loading: the shards are read, the page cache decides the time --------------------------------------------------
def evict(path):
    evict_from_page_cache(path.glob("*.safetensors"))


def test_progress_lines_for_every_shard(launcher):
    run = launcher.start()
    assert started(run), run.log
    for k in range(1, 5):
        assert f"Loading safetensors checkpoint shards: {25 * k:3d}% Completed | {k}/4" in run.log


def test_cold_load_is_slower_than_hot_and_fills_the_page_cache(launcher, weights):
    evict(weights)
    env = {"VLLM_ENGINE_READY_TIMEOUT_S": "3600"}
    cold = launcher.start(env=env)
    assert started(cold), cold.log
    # the cold start read every shard into the page cache; locked there, no reclaim or drop of the caches can take
    # a page back before the hot start reads them
    with locked_in_memory(sorted(weights.glob("*.safetensors"))):
        hot = launcher.start(env=env)
    assert started(hot), hot.log
    cold_s = float(LOAD_TOOK.search(cold.log).group(1))
    hot_s = float(LOAD_TOOK.search(hot.log).group(1))
    print(f"\nBENCH double cold load: {cold_s:.0f} s simulated (model {COLD_S})")
    print(f"\nBENCH double hot load: {hot_s:.0f} s simulated (model {HOT_S})")
    # the cold start's share of resident pages is the machine's (memory pressure); the hot one read locked pages
    assert hot_s == pytest.approx(HOT_S, abs=0.1) and HOT_S < cold_s <= COLD_S + 0.01, (hot_s, cold_s)


def test_slow_load_hits_the_engine_ready_timeout(launcher, weights):
    evict(weights)
    try:
        # vLLM's default VLLM_ENGINE_READY_TIMEOUT_S=600 < a cold 433 GB load (the harness sets a cold load's)
        run = launcher.start(wait=False, env={"VLLM_ENGINE_READY_TIMEOUT_S": "600"})
        assert launcher.finish(run) == 1
        assert "TimeoutError: Timed out waiting for engine core processes to start." in run.log
        assert "Waited 600s (configured by VLLM_ENGINE_READY_TIMEOUT_S)" in run.log
    finally:  # the weights fixture is shared by the session: leave it in the page cache, as later tests expect
        for shard in sorted(weights.glob("*.safetensors")):
            shard.read_bytes()


# --- the harness under load: what CI's saturated machine does to a start -----------------------------------------
def test_a_start_from_evicted_weights_still_serves(launcher, weights):
    """Memory pressure elsewhere may have evicted the session's weights: the start is cold, and serves."""
    evict(weights)
    run = launcher.start()
    assert started(run), run.log[-3000:]
    assert float(LOAD_TOOK.search(run.log).group(1)) > HOT_S  # it was cold: the harness' timeout let it finish


def test_a_port_taken_before_the_double_binds_it_is_replaced(launcher, monkeypatch):
    import socket

    import harness

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1], harness.free_port()])
        monkeypatch.setattr(harness, "free_port", lambda: next(ports))
        run = launcher.start()
        assert started(run), run.log[-3000:]
        assert run.port != taken.getsockname()[1]
        assert "address already in use" in launcher.runs[0].log.lower() and len(launcher.runs) == 2


def test_a_start_not_ready_in_time_raises_with_its_log(launcher):
    """At real time (scale 1) the load takes minutes: the harness stops it and says so, with its log. The short
    bound starts once the double has logged its first line, so how long a loaded machine takes to start Python
    does not decide the outcome (CI once saw an empty log after 2 s)."""
    run = launcher.start(env={"VLLM_TEST_DOUBLE_TIME_SCALE": "1"}, wait=False)
    wait_for_log(run, "vLLM API server version")
    with pytest.raises(TimeoutError, match="was not ready after 2 s") as raised:
        launcher.wait_ready(run, timeout=2)
    assert "vLLM API server version" in str(raised.value)
    assert launcher.runs[-1].proc.poll() is not None
