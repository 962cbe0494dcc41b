#!/usr/bin/python
"""Documentation of the role_vars action (action_plugins/role_vars.py).

The action runs on the control node only; ansible-doc and ansible-test read an action
plugin's documentation from the module file of the same name.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: role_vars
short_description: Refuse variables under a role's prefix that the role does not know
description:
  - A role ignores a variable it does not read, so a misspelt one (C(engine_restarts_cron_enabeld))
    changes nothing, silently. This action refuses every variable under a role's prefix (the
    role's name and C(_)) that the role's C(meta/argument_specs.yml) does not list (any entry
    point) and that the role does not publish as a fact (the one list per role,
    C(PUBLISHED_FACTS) in C(plugins/plugin_utils/role_data.py)), naming each with its closest
    known names, or the sibling role's variable that replaced it, and the fix.
  - Names that begin with C(_) (a role's internals) are not checked. Only names appear in the
    result, never a value.
  - With O(role_path), the task of one role checks that role's prefix; without, every role of
    the collection is checked, each name by the role with the longest prefix of it.
  - Without O(hosts), the task checks the variables of the host it runs on. With O(hosts)
    (run once, C(run_once)), it reads each host's variables as a task of the play on that host
    sees them and checks each distinct set of names once (the plan play's one check of every
    role and every host, in roles/vllm_plan).
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
  role_path:
    description: The role whose prefix is checked (C(role_path) in the role's tasks); every
      role of the collection where left out.
    type: str
  hosts:
    description: The hosts to check, normally C(ansible_play_hosts_all) with C(run_once);
      the host the task runs on where left out.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Refuse variables under the role's prefix that it does not know
  vllm_fleet.serving.role_vars:
    role_path: "{{ role_path }}"

- name: Refuse variables under any role's prefix that the role does not know, on every host
  vllm_fleet.serving.role_vars:
    hosts: "{{ ansible_play_hosts_all }}"
  run_once: true
"""

RETURN = r"""
hosts:
  description: How many hosts were checked.
  returned: always
  type: int
msg:
  description: The refusal (each unknown variable, its hosts when O(hosts) is given, its
    closest known names and the fix), or that every variable is known.
  returned: always
  type: str
"""
