"""Role contract, for every role: defaults/main.yml and meta/argument_specs.yml name the same
variables, each prefixed with the role's name and described; a default given in the spec is
the default in defaults/main.yml; every other entry point's options are main's (type and
default; the wording may differ)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())


def load(role: str) -> tuple[dict[str, Any], dict[str, Any]]:
    base = ROOT / "roles" / role
    defaults = yaml.safe_load((base / "defaults" / "main.yml").read_text()) or {}
    specs = yaml.safe_load((base / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return defaults, specs


@pytest.mark.parametrize("role", ROLES)
def test_defaults_match_argument_specs_one_to_one(role: str) -> None:
    defaults, specs = load(role)
    options = specs["main"]["options"]
    assert set(defaults) == set(options)
    for name, spec in options.items():
        assert name.startswith(role + "_"), name
        assert spec.get("description"), name
        value = defaults[name]
        if "default" in spec:
            assert spec["default"] == value, name
        elif isinstance(value, dict):  # a mapping is described key by key
            assert {k: o.get("default") for k, o in spec["options"].items()} == value, name
        else:  # left out only where the default is computed or empty
            assert value == "" or (isinstance(value, str) and "{{" in value), name


@pytest.mark.parametrize("role", ROLES)
def test_every_entry_point_has_a_spec_and_main_options(role: str) -> None:
    _defaults, specs = load(role)
    main = specs["main"]["options"]
    for entry, spec in specs.items():
        assert spec.get("short_description"), entry
        for name, option in (spec.get("options") or {}).items():
            def kind(o: dict[str, Any]) -> dict[str, Any]:
                return {k: v for k, v in o.items() if k != "description"}
            assert kind(option) == kind(main[name]), f"{entry}: {name}"
        if entry != "main":
            assert (ROOT / "roles" / role / "tasks" / f"{entry}.yml").is_file(), entry
