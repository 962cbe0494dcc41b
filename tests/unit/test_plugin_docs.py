"""scripts/plugin-docs.py (make lint): every module, filter and action plugin renders with the
real ansible-doc, all three of DOCUMENTATION, EXAMPLES and RETURN, in the tarball users install
(scripts/build-collection.sh, which ansible-test sanity runs on too)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from _scripts import ROOT, load_script

docs_script = load_script("scripts/plugin-docs.py", "plugin_docs")

MODULES = sorted(p.stem for p in (ROOT / "plugins/modules").glob("*.py"))
ACTIONS = sorted(p.stem for p in (ROOT / "plugins/action").glob("*.py"))


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = subprocess.run([str(ROOT / "scripts/build-collection.sh"),
                          str(tmp_path_factory.mktemp("build"))],
                         capture_output=True, text=True, check=True).stdout
    return Path(out.strip())


@pytest.fixture(scope="module")
def tree(tarball: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tarball as users get it: installed by ansible-galaxy into a scratch path."""
    dest = tmp_path_factory.mktemp("coll")
    subprocess.run(["ansible-galaxy", "collection", "install", "--no-deps", "--force",
                    "-p", str(dest), str(tarball)], capture_output=True, text=True, check=True)
    return dest / "ansible_collections" / "vllm_fleet" / "serving"


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
    # real files: ansible-test does not read through symlinks; the filters once, as plugins
    assert not any(p.is_symlink() for p in tree.rglob("*"))
    assert not (tree / "filter_plugins").exists()


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


def test_the_tarball_holds_no_link(tarball: Path) -> None:
    with tarfile.open(tarball) as archive:
        members = archive.getmembers()
    assert [m.name for m in members if m.issym() or m.islnk()] == []
    names = {m.name for m in members}
    assert "plugins/filter/kv_plan.py" in names and "plugins/modules/gpu_facts.py" in names
    assert not [n for n in names if n.startswith(("filter_plugins/", "molecule/"))]


def test_the_checkout_links_into_plugins_once() -> None:
    """One home per file: plugins/filter -> ../filter_plugins is the checkout's only link
    into plugins/, and no tracked link points back at the checkout."""
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-s"], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    links = [line.split("\t", 1)[1] for line in tracked if line.startswith("120000")]
    assert [p for p in links if p.startswith("plugins/")] == ["plugins/filter"]
    for link in links:
        target = ((ROOT / link).parent / (ROOT / link).readlink()).resolve()
        assert not ROOT.is_relative_to(target), f"{link} points back at the checkout"
