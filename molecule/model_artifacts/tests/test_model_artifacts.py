"""Testinfra checks for the model_artifacts scenario (after converge, idempotence, side_effect).

side_effect.yml ends with the main lock live; v1 must be kept as the previous revision.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from testinfra.host import Host

WORK = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
SCENARIO = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"])
ROOT = "/srv/vllm/models/tiny-qwen2"


def lock(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        (WORK / "lockinv" / "models" / f"{name}.lock.yml").read_text()
    )
    return data


@pytest.fixture(scope="module")
def canary() -> str:
    """The plaintext token, decrypted from its only source, vault.yml."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    text = (SCENARIO / "vars" / "vault.yml").read_text()
    block = "\n".join(
        line.strip() for line in text.split("!vault |", 1)[1].splitlines() if line.strip()
    )
    secret = VaultSecret((SCENARIO / "vault-password.txt").read_bytes().strip())
    token: str = VaultLib([("default", secret)]).decrypt(block).decode()
    assert token.startswith("hf_CANARY"), "could not decrypt the canary"
    return token


def test_lock_files_resolved_by_lock_model(host: Host) -> None:
    fixture = json.loads((WORK / "fixture.json").read_text())
    v1, main = lock("v1"), lock("main")
    assert v1["commit"] == fixture["v1"] and v1["revision"] == "v1"
    assert main["commit"] == fixture["main"] and main["revision"] == "main"
    expected = {
        p: (f["size"], f["sha256"]) for p, f in fixture["files_v1"].items() if p != "README.md"
    }
    assert {f["path"]: (f["size"], f["sha256"]) for f in v1["files"]} == expected


@pytest.mark.parametrize("name", ["v1", "main"])
def test_lock_model_stored_the_locked_config_beside_the_lock(host: Host, name: str) -> None:
    """lock_model.yml stores models/NAME/config.json: the locked commit's bytes, whose sha256
    is the lock's entry (the plan reads it; the host gets the same bytes)."""
    stored = (WORK / "lockinv" / "models" / name / "config.json").read_bytes()
    entry = next(f for f in lock(name)["files"] if f["path"] == "config.json")
    assert hashlib.sha256(stored).hexdigest() == entry["sha256"]
    assert len(stored) == entry["size"]
    live = host.file(f"{ROOT}/{lock(name)['commit']}/config.json")
    assert live.sha256sum == entry["sha256"]


def test_current_is_main_and_v1_kept(host: Host) -> None:
    current = host.file(f"{ROOT}/current")
    assert current.is_symlink
    assert current.linked_to == f"{ROOT}/{lock('main')['commit']}"
    assert host.file(f"{ROOT}/{lock('v1')['commit']}").is_directory


@pytest.mark.parametrize("name", ["v1", "main"])
def test_every_live_byte_matches_its_lock(host: Host, name: str) -> None:
    locked = lock(name)
    rev = f"{ROOT}/{locked['commit']}"
    listed = host.run(f"cd {rev} && find . -mindepth 1 -printf '%P\\n' | sort").stdout.split()
    assert listed == sorted(f["path"] for f in locked["files"]), "only locked files in a revision"
    sums = host.run(f"cd {rev} && sha256sum -- " + " ".join(f["path"] for f in locked["files"]))
    assert sums.rc == 0
    got = dict(reversed(line.split(maxsplit=1)) for line in sums.stdout.splitlines())
    assert got == {f["path"]: f["sha256"] for f in locked["files"]}


def test_no_partial_or_staged_files_left(host: Host) -> None:
    out = host.run(
        f"find {ROOT} -name '*.incomplete' -o -path '*/.staging/*' -type f ! -name '*.progress'"
    )
    assert out.stdout.strip() == ""


def test_stamp_records_every_file(host: Host) -> None:
    main = lock("main")
    stamp = json.loads(host.file(f"{ROOT}/.stamps/{main['commit']}.json").content_string)
    assert sorted(stamp["files"]) == sorted(f["path"] for f in main["files"])
    for f in main["files"]:
        size, _mtime_ns, ino, _dev, _ctime_ns = stamp["files"][f["path"]]["key"]
        st = host.run(f"stat -c '%s %i' {ROOT}/current/{f['path']}").stdout.split()
        assert [size, ino] == [int(st[0]), int(st[1])]
        assert stamp["files"][f["path"]]["sha256"] == f["sha256"]


def test_prestaged_model_is_live(host: Host) -> None:
    link = host.file("/srv/vllm/models/tiny-prestaged/current")
    assert link.linked_to == f"/srv/vllm/models/tiny-prestaged/{lock('v1')['commit']}"
    assert not host.file("/srv/vllm/models/tiny-prestaged-bad/current").exists


def test_token_absent_from_host_filesystem(host: Host, canary: str) -> None:
    out = host.run(
        "grep -rlF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -e "
        f"'{canary}' / 2>/dev/null; true"
    )
    assert out.stdout.strip() == ""
    journal = host.run(f"journalctl --no-pager 2>/dev/null | grep -cF '{canary}'; true")
    assert journal.stdout.strip() in ("0", "")


def test_the_client_did_send_the_token(canary: str) -> None:
    """The throttling proxy saw the bearer token (it logs only its sha256)."""
    seen = (WORK / "proxy-auth.sha256").read_text().split()
    assert hashlib.sha256(canary.encode()).hexdigest() in seen


def test_token_absent_from_logs_and_control_node(canary: str) -> None:
    log = WORK / "ansible.log"
    assert log.is_file() and log.stat().st_size > 0, "ANSIBLE_LOG_PATH kept no log"
    hits = subprocess.run(
        ["grep", "-rlF", "-D", "skip", "-e", canary, str(WORK), str(SCENARIO)],
        check=False,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert [h for h in hits if not h.endswith("vault.yml")] == []


@pytest.mark.parametrize("name", ["v1", "main"])
def test_lock_recorded_for_the_start_check(host: Host, name: str) -> None:
    locked = lock(name)
    record = host.file(f"{ROOT}/.locks/{locked['commit']}.json")
    assert record.user == "root" and record.mode == 0o644
    data = json.loads(record.content_string)
    assert data == {"version": 1, "repo_id": locked["repo_id"], "commit": locked["commit"],
                    "files": locked["files"]}


def test_start_check_installed_and_passes_as_an_unprivileged_user(host: Host) -> None:
    check = host.file("/usr/local/bin/vllm-model-check")
    assert check.user == "root" and check.mode == 0o755
    for root in (ROOT, "/srv/vllm/models/tiny-prestaged"):
        out = host.run(f"runuser -u nobody -- /usr/local/bin/vllm-model-check {root}/current")
        assert out.rc == 0 and "0 hashed" in out.stdout, out.stderr


def test_live_files_have_one_name(host: Host) -> None:
    """Copies, never hard links: no other name can change a live byte."""
    out = host.run("find /srv/vllm/models -type f -links +1 -printf '%p\\n'")
    assert out.rc == 0 and out.stdout.strip() == ""
