#!/usr/bin/env python3
"""Check that every module, filter and action plugin of a collection renders with ansible-doc.

    scripts/plugin-docs.py COLLECTION_ROOT    # .../ansible_collections/<namespace>/<name>

COLLECTION_ROOT is the collection's folder, the way Ansible finds it (its grandparent is an
ansible_collections folder): the checkout's editable install (scripts/editable.sh), or the
installed tarball (scripts/build-collection.sh, then ansible-galaxy collection install).
ansible-doc lists the collection's modules and filters (a filter file that fails to load
is reported, not skipped) and renders each as JSON; each must have DOCUMENTATION, EXAMPLES and
RETURN, all non-empty. An action plugin is documented by the module of its name
(plugins/modules/<name>.py). Exit 1 names each plugin that fails and what it lacks; exit 0
prints how many were checked.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

# ansible-doc -t TYPE: the plugin types checked (action plugins through their module docs).
TYPES = ("module", "filter")
# The keys of ansible-doc's JSON for a plugin, and the names the failure reports.
SECTIONS = (("doc", "DOCUMENTATION"), ("examples", "EXAMPLES"), ("return", "RETURN"))


class CheckError(Exception):
    """A collection root this check cannot use."""


def collection_fqcn(root: Path) -> str:
    """<namespace>.<name> of the collection at ROOT, from its galaxy.yml and its path."""
    if root.parent.parent.name != "ansible_collections":
        raise CheckError(f"{root}: not a collection path (.../ansible_collections/<namespace>/"
                         "<name>). Fix: pass the checkout's .collections/ansible_collections/"
                         "<namespace>/<name> (make dev), or an installed tarball")
    galaxy, manifest = root / "galaxy.yml", root / "MANIFEST.json"  # a checkout; an install
    if galaxy.is_file():
        data = yaml.safe_load(galaxy.read_text())
    elif manifest.is_file():
        data = json.loads(manifest.read_text())["collection_info"]
    else:
        raise CheckError(f"{root}: neither galaxy.yml nor MANIFEST.json")
    fqcn = f"{data['namespace']}.{data['name']}"
    if fqcn != f"{root.parent.name}.{root.name}":
        raise CheckError(f"{root}: galaxy.yml names {fqcn}, the path "
                         f"{root.parent.name}.{root.name}")
    return fqcn


def ansible_doc(root: Path, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run ansible-doc ARGS with ROOT's collection (and nothing else of a project) in view."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(root.parent.parent.parent),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_NOCOLOR="1")
    with tempfile.TemporaryDirectory() as cwd:  # no ansible.cfg of a project in the way
        return subprocess.run(["ansible-doc", *args], capture_output=True, text=True, env=env,
                              cwd=cwd, check=False)


def missing_sections(entry: Mapping[str, Any] | None) -> list[str]:
    """The sections (DOCUMENTATION, EXAMPLES, RETURN) ENTRY lacks or has empty."""
    entry = entry or {}
    return [name for key, name in SECTIONS
            if not entry.get(key) or (isinstance(entry[key], str) and not entry[key].strip())]


def render(root: Path, plugin_type: str, names: Sequence[str]) -> tuple[dict[str, Any], str]:
    """(name -> ansible-doc's JSON, its stderr) for the plugins NAMES of PLUGIN_TYPE."""
    shown = ansible_doc(root, ["-t", plugin_type, "--json", *names])
    try:
        docs = json.loads(shown.stdout or "{}")
    except json.JSONDecodeError:
        docs = {}
    return (docs if isinstance(docs, dict) else {}), shown.stderr.strip()


def check_type(root: Path, fqcn: str, plugin_type: str) -> tuple[list[str], list[str]]:
    """(problems, checked names) for the plugins of PLUGIN_TYPE in the collection."""
    listed = ansible_doc(root, ["-t", plugin_type, "-l", "--json", fqcn])
    problems = [f"{plugin_type}: ansible-doc -l: {line.strip()}"
                for line in listed.stderr.splitlines() if line.strip()]
    if listed.returncode != 0:
        return problems or [f"{plugin_type}: ansible-doc -l failed ({listed.returncode})"], []
    names = sorted(json.loads(listed.stdout or "{}"))
    if not names:
        return problems, []
    docs, _render_problems = render(root, plugin_type, names)
    for name in names:
        lacks = missing_sections(docs.get(name))
        if lacks:
            if name not in docs:  # one plugin's error stops ansible-doc: ask for it alone
                alone, errors = render(root, plugin_type, [name])
                lacks = missing_sections(alone.get(name))
                if lacks and errors:
                    lacks.append(f"[ansible-doc: {' '.join(errors.split())}]")
            if lacks:
                problems.append(f"{name} ({plugin_type}): no {', '.join(lacks)}")
    return problems, names


def check(root: Path) -> tuple[list[str], int]:
    """(problems, plugins checked) for the collection at ROOT."""
    fqcn = collection_fqcn(root)
    problems: list[str] = []
    checked = 0
    modules: list[str] = []
    for plugin_type in TYPES:
        found, names = check_type(root, fqcn, plugin_type)
        problems += found
        checked += len(names)
        if plugin_type == "module":
            modules = names
    for action in sorted((root / "plugins" / "action").glob("*.py")):
        name = f"{fqcn}.{action.stem}"
        if action.stem != "__init__" and name not in modules:
            problems.append(f"{name} (action): no module file plugins/modules/{action.name} "
                            "with its DOCUMENTATION, EXAMPLES and RETURN")
    return problems, checked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help=".../ansible_collections/<namespace>/<name>")
    args = parser.parse_args(argv)
    root = Path(os.path.abspath(args.root))  # keep the path's own names (it may be a link)
    try:
        problems, checked = check(root)
    except CheckError as exc:
        print(f"plugin-docs: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"plugin-docs: {problem}", file=sys.stderr)
    if problems:
        print(f"plugin-docs: {len(problems)} problem(s). Fix: give each plugin named above "
              "DOCUMENTATION, EXAMPLES and RETURN (a filter: filter_plugins/<filter>.yml; an "
              "action: plugins/modules/<action>.py)", file=sys.stderr)
        return 1
    print(f"plugin-docs: {checked} modules and filters render with ansible-doc")
    return 0


if __name__ == "__main__":
    sys.exit(main())
