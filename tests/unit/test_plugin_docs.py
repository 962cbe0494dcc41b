"""scripts/plugin-docs.py (make lint): every module, filter and action plugin renders with the
real ansible-doc, all three of DOCUMENTATION, EXAMPLES and RETURN; scripts/collection-tree.py
builds the collection tree it reads (and ansible-test sanity runs in)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit._scripts import ROOT, load_script

tree_script = load_script("scripts/collection-tree.py", "collection_tree")
docs_script = load_script("scripts/plugin-docs.py", "plugin_docs")

MODULES = sorted(p.stem for p in (ROOT / "library").glob("*.py"))
ACTIONS = sorted(p.stem for p in (ROOT / "action_plugins").glob("*.py"))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built: Path = tree_script.build(ROOT, tmp_path_factory.mktemp("coll"))
    return built


def run_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts/plugin-docs.py"), str(root)],
                          capture_output=True, text=True, check=False)


def test_tree_is_a_collection_with_every_plugin(tree: Path) -> None:
    assert tree.parts[-3:] == ("ansible_collections", "vllm_fleet", "serving")
    plugins = tree / "plugins"
    assert sorted(p.stem for p in (plugins / "modules").glob("*.py")) == MODULES
    assert sorted(p.stem for p in (plugins / "action").glob("*.py")) == ACTIONS
    filters = {p.name for p in (plugins / "filter").glob("*.py")}
    assert {p.name for p in (ROOT / "filter_plugins").glob("*.py")} <= filters
    # No plugins inside roles: each lives once, in the collection's plugins/ (issue 23).
    assert not [p for kind in ("filter_plugins", "library", "action_plugins", "module_utils")
                for p in ROOT.glob(f"roles/*/{kind}/*.py")]
    # real files: ansible-test does not read through symlinks
    assert not any(p.is_symlink() for p in tree.rglob("*"))


def test_every_plugin_renders(tree: Path) -> None:
    result = run_check(tree)
    assert result.returncode == 0, result.stderr
    # every module and every filter the plugin files export was checked
    checked = int(re.search(r"(\d+) modules and filters", result.stdout)[1])  # type: ignore[index]
    assert checked >= len(MODULES) + len(list((ROOT / "filter_plugins").glob("*.yml")))


def test_each_missing_section_is_named(tree: Path, tmp_path: Path) -> None:
    broken = tmp_path / "ansible_collections" / "vllm_fleet" / "serving"
    shutil.copytree(tree, broken)
    module = broken / "plugins/modules/deploy_manifest.py"
    module.write_text(re.sub(r'\nEXAMPLES = r""".*?"""\n', "\n", module.read_text(), flags=re.S))
    (broken / "plugins/filter/bench_gate.yml").unlink()  # the filter's only documentation
    (broken / "plugins/modules/managed_file.py").unlink()  # the action's documentation
    result = run_check(broken)
    assert result.returncode == 1
    assert "vllm_fleet.serving.deploy_manifest (module): no EXAMPLES" in result.stderr
    assert "vllm_fleet.serving.bench_gate (filter): no DOCUMENTATION, EXAMPLES, RETURN" in (
        result.stderr)
    assert "vllm_fleet.serving.managed_file (action): no module file" in result.stderr
    assert "vllm_fleet.serving.gpu_facts" not in result.stderr


def test_a_filter_file_that_fails_to_load_is_named(tree: Path, tmp_path: Path) -> None:
    broken = tmp_path / "ansible_collections" / "vllm_fleet" / "serving"
    shutil.copytree(tree, broken)
    (broken / "plugins/filter/restart_schedule.py").write_text("import no_such_module\n")
    result = run_check(broken)
    assert result.returncode == 1
    assert "restart_schedule" in result.stderr


def test_a_path_that_is_no_collection_is_refused(tmp_path: Path) -> None:
    result = run_check(tmp_path)
    assert result.returncode == 2
    assert "not a collection path" in result.stderr


def test_the_tree_follows_plugins_links_once(tmp_path: Path) -> None:
    """A checkout with plugins/<kind> -> ../<folder> (the collection layout) gets real files
    under plugins/ and no second copy of the folder; a link back to the checkout is left out."""
    checkout = tmp_path / "checkout"
    (checkout / "library").mkdir(parents=True)
    (checkout / "library/mod.py").write_text("# a module\n")
    (checkout / "plugins").mkdir()
    (checkout / "plugins/modules").symlink_to("../library")
    (checkout / ".collections/ansible_collections/ns").mkdir(parents=True)
    (checkout / ".collections/ansible_collections/ns/name").symlink_to("../../..")
    (checkout / "galaxy.yml").write_text("namespace: ns\nname: name\n")
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    subprocess.run(["git", "-C", str(checkout), "add", "-A"], check=True)
    built = tree_script.build(checkout, tmp_path / "out")
    assert (built / "plugins/modules/mod.py").read_text() == "# a module\n"
    assert not (built / "plugins/modules").is_symlink()
    assert not (built / "library").exists()
    assert not (built / ".collections/ansible_collections/ns/name").exists()
