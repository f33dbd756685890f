"""`vllm` command of the test double: `vllm serve MODEL [options]` (and `vllm --version`)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from ... import __version__
from ..._double import args as cli_args
from ..._double import log
from ..._double.startup import StartupFailure, start

API = "APIServer"


def _fail(failure: StartupFailure) -> int:
    log.traceback(failure.proc or API, failure.frames, failure.exc)
    if failure.proc:  # the engine core or a worker died: the API server reports it and exits
        log.traceback(
            API,
            [
                (
                    "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py",
                    1432,
                    "wait_for_engine_startup",
                    "raise RuntimeError(",
                )
            ],
            "RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore_DP0': 1}",
        )
    return failure.exit_code


async def _serve(server, host: str, port: int) -> None:
    from aiohttp import web

    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    log.info("api_server.py:1981", f"Starting vLLM API server 0 on http://{host}:{port}", API)
    await site.start()
    log.info("launcher.py:37", "Route: /v1/chat/completions, Methods: POST", API)
    log.info("server.py:83", f"Started server process [{os.getpid()}]", API)
    log.info("on.py:48", "Waiting for application startup.", API)
    log.info("on.py:62", "Application startup complete.", API)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("server.py:263", "Shutting down", API)
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--version"], ["-v"]):
        print(__version__)
        return 0
    if argv[:1] != ["serve"]:
        print("usage: vllm serve [model_tag] [options]  (test double: only `serve` is reproduced)", file=sys.stderr)
        return 2
    args = cli_args.parse(argv[1:])
    log.info("api_server.py:1885", f"vLLM API server version {__version__}", API)
    log.info(
        "utils.py:253",
        f"non-default args: {{'model': '{args.model}', 'tensor_parallel_size': "
        f"{args.tensor_parallel_size}, 'served_model_name': '{args.served_model_name}'}}",
        API,
    )
    bad_parser = cli_args.check_parsers(args)
    if bad_parser:
        return _fail(
            StartupFailure(
                None,
                bad_parser,
                [
                    (
                        "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py",
                        1742,
                        "validate_api_server_args",
                        "ReasoningParserManager.get_reasoning_parser(reasoning_parser)",
                    )
                ],
            )
        )
    try:
        engine = start(args, dict(os.environ))
    except StartupFailure as failure:
        return _fail(failure)
    from ..._double.server import Server

    speed = float(os.environ.get("VLLM_TEST_DOUBLE_SPEED", "1"))
    asyncio.run(_serve(Server(engine, args, speed), args.host or "0.0.0.0", args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
