#!/usr/bin/python
"""Documentation of the managed_packages action (plugins/action/managed_packages.py).

The action runs on the control node and hands every change to ansible.builtin.apt, so
there is no module code here: ansible-doc and ansible-test read an action plugin's
documentation from the module file of the same name.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: managed_packages
short_description: Debian packages present, without a module call when they all already are
description:
  - Asks dpkg with one shell command (C(dpkg-query --show) for all the packages, on the
    connection Ansible already holds; no Python starts on the host) and stops there when
    every package is exactly V(ii) (wanted install, installed, no error flag).
  - Anything else (a package missing, half-installed, removed with its configuration kept,
    a name the probe cannot judge such as V(name=1.2*) or V(name:i386), a probe that fails
    or prints anything unexpected) hands the task to M(ansible.builtin.apt) with the same
    arguments, which refreshes the lists, installs, reports, diffs and honours check mode
    as always. So the action only ever answers "unchanged" where every package is
    installed.
  - Where every package is installed the package lists are left as they are, even with
    O(update_cache) and an expired O(cache_valid_time) (a re-run does not make them
    younger), as the dpkg-query and apt task pair this action replaces did.
author:
  - vllm-fleet maintainers (@vllm-fleet)
attributes:
  action:
    support: full
    description: An action plugin; this file only documents it.
  check_mode:
    support: full
    description: Installed packages are reported unchanged; anything else is the builtin's
      check mode.
  diff_mode:
    support: full
    description: Installed packages show no diff; anything else is the builtin's diff.
options:
  name:
    description:
      - The packages, such as V(haproxy) or V([prometheus, prometheus-alertmanager]).
      - A string is split on commas, as M(ansible.builtin.apt) does.
    type: list
    elements: str
    required: true
  state:
    description: Must be V(present).
    type: str
    default: present
    choices: [present]
  install_recommends:
    description: Passed on to the builtin. Left out, apt's own configuration decides.
    type: bool
  update_cache:
    description: Passed on to the builtin (only where a package is not installed).
    type: bool
  cache_valid_time:
    description: Passed on to the builtin (seconds).
    type: int
  default_release:
    description: Passed on to the builtin.
    type: str
notes:
  - Options other than these, and any other O(state), are refused with the fix; use
    M(ansible.builtin.apt) directly for them.
seealso:
  - module: ansible.builtin.apt
"""

EXAMPLES = r"""
- name: Install HAProxy from the distribution
  vllm_fleet.serving.managed_packages:
    name: haproxy
    install_recommends: false
    update_cache: true
    cache_valid_time: 3600

- name: Install Prometheus and Alertmanager
  vllm_fleet.serving.managed_packages:
    name: [prometheus, prometheus-alertmanager]
    state: present
"""

RETURN = r"""
cache_updated:
  description: V(false) where the probe found every package installed; the builtin's own
    value otherwise.
  type: bool
  returned: success
  sample: false
packages:
  description: The packages the probe found installed.
  type: list
  elements: str
  returned: when every package was already installed
  sample: [haproxy]
"""
