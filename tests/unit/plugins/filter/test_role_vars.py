"""Misspelt and missing secrets are refused before anything changes: the unknown_role_vars
filter, and the real preflight of vllm_server and engine_gateway run by ansible-playbook."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _scripts import ansible_env

ROOT = Path(__file__).resolve().parents[4]

from ansible_collections.vllm_fleet.serving.plugins.filter.role_vars import (  # noqa: E402
    RoleDefaultError,
    known_role_vars,
    role_default,
    unknown_role_vars,
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
