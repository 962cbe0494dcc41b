#!/usr/bin/python
"""Ansible module model_lock: resolve a Hugging Face revision into a sha256 lock, or check one.

The logic is plain typed functions (``parse_lock``, ``build_lock``, ``select_paths``,
``resolve_lock``, ``render_lock``) usable without Ansible; ``main`` is the thin adapter.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: model_lock
short_description: Resolve a Hugging Face model revision into a sha256 lock file, or check one
description:
  - O(state=locked) resolves O(revision) (branch, tag or commit) of O(repo_id) to its commit
    sha with the Hub API (the mirror in O(endpoint)), lists every file matching O(patterns)
    with its size and sha256 (the LFS oid for LFS files; small non-LFS files are downloaded
    and hashed) and writes O(lock_file) as YAML.
  - O(state=validated) reads O(lock_file) and refuses a malformed digest (not 64 hex
    characters), a missing or bad size, a duplicate or unsafe path, an unpinned revision
    (anything but a 40-hex commit) or an empty file list, naming the path of each error.
  - "With O(config_file), O(state=locked) also stores the model's C(config.json) there:
    the bytes of the locked commit, checked against the lock's sha256 (the plan reads it;
    the C(vllm_plan) role refuses a copy whose sha256 differs from the lock's)."
  - O(token) is put only into this process's environment (E(HF_TOKEN)) for huggingface_hub.
author:
  - vllm-fleet maintainers (@vllm-fleet)
requirements:
  - huggingface_hub (for O(state=locked) only)
attributes:
  check_mode:
    support: full
    description: Resolves and compares, and writes neither O(lock_file) nor O(config_file).
  diff_mode:
    support: full
    description: Shows the lock file's change.
options:
  state:
    description: V(locked) resolves and writes the lock; V(validated) only reads and checks it.
    type: str
    choices: [locked, validated]
    default: validated
  lock_file:
    description: The lock file (YAML) to write or check.
    type: path
    required: true
  repo_id:
    description: The Hugging Face repository, C(org/name); required with O(state=locked).
    type: str
  revision:
    description: The branch, tag or commit to resolve.
    type: str
    default: main
  endpoint:
    description: E(HF_ENDPOINT), an internal mirror; empty means huggingface.co.
    type: str
    default: ""
  token:
    description: The Hub token, put into this process's environment (E(HF_TOKEN)) only.
    type: str
    default: ""
  patterns:
    description: fnmatch patterns of the repository's files to lock.
    type: list
    elements: str
    default: ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]
  config_file:
    description: Where O(state=locked) stores the locked commit's config.json; empty stores
      none.
    type: path
    default: ""
"""

EXAMPLES = r"""
- name: Lock a revision (on the control node)
  vllm_fleet.serving.model_lock:
    state: locked
    lock_file: inventories/example/models/qwen3-8b.lock.yml
    repo_id: Qwen/Qwen3-8B
    revision: main
    config_file: inventories/example/models/qwen3-8b.config.json
  delegate_to: localhost

- name: Refuse a malformed or unpinned lock before anything is deployed
  vllm_fleet.serving.model_lock:
    lock_file: inventories/example/models/qwen3-8b.lock.yml
  delegate_to: localhost
  register: _lock
"""

RETURN = r"""
lock:
  description: The lock (repo_id, revision, commit, files with path, size, sha256), validated.
  type: dict
  returned: success
  sample:
    repo_id: Qwen/Qwen3-8B
    revision: main
    commit: 0123456789abcdef0123456789abcdef01234567
    files:
      - path: config.json
        size: 728
        sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
total_bytes:
  description: Sum of the locked files' sizes.
  type: int
  returned: success
  sample: 16384000000
config_file:
  description: Where the locked config.json was stored (with O(config_file)), else empty.
  type: str
  returned: when O(state=locked)
  sample: inventories/example/models/qwen3-8b.config.json
errors:
  description: Each problem of a refused lock, naming its path.
  type: list
  elements: str
  returned: failure
  sample: ["files[0]: sha256 'abc' has 3 hex characters, a sha256 digest has 64"]
"""

import fnmatch
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
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


def select_paths(paths: Iterable[str], patterns: Sequence[str]) -> list[str]:
    """Paths matching any pattern (fnmatch, like the Hub client's allow_patterns), sorted."""
    return sorted(p for p in set(paths) if any(fnmatch.fnmatch(p, pat) for pat in patterns))


def build_lock(
    repo_id: str, revision: str, commit: str, files: Iterable[tuple[str, int, str]]
) -> Lock:
    """A lock from resolved (path, size, sha256) triples, validated like any other."""
    data = {
        "repo_id": repo_id,
        "revision": revision,
        "commit": commit,
        "files": [{"path": p, "size": s, "sha256": d} for p, s, d in files],
    }
    return parse_lock(data, f"lock of {repo_id}@{revision}")


def render_lock(lock: Lock) -> str:
    """The lock as stable YAML text (sorted files, one key per line), no YAML library needed."""
    lines = [
        "---",
        "# Model lock written by playbooks/lock_model.yml: deploy exactly these bytes.",
        f"version: {lock['version']}",
        f"repo_id: {lock['repo_id']}",
        f"revision: {json.dumps(lock['revision'])}",
        f"commit: {json.dumps(lock['commit'])}",
        "files:",
    ]
    for f in lock["files"]:
        lines += [
            f"  - path: {json.dumps(f['path'])}",
            f"    size: {f['size']}",
            f"    sha256: {json.dumps(f['sha256'])}",
        ]
    return "\n".join(lines) + "\n"


def sha256_file(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


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


def resolve_lock(repo_id: str, revision: str, patterns: Sequence[str]) -> Lock:
    """Resolve REVISION with the Hub API (HF_ENDPOINT, HF_TOKEN from the environment)."""
    return resolve_lock_and_config(repo_id, revision, patterns)[0]


def resolve_lock_and_config(
    repo_id: str, revision: str, patterns: Sequence[str]
) -> tuple[Lock, bytes | None]:
    """The lock of REVISION and the bytes of its config.json at the locked commit (None where
    the patterns leave config.json out), checked against the lock's sha256."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.hf_api import RepoFile

    api = HfApi()
    commit = api.model_info(repo_id, revision=revision).sha
    if commit is None:
        raise LockError(f"{repo_id}@{revision}", ["the Hub returned no commit sha"])
    entries = {
        e.path: e
        for e in api.list_repo_tree(repo_id, revision=commit, recursive=True, expand=True)
        if isinstance(e, RepoFile)
    }
    chosen = select_paths(entries, patterns)
    if not chosen:
        raise LockError(f"{repo_id}@{revision}", [f"no file matches the patterns {list(patterns)}"])
    resolved: list[tuple[str, int, str]] = []
    config: bytes | None = None
    with tempfile.TemporaryDirectory(prefix="model-lock-") as tmp:
        for path in chosen:
            entry = entries[path]
            if entry.lfs is not None and path != CONFIG_PATH:
                resolved.append((path, entry.lfs.size, entry.lfs.sha256))
                continue
            local = hf_hub_download(repo_id, path, revision=commit, local_dir=tmp)
            size = os.path.getsize(local)
            if size != entry.size:
                raise LockError(path, [f"downloaded {size} bytes, the Hub lists {entry.size}"])
            digest = sha256_file(Path(local))
            if entry.lfs is not None and digest != entry.lfs.sha256:
                raise LockError(path, [f"downloaded sha256 {digest}, the Hub lists"
                                       f" {entry.lfs.sha256}"])
            if path == CONFIG_PATH:
                config = Path(local).read_bytes()
            resolved.append((path, size, digest))
    lock = build_lock(repo_id, revision, commit, resolved)
    if config is not None and (problem := config_problem(lock, config)) is not None:
        raise LockError(f"{repo_id}@{commit}", [f"{CONFIG_PATH}: {problem}"])
    return lock, config


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["locked", "validated"], "default": "validated"},
            "lock_file": {"type": "path", "required": True},
            "repo_id": {"type": "str"},
            "revision": {"type": "str", "default": "main"},
            "endpoint": {"type": "str", "default": ""},
            "token": {"type": "str", "default": "", "no_log": True},
            "patterns": {
                "type": "list",
                "elements": "str",
                "default": ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"],
            },
            "config_file": {"type": "path", "default": ""},
        },
        required_if=[("state", "locked", ["repo_id"])],
        supports_check_mode=True,
    )
    p = module.params
    lock_file = Path(p["lock_file"])
    # The Hub client reads these when it is imported (resolve_lock imports it).
    if p["endpoint"]:
        os.environ["HF_ENDPOINT"] = p["endpoint"]
    if p["token"]:
        os.environ["HF_TOKEN"] = p["token"]  # this process's environment only
    os.environ["HF_HUB_DISABLE_XET"] = "1"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        if p["state"] == "validated":
            import yaml  # PyYAML ships with Ansible

            try:
                text = lock_file.read_text()
            except OSError as exc:
                module.fail_json(msg=f"{lock_file}: cannot read the lock ({exc.strerror})")
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                module.fail_json(msg=f"{lock_file}: not valid YAML ({exc})")
            lock = parse_lock(data, str(lock_file))
            module.exit_json(changed=False, lock=lock, total_bytes=total_bytes(lock))
        lock, config = resolve_lock_and_config(p["repo_id"], p["revision"], p["patterns"])
        if p["config_file"] and config is None:
            raise LockError(f"{p['repo_id']}@{lock['commit']}", [
                f"no {CONFIG_PATH} among the locked files, so none can be stored at"
                f" {p['config_file']}: add a pattern matching {CONFIG_PATH}"])
    except LockError as exc:
        module.fail_json(msg=str(exc), errors=exc.errors)
    except Exception as exc:  # the Hub client's errors: report them without a traceback
        module.fail_json(msg=f"{p['repo_id']}@{p['revision']}: {type(exc).__name__}: {exc}")
    text = render_lock(lock)
    before = lock_file.read_text() if lock_file.exists() else ""
    changed = before != text
    diffs = [{"before": before, "after": text, "before_header": str(lock_file)}]
    config_file = Path(p["config_file"]) if p["config_file"] else None
    config_changed = False
    if config_file is not None and config is not None:
        old = config_file.read_bytes() if config_file.exists() else b""
        config_changed = old != config
        diffs.append({"before": old.decode(errors="replace"),
                      "after": config.decode(errors="replace"),
                      "before_header": str(config_file)})
    if not module.check_mode:
        if changed:
            _write_atomic(lock_file, text.encode())
        if config_changed and config_file is not None and config is not None:
            _write_atomic(config_file, config)
    module.exit_json(
        changed=changed or config_changed,
        lock=lock,
        total_bytes=total_bytes(lock),
        config_file=str(config_file or ""),
        diff=diffs,
    )


def total_bytes(lock: Lock) -> int:
    return sum(f["size"] for f in lock["files"])


if __name__ == "__main__":
    main()
