"""README.md and docs/*.md: every relative Markdown link points at an existing path (and at an
existing heading, where it names one), README.md links to every docs page, and README.md stays
at most 2,500 words (the newcomer's README of issue 35)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_MAX_WORDS = 2500

FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def pages(root: Path = ROOT) -> list[Path]:
    """The Markdown files whose links are checked: README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def without_code(text: str) -> str:
    """The text with fenced blocks and inline code spans removed (no links live there)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, duplicates numbered as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of one page that point at nothing: 'target (why)'."""
    broken = []
    for target in LINK.findall(without_code(page.read_text())):
        if SCHEME.match(target):
            continue  # http(s), mailto: not checked offline
        path_part, fragment = target.split("#", 1) if "#" in target else (target, "")
        dest = page if not path_part else page.parent / path_part
        if not dest.exists():
            broken.append(f"{target} (no such path)")
            continue
        if not dest.resolve().is_relative_to(root.resolve()):
            broken.append(f"{target} (outside the repository)")
            continue
        if fragment and dest.suffix == ".md" and dest.is_file() and fragment not in anchors(dest):
            broken.append(f"{target} (no heading #{fragment} in {dest.name})")
    return broken


def words(path: Path) -> int:
    return len(path.read_text().split())


def test_links_resolve() -> None:
    problems = {
        str(page.relative_to(ROOT)): bad for page in pages() if (bad := broken_links(page))
    }
    assert not problems, f"broken relative links: {problems}"


def test_readme_links_every_docs_page() -> None:
    docs = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert docs, "docs/ has no pages"
    linked = {Path(t.partition("#")[0]).name for t in LINK.findall(
        without_code((ROOT / "README.md").read_text())) if t.startswith("docs/")}
    missing = [name for name in docs if name not in linked]
    assert not missing, f"README.md does not link to docs/{missing}"


def test_readme_word_limit() -> None:
    count = words(ROOT / "README.md")
    assert count <= README_MAX_WORDS, (
        f"README.md has {count} words, more than {README_MAX_WORDS}: move details to docs/")


def test_checks_can_fail(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Its part\n\ntext\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Top\n\n"
        "[ok](docs/a.md) [ok anchor](docs/a.md#its-part) [self](#top) [web](https://x.org/y)\n"
        "[gone](docs/missing.md) [bad anchor](docs/a.md#nowhere) [bad self](#nope)\n"
        "[escape](../outside.md)\n"
        "`[in code](docs/missing-too.md)`\n\n"
        "```text\n[in a block](docs/missing-three.md)\n```\n")
    (tmp_path.parent / "outside.md").write_text("x")
    assert broken_links(readme, tmp_path) == [
        "docs/missing.md (no such path)",
        "docs/a.md#nowhere (no heading #nowhere in a.md)",
        "#nope (no heading #nope in README.md)",
        "../outside.md (outside the repository)",
    ]
    readme.write_text("word " * (README_MAX_WORDS + 1))
    assert words(readme) > README_MAX_WORDS


def test_slug() -> None:
    assert slug("The flow: `playbooks/site.yml`") == "the-flow-playbookssiteyml"
    assert slug("Engine: `vllm_server`") == "engine-vllm_server"
    assert slug("Layer kinds and vLLM's hybrid KV-cache manager") == (
        "layer-kinds-and-vllms-hybrid-kv-cache-manager")
