"""Start the real vLLM engine once per case and report the KV cache size it logs.

    python engine_kv_sizes.py cases.json [LOG]  (with the engine's virtual environment)

cases.json: [{"name": ..., "argv": kv_plan argv}]. Each case's argv (`vllm serve MODEL
--flag ...`) is parsed by vLLM's own engine-argument parser, the engine is built in this
process (no API server, no second process) and its own log line "KV cache size: N tokens"
is read back from this process's output (stdout and stderr, where vLLM logs), with the
"Maximum concurrency for L tokens per request: X" of the same line and, for hybrid models,
the attention block size vLLM sets ("Setting attention block size to B tokens"). Prints
one JSON line per case: {"case": name, "logged_tokens": N, "logged_concurrency": X,
"logged_block_size": B or null, "seconds": s}, with "error" when the engine failed.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import re
import sys
import time
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

KV_LINE = re.compile(r"KV cache size: ([\d,]+) tokens, "
                     r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x")
BLOCK_LINE = re.compile(r"Setting attention block size to (\d+) tokens")
# The report goes to the original stdout; fds 1 and 2 are pointed at each case's log.
REPORT_FD = os.dup(1)


def engine_argv(argv: list[str]) -> list[str]:
    """`vllm serve MODEL --flags` -> `--model MODEL --flags` (frontend-only flags dropped)."""
    if argv[:2] != ["vllm", "serve"] or len(argv) < 3:
        raise ValueError(f"not a kv_plan argv: {argv[:3]}")
    out = ["--model", argv[2]]
    rest = argv[3:]
    skip = {"--host", "--port"}
    i = 0
    while i < len(rest):
        if rest[i] in skip:
            i += 2
            continue
        out.append(rest[i])
        i += 1
    return out


def run_cases(cases: list[dict[str, Any]], log_path: str) -> None:
    # vLLM exists only in the engine's venv (not in the lint venv): import it by name.
    vllm_logger = importlib.import_module("vllm.logger")
    engine_args = importlib.import_module("vllm.engine.arg_utils").EngineArgs
    parser_class = importlib.import_module("vllm.utils.argparse_utils").FlexibleArgumentParser
    llm_engine = importlib.import_module("vllm.v1.engine.llm_engine").LLMEngine

    parser = engine_args.add_cli_args(parser_class())
    for case in cases:
        start = time.monotonic()
        # vLLM logs this line "once" per identical text: let every case log its own.
        vllm_logger._print_info_once.cache_clear()
        with open(log_path, "w") as log:  # this case's log only
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            result: dict[str, Any] = {"case": case["name"]}
            try:
                args = parser.parse_args(engine_argv(case["argv"]))
                engine = llm_engine.from_engine_args(engine_args.from_cli_args(args))
                engine.engine_core.shutdown()
                del engine
            except Exception as exc:  # report it and go on with the next geometry
                result["error"] = f"{type(exc).__name__}: {exc}"
            sys.stdout.flush()
            sys.stderr.flush()
        gc.collect()
        text = open(log_path).read()
        found = KV_LINE.findall(text)
        result["logged_tokens"] = int(found[-1][0].replace(",", "")) if found else None
        result["logged_concurrency"] = float(found[-1][1]) if found else None
        blocks = BLOCK_LINE.findall(text)
        result["logged_block_size"] = int(blocks[-1]) if blocks else None
        if "error" in result:  # the engine's own first lines, for the report
            result["log_head"] = [line for line in text.splitlines()
                                  if "Error" in line or "error" in line][:5]
        result["seconds"] = round(time.monotonic() - start, 1)
        os.write(REPORT_FD, (json.dumps(result) + "\n").encode())


def main() -> None:
    cases: list[dict[str, Any]] = json.loads(open(sys.argv[1]).read())
    run_cases(cases, sys.argv[2] if len(sys.argv) > 2 else "/tmp/engine_kv_case.log")


if __name__ == "__main__":
    main()
