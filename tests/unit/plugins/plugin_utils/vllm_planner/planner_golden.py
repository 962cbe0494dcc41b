"""Golden outputs of the planner: every public output of kv_plan over a fixed set of inputs.

The cases: every model config under tests/data/configs, tests/data/configs-hybrid and the
inventories' models, planned with the option sets of inventories/example and
inventories/local (as the vllm_plan role passes them) and a few plain ones, plus the calls
the unit tests make (tests/data/planner-golden/inputs.json, recorded with
_planner_calls_plugin.py beside this file). For each: the plan, its table and its replicas,
or the error text (PlanError / HazardError with its plan and table).

    python planner_golden.py --check                # compare with the golden file
    python planner_golden.py --write-golden         # regenerate it, deliberately
    python planner_golden.py --select-inputs calls.pkl  # refresh inputs.json
    python planner_golden.py --dump OUT.json [--calls calls.pkl]
        # every config x every option set, the golden's cases, every pair of option errors
        # (and pickled recorded calls): for a before/after diff

test_planner_golden.py, beside this file, runs the same comparison under pytest.
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

ROOT = Path(__file__).resolve().parents[5]

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (  # noqa: E402
    HazardError,
    PlanError,
    kv_plan,
    plan_replicas,
    plan_table,
)

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


Q7B = "tests/data/configs/Qwen__Qwen2.5-7B-Instruct.json"
NEXT = "tests/data/configs-hybrid/Qwen3-Next-80B-A3B-Instruct.json"
GEMMA3 = "tests/data/configs/google__gemma-3-27b-it.json"
FP8 = "inventories/example/models/Qwen3.5-397B-A17B-FP8/config.json"
WORKLOAD = {"prompt_tokens_p50": 1200, "prompt_tokens_p95": 6000, "output_tokens_p50": 300,
            "output_tokens_p95": 1200, "concurrency": 64}
BASE = {"gpu": "H200", "tensor_parallel_size": 2}
# One invalid option each: (case, config file or None for Qwen2.5-72B, options on top of
# BASE, the field the error names). "sized": found only once the plan is sized.
OPTION_ERRORS: list[tuple[str, str | None, dict[str, Any], str]] = [
    ("unknown option", None, {"tensor_paralel_size": 2}, "tensor_paralel_size"),
    ("vllm_version not a version", None, {"vllm_version": "latest"}, "vllm_version"),
    ("vllm_version too old", None, {"vllm_version": "0.2.7"}, "vllm_version"),
    ("served_model_name blank", None, {"served_model_name": " "}, "served_model_name"),
    ("served_model_name padded", None, {"served_model_name": " q "}, "served_model_name"),
    ("served_model_name not text", None, {"served_model_name": 7}, "served_model_name"),
    ("gpu unknown", None, {"gpu": "B300"}, "gpu"),
    ("gpu missing", None, {"gpu": None}, "gpu"),
    ("gpu mapping without memory", None, {"gpu": {"name": "X1"}}, "gpu.memory_bytes"),
    ("tp zero", None, {"tensor_parallel_size": 0}, "tensor_parallel_size"),
    ("tp text", None, {"tensor_parallel_size": "two"}, "tensor_parallel_size"),
    ("tp bool", None, {"tensor_parallel_size": True}, "tensor_parallel_size"),
    ("tp does not divide heads", None, {"tensor_parallel_size": 3}, "tensor_parallel_size"),
    ("tp vs KV heads", Q7B, {"tensor_parallel_size": 7}, "tensor_parallel_size"),
    ("pp zero", None, {"pipeline_parallel_size": 0}, "pipeline_parallel_size"),
    ("pp above the layers", None, {"pipeline_parallel_size": 81}, "pipeline_parallel_size"),
    ("pp partition wrong stages", None,
     {"pipeline_parallel_size": 2, "pp_layer_partition": "40,20,20"}, "pp_layer_partition"),
    ("pp partition wrong sum", None,
     {"pipeline_parallel_size": 2, "pp_layer_partition": [40, 41]}, "pp_layer_partition"),
    ("utilization above 1", None, {"gpu_memory_utilization": 1.2}, "gpu_memory_utilization"),
    ("utilization zero", None, {"gpu_memory_utilization": 0}, "gpu_memory_utilization"),
    ("utilization percent", None, {"gpu_memory_utilization": "88%"},
     "gpu_memory_utilization"),
    ("utilization bool", None, {"gpu_memory_utilization": True}, "gpu_memory_utilization"),
    ("dtype unknown", None, {"dtype": "float33"}, "dtype"),
    ("allow_fp8_kv_cache not bool", None, {"allow_fp8_kv_cache": "yes"}, "allow_fp8_kv_cache"),
    ("kv_cache_dtype unknown", None, {"kv_cache_dtype": "int4"}, "kv_cache_dtype"),
    ("kv_cache_dtype not text", None, {"kv_cache_dtype": 8}, "kv_cache_dtype"),
    ("kv_cache_dtype float16 too new", None,
     {"kv_cache_dtype": "float16", "vllm_version": "0.8.5"}, "kv_cache_dtype"),
    ("quantization contradicts", FP8, {"quantization": "awq", "tensor_parallel_size": 8},
     "quantization"),
    ("block_size zero", None, {"block_size": 0}, "block_size"),
    ("block_size not offered", None, {"block_size": 24}, "block_size"),
    ("install_source unknown", None, {"install_source": "mirror"}, "install_source"),
    ("vllm_version not installable from PyPI", None, {"vllm_version": "0.34.0"}, "vllm_version"),
    ("kv_cache_sizing unknown", None,
     {"vllm_version": "0.34.0", "install_source": "site", "kv_cache_sizing": "auto"},
     "kv_cache_sizing"),
    ("kv_cache_sizing before 0.34", None, {"kv_cache_sizing": "measured"}, "kv_cache_sizing"),
    ("kv_cache_sizing measured with bytes", None,
     {"vllm_version": "0.34.0", "install_source": "site", "kv_cache_sizing": "measured",
      "kv_cache_memory_bytes": 20 << 30}, "kv_cache_sizing"),
    ("workload not a mapping", None, {"workload": [1, 2]}, "workload"),
    ("workload unknown key", None, {"workload": {**WORKLOAD, "p99": 1}}, "workload.p99"),
    ("workload key missing", None,
     {"workload": {k: v for k, v in WORKLOAD.items() if k != "concurrency"}},
     "workload.concurrency"),
    ("workload not a number", None, {"workload": {**WORKLOAD, "prompt_tokens_p50": "many"}},
     "workload.prompt_tokens_p50"),
    ("workload p95 below p50", None, {"workload": {**WORKLOAD, "output_tokens_p95": 10}},
     "workload.output_tokens_p95"),
    ("hazard_overrides not a mapping", None, {"hazard_overrides": ["runtime_oom"]},
     "hazard_overrides"),
    ("hazard_overrides unknown id", None, {"hazard_overrides": {"oom": "measured it ok"}},
     "hazard_overrides.oom"),
    ("hazard_overrides short reason", None, {"hazard_overrides": {"runtime_oom": "ok"}},
     "hazard_overrides.runtime_oom"),
    ("extra_flags not a mapping", None, {"extra_flags": "--seed 1"}, "extra_flags"),
    ("extra_flags bad name", None, {"extra_flags": {"a=b": 1}}, "extra_flags.a=b"),
    ("extra_flags api key", None, {"extra_flags": {"api-key": "s3cret"}},
     "extra_flags.api-key"),
    ("extra_flags owned", None, {"extra_flags": {"max_num_seqs": 4}},
     "extra_flags.max_num_seqs"),
    ("extra_flags gone", None, {"extra_flags": {"swap-space": 4}}, "extra_flags.swap-space"),
    ("extra_flags no value", None, {"extra_flags": {"seed": None}}, "extra_flags.seed"),
    ("enforce_eager not bool", None, {"enforce_eager": "yes"}, "enforce_eager"),
    ("refuse_hazards not bool", None, {"refuse_hazards": "no"}, "refuse_hazards"),
    ("weights_bytes not a number", None, {"weights_bytes": "big"}, "weights_bytes"),
    ("safetensors_index not JSON", None, {"safetensors_index": "{nope"}, "safetensors_index"),
    ("safetensors_index without total", None, {"safetensors_index": {"metadata": {}}},
     "safetensors_index.metadata.total_size"),
    ("speculative_config not a mapping", None, {"speculative_config": "mtp"},
     "speculative_config"),
    ("speculative_config unknown key", None, {"speculative_config": {"model": "x"}},
     "speculative_config.model"),
    ("speculative_config unknown method", None, {"speculative_config": {"method": "eagle9"}},
     "speculative_config.method"),
    ("speculative_config MTP without MTP layers", None,
     {"speculative_config": {"method": "mtp", "num_speculative_tokens": 1}},
     "speculative_config.method"),
    ("speculative_config tokens", None,
     {"speculative_config": {"method": "ngram", "num_speculative_tokens": 0}},
     "speculative_config.num_speculative_tokens"),
    ("mamba_ssm_cache_dtype unknown", None, {"mamba_ssm_cache_dtype": "int8"},
     "mamba_ssm_cache_dtype"),
    ("disable_hybrid_kv_cache_manager not bool", None,
     {"disable_hybrid_kv_cache_manager": "yes"}, "disable_hybrid_kv_cache_manager"),
    ("enable_prefix_caching not bool", None, {"enable_prefix_caching": "yes"},
     "enable_prefix_caching"),
    ("speculative_config before its release", None,
     {"speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
      "vllm_version": "0.8.5"}, "speculative_config"),
    ("mamba_ssm_cache_dtype before its release", None,
     {"mamba_ssm_cache_dtype": "float32", "vllm_version": "0.8.5"}, "mamba_ssm_cache_dtype"),
    ("max_num_batched_tokens not a number", None, {"max_num_batched_tokens": "lots"},
     "max_num_batched_tokens"),
    ("enable_chunked_prefill not bool", None, {"enable_chunked_prefill": "no"},
     "enable_chunked_prefill"),
    ("chunked prefill off on a V1 that cannot", None,
     {"enable_chunked_prefill": False, "vllm_version": "0.8.5"}, "enable_chunked_prefill"),
    ("max_model_len zero", None, {"max_model_len": 0}, "max_model_len"),
    ("max_model_len unset, model without positions", GEMMA3, {}, "max_model_len"),
    ("linear attention on V0", NEXT, {"vllm_version": "0.6.2", "tensor_parallel_size": 4},
     "vllm_version"),
    ("linear attention without the hybrid manager", NEXT,
     {"disable_hybrid_kv_cache_manager": True, "tensor_parallel_size": 4},
     "disable_hybrid_kv_cache_manager"),
    ("max_num_seqs zero", None, {"max_num_seqs": 0}, "max_num_seqs"),
    ("max_num_batched_tokens zero", None, {"max_num_batched_tokens": 0},
     "max_num_batched_tokens"),
    ("max_num_batched_tokens below max_model_len unchunked", None,
     {"enable_chunked_prefill": False, "max_num_batched_tokens": 4096, "max_model_len": 8192},
     "max_num_batched_tokens"),
    ("kv_cache_memory_bytes before its release", None,
     {"kv_cache_memory_bytes": 1 << 34, "vllm_version": "0.8.5"}, "kv_cache_memory_bytes"),
    ("kv_cache_memory_bytes not a number", None, {"kv_cache_memory_bytes": "lots"},
     "kv_cache_memory_bytes"),
    ("engine_package not text", None, {"engine_package": 5}, "engine_package"),
    ("driver not a mapping", None, {"driver": "580"}, "driver"),
    ("driver unknown key", None, {"driver": {"brnach": 580}}, "driver.brnach"),
    ("driver version not text", None, {"driver": {"version": 580.1}}, "driver.version"),
    ("driver cuda_compat not bool", None, {"driver": {"cuda_compat": "maybe"}},
     "driver.cuda_compat"),
    ("driver unknown source", None, {"driver": {"source": "ppa"}}, "nvidia_driver_source"),
    # sized: the planner's max_num_seqs is only known once the pool is.
    ("max_num_batched_tokens below max_num_seqs", None,
     {"max_num_seqs": 64, "max_num_batched_tokens": 32}, "max_num_batched_tokens"),
    ("max_num_batched_tokens below the planned max_num_seqs", None,
     {"max_num_batched_tokens": 16, "max_model_len": 16}, "max_num_batched_tokens"),
]
SIZED = {"max_num_batched_tokens below max_num_seqs",
         "max_num_batched_tokens below the planned max_num_seqs"}


def error_case(ref: str | None, opts: dict[str, Any]) -> tuple[object, dict[str, Any]]:
    """An OPTION_ERRORS row as kv_plan's arguments."""
    from _models import QWEN25_72B

    config = dict(QWEN25_72B) if ref is None else (ROOT / ref).read_text()
    return config, {**BASE, **opts}


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
    for name, ref, opts, _field in OPTION_ERRORS:
        cases[f"option error: {name}"] = (*error_case(ref, opts), 0)
    cases.update(error_pairs(adjacent=True))
    return cases


def error_pairs(adjacent: bool = False) -> dict[str, tuple[object, dict[str, Any], int]]:
    """Two faults at once (Qwen2.5-72B rows of OPTION_ERRORS): which one is reported. All
    pairs, or (adjacent) each row with the next one: the order the faults are found in."""
    rows = [(name, opts) for name, ref, opts, _field in OPTION_ERRORS if ref is None]
    cases: dict[str, tuple[object, dict[str, Any], int]] = {}
    for i, (first, a) in enumerate(rows):
        for second, b in rows[i + 1:i + 2] if adjacent else rows[i + 1:]:
            if a.keys() & b.keys():
                continue
            cases[f"two faults: {first} + {second}"] = (*error_case(None, {**a, **b}), 0)
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
        cases.update(representative())
        cases.update(error_pairs())
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
