"""Role entry points are independent: within each entry point of a role (tasks/<entry>.yml of
every entry in meta/argument_specs.yml, with the files it imports), every private name of
the role (`_<role>_...`) it reads is defined before it is read: by a task run earlier in that
same entry point (set_fact, register), the task itself (its own register in until,
changed_when, failed_when), task, block or import vars, or the role's vars/main.yml. So no
entry point reads a fact another entry point set (the choreography issue 22 removed: a
`packages` or `install` entry point leaving `_<role>_packages_done` or
`_vllm_server_install_job` for main, and main "forgetting" them), and no role reads another
role's private names. Handlers may read what main defines."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
IMPORTS = ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks",
           "import_tasks", "include_tasks")
NESTED = ("block", "rescue", "always")
# Fields evaluated after the task ran (its own register is defined there).
AFTER = ("until", "changed_when", "failed_when")
LOOP_AFTER = ("label", "break_when")


def names(role: str, value: Any) -> set[str]:
    return set(re.findall(rf"\b_{role}_\w+", yaml.safe_dump(value))) if value is not None else set()


class Walker:
    def __init__(self, role: str) -> None:
        self.role = role
        base = ROOT / "roles" / role
        role_vars = base / "vars" / "main.yml"
        loaded = yaml.safe_load(role_vars.read_text()) if role_vars.is_file() else None
        self.role_vars = set(loaded or {})
        self.errors: list[str] = []

    def check(self, where: str, read: set[str], known: set[str]) -> None:
        for name in sorted(read - known - self.role_vars):
            self.errors.append(f"{where}: reads {name} before this entry point defines it")

    def tasks(self, path: Path, defined: set[str], scope: set[str], seen: tuple[Path, ...]) -> None:
        assert path not in seen, f"import loop at {path}"
        for task in yaml.safe_load(path.read_text()) or []:
            self.task(task, path, defined, scope, (*seen, path))

    def task(self, task: dict[str, Any], path: Path, defined: set[str], scope: set[str],
             seen: tuple[Path, ...]) -> None:
        where = f"{path.relative_to(ROOT)}: {task.get('name', '?')}"
        control = dict(task.get("loop_control") or {})
        loop_names = {control[k] for k in ("loop_var", "index_var") if control.get(k)}
        local = scope | set(task.get("vars") or {}) | loop_names
        # A loop's label and break_when are evaluated after each item ran (its register set).
        after_items = {k: control.pop(k) for k in LOOP_AFTER if k in control}
        before = {k: v for k, v in task.items()
                  if k not in (*NESTED, *AFTER, "register", "name", "loop_control")
                  and not (k.endswith("set_fact") and isinstance(v, dict))}
        before["loop_control"] = control
        fact = next((v for k, v in task.items() if k.endswith("set_fact")), None)
        if isinstance(fact, dict):
            before["set_fact"] = list(fact.values())  # the values are read, the keys set
        if "vars" in before:
            before["vars"] = list((task.get("vars") or {}).values())
        if after_items and "vars" in before:
            # Task vars are lazy: read in the label or break_when, they may use the register.
            after_items["vars"] = before.pop("vars")
        if any(k in task for k in NESTED):
            # A block's vars are evaluated where its tasks use them (lazily).
            lazy = names(self.role, before.pop("vars", None))
            self.check(where, names(self.role, before), defined | local)
            for key in NESTED:
                for sub in task.get(key) or []:
                    self.task(sub, path, defined, local, seen)
            self.check(where, lazy, defined | local)
            return
        self.check(where, names(self.role, before), defined | local)
        target = next((task[k] for k in IMPORTS if k in task), None)
        if target is not None:
            self.tasks(path.parent / str(target), defined, local, seen)
            return
        own = {task["register"]} if "register" in task else set()
        self.check(where, names(self.role, {**{k: task.get(k) for k in AFTER}, **after_items}),
                   defined | local | own)
        defined |= own | (set(fact) if isinstance(fact, dict) else set())


def entry_points(role: str) -> list[str]:
    specs = ROOT / "roles" / role / "meta" / "argument_specs.yml"
    if not specs.is_file():
        return ["main"]
    return list(yaml.safe_load(specs.read_text())["argument_specs"])


@pytest.mark.parametrize("role", ROLES)
def test_no_entry_point_reads_a_private_fact_it_did_not_define(role: str) -> None:
    walker = Walker(role)
    base = ROOT / "roles" / role
    for entry in entry_points(role):
        defined: set[str] = set()
        walker.tasks(base / "tasks" / f"{entry}.yml", defined, set(), ())
        if entry == "main" and (base / "handlers" / "main.yml").is_file():
            walker.tasks(base / "handlers" / "main.yml", set(defined), set(), ())
    assert not walker.errors, "\n".join(walker.errors)


@pytest.mark.parametrize("role", ROLES)
def test_no_role_reads_another_roles_private_names(role: str) -> None:
    others = "|".join(r for r in ROLES if r != role and not r.startswith(role + "_"))
    found = []
    for path in sorted((ROOT / "roles" / role).rglob("*")):
        if path.is_file() and path.suffix in (".yml", ".yaml", ".j2"):
            for match in re.finditer(rf"(?<![A-Za-z0-9])_({others})_\w+", path.read_text()):
                found.append(f"{path.relative_to(ROOT)}: {match[0]}")
    assert not found, found
