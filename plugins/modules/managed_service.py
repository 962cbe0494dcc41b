#!/usr/bin/python
"""Documentation of the managed_service action (action_plugins/managed_service.py).

The action runs on the control node and hands every change to
ansible.builtin.systemd_service, so there is no module code here: ansible-doc and
ansible-test read an action plugin's documentation from the module file of the same name.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: managed_service
short_description: A systemd unit enabled and started, without a module call when it already is
description:
  - Asks systemd with one shell command (C(systemctl is-enabled) and C(systemctl is-active)
    on the connection Ansible already holds; no Python starts on the host) and stops there
    when the unit is exactly V(enabled) and V(active).
  - Anything else (disabled, static, masked, activating, failed, unknown, a probe that
    fails) hands the task to M(ansible.builtin.systemd_service) with the same arguments,
    which enables, starts, reports and honours check mode as always. So the action only
    ever answers "unchanged" where the builtin would.
author:
  - vllm-fleet maintainers (@vllm-fleet)
attributes:
  action:
    support: full
    description: An action plugin; this file only documents it.
  check_mode:
    support: full
    description: An enabled, active unit is reported unchanged; anything else is the
      builtin's check mode.
  diff_mode:
    support: none
    description: The builtin shows no diff either.
options:
  name:
    description: The unit, such as V(haproxy) or V(nvidia-vram-collector.timer).
    type: str
    required: true
  enabled:
    description: Must be V(true).
    type: bool
    required: true
  state:
    description: Must be V(started).
    type: str
    required: true
    choices: [started]
  no_block:
    description: Passed on to the builtin (queue the start job and return).
    type: bool
    default: false
notes:
  - Options other than these, and any other O(state), are refused with the fix; use
    M(ansible.builtin.systemd_service) directly for them.
seealso:
  - module: ansible.builtin.systemd_service
"""

EXAMPLES = r"""
- name: Enable and start HAProxy
  vllm_fleet.serving.managed_service:
    name: haproxy
    enabled: true
    state: started
"""

RETURN = r"""
name:
  description: The unit.
  type: str
  returned: success
  sample: haproxy
enabled:
  description: V(true) where the probe found the unit enabled; the builtin's own value otherwise.
  type: bool
  returned: success
  sample: true
state:
  description: V(started) where the probe found the unit active; the builtin's own value otherwise.
  type: str
  returned: success
  sample: started
"""
