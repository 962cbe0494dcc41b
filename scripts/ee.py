#!/usr/bin/env python3
"""The execution environment's build context: make it with ansible-builder and check it.

    scripts/ee.py collection            # build/ee/vllm_fleet-serving.tar.gz from this checkout
    scripts/ee.py check [--context DIR]  # the tarball, `ansible-builder create`, the checks
                                          # (make ee-check; DIR default: a scratch folder)

`check` fails (exit 1, one line per problem) unless the context holds the Containerfile, a
copy of requirements.txt and bindep.txt byte for byte, the galaxy requirements naming the
collection tarball, the tarball itself (galaxy.yml's namespace, name and version, with
meta/execution-environment.yml and the files it names), and a Containerfile whose base image,
Python, package manager, galaxy options (--no-deps: the collection's dependencies come from the
pinned `ansible` bundle of requirements.txt, not from Galaxy) and ansible-core/ansible-runner
pins are execution-environment.yml's, with the ansible-core pin the one requirements.txt has.

The collection is built from a copy of the checkout's files (git's tracked and untracked,
not ignored) without dangling symbolic links (the sysfs fixtures under tests/data have some:
ansible-galaxy refuses to build next to them); galaxy.yml's build_ignore applies as usual.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
EE_FILE = ROOT / "execution-environment.yml"
TARBALL = "vllm_fleet-serving.tar.gz"
# What the collection must carry for an EE built from it: its EE metadata, the files that
# metadata names, and the playbook the image is checked with.
COLLECTION_MEMBERS = (
    "MANIFEST.json",
    "meta/execution-environment.yml",
    "meta/runtime.yml",
    "meta/ee-requirements.txt",
    "bindep.txt",
    "playbooks/plan.yml",
)


def _tool(name: str) -> str:
    """The tool beside this Python (the project's .venv), else the one on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


def pins(path: Path) -> dict[str, str]:
    """`name==version` lines of a requirements file, by normalised name (PEP 503)."""
    found: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
        if not match:
            raise ValueError(f"{path}: '{line}' is not pinned as NAME==VERSION")
        found[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return found


def build_collection(root: Path, output: Path) -> Path:
    """Build the collection users install (scripts/build-collection.sh) as output/TARBALL."""
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ee-collection.") as tmp:
        built = subprocess.run(
            [str(root / "scripts/build-collection.sh"), tmp],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        target = output / TARBALL
        shutil.move(built, target)
    return target


def create_context(ee_file: Path, context: Path) -> None:
    """`ansible-builder create` of ee_file into context (podman's Containerfile)."""
    subprocess.run(
        [_tool("ansible-builder"), "create", "-f", str(ee_file), "-c", str(context),
         "--output-filename", "Containerfile", "-v", "1"],
        check=True,
        capture_output=True,
    )


def _arg(containerfile: str, name: str) -> str | None:
    match = re.search(rf'^ARG {name}="(.*)"$', containerfile, re.MULTILINE)
    return match.group(1) if match else None


def check_context(ee_file: Path, context: Path) -> list[str]:
    """Every way context differs from what ee_file (and the files it names) asks for."""
    ee: Mapping[str, Any] = yaml.safe_load(ee_file.read_text())
    base = ee_file.parent
    deps = ee.get("dependencies", {})
    problems: list[str] = []

    containerfile_path = context / "Containerfile"
    if not containerfile_path.is_file():
        return [f"{containerfile_path}: missing (ansible-builder create did not write it)"]
    containerfile = containerfile_path.read_text()

    for key, name in (("python", "requirements.txt"), ("system", "bindep.txt")):
        wanted = base / str(deps.get(key, ""))
        copied = context / "_build" / name
        if not deps.get(key):
            problems.append(f"{ee_file.name}: dependencies.{key} is not set (want {name})")
        elif not copied.is_file():
            problems.append(f"{copied}: missing (dependencies.{key}: {deps[key]})")
        elif copied.read_bytes() != wanted.read_bytes():
            problems.append(f"{copied}: differs from {wanted}")

    expected_args = {
        "EE_BASE_IMAGE": ee.get("images", {}).get("base_image", {}).get("name"),
        "PYCMD": deps.get("python_interpreter", {}).get("python_path"),
        "PKGMGR": ee.get("options", {}).get("package_manager_path"),
        "ANSIBLE_GALAXY_CLI_COLLECTION_OPTS":
            ee.get("build_arg_defaults", {}).get("ANSIBLE_GALAXY_CLI_COLLECTION_OPTS"),
    }
    for arg, want in expected_args.items():
        got = _arg(containerfile, arg)
        if not want:
            problems.append(f"{ee_file.name}: no value configured for the Containerfile's {arg}")
        elif got != want:
            problems.append(f"Containerfile: ARG {arg} is {got!r}, {ee_file.name} says {want!r}")

    refs = (_arg(containerfile, "ANSIBLE_INSTALL_REFS") or "").split()
    for key in ("ansible_core", "ansible_runner"):
        want = deps.get(key, {}).get("package_pip", "")
        if not re.fullmatch(r"[\w.-]+==[\w.]+", want):
            problems.append(f"{ee_file.name}: dependencies.{key}.package_pip '{want}' is not "
                            "pinned as NAME==VERSION")
        elif want not in refs:
            problems.append(f"Containerfile: ANSIBLE_INSTALL_REFS {refs} lacks {want}")
    core = deps.get("ansible_core", {}).get("package_pip", "")
    requirements = base / str(deps.get("python", "requirements.txt"))
    if requirements.is_file() and "==" in core:
        req_core = pins(requirements).get("ansible-core")
        if req_core != core.split("==", 1)[1]:
            problems.append(f"{ee_file.name}: {core} but {requirements.name} pins "
                            f"ansible-core=={req_core}")

    galaxy_file = context / "_build" / "requirements.yml"
    galaxy = yaml.safe_load(galaxy_file.read_text()) if galaxy_file.is_file() else None
    names = [c.get("name") for c in (galaxy or {}).get("collections", [])]
    wanted_name = f"collection/{TARBALL}"
    if wanted_name not in names:
        problems.append(f"{galaxy_file}: collections {names} do not name {wanted_name}")
    problems += check_tarball(context / "_build" / "collection" / TARBALL, base / "galaxy.yml")
    return problems


def check_tarball(tarball: Path, galaxy_yml: Path) -> list[str]:
    """The collection tarball is galaxy.yml's collection and carries COLLECTION_MEMBERS."""
    if not tarball.is_file():
        return [f"{tarball}: missing (additional_build_files did not copy the collection)"]
    with tarfile.open(tarball) as tar:
        members = set(tar.getnames())
        problems = [f"{tarball.name}: lacks {m}" for m in COLLECTION_MEMBERS if m not in members]
        if "meta/execution-environment.yml" in members:
            handle = tar.extractfile("meta/execution-environment.yml")
            assert handle is not None
            named = (yaml.safe_load(handle) or {}).get("dependencies", {})
            problems += [f"{tarball.name}: lacks {f}, which its meta/execution-environment.yml "
                         f"names (dependencies.{key})"
                         for key, f in named.items() if f not in members]
        if "MANIFEST.json" in members:
            handle = tar.extractfile("MANIFEST.json")
            assert handle is not None
            info = json.load(handle)["collection_info"]
            galaxy = yaml.safe_load(galaxy_yml.read_text())
            for key in ("namespace", "name", "version"):
                if info.get(key) != galaxy.get(key):
                    problems.append(f"{tarball.name}: {key} {info.get(key)!r}, galaxy.yml "
                                    f"says {galaxy.get(key)!r}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    col = sub.add_parser("collection", help="build build/ee/" + TARBALL)
    col.add_argument("--output", type=Path, default=ROOT / "build" / "ee")
    chk = sub.add_parser("check", help="ansible-builder create, then check the context")
    chk.add_argument("--context", type=Path, help="where to create it (default: scratch)")
    chk.add_argument("--ee-file", type=Path, default=EE_FILE)
    args = parser.parse_args(argv)

    try:
        if args.command == "collection":
            print(build_collection(ROOT, args.output))
            return 0
        build_collection(ROOT, args.ee_file.parent / "build" / "ee")
        with tempfile.TemporaryDirectory(prefix="ee-context.") as scratch:
            context = args.context or Path(scratch) / "context"
            if context.exists():
                shutil.rmtree(context)
            create_context(args.ee_file, context)
            problems = check_context(args.ee_file, context)
            for problem in problems:
                print(f"ee-check: {problem}", file=sys.stderr)
            if problems:
                return 1
            ee = yaml.safe_load(args.ee_file.read_text())
            deps = ee["dependencies"]
            print(f"ee-check: {context} is {args.ee_file.name}'s build context: base "
                  f"{ee['images']['base_image']['name']}, Python "
                  f"{deps['python_interpreter']['python_path']}, "
                  f"{deps['ansible_core']['package_pip']}, "
                  f"{deps['ansible_runner']['package_pip']}, requirements.txt, bindep.txt, "
                  f"collection/{TARBALL}")
            return 0
    except subprocess.CalledProcessError as err:
        output = (err.stderr or b"").decode(errors="replace").strip()
        print(f"ee-check: {' '.join(map(str, err.cmd))} failed ({err.returncode}):\n{output}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
