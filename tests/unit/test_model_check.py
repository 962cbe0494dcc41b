"""roles/model_artifacts/files/vllm-model-check.py, the engine's ExecStartPre: a live revision
laid out as model_artifacts leaves it (<root>/<commit>, current, .locks, .stamps written by
plugins/modules/model_verify.py), checked with the stamps and without; every kind of damage refused
with the file, the digest found, the locked digest and the fix."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _scripts import ROOT, load_script
from ansible_collections.vllm_fleet.serving.plugins.modules import model_verify

SCRIPT = ROOT / "roles/model_artifacts/files/vllm-model-check.py"
check = load_script("roles/model_artifacts/files/vllm-model-check.py", "vllm_model_check")
COMMIT = "c" * 40


def deploy(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A model root with one verified, stamped revision live; returns (root, lock files)."""
    root = tmp_path / "models/tiny"
    rev = root / COMMIT
    (rev / "sub").mkdir(parents=True)
    files: list[dict[str, Any]] = []
    for path, data in (("config.json", b'{"a": 1}\n'), ("sub/w.safetensors", os.urandom(1 << 20))):
        (rev / path).write_bytes(data)
        files.append({"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    (root / "current").symlink_to(COMMIT)
    (root / ".locks").mkdir()
    (root / ".locks" / f"{COMMIT}.json").write_text(
        json.dumps({"version": 1, "repo_id": "org/tiny", "commit": COMMIT, "files": files}))
    report = model_verify.verify_dir(rev, files, root / ".stamps" / f"{COMMIT}.json")  # type: ignore[arg-type]
    assert report.ok and report.hashed_files == 2
    return root, files


def test_stamp_format_is_model_verify_s() -> None:
    assert check.STAMP_VERSION == model_verify.STAMP_VERSION
    st = os.stat(SCRIPT)
    assert check.stamp_key(st) == model_verify.stamp_key(st)


def test_an_intact_revision_passes_by_stamp_without_hashing(tmp_path: Path) -> None:
    root, _files = deploy(tmp_path)
    status, message = check.run(str(root / "current"), "gpu-1")
    assert status == 0, message
    assert "2 file(s) match the lock" in message and "(2 by stamp, 0 hashed)" in message


def test_without_stamps_every_file_is_hashed(tmp_path: Path) -> None:
    root, _files = deploy(tmp_path)
    (root / ".stamps" / f"{COMMIT}.json").unlink()
    status, message = check.run(str(root / "current"), "gpu-1")
    assert status == 0 and "(0 by stamp, 2 hashed)" in message


def test_a_tampered_file_is_refused_with_both_digests_and_the_fix(tmp_path: Path) -> None:
    root, files = deploy(tmp_path)
    live = root / COMMIT / "sub/w.safetensors"
    with open(live, "r+b") as fh:  # same size, one byte changed in place
        fh.seek(4096)
        byte = fh.read(1)
        fh.seek(4096)
        fh.write(bytes([byte[0] ^ 0xFF]))
    found = hashlib.sha256(live.read_bytes()).hexdigest()
    status, message = check.run(str(root / "current"), "gpu-1")
    assert status == 1
    assert f"DAMAGED {live}: sha256 {found}, the lock says {files[1]['sha256']}" in message
    assert "refusing to start the engine" in message
    assert "--tags model,engine --limit gpu-1" in message
    assert "config.json" not in message.replace("sub/w.safetensors", "")  # only the bad one


def test_a_rewrite_restoring_size_and_mtime_is_still_hashed(tmp_path: Path) -> None:
    root, _files = deploy(tmp_path)
    live = root / COMMIT / "config.json"
    st = live.stat()
    live.write_bytes(b'{"a": 2}\n')
    os.utime(live, ns=(st.st_atime_ns, st.st_mtime_ns))
    status, message = check.run(str(root / "current"), "h")
    assert status == 1 and f"DAMAGED {live}: sha256 " in message


@pytest.mark.parametrize("damage", ["missing", "size", "hardlink", "symlink"])
def test_other_damage_is_refused(tmp_path: Path, damage: str) -> None:
    root, _files = deploy(tmp_path)
    live = root / COMMIT / "config.json"
    if damage == "missing":
        live.unlink()
        expect = f"DAMAGED {live}: missing"
    elif damage == "size":
        live.write_bytes(b"{}")
        expect = f"DAMAGED {live}: size 2, the lock says 9"
    elif damage == "hardlink":  # what an older release's pre-staging left
        os.link(live, tmp_path / "prestaged-config.json")
        expect = f"DAMAGED {live}: hard-linked (2 names)"
    else:
        live.rename(tmp_path / "elsewhere.json")
        live.symlink_to(tmp_path / "elsewhere.json")
        expect = f"DAMAGED {live}: not a regular file"
    status, message = check.run(str(root / "current"), "h")
    assert status == 1 and expect in message, message


def test_no_recorded_lock_is_refused_naming_the_switch(tmp_path: Path) -> None:
    root, _files = deploy(tmp_path)
    (root / ".locks" / f"{COMMIT}.json").unlink()
    status, message = check.run(str(root / "current"), "h")
    assert status == 2
    assert f"no usable lock at {root}/.locks/{COMMIT}.json" in message
    assert "vllm_server_model_check: false" in message


def test_the_script_as_the_unit_runs_it(tmp_path: Path) -> None:
    root, _files = deploy(tmp_path)
    ok = subprocess.run([sys.executable, str(SCRIPT), str(root / "current")],
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "match the lock" in ok.stdout
    (root / COMMIT / "config.json").write_bytes(b'{"a": 3}\n')
    bad = subprocess.run([sys.executable, str(SCRIPT), str(root / "current")],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "DAMAGED" in bad.stderr and "Fix:" in bad.stderr
    usage = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                           check=False)
    assert usage.returncode == 2 and "usage" in usage.stderr
