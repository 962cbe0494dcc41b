"""The model_config filter: the model's config.json for the plan, checked against the
model's lock (roles/vllm_plan).

    {{ config_file | model_config(lock_file, inventory_dir) }}
      -> {'text': <config.json as text>, 'note': <where it came from, and whether it was checked>}

A thin adapter: the logic lives in plugins/plugin_utils/model_config.py, which the plan_fleet
action imports too; its ModelConfigError becomes AnsibleFilterError here.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils import (
    model_config as _model_config,
)


def model_config(config_file: object, lock_file: object = "", base: object = "") -> dict[str, str]:
    """config.json's text and a note for the plan table; AnsibleFilterError on a config that
    is not the lock's (or cannot be read), naming the files and the fix."""
    try:
        return _model_config.model_config(config_file, lock_file, base)
    except _model_config.ModelConfigError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    """model_config."""

    def filters(self) -> dict[str, Any]:
        return {"model_config": model_config}
