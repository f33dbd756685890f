"""TEST DOUBLE's stand-in of the real module `vllm.logger`: `init_logger(name)` and vLLM's `*_once` methods, so
that the stand-in modules log where vLLM's do. It prints nothing: the double's engine (vllm/_double) prints vLLM's
log lines itself, with the file:line the article shows; what the modules logged is kept in `RECORDS`."""

from __future__ import annotations

RECORDS: list[tuple[str, str, str]] = []  # (level, logger name, message)


class _VllmLogger:
    def __init__(self, name: str) -> None:
        self.name = name
        self._once: set[tuple[str, str]] = set()

    def _log(self, level: str, msg: str, *args: object) -> None:
        RECORDS.append((level, self.name, msg % args if args else msg))

    def debug(self, msg: str, *args: object) -> None:
        pass

    def info(self, msg: str, *args: object) -> None:
        self._log("INFO", msg, *args)

    def warning(self, msg: str, *args: object) -> None:
        self._log("WARNING", msg, *args)

    def info_once(self, msg: str, *args: object) -> None:
        if ("INFO", msg) not in self._once:
            self._once.add(("INFO", msg))
            self._log("INFO", msg, *args)

    def warning_once(self, msg: str, *args: object) -> None:
        if ("WARNING", msg) not in self._once:
            self._once.add(("WARNING", msg))
            self._log("WARNING", msg, *args)


def init_logger(name: str) -> _VllmLogger:
    return _VllmLogger(name)
