"""Misspelt variables and missing secrets are refused before anything changes: the one check of
every role's prefix (plugins/plugin_utils/role_vars.py, applied by the action role_vars), the
facts the roles publish (declared once, role_data.PUBLISHED_FACTS), the unknown_role_vars
filter, and the real plan.yml and preflights of the roles run by ansible-playbook."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from _scripts import ansible_env

ROOT = Path(__file__).resolve().parents[4]

from ansible_collections.vllm_fleet.serving.plugins.action import plan_fleet  # noqa: E402
from ansible_collections.vllm_fleet.serving.plugins.filter.role_vars import (  # noqa: E402
    RoleDefaultError,
    known_role_vars,
    role_default,
    unknown_role_vars,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (  # noqa: E402
    PUBLISHED_FACTS,
    role_dirs,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_vars import (  # noqa: E402
    owner_of,
    refusal,
    unknown_vars,
)

PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())


@pytest.mark.parametrize("role", ROLES)
def test_known_names_are_the_role_defaults(role: str) -> None:
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults/main.yml").read_text()) or {}
    assert known_role_vars(str(ROOT / "roles" / role)) == set(defaults)


def test_misspelt_name_is_named_with_its_close_matches() -> None:
    role = str(ROOT / "roles/vllm_server")
    names = ["vllm_server_api_kye", "vllm_server_api_key", "vllm_install_version",
             "vllm_plan_options", "_vllm_server_changed", "vllm_server_zzzz_qqqq"]
    assert unknown_role_vars(names, role) == [
        "vllm_server_api_kye: unknown to role vllm_server (did you mean vllm_server_api_key?)",
        "vllm_server_zzzz_qqqq: unknown to role vllm_server (no known variable is close)",
    ]
    assert unknown_role_vars(["vllm_server_api_key"], role) == []


def test_role_default_reads_the_producer_roles_defaults_file() -> None:
    assert role_default("vllm_install_root") == "/srv/vllm"
    assert role_default("engine_gateway_admin_socket") == "/run/haproxy/admin.sock"
    assert role_default("gpu_metrics_node_exporter_port") == 9100
    with pytest.raises(RoleDefaultError, match="vllm_server_nonesuch: not a default of role"):
        role_default("vllm_server_nonesuch")
    with pytest.raises(RoleDefaultError, match="no role .* owns"):
        role_default("nobody_root")
    # A templated default depends on its role's play: name the variable it reads instead.
    with pytest.raises(RoleDefaultError, match="is a template"):
        role_default("vllm_server_replicas")


def _preflight(tmp: Path, role: str, tasks_from: str, *extra: str) -> str:
    """Run one role's preflight task file on the control node; its output (rc != 0)."""
    play = [{"name": "preflight", "hosts": "localhost", "connection": "local",
             "gather_facts": False,
             "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}",
                      "vllm_plan_replicas": [{"name": "vllm-0", "port": 8000}]},
             "tasks": [{"name": "the role's preflight", "ansible.builtin.import_role":
                        {"name": role, "tasks_from": tasks_from}}]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play))
    run = subprocess.run([PLAYBOOK, "-i", "localhost,", str(tmp / "play.yml"), *extra],
                         cwd=ROOT, env=ansible_env(), capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode != 0, run.stdout[-2000:]
    return run.stdout + run.stderr


def test_a_misspelt_key_fails_the_engine_preflight_naming_the_fix(tmp_path: Path) -> None:
    out = _preflight(tmp_path, "vllm_server", "validate", "-e", "vllm_server_api_kye=s3cret")
    assert "vllm_server_api_kye: unknown to role vllm_server" in out
    assert "did you mean vllm_server_api_key?" in out
    assert "s3cret" not in out


def test_no_key_fails_the_engine_preflight_unless_not_required(tmp_path: Path) -> None:
    out = _preflight(tmp_path, "vllm_server", "validate")
    assert "vllm_server_api_key is empty and vllm_server_require_api_key is true" in out
    # Not required: the preflight goes on to the next check (the fake plan is refused).
    out = _preflight(tmp_path, "vllm_server", "validate",
                     "-e", "vllm_server_require_api_key=false")
    assert "vllm_server_api_key is empty" not in out
    assert "is not a usable kv_plan result" in out


def test_the_gateway_preflight_refuses_a_misspelt_name_and_a_missing_key(tmp_path: Path) -> None:
    out = _preflight(tmp_path, "engine_gateway", "preflight", "-e", "engine_gateway_prot=81")
    assert "engine_gateway_prot: unknown to role engine_gateway" in out
    assert "did you mean engine_gateway_port?" in out
    out = _preflight(tmp_path, "engine_gateway", "preflight")
    assert "engine_gateway_require_api_key is true: the gateway would answer anyone" in out
    out = _preflight(tmp_path, "engine_gateway", "preflight", "-e", "vllm_server_api_key=k",
                     "-e", "engine_gateway_metrics_port=8000")
    assert "engine_gateway_metrics_port (8000) must differ" in out


# The misspellings that once ran with rc 0 and changed nothing (issue 39, item 3): each with
# its role and the known name the refusal must suggest.
MISSPELT = [
    ("engine_restarts_cron_enabeld", "engine_restarts", "engine_restarts_cron_enabled"),
    ("model_artifacts_hf_tokn", "model_artifacts", "model_artifacts_hf_token"),
    ("prometheus_server_alertmanager_recievers", "prometheus_server",
     "prometheus_server_alertmanager_receivers"),
    ("gpu_metrics_listen_adress", "gpu_metrics", "gpu_metrics_listen_address"),
    ("vllm_plan_base_prot", "vllm_plan", "vllm_plan_base_port"),
]
SPEC_ROLES = sorted(role_dirs())


def test_every_role_is_checked() -> None:
    assert SPEC_ROLES == ROLES and len(ROLES) == 12


@pytest.mark.parametrize(("name", "role", "known"), MISSPELT, ids=[m[0] for m in MISSPELT])
def test_the_misspellings_are_refused_naming_the_close_known_names(
        name: str, role: str, known: str) -> None:
    found = unknown_vars([name, known, "site_serial", "ansible_host"])
    assert list(found) == [role]
    (message,) = found[role]
    assert message.startswith(f"{name}: unknown to role {role} (did you mean {known}")
    # The same through one role's check, and not by any other role's.
    assert unknown_vars([name], [role]) == found
    assert unknown_vars([name], [r for r in ROLES if r != role]) == {}


def misspelt(name: str, prefix: str) -> str:
    """NAME with the last two letters of its suffix swapped (a typo), or one doubled."""
    suffix = name.removeprefix(prefix)
    typo = suffix[:-2] + suffix[-1] + suffix[-2]
    return prefix + (typo if typo != suffix else suffix + suffix[-1])


@pytest.mark.parametrize("role", ROLES)
def test_every_roles_prefix_refuses_a_typo_of_each_known_name(role: str) -> None:
    prefix = role + "_"
    known = sorted(known_role_vars(ROOT / "roles" / role) | PUBLISHED_FACTS[role])
    assert unknown_vars(known) == {}
    for name in known:
        typo = misspelt(name, prefix)
        if typo in known:
            continue
        (message,) = unknown_vars([typo, *known])[role]
        assert message.startswith(f"{typo}: unknown to role {role} ("), message
        assert name in message, message


def test_internals_and_names_under_no_role_are_not_checked() -> None:
    assert unknown_vars(["_vllm_server_changed", "_engine_restarts_slot", "_role_x",
                         "site_serial", "vllm_fleet_expected_hosts", "vllm_planner",
                         "gpu_metrics"]) == {}
    # Each name belongs to the role with the longest prefix of it.
    assert owner_of("vllm_plan_base_prot", ROLES) == "vllm_plan"
    assert owner_of("vllm_fleet_expected_hosts", ROLES) is None
    with pytest.raises(ValueError, match="no role nonesuch"):
        unknown_vars([], ["nonesuch"])


def test_the_refusal_names_hosts_variables_close_names_and_the_fix() -> None:
    found = unknown_vars(["vllm_plan_base_prot", "gpu_metrics_listen_adress"])
    text = refusal([(["h1", "h2"], found)], 2)
    assert text.startswith("all 2 hosts: gpu_metrics_listen_adress: unknown to role gpu_metrics"
                           " (did you mean gpu_metrics_listen_address?); vllm_plan_base_prot:"
                           " unknown to role vllm_plan (did you mean vllm_plan_base_port?). ")
    assert ("Fix: rename the variable in the inventory (or the extra vars) to the name its role"
            " knows (roles/gpu_metrics/meta/argument_specs.yml, roles/vllm_plan/meta/"
            "argument_specs.yml lists every one), or remove it.") in text
    text = refusal([(["h1"], found), (["h2", "h3", "h4", "h5"], found)], 9)
    assert text.startswith("h1: gpu_metrics_listen_adress")
    assert " | h2, h3, h4 and 1 more: gpu_metrics_listen_adress" in text
    assert refusal([(["h1"], found)], 1, name_hosts=False).startswith(
        "gpu_metrics_listen_adress: unknown")


# The published facts: every name under a role's prefix that a task sets (set_fact, set_stats)
# or registers, in the roles and playbooks, and that an action publishes.
SET_FACT = ("ansible.builtin.set_fact", "set_fact")
SET_STATS = ("ansible.builtin.set_stats", "set_stats")


def set_names(node: Any) -> Iterator[str]:
    """Every name a parsed task file or playbook sets: register, set_fact and set_stats
    keys, at any depth (blocks, plays, handlers)."""
    if isinstance(node, list):
        for item in node:
            yield from set_names(item)
    elif isinstance(node, dict):
        if isinstance(node.get("register"), str):
            yield node["register"]
        for key in SET_FACT:
            if isinstance(node.get(key), dict):
                yield from (str(k) for k in node[key] if k != "cacheable")
        for key in SET_STATS:
            data = (node.get(key) or {}).get("data") if isinstance(node.get(key), dict) else None
            if isinstance(data, dict):
                yield from (str(k) for k in data)
        for value in node.values():
            yield from set_names(value)


def published_by_tasks() -> dict[str, set[str]]:
    files = [*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml"),
             *ROOT.glob("playbooks/*.yml"), *ROOT.glob("playbooks/tasks/*.yml")]
    found: dict[str, set[str]] = {role: set() for role in ROLES}
    for path in files:
        for name in set_names(yaml.safe_load(path.read_text())):
            role = owner_of(name, ROLES)
            if role:
                found[role].add(name)
    return found


def published_by_actions() -> set[str]:
    """What plan_fleet publishes (its _publish, for each of its modes): the one action that
    publishes facts."""
    publishing = sorted(p.name for p in (ROOT / "plugins/action").glob("*.py")
                        if re.search(r"register_host_variables|[\"']ansible_facts[\"']",
                                     p.read_text()))
    assert publishing == ["plan_fleet.py"], (
        f"{publishing}: an action that publishes facts: add what it publishes here")
    return {name for views in plan_fleet.VIEWS.values()
            for name in plan_fleet.ActionModule._publish(SimpleNamespace(), {}, views)[
                "ansible_facts"]}


def test_the_scan_finds_what_the_roles_publish() -> None:
    found = published_by_tasks()
    assert found["model_artifacts"] >= {"model_artifacts_live_path", "model_artifacts_revision"}
    assert published_by_actions() == {"vllm_plan_fleet", "vllm_plan_replicas",
                                      "vllm_plan_served_name", "vllm_plan_engine_stack",
                                      "vllm_plan_ports"}
    assert "_vllm_plan_fleet_run" not in set().union(*found.values())  # internals: no owner


def test_every_published_fact_is_declared_once_and_only_those() -> None:
    found = published_by_tasks()
    found["vllm_plan"] |= published_by_actions()
    assert sorted(PUBLISHED_FACTS) == ROLES, "one list per role in role_data.PUBLISHED_FACTS"
    for role in ROLES:
        undeclared = sorted(found[role] - PUBLISHED_FACTS[role])
        assert not undeclared, (
            f"role {role} publishes {undeclared} under its prefix: declare them in "
            "plugins/plugin_utils/role_data.py PUBLISHED_FACTS, or name them _{role}_...")
        stale = sorted(PUBLISHED_FACTS[role] - found[role])
        assert not stale, f"role {role} no longer publishes {stale}: remove them"
        # An input is in the argument specs; a fact the role sets is not an input.
        assert not PUBLISHED_FACTS[role] & known_role_vars(ROOT / "roles" / role), role


@pytest.mark.parametrize("role", ["vllm_plan", "model_artifacts"])
def test_published_facts_are_accepted(role: str) -> None:
    assert PUBLISHED_FACTS[role]
    assert unknown_vars(PUBLISHED_FACTS[role]) == {}
    assert unknown_role_vars(PUBLISHED_FACTS[role], str(ROOT / "roles" / role)) == []


# Every role checks its own prefix first: the first task its main entry point runs (through
# its imports) is the one action, the same task text in each; vllm_plan's checks every
# role's prefix for every host of the play at once (the plan play's one check).
CHECK = {"name": "Refuse variables under the role's prefix that it does not know (it would"
                 " ignore a misspelt one)",
         "vllm_fleet.serving.role_vars": {"role_path": "{{ role_path }}"}}
PLAN_CHECK = {"name": "Refuse variables under any role's prefix that the role does not know,"
                      " on every host",
              "vllm_fleet.serving.role_vars": {"hosts": "{{ ansible_play_hosts_all }}"},
              "run_once": True}


def first_task(path: Path) -> dict[str, Any]:
    task = yaml.safe_load(path.read_text())[0]
    imported = task.get("ansible.builtin.import_tasks")
    return first_task(path.parent / imported) if imported else task


@pytest.mark.parametrize("role", ROLES)
def test_the_role_checks_its_prefix_before_anything_else(role: str) -> None:
    task = first_task(ROOT / "roles" / role / "tasks" / "main.yml")
    task.pop("tags", None)
    assert task == (PLAN_CHECK if role == "vllm_plan" else CHECK)
    # One mechanism: no role keeps an assert of its own over the filter.
    for path in (ROOT / "roles" / role / "tasks").glob("*.yml"):
        assert "unknown_role_vars" not in path.read_text(), path


PLAN = [PLAYBOOK, "-i", str(ROOT / "inventories/example"), str(ROOT / "playbooks/plan.yml")]


def run_plan(*extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PLAN, *extra], cwd=ROOT, env=ansible_env(), capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.parametrize(("name", "role", "known"), MISSPELT, ids=[m[0] for m in MISSPELT])
def test_plan_yml_refuses_each_misspelling_before_planning(
        name: str, role: str, known: str) -> None:
    run = run_plan("-e", f"{name}=s3cret-9000")
    out = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0, out[-2000:]
    assert (f"all 5 hosts: {name}: unknown to role {role} (did you mean {known}") in out
    assert f"roles/{role}/meta/argument_specs.yml lists every one), or remove it." in out
    assert "s3cret" not in out
    assert "Plan each engine replica" not in out  # refused before the plan


def test_plan_yml_passes_without_them_and_with_published_facts() -> None:
    run = run_plan("-e", "model_artifacts_revision=abc123", "-e", "model_artifacts_repaired=false")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "failed=0" in out and "unknown to role" not in out


def test_a_role_alone_refuses_a_misspelling_of_its_prefix(tmp_path: Path) -> None:
    out = _preflight(tmp_path, "engine_restarts", "main",
                     "-e", "engine_restarts_cron_enabeld=false")
    out = " ".join(out.split())
    assert ("engine_restarts_cron_enabeld: unknown to role engine_restarts (did you mean"
            " engine_restarts_cron_enabled?)") in out
    assert "Check the restart group" not in out  # refused first
