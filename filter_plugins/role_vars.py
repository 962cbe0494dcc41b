"""Misspelt role variables: names under a role's prefix that the role does not know.

A role ignores a variable it does not read, so `vllm_server_api_kye: ...` would converge
and leave the endpoint open. Each role's validation compares the variables Ansible sees
under its prefix with the options of its meta/argument_specs.yml (every entry point) and
refuses the unknown ones, naming the closest known names:

    {{ query('ansible.builtin.varnames', '^vllm_server_') | unknown_role_vars(role_path) }}

returns one line per unknown name ('' when all are known).

One source for each fact: a role that consumes another role's variable defaults to it, and
where the producer role is not in the play, to the producer role's own default, read from
its defaults/main.yml (never a copy of its value; a templated default is refused, naming
the fix: plugins/plugin_utils/role_data.py holds the reader and its rule):

    engine_restarts_config: >-
      {{ vllm_server_config_dir | default('vllm_server_config_dir' | role_default) }}/replicas.json
    {{ hostvars[host].gpu_metrics_node_exporter_port
       | default('gpu_metrics_node_exporter_port' | role_default) }}
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# The reader and its rule on templated defaults live in plugin_utils (shared with the port
# plan, engine_replicas and the plan_fleet action); re-exported here for the filters' users.
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (
    ROLES_DIR,
    RoleDefaultError,
    known_role_vars,
    role_default,
)

__all__ = ["ROLES_DIR", "RoleDefaultError", "known_role_vars", "role_default",
           "unknown_role_vars", "FilterModule"]


def moved_role_var(name: str, role_path: str, prefix: str = "") -> str | None:
    """The variable of a sibling role of the same family (the roles directory's roles whose
    names share the first word: vllm_server, vllm_install, vllm_plan) with the same name
    after its role's prefix (vllm_server_version -> vllm_install_version), if one has."""
    role = Path(role_path)
    suffix = name.removeprefix(prefix or role.name + "_")
    family = role.name.split("_", 1)[0] + "_"
    for other in sorted(role.parent.iterdir()):
        if (other.name != role.name and other.name.startswith(family)
                and (other / "meta" / "argument_specs.yml").is_file()):
            candidate = f"{other.name}_{suffix}"
            if candidate in known_role_vars(str(other)):
                return candidate
    return None


def unknown_role_vars(names: Iterable[str], role_path: str, prefix: str = "") -> list[str]:
    """One message per name under the role's prefix (role name + '_' unless given) that the
    role's argument_specs do not list, with up to three close known names, or the name of
    another role's variable that took its place (a variable moved between roles)."""
    prefix = prefix or Path(role_path).name + "_"
    known = known_role_vars(role_path)
    messages = []
    for name in sorted(set(names)):
        if not name.startswith(prefix) or name in known:
            continue
        # Compared without the prefix every name shares, which would make all look close.
        suffixes = {known_name.removeprefix(prefix): known_name for known_name in known}
        close = [suffixes[match] for match in difflib.get_close_matches(
            name.removeprefix(prefix), sorted(suffixes), n=3, cutoff=0.7)]
        moved = moved_role_var(name, role_path, prefix)
        if moved:
            hint = f"moved to role {moved.removesuffix(name.removeprefix(prefix))[:-1]}: {moved}"
        elif close:
            hint = f"did you mean {' or '.join(close)}?"
        else:
            hint = "no known variable is close"
        messages.append(f"{name}: unknown to role {Path(role_path).name} ({hint})")
    return messages


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"unknown_role_vars": unknown_role_vars, "role_default": role_default}
