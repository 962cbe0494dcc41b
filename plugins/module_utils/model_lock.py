"""A model lock (playbooks/lock_model.yml writes one): its parsing and its checks.

Shared by the modules model_lock and model_verify and the filter model_config; runs on the
target's Python, 3.9 and newer.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import TypedDict

HEX64 = re.compile(r"[0-9a-f]{64}")
HEX40 = re.compile(r"[0-9a-f]{40}")
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
LOCK_VERSION = 1
# The file the planner reads; lock_model.yml stores it beside the lock.
CONFIG_PATH = "config.json"


class LockError(ValueError):
    """A lock that must not be deployed; ``errors`` names each bad path."""

    def __init__(self, source: str, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__(
            f"{source}: refused, {len(self.errors)} error(s): " + "; ".join(self.errors)
        )


class LockedFile(TypedDict):
    path: str
    size: int
    sha256: str


class Lock(TypedDict):
    version: int
    repo_id: str
    revision: str
    commit: str
    files: list[LockedFile]


def _path_error(path: object) -> str | None:
    if not isinstance(path, str) or not path:
        return "path is missing or not a string"
    parts = path.split("/")
    if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        return f"path {path!r} must be relative, '/'-separated, without '.' or '..'"
    if parts[0] == ".cache":
        return f"path {path!r} is under .cache, which the Hub client owns"
    return None


def _digest_error(value: object) -> str | None:
    if not isinstance(value, str):
        return "sha256 is missing"
    if HEX64.fullmatch(value):
        return None
    if re.fullmatch(r"[0-9A-Fa-f]+", value):
        if len(value) == 64:
            return f"sha256 {value!r} has upper-case hex; write the digest in lower case"
        return (
            f"sha256 {value!r} has {len(value)} hex characters, a sha256 digest has 64"
            " (not a real digest: re-run playbooks/lock_model.yml)"
        )
    return f"sha256 {value!r} is not 64 lower-case hex characters"


def parse_lock(data: object, source: str = "lock") -> Lock:
    """Validate a lock mapping; return it normalised or raise LockError listing every error."""
    if not isinstance(data, Mapping):
        raise LockError(source, ["the lock is not a mapping (repo_id, commit, files)"])
    errors: list[str] = []
    repo_id = data.get("repo_id")
    if not isinstance(repo_id, str) or not REPO_ID.fullmatch(repo_id):
        errors.append(f"repo_id {repo_id!r} is not 'org/name'")
    commit = data.get("commit")
    if not isinstance(commit, str) or not HEX40.fullmatch(commit):
        errors.append(
            f"commit {commit!r} is not pinned: a lock needs the 40-hex commit sha, not a branch"
            " or tag name (resolve it with playbooks/lock_model.yml)"
        )
    revision = data.get("revision", commit)
    files = data.get("files")
    out: list[LockedFile] = []
    if not isinstance(files, list) or not files:
        errors.append("files is missing or empty")
        files = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(files):
        where = f"files[{i}]"
        if not isinstance(entry, Mapping):
            errors.append(f"{where}: not a mapping with path, size, sha256")
            continue
        path = entry.get("path")
        if isinstance(path, str) and path:
            where = f"files[{i}] ({path})"
        entry_errors = []
        if (err := _path_error(path)) is not None:
            entry_errors.append(err)
        elif path in seen:
            entry_errors.append(f"duplicate path, also files[{seen[str(path)]}]")
        else:
            seen[str(path)] = i
        size = entry.get("size")
        if size is None:
            entry_errors.append("size is missing")
        elif isinstance(size, bool) or not isinstance(size, int) or size < 0:
            entry_errors.append(f"size {size!r} is not a byte count (integer >= 0)")
        if (err := _digest_error(entry.get("sha256"))) is not None:
            entry_errors.append(err)
        unknown = sorted(set(entry) - {"path", "size", "sha256"})
        if unknown:
            entry_errors.append(f"unknown keys {unknown}")
        errors.extend(f"{where}: {e}" for e in entry_errors)
        if not entry_errors:
            out.append({"path": str(path), "size": int(str(size)), "sha256": str(entry["sha256"])})
    if errors:
        raise LockError(source, errors)
    return {
        "version": LOCK_VERSION,
        "repo_id": str(repo_id),
        "revision": str(revision),
        "commit": str(commit),
        "files": sorted(out, key=lambda f: f["path"]),
    }


def locked_entry(lock: Lock, path: str) -> LockedFile | None:
    """The lock's entry for PATH, or None."""
    return next((f for f in lock["files"] if f["path"] == path), None)


def config_problem(lock: Lock, data: bytes) -> str | None:
    """Why DATA is not the config.json the lock pins (None: it is)."""
    entry = locked_entry(lock, CONFIG_PATH)
    if entry is None:
        return (f"the lock has no {CONFIG_PATH}, which the plan reads: lock it (the"
                f" patterns must match {CONFIG_PATH})")
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        return (f"its sha256 is {digest}, the lock's {CONFIG_PATH} is {entry['sha256']}"
                f" ({lock['repo_id']}@{lock['commit']})")
    return None
