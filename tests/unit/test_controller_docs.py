"""scripts/controller-test.sh runs the control-node commands README.md and docs/real-hosts.md
give, so the two cannot drift: the install block of each page is the script's install steps,
line for line; each page copies the example inventory as the script does and starts its plan
block with the script's plan steps; the tarball the commands name is galaxy.yml's version; and
`make test` runs the script (the host lane's --host-first list)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "controller-test.sh"
FENCED_SH = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
COMMENT = re.compile(r"\s+#\s.*$")
COPY_INVENTORY = "cp -r inventories/example ~/inv"


def script_steps(text: str | None = None) -> tuple[list[str], list[str]]:
    """The script's ONLINE_STEPS and OFFLINE_STEPS, one command a line."""
    text = SCRIPT.read_text() if text is None else text
    steps = []
    for name in ("ONLINE_STEPS", "OFFLINE_STEPS"):
        found = re.search(rf"^readonly {name}='([^']*)'$", text, re.M)
        assert found, f"{SCRIPT.name} has no readonly {name}='...'"
        steps.append(found.group(1).splitlines())
    return steps[0], steps[1]


def section(page: Path, heading: str) -> str:
    """The text of the page from the heading to the next heading of the same or higher level."""
    text = page.read_text()
    found = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.M)
    assert found, f"{page.name} has no heading {heading!r}"
    level = len(found.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, found.end())
    return text[found.end():end.start() if end else len(text)]


def blocks(text: str) -> list[list[str]]:
    """The ```sh blocks of the text, each as its command lines without trailing comments."""
    return [[COMMENT.sub("", line).rstrip() for line in body.splitlines() if line.strip()]
            for body in FENCED_SH.findall(text)]


def check_page(text: str, online: list[str], offline: list[str]) -> list[str]:
    """What in the page's control-node text differs from the script's steps."""
    problems = []
    copy_at = offline.index(COPY_INVENTORY)
    install, plan = online + offline[:copy_at], offline[copy_at + 1:]
    sh = blocks(text)
    if not sh or sh[0] != install:
        problems.append(f"the first sh block is {sh[0] if sh else None}, the script installs with "
                        f"{install}")
    if COPY_INVENTORY not in INLINE_CODE.findall(text):
        problems.append(f"no `{COPY_INVENTORY}`")
    if not any(block[:len(plan)] == plan for block in sh):
        problems.append(f"no sh block starts with the script's plan steps {plan}")
    return problems


PAGES = [("README.md", "Pointing it at real H100/H200 hosts"),
         ("docs/real-hosts.md", "Pointing it at real H100/H200 hosts")]


@pytest.mark.parametrize(("page", "heading"), PAGES)
def test_page_gives_the_commands_the_script_runs(page: str, heading: str) -> None:
    online, offline = script_steps()
    assert check_page(section(ROOT / page, heading), online, offline) == []


def test_a_changed_command_is_found() -> None:
    online, offline = script_steps()
    text = section(ROOT / "README.md", PAGES[0][1])
    drifted = text.replace("ansible-galaxy collection install -p ~/.ansible/collections -r",
                           "ansible-galaxy collection install -r", 1)
    assert drifted != text
    assert check_page(drifted, online, offline)
    assert check_page(text.replace("-i ~/inv/hosts.yml vllm_fleet.serving.plan",
                                   "-i ~/inv vllm_fleet.serving.plan"), online, offline)


def test_tarball_is_galaxy_version() -> None:
    version = re.search(r"^version: *(\S+)", (ROOT / "galaxy.yml").read_text(), re.M)
    assert version
    named = {m for step in script_steps()[1]
             for m in re.findall(r"build/vllm_fleet-serving-(\S+)\.tar\.gz", step)}
    assert named == {version.group(1)}


def test_make_test_runs_it() -> None:
    makefile = (ROOT / "Makefile").read_text()
    first = re.search(r'--host-first "([^"]*)"', makefile)
    assert first and "controller-test" in first.group(1).split()
    assert re.search(r"^controller-test:.*\n\t.*scripts/controller-test\.sh", makefile, re.M)
