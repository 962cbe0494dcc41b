"""One vLLM release's own `vllm serve` command line as the judge of the planner's argv.

Runs under an interpreter that has the release (scripts/oracle-env.sh). Reads a JSON list of
{id, argv} on stdin (argv as the unit runs it: vllm serve MODEL --flag ...), and prints one
JSON verdict per case: the argv goes through what `vllm serve` does before it loads a model
- the `vllm` parser with the serve subcommand (ServeSubcommand.subparser_init), the
subcommand's validate(), and EngineArgs.from_cli_args - with vLLM's own code. A verdict
lists the flags the release marks deprecated (its parser's deprecated actions, or the word in
their help, which is how vLLM words most deprecations).

The parser is built for vLLM's CPU platform (VLLM_TARGET_DEVICE=cpu): the CUDA platform needs a
GPU to load, and which flags `vllm serve` accepts does not depend on the platform; the
defaults some of them take do, and nothing here reads those.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
from typing import Any

logging.disable(logging.WARNING)
os.environ["VLLM_TARGET_DEVICE"] = "cpu"

import vllm  # noqa: E402
from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402


def _parser() -> tuple[FlexibleArgumentParser, ServeSubcommand]:
    parser = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand()
    serve.subparser_init(parser.add_subparsers(required=False, dest="subparser"))
    return parser, serve


def check(argv: list[str]) -> dict[str, Any]:
    if argv[:2] != ["vllm", "serve"]:
        return {"accepted": False, "error": f"not a vllm serve command: {argv[:2]}"}
    parser, serve = _parser()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(argv[1:])
        serve.validate(args)
        AsyncEngineArgs.from_cli_args(args)
    except SystemExit:
        lines = [ln for ln in stderr.getvalue().splitlines() if ln.strip()]
        return {"accepted": False, "error": lines[-1] if lines else "the parser exited"}
    except Exception as exc:  # noqa: BLE001 - the verdict carries it
        return {"accepted": False, "error": f"{type(exc).__name__}: {exc}"}
    serve_parser = next(a for a in parser._subparsers._group_actions  # noqa: SLF001
                        ).choices["serve"]
    marked = set(getattr(serve_parser, "_deprecated", set())) | {
        action for action in serve_parser._actions  # noqa: SLF001
        if "deprecated" in str(action.help or "").lower()}
    deprecated = sorted(option for action in marked for option in action.option_strings
                        if option.startswith("--") and option in argv)
    return {"accepted": True, "deprecated": deprecated}


def main() -> None:
    out = []
    for case in json.load(sys.stdin):
        out.append({"id": case["id"], "release": vllm.__version__, **check(case["argv"])})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
