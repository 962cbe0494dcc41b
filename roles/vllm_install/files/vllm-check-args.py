#!/usr/bin/env python3
"""vllm-check-args: the installed vLLM judges each replica's command line before it is used.

Run with the engine's own interpreter, one process for every replica (each start imports
vLLM and torch):

    <root>/venv/bin/python <root>/bin/vllm-check-args < replicas.json

stdin: a JSON list of {"name": "vllm-0", "command": [...]}, each command exactly what the
replica's launch script execs: `<venv>/bin/vllm serve MODEL --flag ...` or the CPU build's
`<venv>/bin/python -m vllm.entrypoints.openai.api_server --model MODEL --flag ...`.

For each replica, as the engine itself does at start, and no further:
1. vLLM's serve argument parser, built the way that entrypoint builds it (`vllm serve`: the
   CLI's serve subcommand; `-m ...api_server`: make_arg_parser on a bare parser), parses the
   arguments: unknown flags, bad values and invalid choices fail here with argparse's message;
2. validate_parsed_serve_args (e.g. --enable-auto-tool-choice without --tool-call-parser);
3. AsyncEngineArgs.from_cli_args builds the engine arguments (their __post_init__ checks; it
   loads vLLM's general plugins and, offline as the engine runs, resolves the model to a
   path: a model missing on the host is refused here too);
4. --tool-call-parser / --reasoning-parser must name a parser in vLLM's registries (after
   importing a --tool-parser-plugin / --reasoning-parser-plugin file, as the server does);
   then the server's own validate_api_server_args.
It does not build the model or engine config (that reads the model's files and queries the
device), open a socket, or load weights.

Exit status: 0 every replica passes; 1 one or more are refused (one line each on stdout,
naming the replica and the flag); 2 the input or the command form is unusable.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from typing import Any, NoReturn

SERVE_MODULES = ("vllm.entrypoints.openai.api_server",
                 "vllm.entrypoints.launchers.api_server.entry")


class Refused(Exception):
    """The engine refuses a replica's arguments."""


def split_command(command: list[str]) -> tuple[str, list[str]]:
    """(form, arguments) of a launch command: form "serve" (`vllm serve ...`, arguments after
    `serve`) or "api_server" (`python -m <api server module> ...`, arguments after it)."""
    if len(command) >= 2 and os.path.basename(command[0]) == "vllm" and command[1] == "serve":
        return "serve", command[2:]
    if len(command) >= 3 and command[1] == "-m" and command[2] in SERVE_MODULES:
        return "api_server", command[3:]
    raise ValueError(
        f"cannot tell which vLLM parser reads {command[:3]}: expected <venv>/bin/vllm serve "
        f"or <python> -m one of {', '.join(SERVE_MODULES)}")


def read_replicas(text: str) -> list[dict[str, Any]]:
    data = json.loads(text)
    if not isinstance(data, list) or not data or not all(
            isinstance(r, dict) and isinstance(r.get("name"), str)
            and isinstance(r.get("command"), list)
            and all(isinstance(w, str) for w in r["command"]) for r in data):
        raise ValueError('stdin must be a JSON list of {"name": str, "command": [str, ...]}')
    return data


def _parser_class() -> type[argparse.ArgumentParser]:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class CheckingParser(FlexibleArgumentParser):  # type: ignore[misc]
        """vLLM's parser, raising instead of printing usage and exiting."""

        def error(self, message: str) -> NoReturn:
            raise Refused(message)

    return CheckingParser


def _cli_args() -> Any:
    try:  # vLLM 0.2x-0.3x
        from vllm.entrypoints.launchers import cli_args
    except ImportError:  # older releases
        from vllm.entrypoints.openai import cli_args
    return cli_args


def _launcher() -> Any:
    try:
        from vllm.entrypoints.launchers import launcher
    except ImportError:
        from vllm.entrypoints.openai import api_server as launcher
    return launcher


class Checker:
    def __init__(self) -> None:
        parser_class = _parser_class()
        cli_args = _cli_args()
        self.validate_serve = cli_args.validate_parsed_serve_args
        self.api_server = cli_args.make_arg_parser(parser_class(prog="api_server"))
        from vllm.entrypoints.cli.serve import ServeSubcommand

        self.cli = parser_class(prog="vllm")
        subparsers = self.cli.add_subparsers(required=False, dest="subparser")
        ServeSubcommand().subparser_init(subparsers)

    def check(self, form: str, arguments: list[str]) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs

        try:
            with contextlib.redirect_stdout(io.StringIO()):
                if form == "serve":
                    args = self.cli.parse_args(["serve", *arguments])
                    if getattr(args, "model_tag", None) is not None:  # as `vllm serve` does
                        args.model = args.model_tag
                else:
                    args = self.api_server.parse_args(arguments)
        except SystemExit as exit_:  # a parser action that exits (--help, --version)
            raise Refused(f"the arguments make the parser exit ({exit_.code}): "
                          f"{' '.join(arguments)}") from None
        self._run(self.validate_serve, args)
        model = str(getattr(args, "model", "") or "")
        if model.startswith(("/", "./", "../")) and not os.path.exists(model):
            raise Refused(f"model {model}: no such path on this host (the engine loads it "
                          "from there)")
        try:
            engine_args = self._run(AsyncEngineArgs.from_cli_args, args)
        except Refused as error:
            if "LocalEntryNotFoundError" in str(error):  # an id neither local nor cached
                raise Refused(f"model {model}: not on this host and not in its Hugging Face "
                              f"cache; the engine runs offline (HF_HUB_OFFLINE=1): {error}"
                              ) from None
            raise
        self._parsers(args, engine_args)

    @staticmethod
    def _run(step: Any, *args: Any) -> Any:
        try:
            return step(*args)
        except Refused:
            raise
        except Exception as error:  # vLLM's own refusal: ValueError, TypeError, ...
            raise Refused(f"{type(error).__name__}: {error}") from None

    def _parsers(self, args: argparse.Namespace, engine_args: Any) -> None:
        from vllm.reasoning import ReasoningParserManager

        try:
            from vllm.tool_parsers import ToolParserManager
        except ImportError:  # older releases
            from vllm.entrypoints.openai.tool_parsers import (
                ToolParserManager,
            )

        plugin = getattr(args, "tool_parser_plugin", "") or ""
        if len(plugin) > 3:
            self._run(ToolParserManager.import_tool_parser, plugin)
        plugin = getattr(args, "reasoning_parser_plugin", "") or ""
        if len(plugin) > 3:
            self._run(ReasoningParserManager.import_reasoning_parser, plugin)
        for flag, name, manager in (
                ("--tool-call-parser", getattr(args, "tool_call_parser", None),
                 ToolParserManager),
                ("--reasoning-parser", getattr(args, "reasoning_parser", None),
                 ReasoningParserManager)):
            known = manager.list_registered()
            if name and name not in known:
                raise Refused(f"argument {flag}: invalid choice: {name!r} (this vLLM has: "
                              f"{', '.join(sorted(known))})")
        # The server's own check of the same, with the reasoning parser merged the way the
        # engine config merges it.
        engine_args.create_structured_outputs_config()
        self._run(_launcher().validate_api_server_args, args)


def main() -> int:
    try:
        replicas = read_replicas(sys.stdin.read())
        forms = [(r["name"], *split_command(r["command"])) for r in replicas]
    except ValueError as error:
        print(f"vllm-check-args: {error}", file=sys.stdout)
        return 2
    from vllm import __version__

    checker = Checker()
    refused = 0
    for name, form, arguments in forms:
        try:
            checker.check(form, arguments)
        except Refused as error:
            refused += 1
            print(f"replica {name}: vLLM {__version__} refuses its arguments: {error}")
        else:
            print(f"replica {name}: vLLM {__version__} accepts its arguments")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
