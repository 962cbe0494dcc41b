#!/usr/bin/env python3
"""Build a collection tree of this checkout for ansible-test sanity and ansible-doc.

    scripts/collection-tree.py DEST    # prints DEST/ansible_collections/<namespace>/<name>

ansible-test wants the collection at ansible_collections/<namespace>/<name>/ (galaxy.yml
names them) with its plugins as files under plugins/: it does not walk into a symlinked
folder. The tree holds every file git lists in the checkout (tracked, and untracked ones it
does not ignore), so uncommitted work is checked too. Symlinks are replaced by what they
point at, except a link back into a folder that holds it (the checkout's own
.collections/ansible_collections/<namespace>/<name> link), which is left out. A checkout
folder that a plugins/<kind> link points at (plugins/modules -> ../library) is copied once,
under plugins/<kind>.

A checkout without a plugins/ folder (the layout before the collection work) gets one, of
copies (ansible-test skips symlinked files too):

    plugins/modules/X.py <- library/X.py,  plugins/action/X.py <- action_plugins/X.py,
    plugins/filter/X.py  <- filter_plugins/X.py (and X.yml, the filters' documentation),
    plugins/filter/X.py  <- roles/R/filter_plugins/X.py (role-embedded filters)

DEST's ansible_collections/ folder is replaced, so a second run gives the same tree.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

# checkout folder (glob), file pattern, plugins/ subfolder: only where the checkout has no plugins/.
PLUGIN_MAP = (
    ("library", "*.py", "modules"),
    ("action_plugins", "*.py", "action"),
    ("filter_plugins", "*.py", "filter"),
    ("filter_plugins", "*.yml", "filter"),
    ("roles/*/filter_plugins", "*.py", "filter"),
)


def collection_name(root: Path) -> tuple[str, str]:
    """(namespace, name) from root/galaxy.yml."""
    galaxy = yaml.safe_load((root / "galaxy.yml").read_text())
    return str(galaxy["namespace"]), str(galaxy["name"])


def listed_files(root: Path) -> list[str]:
    """Every path git lists under ROOT: tracked, and untracked but not ignored."""
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True).stdout
    return sorted({name for name in out.decode().split("\0") if name})


def loops(source: Path) -> bool:
    """True for a symlink to a folder that holds it (copying it would never end)."""
    if not source.is_symlink():
        return False
    target = source.resolve()
    return target.is_dir() and source.absolute().is_relative_to(target)


def copy_entry(source: Path, target: Path) -> None:
    """Copy SOURCE (a file, or a symlink to a file or folder) to TARGET, dereferenced."""
    if loops(source) or not source.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, symlinks=False, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        shutil.copy2(source, target)


def linked_plugin_dirs(root: Path) -> dict[str, str]:
    """Checkout folder -> plugins/<kind> for each plugins/<kind> symlink to a folder of ROOT."""
    found: dict[str, str] = {}
    plugins = root / "plugins"
    for entry in sorted(plugins.iterdir()) if plugins.is_dir() else []:
        if entry.is_symlink() and entry.resolve().is_dir():
            target = entry.resolve()
            if target.is_relative_to(root) and target != root:
                found[str(target.relative_to(root))] = f"plugins/{entry.name}"
    return found


def build(root: Path, dest: Path) -> Path:
    """Build the tree of ROOT under DEST; return the collection's folder."""
    namespace, name = collection_name(root)
    shutil.rmtree(dest / "ansible_collections", ignore_errors=True)
    tree = dest / "ansible_collections" / namespace / name
    tree.mkdir(parents=True)
    files = listed_files(root)
    moved = linked_plugin_dirs(root)
    for relative in files:
        top = next((d for d in moved if relative == d or relative.startswith(d + "/")), None)
        if top is None:
            copy_entry(root / relative, tree / relative)
    for folder, kind in moved.items():
        copy_entry(root / folder, tree / kind)
    if not (root / "plugins").exists():
        for folder, pattern, kind in PLUGIN_MAP:
            for source in sorted(root.glob(f"{folder}/{pattern}")):
                if str(source.relative_to(root)) in files:
                    copy_entry(source, tree / "plugins" / kind / source.name)
    return tree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path,
                        help="scratch folder (its ansible_collections/ is replaced)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this one)")
    args = parser.parse_args(argv)
    print(build(args.root.resolve(), args.dest.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
