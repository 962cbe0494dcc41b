"""Misspelt role variables: names under a role's prefix that the role does not know.

A role ignores a variable it does not read, so `vllm_server_api_kye: ...` would converge
and leave the endpoint open. Every role's validation (the action vllm_fleet.serving.role_vars)
compares the variables Ansible sees under its prefix with the options of its
meta/argument_specs.yml (every entry point) and the facts it publishes, and refuses the
unknown ones, naming the closest known names; the plan play does it for every role's prefix
and every host at once (plugins/plugin_utils/role_vars.py holds the check). This filter gives
one role's messages:

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

from typing import Any

# The reader and its rule on templated defaults, and the unknown-variable check, live in
# plugin_utils (shared with the port plan, engine_replicas and the actions); re-exported here
# for the filters' users.
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (
    ROLES_DIR,
    RoleDefaultError,
    known_role_vars,
    role_default,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_vars import (
    unknown_role_vars,
)

__all__ = ["ROLES_DIR", "RoleDefaultError", "known_role_vars", "role_default",
           "unknown_role_vars", "FilterModule"]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"unknown_role_vars": unknown_role_vars, "role_default": role_default}
