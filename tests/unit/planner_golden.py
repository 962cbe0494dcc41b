"""Golden outputs of the planner: every public output of kv_plan over a fixed set of inputs.

The cases: every model config under tests/data/configs, tests/data/configs-hybrid and the
inventories' models, planned with the option sets of inventories/example and
inventories/local (as the vllm_plan role passes them) and a few plain ones, plus the calls
the unit tests make (tests/data/planner-golden/inputs.json, recorded with
tests/unit/_planner_calls_plugin.py). For each: the plan, its table and its replicas, or
the error text (PlanError / HazardError with its plan and table).

    python tests/unit/planner_golden.py --check                # compare with the golden file
    python tests/unit/planner_golden.py --write-golden         # regenerate it, deliberately
    python tests/unit/planner_golden.py --select-inputs calls.pkl  # refresh inputs.json
    python tests/unit/planner_golden.py --dump OUT.json [--calls calls.pkl]
        # every config x every option set (and pickled recorded calls) for a before/after diff

tests/unit/test_planner_golden.py runs the same comparison under pytest.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from vllm_planner import HazardError, PlanError, kv_plan, plan_replicas, plan_table  # noqa: E402

DATA = ROOT / "tests" / "data" / "planner-golden"
INPUTS = DATA / "inputs.json"
EXPECTED = DATA / "expected.json"
CONFIG_DIRS = ("tests/data/configs", "tests/data/configs-hybrid")
ROLE_DRIVER = {"source": "nvidia_repo", "version": "", "cuda_compat": False,
               "debian_release": "bookworm"}


def config_files() -> list[Path]:
    files = [p for d in CONFIG_DIRS for p in sorted((ROOT / d).glob("*.json"))]
    return files + sorted(ROOT.glob("inventories/*/models/*/config.json"))


def inventory_option_sets() -> dict[str, tuple[dict[str, Any], int, str | None]]:
    """name -> (vllm_plan_options, vllm_plan_gpu_count, the group's model directory)."""
    out: dict[str, tuple[dict[str, Any], int, str | None]] = {}
    for path in sorted(ROOT.glob("inventories/*/group_vars/**/*.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        if "vllm_plan_options" not in data:
            continue
        group = path.relative_to(ROOT / "inventories")
        model = data.get("model_artifacts_name")
        if model is None and group.parts[0] == "local":
            model = "tiny-qwen2"
        out[str(group)] = (data["vllm_plan_options"], int(data.get("vllm_plan_gpu_count", 1)),
                           model)
    return out


def as_role_passes(options: dict[str, Any], name: str) -> dict[str, Any]:
    """The options as roles/vllm_plan/tasks/main.yml combines them (kv_plan_replicas)."""
    return {**options, "model": f"/srv/vllm/models/{name}/current",
            "served_model_name": name.lower(), "host": "0.0.0.0",
            "vllm_version": options.get("vllm_version") or "", "engine_package": "vllm",
            "driver": ROLE_DRIVER, "refuse_hazards": False}


PLAIN_SETS: dict[str, dict[str, Any]] = {
    "plain-h200": {"gpu": "H200", "refuse_hazards": False},
    "plain-h100-tp2-workload": {
        "gpu": "H100-SXM", "tensor_parallel_size": 2, "refuse_hazards": False,
        "workload": {"prompt_tokens_p50": 1200, "prompt_tokens_p95": 6000,
                     "output_tokens_p50": 300, "output_tokens_p95": 1200, "concurrency": 64}},
    "plain-h200-refusing": {"gpu": "H200", "gpu_memory_utilization": 0.97},
}


def run(config: object, opts: dict[str, Any]) -> dict[str, Any]:
    """Every public output of one kv_plan call, as JSON-ready data."""
    try:
        plan = kv_plan(config, **opts)
    except HazardError as exc:
        return {"error": "HazardError", "field": exc.field, "message": str(exc),
                "plan": exc.plan, "table": plan_table(exc.plan, "golden")}
    except PlanError as exc:
        return {"error": "PlanError", "field": exc.field, "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a golden records whatever escapes, too
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"plan": plan, "table": plan_table(plan, "golden")}


def run_replicas(config: object, gpu_count: int, opts: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"replicas": plan_replicas(config, gpu_count, 8000, **opts)}
    except PlanError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


def _file_cases(every_config: bool) -> Iterator[tuple[str, object, dict[str, Any], int]]:
    sets = inventory_option_sets()
    for path in config_files():
        text = path.read_text()
        rel = str(path.relative_to(ROOT))
        model_dir = path.parent.name
        for set_name, (options, gpus, model) in sets.items():
            if every_config or model == model_dir:
                yield f"{rel} @ {set_name}", text, options, 0
                yield f"{rel} @ {set_name} (role)", text, as_role_passes(options, model_dir), \
                    gpus
        for set_name, options in PLAIN_SETS.items():
            yield f"{rel} @ {set_name}", text, options, 0


def representative() -> dict[str, tuple[object, dict[str, Any], int]]:
    """The golden test's cases: name -> (config, options, replicas' GPU count or 0)."""
    cases = {name: (cfg, opts, gpus) for name, cfg, opts, gpus in _file_cases(False)}
    for index, (cfg, opts) in enumerate(json.loads(INPUTS.read_text())):
        cases[f"unit-test call {index}"] = (cfg, opts, 0)
    return cases


def outputs(cases: dict[str, tuple[object, dict[str, Any], int]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (cfg, opts, gpus) in cases.items():
        out[name] = run(cfg, opts)
        if gpus:
            out[name + " [replicas]"] = run_replicas(cfg, gpus, opts)
    return out


def select_inputs(calls: list[tuple[object, object]]) -> list[list[object]]:
    """The recorded unit-test calls worth a golden: every distinct call that fails, and one
    successful call per (model type, option names, version, GPU, TP); only calls that JSON
    carries unchanged (no NaN, tuples or non-text keys)."""
    keep: list[list[object]] = []
    seen: set[str] = set()
    groups: set[str] = set()
    for cfg, opts in calls:
        if not isinstance(opts, dict):
            continue
        try:
            text = json.dumps([cfg, opts], allow_nan=False)
        except (TypeError, ValueError):
            continue
        if repr(json.loads(text)) != repr([cfg, opts]) or text in seen:
            continue
        seen.add(text)
        if "error" not in run(cfg, opts):
            model = cfg.get("model_type") if isinstance(cfg, dict) else None
            group = json.dumps([model, sorted(opts), *(repr(opts.get(k)) for k in (
                "vllm_version", "gpu", "tensor_parallel_size"))])
            if group in groups:
                continue
            groups.add(group)
        keep.append([cfg, opts])
    return keep


def canonical(data: object) -> str:
    """One line of JSON, keys in the order the planner gives them (the order is output too:
    the flags' order is the table's and the argv's)."""
    return json.dumps(data, indent=None, default=repr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write-golden", action="store_true",
                        help=f"regenerate {EXPECTED.relative_to(ROOT)} from today's planner")
    parser.add_argument("--check", action="store_true", help="compare with the golden file")
    parser.add_argument("--dump", type=Path, help="write every config x option set here")
    parser.add_argument("--calls", type=Path, help="with --dump: pickled (config, options) calls")
    parser.add_argument("--select-inputs", type=Path, metavar="CALLS_PKL",
                        help=f"rewrite {INPUTS.relative_to(ROOT)} from recorded calls")
    args = parser.parse_args(argv)
    if args.select_inputs:
        keep = select_inputs(pickle.loads(args.select_inputs.read_bytes()))
        INPUTS.write_text(json.dumps(keep, separators=(",", ":")) + "\n")
        print(f"{len(keep)} inputs -> {INPUTS.relative_to(ROOT)}")
    if args.dump:
        cases = {name: (cfg, opts, gpus) for name, cfg, opts, gpus in _file_cases(True)}
        if args.calls:
            calls = pickle.loads(args.calls.read_bytes())
            cases.update({f"recorded call {i}": (cfg, opts, 0)
                          for i, (cfg, opts) in enumerate(calls)})
        got = outputs(cases)
        args.dump.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {canonical(v)}"
                                                 for k, v in got.items()) + "\n}\n")
        print(f"{len(got)} outputs -> {args.dump}")
    if args.write_golden:
        got = outputs(representative())
        EXPECTED.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {canonical(v)}"
                                               for k, v in got.items()) + "\n}\n")
        print(f"{len(got)} golden outputs -> {EXPECTED.relative_to(ROOT)}")
    if args.check:
        want = json.loads(EXPECTED.read_text())
        got = json.loads(canonical(outputs(representative())))
        differ = sorted(k for k in want.keys() | got.keys()
                        if canonical(want.get(k)) != canonical(got.get(k)))
        for name in differ:
            print(f"differs: {name}")
        print(f"{len(want)} golden outputs, {len(differ)} differ")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
