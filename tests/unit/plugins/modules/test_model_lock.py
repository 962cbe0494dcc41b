"""model_lock: lock validation (the notes' fake pins among the refusals) and rendering."""

from __future__ import annotations

import copy
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from ansible_collections.vllm_fleet.serving.plugins.modules.model_lock import (
    LockError,
    build_lock,
    config_problem,
    parse_lock,
    render_lock,
    select_paths,
)

DATA = Path(__file__).resolve().parents[3] / "data" / "model_artifacts"
# The operator's notes, in shared/ beside the checkout (as laid for sessions and CI).
SEED = Path(__file__).resolve().parents[5] / "shared" / "seed" / "000_5828da09f54cf884.txt"
COMMIT = "7e5b83c1218fc5044c54e6c9e40c4a6b1320f2ac"
DIGEST = "b2976c51838a8f2143317d3c8de7d446cb7248059e60daf628e2c18babb18d9d"


def good() -> dict[str, Any]:
    return {
        "repo_id": "fixture-org/tiny-qwen2",
        "revision": "v1",
        "commit": COMMIT,
        "files": [
            {"path": "config.json", "size": 397, "sha256": DIGEST},
            {"path": "model-00001-of-00002.safetensors", "size": 3145728, "sha256": "1" * 64},
        ],
    }


def refused(data: object) -> list[str]:
    with pytest.raises(LockError) as err:
        parse_lock(data, "test.lock.yml")
    assert str(err.value).startswith("test.lock.yml: refused")
    return err.value.errors


def notes_pins() -> list[tuple[str, str]]:
    pairs = []
    for line in (DATA / "notes-pins.txt").read_text().splitlines():
        m = re.fullmatch(r"sha256:(\S+) (\S+)", line)
        assert m, line
        pairs.append((m.group(2), m.group(1)))
    return pairs


def test_a_good_lock_is_accepted_and_sorted() -> None:
    data = good()
    data["files"].reverse()
    lock = parse_lock(data)
    assert lock["commit"] == COMMIT
    assert [f["path"] for f in lock["files"]] == ["config.json", "model-00001-of-00002.safetensors"]


def test_notes_pins_are_copied_verbatim_from_the_notes() -> None:
    if not SEED.exists():
        pytest.skip("the operator's notes are not on this machine")
    seed = SEED.read_text()
    for line in (DATA / "notes-pins.txt").read_text().splitlines():
        assert line in seed


def test_the_notes_five_fake_pins_are_refused_each_by_path() -> None:
    pins = notes_pins()
    assert len(pins) == 6
    data = good()
    data["files"] = [{"path": p, "size": 1, "sha256": d} for p, d in pins]
    errors = refused(data)
    bad = {p: len(d) for p, d in pins if len(d) != 64}
    assert sorted(bad.values()) == [65, 65, 65, 66, 66]
    assert len(errors) == 5
    for path, length in bad.items():
        [msg] = [e for e in errors if f"({path})" in e]
        assert f"has {length} hex characters, a sha256 digest has 64" in msg
    # The one 64-character string is well-formed (the notes' digests are still not real:
    # only a lock resolved from the Hub is deployed).
    assert not any("model-00001-of-00005.safetensors" in e for e in errors)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["files"][0].pop("size"), "files[0] (config.json): size is missing"),
        (
            lambda d: d["files"][0].update(size=-1),
            "files[0] (config.json): size -1 is not a byte count",
        ),
        (
            lambda d: d["files"][0].update(size=True),
            "files[0] (config.json): size True is not a byte count",
        ),
        (
            lambda d: d["files"][0].update(size="397"),
            "files[0] (config.json): size '397' is not a byte count",
        ),
        (lambda d: d["files"][0].pop("sha256"), "files[0] (config.json): sha256 is missing"),
        (lambda d: d["files"][0].update(sha256=DIGEST.upper()), "upper-case hex"),
        (lambda d: d["files"][0].update(sha256="sha256:" + DIGEST), "is not 64 lower-case hex"),
        (lambda d: d["files"][0].update(sha256=DIGEST[:63] + "g"), "is not 64 lower-case hex"),
        (
            lambda d: d["files"].append(dict(d["files"][0])),
            "files[2] (config.json): duplicate path, also files[0]",
        ),
        (
            lambda d: d["files"][0].update(path="../etc/passwd"),
            "files[0] (../etc/passwd): path '../etc/passwd' must be relative",
        ),
        (lambda d: d["files"][0].update(path="/etc/passwd"), "must be relative"),
        (lambda d: d["files"][0].update(path=".cache/x"), "under .cache"),
        (lambda d: d["files"][0].update(extra=1), "unknown keys ['extra']"),
        (lambda d: d.update(commit="main"), "commit 'main' is not pinned"),
        (lambda d: d.update(commit="v1.0"), "commit 'v1.0' is not pinned"),
        (lambda d: d.update(commit=COMMIT[:12]), "is not pinned"),
        (lambda d: d.update(commit=COMMIT.upper()), "is not pinned"),
        (lambda d: d.pop("commit"), "commit None is not pinned"),
        (lambda d: d.update(repo_id="tiny-qwen2"), "repo_id 'tiny-qwen2' is not 'org/name'"),
        (lambda d: d.update(files=[]), "files is missing or empty"),
        (lambda d: d["files"].__setitem__(0, "config.json"), "files[0]: not a mapping"),
    ],
)
def test_bad_locks_are_refused_naming_the_path(mutate: Any, expected: str) -> None:
    data = copy.deepcopy(good())
    mutate(data)
    assert any(expected in e for e in refused(data)), refused(data)


def test_not_a_mapping() -> None:
    assert refused(["files"]) == ["the lock is not a mapping (repo_id, commit, files)"]


def test_all_errors_are_reported_at_once() -> None:
    data = good()
    data["commit"] = "main"
    data["files"][0]["sha256"] = "0" * 65
    data["files"][1].pop("size")
    assert len(refused(data)) == 3


def test_render_round_trips_through_yaml() -> None:
    lock = build_lock(
        "fixture-org/tiny-qwen2",
        "v1",
        COMMIT,
        [
            ('we"ird name.json', 3, DIGEST),
            ("config.json", 397, "1" * 64),
        ],
    )
    text = render_lock(lock)
    assert text.startswith("---\n")
    assert parse_lock(yaml.safe_load(text)) == lock


def test_build_lock_refuses_what_parse_refuses() -> None:
    with pytest.raises(LockError, match="config.json"):
        build_lock("o/n", "main", COMMIT, [("config.json", 1, "0" * 65)])


def test_select_paths_like_allow_patterns() -> None:
    paths = [
        "config.json",
        "README.md",
        "model-00001-of-00002.safetensors",
        "sub/x.json",
        ".gitattributes",
    ]
    assert select_paths(paths, ["*.json", "*.safetensors"]) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "sub/x.json",
    ]
    assert select_paths(paths, ["nothing"]) == []


def test_the_notes_as_a_lock_file_is_refused_with_every_path_named() -> None:
    data = yaml.safe_load((DATA / "notes.lock.yml").read_text())
    errors = refused(data)
    assert errors[0].startswith("commit 'main' is not pinned")
    assert sum("size is missing" in e for e in errors) == 6
    digest_errors = [e for e in errors if "hex characters" in e]
    assert [e.split(" ")[1] for e in digest_errors] == [
        "(config.json):",
        "(model-00002-of-00005.safetensors):",
        "(model-00003-of-00005.safetensors):",
        "(model-00004-of-00005.safetensors):",
        "(model-00005-of-00005.safetensors):",
    ]
    assert len(errors) == 12


def test_config_problem_compares_the_bytes_with_the_locked_config() -> None:
    data = b'{"model_type": "qwen2"}\n'
    lock = good()
    lock["files"][0] = {"path": "config.json", "size": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()}
    parsed = parse_lock(lock)
    assert config_problem(parsed, data) is None
    problem = config_problem(parsed, data + b" ")
    assert problem is not None
    assert problem.startswith(f"its sha256 is {hashlib.sha256(data + b' ').hexdigest()}, the"
                              f" lock's config.json is {hashlib.sha256(data).hexdigest()}")
    assert f"(fixture-org/tiny-qwen2@{COMMIT})" in problem
    del lock["files"][0]
    assert "the lock has no config.json" in str(config_problem(parse_lock(lock), data))
