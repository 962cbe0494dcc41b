"""Deprecated aliases of renamed or retired public variables, kept working for one release.

A role keeps the old name in its defaults as "" (unset) and reads it through this filter:

    {{ prometheus_server_node_exporter_port
       | deprecated_alias('prometheus_server_node_exporter_port',
                          "each engine host's gpu_metrics_node_exporter_port") }}

returns the value unchanged ("" while unset) and, when the inventory sets it, prints a
deprecation warning naming the variable that replaces it.
"""

from __future__ import annotations

from typing import Any

# The release after which the aliases below are removed.
REMOVED_IN = "the next release"


def deprecation_message(old: str, replacement: str) -> str:
    return (f"{old} is deprecated and will be removed in {REMOVED_IN}: it still wins this "
            f"time. Fix: remove it and set {replacement} instead.")


def deprecated_alias(value: Any, old: str, replacement: str) -> Any:
    """VALUE (the deprecated variable's); warns when it is set (neither "" nor None)."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return value
    from ansible.utils.display import Display  # only where Ansible runs the filter

    Display().warning(deprecation_message(old, replacement))
    return value


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"deprecated_alias": deprecated_alias}
