"""The release routine (scripts/vllm-release.py) and the tables it writes (vllm_planner/releases).

The facts each table came from are recorded in tests/data/releases/, so the step from facts to
files is checked here byte for byte, without vLLM; reading the facts from a wheel is the part
that needs the wheel (scripts/oracle-env.sh).
"""

from __future__ import annotations

import copy
from types import ModuleType
from typing import Any

import pytest
import yaml
from _scripts import ROOT, load_script
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.releases import (
    RELEASES,
    release,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.versions import (
    FLAGS,
    flag_deprecation,
    flag_refusal,
    metric_names,
    parse_version,
    traits,
    unresolved_pins,
)

gen: ModuleType = load_script("scripts/vllm-release.py", "vllm_release")
FACTS = gen.recorded_facts()
ABSORBED = ("0.32.0", "0.33.0", "0.34.0")


def _facts(version: str = "0.34.0") -> dict[str, Any]:
    return copy.deepcopy(FACTS[version])


# ---------------------------------------------------------------- facts -> files, byte for byte

def test_every_release_table_has_its_recorded_facts() -> None:
    assert set(ABSORBED) <= set(FACTS) == set(RELEASES)


def test_the_committed_files_are_what_the_recorded_facts_give() -> None:
    """`scripts/vllm-release.py --check`: the tables, the import block and the role's kernel
    table, regenerated from the facts, equal the committed files."""
    files = gen.generated_files(FACTS)
    assert {p.name for p in files} >= {"v0_32_0.py", "v0_33_0.py", "v0_34_0.py", "__init__.py",
                                       "main.yml"}
    for path, text in files.items():
        assert path.read_text() == text, path
    assert gen.check(FACTS) == 0


def test_check_notices_a_hand_edit(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    facts = _facts()
    facts["oracle"]["flags"].append("a-flag-nobody-has")
    assert gen.render_release(gen.build_release(facts)) != (
        ROOT / "plugins/plugin_utils/vllm_planner/releases/v0_34_0.py").read_text()
    assert gen.check({**FACTS, "0.34.0": facts}) == 1


def test_rendering_is_deterministic_and_sorted() -> None:
    facts = _facts()
    shuffled = _facts()
    shuffled["oracle"]["flags"].reverse()
    shuffled["oracle"]["routes"].reverse()
    shuffled["requires_dist"].reverse()
    assert gen.render_release(gen.build_release(facts)) == gen.render_release(
        gen.build_release(shuffled))
    text = gen.render_release(gen.build_release(facts))
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "/work" not in text and "/tmp" not in text
    namespace: dict[str, Any] = {}
    exec(compile(text, "v0_34_0.py", "exec"), namespace)  # noqa: S102 - our own output
    assert namespace["RELEASE"] == gen.build_release(facts)


def test_facts_of_another_release_are_refused() -> None:
    facts = _facts()
    facts["oracle"]["vllm"] = "0.33.0"
    with pytest.raises(ValueError, match="facts of vLLM 0.33.0 recorded for 0.34.0"):
        gen.build_release(facts)


# ---------------------------------------------------------------- pure parts

def test_exact_pins_on_linux_x86_64_only() -> None:
    pins = gen.exact_pins([
        "torch==2.14.0",
        "protobuf==7.36.1; platform_machine == \"s390x\"",
        "tokenspeed-mla==2.0.3; platform_system == \"Linux\"",
        "llguidance<1.8.0,>=1.7.0",
        "nvidia-cutlass-dsl[cu13]==4.8.0",
        "ray[cgraph]==2.50.0; extra == \"ray\"",
        "PyNvVideoCodec==2.0.4",
    ])
    assert pins == {"nvidia-cutlass-dsl": "4.8.0", "pynvvideocodec": "2.0.4",
                    "tokenspeed-mla": "2.0.3", "torch": "2.14.0"}


def test_pins_resolve_against_a_recorded_version_list() -> None:
    index = {"flashinfer-python": ["0.7.4", "0.7.2.post1", "0.7.2"],
             "torch": ["2.14.0", "2.13.0+cpu"]}
    pins = {"flashinfer-python": "0.7.3", "torch": "2.13.0", "nvtx": "0.2.15"}
    assert gen.unresolved(pins, index) == ["flashinfer-python==0.7.3", "nvtx==0.2.15"]
    # == without a local label matches a local build (PEP 440); with one, only that build.
    assert gen.unresolved({"torch": "2.13.0+cu130"}, index) == ["torch==2.13.0+cu130"]
    assert gen.unresolved({"flashinfer-python": "0.7.2.post1"}, index) == []


def test_kernel_pins_follow_flashinfer_and_the_torch_cuda() -> None:
    assert gen.kernel_pins({"flashinfer-python": "0.7.3"}, "13.0") == {
        "index_urls": ("https://flashinfer.ai/whl/cu130", "https://flashinfer.ai/whl"),
        "requirements": ("flashinfer-cubin==0.7.3", "flashinfer-jit-cache==0.7.3+cu130"),
    }
    assert gen.kernel_pins({}, "13.0")["requirements"] == ()
    assert gen.kernel_pins({"flashinfer-python": "0.7.3"}, None)["requirements"] == ()


def test_module_names() -> None:
    assert gen.module_name("0.34.0") == "v0_34_0"
    assert gen.module_name("0.6.1.post2") == "v0_6_1_post2"
    with pytest.raises(ValueError):
        gen.module_name("0.35.0rc1")


def test_the_diff_names_what_changed() -> None:
    old = gen.build_release(_facts("0.33.0"))
    new = gen.build_release(_facts("0.34.0"))
    new["flags"] = tuple(f for f in new["flags"] if f != "mamba-cache-mode")
    lines = gen.diff_releases(old, new)
    text = "\n".join(lines)
    assert lines[0] == "vLLM 0.33.0 -> 0.34.0"
    assert "flags removed (1): mamba-cache-mode" in text
    assert "/checkpoint/prepare" in text and "/v1/fault_tolerance/apply" in text
    assert "routes removed (2): /fault_tolerance/apply, /fault_tolerance/status" in text
    assert "pin flashinfer-python: 0.7.2.post1 -> 0.7.3" in text
    assert "sizing default_block_size: 16 -> 64" in text
    assert "unresolved pins: flashinfer-python==0.7.3" in text
    assert len(lines) <= 60 and all(len(line) <= 100 for line in lines)
    assert gen.diff_releases(None, new)[0].startswith("vLLM 0.34.0: first release table")


def test_flag_base_groups_the_spellings() -> None:
    assert {gen.flag_base(f) for f in ("enable-x", "disable-x", "no-enable-x", "x",
                                       "no-x")} == {"x"}


# ---------------------------------------------------------------- what the tables say

def test_the_tables_read_the_known_facts() -> None:
    assert release("0.34.0") is RELEASES["0.34.0"] and release("v0.34.0") is RELEASES["0.34.0"]
    assert release("0.31.0") is None
    t32, t33, t34 = (RELEASES[v] for v in ABSORBED)
    assert (t32["torch"], t33["torch"], t34["torch"]) == ("2.13.0", "2.14.0", "2.14.0")
    assert {t["cuda"] for t in (t32, t33, t34)} == {"13.0"}
    assert {t["min_driver_branch"] for t in (t32, t33, t34)} == {580}
    assert t34["requires"]["flashinfer-python"] == "0.7.3"
    assert t34["sizing"]["default_block_size"] == 64
    assert t34["sizing"]["extensible_kv_cache_default"] is True
    assert t33["sizing"]["extensible_kv_cache_default"] is False
    assert t34["sizing"]["gpu_memory_utilization_default"] == 1.0
    assert t33["sizing"]["gpu_memory_utilization_default"] == 0.92


def test_unresolved_pins_for_the_plan_time_refusal() -> None:
    assert unresolved_pins("0.34.0") == ["flashinfer-python==0.7.3"]
    assert unresolved_pins("0.33.0") == []
    assert unresolved_pins("0.20.0") == []  # no table: nothing known


def test_a_flag_gone_from_a_release_is_refused_citing_the_release(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A deprecated flag the next release drops: refused from that release on, citing it and
    the deprecation; still taken, with a note, where it is deprecated."""
    t34 = dict(RELEASES["0.34.0"])
    t34["flags"] = tuple(f for f in t34["flags"] if f != "mamba-cache-mode")
    monkeypatch.setitem(RELEASES, "0.34.0", t34)
    refusal = flag_refusal("mamba-cache-mode", parse_version("0.34.0"))
    assert refusal is not None
    assert refusal.startswith("vLLM 0.34.0 has no --mamba-cache-mode: removed in 0.34.0 "
                              "(deprecated since 0.33.0: --mamba-cache-mode is deprecated")
    assert flag_refusal("mamba-cache-mode", parse_version("0.33.0")) is None
    note = flag_deprecation("mamba_cache_mode", parse_version("0.33.0"))
    assert note is not None and note.startswith("--mamba-cache-mode, deprecated in vLLM 0.33.0")
    assert not traits(parse_version("0.34.0")).supports("mamba-cache-mode")


def test_the_parser_decides_for_releases_with_a_table() -> None:
    v32, v34 = parse_version("0.32.0"), parse_version("0.34.0")
    assert flag_refusal("enable-extensible-kv-cache", v34) is None
    assert flag_refusal("enable-extensible-kv-cache", v32) == (
        "vLLM 0.32.0 has no --enable-extensible-kv-cache: it arrived in 0.34.0")
    assert flag_refusal("no-such-flag", v34) == (
        "vLLM 0.34.0 has no --no-such-flag: its `vllm serve` parser lacks it")
    # Without a table the hand history judges and unknown flags pass.
    assert flag_refusal("no-such-flag", parse_version("0.31.0")) is None
    assert flag_refusal("swap-space", parse_version("0.31.0")) == FLAGS["swap-space"].refusal(
        "swap-space", parse_version("0.31.0"))
    assert flag_deprecation("ir-op-priority", v34) is not None
    assert flag_deprecation("max-model-len", v34) is None


@pytest.mark.parametrize("version", ABSORBED)
def test_the_flags_the_planner_writes_are_in_the_parser(version: str) -> None:
    table = RELEASES[version]
    engine = traits(parse_version(version))
    written = ("model", "served-model-name", "host", "port", "tensor-parallel-size",
               "gpu-memory-utilization", "max-model-len", "max-num-seqs",
               "max-num-batched-tokens", "enable-chunked-prefill", "no-enable-chunked-prefill",
               "kv-cache-dtype", "block-size", "enable-prefix-caching", "enforce-eager",
               "num-gpu-blocks-override", "kv-cache-memory-bytes", "language-model-only",
               "mamba-ssm-cache-dtype", "disable-hybrid-kv-cache-manager", "speculative-config")
    assert [f for f in written if f not in table["flags"]] == []
    assert all(engine.supports(f) for f in written)


@pytest.mark.parametrize("version", ABSORBED)
def test_metric_names_are_exported_by_the_release(version: str) -> None:
    table = RELEASES[version]
    assert [m for m in metric_names(parse_version(version)).values()
            if m not in table["metrics"]] == []


def test_the_role_installs_the_tables_kernel_pins() -> None:
    role = yaml.safe_load((ROOT / "roles/vllm_install/vars/main.yml").read_text())
    kernels = role["_vllm_install_flashinfer_kernels"]
    for version, table in RELEASES.items():
        pins = table["kernel_pins"]
        assert kernels[version] == {"requirements": list(pins["requirements"]),
                                    "index_urls": list(pins["index_urls"])}


def test_the_gateway_keeps_new_routes_closed() -> None:
    """engine_gateway_paths is an exact allowlist: the routes later releases added (checkpoint,
    fault tolerance, decisions) stay closed; every open path is a route of every release."""
    gateway = yaml.safe_load((ROOT / "roles/engine_gateway/defaults/main.yml").read_text())
    paths = set(gateway["engine_gateway_paths"]) | set(gateway["engine_gateway_open_paths"])
    for table in RELEASES.values():
        routes = set(table["routes"])
        assert paths <= routes, sorted(paths - routes)
        closed = {r for r in routes if r.startswith(("/checkpoint/", "/v1/fault_tolerance/",
                                                     "/fault_tolerance/", "/v1/decisions"))}
        assert not closed & paths
    assert {"/checkpoint/prepare", "/v1/fault_tolerance/apply", "/v1/decisions"} <= set(
        RELEASES["0.34.0"]["routes"])
