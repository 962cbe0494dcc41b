"""filter_plugins/model_config.py: the plan's config.json, checked against the model's lock."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.serving.plugins.filter.model_config import (
    FilterModule,
    model_config,
)

ROOT = Path(__file__).resolve().parents[4]
LOCAL = ROOT / "inventories" / "local" / "models"
COMMIT = "3754c24872ca2ab3d7c72c17215c54b99197deba"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """A copy of the local inventory's model folder and lock (the config matches the lock)."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copytree(LOCAL / "tiny-qwen2", models / "tiny-qwen2")
    shutil.copy(LOCAL / "tiny-qwen2.lock.yml", models / "tiny-qwen2.lock.yml")
    return tmp_path


def paths(inv: Path) -> tuple[str, str]:
    return (str(inv / "models/tiny-qwen2/config.json"), str(inv / "models/tiny-qwen2.lock.yml"))


def refusal(*args: object) -> str:
    with pytest.raises(AnsibleFilterError) as err:
        model_config(*args)
    return str(err.value.message)


def test_the_filter_is_registered() -> None:
    assert FilterModule().filters()["model_config"] is model_config


def test_the_locked_config_is_read_and_the_note_says_it_was_checked(inventory: Path) -> None:
    config, lock = paths(inventory)
    got = model_config(config, lock, str(inventory))
    assert got["text"] == Path(config).read_text()
    assert got["note"] == ("models/tiny-qwen2/config.json, sha256 checked against"
                           f" models/tiny-qwen2.lock.yml (commit {COMMIT[:12]})")


def test_a_tampered_config_is_refused_naming_both_files_and_the_fix(inventory: Path) -> None:
    config, lock = paths(inventory)
    data = Path(config).read_bytes().replace(b'"num_hidden_layers": 4', b'"num_hidden_layers": 8')
    assert data != Path(config).read_bytes()
    Path(config).write_bytes(data)
    msg = refusal(config, lock, str(inventory))
    assert msg.startswith(f"vllm_plan_model_config_file {config} is not the config.json locked"
                          f" in {lock}")
    assert hashlib.sha256(data).hexdigest() in msg
    assert "afddec1026a9a65c8581f7ebb7f4bd7b93b1f50da7faa9ac23067856473d23f6" in msg
    assert ("playbooks/lock_model.yml -e lock_model_name=tiny-qwen2"
            f" -e lock_model_repo_id=local/tiny-qwen2 -e lock_model_revision={COMMIT}") in msg
    assert f"restore the file (e.g. `git checkout -- {config}`)" in msg


def test_even_whitespace_is_a_different_config(inventory: Path) -> None:
    config, lock = paths(inventory)
    with open(config, "ab") as fh:
        fh.write(b" ")
    assert "is not the config.json locked in" in refusal(config, lock)


def test_a_missing_config_beside_a_lock_is_refused_with_the_fix(inventory: Path) -> None:
    config, lock = paths(inventory)
    Path(config).unlink()
    msg = refusal(config, lock)
    assert f"vllm_plan_model_config_file {config}: cannot read it" in msg
    assert "lock_model.yml -e lock_model_name=tiny-qwen2" in msg and "restore" in msg


def test_a_lock_without_config_json_is_refused(inventory: Path) -> None:
    config, lock = paths(inventory)
    text = Path(lock).read_text().replace('"config.json"', '"other.json"')
    Path(lock).write_text(text)
    assert "the lock has no config.json, which the plan reads" in refusal(config, lock)


def test_a_malformed_lock_is_refused_by_name(inventory: Path) -> None:
    config, lock = paths(inventory)
    Path(lock).write_text(Path(lock).read_text().replace(COMMIT, "main"))
    msg = refusal(config, lock)
    assert msg.startswith("vllm_plan_model_lock_file: ") and "is not pinned" in msg


def test_without_a_lock_the_config_is_read_unchecked_and_the_note_says_so(
        inventory: Path) -> None:
    config, lock = paths(inventory)
    Path(lock).unlink()
    with open(config, "ab") as fh:
        fh.write(b" ")
    got = model_config(config, lock, str(inventory))
    assert got["text"] == Path(config).read_text()
    assert got["note"].startswith("models/tiny-qwen2/config.json, not checked: no lock"
                                  " models/tiny-qwen2.lock.yml (a plan only: site.yml's model"
                                  " stage needs the lock")
    assert "not checked: vllm_plan_model_lock_file is empty" in model_config(config)["note"]


def test_no_config_at_all_names_the_variables_to_set() -> None:
    msg = refusal("", "")
    assert "Set model_artifacts_name" in msg and "vllm_plan_model_config_file" in msg
    msg = refusal("/nonexistent/config.json", "/nonexistent/x.lock.yml")
    assert msg.startswith("vllm_plan_model_config_file /nonexistent/config.json: cannot read")
