"""The project's own filters and modules are called by their full names (vllm_fleet.serving.X).

ansible.cfg no longer puts filter_plugins/ or plugins/modules/ on Ansible's plugin paths: a
short name (`| kv_plan`, `model_verify:`) would fail at run time, and in an installed copy of the
collection it would never resolve. This scans every task file, template, playbook and role
variable file and names each short use as file:line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "vllm_fleet.serving."
FILTERS = sorted(p.stem for p in (ROOT / "filter_plugins").glob("*.yml"))
MODULES = sorted(p.stem for p in (ROOT / "plugins/modules").glob("*.py"))
SCANNED = ("roles", "playbooks", "molecule")
SUFFIXES = (".yml", ".yaml", ".j2")

# `| name` not preceded by a collection prefix; map('name') / select('name') / reject('name').
_FILTER_NAMES = "|".join(FILTERS)
_PIPE = re.compile(rf"\|\s*({_FILTER_NAMES})\b(?!\.)")
_TEST_ARG = re.compile(rf"""(?:map|select|reject)\(\s*['"]({_FILTER_NAMES})['"]""")
# A task's module key: `  name:` or `- name:` at the start of a line.
_MODULE_NAMES = "|".join(MODULES)
_MODULE = re.compile(rf"^\s*(?:-\s+)?({_MODULE_NAMES}):(?:\s|$)")


def short_uses(text: str, modules: bool = True) -> list[tuple[int, str]]:
    """(line number, name) of each short-name use of a project filter or module in TEXT."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        names = [m[1] for m in _PIPE.finditer(line)] + [m[1] for m in _TEST_ARG.finditer(line)]
        if modules and (m := _MODULE.match(line)):
            names.append(m[1])
        found += [(number, name) for name in names]
    return found


def _files() -> list[Path]:
    return sorted(p for top in SCANNED for p in (ROOT / top).rglob("*")
                  if p.is_file() and p.suffix in SUFFIXES)


def test_the_lists_are_the_projects_plugins() -> None:
    assert {"kv_plan", "role_default", "host_firewall_networks", "nvidia_driver_plan"} <= set(
        FILTERS)
    assert {"model_verify", "gpu_facts", "managed_file"} <= set(MODULES)


@pytest.mark.parametrize("text, expected", [
    ("x: \"{{ cfg | kv_plan(gpu='H200') }}\"", [(1, "kv_plan")]),
    ("x: \"{{ cfg |role_default }}\"", [(1, "role_default")]),
    ("x: \"{{ rows | map('bench_judge') }}\"", [(1, "bench_judge")]),
    ("- name: Verify\n  model_verify:\n    path: /x", [(2, "model_verify")]),
    ("x: \"{{ cfg | vllm_fleet.serving.kv_plan }}\"", []),
    ("- vllm_fleet.serving.model_verify:\n    path: /x", []),
    ("# {{ cfg | kv_plan }} in a comment", []),
    ("x: \"{{ cfg | kv_plan_table }}\"", [(1, "kv_plan_table")]),
])
def test_the_scan_finds_short_names_and_passes_full_ones(
        text: str, expected: list[tuple[int, str]]) -> None:
    assert short_uses(text) == expected


def test_every_project_filter_and_module_call_is_fully_qualified() -> None:
    files = _files()
    assert len(files) > 50, "the scan found too few files: did the layout move?"
    found = []
    for path in files:
        # Module keys only in task lists: defaults/vars/meta hold variables, not tasks.
        modules = path.suffix != ".j2" and not {"defaults", "vars", "meta"} & set(path.parts)
        for number, name in short_uses(path.read_text(), modules):
            found.append(f"{path.relative_to(ROOT)}:{number}: {name} -> {PREFIX}{name}")
    assert not found, "short names of the project's own plugins:\n" + "\n".join(found)
