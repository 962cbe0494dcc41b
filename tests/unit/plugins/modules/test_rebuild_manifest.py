"""The rebuild comparison: deploy_manifest (what is on the host) and manifest_diff."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]

from ansible_collections.vllm_fleet.serving.plugins.filter.rebuild_report import manifest_diff  # noqa: E402
from ansible_collections.vllm_fleet.serving.plugins.modules.deploy_manifest import build_manifest  # noqa: E402


def deployed(root: Path) -> Path:
    (root / "venv/lib/pkg/__pycache__").mkdir(parents=True)
    (root / "venv/lib/pkg/mod.py").write_text("x = 1\n")
    (root / "venv/lib/pkg/__pycache__/mod.cpython-311.pyc").write_bytes(b"\x00volatile")
    (root / "venv/lib/pkg/stray.pyc").write_bytes(b"\x01")
    (root / "models/rev1").mkdir(parents=True)
    (root / "models/rev1/config.json").write_text("{}\n")
    (root / "models/current").symlink_to("rev1")
    (root / "etc").mkdir()
    (root / "etc/vllm-0.service").write_text("[Service]\n")
    (root / "etc/vllm-1.service").write_text("[Service]\nX=1\n")
    return root


def test_manifest_hashes_files_records_links_and_skips_excluded(tmp_path: Path) -> None:
    root = deployed(tmp_path)
    manifest, roots, total = build_manifest(
        [str(root / "venv"), str(root / "models"), str(root / "etc/vllm-*.service"),
         str(root / "absent")], exclude=["__pycache__", "*.pyc"])
    assert roots == sorted(str(root / p) for p in
                           ("venv", "models", "etc/vllm-0.service", "etc/vllm-1.service"))
    assert sorted(manifest) == sorted(str(root / p) for p in (
        "venv/lib/pkg/mod.py", "models/rev1/config.json", "models/current",
        "etc/vllm-0.service", "etc/vllm-1.service"))
    digest = hashlib.sha256(b"x = 1\n").hexdigest()
    mode = os.stat(root / "venv/lib/pkg/mod.py").st_mode & 0o7777
    assert manifest[str(root / "venv/lib/pkg/mod.py")].startswith(f"sha256:{digest} {mode:04o} ")
    assert manifest[str(root / "models/current")] == "symlink:rev1"
    assert total == len("x = 1\n") + len("{}\n") + len("[Service]\n") + len("[Service]\nX=1\n")


def test_identical_rebuild_has_no_difference(tmp_path: Path) -> None:
    a = build_manifest([str(deployed(tmp_path / "a"))])[0]
    b = build_manifest([str(tmp_path / "a")])[0]
    diff = manifest_diff(a, b)
    assert diff["identical"] and diff["same"] == len(a) and not diff["changed"]


@pytest.mark.parametrize("drift", ["content", "mode", "link", "added", "removed"])
def test_every_kind_of_drift_is_reported(tmp_path: Path, drift: str) -> None:
    root = deployed(tmp_path)
    before = build_manifest([str(root)], ["__pycache__", "*.pyc"])[0]
    unit = root / "etc/vllm-0.service"
    if drift == "content":
        unit.write_text("[Service]\nRestart=no\n")
    elif drift == "mode":
        unit.chmod(0o600)
    elif drift == "link":
        (root / "models/current").unlink()
        (root / "models/current").symlink_to("rev2")
    elif drift == "added":
        (root / "etc/extra.conf").write_text("x\n")
    else:
        unit.unlink()
    diff = manifest_diff(before, build_manifest([str(root)], ["__pycache__", "*.pyc"])[0])
    assert not diff["identical"]
    changed = [c["path"] for c in diff["changed"]]
    expected = {"content": (changed, str(unit)), "mode": (changed, str(unit)),
                "link": (changed, str(root / "models/current")),
                "added": (diff["added"], str(root / "etc/extra.conf")),
                "removed": (diff["removed"], str(unit))}[drift]
    assert expected[0] == [expected[1]]


def test_manifest_diff_refuses_what_is_not_a_manifest() -> None:
    with pytest.raises(ValueError, match="manifest_diff"):
        manifest_diff(["a"], {})  # type: ignore[arg-type]


def test_rebuild_covers_the_model_revision_the_start_check_and_the_recorded_lock() -> None:
    """The env files (each names the model revision), the start check and the lock it reads
    are rebuilt and compared; only the model role's volatile bookkeeping is left out."""
    import yaml

    plays = yaml.safe_load((ROOT / "playbooks/rebuild.yml").read_text())
    play_vars = next(p for p in plays if "rebuild_paths" in p.get("vars", {}))["vars"]
    paths = play_vars["rebuild_paths"]
    assert "{{ _rebuild_config_dir }}" in paths and play_vars["_rebuild_config_dir"].endswith(
        "'/etc/vllm') }}")
    assert "/usr/local/bin/vllm-model-check" in paths
    assert "{{ _rebuild_root }}/models" in paths
    assert ".locks" not in play_vars["rebuild_exclude"]
    manifest, _roots, _total = build_manifest(
        [str(ROOT / "roles/model_artifacts/files")], play_vars["rebuild_exclude"])
    assert any(p.endswith("vllm-model-check.py") for p in manifest)
