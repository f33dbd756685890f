"""Check a `vllm serve` command line with the vLLM argument parser of the image that will run it.

Run inside the serving image (`docker run --rm --network none --entrypoint python3 IMAGE -c "$(cat this)" ARGS`):
parses ARGS exactly as `vllm serve` would and runs vLLM's quick pre-load checks, in seconds instead of after a
6-22 minute weight load. Prints one JSON line {"ok": bool, "error": str}; exit 0 when accepted, 2 when rejected.
The parser's location moved between vLLM releases: both known places are tried.
"""

import contextlib
import io
import json
import sys


def _parser():
    try:
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve")), validate_parsed_serve_args


def main(argv):
    parser, validate = _parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
            validate(args)
    except SystemExit as exc:
        lines = [line for line in err.getvalue().splitlines() if "error" in line] or err.getvalue().splitlines()
        print(json.dumps({"ok": False, "error": (lines[-1] if lines else f"exit {exc.code}").strip()}))
        return 2
    except Exception as exc:  # vLLM's pre-load checks raise TypeError/ValueError
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
        return 2
    print(json.dumps({"ok": True, "error": ""}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
