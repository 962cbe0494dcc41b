"""One tag vocabulary: every tag on a task, block, role import or play under roles/,
playbooks/ and molecule/ is one of README.md's "Tags" table, which is the only list."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def vocabulary() -> dict[str, str]:
    """README.md's Tags table: tag -> what it selects."""
    text = (ROOT / "README.md").read_text()
    section = re.search(r"^### Tags\n(.*?)(?=^#)", text, re.M | re.S)
    assert section, 'README.md has no "### Tags" section'
    rows = re.findall(r"^\| `([a-z_]+)` \| [^|]+ \| (.+) \|$", section[1], re.M)
    assert rows, 'README.md\'s "Tags" section has no table rows'
    return dict(rows)


def task_files() -> list[Path]:
    files = [*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml"),
             *ROOT.glob("playbooks/*.yml"), *ROOT.glob("molecule/*/*.yml"),
             *ROOT.glob("molecule/*/tasks/*.yml")]
    return sorted(files)


def tags_in(node: Any) -> Iterator[str]:
    """Every tag of a parsed playbook or task list (plays, blocks, tasks, roles entries)."""
    if isinstance(node, dict):
        tags = node.get("tags")
        if isinstance(tags, str):
            yield from (t.strip() for t in tags.split(","))
        elif isinstance(tags, list):
            yield from (str(t) for t in tags)
        for value in node.values():
            yield from tags_in(value)
    elif isinstance(node, list):
        for item in node:
            yield from tags_in(item)


def test_the_vocabulary_is_small_and_documented() -> None:
    tags = vocabulary()
    assert 10 <= len(tags) <= 16, sorted(tags)
    assert {"preflight", "install", "configure", "service", "verify"} <= set(tags)
    assert all(meaning.strip() for meaning in tags.values())


def test_the_walker_finds_every_form() -> None:
    """The walker sees list, comma-string and nested (block, roles) tags: a walker that
    found nothing would pass every file."""
    parsed = [{"hosts": "all", "tags": "a, b", "roles": [{"role": "r", "tags": ["c"]}],
               "tasks": [{"block": [{"name": "t", "tags": ["d"]}], "tags": "e"}]}]
    assert sorted(tags_in(parsed)) == ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize("path", task_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_tag_is_in_the_vocabulary(path: Path) -> None:
    unknown = sorted(set(tags_in(yaml.safe_load(path.read_text()))) - set(vocabulary()))
    assert not unknown, (
        f"{path.relative_to(ROOT)}: tags {unknown} are not in README.md's Tags table. Fix: use "
        f"one of {sorted(vocabulary())}, or add the tag to the table with what it selects.")


def test_the_tags_are_used() -> None:
    """Every tag of the table selects something (always is Ansible's own)."""
    used: set[str] = set()
    for path in task_files():
        used |= set(tags_in(yaml.safe_load(path.read_text())))
    assert set(vocabulary()) - {"always"} <= used, sorted(set(vocabulary()) - used)
