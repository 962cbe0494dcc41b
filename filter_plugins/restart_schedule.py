"""restart_slot: a host's weekly restart time, staggered across its inventory group.

    {{ groups['h200'].index(inventory_hostname) | restart_slot('Mon 04:00', 30) }}
    -> {'weekday': '1', 'hour': '4', 'minute': '30', 'label': 'Mon 04:30'}

Host N of a group starts N windows after the base time, so no two hosts of a group restart
in the same window. Pure Python (no Ansible import): errors are ValueError with the field.
"""

from __future__ import annotations

import re
from typing import Any

DAYS = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")
WEEK_MINUTES = 7 * 24 * 60


def restart_slot(index: int, base: str = "Mon 04:00", window_minutes: int = 30,
                 hosts: int | None = None) -> dict[str, str]:
    match = re.fullmatch(r"(Sun|Mon|Tue|Wed|Thu|Fri|Sat) ([01]\d|2[0-3]):([0-5]\d)", base)
    if not match:
        raise ValueError(f"restart base time {base!r} is not like 'Mon 04:00' "
                         "(weekday, 24-hour HH:MM)")
    if isinstance(window_minutes, bool) or not isinstance(window_minutes, int) \
            or window_minutes < 1:
        raise ValueError(f"restart window {window_minutes!r} must be a whole number of minutes")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"host index {index!r} must be a whole number >= 0")
    count = hosts if hosts is not None else index + 1
    if count * window_minutes > WEEK_MINUTES:
        raise ValueError(f"{count} hosts x {window_minutes}-minute windows do not fit in a "
                         "week: shorten the window or split the group")
    day, hour, minute = DAYS.index(match[1]), int(match[2]), int(match[3])
    start = (day * 1440 + hour * 60 + minute + index * window_minutes) % WEEK_MINUTES
    weekday, rest = divmod(start, 1440)
    return {"weekday": str(weekday), "hour": str(rest // 60), "minute": str(rest % 60),
            "label": f"{DAYS[weekday]} {rest // 60:02d}:{rest % 60:02d}"}


def restart_replicas(plan_replicas: list[dict[str, Any]],
                     config_dir: str = "/etc/vllm") -> list[dict[str, Any]]:
    """What vllm-restart needs of each planned replica: name, unit, port, the model name it
    serves (--served-model-name in its argv, else the model path) and its env file."""
    out = []
    for r in plan_replicas:
        argv = [str(a) for a in r["plan"].get("argv", [])]
        served = (argv[argv.index("--served-model-name") + 1]
                  if "--served-model-name" in argv[:-1] else str(r["plan"]["model"]))
        out.append({"name": str(r["name"]), "unit": f"{r['name']}.service",
                    "port": int(r["port"]), "model": served,
                    "env_file": f"{config_dir}/{r['name']}.env",
                    "headless": bool((r.get("group") or {}).get("headless", False))})
    return out


class FilterModule:
    """restart_slot and restart_replicas."""

    def filters(self) -> dict[str, Any]:
        return {"restart_slot": restart_slot, "restart_replicas": restart_replicas}
