#!/usr/bin/python
"""Documentation of the plan_fleet action (action_plugins/plan_fleet.py).

The action runs on the control node only; ansible-doc and ansible-test read an action
plugin's documentation from the module file of the same name.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: plan_fleet
short_description: Plan every engine replica of the play's hosts in one task, once per
  distinct set of inputs
description:
  - Run once (C(run_once)) by roles/vllm_plan. Reads each host's variables as a task on that
    host sees them (inventory, facts, role defaults), evaluates the role's inputs there and
    runs the planner once per distinct set of inputs.
  - Publishes to every host of the play C(vllm_plan_fleet) (host to its plan) and the
    per-host views C(vllm_plan_replicas), C(vllm_plan_served_name), C(vllm_plan_engine_stack)
    (O(what=plan)) or C(vllm_plan_ports) (O(what=ports)), each evaluated for the host that
    reads it.
  - O(what=warnings) publishes nothing; it returns what the deployment will not do (a host
    planned with one replica gets no weekly restart; Alertmanager receivers without a
    destination), for the plan play to print, not to refuse.
author:
  - vllm-fleet maintainers (@vllm-fleet)
attributes:
  action:
    support: full
    description: An action plugin; this file only documents it.
  check_mode:
    support: full
    description: Changes nothing anywhere.
  diff_mode:
    support: none
    description: Nothing to diff.
options:
  hosts:
    description: The hosts to plan, normally C(ansible_play_hosts_all).
    type: list
    elements: str
    required: true
  what:
    description: V(plan) the replicas, V(ports) every port of each host across the roles
      (after V(plan)), or V(warnings) what the deployment will not do (after V(plan)).
    type: str
    choices: [plan, ports, warnings]
    default: plan
  role_path:
    description: The path of roles/vllm_plan (C(role_path)); its C(meta/argument_specs.yml)
      checks each host's variables, as the role's validation task would on every host (once
      per distinct set of values), and its sibling roles' defaults fill unset port variables.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Plan every host of the play
  vllm_fleet.serving.plan_fleet:
    hosts: "{{ ansible_play_hosts_all }}"
  run_once: true
  register: plan
"""

RETURN = r"""
planner_calls:
  description: Distinct sets of inputs, each computed once.
  returned: always
  type: int
tables:
  description: One plan table per distinct plan and replica, naming its hosts (O(what=plan)).
  returned: when what is plan
  type: list
  elements: dict
refused:
  description: Refusals (hazards not overridden, or port clashes), each naming its hosts.
  returned: when what is plan or ports
  type: list
  elements: str
plan_warnings:
  description: What the deployment will not do, each naming its hosts and the fix
    (plugins/plugin_utils/plan_warnings.py).
  returned: when what is warnings
  type: list
  elements: str
"""
