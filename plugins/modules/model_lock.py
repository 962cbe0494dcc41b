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
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from ansible_collections.vllm_fleet.serving.plugins.module_utils.hashing import sha256_file
from ansible_collections.vllm_fleet.serving.plugins.module_utils.model_lock import (
    CONFIG_PATH,
    Lock,
    LockedFile,
    LockError,
    config_problem,
    locked_entry,
    parse_lock,
)

__all__ = ["CONFIG_PATH", "Lock", "LockError", "LockedFile", "config_problem", "locked_entry",
           "parse_lock", "sha256_file"]


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
