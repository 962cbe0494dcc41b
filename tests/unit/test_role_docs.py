"""scripts/role-docs.py: each role README's variables table is generated from the role's
meta/argument_specs.yml; `--check` (make lint) fails on a stale README, `--write` (make docs)
fixes it, and the repository's READMEs are current."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from _scripts import ROOT, load_script

role_docs = load_script("scripts/role-docs.py", "role_docs")
SCRIPT = ROOT / "scripts" / "role-docs.py"

SPEC = """\
argument_specs:
  main:
    short_description: A demo role
    options:
      demo_port:
        type: int
        default: 8080
        description: Port clients connect to.
      demo_mode:
        type: str
        default: fast
        choices: [fast, safe]
        required: true
        description:
          - First paragraph
            continues on the next line.
          - Second paragraph with a pipe a|b and <angle> brackets.
      demo_paths:
        type: list
        elements: str
        default: [/v1/models, /health]
        description: >-
          Folded text
          over two lines.
      demo_gate:
        type: dict
        description: Gate thresholds.
        options:
          p50_ms:
            type: float
            default: 500
            description: Median below this.
      demo_labels:
        type: dict
        default: {team: ml, tier: "a|b"}
        description: Labels.
      demo_filter:
        type: str
        default: "{{ x | default('') }}"
        description: Computed by C(x | int) in C(defaults/main.yml).
  verify:
    short_description: Check the demo
    description: After the start.
    options:
      demo_port:
        type: int
        default: 8080
        description: Port clients connect to.
  packages:
    short_description: Packages only
    options: {}
"""

EXPECTED = """\
| variable | type | default | required | choices | description |
| --- | --- | --- | --- | --- | --- |
| `demo_port` | int | `8080` | no | | Port clients connect to. |
| `demo_mode` | str | `fast` | yes | `fast`, `safe` | MODE |
| `demo_paths` | list of str | `[/v1/models, /health]` | no | | Folded text over two lines. |
| `demo_gate` | dict | | no | | Gate thresholds. |
| `demo_gate.p50_ms` | float | `500` | no | | Median below this. |
| `demo_labels` | dict | `{team: ml, tier: a\\|b}` | no | | Labels. |
| `demo_filter` | str | `{{ x \\| default('') }}` | no | | FILTER |
""".replace("FILTER", "Computed by `x \\| int` in `defaults/main.yml`.").replace(
    "MODE",
    "First paragraph continues on the next line.<br>"
    "Second paragraph with a pipe a\\|b and &lt;angle&gt; brackets.",
)


def specs() -> dict[str, object]:
    data = yaml.safe_load(SPEC)["argument_specs"]
    assert isinstance(data, dict)
    return data


def test_render_gives_the_expected_table() -> None:
    block = role_docs.render(specs())
    assert block.startswith(role_docs.BEGIN + "\n") and block.endswith(role_docs.END + "\n")
    assert "Variables of the main entry point (A demo role):\n\n" + EXPECTED in block


def test_render_lists_other_entry_points_without_repeating_main_rows() -> None:
    block = role_docs.render(specs())
    assert "- `verify`: Check the demo. After the start. Takes `demo_port` (as above).\n" in block
    assert "- `packages`: Packages only. No variables.\n" in block
    assert block.count("`demo_port` |") == 1


def test_an_entry_point_option_main_lacks_gets_its_own_table() -> None:
    data = specs()
    data["verify"] = {
        "short_description": "Check",
        "options": {"demo_extra": {"type": "bool", "default": False, "description": "Extra."}},
    }
    block = role_docs.render(data)
    assert "  Variables of `verify` only:\n" in block
    assert "  | `demo_extra` | bool | `false` | no | | Extra. |\n" in block


def test_render_is_deterministic() -> None:
    assert role_docs.render(specs()) == role_docs.render(specs())


def test_update_keeps_the_hand_written_text_around_the_markers() -> None:
    readme = f"# demo\n\nIntro.\n\n{role_docs.BEGIN}\nold\n{role_docs.END}\n\n## Tests\n\nText.\n"
    new = role_docs.update(readme, "NEW\n", "demo")
    assert new == "# demo\n\nIntro.\n\nNEW\n\n## Tests\n\nText.\n"


def test_update_refuses_unbalanced_markers() -> None:
    with pytest.raises(role_docs.SpecError):
        role_docs.update(f"{role_docs.BEGIN}\nno end\n", "NEW\n", "demo")


def make_repo(tmp_path: Path, readme: str | None) -> Path:
    role = tmp_path / "roles" / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(SPEC)
    if readme is not None:
        (role / "README.md").write_text(readme)
    return role / "README.md"


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tmp_path), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_check_fails_on_a_stale_readme_and_passes_after_write(tmp_path: Path) -> None:
    hand = "# demo\n\nWhat it does.\n\n"
    readme = make_repo(tmp_path, f"{hand}{role_docs.BEGIN}\nstale\n{role_docs.END}\n\nAfter.\n")
    stale = run(tmp_path, "--check")
    assert stale.returncode == 1
    assert "roles/demo/README.md is stale" in stale.stderr
    assert "make docs" in stale.stderr

    wrote = run(tmp_path, "--write")
    assert wrote.returncode == 0, wrote.stderr
    text = readme.read_text()
    assert text.startswith(hand) and text.endswith(f"{role_docs.END}\n\nAfter.\n")
    assert EXPECTED in text

    current = run(tmp_path, "--check")
    assert current.returncode == 0, current.stderr
    assert run(tmp_path, "--write").stdout == ""  # nothing left to write


def test_check_names_a_missing_readme_and_write_creates_it(tmp_path: Path) -> None:
    readme = make_repo(tmp_path, None)
    missing = run(tmp_path, "--check")
    assert missing.returncode == 1
    assert "roles/demo/README.md is missing" in missing.stderr
    assert run(tmp_path, "--write").returncode == 0
    assert readme.read_text().startswith("# demo\n\n## Variables\n\n" + role_docs.BEGIN)
    assert run(tmp_path, "--check").returncode == 0


def test_a_spec_edit_makes_the_readme_stale(tmp_path: Path) -> None:
    make_repo(tmp_path, "# demo\n")
    assert run(tmp_path, "--write").returncode == 0
    spec = tmp_path / "roles" / "demo" / "meta" / "argument_specs.yml"
    spec.write_text(SPEC.replace("Port clients connect to.", "The client port."))
    assert run(tmp_path, "--check").returncode == 1


def test_every_role_has_a_readme_with_a_generated_table() -> None:
    for spec in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        readme = spec.parents[1] / "README.md"
        assert readme.is_file(), readme
        text = readme.read_text()
        assert text.count(role_docs.BEGIN) == 1 and text.count(role_docs.END) == 1, readme


def test_the_repository_readmes_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, textwrap.indent(result.stderr, "  ")
