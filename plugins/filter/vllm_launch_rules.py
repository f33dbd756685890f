"""Filters: validate the rendered `vllm serve` launch before anything restarts.

A restart reloads 433 GB of weights (6 min from the page cache, 22 min from disk) before most configuration
errors show, so every pitfall of the article (docs/article.md) and of vLLM's own behaviour (docs/vllm.md) is a
named rule here that runs in milliseconds on the controller. Each rule returns a check record
(plugins/module_utils/checks.py), so they print, fail and reach ansible-runner callers as the preflight's do.

Rules that need the host (port, image self-check, weights, the image's own argument parser) take their facts from
`context`; when a fact is missing (preflight on a bare host) the rule is `pending`, not a pass.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.a800.vllm.plugins.filter.vllm_launch import json_value
from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, PENDING, WARN, check
from ansible_collections.a800.vllm.plugins.module_utils.cuda_requirement import image_cuda_driver_check

# vLLM's argparse choices come from the recorded option table of `vllm serve` (one release's parser,
# scripts/record_vllm_serve_flags.py), the one home of that fact (docs/vllm.md#argument-choices). `bf16` is no choice.
FLAG_TABLE = Path(__file__).resolve().parents[2] / "roles" / "a800" / "files" / "vllm_serve_flags.yml"
SPELLINGS = {"bf16": "bfloat16", "fp16": "float16", "f16": "float16", "fp32": "float32", "f32": "float32"}
# Sparse MLA backends and the compute capabilities they run on (docs/vllm.md#sparse-mla-on-sm80: PR #38476).
SPARSE_BACKENDS = {"TRITON_MLA_SPARSE": (8, 0), "FLASHMLA_SPARSE": (9, 0), "FLASHINFER_MLA_SPARSE": (10, 0)}
SPARSE_SM80_KV_DTYPES = ("auto", "float16", "bfloat16")
JSON_OPTIONS = ("attention_config", "speculative_config", "compilation_config", "kv_transfer_config")
GB = 1e9
_TAG_RELEASE = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?)(?:[^\d.]|$)")


@functools.lru_cache(maxsize=1)
def recorded_choices() -> tuple[str, dict[str, tuple[str, ...]]]:
    """(the vLLM release of the recorded table, {option key: its choices}), read once per process with libyaml."""
    data = yaml.load(FLAG_TABLE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    flags = data["a800_vllm_serve_flags"]
    choices = {key: tuple(map(str, flag["choices"])) for key, flag in flags.items() if flag.get("choices")}
    return str(data.get("a800_vllm_serve_flags_version", "unknown")), choices


def image_release(image: str | None) -> str | None:
    """The vLLM release a serving image's tag names (vllm/vllm-openai:v0.26.0-glm52-sm80: 0.26.0), or None."""
    last = str(image or "").partition("@")[0].rpartition("/")[2]  # name:tag, after any registry (host:port)
    match = _TAG_RELEASE.match(last.partition(":")[2])
    return match[1] if match else None


# Bounds vLLM's configuration classes put on launch values AFTER argparse accepted them (pydantic Field(gt/ge/le)):
# vllm/config/cache.py, scheduler.py, parallel.py, speculative.py, and -O's enumeration (OptimizationLevel, 0 to 3,
# config/vllm.py), read in the 0.32 source. A value outside fails
# `vllm serve` at start (a ValidationError, exit 1), after the running server was stopped. Key (a dotted path for a
# JSON option) -> (lower bound, lower inclusive, upper bound or None, upper inclusive, vLLM's class).
VALUE_RANGES: dict[str, tuple[float, bool, float | None, bool, str]] = {
    "gpu_memory_utilization": (0, False, 1, True, "CacheConfig"),
    "block_size": (0, False, None, False, "CacheConfig"),
    "max_num_seqs": (1, True, None, False, "SchedulerConfig"),
    "max_num_batched_tokens": (1, True, None, False, "SchedulerConfig"),
    "tensor_parallel_size": (1, True, None, False, "ParallelConfig"),
    "pipeline_parallel_size": (1, True, None, False, "ParallelConfig"),
    "speculative_config.num_speculative_tokens": (0, False, None, False, "SpeculativeConfig"),
    "optimization_level": (0, True, 3, True, "VllmConfig"),
}


def _range_text(low: float, low_in: bool, high: float | None, high_in: bool) -> str:
    left = f"{'[' if low_in else '('}{low:g}"
    return f"{left}, {high:g}{']' if high_in else ')'}" if high is not None else f"{'>=' if low_in else '>'} {low:g}"


def _value_range_check(launch: dict) -> dict:
    """Rule value_ranges: every launch value vLLM's configuration bounds, inside its bounds."""
    bad, seen = [], []
    for key, (low, low_in, high, high_in, owner) in VALUE_RANGES.items():
        value: Any = launch
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None or isinstance(value, bool):
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue  # not a number: argparse's or the JSON rules' to report
        seen.append(key)
        inside = (number > low or (low_in and number == low)) and (
            high is None or number < high or (high_in and number == high)
        )
        if not inside:
            bad.append(f"model_profile.launch.{key} = {value!r} is outside {_range_text(low, low_in, high, high_in)} "
                       f"({owner})")  # fmt: skip
    return check(
        "value_ranges",
        FAIL if bad else PASS,
        "model_profile.launch",
        "; ".join(bad) or f"{len(seen)} bounded values",
        "inside vLLM's configuration bounds",
        "; ".join(bad) + ": vllm serve parses the flag, then fails at start with a ValidationError, after the running "
        "server was stopped"
        if bad
        else f"{len(seen)} values inside vLLM's bounds",
        "set each named value inside its range (gpu_memory_utilization is a fraction of the GPU memory, at most 1)",
    )


def _cc(text: Any) -> tuple[int, int]:
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


def _memory_check(launch: dict, ctx: dict) -> dict:
    tp = int(launch.get("tensor_parallel_size") or 1)
    mem_mib = ctx.get("gpu_memory_mib")
    weights_gb = float(ctx.get("weights_gb") or 0)
    model = ctx.get("memory_model") or {}
    util = float(launch.get("gpu_memory_utilization") or 0.9)
    factor = float(model.get("replicated_factor", 1.05))
    need = weights_gb / tp * factor + float(model.get("cuda_graph_gb", 2.4)) + float(model.get("min_kv_cache_gb", 2))
    if not mem_mib:
        return check(
            "tensor_parallel_memory",
            PENDING,
            "gpu_facts.memory_mib_min",
            None,
            f"{need:.1f} GB per GPU",
            "GPU memory unknown until the driver answers",
        )
    have = float(mem_mib) * 1024**2 / GB * util
    fits = need <= have
    fix = ""
    if not fits:
        min_tp = next(
            (n for n in (1, 2, 4, 8, 16) if weights_gb / n * factor + need - weights_gb / tp * factor <= have), None
        )
        fix = (
            f"set model_profile.launch.tensor_parallel_size to {min_tp} or more (one GPU each)"
            if min_tp
            else "this model does not fit these GPUs at any tensor parallel size"
        )
    return check(
        "tensor_parallel_memory",
        PASS if fits else FAIL,
        "model_profile.launch.tensor_parallel_size",
        f"{need:.1f} GB per GPU",
        f"<= {have:.1f} GB ({mem_mib} MiB x {util})",
        f"{weights_gb:.0f} GB of weights / TP {tp} x {factor} + CUDA graphs + minimum KV cache "
        f"= {need:.1f} GB per GPU; "
        f"{'fits' if fits else 'does not fit: the engine would fail with CUDA out of memory after loading'}",
        fix,
    )


def _choice_check(name: str, key: str, value: Any, served_image: str | None) -> dict:
    """`value` against the choices of the recorded table's vLLM release, saying which release that is and, where the
    served image's tag names another, that the image's own parser (vllm_argument_parser) has the last word."""
    fact, flag = f"model_profile.launch.{key}", f"--{key.replace('_', '-')}"
    if value in (None, ""):
        return check(name, PASS, fact, value, "unset (auto)", f"{flag} not set: vLLM's default")
    release, table = recorded_choices()
    choices = table.get(key, ())
    served = image_release(served_image)
    whose = f"a choice of vLLM {release} (the recorded table)"
    if served_image and served != release:
        whose += f"; the served image is vLLM {served}" if served else "; the served image's tag names no release"
        whose += ", whose own parser has the last word (vllm_argument_parser)"
    if value in choices:
        return check(name, PASS, fact, value, list(choices), f"{flag} {value} is {whose}")
    better = SPELLINGS.get(str(value).lower())
    return check(
        name,
        FAIL,
        fact,
        value,
        list(choices),
        f"{flag}: invalid choice: {value!r} (vllm serve exits 2 before anything loads); not {whose}",
        (f"set {fact} to {better}" if better else f"set {fact} to one of {', '.join(choices)}")
        + f" (or, where the served release has it, add {name} to serve_validate_skip)",
    )


def _json_checks(launch: dict, extra: list) -> list[dict]:
    checks = []
    options = {k: launch[k] for k in JSON_OPTIONS if k in launch and launch[k] not in (None, "")}
    for i, arg in enumerate(extra[:-1]):
        if arg.lstrip("-").replace("-", "_") in JSON_OPTIONS:
            options[f"extra:{arg}"] = extra[i + 1]
    for key, value in options.items():
        fact = f"model_profile.launch.{key}" if not key.startswith("extra:") else "serve_extra_args"
        try:
            parsed = json_value(value)
            ok = isinstance(parsed, dict)
            detail = "a JSON object" if ok else f"JSON but not an object: {parsed!r}"
        except ValueError as exc:
            ok, detail = False, f"not JSON: {exc}"
        checks.append(
            check(
                f"json_option:{key.removeprefix('extra:--').replace('-', '_')}",
                PASS if ok else FAIL,
                fact,
                value if isinstance(value, str) else json.dumps(value),
                "a JSON object",
                detail,
                f"write {fact} as a YAML mapping (rendered to JSON) or a valid JSON object string",
            )
        )
    return checks


def _backend_checks(launch: dict, env: dict, ctx: dict) -> list[dict]:
    checks = []
    try:
        attention_config = json_value(launch.get("attention_config") or {}) or {}
    except ValueError:
        attention_config = {}  # reported by the JSON rule
    if not isinstance(attention_config, dict):
        attention_config = {}
    backend = launch.get("attention_backend") or attention_config.get("backend")
    env_backend = env.get("VLLM_ATTENTION_BACKEND")
    sparse = bool(ctx.get("sparse_attention"))
    caps = [_cc(c) for c in ctx.get("compute_caps") or []]
    fact = "model_profile.launch.attention_backend"
    if backend:
        detail = f"--attention-backend {backend} selects the backend explicitly"
        status = PASS
        if env_backend:
            status, detail = WARN, detail + "; VLLM_ATTENTION_BACKEND in the environment is ignored by vLLM 0.26"
        checks.append(check("backend_by_flag", status, fact, backend, "set", detail, "remove VLLM_ATTENTION_BACKEND"))
    else:
        checks.append(
            check(
                "backend_by_flag",
                FAIL if sparse else WARN,
                fact,
                None,
                "set",
                "no --attention-backend: vLLM picks one itself"
                + (f" (VLLM_ATTENTION_BACKEND={env_backend} is ignored by 0.26.0)" if env_backend else ""),
                "set model_profile.launch.attention_backend (e.g. TRITON_MLA_SPARSE on A800/A100)",
            )
        )
    if sparse and backend:
        need = SPARSE_BACKENDS.get(backend)
        if need is None:
            checks.append(
                check(
                    "sparse_backend",
                    FAIL,
                    fact,
                    backend,
                    list(SPARSE_BACKENDS),
                    f"{backend} is a dense backend for a sparse-attention model: performance collapses",
                    "set model_profile.launch.attention_backend to TRITON_MLA_SPARSE (sm80) or FLASHMLA_SPARSE (sm90)",
                )
            )
        elif caps:
            ok = all(cap >= need for cap in caps)
            checks.append(
                check(
                    "sparse_backend",
                    PASS if ok else FAIL,
                    fact,
                    backend,
                    f"compute capability >= {need[0]}.{need[1]}",
                    f"{backend} on compute capability {', '.join(f'{a}.{b}' for a, b in caps)}",
                    "on A800/A100 (8.0) use TRITON_MLA_SPARSE from the patched sm80 image",
                )
            )
    if sparse and backend == "TRITON_MLA_SPARSE":
        force = attention_config.get("sparse_mla_force_mqa") is True
        checks.append(
            check(
                "sparse_mla_force_mqa",
                PASS if force else FAIL,
                "model_profile.launch.attention_config.sparse_mla_force_mqa",
                attention_config.get("sparse_mla_force_mqa"),
                True,
                "short prefills take the top-k MQA path"
                if force
                else "without it every prefill <= 2048 tokens raises NotImplementedError in forward_mha (HTTP 500, "
                "engine dead) — after the whole weight load",
                "set model_profile.launch.attention_config.sparse_mla_force_mqa: true",
            )
        )
    kv = launch.get("kv_cache_dtype") or "auto"
    kv_choices = recorded_choices()[1].get("kv_cache_dtype", ())
    if sparse and backend == "TRITON_MLA_SPARSE" and kv in kv_choices:  # a misspelling is the choice rule's
        checks.append(
            check(
                "kv_cache_dtype_backend",
                PASS if kv in SPARSE_SM80_KV_DTYPES else FAIL,
                "model_profile.launch.kv_cache_dtype",
                kv,
                list(SPARSE_SM80_KV_DTYPES),
                f"TRITON_MLA_SPARSE supports KV cache {', '.join(SPARSE_SM80_KV_DTYPES)}"
                + ("" if kv in SPARSE_SM80_KV_DTYPES else f", not {kv}: no FP8 KV cache on sm80 with this backend"),
                "set model_profile.launch.kv_cache_dtype to bfloat16",
            )
        )
    return checks


def _parser_checks(launch: dict, known: dict) -> list[dict]:
    checks = []
    for key in ("reasoning_parser", "tool_call_parser"):
        value = launch.get(key)
        names = list(known.get(key) or [])
        if not value:
            continue
        ok = value in names
        checks.append(
            check(
                f"parser:{key}",
                PASS if ok else FAIL,
                f"model_profile.launch.{key}",
                value,
                names,
                f"{value} is a known {key.replace('_', ' ')}"
                if ok
                else f"unknown {key.replace('_', ' ')} {value!r}: the server exits with a KeyError",
                f"set model_profile.launch.{key} to one of {', '.join(names)} (serve_known_parsers lists them)",
            )
        )
    if launch.get("enable_auto_tool_choice") and not launch.get("tool_call_parser"):
        checks.append(
            check(
                "parser:auto_tool_choice",
                FAIL,
                "model_profile.launch.tool_call_parser",
                None,
                "set",
                "--enable-auto-tool-choice requires --tool-call-parser (vLLM stops with a TypeError before loading)",
                "set model_profile.launch.tool_call_parser (glm47 for GLM-5.x)",
            )
        )
    return checks


def _gpu_holder_checks(others: list | None, own: str | None, readers: list | None = None) -> list[dict]:
    """Other running containers with GPUs (docker inspect, serve_inspect.serve_other_containers): a second server on
    the same GPUs runs both out of memory; pending when the containers were not read. Containers that only read the
    GPUs (`readers`, serve_gpu_readers: the monitoring role's dcgm-exporter) are left out."""
    if others is None:
        return [check("gpus_free", PENDING, "docker ps", None, "read", "the running containers were not read")]
    holders = [c for c in others if c.get("gpus") and c.get("name") not in (readers or [])]
    names = " ".join(c["name"] for c in holders)
    return [
        check(
            "gpus_free",
            FAIL if holders else PASS,
            "docker ps",
            [f"{c['name']} (GPUs: {c['gpus']})" for c in holders] or "none",
            f"no running container but {own} holds GPUs",
            f"containers holding GPUs besides {own}: "
            + ", ".join(f"{c['name']} ({c['gpus']})" for c in holders)
            + "; two servers on the same GPUs contend for their memory (CUDA out of memory) and compute"
            if holders
            else f"no running container besides {own} holds GPUs",
            f"stop them (docker stop {names}); or, when {holders[0]['name']} is the server to keep, set "
            f"serve_container_name to {holders[0]['name']} to adopt it (a monitoring container that only reads the "
            "GPUs, e.g. dcgm-exporter: add gpus_free to serve_validate_skip)"
            if holders
            else "",
        )
    ]


def _image_cuda_driver_check(ctx: dict) -> dict:
    """The running driver against the serving image's NVIDIA_REQUIRE_CUDA (module_utils/cuda_requirement.py)."""
    return image_cuda_driver_check(ctx.get("image_cuda"), ctx.get("driver_version"))


def _host_checks(ctx: dict) -> list[dict]:
    """Facts gathered on the host by the serve role; absent (preflight) → pending."""
    checks = []
    port = ctx.get("port")
    others = ctx.get("other_containers")
    own = ctx.get("container_name")
    if port is not None:
        holder = ctx.get("port_holder")
        publishers = [c for c in others or [] if c.get("ports")]
        ok = (not port.get("in_use") or holder == "ours") and not publishers
        names = " ".join(c["name"] for c in publishers)
        if publishers:
            held = "published by container " + ", ".join(f"{c['name']} ({', '.join(c['ports'])})" for c in publishers)
        else:
            held = (
                "free"
                if not port.get("in_use")
                else "held by our container"
                if ok
                else f"in use: {port.get('listener')}"
            )
        checks.append(
            check(
                "port_free",
                PASS if ok else FAIL,
                "serve_port",
                f"container {names}" if publishers else port.get("listener") or "free",
                f"free or held by container {own}",
                f"port {port.get('port')} is {held}",
                f"stop it (docker stop {names}), or set serve_container_name to {publishers[0]['name']} to adopt "
                "it, or set serve_port to a free port"
                if publishers
                else "stop what listens there or set serve_port to a free port",
            )
        )
    checks += _gpu_holder_checks(others, own, ctx.get("gpu_readers"))
    image = ctx.get("image")
    if image is None:
        checks.append(check("image_self_check", PENDING, "image_ref", None, "checked", "the image phase has not run"))
    else:
        ok = bool(image.get("ref")) and bool(image.get("self_check_ok"))
        checks.append(
            check(
                "image_self_check",
                PASS if ok else FAIL,
                "image_ref",
                image.get("ref"),
                "present and self-checked",
                f"image {image.get('ref')} passed its self-check"
                if ok
                else "the serving image is missing or unchecked",
                "run the image phase (ansible-playbook site.yml --tags image)",
            )
        )
    checks.append(_image_cuda_driver_check(ctx))
    weights = ctx.get("weights_check")
    if weights is None:
        checks.append(check("weights_verified", PENDING, "weights_check", None, "ok", "the weights phase has not run"))
    else:
        checks.append(
            check(
                "weights_verified",
                PASS if weights.get("ok") else FAIL,
                "weights_check",
                weights.get("summary"),
                "ok",
                weights.get("summary", ""),
                "fix the checkpoint (see the weights phase errors) and run site.yml --tags weights",
            )
        )
    return checks


def vllm_argcheck_result(run: dict | None, running: bool = False) -> dict | None:
    """The image parser's outcome from its command's registered result (files/vllm_argcheck.py prints one JSON line
    {"ok", "error"}): {"rc": 0, "running": True} when the server runs this command line (the check was not run), None
    when the command did not run, else its exit code and the error of its last JSON line (stderr without one)."""
    if running:
        return {"rc": 0, "running": True}
    if not run or run.get("rc") is None:
        return None
    lines = [line for line in run.get("stdout_lines") or [] if str(line).startswith("{")]
    error = json.loads(lines[-1]).get("error") if lines else None
    return {"rc": run["rc"], "error": str(run.get("stderr") or "").strip() if error is None else error}


def vllm_argcheck_check(argcheck: dict) -> dict:
    """The image's own `vllm serve` parser over the command line (files/vllm_argcheck.py in the image): run by the
    serve phase before a restart, and by the preflight when the image is already on the host. `running`: the
    preflight found the server running this command line on this image, whose parser took it when it started (the
    check is not run again: it would start a container that imports vLLM)."""
    ok = argcheck.get("rc") == 0
    detail = "the image's own `vllm serve` parser accepts the command line"
    if argcheck.get("running"):
        detail = "the server runs this command line on this image: the image's parser took it when the server started"
    return check(
        "vllm_argument_parser",
        PASS if ok else FAIL,
        "the image's vllm argument parser",
        "accepted" if ok else (argcheck.get("error") or "rejected"),
        "accepted",
        detail if ok else f"the image's vllm parser rejects the command line: {argcheck.get('error')}",
        "fix the flag it names in model_profile.launch or serve_extra_args (where the image that judged it is one this "
        "run replaces, add vllm_argument_parser to serve_validate_skip: the serve phase checks the new image before "
        "any restart)",
    )


def _exposure_check(ctx: dict) -> dict:
    """The server is not open by default: published on loopback (a gateway or router on the host fronts it), or an
    API key is required. vLLM's --api-key guards only the /v1 routes (docs/usage/security.md): /invocations,
    /tokenize, /pause and others stay open, so a non-loopback publish wants an allowlisting gateway in front too."""
    address = str(ctx.get("publish_address") or "")
    loopback = address == "localhost" or address == "::1" or address.startswith("127.")
    keyed = bool(ctx.get("api_key_set"))
    if loopback:
        status, detail = PASS, f"published on {address} only: reachable from this host (a local gateway or router)"
    elif keyed:
        status, detail = (
            PASS,
            f"published on {address} with an API key; --api-key guards only the /v1 routes (/invocations, "
            "/tokenize, /pause stay open): keep an allowlisting gateway in front",
        )
    else:
        status, detail = FAIL, f"published on {address} without an API key: anyone who reaches the host can use it"
    return check(
        "exposure",
        status,
        "serve_publish_address",
        address,
        "127.0.0.1, or an API key (serve_api_key)",
        detail,
        "set serve_api_key (vault it) to publish on every interface, or serve_publish_address: 127.0.0.1 when a "
        "gateway or router on this host fronts the server",
    )


def vllm_launch_checks(launch: dict, ctx: dict) -> list[dict]:
    """Every rule over one rendered launch. `launch` is model_profile.launch; `ctx` carries the rest:
    env, extra_args, served_model_name, served_image (its tag's vLLM release is named beside the recorded table's),
    compute_caps, gpu_count, gpu_memory_mib, weights_gb, memory_model,
    sparse_attention, known_parsers, ready_timeout_s, min_ready_timeout_s, load_format, skip (rule names), and the
    host facts (port, port_holder, other_containers, image, image_cuda, driver_version, weights_check, argcheck) when
    the serve role gathered them; host_rules false
    (the preflight phase) leaves out the rules of the serving host's state."""
    env = dict(launch.get("env") or {}) | dict(ctx.get("env") or {})
    extra = [str(a) for a in ctx.get("extra_args") or []]
    checks = []
    tp = launch.get("tensor_parallel_size")
    gpus = ctx.get("gpu_count")
    try:
        tp_int = int(tp)
        tp_ok = tp_int >= 1
    except (TypeError, ValueError):
        tp_int, tp_ok = 0, False
    if not tp_ok:
        checks.append(
            check(
                "tensor_parallel_gpus",
                FAIL,
                "model_profile.launch.tensor_parallel_size",
                tp,
                "a positive integer",
                f"--tensor-parallel-size {tp!r}: invalid int value (exit 2)",
                "set model_profile.launch.tensor_parallel_size to the number of GPUs (8)",
            )
        )
    elif gpus is None:
        checks.append(
            check(
                "tensor_parallel_gpus",
                PENDING,
                "gpu_facts.count",
                None,
                tp_int,
                "GPU count unknown until the driver answers",
            )
        )
    else:
        ok = tp_int <= int(gpus)
        checks.append(
            check(
                "tensor_parallel_gpus",
                PASS if ok else FAIL,
                "model_profile.launch.tensor_parallel_size",
                tp_int,
                f"<= {gpus} GPUs",
                f"TP {tp_int} on {gpus} GPUs" + ("" if ok else ": CUDA error: invalid device ordinal at startup"),
                f"set model_profile.launch.tensor_parallel_size to at most {gpus}",
            )
        )
    if tp_ok:
        checks.append(_memory_check(launch, ctx))
    checks.append(_value_range_check(launch))
    served_image = ctx.get("served_image")
    checks.append(_choice_check("dtype", "dtype", launch.get("dtype"), served_image))
    checks.append(_choice_check("kv_cache_dtype", "kv_cache_dtype", launch.get("kv_cache_dtype"), served_image))
    checks += _json_checks(launch, extra)
    checks += _backend_checks(launch, env, ctx)
    checks += _parser_checks(launch, ctx.get("known_parsers") or {})
    name = ctx.get("served_model_name")
    checks.append(
        check(
            "served_model_name",
            PASS if name and not re.search(r"\s", str(name)) else FAIL,
            "model_profile.served_model_name",
            name,
            "set, no whitespace",
            "clients and the gateway must send this exact, case-sensitive model id",
            "set model_profile.served_model_name (e.g. glm-5.2-nvfp4)",
        )
    )
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        checks.append(
            check(
                f"explicit:{key}",
                PASS if launch.get(key) else WARN,
                f"model_profile.launch.{key}",
                launch.get(key),
                "set",
                f"--{key.replace('_', '-')} {launch.get(key)}"
                if launch.get(key)
                else "unset: A800 gets H100-class defaults (1024 seqs, 8192 batched tokens)",
                f"set model_profile.launch.{key}",
            )
        )
    load_format = launch.get("load_format")
    if load_format == "sharded_state" and ctx.get("quantization") == "nvfp4":
        checks.append(
            check(
                "load_format",
                FAIL,
                "model_profile.launch.load_format",
                load_format,
                "not sharded_state",
                "sharded_state saves Marlin-repacked NVFP4 weights that sm80 cannot read back",
                "remove model_profile.launch.load_format (auto)",
            )
        )
    timeout, minimum = ctx.get("ready_timeout_s"), ctx.get("min_ready_timeout_s")
    if timeout is not None and minimum is not None:
        ok = int(timeout) >= int(minimum)
        checks.append(
            check(
                "ready_timeout",
                PASS if ok else FAIL,
                "serve_ready_timeout_s",
                int(timeout),
                f">= {int(minimum)} s",
                f"VLLM_ENGINE_READY_TIMEOUT_S={int(timeout)}"
                + ("" if ok else f": a cold load of these weights needs ~{int(minimum)} s; vLLM would give up first"),
                f"set serve_ready_timeout_s to at least {int(minimum)} (or leave it unset: sized from the weights)",
            )
        )
    if "publish_address" in ctx:
        checks.append(_exposure_check(ctx))
    if ctx.get("host_rules", True):
        checks += _host_checks(ctx)
    if ctx.get("argcheck") is not None:
        checks.append(vllm_argcheck_check(ctx["argcheck"]))
    skip = set(ctx.get("skip") or [])
    for rule in checks:
        if rule["status"] == PENDING and ctx.get("strict"):
            rule["status"], rule["fix"] = FAIL, rule["fix"] or "run the phase that gathers this fact first"
        if rule["name"] in skip and rule["status"] == FAIL:
            rule["status"] = WARN
            rule["detail"] += " (rule skipped by serve_validate_skip)"
    return checks


# The rules the configuration alone decides: with no host fact at all they pass or fail as they will on the host (a
# rule that reads a host fact is pending without it). The preflight runs them in its first step, before it reads the
# host, so that a bad launch value is refused in seconds (roles/serve/tasks/settings.yml).
CONFIG_RULES = ("tensor_parallel_gpus", "value_ranges", "dtype", "kv_cache_dtype", "json_option:", "parser:",
                "served_model_name")  # fmt: skip
CONFIG_CONTEXT = ("env", "extra_args", "served_model_name", "known_parsers", "skip", "served_image")


def vllm_config_failures(launch: dict, ctx: dict) -> list[dict]:
    """The failed rules of CONFIG_RULES over `launch`, judged with the configuration of `ctx` alone (CONFIG_CONTEXT:
    no host fact, no weights size)."""
    config = {key: ctx[key] for key in CONFIG_CONTEXT if key in ctx} | {"host_rules": False}
    checks = vllm_launch_checks(launch, config)
    return [c for c in checks if c["status"] == FAIL and c["name"].startswith(CONFIG_RULES)]


class FilterModule:
    def filters(self) -> dict:
        return {
            "vllm_launch_checks": vllm_launch_checks,
            "vllm_config_failures": vllm_config_failures,
            "vllm_argcheck_check": vllm_argcheck_check,
            "vllm_argcheck_result": vllm_argcheck_result,
        }
