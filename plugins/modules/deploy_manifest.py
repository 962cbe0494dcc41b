#!/usr/bin/python
"""Ansible module deploy_manifest: the sha256, mode and owner of every deployed file.

``build_manifest`` (plain typed Python, usable without Ansible) walks the paths (shell
globs), skipping excluded names, and returns one entry per file or symlink; ``main`` is the
thin adapter. playbooks/rebuild.yml takes one before and one after a rebuild and compares
them with the ``manifest_diff`` filter.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: deploy_manifest
short_description: The sha256, mode and owner of every file under the given paths
description:
  - Expands each of O(paths) as a shell glob on the host; a directory is walked (symlinks
    are recorded with their target, never followed). Any path component matching one of
    O(exclude) (fnmatch patterns, e.g. C(__pycache__), C(*.pyc)) is left out.
  - C(playbooks/rebuild.yml) takes one manifest before and one after a rebuild and compares
    them with the C(manifest_diff) filter.
author:
  - vllm-fleet maintainers (@vllm-fleet)
attributes:
  check_mode:
    support: full
    description: Reads only; never changes the host, so check mode runs it too.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to diff.
options:
  paths:
    description: Shell globs of the files and directories to record.
    type: list
    elements: str
    required: true
  exclude:
    description: fnmatch patterns; a path with any component matching one is left out.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Record what the roles deployed
  vllm_fleet.serving.deploy_manifest:
    paths:
      - /srv/vllm
      - /etc/systemd/system/vllm*.service
    exclude:
      - __pycache__
      - "*.pyc"
  register: _manifest

- name: Refuse a host that was never deployed
  ansible.builtin.assert:
    that: _manifest.files > 0
"""

RETURN = r"""
manifest:
  description: >-
    Path -> C(sha256:HEX MODE OWNER:GROUP) for a file, C(symlink:TARGET) for a link.
  type: dict
  returned: always
  sample: {"/srv/vllm/run.sh": "sha256:9f86d0... 0755 root:root"}
roots:
  description: The existing paths the globs matched (what a wipe removes).
  type: list
  elements: str
  returned: always
  sample: ["/srv/vllm"]
files:
  description: The number of entries in RV(manifest).
  type: int
  returned: always
  sample: 42
bytes:
  description: The total size of the files in RV(manifest), in bytes (links count 0).
  type: int
  returned: always
  sample: 1048576
"""

import fnmatch
import glob
import grp
import os
import pwd
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from ansible_collections.vllm_fleet.serving.plugins.module_utils.hashing import sha256_file


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
    return f"sha256:{sha256_file(path)} {stat.S_IMODE(st.st_mode):04o} {_owner(st)}", st.st_size


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
