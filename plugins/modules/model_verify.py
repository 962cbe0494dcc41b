#!/usr/bin/python
"""Ansible module model_verify: check model files against a lock, stage, and switch atomically.

Plain typed functions hold the logic (``verify_dir``, ``preflight``, ``promote``,
``sha256_file``, ``hash_many``); ``main`` is the thin Ansible adapter. Actions:

* ``verify``: every locked file's size and sha256. A stamp file keeps (size, mtime_ns,
  inode, sha256) per verified file, so an unchanged file costs one stat() and nothing is
  re-hashed; ``full`` re-hashes everything. Files whose bytes do not match are removed
  (``remove_bad``) so they can never be promoted, and files not in the lock are removed
  (``prune``). Hashing runs in a process pool, up to the host's cores.
* ``preflight``: free space on the model filesystem >= locked bytes not yet present + margin.
* ``stage``: fill a staging directory from a pre-staged directory: each file is copied
  (a reflink where the filesystem shares blocks copy-on-write, else a plain copy), never
  hard-linked, so editing the pre-staged file cannot change the live model.
* ``repair``: rename each re-staged, verified file of a staging directory over the damaged
  one in ``<root>/<commit>`` (atomic per file).
* ``promote``: rename a verified staging directory to ``<root>/<commit>`` and switch the
  ``current`` symlink by renaming a temporary symlink over it; keep ``keep`` revisions;
  return the text of ``read`` (e.g. ``config.json``) in the live revision.

``verify`` with ``absent_ok`` reports ``exists: false`` for a missing directory instead of
failing, so one call both finds and checks an installed revision; with ``damage_ok`` it
reports the damaged files (``damaged``: path and why) instead of failing, for the role to
repair them. A locked file with more than one name (a hard link an older release made from
the pre-staged directory) counts as damaged: another name could change the live bytes.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: model_verify
short_description: Verify model files against a sha256 lock, stage them and switch atomically
description:
  - O(action=verify) checks every locked file's size and sha256 in O(path). A stamp file
    (O(stamp_file)) keeps size, mtime, inode and sha256 per verified file, so an unchanged
    file costs one C(stat) and is not hashed again; O(full) hashes everything. Files whose
    bytes do not match are removed with O(remove_bad), files not in the lock with O(prune).
  - O(action=preflight) checks that the model filesystem has the locked bytes not yet
    present plus O(margin_bytes) free.
  - O(action=stage) fills the staging directory O(path) from the pre-staged O(source); each
    file is copied (a reflink where the filesystem can), never hard-linked.
  - O(action=repair) renames each re-staged, verified file of O(path) over the damaged one in
    O(root)/O(commit), atomically per file.
  - O(action=promote) renames the verified staging directory O(path) to O(root)/O(commit)
    and switches the C(current) symlink atomically; keeps O(keep) revisions.
author:
  - vllm-fleet maintainers (@vllm-fleet)
attributes:
  check_mode:
    support: full
    description: Verifies and reports; removes, copies, renames and writes nothing.
  diff_mode:
    support: none
    description: The files are model weights; there is no diff to show.
options:
  action:
    description: What to do (see the description).
    type: str
    choices: [verify, preflight, stage, promote, repair]
    required: true
  path:
    description: The directory to verify, stage into or promote (a staging directory).
    type: path
    required: true
  files:
    description: The lock's files, each with C(path), C(size) and C(sha256).
    type: list
    elements: dict
    default: []
  stamp_file:
    description: For verify, the stamp file that lets unchanged files skip hashing.
    type: path
  full:
    description: For verify, hash every file, ignoring the stamp.
    type: bool
    default: false
  jobs:
    description: Hashing processes; 0 means the host's cores.
    type: int
    default: 0
  remove_bad:
    description: For verify, remove files whose bytes do not match the lock.
    type: bool
    default: false
  prune:
    description: For verify, remove files the lock does not list.
    type: bool
    default: false
  source:
    description: For stage, the pre-staged directory.
    type: path
  margin_bytes:
    description: For preflight, the free bytes to keep beyond the missing files.
    type: int
    default: 0
  present_dirs:
    description: For preflight, directories whose files already count as present.
    type: list
    elements: path
    default: []
  root:
    description: For promote and repair, the model root holding C(<commit>) directories and
      C(current).
    type: path
  commit:
    description: For promote and repair, the locked commit (the revision's directory name).
    type: str
  keep:
    description: For promote, how many revisions to keep under O(root).
    type: int
    default: 2
  absent_ok:
    description: For verify, report RV(exists=false) for a missing directory instead of
      failing.
    type: bool
    default: false
  read:
    description: For promote, a file in the live revision whose text to return (RV(read)).
    type: str
  damage_ok:
    description: For verify, report damaged files (RV(damaged)) instead of failing.
    type: bool
    default: false
  repair_paths:
    description: For repair, the locked paths to rename from O(path) into O(root)/O(commit).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Check the installed revision (a missing one is no error)
  vllm_fleet.serving.model_verify:
    action: verify
    path: /srv/models/qwen3-8b/0123456789abcdef0123456789abcdef01234567
    files: "{{ _lock.lock.files }}"
    stamp_file: /srv/models/qwen3-8b/.verified.json
    absent_ok: true
    damage_ok: true
  register: _installed

- name: Switch to the verified staging directory
  vllm_fleet.serving.model_verify:
    action: promote
    path: /srv/models/qwen3-8b/.staging
    root: /srv/models/qwen3-8b
    commit: 0123456789abcdef0123456789abcdef01234567
    keep: 2
    read: config.json
"""

RETURN = r"""
exists:
  description: For verify, whether O(path) exists.
  type: bool
  returned: O(action=verify)
  sample: true
checked:
  description: For verify, the number of locked files checked.
  type: int
  returned: O(action=verify) on an existing directory
  sample: 5
stamped:
  description: For verify, files whose stamp let them skip hashing.
  type: int
  returned: O(action=verify) on an existing directory
  sample: 5
hashed_files:
  description: For verify, files hashed.
  type: int
  returned: O(action=verify) on an existing directory
  sample: 0
hashed_bytes:
  description: For verify, bytes hashed.
  type: int
  returned: O(action=verify) on an existing directory
  sample: 0
missing:
  description: For verify, locked paths not in O(path).
  type: list
  elements: str
  returned: O(action=verify) on an existing directory
  sample: []
bad:
  description: For verify, the files whose size or sha256 differs, with why.
  type: list
  elements: str
  returned: O(action=verify) on an existing directory
  sample: []
removed:
  description: For verify, files removed by O(remove_bad).
  type: list
  elements: str
  returned: O(action=verify) on an existing directory
  sample: []
pruned:
  description: For verify, files removed by O(prune); for promote, the revisions removed.
  type: list
  elements: str
  returned: O(action=verify) on an existing directory, O(action=promote)
  sample: []
stamp_changed:
  description: For verify, whether the stamp file was (or would be) rewritten.
  type: bool
  returned: O(action=verify) on an existing directory
  sample: false
damaged:
  description: For verify, the damaged files (path and why).
  type: list
  elements: dict
  returned: O(action=verify) on an existing directory
  sample: [{path: model.safetensors, why: sha256 differs}]
skipped_reason:
  description: In check mode, why a directory that does not exist yet was not verified.
  type: str
  returned: O(action=verify) in check mode, when O(path) does not exist
  sample: /srv/models/qwen3-8b/.staging does not exist yet
free_bytes:
  description: For preflight, the free bytes on the model filesystem.
  type: int
  returned: O(action=preflight)
  sample: 500000000000
needed_bytes:
  description: For preflight, the locked bytes not yet present.
  type: int
  returned: O(action=preflight)
  sample: 16384000000
margin_bytes:
  description: For preflight, the margin asked for.
  type: int
  returned: O(action=preflight)
  sample: 0
added:
  description: For stage, the locked paths copied into O(path).
  type: list
  elements: str
  returned: O(action=stage)
  sample: ["config.json"]
replaced:
  description: For repair, the paths renamed into the live revision.
  type: list
  elements: str
  returned: O(action=repair)
  sample: ["model.safetensors"]
previous:
  description: For promote, the revision C(current) pointed at before, or null.
  type: str
  returned: O(action=promote)
  sample: fedcba9876543210fedcba9876543210fedcba98
read:
  description: For promote with O(read), the text of that file in the live revision.
  type: str
  returned: O(action=promote) with O(read)
  sample: '{"architectures": ["Qwen3ForCausalLM"]}'
"""

import concurrent.futures
import fcntl
import json
import multiprocessing
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.serving.plugins.module_utils.hashing import sha256_file
from ansible_collections.vllm_fleet.serving.plugins.module_utils.model_lock import LockedFile

BUF = 1 << 20
STAMP_VERSION = 1
# ioctl(dest_fd, FICLONE, src_fd): share the source's blocks copy-on-write (btrfs, XFS with
# reflink, bcachefs, ...); other filesystems answer EOPNOTSUPP/EXDEV/EINVAL.
FICLONE = 0x40049409


class VerifyError(Exception):
    """Bad bytes or a bad layout: the message names each path."""


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def hash_many(paths: Sequence[str], jobs: int = 0) -> dict[str, str]:
    """sha256 of each path; in a fork process pool of up to `jobs` (0 = cores) workers."""
    workers = min(jobs or cpu_count(), len(paths))
    if workers <= 1:
        return {p: sha256_file(p) for p in paths}
    ctx = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        # Largest first: the pool stays busy until the end.
        order = sorted(paths, key=lambda p: -os.path.getsize(p))
        digests = list(pool.map(sha256_file, order, chunksize=1))
        # One digest per path (no zip(strict=True): the target may run Python 3.9).
        return dict(zip(order, digests))


def stamp_key(st: os.stat_result) -> list[int]:
    """What must not change for a stamp to vouch for a file's digest.

    ctime cannot be set from user space, so a rewrite that restores size and mtime is
    still caught; renaming the revision directory leaves its files' keys unchanged.
    """
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns]


def load_stamps(stamp_file: Path | None) -> dict[str, dict[str, Any]]:
    if stamp_file is None:
        return {}
    try:
        data = json.loads(stamp_file.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != STAMP_VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def write_if_changed(path: Path, text: str) -> bool:
    """Atomically write TEXT to PATH unless it already holds it; True if written."""
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


@dataclass
class Report:
    checked: int = 0
    stamped: int = 0
    hashed_files: int = 0
    hashed_bytes: int = 0
    missing: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    stamp_changed: bool = False

    @property
    def ok(self) -> bool:
        return not self.missing and not self.bad

    @property
    def damaged(self) -> list[dict[str, str]]:
        """Each missing or bad file: its locked path and why."""
        out = [{"path": m, "why": "missing"} for m in self.missing]
        for entry in self.bad:
            path, why = entry.split(": ", 1)
            out.append({"path": path, "why": why})
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "stamped": self.stamped,
            "hashed_files": self.hashed_files,
            "hashed_bytes": self.hashed_bytes,
            "missing": self.missing,
            "bad": self.bad,
            "removed": self.removed,
            "pruned": self.pruned,
            "stamp_changed": self.stamp_changed,
            "damaged": self.damaged,
        }


def extra_paths(root: Path, files: Sequence[LockedFile]) -> list[str]:
    """Files and links under ROOT that the lock does not list (directories aside)."""
    wanted = {f["path"] for f in files}
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if rel not in wanted:
                found.append(rel)
    return sorted(found)


def verify_dir(
    root: Path,
    files: Sequence[LockedFile],
    stamp_file: Path | None = None,
    *,
    full: bool = False,
    jobs: int = 0,
    remove_bad: bool = False,
    prune: bool = False,
    dry_run: bool = False,
) -> Report:
    """Check each locked file under ROOT by size, then by stamp or sha256; update the stamp."""
    report = Report()
    stamps = {} if full else load_stamps(stamp_file)
    new_stamps: dict[str, dict[str, Any]] = {}
    to_hash: dict[str, LockedFile] = {}
    keys: dict[str, list[int]] = {}
    for f in files:
        report.checked += 1
        full_path = root / f["path"]
        try:
            st = full_path.lstat()
        except FileNotFoundError:
            report.missing.append(f["path"])
            continue
        if not full_path.is_file() or full_path.is_symlink():
            report.bad.append(f"{f['path']}: not a regular file")
            continue
        if st.st_size != f["size"]:
            report.bad.append(f"{f['path']}: size {st.st_size}, the lock says {f['size']}")
            continue
        if st.st_nlink > 1:
            report.bad.append(
                f"{f['path']}: hard-linked ({st.st_nlink} names): another name, such as a"
                " pre-staged copy, changes these bytes"
            )
            continue
        key = stamp_key(st)
        old = stamps.get(f["path"])
        if old is not None and old.get("key") == key and old.get("sha256") == f["sha256"]:
            report.stamped += 1
            new_stamps[f["path"]] = old
            continue
        to_hash[str(full_path)] = f
        keys[str(full_path)] = key
    digests = hash_many(list(to_hash), jobs)
    for full_name, f in to_hash.items():
        report.hashed_files += 1
        report.hashed_bytes += f["size"]
        if digests[full_name] != f["sha256"]:
            report.bad.append(
                f"{f['path']}: sha256 {digests[full_name]}, the lock says {f['sha256']}"
            )
            continue
        # A file rewritten while being hashed would change its key: stamp only if unchanged.
        if stamp_key(os.lstat(full_name)) == keys[full_name]:
            new_stamps[f["path"]] = {"key": keys[full_name], "sha256": f["sha256"]}
    if remove_bad and not dry_run:
        for entry in report.bad:
            path = entry.split(": ", 1)[0]
            target = root / path
            if target.is_file() or target.is_symlink():
                target.unlink()
                report.removed.append(path)
    if prune:
        report.pruned = extra_paths(root, files)
        if not dry_run:
            for rel in report.pruned:
                (root / rel).unlink()
            for dirpath, _dirs, _files in sorted(os.walk(root), reverse=True):
                if dirpath != str(root) and not os.listdir(dirpath):
                    os.rmdir(dirpath)
    if stamp_file is not None and report.ok and not dry_run:
        text = json.dumps({"version": STAMP_VERSION, "files": new_stamps}, indent=1, sort_keys=True)
        report.stamp_changed = write_if_changed(stamp_file, text + "\n")
    return report


def bytes_missing(files: Sequence[LockedFile], present_dirs: Sequence[Path]) -> int:
    """Locked bytes not yet on disk with the right size in any of PRESENT_DIRS."""
    missing = 0
    for f in files:
        if not any(_size_of(d / f["path"]) == f["size"] for d in present_dirs):
            missing += f["size"]
    return missing


def _size_of(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def preflight(
    path: Path, files: Sequence[LockedFile], present_dirs: Sequence[Path], margin: int
) -> dict[str, int]:
    """Raise VerifyError unless the filesystem of PATH has the missing bytes plus MARGIN free."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    st = os.statvfs(probe)
    free = st.f_bavail * st.f_frsize
    need = bytes_missing(files, present_dirs)
    facts = {"free_bytes": free, "needed_bytes": need, "margin_bytes": margin}
    if need > 0 and free < need + margin:
        raise VerifyError(
            f"not enough disk space on {probe}: {free} bytes free, the lock needs {need} more"
            f" bytes plus a margin of {margin} (model_artifacts_disk_margin_bytes). Free space"
            " or move model_artifacts_root to a larger filesystem."
        )
    return facts


def copy_file(src: Path, dst: Path) -> str:
    """Copy SRC to a new file DST: a reflink where the filesystem can, else a plain copy.

    Never a hard link: the copy is a file of its own, whatever later happens to SRC.
    Returns "reflink" or "copy".
    """
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        try:
            fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
            return "reflink"
        except OSError:
            pass
        shutil.copyfileobj(fin, fout, BUF)
    return "copy"


def stage(
    source: Path, dest: Path, files: Sequence[LockedFile], dry_run: bool = False
) -> list[str]:
    """Copy (reflink where possible) locked files from a pre-staged SOURCE into DEST; return
    those added. A DEST file that is a hard link of its SOURCE (an older release's staging)
    is copied again."""
    added: list[str] = []
    absent = [f["path"] for f in files if not (source / f["path"]).is_file()]
    if absent:
        raise VerifyError(f"the pre-staged directory {source} lacks: " + ", ".join(absent))
    for f in files:
        src, dst = source / f["path"], dest / f["path"]
        if (
            dst.is_file()
            and not os.path.samefile(src, dst)
            and dst.stat().st_nlink == 1
            and dst.stat().st_size == f["size"]
            and dst.stat().st_mtime_ns >= src.stat().st_mtime_ns
        ):
            continue
        added.append(f["path"])
        if dry_run:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.stage")
        tmp.unlink(missing_ok=True)
        copy_file(src, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dst)
    return added


def repair(
    staging: Path, target: Path, paths: Sequence[str], dry_run: bool = False
) -> list[str]:
    """Rename each of PATHS from STAGING (re-staged and verified) over the damaged file in
    TARGET, one atomic rename per file; return the paths replaced."""
    if dry_run:
        return list(paths)
    absent = [p for p in paths if not (staging / p).is_file()]
    if absent:
        raise VerifyError(f"the re-staged directory {staging} lacks: " + ", ".join(absent))
    for rel in paths:
        dst = target / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / rel, dst)
        fd = os.open(dst.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return list(paths)


def promote(
    staging: Path, root: Path, commit: str, keep: int, dry_run: bool = False
) -> dict[str, Any]:
    """Move STAGING to ROOT/COMMIT (if given) and point ROOT/current at it atomically."""
    live = root / "current"
    target = root / commit
    result: dict[str, Any] = {"changed": False, "previous": None, "pruned": []}
    if live.is_symlink():
        result["previous"] = os.readlink(live)
    if not target.is_dir():
        if not staging.is_dir() and not dry_run:
            raise VerifyError(f"neither {target} nor the staging directory {staging} exists")
        result["changed"] = True
        if not dry_run:
            os.replace(staging, target)
    if result["previous"] != commit:
        result["changed"] = True
        if not dry_run:
            tmp = root / ".current.tmp"
            tmp.unlink(missing_ok=True)
            os.symlink(commit, tmp)  # relative: the tree can move
            os.replace(tmp, live)
            fd = os.open(root, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    if not root.is_dir():  # a first --check run
        return result
    # Keep the live revision and the newest others, up to `keep` in all.
    revisions = sorted(
        (
            d
            for d in root.iterdir()
            if d.is_dir() and not d.is_symlink() and len(d.name) == 40 and d.name != commit
        ),
        key=lambda d: d.stat().st_mtime,
        reverse=True,
    )
    for old in revisions[max(keep - 1, 0) :]:
        result["pruned"].append(old.name)
        result["changed"] = True
        if not dry_run:
            shutil.rmtree(old)
            (root / ".locks" / f"{old.name}.json").unlink(missing_ok=True)
    return result


def read_live(root: Path, relative: str) -> str | None:
    """The text of RELATIVE in the live revision (ROOT/current), or None where there is none."""
    try:
        return (root / "current" / relative).read_text()
    except OSError:  # a first --check run: nothing is live yet
        return None


def _files_param(raw: Sequence[Mapping[str, Any]]) -> list[LockedFile]:
    return [
        {"path": str(f["path"]), "size": int(f["size"]), "sha256": str(f["sha256"])} for f in raw
    ]


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "action": {
                "type": "str",
                "choices": ["verify", "preflight", "stage", "promote", "repair"],
                "required": True,
            },
            "path": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "dict", "default": []},
            "stamp_file": {"type": "path"},
            "full": {"type": "bool", "default": False},
            "jobs": {"type": "int", "default": 0},
            "remove_bad": {"type": "bool", "default": False},
            "prune": {"type": "bool", "default": False},
            "source": {"type": "path"},
            "margin_bytes": {"type": "int", "default": 0},
            "present_dirs": {"type": "list", "elements": "path", "default": []},
            "root": {"type": "path"},
            "commit": {"type": "str"},
            "keep": {"type": "int", "default": 2},
            "absent_ok": {"type": "bool", "default": False},
            "read": {"type": "str"},
            "damage_ok": {"type": "bool", "default": False},
            "repair_paths": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = Path(p["path"])
    files = _files_param(p["files"])
    dry = module.check_mode
    try:
        if p["action"] == "preflight":
            facts = preflight(path, files, [Path(d) for d in p["present_dirs"]], p["margin_bytes"])
            module.exit_json(changed=False, **facts)
        if p["action"] == "stage":
            if not dry:
                path.mkdir(parents=True, exist_ok=True)
            added = stage(Path(p["source"]), path, files, dry)
            module.exit_json(changed=bool(added), added=added)
        if p["action"] == "repair":
            target = Path(p["root"]) / p["commit"]
            replaced = repair(path, target, p["repair_paths"], dry)
            module.exit_json(changed=bool(replaced), replaced=replaced)
        if p["action"] == "promote":
            result = promote(path, Path(p["root"]), p["commit"], p["keep"], dry)
            if p["read"]:
                result["read"] = read_live(Path(p["root"]), p["read"])
            module.exit_json(**result)
        if not path.is_dir() and p["absent_ok"]:
            module.exit_json(changed=False, exists=False)
        if not path.is_dir():
            if dry:
                module.exit_json(changed=False, skipped_reason=f"{path} does not exist yet")
            module.fail_json(msg=f"{path}: no such directory to verify")
        stamp = Path(p["stamp_file"]) if p["stamp_file"] else None
        report = verify_dir(
            path,
            files,
            stamp,
            full=p["full"],
            jobs=p["jobs"],
            remove_bad=p["remove_bad"],
            prune=p["prune"],
            dry_run=dry,
        )
    except (VerifyError, OSError) as exc:
        module.fail_json(msg=str(exc))
    result = report.as_dict()
    changed = report.stamp_changed or bool(report.removed) or bool(report.pruned)
    if not report.ok and p["damage_ok"]:
        module.exit_json(changed=changed, exists=True, **result)
    if not report.ok:
        problems = [f"{m}: missing" for m in report.missing] + report.bad
        module.fail_json(
            msg=f"{path}: {len(problems)} file(s) do not match the lock: "
            + "; ".join(problems)
            + ". Nothing was switched; the live model is untouched.",
            changed=changed,
            **result,
        )
    module.exit_json(changed=changed, exists=True, **result)


if __name__ == "__main__":
    main()
