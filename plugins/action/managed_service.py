"""Action managed_service: a systemd unit enabled and started, without a module call when it
already is.

    managed_service:
      name: haproxy
      enabled: true               # the only values taken: enabled, and started
      state: started
      no_block: false             # optional, passed on

ansible.builtin.systemd_service starts Python on the host to find a unit that is already
enabled and active unchanged (0.2-0.3 s each on a small machine; a re-run of site.yml asks
for 7 such units per engine host). This action asks systemd with one shell command on the
connection Ansible already holds (`systemctl is-enabled` and `systemctl is-active`) and
stops there when the unit is exactly `enabled` and `active`. Anything else - disabled,
static, masked, activating, failed, unknown, a probe that fails - hands the task to
ansible.builtin.systemd_service with the same arguments, which enables, starts, reports and
honours check mode as always. So it only ever answers "unchanged" where the builtin would.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.probed_action import ProbedAction

ACCEPTED = frozenset(("name", "enabled", "state", "no_block"))
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")


def check_args(args: dict[str, Any]) -> str | None:
    """The problem with ARGS (named, with the fix), or None."""
    unknown = sorted(set(args) - ACCEPTED)
    if unknown:
        return (f"managed_service: unsupported option(s) {', '.join(unknown)}. Fix: use only "
                f"{', '.join(sorted(ACCEPTED))}, or ansible.builtin.systemd_service directly.")
    if not UNIT_NAME.match(str(args.get("name", ""))):
        return (f"managed_service: name {args.get('name')!r} is not a systemd unit name. Fix: "
                "a unit such as haproxy or nvidia-vram-collector.timer.")
    if not boolean(args.get("enabled"), strict=False) or args.get("state") != "started":
        return ("managed_service: takes enabled: true and state: started only. Fix: use "
                "ansible.builtin.systemd_service for any other state.")
    return None


def probe_command(name: str) -> str:
    """The shell command that prints the unit's enablement, then its activity."""
    unit = shlex.quote(name)
    return f"LC_ALL=C systemctl is-enabled -- {unit}; LC_ALL=C systemctl is-active -- {unit}"


def already_running(stdout: str) -> bool:
    """Whether probe_command printed exactly an enabled, active unit."""
    return stdout.split() == ["enabled", "active"]


class ActionModule(ProbedAction):
    BUILTIN = "ansible.builtin.systemd_service"

    def check(self, args: dict[str, Any]) -> str | None:
        return check_args(args)

    def probe(self, args: dict[str, Any]) -> str | None:
        return probe_command(str(args["name"]))

    def unchanged(self, args: dict[str, Any], rc: int, stdout: str) -> dict[str, Any] | None:
        if not already_running(stdout):
            return None
        return {"name": args["name"], "enabled": True, "state": "started"}
