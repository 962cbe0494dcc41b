"""Issue 22, item 2: one source for each fact. A role that consumes another role's path or
port defaults to the producer's variable (and, where the producer role is not in the play, to
that role's own default, read by the role_default filter); no consumer spells the value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from _scripts import ansible_env

ROOT = Path(__file__).resolve().parents[2]


def render(tmp: Path, vars_files: list[str], expressions: dict[str, str],
           hosts: dict[str, dict[str, Any]] | None = None, **extra: object) -> dict[str, Any]:
    """Each expression templated by a real ansible-playbook on localhost, with the given
    files (relative to the repository) as vars_files, ``extra`` as extra vars and ``hosts``
    as other inventory hosts (name -> host variables)."""
    inventory = {"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                 "ansible_python_interpreter": sys.executable},
                                   **(hosts or {})}}}
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    content = "{{ {" + ", ".join(f"{json.dumps(k)}: ({v})" for k, v in expressions.items()) \
        + "} | to_json }}"
    playbook = [{"hosts": "localhost", "gather_facts": False,
                 "vars_files": [str(ROOT / f) for f in vars_files],
                 "tasks": [{"ansible.builtin.copy": {"content": content,
                                                     "dest": str(tmp / "out.json"),
                                                     "mode": "0644"}}]}]
    (tmp / "render.yml").write_text(yaml.safe_dump(playbook))
    (tmp / "extra.json").write_text(json.dumps(extra))
    result = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp / "hosts.yml"),
         str(tmp / "render.yml"), "-e", f"@{tmp / 'extra.json'}"],
        cwd=ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return dict(json.loads((tmp / "out.json").read_text()))


def test_only_vllm_install_spells_its_root() -> None:
    allowed = {ROOT / "roles/vllm_install/defaults/main.yml",
               ROOT / "roles/vllm_install/meta/argument_specs.yml"}
    paths = [*ROOT.glob("roles/*/defaults/*.yml"), *ROOT.glob("roles/*/vars/*.yml"),
             *ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/templates/*.j2"),
             *ROOT.glob("roles/*/meta/argument_specs.yml"), *ROOT.glob("playbooks/*.yml")]
    spelt = [str(p.relative_to(ROOT)) for p in sorted(paths)
             if p not in allowed and "/srv/vllm" in p.read_text()]
    assert spelt == []


def test_the_engine_root_reaches_benchmark_and_model_artifacts(tmp_path: Path) -> None:
    files = ["roles/benchmark/defaults/main.yml", "roles/model_artifacts/defaults/main.yml",
             "roles/model_artifacts/vars/main.yml"]
    exprs = {"python": "benchmark_python", "models": "_model_artifacts_root"}
    moved = render(tmp_path, files, exprs, vllm_install_root="/opt/engine",
                   model_artifacts_name="m")
    assert moved == {"python": "/opt/engine/venv/bin/python", "models": "/opt/engine/models/m"}
    alone = render(tmp_path, files, exprs, model_artifacts_name="m")
    assert alone == {"python": "/srv/vllm/venv/bin/python", "models": "/srv/vllm/models/m"}


def test_the_firewall_admits_the_exporters_own_ports(tmp_path: Path) -> None:
    """host_firewall's metrics ports are gpu_metrics' and engine_gateway's variables (their
    roles' defaults where unset): a moved DCGM exporter is admitted where it listens."""
    files = ["roles/host_firewall/defaults/main.yml"]
    exprs = {"ports": "host_firewall_metrics_ports"}
    assert render(tmp_path, files, exprs) == {"ports": [9100, 9180]}
    moved = render(tmp_path, files, exprs, gpu_metrics_dcgm_exporter=True,
                   gpu_metrics_dcgm_exporter_port=9411, gpu_metrics_node_exporter_port=9101)
    assert moved == {"ports": [9101, 9180, 9411]}
