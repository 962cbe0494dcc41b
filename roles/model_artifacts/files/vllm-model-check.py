#!/usr/bin/python3
"""vllm-model-check MODEL_DIR: refuse to start an engine on bytes that are not the lock's.

Installed by the model_artifacts role as /usr/local/bin/vllm-model-check; vllm_server runs
it as each replica's ExecStartPre (as the engine's user). MODEL_DIR is a live path such as
<root>/current: it resolves to <root>/<commit>, whose lock model_artifacts recorded in
<root>/.locks/<commit>.json. Every locked file must exist, be a regular file with one name
(no hard link another name could change), have the locked size and the locked sha256.

A file whose stamp in <root>/.stamps/<commit>.json (written by model_artifacts after it
hashed the file) still matches its (size, mtime_ns, inode, device, ctime_ns) and the locked
digest is not re-hashed: a restart costs one lstat() per file. ctime cannot be set from user
space, so a rewrite that restores size and mtime is re-hashed. The stamps are root's; this
check only reads them.

Exit status: 0 all files match; 1 damaged files (each named with the digest found, the
locked digest and the fix); 2 no recorded lock or an unreadable one.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUF = 1 << 20
STAMP_VERSION = 1  # plugins/modules/model_verify.py's stamp format (a unit test holds them equal)
LOCK_VERSION = 1


def fix_command(host: str) -> str:
    return (
        "re-run the model and engine stages; model_artifacts re-stages the damaged files from"
        " the source, verifies them and renames them in, then the replicas restart:"
        f" ansible-playbook -i INVENTORY playbooks/site.yml --tags model,engine --limit {host}"
    )


def stamp_key(st: os.stat_result) -> list[int]:
    """Equal to plugins/modules/model_verify.py's stamp_key."""
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns]


def sha256_file(path: Path) -> str:
    with open(path, "rb", buffering=0) as fh:
        return hashlib.file_digest(fh, "sha256", _bufsize=BUF).hexdigest()


@dataclass
class Result:
    revision: Path
    checked: int = 0
    stamped: int = 0
    hashed: int = 0
    damaged: list[str] = field(default_factory=list)


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())


def load_stamps(path: Path) -> dict[str, Any]:
    try:
        data = load_json(path)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != STAMP_VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def check(revision: Path, files: Sequence[dict[str, Any]], stamps: dict[str, Any],
          jobs: int = 0) -> Result:
    """Check each locked file under REVISION; hash only those the stamps do not vouch for."""
    result = Result(revision)
    to_hash: dict[str, dict[str, Any]] = {}
    for f in files:
        result.checked += 1
        rel = str(f["path"])
        path = revision / rel
        try:
            st = path.lstat()
        except FileNotFoundError:
            result.damaged.append(f"{path}: missing, the lock says sha256 {f['sha256']}")
            continue
        if not path.is_file() or path.is_symlink():
            result.damaged.append(f"{path}: not a regular file")
            continue
        if st.st_nlink > 1:
            result.damaged.append(
                f"{path}: hard-linked ({st.st_nlink} names): another name, such as a"
                " pre-staged copy, changes these bytes")
            continue
        if st.st_size != int(f["size"]):
            result.damaged.append(f"{path}: size {st.st_size}, the lock says {f['size']}")
            continue
        old = stamps.get(rel)
        if isinstance(old, dict) and old.get("key") == stamp_key(st) \
                and old.get("sha256") == f["sha256"]:
            result.stamped += 1
            continue
        to_hash[rel] = f
    workers = max(1, min(jobs or len(os.sched_getaffinity(0)), len(to_hash)))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        digests = dict(zip(to_hash, pool.map(lambda r: sha256_file(revision / r), to_hash),
                           strict=True))
    for rel, f in to_hash.items():
        result.hashed += 1
        if digests[rel] != f["sha256"]:
            result.damaged.append(
                f"{revision / rel}: sha256 {digests[rel]}, the lock says {f['sha256']}")
    return result


def run(model_dir: str, host: str) -> tuple[int, str]:
    """(exit status, message) for MODEL_DIR."""
    revision = Path(os.path.realpath(model_dir))
    root, commit = revision.parent, revision.name
    lock_file = root / ".locks" / f"{commit}.json"
    try:
        lock = load_json(lock_file)
        files = lock["files"]
        if lock.get("version") != LOCK_VERSION or lock.get("commit") != commit:
            raise ValueError(f"version {lock.get('version')}, commit {lock.get('commit')}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return 2, (
            f"vllm-model-check: {model_dir} ({revision}): no usable lock at {lock_file}"
            f" ({type(exc).__name__}: {exc}). Only a revision model_artifacts deployed can be"
            f" checked. Fix: {fix_command(host)}; or turn the check off for a model"
            " model_artifacts does not manage (vllm_server_model_check: false).")
    result = check(revision, files, load_stamps(root / ".stamps" / f"{commit}.json"))
    if result.damaged:
        lines = [f"vllm-model-check: {revision}: {len(result.damaged)} of {result.checked}"
                 f" file(s) do not match the lock of {commit}; refusing to start the engine:"]
        lines += [f"  DAMAGED {d}" for d in result.damaged]
        lines.append(f"Fix: {fix_command(host)}")
        return 1, "\n".join(lines)
    return 0, (f"vllm-model-check: {revision}: {result.checked} file(s) match the lock of"
               f" {commit} ({result.stamped} by stamp, {result.hashed} hashed)")


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: vllm-model-check MODEL_DIR", file=sys.stderr)
        return 2
    status, message = run(argv[0], socket.gethostname())
    print(message, file=sys.stderr if status else sys.stdout, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
