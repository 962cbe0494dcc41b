"""Action plan_fleet: every engine replica of the play's hosts, planned on the control node
in one task, once per distinct set of planner inputs (documented in library/plan_fleet.py).

A task per host costs Ansible about 15-20 ms per host (its result, its callbacks), whatever
the task does: six of them made a 1,000-host plan take minutes. This action runs once
(run_once) and reads each host's variables as a task on that host would see them (the
variable manager with this play and task: inventory, facts, role defaults and parameters,
extra vars), evaluates the role's inputs there, and plans each distinct set of inputs once
(vllm_planner.fleet.memoised). It publishes vllm_plan_fleet (host -> its plan) and the
per-host facts the other roles read (vllm_plan_replicas, ...) as templates over that mapping,
evaluated for whichever host reads them: one task, no per-host result.
"""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template
from ansible_collections.vllm_fleet.serving.plugins.filter.model_config import model_config
from ansible_collections.vllm_fleet.serving.plugins.filter.port_plan import (
    PORT_VARIABLES,
    port_clashes,
    port_plan,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    PlanError,
    plan_replicas,
    plan_table,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.fleet import (
    Group,
    hosts_label,
    memoised,
)

# The role's inputs, as a task of roles/vllm_plan on the host evaluates them.
PLAN_INPUTS = {
    "model_config": "vllm_plan_model_config",
    "config_file": "vllm_plan_model_config_file",
    "lock_file": "vllm_plan_model_lock_file",
    "inventory_dir": "inventory_dir | default('')",
    "gpu_count": "vllm_plan_gpu_count",
    "base_port": "vllm_plan_base_port",
    "options": "vllm_plan_options",
    "model": "vllm_plan_model",
    "served_model_name": "vllm_plan_served_model_name",
    "listen_host": "vllm_plan_host",
    # The engine's release: vllm_server_version (the one pin; its role's default where the
    # inventory sets none). vllm_plan_options.vllm_version is a deprecated alias that wins.
    "vllm_version": "vllm_plan_options.vllm_version | default('')"
                    " | vllm_fleet.serving.deprecated_alias('vllm_plan_options.vllm_version',"
                    " 'vllm_server_version')"
                    " or vllm_server_version"
                    " | default('vllm_server_version' | vllm_fleet.serving.role_default)",
    "engine_package": "vllm_plan_engine_package",
    "driver": "vllm_plan_driver",
    # Debian's driver depends on the release: known where facts were gathered before.
    "release": "ansible_facts.distribution_release | default('')",
    "show": "vllm_plan_show | bool",
}

# The per-host facts the other roles read, each a view of the host's entry in vllm_plan_fleet.
VIEWS = {
    "plan": {"vllm_plan_replicas": "replicas", "vllm_plan_served_name": "served_name",
             "vllm_plan_engine_stack": "engine_stack"},
    "ports": {"vllm_plan_ports": "ports"},
}

HAZARD_FIX = ("Fix the flags as each message says, or set vllm_plan_options.hazard_overrides"
              " {<hazard id>: '<written reason>'}.")


def plan_one(inputs: dict[str, Any]) -> dict[str, Any]:
    """One host's plan entry from its evaluated inputs (raises PlanError, AnsibleError)."""
    if inputs["model_config"]:
        read = {"text": "", "note": "vllm_plan_model_config (a mapping), not checked against a lock"}
        config: object = inputs["model_config"]
    else:
        read = model_config(inputs["config_file"], inputs["lock_file"], inputs["inventory_dir"])
        config = read["text"]
    served = inputs["served_model_name"]
    options = dict(inputs["options"] or {})
    options.update({
        "model": inputs["model"],
        # Empty: the engine serves the model under its path.
        "served_model_name": served if len(str(served)) > 0 else None,
        "host": inputs["listen_host"], "vllm_version": inputs["vllm_version"],
        "engine_package": inputs["engine_package"],
        "driver": {**(inputs["driver"] or {}), "debian_release": inputs["release"]},
        "refuse_hazards": False})
    replicas = plan_replicas(config, inputs["gpu_count"], inputs["base_port"], **options)
    overrides = (inputs["options"] or {}).get("hazard_overrides") or {}
    return {"replicas": replicas,
            "served_name": served if len(str(served)) > 0 else replicas[0]["plan"]["model"],
            "engine_stack": {**replicas[0]["plan"]["engine_stack"],
                             "override": overrides.get("driver_cannot_run_engine", "")},
            "config_note": read["note"]}


def tables(groups: list[Group[dict[str, Any]]]) -> list[dict[str, str]]:
    """One table per distinct plan and replica, naming the hosts that share it."""
    shown = []
    for group in groups:
        if not group.inputs["show"]:
            continue
        for replica in group.result["replicas"]:
            title = (f"{hosts_label(group.hosts)} / {replica['name']} (GPUs "
                     f"{replica['cuda_visible_devices']}, port {replica['port']})")
            text = (plan_table(replica["plan"], title)
                    + "\n  config.json               " + group.result["config_note"])
            if len(group.hosts) > 1:
                text += "\n  hosts                     " + ", ".join(group.hosts)
            shown.append({"label": title, "table": text})
    return shown


def refusals(groups: list[Group[dict[str, Any]]]) -> list[str]:
    """Each replica's hazards that are not overridden, naming its hosts (as the per-host
    refusal did: '<host> <replica>: the plan is refused. <hazards> Fix ...')."""
    messages = []
    for group in groups:
        for replica in group.result["replicas"]:
            if replica["plan"]["ok"]:
                continue
            hazards = " | ".join(h["message"] for h in replica["plan"]["hazards"]
                                 if not h["overridden"])
            messages.append(f"{', '.join(group.hosts)} {replica['name']}: the plan is refused."
                            f" {hazards} {HAZARD_FIX}")
    return messages


class ActionModule(ActionBase):
    """plan_fleet: the plan (what=plan) or the port list (what=ports) of every host."""

    TRANSFERS_FILES = False
    _supports_async = False
    _VALID_ARGS = frozenset(("hosts", "what", "roles_dir"))

    def _host_templars(self, task_vars: dict[str, Any], hosts: list[str]) -> list[tuple[str, Any]]:
        """Each host with a templar over its variables as a task of this play on it sees
        them (the variable manager's own resolution: role defaults included)."""
        manager = self._task.get_variable_manager()
        inventory = task_vars["hostvars"]._inventory  # the HostVars' inventory (no public getter)
        play = self._task.get_play()
        batch, every = list(task_vars["ansible_play_batch"]), list(task_vars["ansible_play_hosts_all"])
        found = []
        for name in hosts:
            host = inventory.get_host(name)
            if host is None:
                raise AnsibleActionFail(f"plan_fleet: hosts: {name} is not in the inventory."
                                        " Fix: pass ansible_play_hosts_all.")
            variables = manager.get_vars(play=play, host=host, task=self._task,
                                         _hosts=batch, _hosts_all=every)
            found.append((name, self._templar.copy_with_new_env(available_variables=variables)))
        return found

    @staticmethod
    def _evaluate(templar: Any, expressions: dict[str, str]) -> dict[str, Any]:
        return {key: templar.evaluate_expression(trust_as_template(expression))
                for key, expression in expressions.items()}

    def _publish(self, fleet: dict[str, Any], views: dict[str, str]) -> dict[str, Any]:
        """vllm_plan_fleet and its per-host views, for every host of the play (run_once):
        as set_fact's facts on ansible-core 2.21 (register_host_variables), as facts of the
        result on 2.20 (which has no such call)."""
        facts: dict[str, Any] = {"vllm_plan_fleet": fleet}
        for fact, key in views.items():
            facts[fact] = trust_as_template(
                "{{ vllm_plan_fleet[inventory_hostname]." + key + " }}")
        register = getattr(self, "register_host_variables", None)
        if register is None:
            return {"ansible_facts": facts}
        from ansible.plugins.action import VariableLayer  # ansible-core 2.21+

        register(facts, VariableLayer.EPHEMERAL_FACT)
        return {}

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        hosts = [str(h) for h in args.get("hosts") or []]
        what = args.get("what", "plan")
        if not hosts:
            raise AnsibleActionFail("plan_fleet: hosts is empty. Fix: hosts:"
                                    " \"{{ ansible_play_hosts_all }}\".")
        if what not in VIEWS:
            raise AnsibleActionFail(f"plan_fleet: what: {what!r} is neither plan nor ports.")
        templars = self._host_templars(task_vars, hosts)
        fleet = {host: dict(entry) for host, entry in
                 (task_vars.get("vllm_plan_fleet") or {}).items()}
        if what == "plan":
            groups = self._plan(templars)
            for group in groups:
                for host in group.hosts:
                    fleet[host] = group.result
            result.update(tables=tables(groups), refused=refusals(groups))
        else:
            groups = self._ports(templars, fleet, str(args.get("roles_dir", "")))
            clashes = []
            for group in groups:
                for host in group.hosts:
                    fleet[host] = {**fleet[host], "ports": group.result}
                    clashes.extend(port_clashes(group.result, host))
            result["refused"] = clashes
        result.update(self._publish(fleet, VIEWS[what]))
        result.update(changed=False, hosts=len(hosts), planner_calls=len(groups),
                      msg=f"{len(hosts)} hosts, {len(groups)} distinct sets of inputs:"
                          f" {len(groups)} {what} computations")
        return result

    def _plan(self, templars: list[tuple[str, Any]]) -> list[Group[dict[str, Any]]]:
        def compute(inputs: Any, host: str) -> dict[str, Any]:
            try:
                return plan_one(dict(inputs))
            except (PlanError, AnsibleError) as exc:
                raise AnsibleActionFail(f"{host}: {exc}") from None

        def inputs() -> Any:
            for host, templar in templars:
                try:
                    yield host, self._evaluate(templar, PLAN_INPUTS)
                except AnsibleError as exc:
                    raise AnsibleActionFail(f"{host}: {exc}") from None

        return memoised(inputs(), compute)

    def _ports(self, templars: list[tuple[str, Any]], fleet: dict[str, Any],
               roles_dir: str) -> list[Group[list[dict[str, Any]]]]:
        pattern = re.compile("^(" + "|".join(sorted(PORT_VARIABLES)) + ")$")

        def inputs() -> Any:
            for host, templar in templars:
                if host not in fleet:
                    raise AnsibleActionFail(
                        f"plan_fleet: {host} has no plan. Fix: run the role's main tasks"
                        " (roles/vllm_plan) before its ports tasks, in the same play.")
                names = [n for n in templar.available_variables if pattern.match(n)]
                try:
                    values = self._evaluate(templar, {n: n for n in names})
                    prometheus = templar.evaluate_expression(trust_as_template(
                        "inventory_hostname in groups['prometheus_servers'] | default([])"))
                except AnsibleError as exc:
                    raise AnsibleActionFail(f"{host}: {exc}") from None
                yield host, {"replicas": [{k: r.get(k) for k in ("name", "port", "index")}
                                          for r in fleet[host]["replicas"]],
                             "values": values, "prometheus": bool(prometheus)}

        def compute(inputs: Any, host: str) -> list[dict[str, Any]]:
            try:
                return port_plan(inputs["replicas"], inputs["values"], roles_dir,
                                 prometheus_server=inputs["prometheus"])
            except (PlanError, AnsibleError) as exc:
                raise AnsibleActionFail(f"{host}: {exc}") from None

        return memoised(inputs(), compute)
