"""Action role_vars: refuse variables under a role's prefix that the role does not know
(documented in plugins/modules/role_vars.py; the check is plugins/plugin_utils/role_vars.py).

The one mechanism of every role: its validation task runs this action with
``role_path: "{{ role_path }}"`` (its own prefix, on each host, from the host's own task
variables), and the plan play runs it once (run_once) with ``hosts`` and no role_path: every
role's prefix for every host of the play, each host's variables read as a task of the play on
it sees them (plan_fleet.host_variables), each distinct set of names checked once. Names and
role files only in the result: never a value (a misspelt secret stays secret).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import ROLES_DIR
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_vars import (
    refusal,
    unknown_vars,
)


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type information
    """role_vars: the unknown names under one role's prefix (role_path) or every role's."""

    TRANSFERS_FILES = False
    _supports_async = False
    _VALID_ARGS = frozenset(("hosts", "role_path"))

    def _variables(self, task_vars: dict[str, Any], hosts: list[str] | None) -> Any:
        """(host, its variable names) for each host: this host's task variables where HOSTS
        is None, else each named host's as a task of this play on it sees them."""
        if hosts is None:
            yield str(task_vars.get("inventory_hostname", "")), task_vars.keys()
            return
        # Imported here: a role's own check (no hosts) runs in a worker per host, which
        # need not load the planner that plan_fleet imports.
        from ansible_collections.vllm_fleet.serving.plugins.action.plan_fleet import (
            host_variables,
        )

        variables_of = host_variables(self._task, task_vars)
        for host in hosts:
            variables = variables_of(host)
            if variables is None:
                raise AnsibleActionFail(f"role_vars: hosts: {host} is not in the inventory."
                                        " Fix: pass ansible_play_hosts_all.")
            yield host, variables.keys()

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        role_path = str(args.get("role_path") or "")
        roles = [Path(role_path).name] if role_path else None
        roles_dir = Path(role_path).parent if role_path else ROLES_DIR
        hosts = args.get("hosts")
        if hosts is not None:
            if isinstance(hosts, str) or not hosts:
                raise AnsibleActionFail("role_vars: hosts must be a list of hosts. Fix: hosts:"
                                        " \"{{ ansible_play_hosts_all }}\".")
            hosts = [str(h) for h in hosts]
        # Hosts with the same names under the prefixes share one check (a group's hosts).
        checked: dict[frozenset[str], tuple[list[str], dict[str, list[str]]]] = {}
        count = 0
        for host, names in self._variables(task_vars, hosts):
            count += 1
            # Only what could be under a role's prefix: no internals (_...), no magic names.
            key = frozenset(n for n in names if isinstance(n, str) and n[:1].isalpha())
            if key not in checked:
                try:
                    checked[key] = ([], unknown_vars(key, roles, roles_dir))
                except (OSError, ValueError) as exc:
                    raise AnsibleActionFail(f"role_vars: {exc}. Fix: pass role_path:"
                                            " \"{{ role_path }}\" from the role's tasks.") from None
            checked[key][0].append(host)
        found = [(group_hosts, by_role) for group_hosts, by_role in checked.values() if by_role]
        result.update(changed=False, hosts=count)
        if found:
            result.update(failed=True, msg=refusal(found, count, name_hosts=hosts is not None))
        else:
            what = f"role {roles[0]}'s prefix" if roles else "every role's prefix"
            result["msg"] = (f"{count} hosts: " if hosts is not None else "") + \
                f"every variable under {what} is known"
        return result
