"""Release hygiene: the collection's declared dependencies are the ones its roles and playbooks
use, requirements.yml says the same as galaxy.yml, the `ansible` bundle the project pins
satisfies them, and the EE requirements a site inherits are ranges without Ansible itself."""

from __future__ import annotations

import importlib.metadata
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _scripts import load_script
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
ee = load_script("scripts/ee.py", "ee_script")
# What a user runs: the roles and the playbooks (both ship in the collection). molecule/ and
# bench/ are the tests' own (requirements-dev.yml).
SCANNED = ("roles", "playbooks")
OWN = {"ansible.builtin", "ansible.legacy", "vllm_fleet.serving"}
_FQCN = r"([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*"
_KEY = re.compile(rf"^{_FQCN}$")
# A filter (`| ns.coll.f`), a test (`is ns.coll.t`), a lookup or a map/select argument.
_IN_TEXT = re.compile(
    rf"""(?:\|\s*|\bis\s+(?:not\s+)?|(?:lookup|query|map|select|reject)\(\s*['"]){_FQCN}\b""")


def _galaxy() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    return data


def _requirements(name: str) -> dict[str, str]:
    data = yaml.safe_load((ROOT / name).read_text())
    return {c["name"]: c["version"] for c in data["collections"]}


def _walk(node: object) -> Iterator[tuple[str, str]]:
    """("key", k) for every mapping key and ("text", s) for every string, anywhere in node."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str):
                yield "key", key
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)
    elif isinstance(node, str):
        yield "text", node


def collections_used(text: str, yaml_file: bool = True) -> set[str]:
    """The collections (namespace.name) whose content TEXT calls by its full name."""
    found = {f"{m[1]}.{m[2]}" for m in _IN_TEXT.finditer(text)}
    if yaml_file:
        for kind, value in _walk(yaml.safe_load(text)):
            if kind == "key" and (m := _KEY.match(value)):
                found.add(f"{m[1]}.{m[2]}")
    return found


def _used_by_file() -> dict[str, set[str]]:
    used: dict[str, set[str]] = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or path.suffix not in (".yml", ".yaml", ".j2"):
                continue
            names = collections_used(path.read_text(), yaml_file=path.suffix != ".j2") - OWN
            if names:
                used[str(path.relative_to(ROOT))] = names
    return used


@pytest.mark.parametrize("text, expected", [
    ("- name: Lock\n  community.general.dnf_versionlock:\n    name: x\n", {"community.general"}),
    ("x: \"{{ a | community.general.json_query('b') }}\"\n", {"community.general"}),
    ("x: \"{{ a is not ansible.utils.ipv4 }}\"\n", {"ansible.utils"}),
    ("x: \"{{ lookup('community.hashi_vault.vault_kv2_get', 'p') }}\"\n",
     {"community.hashi_vault"}),
    ("- ansible.builtin.debug:\n    msg: see docs.example.com\n", {"ansible.builtin"}),
    ("host: gpu-1.example.test\nip: 10.0.0.1\n", set()),
])
def test_collections_used_reads_modules_filters_tests_lookups(text: str,
                                                              expected: set[str]) -> None:
    assert collections_used(text) == expected


def test_requirements_yml_is_galaxy_yml_dependencies() -> None:
    declared = _galaxy()["dependencies"]
    assert declared, "galaxy.yml declares no dependencies"
    assert _requirements("requirements.yml") == declared, (
        "requirements.yml and galaxy.yml's dependencies differ. Fix: the same names and ranges "
        "in both")


def test_every_collection_a_role_or_playbook_uses_is_declared() -> None:
    used = _used_by_file()
    # The scan sees the known uses (a scan that finds nothing proves nothing).
    assert "community.general" in used["roles/nvidia_driver/tasks/install.yml"]
    assert "containers.podman" in used["playbooks/local_target.yml"]
    declared = set(_galaxy()["dependencies"])
    undeclared = {f: sorted(n - declared) for f, n in used.items() if n - declared}
    assert not undeclared, (f"collections used but not in galaxy.yml's dependencies: "
                            f"{undeclared}. Fix: declare them there and in requirements.yml")
    unused = declared - set().union(*used.values())
    assert not unused, f"galaxy.yml declares {sorted(unused)}, which no role or playbook uses"


def test_dev_collections_are_not_dependencies() -> None:
    dev = _requirements("requirements-dev.yml")
    assert not set(dev) & set(_galaxy()["dependencies"])
    assert "requirements-dev.yml" in _galaxy()["build_ignore"]


@pytest.mark.parametrize("requirements", ["requirements.yml", "requirements-dev.yml"])
def test_ranges_hold_the_pinned_ansible_bundles_versions(requirements: str) -> None:
    """Each range is bounded both ways and holds the version the pinned `ansible` bundle
    (requirements.txt, installed here) ships, so the bundle satisfies the collection."""
    bundle = ee.pins(ROOT / "requirements.txt")["ansible"]
    try:
        installed = importlib.metadata.version("ansible")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the `ansible` bundle is not installed here")
    if installed != bundle:
        pytest.skip(f"ansible {installed} installed here, requirements.txt pins {bundle}")
    base = Path(str(importlib.metadata.distribution("ansible").locate_file("ansible_collections")))
    for name, spec in _requirements(requirements).items():
        specifier = SpecifierSet(spec)
        assert {s.operator for s in specifier} == {">=", "<"}, f"{name}: {spec} is not a range"
        manifest = base.joinpath(*name.split("."), "MANIFEST.json")
        version = json.loads(manifest.read_text())["collection_info"]["version"]
        assert Version(version) in specifier, f"{name} {version} (ansible {bundle}) not in {spec}"


def test_collection_ee_requirements_are_ranges_the_freeze_satisfies() -> None:
    """meta/ee-requirements.txt (what a site EE inherits): no ansible/ansible-core (the site's
    EE picks those), every line a range, and requirements.txt's pins (this project's own EE
    and control node) inside each range."""
    meta = yaml.safe_load((ROOT / "meta/execution-environment.yml").read_text())
    assert meta["dependencies"]["python"] == "meta/ee-requirements.txt"
    freeze = ee.pins(ROOT / "requirements.txt")
    lines = [line.split("#", 1)[0].strip()
             for line in (ROOT / "meta/ee-requirements.txt").read_text().splitlines()]
    reqs = [Requirement(line) for line in lines if line]
    names = {re.sub(r"[-_.]+", "-", r.name).lower() for r in reqs}
    assert {"huggingface-hub", "matplotlib", "packaging"} <= names
    assert not names & {"ansible", "ansible-core"}
    for req in reqs:
        key = re.sub(r"[-_.]+", "-", req.name).lower()
        assert req.specifier and all(s.operator != "==" for s in req.specifier), \
            f"{req}: a pin, not a range"
        assert key in freeze, f"{req.name}: not in requirements.txt"
        assert Version(freeze[key]) in req.specifier, \
            f"requirements.txt pins {key}=={freeze[key]}, outside {req}"
