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
    await _shutdown(server, site, server.args.shutdown_timeout)
    log.info("launcher.py:304", "[shutdown] API server: shutting down FastAPI HTTP server", API)
    await runner.cleanup()


async def _shutdown(server, site, timeout: int) -> None:
    """SIGTERM as vLLM 0.32 handles it (entrypoints/launchers/launcher.py, v1/engine/core.py; held to the real
    engine by tests/contract/test_shutdown_contract.py). --shutdown-timeout 0, the default: the requests in flight
    are aborted (a stream ends with finish_reason "abort" and [DONE]) and the port closes at once. N > 0: a drain:
    /health stays 200, a new request is refused (500, "cannot schedule new futures after shutdown"), the requests in
    flight finish, for at most N seconds (then the rest are aborted), and the server exits."""
    mode = "abort" if timeout == 0 else "drain"
    log.info("launcher.py:254", "[shutdown] API server: shutdown triggered", API)
    log.info("launcher.py:270", f"[shutdown] API server: stopping engine client mode={mode} timeout={timeout}s", API)
    server.shutting_down = True
    if timeout == 0:
        server.aborting = True
        await site.stop()
    elif server.in_flight():
        log.info(
            "core.py:1652",
            f"[shutdown] EngineCore: draining in-flight requests count={server.in_flight()} timeout={timeout}s",
            "EngineCore_DP0",
        )
    deadline = asyncio.get_running_loop().time() + timeout
    while server.in_flight():
        if not server.aborting and asyncio.get_running_loop().time() >= deadline:
            server.aborting = True  # the drain's time is up: the rest are aborted
        await asyncio.sleep(0.05)
    log.info(
        "core.py:1666",
        "[shutdown] EngineCore: request processing complete; starting resource teardown",
        "EngineCore_DP0",
    )


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
