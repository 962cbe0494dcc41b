"""model_verify: hashing, stamps (re-runs hash nothing), removal of bad files, preflight,
pre-staging and the atomic switch - on real files in a temporary directory."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.serving.plugins.modules.model_verify import (
    LockedFile,
    VerifyError,
    bytes_missing,
    copy_file,
    hash_many,
    preflight,
    promote,
    read_live,
    repair,
    sha256_file,
    stage,
    verify_dir,
)

COMMIT_A = "a" * 40
COMMIT_B = "b" * 40


def make_files(root: Path, sizes: dict[str, int]) -> list[LockedFile]:
    files: list[LockedFile] = []
    for i, (path, size) in enumerate(sorted(sizes.items())):
        data = bytes((i + j) % 251 for j in range(size))
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        files.append({"path": path, "size": size, "sha256": hashlib.sha256(data).hexdigest()})
    return files


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, list[LockedFile]]:
    root = tmp_path / "staging"
    files = make_files(
        root, {"config.json": 300, "a.safetensors": 3 << 20, "sub/b.safetensors": 1 << 20}
    )
    return root, files


def test_sha256_file_matches_hashlib_and_sha256sum(tmp_path: Path) -> None:
    p = tmp_path / "x"
    p.write_bytes(os.urandom(3 << 20) + b"tail")
    assert sha256_file(str(p)) == hashlib.sha256(p.read_bytes()).hexdigest()
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert sha256_file(str(empty)) == hashlib.sha256(b"").hexdigest()


def test_hash_many_in_a_pool_equals_one_by_one(model: tuple[Path, list[LockedFile]]) -> None:
    root, files = model
    paths = [str(root / f["path"]) for f in files]
    assert (
        hash_many(paths, jobs=3)
        == hash_many(paths, jobs=1)
        == {str(root / f["path"]): f["sha256"] for f in files}
    )


def test_first_run_hashes_all_then_the_stamp_makes_reruns_hash_nothing(
    model: tuple[Path, list[LockedFile]], tmp_path: Path
) -> None:
    root, files = model
    stamp = tmp_path / "stamp.json"
    first = verify_dir(root, files, stamp)
    assert first.ok and first.hashed_files == 3 and first.stamp_changed
    again = verify_dir(root, files, stamp)
    assert again.ok and again.hashed_files == 0 and again.stamped == 3 and not again.stamp_changed
    full = verify_dir(root, files, stamp, full=True)
    assert full.ok and full.hashed_files == 3 and not full.stamp_changed


def test_a_rewritten_file_is_rehashed_even_with_size_and_mtime_restored(
    model: tuple[Path, list[LockedFile]], tmp_path: Path
) -> None:
    root, files = model
    stamp = tmp_path / "stamp.json"
    verify_dir(root, files, stamp)
    target = root / "a.safetensors"
    st = target.stat()
    with target.open("r+b") as fh:  # same inode, same size
        fh.seek(1000)
        fh.write(b"\xff")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    report = verify_dir(root, files, stamp)
    assert report.hashed_files == 1
    assert report.bad == [
        f"a.safetensors: sha256 {sha256_file(str(target))}, the lock says {files[0]['sha256']}"
    ]
    assert not report.ok


def test_a_digest_changed_in_the_lock_is_not_trusted_from_the_stamp(
    model: tuple[Path, list[LockedFile]], tmp_path: Path
) -> None:
    root, files = model
    stamp = tmp_path / "stamp.json"
    verify_dir(root, files, stamp)
    other = [dict(f) for f in files]
    other[1]["sha256"] = "0" * 64
    report = verify_dir(root, other, stamp)  # type: ignore[arg-type]
    assert (
        report.hashed_files == 1 and len(report.bad) == 1 and "config.json: sha256" in report.bad[0]
    )


def test_bad_missing_and_extra_files(model: tuple[Path, list[LockedFile]], tmp_path: Path) -> None:
    root, files = model
    (root / "config.json").write_bytes(b"x" * 300)  # same size, other bytes
    (root / "sub" / "b.safetensors").unlink()
    (root / ".cache" / "huggingface").mkdir(parents=True)
    (root / ".cache" / "huggingface" / "x.metadata").write_text("m")
    (root / "README.md").write_text("not locked")
    stamp = tmp_path / "stamp.json"
    report = verify_dir(root, files, stamp, remove_bad=True, prune=True)
    assert report.missing == ["sub/b.safetensors"]
    assert [b.split(":")[0] for b in report.bad] == ["config.json"]
    assert report.removed == ["config.json"] and not (root / "config.json").exists()
    assert report.pruned == [".cache/huggingface/x.metadata", "README.md"]
    assert sorted(os.listdir(root)) == ["a.safetensors"]  # emptied sub/ and .cache/ go too
    assert not stamp.exists(), "no stamp for a failed verification"


def test_size_mismatch_is_caught_without_hashing(model: tuple[Path, list[LockedFile]]) -> None:
    root, files = model
    with (root / "a.safetensors").open("ab") as fh:
        fh.write(b"+")
    report = verify_dir(root, files)
    assert report.bad == [f"a.safetensors: size {(3 << 20) + 1}, the lock says {3 << 20}"]
    assert report.hashed_files == 2


def test_dry_run_changes_nothing(model: tuple[Path, list[LockedFile]], tmp_path: Path) -> None:
    root, files = model
    (root / "README.md").write_text("x")
    stamp = tmp_path / "stamp.json"
    report = verify_dir(root, files, stamp, prune=True, dry_run=True)
    assert report.pruned == ["README.md"] and (root / "README.md").exists() and not stamp.exists()


def test_preflight_needs_missing_bytes_plus_margin(
    model: tuple[Path, list[LockedFile]], tmp_path: Path
) -> None:
    root, files = model
    assert bytes_missing(files, [root]) == 0
    assert bytes_missing(files, [tmp_path / "nowhere"]) == sum(f["size"] for f in files)
    free = preflight(tmp_path / "nowhere" / "deeper", files, [tmp_path / "nowhere"], 0)
    assert free["needed_bytes"] == sum(f["size"] for f in files)
    with pytest.raises(
        VerifyError, match="not enough disk space .*model_artifacts_disk_margin_bytes"
    ):
        preflight(tmp_path / "nowhere", files, [], 1 << 60)
    # Everything already staged: nothing needed, whatever the margin.
    assert preflight(root, files, [root], 1 << 60)["needed_bytes"] == 0


def test_stage_copies_prestaged_files(model: tuple[Path, list[LockedFile]], tmp_path: Path) -> None:
    root, files = model
    dest = tmp_path / "dest"
    assert stage(root, dest, files) == sorted(f["path"] for f in files)
    assert not os.path.samefile(root / "a.safetensors", dest / "a.safetensors")
    assert os.stat(dest / "a.safetensors").st_nlink == 1
    assert stage(root, dest, files) == []
    with pytest.raises(VerifyError, match="lacks: nope.bin"):
        stage(root, dest, [*files, {"path": "nope.bin", "size": 1, "sha256": "0" * 64}])


def test_editing_the_prestaged_file_leaves_the_staged_copy(
    model: tuple[Path, list[LockedFile]], tmp_path: Path
) -> None:
    root, files = model
    dest = tmp_path / "dest"
    stage(root, dest, files)
    before = (dest / "config.json").read_bytes()
    with open(root / "config.json", "r+b") as fh:  # in place, as an editor or dd would
        fh.seek(10)
        fh.write(b"X")
    assert (dest / "config.json").read_bytes() == before
    assert verify_dir(dest, files, full=True).ok


def test_stage_replaces_a_hard_link_an_older_release_made(
    model: tuple[Path, list[LockedFile]], tmp_path: Path
) -> None:
    root, files = model
    dest = tmp_path / "dest"
    dest.mkdir()
    os.link(root / "config.json", dest / "config.json")
    assert "config.json" in stage(root, dest, files)
    assert not os.path.samefile(root / "config.json", dest / "config.json")


def test_copy_file_reflinks_or_copies(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_bytes(os.urandom(3 << 20))
    how = copy_file(src, tmp_path / "dst")
    assert how in ("reflink", "copy")
    assert (tmp_path / "dst").read_bytes() == src.read_bytes()
    assert os.stat(tmp_path / "dst").st_ino != os.stat(src).st_ino
    with pytest.raises(FileExistsError):  # never over an existing file
        copy_file(src, tmp_path / "dst")


def test_a_hard_linked_live_file_is_damage(
    model: tuple[Path, list[LockedFile]], tmp_path: Path
) -> None:
    root, files = model
    stamp = tmp_path / "stamp.json"
    assert verify_dir(root, files, stamp).ok
    os.link(root / "config.json", tmp_path / "prestaged-config.json")
    report = verify_dir(root, files, stamp)
    assert not report.ok and report.hashed_files == 0
    assert report.damaged == [{"path": "config.json",
                               "why": report.bad[0].split(": ", 1)[1]}]
    assert "hard-linked (2 names)" in report.bad[0]


def test_damaged_lists_missing_and_bad_files(model: tuple[Path, list[LockedFile]]) -> None:
    root, files = model
    (root / "sub/b.safetensors").unlink()
    with open(root / "a.safetensors", "r+b") as fh:
        fh.write(b"Z")
    damaged = verify_dir(root, files).damaged
    assert [d["path"] for d in damaged] == ["sub/b.safetensors", "a.safetensors"]
    assert damaged[0]["why"] == "missing"
    assert damaged[1]["why"].startswith("sha256 ")


def test_repair_renames_each_verified_file_over_the_damaged_one(
    model: tuple[Path, list[LockedFile]], tmp_path: Path
) -> None:
    root, files = model
    good = {f["path"]: (root / f["path"]).read_bytes() for f in files}
    staging = tmp_path / "restaged"
    (staging / "sub").mkdir(parents=True)
    (staging / "sub/b.safetensors").write_bytes(good["sub/b.safetensors"])
    (root / "sub/b.safetensors").write_bytes(b"tampered")
    other = os.stat(root / "a.safetensors").st_ino
    assert repair(staging, root, ["sub/b.safetensors"], dry_run=True) == ["sub/b.safetensors"]
    assert (root / "sub/b.safetensors").read_bytes() == b"tampered"
    assert repair(staging, root, ["sub/b.safetensors"]) == ["sub/b.safetensors"]
    assert (root / "sub/b.safetensors").read_bytes() == good["sub/b.safetensors"]
    assert not (staging / "sub/b.safetensors").exists()
    assert os.stat(root / "a.safetensors").st_ino == other  # the others untouched
    assert verify_dir(root, files, full=True).ok
    with pytest.raises(VerifyError, match="lacks: config.json"):
        repair(staging, root, ["config.json"])


def test_promote_prunes_the_recorded_lock_of_a_pruned_revision(tmp_path: Path) -> None:
    root = tmp_path / "model"
    (root / ".locks").mkdir(parents=True)
    for commit in (COMMIT_A, COMMIT_B, "c" * 40):
        (tmp_path / commit).mkdir()
        (tmp_path / commit / "config.json").write_text("{}")
        (root / ".locks" / f"{commit}.json").write_text("{}")
        promote(tmp_path / commit, root, commit, keep=2)
    assert sorted(p.name for p in (root / ".locks").iterdir()) == [
        f"{COMMIT_B}.json", f"{'c' * 40}.json"]


def test_promote_switches_atomically_and_keeps_the_previous(tmp_path: Path) -> None:
    root = tmp_path / "model"
    (root / ".staging" / COMMIT_A).mkdir(parents=True)
    (root / ".staging" / COMMIT_A / "config.json").write_text("a")
    first = promote(root / ".staging" / COMMIT_A, root, COMMIT_A, keep=2)
    assert first["changed"] and first["previous"] is None
    assert os.readlink(root / "current") == COMMIT_A
    assert promote(root / ".staging" / COMMIT_A, root, COMMIT_A, keep=2)["changed"] is False
    (root / ".staging" / COMMIT_B).mkdir()
    second = promote(root / ".staging" / COMMIT_B, root, COMMIT_B, keep=2)
    assert second["previous"] == COMMIT_A and second["pruned"] == []
    assert (root / "current").resolve() == (root / COMMIT_B).resolve() and (
        root / COMMIT_A
    ).is_dir()
    c = "c" * 40
    (root / ".staging" / c).mkdir()
    third = promote(root / ".staging" / c, root, c, keep=2)
    assert os.readlink(root / "current") == c
    assert (root / COMMIT_B).is_dir() and not (root / COMMIT_A).exists()
    assert third["pruned"] == [COMMIT_A]
    assert not (root / ".current.tmp").exists()


def test_promote_refuses_without_a_verified_directory(tmp_path: Path) -> None:
    with pytest.raises(VerifyError, match="neither"):
        promote(tmp_path / "none", tmp_path, COMMIT_A, keep=2)
    assert promote(tmp_path / "none", tmp_path / "absent", COMMIT_A, keep=2, dry_run=True)[
        "changed"
    ]


def test_promote_then_read_the_live_config(tmp_path: Path) -> None:
    """What the role hands the planner: the live revision's config.json, read in the same
    call as the switch; nothing before anything is live (a first --check run)."""
    root = tmp_path / "models"
    assert read_live(root, "config.json") is None
    staging = root / ".staging" / COMMIT_A
    staging.mkdir(parents=True)
    (staging / "config.json").write_text('{"num_hidden_layers": 4}')
    promote(staging, root, COMMIT_A, keep=2)
    assert read_live(root, "config.json") == '{"num_hidden_layers": 4}'
    assert read_live(root, "missing.json") is None
