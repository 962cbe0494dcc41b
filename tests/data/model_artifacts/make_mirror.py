#!/usr/bin/env python3
"""Build a small Hugging Face model repository that `olah` serves offline, and run olah.

The repository is a real git repository at MIRROR/models/ORG/NAME: small JSON files are
committed as they are, the "weights" are Git LFS pointer files (written by hand, no git-lfs
needed) whose objects lie under .git/lfs/objects/aa/bb/OID, as olah expects. Everything is
deterministic (seeded bytes), so a test can also compute the expected digests itself.

    make_mirror.py build MIRROR                 build the fixture repo; print its facts as JSON
    make_mirror.py tamper MIRROR PATH           flip bytes of PATH's LFS object (same size)
    make_mirror.py serve MIRROR PORT LOGDIR     run olah offline on 127.0.0.1:PORT (foreground)
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ORG, NAME = "fixture-org", "tiny-qwen2"
REPO_ID = f"{ORG}/{NAME}"

CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "torch_dtype": "bfloat16",
    "vocab_size": 1024,
    "tie_word_embeddings": False,
}
SMALL = {
    "config.json": json.dumps(CONFIG, indent=2) + "\n",
    "generation_config.json": json.dumps({"bos_token_id": 1, "eos_token_id": 2}) + "\n",
    "tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}) + "\n",
    "README.md": "# tiny-qwen2\n\nA test fixture. Not in the model patterns.\n",
}
# LFS "weights": path -> size in bytes (a few MB in all: olah holds objects in RAM).
LFS = {
    "model-00001-of-00002.safetensors": 3 * 1024 * 1024,
    "model-00002-of-00002.safetensors": 1024 * 1024 + 17,
}


def blob(path: str, size: int) -> bytes:
    return random.Random(path).randbytes(size)


def repo_dir(mirror: Path) -> Path:
    return mirror / "models" / ORG / NAME


def lfs_object(repo: Path, oid: str) -> Path:
    return repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid


def git(repo: Path, *args: str) -> str:
    env_args = ["-c", "user.name=fixture", "-c", "user.email=fixture@example.invalid"]
    done = subprocess.run(
        ["git", *env_args, *args], cwd=repo, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def build(mirror: Path) -> dict[str, object]:
    """Build the repo (two commits: `v1` tag and `main`); return ids and expected digests."""
    repo = repo_dir(mirror)
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    files: dict[str, dict[str, object]] = {}
    for path, text in SMALL.items():
        data = text.encode()
        (repo / path).write_bytes(data)
        files[path] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    for path, size in LFS.items():
        data = blob(path, size)
        oid = hashlib.sha256(data).hexdigest()
        obj = lfs_object(repo, oid)
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(data)
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"
        (repo / path).write_text(pointer)
        files[path] = {"size": size, "sha256": oid, "lfs": True}
    (repo / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tiny-qwen2 v1")
    git(repo, "tag", "v1")
    v1 = git(repo, "rev-parse", "HEAD")
    # A second commit on main changes one small file: locks of `v1` and `main` differ.
    (repo / "generation_config.json").write_text(json.dumps({"bos_token_id": 1}) + "\n")
    git(repo, "commit", "-q", "-am", "generation config: no eos")
    main = git(repo, "rev-parse", "HEAD")
    return {"repo_id": REPO_ID, "repo": str(repo), "v1": v1, "main": main, "files_v1": files}


def tamper(mirror: Path, path: str) -> str:
    """Overwrite PATH's LFS object with other bytes of the same size; return its oid."""
    repo = repo_dir(mirror)
    pointer = (
        (repo / path).read_text() if (repo / path).exists() else git(repo, "show", f"HEAD:{path}")
    )
    oid = pointer.split("oid sha256:")[1].split()[0]
    obj = lfs_object(repo, oid)
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0xFF
    obj.write_bytes(bytes(data))
    return oid


def serve(mirror: Path, port: int, logdir: Path) -> None:
    conf = logdir / "olah.toml"
    logdir.mkdir(parents=True, exist_ok=True)
    conf.write_text(
        "[basic]\n"
        'host = "127.0.0.1"\n'
        f"port = {port}\n"
        f'mirror-netloc = "127.0.0.1:{port}"\n'
        f'mirror-lfs-netloc = "127.0.0.1:{port}"\n'
        f'repos-path = "{logdir / "repos"}"\n'
        f'mirrors-path = ["{mirror}"]\n'
        "[accessibility]\n"
        "offline = true\n"
    )
    os.chdir(logdir)
    # exec: a signal to this process reaches olah itself.
    os.execv(
        sys.executable,
        [sys.executable, "-m", "olah.server", "-c", str(conf), "--log-path", str(logdir)],
    )


def main(argv: list[str]) -> None:
    if len(argv) >= 2 and argv[0] == "build":
        print(json.dumps(build(Path(argv[1]))))
    elif len(argv) == 3 and argv[0] == "tamper":
        print(tamper(Path(argv[1]), argv[2]))
    elif len(argv) == 4 and argv[0] == "serve":
        serve(Path(argv[1]), int(argv[2]), Path(argv[3]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
