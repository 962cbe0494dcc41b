"""What one vLLM release is, read through its own code: the facts scripts/vllm-release.py tables.

Runs under an interpreter where ``import vllm`` works (scripts/oracle-env.sh VERSION: the
release's CUDA wheel without its CUDA-only dependencies, on a machine without a GPU). Prints
one JSON document, sorted, with nothing that depends on the machine:

* ``flags``: every long option ``vllm serve`` accepts, from the parser vLLM's serve entrypoint
  builds (``make_arg_parser(FlexibleArgumentParser())``, the module it lives in moved from
  ``entrypoints.launchers.cli_args`` to ``entrypoints.common.cli_args`` in 0.33), hidden
  aliases included (``--no-enable-x`` of an ``EnableDisableAction``: the parser takes them);
* ``deprecations``: the options vLLM marks deprecated, however the release marks them:
  argparse's ``deprecated=True`` (FlexibleArgumentParser keeps them in ``_deprecated`` below
  Python 3.13), an action class named ``Deprecated*`` (``DeprecatedLogConfigFileAction``), a
  help text that says so ("--x is deprecated", "Deprecated: ..."; the help carries the
  config docstrings because argv holds ``--help``, as ``vllm serve --help`` has it), or a
  module-level ``*DEPRECATION*`` message of ``vllm.engine.arg_utils`` naming the option.
  Each with the message and the release it announces the removal for, if it names one;
* ``sizing``: ``CacheConfig.DEFAULT_BLOCK_SIZE``, the ``gpu_memory_utilization`` field's
  default, and, on a CUDA platform, whether the extensible KV cache is on by default
  (``VllmConfig._resolve_extensible_kv_cache`` where the release has it) and the
  utilization that then applies (``CacheConfig.resolved_gpu_memory_utilization``);
* ``metrics``: every ``vllm:`` Prometheus metric the package's code creates, with its kind
  (counter/gauge/histogram, from the constructor it is passed to) and the exported name
  (prometheus_client adds ``_total`` to a counter);
* ``routes``: every HTTP path the package's FastAPI routers can register (``@router.get``,
  ``app.add_api_route``, starlette's ``Mount("/metrics", ...)``, ... under vllm/entrypoints),
  read from the source with ``ast``: the routes behind command-line switches included,
  which importing one app would miss.

Usage: python tests/oracle/release_facts.py > facts.json
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import logging
import re
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# The help texts of config fields are read only when argv asks for help (arg_utils.NEEDS_HELP,
# evaluated at import); without "serve" in argv the parser keeps --model.
sys.argv = ["vllm", "--help"]
logging.disable(logging.WARNING)
warnings.simplefilter("ignore")

import vllm  # noqa: E402
from vllm import platforms  # noqa: E402
from vllm.platforms.interface import Platform, PlatformEnum  # noqa: E402

HTTP_METHODS = frozenset({"get", "post", "put", "delete", "patch", "head", "options",
                          "api_route", "add_api_route", "websocket", "api_websocket_route",
                          "add_websocket_route"})
STARLETTE_ROUTES = frozenset({"Mount", "Route", "WebSocketRoute"})
METRIC_RE = re.compile(r"^vllm:[a-z_][a-z0-9_]*$")
FLAG_RE = re.compile(r"--[a-z0-9][a-z0-9-]*")
REMOVAL_RE = re.compile(r"removed in v?(\d+\.\d+\.\d+)")
DEPRECATED_HELP_RE = re.compile(r"\b(?:is|are|has been|now) deprecated\b|\bDeprecated:")


class CudaStandIn(Platform):  # type: ignore[misc]
    """The CUDA platform as far as config code asks (is_cuda, device_type); vLLM's own
    CudaPlatform loads the CUDA driver library at import."""

    _enum = PlatformEnum.CUDA
    device_name = "cuda"
    device_type = "cuda"
    dispatch_key = "CUDA"
    ray_device_key = "GPU"
    device_control_env_var = "CUDA_VISIBLE_DEVICES"


platforms._current_platform = CudaStandIn()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _deprecation_message(help_text: str) -> str:
    """The sentences of a help text from the one that says deprecated on (at most 240 chars)."""
    text = _one_line(help_text)
    match = DEPRECATED_HELP_RE.search(text)
    stop = text.rfind(". ", 0, match.start()) if match else -1
    start = stop + 2 if stop >= 0 else 0
    message = text[start:]
    return message if len(message) <= 240 else message[:237].rstrip() + "..."


def serve_parser() -> Any:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser
    except ImportError:  # 0.32 and older
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def flag_facts() -> tuple[list[str], dict[str, dict[str, str | None]]]:
    parser = serve_parser()
    options: dict[str, Any] = {opt: action for opt, action
                               in parser._option_string_actions.items() if opt.startswith("--")}
    argparse_deprecated = set(getattr(parser, "_deprecated", set()))
    deprecated: dict[int, str] = {}  # id(action) -> message
    for action in {id(a): a for a in options.values()}.values():
        help_text = action.help or ""
        if action in argparse_deprecated or getattr(action, "deprecated", False):
            deprecated[id(action)] = "argparse deprecated=True"
        elif type(action).__name__.startswith("Deprecated") or DEPRECATED_HELP_RE.search(
                _one_line(help_text)):
            deprecated[id(action)] = _deprecation_message(help_text) or type(action).__name__
    # Deprecations vLLM only logs (logger.warning_once of a module-level message).
    from vllm.engine import arg_utils

    for name in sorted(vars(arg_utils)):
        value = getattr(arg_utils, name)
        if "DEPRECATION" not in name or not isinstance(value, str):
            continue
        named = [opt for opt in FLAG_RE.findall(value) if opt in options]
        if named and id(options[named[0]]) not in deprecated:
            deprecated[id(options[named[0]])] = _one_line(value)
    deprecations: dict[str, dict[str, str | None]] = {}
    for opt, action in options.items():
        message = deprecated.get(id(action))
        if message is not None:
            removal = REMOVAL_RE.search(message)
            deprecations[opt[2:]] = {"message": message,
                                     "removal_announced": removal.group(1) if removal else None}
    return sorted(opt[2:] for opt in options), dict(sorted(deprecations.items()))


def sizing_facts() -> dict[str, Any]:
    from vllm.config import CacheConfig

    field = CacheConfig.__dataclass_fields__["gpu_memory_utilization"]
    field_default = getattr(field.default, "default", field.default)
    cache = CacheConfig()
    extensible = False  # releases without the field have no extensible KV cache
    if "enable_extensible_kv_cache" in CacheConfig.__dataclass_fields__:
        from vllm.config.vllm import VllmConfig

        resolve = getattr(VllmConfig, "_resolve_extensible_kv_cache", None)
        if resolve is not None:
            # The surroundings of a default `vllm serve` (no connector, no elastic EP); the
            # decision is VllmConfig's own function, on the CUDA platform.
            resolve(SimpleNamespace(cache_config=cache, kv_transfer_config=None,
                                    parallel_config=SimpleNamespace(enable_elastic_ep=False)))
        extensible = bool(cache.enable_extensible_kv_cache)
    resolved = getattr(cache, "resolved_gpu_memory_utilization", cache.gpu_memory_utilization)
    return {
        "default_block_size": CacheConfig.DEFAULT_BLOCK_SIZE,
        "extensible_kv_cache_default": extensible,
        "gpu_memory_utilization_field_default": field_default,
        "gpu_memory_utilization_default": resolved,
        "gpu_memory_utilization_without_extensible": getattr(
            CacheConfig, "DEFAULT_GPU_MEMORY_UTILIZATION", field_default),
    }


def _call_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _metric_kind(func: ast.expr) -> str:
    name = _call_name(func).lower()
    for kind in ("counter", "gauge", "histogram", "summary", "info"):
        if kind in name:
            return kind
    return "unknown"


def _first_str(call: ast.Call, keyword: str) -> str | None:
    for kw in call.keywords:
        if kw.arg == keyword and isinstance(kw.value, ast.Constant):
            return kw.value.value if isinstance(kw.value.value, str) else None
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(
            call.args[0].value, str):
        return call.args[0].value
    return None


def source_facts(package: Path) -> tuple[dict[str, dict[str, str]], list[str]]:
    metrics: dict[str, str] = {}
    routes: set[str] = set()
    for path in sorted(package.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        in_entrypoints = "entrypoints" in path.relative_to(package).parts
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _first_str(node, "name")
                if name and METRIC_RE.match(name):
                    kind = _metric_kind(node.func)
                    if metrics.get(name, "unknown") == "unknown":
                        metrics[name] = kind
                func = node.func
                if in_entrypoints and (
                        _call_name(func) in STARLETTE_ROUTES
                        or (isinstance(func, ast.Attribute) and func.attr in HTTP_METHODS
                            and re.search(r"router|app", _call_name(func.value), re.I))):
                    route = _first_str(node, "path")
                    if route and route.startswith("/"):
                        routes.add(route)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if METRIC_RE.match(node.value):
                    metrics.setdefault(node.value, "unknown")
    exported = {name: {"kind": kind,
                       "exported": name + "_total" if kind == "counter"
                       and not name.endswith("_total") else name}
                for name, kind in sorted(metrics.items())}
    return exported, sorted(routes)


def main() -> int:
    flags, deprecations = flag_facts()
    metrics, routes = source_facts(Path(vllm.__file__).parent)
    facts = {
        "vllm": importlib.metadata.version("vllm"),
        "flags": flags,
        "deprecations": deprecations,
        "sizing": sizing_facts(),
        "metrics": metrics,
        "routes": routes,
    }
    json.dump(facts, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
