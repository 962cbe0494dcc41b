#!/usr/bin/python
"""Documentation of the managed_file action (action_plugins/managed_file.py).

The action runs on the control node and hands every change to ansible.builtin.template or
ansible.builtin.copy, so there is no module code here: ansible-doc and ansible-test read an
action plugin's documentation from the module file of the same name.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: managed_file
short_description: A file from a template, a role file or content, or a directory, without
  a module call when the host already has it right
description:
  - Computes the wanted bytes on the control node (a O(template) as the
    C(ansible.builtin.template) lookup renders it, a role file O(src), or O(content)), reads
    O(dest) with one shell command (coreutils' C(test), C(stat) and C(sha1sum) on the
    connection Ansible already holds; no Python starts on the host) and stops there when it
    is a regular file whose sha1, owner, group and mode all match.
  - Anything else (a difference, a missing file or a link, a rendering or a probe that fails,
    a host without GNU C(stat)) hands the
    task to M(ansible.builtin.template) (with O(template) as its C(src)) or
    M(ansible.builtin.copy), which writes, validates, diffs and honours check mode as always.
    So the action only ever answers "unchanged" for a file that already holds the wanted
    bytes with the wanted attributes; every change is the builtin's.
  - The builtins run two modules on a file that is already right (stat, then file to apply
    owner, group and mode again); this saves both Python starts on the host per such file.
author:
  - vllm-fleet maintainers (@vllm-fleet)
attributes:
  action:
    support: full
    description: An action plugin; this file only documents it.
  check_mode:
    support: full
    description: A match is reported unchanged; anything else is the builtin's check mode.
  diff_mode:
    support: full
    description: The builtin shows the diff of every change.
options:
  template:
    description: A template of the role (C(templates/)) to render; one of O(template),
      O(src) and O(content) is required.
    type: str
  src:
    description: A file of the role (C(files/)) to copy.
    type: str
  content:
    description: The file's content.
    type: str
  dest:
    description: The file on the host.
    type: path
    required: true
  owner:
    description: The file's owner (name or uid).
    type: str
  group:
    description: The file's group (name or gid).
    type: str
  mode:
    description: The file's mode, an octal string such as V("0644").
    type: str
  validate:
    description: Passed on to the builtin, which runs it on the new file before it replaces
      O(dest) (C(%s) is the file).
    type: str
  state:
    description:
      - V(directory) makes O(dest) a directory with O(owner), O(group) and O(mode), as
        M(ansible.builtin.file) with O(state=directory) does (its builtin here); it takes
        none of O(template), O(src), O(content) and O(validate).
    type: str
    choices: [file, directory]
    default: file
notes:
  - Options other than these are refused with the list of the supported ones; use
    M(ansible.builtin.template) or M(ansible.builtin.copy) directly for them.
seealso:
  - module: ansible.builtin.template
  - module: ansible.builtin.copy
"""

EXAMPLES = r"""
- name: Create the engine's root
  vllm_fleet.serving.managed_file:
    dest: /srv/vllm
    state: directory
    owner: root
    group: root
    mode: "0755"

- name: Render the haproxy configuration
  vllm_fleet.serving.managed_file:
    template: haproxy.cfg.j2
    dest: /etc/haproxy/haproxy.cfg
    owner: root
    group: haproxy
    mode: "0640"
    validate: haproxy -c -f %s

- name: Install the TLS bundle
  vllm_fleet.serving.managed_file:
    content: "{{ tls_certificate | trim ~ '\n' ~ tls_key | trim ~ '\n' }}"
    dest: /etc/haproxy/vllm.pem
    owner: root
    group: haproxy
    mode: "0640"
  no_log: true
"""

RETURN = r"""
dest:
  description: The file on the host.
  type: str
  returned: success
  sample: /etc/haproxy/haproxy.cfg
checksum:
  description: The sha1 of the file's bytes.
  type: str
  returned: success
  sample: 2aae6c35c94fcfb415dbe95f408b9ce91ee846ed
owner:
  description: The file's owner.
  type: str
  returned: success
  sample: root
group:
  description: The file's group.
  type: str
  returned: success
  sample: haproxy
mode:
  description: The file's mode.
  type: str
  returned: success
  sample: "0640"
state:
  description: V(file), or V(directory) for a directory.
  type: str
  returned: success
  sample: file
"""
