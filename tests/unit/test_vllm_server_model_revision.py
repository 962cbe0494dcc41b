"""vllm_server's env file names the model revision (a promoted lock changes the file, which
restarts the replica) and its unit checks the live model before every start
(vllm_server_model_check): the templates rendered with Jinja2 as Ansible would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles/vllm_server"
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())


def render(template: str, **overrides: Any) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE / "templates"),
                             keep_trailing_newline=True)
    env.filters["to_json"] = json.dumps
    env.filters["bool"] = lambda v: v is True or str(v).lower() in ("1", "true", "yes")
    variables = {k: v for k, v in DEFAULTS.items() if not (isinstance(v, str) and "{{" in v)}
    variables.update(ansible_managed="managed", vllm_server_model_revision="",
                     vllm_server_api_key="",
                     item={"name": "vllm-0", "port": 8000, "cuda_visible_devices": "0",
                           "plan": {"model": "/srv/vllm/models/m/current"}})
    variables.update(overrides)
    return env.get_template(template).render(**variables)


def test_the_env_file_names_the_revision_so_a_new_one_changes_it() -> None:
    old = render("vllm.env.j2", vllm_server_model_revision="a" * 40)
    new = render("vllm.env.j2", vllm_server_model_revision="b" * 40)
    assert f'MODEL_REVISION="{"a" * 40}"' in old.splitlines()
    assert old != new
    assert "MODEL_REVISION" not in render("vllm.env.j2")  # no model_artifacts: nothing


def test_the_revision_defaults_to_model_artifacts_and_a_repair_restarts_all() -> None:
    assert DEFAULTS["vllm_server_model_revision"] == \
        "{{ model_artifacts_revision | default('') }}"
    assert DEFAULTS["vllm_server_model_replaced"] == \
        "{{ model_artifacts_repaired | default(false) }}"
    configure = yaml.safe_load((ROLE / "tasks/configure.yml").read_text())
    replaced = [t for t in configure if t.get("when") == "vllm_server_model_replaced | bool"]
    assert replaced and "vllm_server_replicas | map(attribute='name')" in \
        replaced[0]["ansible.builtin.set_fact"]["_vllm_server_changed"]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_unit_checks_the_live_model_before_every_start(enabled: bool) -> None:
    unit = render("vllm.service.j2", vllm_server_model_check=enabled).splitlines()
    pre = "ExecStartPre=/usr/local/bin/vllm-model-check /srv/vllm/models/m/current"
    assert (pre in unit) is enabled
    if enabled:  # before the engine, as the unit's user (no '+' prefix)
        start = next(i for i, line in enumerate(unit) if line.startswith("ExecStart="))
        assert unit.index(pre) < start
    assert DEFAULTS["vllm_server_model_check"] is True
