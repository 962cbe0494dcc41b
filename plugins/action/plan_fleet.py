"""Action plan_fleet: every engine replica of the play's hosts, planned on the control node
in one task, once per distinct set of planner inputs (documented in
plugins/modules/plan_fleet.py).

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

import functools
import re
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import yaml
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.model_config import (
    ModelConfigError,
    model_config,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.plan_warnings import (
    ALERT_VARIABLES,
    RESTART_VARIABLES,
    silent_alerts,
    skipped_restarts,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.port_plan import (
    PORT_VARIABLES,
    PortPlanError,
    port_clashes,
    port_plan,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (
    entry_point_options,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    PlanError,
    plan_group,
    plan_replicas,
    plan_table,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.fleet import (
    Group,
    canonical_key,
    hosts_label,
    memoised,
)

# The role's inputs beyond its own variables (those are read by name, as the role's argument
# spec lists them), as a task of roles/vllm_plan on the host evaluates them.
EXTRA_INPUTS = {
    "inventory_dir": "inventory_dir | default('')",
    # The engine's release: vllm_install_version (the one pin; its role's default where the
    # inventory sets none).
    "vllm_version": "vllm_install_version"
                    " | default('vllm_install_version' | vllm_fleet.serving.role_default)",
    # Where the engine installs from: a site wheelhouse or index may carry pins PyPI lacks.
    "install_source": "'site' if (vllm_install_uv_find_links | default('') | length > 0"
                      " or vllm_install_uv_index_url | default('') | length > 0) else 'pypi'",
    # Debian's driver depends on the release: known where facts were gathered before.
    "release": "ansible_facts.distribution_release | default('')",
}

# The variables EXTRA_INPUTS read, but ansible_facts: its distribution_release stands for it.
EXTRA_ROOTS = ("inventory_dir", "vllm_install_version", "vllm_install_uv_find_links",
               "vllm_install_uv_index_url")

# A template that reads more than the variables it names (another host's, the set of names,
# a lookup's world) is evaluated for every host, never reused.
_OPAQUE = re.compile(r"\b(lookup|query|q|hostvars|vars|varnames)\b")
_PARSER = jinja2.Environment()
_MISSING = object()


@functools.lru_cache(maxsize=4096)
def template_names(template: str) -> frozenset[str] | None:
    """The variables a template reads, or None where that is not all it depends on."""
    if _OPAQUE.search(template):
        return None
    try:
        return frozenset(jinja2.meta.find_undeclared_variables(_PARSER.parse(template)))
    except jinja2.TemplateError:
        return None


def _strings(value: object) -> Any:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def raw_key(variables: Any, roots: list[str], *extra: object) -> str | None:
    """A key of the raw (untemplated) values of ROOTS and of every variable their templates
    read, transitively: two hosts with equal keys evaluate ROOTS to equal values. None where
    a template depends on more than named variables (then the host is evaluated itself)."""
    seen: dict[str, object] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        value = variables.get(name, _MISSING)
        seen[name] = "<undefined>" if value is _MISSING else value
        for text in _strings(value):
            if "{{" in text or "{%" in text:
                names = template_names(str(text))
                if names is None:
                    return None
                todo.extend(names)
    return canonical_key([seen, extra])


# The per-host facts the other roles read, each a view of the host's entry in vllm_plan_fleet.
VIEWS = {
    "plan": {"vllm_plan_replicas": "replicas", "vllm_plan_served_name": "served_name",
             "vllm_plan_engine_stack": "engine_stack"},
    "ports": {"vllm_plan_ports": "ports"},
    "warnings": {},  # publishes nothing: returns plan_warnings
}


def argument_spec(role_path: Path) -> dict[str, Any]:
    """The options of the role's main entry point (meta/argument_specs.yml)."""
    try:
        return entry_point_options(role_path, "main")
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise AnsibleActionFail(f"plan_fleet: role_path: {role_path} has no readable"
                                f" meta/argument_specs.yml main options ({exc}). Fix: pass"
                                " role_path: \"{{ role_path }}\" from roles/vllm_plan.") from None


def host_variables(task: Any, task_vars: dict[str, Any]) -> Any:
    """A function of a host name: that host's variables as a task of this play on it sees
    them (inventory, facts, play, role defaults and parameters, extra vars), or None where
    the inventory has no such host.

    The one place this action reads ansible-core internals, because its public API has no
    other way: hostvars[host] (HostVars.raw_get) leaves out the play and its roles, and the
    variable manager's get_vars, which includes them, takes a Host object that only the
    inventory holds - which no public attribute gives (HostVars._inventory). get_vars' own
    _hosts and _hosts_all (documented there as private) pass the play's host lists once:
    without them get_vars lists them from the inventory again for every host (quadratic in
    a 1,000-host fleet). tests/unit/test_fleet_plan.py::test_ansible_internals_are_there
    fails, naming the change, when ansible-core moves any of them."""
    manager = task.get_variable_manager()
    inventory = task_vars["hostvars"]._inventory
    play = task.get_play()
    batch = list(task_vars["ansible_play_batch"])
    every = list(task_vars["ansible_play_hosts_all"])

    def variables(name: str) -> dict[str, Any] | None:
        host = inventory.get_host(name)
        if host is None:
            return None
        return dict(manager.get_vars(play=play, host=host, task=task, _hosts=batch,
                                     _hosts_all=every))

    return variables


HAZARD_FIX = ("Fix the flags as each message says, or set vllm_plan_options.hazard_overrides"
              " {<hazard id>: '<written reason>'}.")


def _planner_inputs(inputs: dict[str, Any]) -> tuple[object, dict[str, str], dict[str, Any]]:
    """The model's config, how it was read, and kv_plan's options from a host's inputs."""
    if inputs["vllm_plan_model_config"]:
        read = {"text": "",
                "note": "vllm_plan_model_config (a mapping), not checked against a lock"}
        config: object = inputs["vllm_plan_model_config"]
    else:
        read = model_config(inputs["vllm_plan_model_config_file"],
                            inputs["vllm_plan_model_lock_file"], inputs["inventory_dir"])
        config = read["text"]
    served = inputs["vllm_plan_served_model_name"]
    options = dict(inputs["vllm_plan_options"] or {})
    if "vllm_version" in options:
        raise PlanError("vllm_plan_options.vllm_version",
                        "is not a vllm_plan option: the plan is for vllm_install_version, the "
                        "release the engine installs",
                        f"remove it and set vllm_install_version: {options['vllm_version']!s}")
    options.update({
        "model": inputs["vllm_plan_model"],
        # Empty: the engine serves the model under its path.
        "served_model_name": served if len(str(served)) > 0 else None,
        "host": inputs["vllm_plan_host"], "vllm_version": inputs["vllm_version"],
        "engine_package": inputs["vllm_plan_engine_package"],
        "install_source": inputs["install_source"],
        "driver": {**(inputs["vllm_plan_driver"] or {}), "debian_release": inputs["release"]},
        "refuse_hazards": False})
    return config, read, options


def _entry(replicas: list[dict[str, Any]], inputs: dict[str, Any],
           read: dict[str, str]) -> dict[str, Any]:
    served = inputs["vllm_plan_served_model_name"]
    overrides = (inputs["vllm_plan_options"] or {}).get("hazard_overrides") or {}
    return {"replicas": replicas,
            "served_name": served if len(str(served)) > 0 else replicas[0]["plan"]["model"],
            "engine_stack": {**replicas[0]["plan"]["engine_stack"],
                             "override": overrides.get("driver_cannot_run_engine", "")},
            "config_note": read["note"]}


def plan_one(inputs: dict[str, Any]) -> dict[str, Any]:
    """One host's plan entry from its evaluated inputs (raises PlanError, AnsibleError)."""
    config, read, options = _planner_inputs(inputs)
    replicas = plan_replicas(config, inputs["vllm_plan_gpu_count"],
                             inputs["vllm_plan_base_port"], **options)
    return _entry(replicas, inputs, read)


# The inputs a member of an engine group may have of its own; every other must be the group's.
MEMBER_INPUTS = ("vllm_plan_group_address", "vllm_plan_group_interface")


def plan_engine_group(name: str, members: list[tuple[str, dict[str, Any]]]
                      ) -> dict[str, dict[str, Any]]:
    """Each member's plan entry for one multi-host engine (members in inventory order, the
    first is rank 0): the engine's plan, and the member's own argv in its one replica."""
    first_host, first = members[0]
    for host, inputs in members[1:]:
        differ = sorted(k for k in first.keys() | inputs.keys()
                        if k not in MEMBER_INPUTS and first.get(k) != inputs.get(k))
        if differ:
            raise PlanError("vllm_plan_engine_group",
                            f"{name}: {host} and {first_host} disagree on {', '.join(differ)}",
                            "give every member the same planner inputs (the group's "
                            "group_vars), or another engine group name")
    config, read, options = _planner_inputs(first)
    gpus = first["vllm_plan_gpu_count"]
    ranks = plan_group(config, [inputs["vllm_plan_group_address"] for _h, inputs in members],
                       gpus, first["vllm_plan_group_master_port"], **options)
    hosts = [host for host, _inputs in members]
    out = {}
    for (host, inputs), rank in zip(members, ranks, strict=True):
        replica = {"index": 0, "name": "vllm-0",
                   "port": first["vllm_plan_base_port"],
                   "cuda_visible_devices": ",".join(map(str, range(gpus))),
                   "plan": {**rank["plan"], "argv": rank["argv"]}}
        group = {"name": name, "rank": rank["rank"], "hosts": hosts, "size": len(hosts),
                 "headless": rank["headless"], "environment": rank["environment"],
                 # The fabric: this member's address and interface, rank 0's rendezvous.
                 "address": str(inputs["vllm_plan_group_address"]),
                 "interface": str(inputs["vllm_plan_group_interface"]),
                 "master_address": str(first["vllm_plan_group_address"]),
                 "master_port": int(first["vllm_plan_group_master_port"]),
                 "peers": [str(i["vllm_plan_group_address"]) for h, i in members if h != host]}
        out[host] = {**_entry([{**replica, "group": group}], inputs, read), "group": group}
    return out


def check_one_engine_per_host(members: dict[str, list[tuple[str, dict[str, Any]]]],
                              addresses: dict[str, str]) -> None:
    """A machine runs one engine: refuse a group member that is also another inventory host
    of the play (a one-host engine, or a member of another group) by its address (its
    ansible_host or its vllm_plan_group_address equal to the other's). ADDRESSES: each host
    of the play -> its ansible_host (or its name)."""
    owner: dict[str, str] = {}
    for hosts in members.values():
        for host, inputs in hosts:
            for address in (addresses[host], str(inputs["vllm_plan_group_address"])):
                owner.setdefault(address, host)
    member_of = {host: name for name, hosts in members.items() for host, _i in hosts}
    for other, address in addresses.items():
        found = owner.get(address)
        if found is None or found == other:
            continue
        host = found
        used = (f"a member of engine group {member_of[other]}" if other in member_of
                else "a one-host engine")
        raise PlanError("vllm_plan_engine_group",
                        f"{member_of[host]}: member {host} is the machine at {address}, which "
                        f"the play also deploys as {other} ({used}): one machine, two engines "
                        "on the same GPUs",
                        f"list the machine once: remove {other} from vllm_servers, or take "
                        f"{host} out of the group (unset its vllm_plan_engine_group)")


def tables(groups: list[Group[dict[str, Any]]]) -> list[dict[str, str]]:
    """One table per distinct plan and replica, naming the hosts that share it."""
    shown = []
    for group in groups:
        if not boolean(group.inputs["vllm_plan_show"], strict=False):
            continue
        if "group" in group.result:
            shown.append(_group_table(group))
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


def _group_table(group: Group[dict[str, Any]]) -> dict[str, str]:
    """A multi-host engine's table: its plan, then each member's rank and node flags."""
    replica = group.result["replicas"][0]
    info = group.result["group"]
    title = (f"engine group {info['name']}: {len(group.hosts)} hosts x GPUs "
             f"{replica['cuda_visible_devices']} (rank 0 {group.hosts[0]}, port "
             f"{replica['port']})")
    text = (plan_table(replica["plan"], title)
            + "\n  config.json               " + group.result["config_note"])
    for rank in info["ranks"]:
        argv = rank["argv"]
        node = argv[argv.index("--nnodes"):] if "--nnodes" in argv else argv
        text += f"\n  rank {rank['rank']:<20} {rank['host']}: ... {' '.join(node)}"
    return {"label": title, "table": text}


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


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type information
    """plan_fleet: the plan (what=plan) or the port list (what=ports) of every host."""

    TRANSFERS_FILES = False
    _supports_async = False
    _VALID_ARGS = frozenset(("hosts", "what", "role_path"))

    def _host_templars(self, task_vars: dict[str, Any], hosts: list[str]) -> Any:
        """Each host with a templar over its variables as a task of this play on it sees
        them (the variable manager's own resolution: role defaults included). One templar,
        its variables swapped per host: its Jinja environment keeps the compiled
        expressions (a new templar per host compiled every expression again, 30 ms a host)."""
        variables_of = host_variables(self._task, task_vars)
        templar = self._templar.copy_with_new_env()
        for name in hosts:
            variables = variables_of(name)
            if variables is None:
                raise AnsibleActionFail(f"plan_fleet: hosts: {name} is not in the inventory."
                                        " Fix: pass ansible_play_hosts_all.")
            templar.available_variables = variables
            yield name, templar

    @staticmethod
    def _evaluate(templar: Any, expressions: dict[str, str]) -> dict[str, Any]:
        """EXPRESSIONS evaluated for the templar's host, as one expression (a mapping): Ansible
        compiles every expression it evaluates, so one per host costs a fifth of fifteen."""
        if not expressions:
            return {}
        mapping = "{" + ", ".join(f"{key!r}: ({expression})"
                                  for key, expression in expressions.items()) + "}"
        return dict(templar.evaluate_expression(trust_as_template(mapping)))

    def _publish(self, fleet: dict[str, Any], views: dict[str, str]) -> dict[str, Any]:
        """vllm_plan_fleet and its per-host views, for every host of the play (run_once):
        as set_fact's facts on ansible-core 2.21 (register_host_variables, its public call
        for an action's variables), as facts of the result on 2.20, which has no such call
        (public API both; the only difference between the two cores in this action). The
        2.20 way on 2.21 too would put the plan's templates in the fact cache and inject
        them as facts; 2.21's way does not exist on 2.20."""
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
        result: dict[str, Any] = super().run(tmp, task_vars)
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
        role_path = Path(str(args.get("role_path", "")))
        if what == "plan":
            plans, members = self._plan(templars, role_path)
            for plan in plans:
                for host in plan.hosts:
                    fleet[host] = plan.result
            fleet.update(members)
            result.update(tables=tables(plans), refused=refusals(plans))
            computed = len(plans)
        elif what == "warnings":
            result["plan_warnings"], computed = self._warnings(task_vars, hosts, fleet,
                                                               role_path.parent)
            result.update(changed=False, hosts=len(hosts), planner_calls=computed,
                          msg=f"{len(hosts)} hosts, {len(result['plan_warnings'])} warnings")
            return result
        else:
            ports = self._ports(templars, fleet, str(role_path.parent))
            clashes = []
            for listed in ports:
                for host in listed.hosts:
                    fleet[host] = {**fleet[host], "ports": listed.result}
                    clashes.extend(port_clashes(list(listed.result), host))
            result["refused"] = clashes
            computed = len(ports)
        result.update(self._publish(fleet, VIEWS[what]))
        result.update(changed=False, hosts=len(hosts), planner_calls=computed,
                      msg=f"{len(hosts)} hosts, {computed} distinct sets of inputs:"
                          f" {computed} {what} computations")
        return result

    def _plan(self, templars: Any, role_path: Path
              ) -> tuple[list[Group[dict[str, Any]]], dict[str, dict[str, Any]]]:
        """Each host's inputs: the role's variables (checked against its argument spec, as
        the validation task of a role would on each host, once per distinct set of values)
        and EXTRA_INPUTS; then one plan per distinct set, and one per multi-host engine
        group. Returns the plans (a group's as one, for its table and refusals) and each
        group member's own entry (its rank's argv)."""
        spec = argument_spec(role_path)
        validator = ArgumentSpecValidator(spec)
        problems: dict[str, list[str]] = {}
        members: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        addresses: dict[str, str] = {}  # each host -> its ansible_host (one engine a machine)

        evaluated: dict[str, dict[str, Any]] = {}

        def inputs() -> Any:
            for host, templar in templars:
                variables = templar.available_variables
                addresses[host] = str(variables.get("ansible_host", host))
                names = [n for n in spec if n in variables]
                # Hosts whose raw inputs are equal evaluate to equal values: evaluate once
                # (Ansible compiles every template it renders, 10-20 ms a host here).
                key = raw_key(variables, [*names, *EXTRA_ROOTS],
                              variables.get("ansible_facts", {}).get("distribution_release"))
                if key is not None and key in evaluated:
                    yield host, evaluated[key]
                    continue
                try:
                    values = self._evaluate(templar, {**{n: n for n in names}, **EXTRA_INPUTS})
                except AnsibleError as exc:
                    raise AnsibleActionFail(f"{host}: {exc}") from None
                if key is not None:
                    evaluated[key] = values
                if values.get("vllm_plan_engine_group"):
                    members.setdefault(str(values["vllm_plan_engine_group"]), []).append(
                        (host, values))
                else:  # a member's own inputs mean nothing to a one-host engine
                    values = {k: v for k, v in values.items() if k not in MEMBER_INPUTS}
                yield host, values

        def compute(inputs: Any, host: str) -> dict[str, Any]:
            checked = validator.validate({n: inputs[n] for n in spec if n in inputs},
                                         validate_role_argument_spec=True)
            if checked.error_messages:
                problems[host] = checked.error_messages
                return {}
            if inputs.get("vllm_plan_engine_group"):  # planned with its group, below
                return {"engine_group": inputs["vllm_plan_engine_group"]}
            try:
                return plan_one(dict(inputs))
            except (PlanError, ModelConfigError, AnsibleError) as exc:
                raise AnsibleActionFail(f"{host}: {exc}") from None

        # Every host's inputs first: a machine listed twice is refused before any plan.
        every = list(inputs())
        if members:
            try:
                check_one_engine_per_host(members, addresses)
            except PlanError as exc:
                raise AnsibleActionFail(str(exc)) from None
        groups = memoised(iter(every), compute)
        if problems:
            named = [f"{', '.join(g.hosts)}: " + "; ".join(problems[g.hosts[0]])
                     for g in groups if g.hosts[0] in problems]
            raise AnsibleActionFail("Validation of arguments failed (role vllm_plan, entry"
                                    " point main, meta/argument_specs.yml):\n"
                                    + "\n".join(named))
        planned = [g for g in groups if "engine_group" not in g.result]
        member_entries: dict[str, dict[str, Any]] = {}
        for name, hosts in members.items():
            try:
                entries = plan_engine_group(name, hosts)
            except (PlanError, ModelConfigError, AnsibleError) as exc:
                raise AnsibleActionFail(f"{hosts[0][0]}: {exc}") from None
            first = entries[hosts[0][0]]
            ranks = [{"rank": e["group"]["rank"], "host": h,
                      "argv": e["replicas"][0]["plan"]["argv"]} for h, e in entries.items()]
            planned.append(Group(hosts[0][1], {**first, "group": {**first["group"],
                                                                  "ranks": ranks}},
                                 [h for h, _i in hosts]))
            member_entries.update(entries)
        return planned, member_entries

    def _warnings(self, task_vars: dict[str, Any], hosts: list[str], fleet: dict[str, Any],
                  roles_dir: Path) -> tuple[list[str], int]:
        """What the deployment will not do (plugin_utils/plan_warnings.py): the engine hosts'
        restart variables with their planned replicas, and the Alertmanager variables of each
        host of the inventory group prometheus_servers (in the play or not). Returns the
        warnings and how many distinct sets of values were evaluated."""
        servers = [str(h) for h in (task_vars.get("groups") or {}).get("prometheus_servers", [])]
        engine_hosts, server_hosts = set(hosts), set(servers)
        engines: dict[str, tuple[int, dict[str, Any]]] = {}
        alerting: dict[str, dict[str, Any]] = {}
        evaluated: dict[str, dict[str, Any]] = {}
        for host, templar in self._host_templars(task_vars, list(dict.fromkeys(hosts + servers))):
            variables = templar.available_variables
            wanted: list[str] = []
            if host in engine_hosts:
                if host not in fleet:
                    raise AnsibleActionFail(
                        f"plan_fleet: {host} has no plan. Fix: run the role's main tasks"
                        " (roles/vllm_plan) before its warnings tasks, in the same play.")
                wanted += RESTART_VARIABLES
            if host in server_hosts:
                wanted += ALERT_VARIABLES
            names = [n for n in wanted if n in variables]
            # Hosts whose raw values are equal evaluate to equal values: evaluate once.
            key = raw_key(variables, names)
            if key is not None and key in evaluated:
                values = evaluated[key]
            else:
                try:
                    values = self._evaluate(templar, {n: n for n in names})
                except AnsibleError as exc:
                    raise AnsibleActionFail(f"{host}: {exc}") from None
                if key is not None:
                    evaluated[key] = values
            # A member of a multi-host engine group is planned, not deployed (site.yml
            # refuses the group): no restart of it to warn about.
            if host in engine_hosts and "group" not in fleet[host]:
                engines[host] = (len(fleet[host]["replicas"]), values)
            if host in server_hosts:
                alerting[host] = values
        return (skipped_restarts(engines, roles_dir) + silent_alerts(alerting, roles_dir),
                len(evaluated))

    def _ports(self, templars: Any, fleet: dict[str, Any],
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
                    values = self._evaluate(templar, {**{n: n for n in names}, "_prometheus": (
                        "inventory_hostname in groups['prometheus_servers'] | default([])")})
                    prometheus = values.pop("_prometheus")
                except AnsibleError as exc:
                    raise AnsibleActionFail(f"{host}: {exc}") from None
                yield host, {"replicas": [{k: r.get(k) for k in ("name", "port", "index")}
                                          for r in fleet[host]["replicas"]],
                             "values": values, "prometheus": bool(prometheus)}

        def compute(inputs: Any, host: str) -> list[dict[str, Any]]:
            try:
                return port_plan(inputs["replicas"], inputs["values"], roles_dir,
                                 prometheus_server=inputs["prometheus"])
            except (PlanError, PortPlanError, AnsibleError) as exc:
                raise AnsibleActionFail(f"{host}: {exc}") from None

        return memoised(inputs(), compute)
