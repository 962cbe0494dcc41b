#!/usr/bin/python
"""Ansible module deploy_manifest: the sha256, mode and owner of every deployed file.

``build_manifest`` (plain typed Python, usable without Ansible) walks the paths (shell
globs), skipping excluded names, and returns one entry per file or symlink; ``main`` is the
thin adapter. playbooks/rebuild.yml takes one before and one after a rebuild and compares
them with the ``manifest_diff`` filter.
"""

from __future__ import annotations

import fnmatch
import glob
import grp
import hashlib
import os
import pwd
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

DOCUMENTATION = r"""
module: deploy_manifest
short_description: The sha256, mode and owner of every file under the given paths
description:
  - Expands each of O(paths) as a shell glob on the host; a directory is walked (symlinks
    are recorded with their target, never followed). Any path component matching one of
    O(exclude) (fnmatch patterns, e.g. C(__pycache__), C(*.pyc)) is left out.
  - Reads only; never changes the host (check mode runs it too).
options:
  paths:
    type: list
    elements: str
    required: true
  exclude:
    type: list
    elements: str
    default: []
"""

RETURN = r"""
manifest:
  description: Path -> "sha256:HEX MODE OWNER:GROUP" (files), "symlink:TARGET" (links).
  type: dict
  returned: always
roots:
  description: The existing paths the globs matched (what a wipe removes).
  type: list
  returned: always
files:
  description: Number of entries; bytes, their total size.
  type: int
  returned: always
"""


def _owner(st: os.stat_result) -> str:
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group}"


def _excluded(path: Path, exclude: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(part, pat) for part in path.parts for pat in exclude)


def _walk(root: Path, exclude: Sequence[str]) -> Iterator[Path]:
    if root.is_symlink() or not root.is_dir():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not _excluded(Path(d), exclude))
        for name in dirnames:
            if (base / name).is_symlink():
                yield base / name
        for name in sorted(filenames):
            if not _excluded(Path(name), exclude):
                yield base / name


def entry(path: Path) -> tuple[str, int]:
    """One manifest value for PATH and its size in bytes."""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return f"symlink:{os.readlink(path)}", 0
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()} {stat.S_IMODE(st.st_mode):04o} {_owner(st)}", st.st_size


def build_manifest(
    patterns: Sequence[str], exclude: Sequence[str] = ()
) -> tuple[dict[str, str], list[str], int]:
    """(manifest, matched roots, total bytes) for the glob PATTERNS."""
    roots = sorted({p for pat in patterns for p in glob.glob(pat)})
    manifest: dict[str, str] = {}
    total = 0
    for root in roots:
        for path in _walk(Path(root), exclude):
            if _excluded(path.relative_to(root), exclude):
                continue
            manifest[str(path)], size = entry(path)
            total += size
    return manifest, roots, total


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "str", "required": True},
            "exclude": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        manifest, roots, total = build_manifest(module.params["paths"], module.params["exclude"])
    except OSError as exc:
        module.fail_json(msg=f"deploy_manifest: cannot read {exc.filename}: {exc.strerror}")
    module.exit_json(changed=False, manifest=manifest, roots=roots, files=len(manifest),
                     bytes=total)


if __name__ == "__main__":
    main()
