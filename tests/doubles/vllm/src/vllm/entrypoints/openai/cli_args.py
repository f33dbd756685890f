"""TEST DOUBLE of `vllm.entrypoints.openai.cli_args` (where v0.26 keeps the `vllm serve` parser; 0.32 moved it to
`vllm.entrypoints.launchers.cli_args`): `make_arg_parser` and `validate_parsed_serve_args`, so that a command line
can be checked with the image's own parser before a launch, as with the real image."""

from __future__ import annotations

import argparse

from vllm._double import args as _args


def make_arg_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The double's `vllm serve` parser (the given parser is replaced, as the flags are the double's)."""
    return _args.make_parser()


def validate_parsed_serve_args(args: argparse.Namespace) -> None:
    """vLLM's quick pre-load checks that the double reproduces."""
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")
