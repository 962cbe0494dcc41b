"""The real huggingface_hub client against a real local mirror: olah, offline, on 127.0.0.1,
serving the fixture git repository built by tests/data/model_artifacts/make_mirror.py.

Each Hub operation runs in a subprocess: the client reads HF_ENDPOINT when imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _scripts import ansible_env
from ansible_collections.vllm_fleet.serving.plugins.modules.model_fetch import (
    clean_incomplete,
    missing_files,
)
from ansible_collections.vllm_fleet.serving.plugins.modules.model_verify import verify_dir

ROOT = Path(__file__).resolve().parents[4]
MAKE_MIRROR = ROOT / "tests" / "data" / "model_artifacts" / "make_mirror.py"
SLOW_PROXY = ROOT / "molecule" / "model_artifacts" / "files" / "slow_proxy.py"

pytest.importorskip("olah", reason="olah (requirements-dev.txt) serves the test mirror")

MODULES = "ansible_collections.vllm_fleet.serving.plugins.modules"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "server exited early"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(port)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("mirror")
    facts = json.loads(
        subprocess.run(
            [sys.executable, str(MAKE_MIRROR), "build", str(work / "mirror")],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    port, slow_port = free_port(), free_port()
    olah = subprocess.Popen(
        [
            sys.executable,
            str(MAKE_MIRROR),
            "serve",
            str(work / "mirror"),
            str(port),
            str(work / "olah"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    proxy = subprocess.Popen(
        [sys.executable, str(SLOW_PROXY), str(slow_port), str(port), "262144"],
    )
    try:
        wait_port(port, olah)
        wait_port(slow_port, proxy)
        yield {
            **facts,
            "work": work,
            "endpoint": f"http://127.0.0.1:{port}",
            "slow_endpoint": f"http://127.0.0.1:{slow_port}",
        }
    finally:
        for proc in (olah, proxy):
            proc.terminate()
            proc.wait(10)


def hub(code: str, endpoint: str, **env: str) -> Any:
    """Run CODE (which prints JSON) with the Hub client pointed at ENDPOINT."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "HF_ENDPOINT": endpoint,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HOME": "/nonexistent-hf-home",
            **env,
        },
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def resolve(mirror: dict[str, Any], revision: str) -> dict[str, Any]:
    code = (
        f"import json; from {MODULES} import model_lock;"
        "resolve_lock = model_lock.resolve_lock;"
        f"lock = resolve_lock('fixture-org/tiny-qwen2', {revision!r}, ['*.json', '*.safetensors']);"
        "print(json.dumps(lock))"
    )
    result: dict[str, Any] = hub(code, mirror["endpoint"], HF_HOME=str(mirror["work"] / "hf-home"))
    return result


def fetch(
    mirror: dict[str, Any], lock: dict[str, Any], dest: Path, endpoint: str, timeout: int = 0
) -> str:
    params = {
        "repo_id": lock["repo_id"],
        "commit": lock["commit"],
        "dest": str(dest),
        "max_workers": 4,
        "timeout": timeout,
        "progress_file": str(dest) + ".progress",
    }
    code = (
        f"import json; from pathlib import Path; from {MODULES} import model_fetch;"
        "download = model_fetch.download;"
        f"p = json.loads({json.dumps(json.dumps(params))});"
        f"f = json.loads({json.dumps(json.dumps(lock['files']))});"
        "Path(p['dest']).mkdir(parents=True, exist_ok=True);"
        "print(json.dumps(download(p, f, Path(p['dest']))))"
    )
    result: str = hub(code, endpoint, HF_HOME=str(mirror["work"] / "hf-home"))
    return result


def test_lock_resolves_tag_and_branch_to_commits_with_real_digests(mirror: dict[str, Any]) -> None:
    v1 = resolve(mirror, "v1")
    assert v1["commit"] == mirror["v1"] and v1["revision"] == "v1"
    expected = {
        p: (f["size"], f["sha256"]) for p, f in mirror["files_v1"].items() if p != "README.md"
    }
    assert {f["path"]: (f["size"], f["sha256"]) for f in v1["files"]} == expected
    main = resolve(mirror, "main")
    assert main["commit"] == mirror["main"]
    assert {f["path"] for f in main["files"] if f not in v1["files"]} == {"generation_config.json"}
    assert resolve(mirror, mirror["v1"])["files"] == v1["files"]


def test_download_then_verify_then_tampered_mirror_is_caught(
    mirror: dict[str, Any], tmp_path: Path
) -> None:
    lock = resolve(mirror, "v1")
    dest = tmp_path / "staging"
    assert fetch(mirror, lock, dest, mirror["endpoint"]) == ""
    assert missing_files(dest, lock["files"]) == []
    report = verify_dir(dest, lock["files"], tmp_path / "stamp.json", prune=True)
    assert report.ok and report.hashed_files == 5
    assert sorted(os.listdir(dest)) == sorted(f["path"] for f in lock["files"])
    progress = json.loads((tmp_path / "staging.progress").read_text())
    assert (
        progress["done_bytes"] == progress["total_bytes"] == sum(f["size"] for f in lock["files"])
    )

    shard = "model-00002-of-00002.safetensors"
    subprocess.run(
        [sys.executable, str(MAKE_MIRROR), "tamper", str(mirror["work"] / "mirror"), shard],
        check=True,
    )
    try:
        bad_dest = tmp_path / "bad"
        assert fetch(mirror, lock, bad_dest, mirror["endpoint"]) == "", (
            "the client checks sizes only"
        )
        report = verify_dir(bad_dest, lock["files"], remove_bad=True)
        assert [b.split(":")[0] for b in report.bad] == [shard]
        assert report.removed == [shard]
    finally:
        subprocess.run(
            [sys.executable, str(MAKE_MIRROR), "tamper", str(mirror["work"] / "mirror"), shard],
            check=True,
        )


def test_a_killed_download_leaves_nothing_partial_and_the_next_completes(
    mirror: dict[str, Any], tmp_path: Path
) -> None:
    lock = resolve(mirror, "v1")
    dest = tmp_path / "staging"
    # Killed while bytes flow: 3 s is mid-download through the throttled proxy; on a loaded
    # machine the child may not have started its transfers by then (0 bytes), so the kill
    # comes later, in a fresh staging directory, until it lands mid-download.
    for timeout in (3, 6, 10):
        shutil.rmtree(dest, ignore_errors=True)
        error = fetch(mirror, lock, dest, mirror["slow_endpoint"], timeout=timeout)
        assert error.startswith(f"download killed after {timeout} s"), error
        progress = json.loads((tmp_path / "staging.progress").read_text())
        if progress["done_bytes"] > 0:
            break
    assert 0 < progress["done_bytes"] < progress["total_bytes"], progress
    assert missing_files(dest, lock["files"]) != []
    partial = list(dest.glob(".cache/huggingface/download/*.incomplete"))
    assert partial, "SIGKILL leaves the client's *.incomplete files"
    assert len(clean_incomplete(dest)) == len(partial)
    assert fetch(mirror, lock, dest, mirror["endpoint"]) == ""
    assert verify_dir(dest, lock["files"], prune=True).ok


def lock_model(mirror: dict[str, Any], inventory: Path, revision: str,
               check: bool = False) -> subprocess.CompletedProcess[str]:
    """playbooks/lock_model.yml with the real ansible-playbook against the mirror."""
    playbook = Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run(
        [str(playbook), "-i", str(inventory / "hosts.yml"), str(ROOT / "playbooks/lock_model.yml"),
         "-e", "lock_model_name=tiny", "-e", "lock_model_repo_id=fixture-org/tiny-qwen2",
         "-e", f"lock_model_revision={revision}", "-e", f"lock_model_inventory_dir={inventory}",
         "-e", f"lock_model_hf_endpoint={mirror['endpoint']}", *(["--check"] if check else [])],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env=ansible_env(HF_HOME=str(mirror["work"] / "hf-home")))


def test_lock_model_stores_the_locked_config_beside_the_lock(
    mirror: dict[str, Any], tmp_path: Path
) -> None:
    import yaml  # PyYAML ships with Ansible

    inventory = tmp_path / "inv"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text("all: {hosts: {}}\n")
    assert lock_model(mirror, inventory, "v1", check=True).returncode == 0
    assert not (inventory / "models").exists(), "--check writes nothing"
    done = lock_model(mirror, inventory, "v1")
    assert done.returncode == 0, done.stdout + done.stderr
    lock = yaml.safe_load((inventory / "models/tiny.lock.yml").read_text())
    config = (inventory / "models/tiny/config.json").read_bytes()
    entry = next(f for f in lock["files"] if f["path"] == "config.json")
    assert hashlib.sha256(config).hexdigest() == entry["sha256"] == \
        mirror["files_v1"]["config.json"]["sha256"]
    assert len(config) == entry["size"]
    assert "changed=1" in done.stdout
    # Re-run: nothing changes; a tampered copy is put back to the locked bytes.
    assert "changed=0" in lock_model(mirror, inventory, "v1").stdout
    (inventory / "models/tiny/config.json").write_bytes(config + b" ")
    again = lock_model(mirror, inventory, "v1")
    assert "changed=1" in again.stdout
    assert (inventory / "models/tiny/config.json").read_bytes() == config
