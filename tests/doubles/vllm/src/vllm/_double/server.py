"""The OpenAI-compatible HTTP server of the test double (aiohttp): /health, /ping, /load, /version,
/v1/models, /metrics, /v1/chat/completions (plain and streamed), with vLLM's response and error shapes."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

from aiohttp import web

from . import log
from .generate import Plan, plan_reply, prompt_tokens, total_throughput, ttft_seconds
from .metrics import Metrics
from .startup import Engine

FORWARD_MHA_FRAMES = [
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py",
        3310,
        "execute_model",
        "model_output = self._model_forward(",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/mla.py",
        183,
        "forward_native",
        "attn_out = self.mla_attn(",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/v1/attention/backends/mla/common.py",
        2104,
        "forward",
        "output[num_decode_tokens:] = self._forward_prefill(",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/v1/attention/backends/mla/common.py",
        1702,
        "forward_mha",
        "raise NotImplementedError",
    ),
]


FINGERPRINT = "vllm-0.26.0-d0ub1e00"
MIN_CHUNK_S = 0.002  # below this pacing interval, tokens travel in shared chunks


def error(status: int, message: str, kind: str, param: str | None = None) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": param, "code": status}}, status=status
    )


class Server:
    def __init__(self, engine: Engine, args, speed: float) -> None:
        self.engine, self.args, self.speed = engine, args, speed
        self.metrics = Metrics(model=engine.served_name)
        self.slots = asyncio.Semaphore(engine.max_num_seqs)
        self.decoding = 0
        self.dead = False
        self.spec_since_log = 0

    # --- plumbing -------------------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth])
        app.router.add_get("/health", self.health)
        app.router.add_get("/ping", self.health)
        app.router.add_get("/load", self.load)
        app.router.add_get("/version", self.version)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        if self.engine.speculative:
            app.on_startup.append(self._start_spec_logger)
        return app

    @web.middleware
    async def auth(self, request: web.Request, handler):
        key = self.args.api_key or os.environ.get("VLLM_API_KEY")  # --api-key wins, as in vLLM
        if key and request.path.startswith("/v1") and request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def _start_spec_logger(self, app: web.Application) -> None:
        app["spec_logger"] = asyncio.get_running_loop().create_task(self._spec_logger())

    async def _spec_logger(self) -> None:
        while True:
            await asyncio.sleep(10 / self.speed)
            if self.spec_since_log:
                c = self.metrics.counters
                drafts = max(c["vllm:spec_decode_num_drafts_total"], 1)
                accepted = c["vllm:spec_decode_num_accepted_tokens_total"]
                drafted = c["vllm:spec_decode_num_draft_tokens_total"]
                log.info(
                    "metrics.py:100",
                    f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
                    f"Accepted: {int(accepted)} tokens, Drafted: {int(drafted)} tokens, "
                    f"Avg Draft acceptance rate: {100 * accepted / max(drafted, 1):.1f}%",
                    "APIServer",
                )
                self.spec_since_log = 0

    # --- simple endpoints -----------------------------------------------------------------------------------------
    async def health(self, _: web.Request) -> web.Response:
        return web.Response(status=503 if self.dead else 200)

    async def load(self, _: web.Request) -> web.Response:
        return web.json_response({"server_load": self.metrics.running + self.metrics.waiting})

    async def version(self, _: web.Request) -> web.Response:
        from .. import __version__

        return web.json_response({"version": __version__})

    async def prometheus(self, _: web.Request) -> web.Response:
        return web.Response(text=self.metrics.render(), content_type="text/plain")

    async def models(self, _: web.Request) -> web.Response:
        now = int(time.time())
        card = {
            "id": self.engine.served_name,
            "object": "model",
            "created": now,
            "owned_by": "vllm",
            "root": self.engine.model,
            "parent": None,
            "max_model_len": self.engine.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex}",
                    "object": "model_permission",
                    "created": now,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return web.json_response({"object": "list", "data": [card]})

    # --- chat -----------------------------------------------------------------------------------------------------
    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return error(
                400,
                "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.0', "
                f"'msg': 'JSON decode error', 'ctx': {{'error': '{exc.msg}'}}}}",
                "Bad Request",
                "body.0",
            )
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return error(
                400,
                "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required'}",
                "BadRequestError",
            )
        if body.get("model") not in (None, self.engine.served_name):
            return error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError", "model")
        if self.dead:
            return error(
                500,
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                "InternalServerError",
            )
        tools, tool_choice = body.get("tools"), body.get("tool_choice", "auto" if body.get("tools") else "none")
        if tools and tool_choice == "auto" and not self.args.enable_auto_tool_choice:
            return error(
                400,
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
                "BadRequestError",
            )
        n_prompt = prompt_tokens(body["messages"], tools)
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        if max_tokens and max_tokens > self.engine.max_model_len:
            return error(
                400,
                f"max_tokens={max_tokens} cannot be greater than max_model_len="
                f"{self.engine.max_model_len}. Please request fewer output tokens. "
                f"(parameter=max_tokens, value={max_tokens})",
                "BadRequestError",
                "max_tokens",
            )
        if n_prompt + (max_tokens or 0) > self.engine.max_model_len:
            return error(
                400,
                f"This model's maximum context length is {self.engine.max_model_len} tokens. However, "
                f"you requested {n_prompt + (max_tokens or 0)} tokens ({n_prompt} in the messages, "
                f"{max_tokens or 0} in the completion). Please reduce the length of the messages or "
                "completion.",
                "BadRequestError",
            )
        plan = plan_reply(
            body["messages"],
            bool(self.args.reasoning_parser),
            tools,
            tool_choice,
            max_tokens,
            bool(body.get("ignore_eos")),
        )
        budget = max_tokens or (self.engine.max_model_len - n_prompt)
        stream = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        rid = f"chatcmpl-{uuid.uuid4().hex[:16]}"
        created = int(time.time())

        self.metrics.waiting += 1
        async with self.slots:
            self.metrics.waiting -= 1
            self.metrics.running += 1
            start = time.monotonic()
            try:
                return await self._serve(request, rid, created, plan, n_prompt, budget, stream, include_usage, start)
            finally:
                self.metrics.running -= 1

    def _prefill_crashes(self, n_prompt: int) -> bool:
        return (
            self.engine.sparse
            and self.engine.backend == "TRITON_MLA_SPARSE"
            and not self.engine.force_mqa
            and n_prompt <= 2048
        )

    async def _serve(self, request, rid, created, plan: Plan, n_prompt, budget, stream, include_usage, start):
        await asyncio.sleep(max(start + ttft_seconds(n_prompt) / self.speed - time.monotonic(), 0.0))
        if self._prefill_crashes(n_prompt):
            log.error("multiproc_executor.py:822", "WorkerProc hit an exception.", "Worker_TP0")
            log.traceback("Worker_TP0", FORWARD_MHA_FRAMES, "NotImplementedError")
            log.error("core.py:868", "EngineCore encountered a fatal error.", "EngineCore_DP0")
            self.dead = True
            return error(
                500,
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                "InternalServerError",
            )
        self.metrics.counters["vllm:prompt_tokens_total"] += n_prompt
        self.metrics.histograms["vllm:time_to_first_token_seconds"].observe(time.monotonic() - start)
        tokens: list[tuple[str, str]] = [("reasoning", t) for t in plan.reasoning]
        tokens += [("content", t) for t in plan.content]
        named = isinstance(plan.tool_choice, dict)
        finish = "tool_calls" if plan.tool_call and not named else "stop"
        if len(tokens) > budget:
            tokens, finish = tokens[:budget], "length"
        if plan.tool_call and finish == "length":
            plan.tool_call = None
        response = None
        if stream:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
            await response.prepare(request)
            first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            await self._event(response, self._chunk(rid, created, [first], prompt_token_ids=None))
        self.decoding += 1
        try:
            await self._decode(tokens, response, rid, created)
        finally:
            self.decoding -= 1
        n_completion = len(tokens) + (len(plan.tool_call["arguments"]) // 4 if plan.tool_call else 0)
        elapsed = time.monotonic() - start
        self.metrics.histograms["vllm:e2e_request_latency_seconds"].observe(elapsed)
        if n_completion > 1:
            self.metrics.histograms["vllm:request_time_per_output_token_seconds"].observe(elapsed / n_completion)
        self.metrics.finished[finish] = self.metrics.finished.get(finish, 0) + 1
        n_reasoning = sum(1 for kind, _ in tokens if kind == "reasoning")
        usage = {
            "prompt_tokens": n_prompt,
            "total_tokens": n_prompt + n_completion,
            "completion_tokens": n_completion,
            "prompt_tokens_details": None,
            "completion_tokens_details": {"reasoning_tokens": n_reasoning},
        }
        tool_calls = []
        if plan.tool_call:
            tool_calls = [
                {
                    "id": f"chatcmpl-tool-{uuid.uuid4().hex[:16]}",
                    "type": "function",
                    "function": {"name": plan.tool_call["name"], "arguments": plan.tool_call["arguments"]},
                }
            ]
        reasoning = "".join(t for k, t in tokens if k == "reasoning") or None
        # content: null when nothing was said; "" when the request offered tools (recorded from vLLM 0.32)
        content = "".join(t for k, t in tokens if k == "content") or ("" if plan.tools_offered else None)
        if response is not None:
            if tool_calls:
                await self._sse(response, rid, created, {"tool_calls": [dict(tool_calls[0], index=0)]}, None)
            await self._sse(response, rid, created, {}, finish)
            if include_usage:
                chunk_usage = {k: v for k, v in usage.items() if k != "prompt_tokens_details"}
                await self._event(
                    response, self._chunk(rid, created, [], usage=chunk_usage, system_fingerprint=FINGERPRINT)
                )
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        message = {
            "role": "assistant",
            "content": content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
        }
        if tool_calls:
            message["tool_calls"] = tool_calls
        message["reasoning"] = reasoning
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
            "token_ids": None,
        }
        return web.json_response(
            {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": self.engine.served_name,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": FINGERPRINT,
                "usage": usage,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "kv_transfer_params": None,
            }
        )

    async def _decode(self, tokens: list[tuple[str, str]], response, rid: str, created: int) -> None:
        """Pace the tokens on absolute deadlines (no drift from the work between them); when the interval is
        shorter than the event loop can keep up with, or the loop fell behind, send the due tokens in one chunk
        (as MTP does when several drafted tokens are accepted at once)."""
        due = time.monotonic()
        i = 0
        while i < len(tokens):
            interval = self.decoding / (total_throughput(self.decoding) * self.speed)
            due += interval
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            batch = [tokens[i]]
            i += 1
            now = time.monotonic()
            while i < len(tokens) and (due + interval <= now or len(batch) * interval < MIN_CHUNK_S):
                due += interval
                batch.append(tokens[i])
                i += 1
            for _ in batch:
                self._count_token()
            if response is not None:
                for kind in ("reasoning", "content"):
                    text = "".join(t for k, t in batch if k == kind)
                    if text:
                        await self._sse(response, rid, created, {kind: text}, None)

    def _count_token(self) -> None:
        c = self.metrics.counters
        c["vllm:generation_tokens_total"] += 1
        if self.engine.speculative:
            # MTP: ~2.8 tokens per verification step (acceptance of 5 drafts around 36 %).
            c["vllm:spec_decode_num_drafts_total"] += 1 / 2.8
            c["vllm:spec_decode_num_draft_tokens_total"] += 5 / 2.8
            c["vllm:spec_decode_num_accepted_tokens_total"] += 1.8 / 2.8
            self.spec_since_log += 1

    def _chunk(self, rid: str, created: int, choices: list, **extra) -> dict:
        return {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": self.engine.served_name,
            "choices": choices,
            **extra,
        }

    async def _sse(self, response, rid, created, delta: dict, finish: str | None) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "token_ids": None}
        if finish:
            choice["stop_reason"] = None
        await self._event(response, self._chunk(rid, created, [choice]))

    @staticmethod
    async def _event(response, payload: dict) -> None:
        await response.write(f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode())
