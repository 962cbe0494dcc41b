"""Deprecated aliases of renamed or retired public variables, kept working for one release.

A role keeps the old name in its defaults as "" (unset) and reads it through one of these
filters:

    {{ prometheus_server_node_exporter_port
       | deprecated_alias('prometheus_server_node_exporter_port',
                          "each engine host's gpu_metrics_node_exporter_port") }}

returns the value unchanged ("" while unset) and, when the inventory sets it, prints a
deprecation warning naming the variable that replaces it. A plain rename reads both names:

    {{ vllm_server_uv_timeout
       | renamed_from(vllm_server_uv_timeout, 'vllm_server_uv_timeout',
                      'vllm_server_uv_timeout') }}

returns the new name's value, unless the old name is set: then the old one's, with the warning.
"""

from __future__ import annotations

from typing import Any

# The release after which the aliases below are removed.
REMOVED_IN = "the next release"


def deprecation_message(old: str, replacement: str) -> str:
    return (f"{old} is deprecated and will be removed in {REMOVED_IN}: it still wins this "
            f"time. Fix: remove it and set {replacement} instead.")


def is_unset(value: Any) -> bool:
    """A deprecated name's default ("" or None): the inventory did not set it."""
    return value is None or (isinstance(value, str) and value.strip() == "")


def deprecated_alias(value: Any, old: str, replacement: str) -> Any:
    """VALUE (the deprecated variable's); warns when it is set (neither "" nor None)."""
    if is_unset(value):
        return value
    from ansible.utils.display import Display  # only where Ansible runs the filter

    Display().warning(deprecation_message(old, replacement))
    return value


def renamed_from(value: Any, old_value: Any, old: str, new: str) -> Any:
    """VALUE (the new name's), or OLD_VALUE with a warning where the old name is set."""
    if is_unset(old_value):
        return value
    return deprecated_alias(old_value, old, new)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"deprecated_alias": deprecated_alias, "renamed_from": renamed_from}
