"""Pipeline parallelism (issue 36): the stage split, each stage's weights and KV blocks, the
refusal's host count, and every rank's argv (plan_group)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    HazardError,
    PlanError,
    kv_plan,
    plan_group,
    plan_table,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.pipeline import (
    partitions,
    pp_indices,
)

DATA = Path(__file__).resolve().parents[5] / "tests" / "data"
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}


def _cfg(name: str, fp8: bool = False) -> dict[str, Any]:
    for folder in ("configs-hybrid", "configs"):
        path = DATA / folder / f"{name}.json"
        if path.exists():
            cfg = dict(json.loads(path.read_text()))
            return {**cfg, "quantization_config": FP8} if fp8 else cfg
    raise FileNotFoundError(name)


def _vllm_get_pp_indices(num_layers: int, rank: int, size: int) -> tuple[int, int]:
    """vllm/distributed/utils.py get_pp_indices (0.32.0-0.34.0) without the override,
    as written there."""
    layers_per_partition = num_layers // size
    parts = [layers_per_partition] * size
    if remaining := num_layers % size:
        for i in range(2, remaining + 2):
            parts[-i] += 1
    start = sum(parts[:rank])
    return start, start + parts[rank]


@pytest.mark.parametrize(("layers", "size"), [
    (92, 3), (92, 4), (92, 8), (92, 5), (92, 7), (60, 7), (64, 3), (10, 4), (7, 7), (5, 2),
    (94, 6), (61, 8)])
def test_the_split_is_get_pp_indices(layers: int, size: int) -> None:
    for rank in range(size):
        assert pp_indices(layers, rank, size) == _vllm_get_pp_indices(layers, rank, size)
    assert sum(partitions(layers, size)) == layers


def test_the_remainder_skips_the_last_stage() -> None:
    assert partitions(92, 8) == (11, 11, 11, 12, 12, 12, 12, 11)
    assert partitions(10, 4) == (2, 3, 3, 2)
    assert partitions(92, 3) == (31, 31, 30)
    assert pp_indices(92, 1, 4, (20, 24, 24, 24)) == (20, 44)


def test_stages_hold_their_layer_kinds_embedding_head_and_drafter() -> None:
    plan = kv_plan(_cfg("Qwen3.8-2.4T-A95B", fp8=True), gpu="H200", tensor_parallel_size=8,
                   pipeline_parallel_size=4, vllm_version="0.33.0",
                   speculative_config={"method": "mtp", "num_speculative_tokens": 1})
    stages = plan["pipeline"]["stages"]
    assert [s["layers"] for s in stages] == [[0, 22], [23, 45], [46, 68], [69, 91]]
    assert [s["layer_kinds"] for s in stages] == [
        {"attention": 5, "linear": 18}, *[{"attention": 6, "linear": 17}] * 3]
    # Qwen3.5's model class builds embed_tokens on every stage; the head and the MTP
    # drafter only on the last.
    assert all(s["embedding"] for s in stages)
    assert [s["lm_head"] for s in stages] == [False, False, False, True]
    assert [s["mtp_layers"] for s in stages] == [0, 0, 0, 1]
    assert plan["num_gpu_blocks"] == min(s["num_gpu_blocks"] for s in stages)
    assert plan["weights_bytes_per_gpu"] == max(s["weights_bytes_per_gpu"] for s in stages)
    assert plan["flags"]["pipeline_parallel_size"] == 4


def test_a_dense_model_keeps_its_embedding_on_the_first_stage() -> None:
    plan = kv_plan(_cfg("Qwen__Qwen3-32B"), gpu="H100-SXM", tensor_parallel_size=2,
                   pipeline_parallel_size=2, vllm_version="0.33.0")
    first, last = plan["pipeline"]["stages"]
    assert (first["embedding"], first["lm_head"], last["embedding"], last["lm_head"]) == (
        True, False, False, True)


def test_given_weights_are_split_in_the_estimates_proportions() -> None:
    cfg = _cfg("Qwen3.5-397B-A17B")
    est = kv_plan(cfg, gpu="H100-SXM", tensor_parallel_size=8, pipeline_parallel_size=2,
                  vllm_version="0.33.0", refuse_hazards=False)
    given = kv_plan(cfg, gpu="H100-SXM", tensor_parallel_size=8, pipeline_parallel_size=2,
                    vllm_version="0.33.0", refuse_hazards=False,
                    weights_bytes=est["weights_bytes"] // 2)
    for a, b in zip(est["pipeline"]["stages"], given["pipeline"]["stages"], strict=True):
        assert abs(b["weights_bytes_per_gpu"] * 2 - a["weights_bytes_per_gpu"]) <= 2


def test_one_host_too_small_names_the_hosts_that_fit() -> None:
    """Qwen3.8-2.4T-A95B FP8 on 2 x 8xH200 is refused; the fix names 3 hosts."""
    cfg = _cfg("Qwen3.8-2.4T-A95B", fp8=True)
    with pytest.raises(HazardError) as err:
        kv_plan(cfg, gpu="H200", tensor_parallel_size=8, pipeline_parallel_size=2,
                vllm_version="0.33.0")
    message = next(h["message"] for h in err.value.plan["hazards"]
                   if h["id"] == "weights_exceed_memory")
    assert "Fix: pipeline_parallel_size 3 (3 hosts of 8 x H200)" in message
    assert "pipeline stage" in message
    ok = kv_plan(cfg, gpu="H200", tensor_parallel_size=8, pipeline_parallel_size=3,
                 vllm_version="0.33.0")
    assert ok["ok"]
    single = kv_plan(cfg, gpu="H200", tensor_parallel_size=8, vllm_version="0.33.0",
                     refuse_hazards=False)
    assert "Fix: pipeline_parallel_size 3 (3 hosts of 8 x H200)" in single["hazards"][0][
        "message"]


@pytest.mark.parametrize(("name", "fp8", "gpu", "hosts"), [
    ("Qwen3.8-2.4T-A95B", True, "H200", 3), ("Qwen3.8-2.4T-A95B", False, "H200", 6),
    ("Qwen3.8-2.4T-A95B", True, "H100-SXM", 5), ("Qwen3.8-2.4T-A95B", False, "H100-SXM", 11),
    ("Qwen3.5-397B-A17B", False, "H100-SXM", 2)])
def test_the_smallest_host_count(name: str, fp8: bool, gpu: str, hosts: int) -> None:
    plan = kv_plan(_cfg(name, fp8), gpu=gpu, tensor_parallel_size=8, vllm_version="0.33.0",
                   refuse_hazards=False)
    text = plan["hazards"][0]["message"]
    assert f"pipeline_parallel_size {hosts} ({hosts} hosts of 8 x {gpu})" in text


def test_pipeline_options_are_validated() -> None:
    cfg = _cfg("Qwen__Qwen3-32B")
    for opts, field in (({"pipeline_parallel_size": 0}, "pipeline_parallel_size"),
                        ({"pipeline_parallel_size": 65}, "pipeline_parallel_size"),
                        ({"pipeline_parallel_size": 2, "pp_layer_partition": "30,30,4"},
                         "pp_layer_partition"),
                        ({"pipeline_parallel_size": 2, "pp_layer_partition": [0, 64]},
                         "pp_layer_partition"),
                        ({"pipeline_parallel_size": 2, "pp_layer_partition": [30, 30]},
                         "pp_layer_partition"),
                        ({"extra_flags": {"pipeline-parallel-size": 2}},
                         "extra_flags.pipeline-parallel-size")):
        with pytest.raises(PlanError) as err:
            kv_plan(cfg, gpu="H100-SXM", tensor_parallel_size=2, **opts)
        assert err.value.field == field


def test_a_partition_goes_to_the_environment() -> None:
    plan = kv_plan(_cfg("Qwen__Qwen3-32B"), gpu="H100-SXM", tensor_parallel_size=2,
                   pipeline_parallel_size=2, pp_layer_partition="30,34", vllm_version="0.33.0")
    assert plan["pipeline"]["environment"] == {"VLLM_PP_LAYER_PARTITION": "30,34"}
    assert [s["layers"] for s in plan["pipeline"]["stages"]] == [[0, 29], [30, 63]]


def test_pipeline_size_one_changes_nothing() -> None:
    cfg = _cfg("Qwen3.5-27B")
    assert kv_plan(cfg, gpu="H200", pipeline_parallel_size=1) == kv_plan(cfg, gpu="H200")
    assert "pipeline" not in kv_plan(cfg, gpu="H200")


def test_every_rank_gets_its_argv() -> None:
    ranks = plan_group(_cfg("Qwen3.8-2.4T-A95B", fp8=True), ["a", "b", "c", "d"], 8, 29501,
                       gpu="H200", vllm_version="0.34.0", install_source="site",
                       model="/srv/m", host="0.0.0.0", port=8000)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    head = ranks[0]["argv"]
    assert head[:3] == ["vllm", "serve", "/srv/m"] and "--headless" not in head
    assert head[-8:] == ["--nnodes", "4", "--node-rank", "0", "--master-addr", "a",
                         "--master-port", "29501"]
    for rank in ranks[1:]:
        argv = rank["argv"]
        assert argv[-1] == "--headless" and rank["headless"]
        assert argv[argv.index("--node-rank") + 1] == str(rank["rank"])
        assert "--port" not in argv and "--host" not in argv
        # the engine flags are rank 0's
        assert argv[:argv.index("--nnodes")] == [a for a in head[:head.index("--nnodes")]
                                                 if a not in ("--host", "0.0.0.0", "--port",
                                                              "8000")]
    assert "--pipeline-parallel-size" in head and "--tensor-parallel-size" in head
    table = plan_table(ranks[0]["plan"])
    assert "stage 3" in table and "pipeline" in table


@pytest.mark.parametrize(("hosts", "gpus", "opts", "field"), [
    (["a", "a"], 8, {}, "hosts"),
    (["a", "b", "c"], 8, {"pipeline_parallel_size": 2}, "hosts"),
    (["a", "b"], 8, {"tensor_parallel_size": 4}, "tensor_parallel_size"),
    (["a"], 8, {}, "hosts"),
    ("a,b", 8, {}, "hosts"),
    (["a", "b"], 8, {"extra_flags": {"nnodes": 3}}, "extra_flags.nnodes"),
])
def test_plan_group_refuses(hosts: Any, gpus: int, opts: dict[str, Any], field: str) -> None:
    with pytest.raises(PlanError) as err:
        plan_group(_cfg("Qwen3.5-397B-A17B"), hosts, gpus, 29501, gpu="H100-SXM", **opts)
    assert err.value.field == field


# docs/planner.md "Larger than one host": the two example groups' tables, generated here.
DOC = Path(__file__).resolve().parents[5] / "docs" / "planner.md"
DOC_GROUPS = {
    "qwen3.8-fp8-4xh200": ("Qwen3.8-2.4T-A95B", True, ["gpu-0", "gpu-1", "gpu-2", "gpu-3"],
                           "H200"),
    "qwen3.5-bf16-2xh100": ("Qwen3.5-397B-A17B", False, ["gpu-0", "gpu-1"], "H100-SXM"),
}


def doc_block(key: str) -> str:
    name, fp8, hosts, gpu = DOC_GROUPS[key]
    ranks = plan_group(_cfg(name, fp8), hosts, 8, 29501, gpu=gpu, vllm_version="0.33.0",
                       model=f"/srv/vllm/models/{name}/current", host="0.0.0.0", port=8000)
    lines = [plan_table(ranks[0]["plan"]), ""]
    lines += [f"  rank {r['rank']} ({r['host']}): {' '.join(r['argv'])}" for r in ranks]
    return "\n".join(lines)


# README.md "Models larger than one host": one line per example group, generated here.
README = DOC.parents[1] / "README.md"
README_MARKS = ("<!-- groups-summary -->\n", "<!-- /groups-summary -->")


def readme_summary() -> str:
    gib = 1024 ** 3
    rows = ["| engine group | hosts | layout | layers per stage | weights GiB/GPU | "
            "KV pool GiB/GPU | sequences at full context | `--max-num-seqs` |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key in sorted(DOC_GROUPS):
        name, fp8, hosts, gpu = DOC_GROUPS[key]
        plan = plan_group(_cfg(name, fp8), hosts, 8, 29501, gpu=gpu, vllm_version="0.33.0",
                          model=f"/srv/vllm/models/{name}/current")[0]["plan"]
        stages = plan["pipeline"]["stages"]
        layers = "/".join(str(st["layers"][1] - st["layers"][0] + 1) for st in stages)
        rows.append(
            f"| {name}{' FP8' if fp8 else ' bf16'} | {len(hosts)} x 8 x {gpu} | TP 8 x PP "
            f"{len(hosts)} | {layers} | "
            f"{max(st['weights_bytes_per_gpu'] for st in stages) / gib:.1f} | "
            f"{min(st['kv_pool_bytes_per_gpu'] for st in stages) / gib:.1f} | "
            f"{plan['max_concurrency_at_max_model_len']:.1f} | {plan['flags']['max_num_seqs']} |")
    return "\n".join(rows) + "\n"


def test_the_readme_shows_the_groups_summary() -> None:
    text = README.read_text()
    begin, end = README_MARKS
    assert begin in text, f"README.md lacks the groups summary: {__file__} --write-docs"
    assert text.split(begin, 1)[1].split(end, 1)[0] == readme_summary(), \
        f"regenerate: python {__file__} --write-docs"


@pytest.mark.parametrize("key", sorted(DOC_GROUPS))
def test_the_docs_show_the_planners_tables(key: str) -> None:
    text = DOC.read_text()
    begin, end = f"<!-- pipeline:{key} -->\n```text\n", "\n```\n<!-- /pipeline -->"
    assert begin in text, f"docs/planner.md lacks the {key} table: {__file__} --write-docs"
    got = text.split(begin, 1)[1].split(end, 1)[0]
    assert got == doc_block(key), f"regenerate: python {__file__} --write-docs"


if __name__ == "__main__":
    import re
    import sys
    if "--write-docs" in sys.argv:
        text = DOC.read_text()
        for key in sorted(DOC_GROUPS):
            text = re.sub(rf"(<!-- pipeline:{re.escape(key)} -->\n```text\n).*?"
                          r"(```\n<!-- /pipeline -->)",
                          lambda m, k=key: m.group(1) + doc_block(k) + "\n" + m.group(2),
                          text, flags=re.S)
        DOC.write_text(text)
        begin, end = README_MARKS
        text = README.read_text()
        README.write_text(text.split(begin, 1)[0] + begin + readme_summary() + end
                          + text.split(end, 1)[1])
