"""sha256 of a file, the one implementation the modules share (Python 3.9 and newer).

hashlib.file_digest (3.11+) is used where the target's Python has it: it reads into one
buffer and releases the GIL while hashing; older Pythons read 1 MiB blocks.
"""

from __future__ import annotations

import hashlib
import os

# Bytes read per call where hashlib.file_digest is not there.
BUF = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of the file at PATH."""
    with open(path, "rb", buffering=0) as fh:
        file_digest = getattr(hashlib, "file_digest", None)
        if file_digest is not None:
            return str(file_digest(fh, "sha256", _bufsize=BUF).hexdigest())
        digest = hashlib.sha256()
        for block in iter(lambda: fh.read(BUF), b""):
            digest.update(block)
        return digest.hexdigest()
