#!/usr/bin/env python3
"""Render each role's meta/argument_specs.yml into its README: one source for each variable.

The table of a role's variables (name, type, default, required, choices, description) lives
between two marker lines in roles/<role>/README.md; everything outside them is written by
hand. The main entry point gets the full table; every other entry point is listed with its
summary and the names of the main options it takes, and a table of its own only for options
that main does not describe.

    scripts/role-docs.py --write   # regenerate every role README (make docs)
    scripts/role-docs.py --check   # exit 1, naming each stale README (make lint)

The output depends only on the spec files: the same specs always give the same bytes.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

BEGIN = "<!-- BEGIN GENERATED: role-docs -->"
END = "<!-- END GENERATED: role-docs -->"
FIX = "make docs"
HEADER = ("variable", "type", "default", "required", "choices", "description")

Spec = Mapping[str, Any]


class SpecError(ValueError):
    """An argument spec the renderer cannot read."""


ANSIBLE_CODE = re.compile(r"C\(([^()]*)\)")


def escape_text(text: str) -> str:
    """Plain spec text as one Markdown table cell: whitespace collapsed, markup neutralised,
    ansible-doc's C(code) as a code span."""
    text = " ".join(text.split())
    out, last = [], 0
    for match in ANSIBLE_CODE.finditer(text):
        out += [escape_plain(text[last : match.start()]), code(match.group(1))]
        last = match.end()
    return "".join([*out, escape_plain(text[last:])])


def escape_plain(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("*", "\\*").replace("|", "\\|")


def code(text: str) -> str:
    """``text`` as an inline code span inside a table cell (pipes escaped for the table)."""
    text = " ".join(text.split()) if "\n" in text else text
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}".replace("|", "\\|")


def value(data: Any) -> str:
    """A default or choice as YAML flow text: one line, keys in the spec's order."""
    if isinstance(data, str):
        return '""' if data == "" else data
    dumped = yaml.safe_dump(
        data, default_flow_style=True, sort_keys=False, width=1_000_000, allow_unicode=True
    )
    return dumped.removesuffix("\n...\n").strip()


def describe(description: Any) -> str:
    """A spec description (a string or a list of paragraphs) as one table cell."""
    if description is None:
        return ""
    if isinstance(description, str):
        return escape_text(description)
    if isinstance(description, list) and all(isinstance(p, str) for p in description):
        return "<br>".join(escape_text(p) for p in description)
    raise SpecError(f"description must be a string or a list of strings, not {description!r}")


def type_name(option: Spec) -> str:
    kind = str(option.get("type", "str"))
    elements = option.get("elements")
    return f"{kind} of {elements}" if kind == "list" and elements else kind


def rows(options: Spec, prefix: str = "") -> Iterator[tuple[str, ...]]:
    """One row per option, sub-options after their parent as parent.key (parent[].key)."""
    for name, option in options.items():
        if not isinstance(option, Mapping):
            raise SpecError(f"option {prefix}{name}: expected a mapping, got {option!r}")
        choices = option.get("choices")
        yield (
            code(prefix + str(name)),
            type_name(option),
            code(value(option["default"])) if "default" in option else "",
            "yes" if option.get("required") else "no",
            ", ".join(code(value(c)) for c in choices) if choices else "",
            describe(option.get("description")),
        )
        nested = option.get("options")
        if nested:
            step = "[]." if option.get("type") == "list" else "."
            yield from rows(nested, f"{prefix}{name}{step}")


def table(options: Spec) -> list[str]:
    lines = ["| " + " | ".join(HEADER) + " |",
             "| " + " | ".join("---" for _column in HEADER) + " |"]
    lines += [
        "|" + "|".join(f" {cell} " if cell else " " for cell in row) + "|" for row in rows(options)
    ]
    return lines


def summary(entry: Spec) -> str:
    """An entry point's short description and description, as sentences on one line."""
    parts = [escape_text(entry.get("short_description") or "")]
    if entry.get("description"):
        parts.append(describe(entry["description"]).replace("<br>", " "))
    return " ".join(p if p.endswith(".") else p + "." for p in parts if p)


def render(specs: Spec) -> str:
    """The generated block for one role's ``argument_specs`` mapping, markers included."""
    if "main" not in specs:
        raise SpecError("no main entry point")
    main: Spec = specs["main"].get("options") or {}
    out = [
        BEGIN,
        "<!-- Generated from meta/argument_specs.yml by scripts/role-docs.py."
        f" Edit the spec, then run `{FIX}`. -->",
        "",
        "Variables of the main entry point"
        f" ({escape_text(specs['main'].get('short_description') or 'main')}):",
        "",
    ]
    out += table(main) if main else ["No variables."]
    others = [name for name in specs if name != "main"]
    if others:
        out += ["", "Other entry points (`tasks_from`):", ""]
    for name in others:
        entry: Spec = specs[name]
        options: Spec = entry.get("options") or {}
        shared = [o for o in options if o in main]
        own = {o: spec for o, spec in options.items() if o not in main}
        if not options:
            takes = "No variables."
        elif options.keys() == main.keys():
            takes = "Takes every variable of the main entry point."
        else:
            takes = "Takes " + ", ".join(code(o) for o in shared) + " (as above)." if shared else ""
        out.append(f"- `{name}`: {summary(entry)} {takes}".rstrip())
        if own:
            out += ["", f"  Variables of `{name}` only:", ""]
            out += ["  " + line for line in table(own)]
            out.append("")
    if out[-1] == "":
        out.pop()
    out.append(END)
    return "\n".join(out) + "\n"


def load_specs(role_dir: Path) -> Spec:
    path = role_dir / "meta" / "argument_specs.yml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, Mapping) or not isinstance(data.get("argument_specs"), Mapping):
        raise SpecError(f"{path}: no argument_specs mapping")
    specs: Spec = data["argument_specs"]
    return specs


def update(readme: str, block: str, role: str) -> str:
    """``readme`` with its generated block replaced by ``block`` (appended when it has none)."""
    begin, end = readme.count(BEGIN), readme.count(END)
    if begin == end == 0:
        head = readme.rstrip("\n") + "\n\n" if readme.strip() else f"# {role}\n\n"
        return head + "## Variables\n\n" + block
    start, stop = readme.find(BEGIN), readme.find(END)
    if begin != 1 or end != 1 or stop < start:
        raise SpecError(f"expected one {BEGIN!r} line followed by one {END!r} line")
    after = readme[stop + len(END) :].removeprefix("\n")
    return readme[:start] + block + after


def roles(root: Path, names: Sequence[str]) -> list[Path]:
    found = sorted(
        p for p in (root / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file()
    )
    if names:
        found = [p for p in found if p.name in names]
        missing = sorted(set(names) - {p.name for p in found})
        if missing:
            raise SpecError(f"no role with meta/argument_specs.yml: {', '.join(missing)}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="update the READMEs")
    mode.add_argument("--check", action="store_true", help="fail when a README is stale")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("role", nargs="*", help="only these roles (default: every role)")
    args = parser.parse_args(argv)

    stale: list[str] = []
    try:
        for role_dir in roles(args.root, args.role):
            readme = role_dir / "README.md"
            where = readme.relative_to(args.root)
            try:
                block = render(load_specs(role_dir))
                current = readme.read_text(encoding="utf-8") if readme.is_file() else ""
                wanted = update(current, block, role_dir.name)
            except (SpecError, yaml.YAMLError) as err:
                print(f"role-docs: {where}: {err}", file=sys.stderr)
                return 2
            if wanted == current:
                continue
            if args.write:
                readme.write_text(wanted, encoding="utf-8")
                print(f"role-docs: wrote {where}")
            else:
                stale.append(str(where))
    except SpecError as err:
        print(f"role-docs: {err}", file=sys.stderr)
        return 2
    for name in stale:
        text = (
            (args.root / name).read_text(encoding="utf-8") if (args.root / name).is_file() else ""
        )
        problem = (
            "is missing"
            if not text
            else "has no generated variables table"
            if BEGIN not in text
            else "is stale: its variables table does not match meta/argument_specs.yml"
        )
        print(
            f"role-docs: {name} {problem}. Fix: run `{FIX}` and commit the result.", file=sys.stderr
        )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
