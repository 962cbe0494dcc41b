"""Another role's defaults and argument specs, read from its files: the one reader.

A role that consumes another role's variable defaults to the producer's own default (never a
copy of its value), the port plan takes the roles' defaults for what the inventory leaves
unset, and the engine replicas of a host without a plan take vllm_plan's. They all read the
producer's defaults/main.yml (and meta/argument_specs.yml) here, with one rule.

The rule for templated values: a default that holds a template anywhere in it (``{{`` or
``{%`` in a string, at any depth of a list or mapping) depends on variables of the
producer role's play, which a reader outside that play does not see. It is never rendered
here and never passed on as if its text were the value: it is *unknown* to the reader.

- ``role_default(name)`` (one variable, asked for by name) refuses it with
  RoleDefaultError, naming the variable and the fix: default to the variable it reads.
- ``literal_defaults(roles_dir, roles)`` (every default of some roles, for a caller that
  merges them under its own values) leaves it out, as if the role had no default: the
  caller's rule for an unset variable applies (the port plan counts an unset address as
  every interface, and names an unset port as not a port).

The facts each role publishes under its own prefix (PUBLISHED_FACTS, one list per role) are
declared here too: the unknown-variable check (plugin_utils/role_vars.py) accepts them beside
the argument specs' options.

No Ansible import: plain Python, shared by the filters (filter_plugins/) and the actions.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

# The collection's roles (the checkout's, or an installed copy's): the first directory above
# this file with a roles/vllm_plan.
ROLES_DIR = next(p / "roles" for p in Path(__file__).resolve().parents
                 if (p / "roles" / "vllm_plan").is_dir())


# The facts each role publishes under its own prefix for later tasks, roles and plays (set_fact,
# register, set_stats, an action's facts): outputs, which no argument spec lists, yet no
# misspelling either. One list per role, here only; the unknown-variable check accepts them
# (plugin_utils/role_vars.py), and tests/unit/plugins/filter/test_role_vars.py fails when a
# role publishes a name under its prefix that its list lacks, or a role has no list.
PUBLISHED_FACTS: Mapping[str, frozenset[str]] = MappingProxyType({
    "benchmark": frozenset(),
    "cuda_toolkit": frozenset(),
    "engine_gateway": frozenset(),
    "engine_restarts": frozenset(),
    "gpu_metrics": frozenset(),
    "host_firewall": frozenset(),
    # tasks/main.yml: the live revision, for the engine role (vllm_server_model_revision and
    # _model_replaced default to two of them) and the molecule checks.
    "model_artifacts": frozenset({
        "model_artifacts_live_path", "model_artifacts_revision", "model_artifacts_config",
        "model_artifacts_report", "model_artifacts_repaired", "model_artifacts_repaired_files"}),
    "nvidia_driver": frozenset(),
    "prometheus_server": frozenset(),
    "vllm_install": frozenset(),
    # The plan_fleet action (plugins/action/plan_fleet.py): the fleet's plan and its per-host
    # views, for every later role and play.
    "vllm_plan": frozenset({
        "vllm_plan_fleet", "vllm_plan_replicas", "vllm_plan_served_name",
        "vllm_plan_engine_stack", "vllm_plan_ports"}),
    "vllm_server": frozenset(),
})


class RoleDefaultError(ValueError):
    """A variable that is no literal default of its role; the message names it."""


def is_templated(value: object) -> bool:
    """Whether VALUE holds a template anywhere (a string with {{ or {%, at any depth)."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(is_templated(k) or is_templated(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(is_templated(item) for item in value)
    return False


@functools.lru_cache(maxsize=64)
def _parsed(path: str, mtime_ns: int) -> Any:
    """A YAML file, parsed once per version of the file (a fleet's plan reads the same
    defaults for every host)."""
    del mtime_ns  # part of the cache key only
    return yaml.safe_load(Path(path).read_text())


def _cached_defaults(role_dir: str | Path) -> Mapping[str, Any]:
    """The role's defaults/main.yml as parsed and cached: never to be changed ({} where the
    role has none)."""
    path = Path(role_dir) / "defaults" / "main.yml"
    if not path.is_file():
        return {}
    return _parsed(str(path), path.stat().st_mtime_ns) or {}


def role_defaults_file(role_dir: str | Path) -> dict[str, Any]:
    """Every default of the role at ROLE_DIR as written (templates unrendered; {} where the
    role has no defaults/main.yml). A copy: the caller may change it."""
    return copy.deepcopy(dict(_cached_defaults(role_dir)))


def literal_defaults(roles_dir: str | Path, roles: Iterable[str]) -> dict[str, Any]:
    """The literal defaults of ROLES under ROLES_DIR, merged (their names are prefixed); a
    templated default is left out (see the rule above)."""
    merged: dict[str, Any] = {}
    for role in sorted(set(roles)):
        merged.update({name: copy.deepcopy(value) for name, value in
                       _cached_defaults(Path(roles_dir) / role).items()
                       if not is_templated(value)})
    return merged


def owner_role(name: str, roles_dir: str | Path = ROLES_DIR) -> str:
    """The role whose name (and '_') begins variable NAME (the longest such)."""
    roles = sorted((p.name for p in Path(roles_dir).iterdir() if p.is_dir()
                    and name.startswith(p.name + "_")), key=len, reverse=True)
    if not roles:
        raise RoleDefaultError(f"{name}: no role under {roles_dir} owns this variable")
    return roles[0]


def role_default(name: str, roles_dir: str | Path = ROLES_DIR) -> Any:
    """The default of variable NAME in its role's defaults/main.yml (the role is the one
    whose name and '_' begin the variable's). Only a literal default: a templated one is
    refused (see the rule above)."""
    role = owner_role(name, roles_dir)
    defaults_file = Path(roles_dir) / role / "defaults" / "main.yml"
    defaults = _cached_defaults(Path(roles_dir) / role)
    if name not in defaults:
        raise RoleDefaultError(f"{name}: not a default of role {role} ({defaults_file})")
    value = defaults[name]
    if is_templated(value):
        raise RoleDefaultError(f"{name}: the default of role {role} is a template "
                               f"({value!r}); default to the variable it names instead")
    return copy.deepcopy(value)


def argument_specs(role_dir: str | Path) -> dict[str, Any]:
    """The entry points of the role's meta/argument_specs.yml (name -> its spec; {} where
    the file holds no argument_specs mapping). Raises OSError where the file cannot be
    read, yaml.YAMLError where it is no YAML."""
    path = Path(role_dir) / "meta" / "argument_specs.yml"
    specs = _parsed(str(path), path.stat().st_mtime_ns) or {}
    entry_points = specs.get("argument_specs") if isinstance(specs, Mapping) else None
    return copy.deepcopy(dict(entry_points)) if isinstance(entry_points, Mapping) else {}


def entry_point_options(role_dir: str | Path, entry_point: str = "main") -> dict[str, Any]:
    """The options of one entry point of the role's argument specs (KeyError where the
    entry point has none)."""
    return dict(argument_specs(role_dir)[entry_point]["options"])


def known_role_vars(role_dir: str | Path) -> set[str]:
    """Every option of every entry point of the role's meta/argument_specs.yml."""
    return {name for entry in argument_specs(role_dir).values()
            for name in ((entry or {}).get("options") or {})}


def published_role_vars(role_dir: str | Path) -> frozenset[str]:
    """The facts the role at ROLE_DIR publishes under its prefix (PUBLISHED_FACTS; none for a
    role it does not list)."""
    return PUBLISHED_FACTS.get(Path(role_dir).name, frozenset())


def role_dirs(roles_dir: str | Path = ROLES_DIR) -> dict[str, Path]:
    """Every role under ROLES_DIR that has argument specs: name -> its folder."""
    return {p.name: p for p in sorted(Path(roles_dir).iterdir())
            if (p / "meta" / "argument_specs.yml").is_file()}
