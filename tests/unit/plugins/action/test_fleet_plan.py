"""Issue 23, item 5: the plan of a fleet is computed once per distinct set of inputs, in one
task (action plan_fleet), and each host still reads its own plan."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from _scripts import ansible_env
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.fleet import memoised
from test_plan_playbook import NOTES_TEMPLATE, PLAYBOOK, ROOT

CONFIG = ROOT / "inventories/example/models/Qwen2.5-72B-Instruct/config.json"


def test_n_hosts_with_k_distinct_inputs_make_k_computations() -> None:
    calls: list[Any] = []
    hosts = [(f"h{i}", {"tp": 1 + i % 3, "options": {"b": 1, "a": 2}}) for i in range(30)]
    hosts.append(("own", {"options": {"a": 2, "b": 1}, "tp": 1, "max_model_len": 4096}))
    groups = memoised(hosts, lambda inputs, host: calls.append(host) or dict(inputs))
    assert len(calls) == 4 == len(groups)
    assert calls == ["h0", "h1", "h2", "own"]  # the first host of each set is the one named
    assert [len(g.hosts) for g in groups] == [10, 10, 10, 1]
    # Key order inside a mapping does not make a set of inputs distinct.
    assert memoised([("a", {"x": 1, "y": 2}), ("b", {"y": 2, "x": 1})],
                    lambda i, h: h)[0].hosts == ["a", "b"]


CONSUMER = """
- name: Plan
  hosts: vllm_servers
  connection: local
  gather_facts: false
  roles:
    - role: vllm_plan
      vars:
        vllm_plan_show: false
- name: A later play reads each host's own plan
  hosts: vllm_servers
  connection: local
  gather_facts: false
  tasks:
    - name: Show what this host sees
      ansible.builtin.debug:
        msg: "SEEN {{ {'host': inventory_hostname,
                       'ports': vllm_plan_replicas | map(attribute='port') | list,
                       'len': vllm_plan_replicas[0].plan.max_model_len,
                       'served': vllm_plan_served_name,
                       'other': hostvars['gpu-5.test'] | vllm_fleet.serving.engine_replicas
                                | map(attribute='port') | list,
                       'fleet': vllm_plan_fleet | length} | to_json | b64encode }}"
"""


def fleet_inventory(tmp: Path, own: dict[str, Any] | None = None) -> Path:
    options = {"gpu": "H200", "tensor_parallel_size": 2}
    hosts: dict[str, Any] = {f"gpu-{i}.test": None for i in range(6)}
    hosts["gpu-5.test"] = own
    inventory = {"all": {"children": {"vllm_servers": {"hosts": hosts, "vars": {
        "vllm_plan_model_config_file": str(CONFIG), "vllm_plan_gpu_count": 4,
        "vllm_plan_options": options}}}}}
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def run(tmp: Path, inventory: Path, playbook: str | None = None,
        *extra: str) -> subprocess.CompletedProcess[str]:
    if playbook is None:
        target = ROOT / "playbooks/plan.yml"
    else:
        target = tmp / "play.yml"
        target.write_text(playbook)
    return subprocess.run([PLAYBOOK, "-i", str(inventory), str(target), *extra], cwd=ROOT,
                          env=ansible_env(), capture_output=True, text=True, timeout=300,
                          check=False)


def test_each_host_reads_its_own_plan_and_an_override_gets_its_own(tmp_path: Path) -> None:
    own = {"vllm_plan_options": {"gpu": "H200", "tensor_parallel_size": 2,
                                 "max_model_len": 8192}, "vllm_plan_base_port": 9000}
    result = run(tmp_path, fleet_inventory(tmp_path, own), CONSUMER, "-v")
    assert result.returncode == 0, result.stdout + result.stderr
    seen = {}
    for line in result.stdout.splitlines():
        if "SEEN " in line:
            value = json.loads(base64.b64decode(line.split("SEEN ", 1)[1].strip().strip('"')))
            seen[value["host"]] = value
    assert len(seen) == 6
    for host in (f"gpu-{i}.test" for i in range(5)):
        assert seen[host]["ports"] == [8000, 8001] and seen[host]["fleet"] == 6
        assert seen[host]["len"] != 8192
    assert seen["gpu-5.test"]["ports"] == [9000, 9001]
    # Another host's replicas, read as Prometheus's scrape config reads them: that host's.
    assert {tuple(v["other"]) for v in seen.values()} == {(9000, 9001)}
    assert seen["gpu-5.test"]["len"] == 8192
    assert "6 hosts, 2 distinct sets of inputs: 2 plan computations" in result.stdout


def test_a_hazard_on_one_host_fails_the_run_naming_that_host(tmp_path: Path) -> None:
    own = {"vllm_plan_gpu_count": 2, "vllm_plan_options": NOTES_TEMPLATE}
    result = run(tmp_path, fleet_inventory(tmp_path, own))
    assert result.returncode != 0
    out = " ".join(result.stdout.split())
    assert "gpu-5.test vllm-0: the plan is refused." in out
    assert "[REFUSED] runtime_oom" in out and "hazard_overrides" in out
    assert "gpu-0.test vllm-0: the plan is refused" not in out
    # The five safe hosts share one table; the refused host has a table of its own.
    assert "5 hosts / vllm-0 (GPUs 0,1, port 8000)" in result.stdout
    assert "gpu-5.test / vllm-0 (GPUs 0,1, port 8000)" in result.stdout


def test_a_host_whose_variable_a_default_reads_differs_gets_its_own_plan(tmp_path: Path) -> None:
    """vllm_plan_model's default reads vllm_install_root: a host that sets only that variable
    is not given its neighbours' evaluated inputs (the raw-input reuse follows templates)."""
    shutil.copytree(ROOT / "inventories/example/models", tmp_path / "models")
    hosts: dict[str, Any] = {f"gpu-{i}.test": None for i in range(4)}
    hosts["gpu-3.test"] = {"vllm_install_root": "/data/vllm"}
    inventory = {"all": {"children": {"vllm_servers": {"hosts": hosts, "vars": {
        "model_artifacts_name": "Qwen2.5-72B-Instruct", "vllm_plan_gpu_count": 2,
        "vllm_plan_options": {"gpu": "H200", "tensor_parallel_size": 2}}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    playbook = CONSUMER.replace("'len': vllm_plan_replicas[0].plan.max_model_len",
                                "'len': vllm_plan_replicas[0].plan.argv[2]") \
        .replace("gpu-5.test", "gpu-3.test")
    result = run(tmp_path, tmp_path / "hosts.yml", playbook)
    assert result.returncode == 0, result.stdout + result.stderr
    seen = {}
    for line in result.stdout.splitlines():
        if "SEEN " in line:
            value = json.loads(base64.b64decode(line.split("SEEN ", 1)[1].strip().strip('"')))
            seen[value["host"]] = value["len"]
    assert seen["gpu-3.test"] == "/data/vllm/models/Qwen2.5-72B-Instruct/current"
    assert {seen[f"gpu-{i}.test"] for i in range(3)} == \
        {"/srv/vllm/models/Qwen2.5-72B-Instruct/current"}


def test_ansible_internals_are_there() -> None:
    """plan_fleet.host_variables is the action's one read of ansible-core internals (no
    public call gives another host's variables as a task of the play sees them): the
    inventory behind hostvars (HostVars._inventory) and get_vars' private _hosts and
    _hosts_all. This fails, naming what moved, when ansible-core changes any of them; then
    change host_variables (the only user) and this test together."""
    import inspect

    import ansible.playbook.task
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager
    from ansible_collections.vllm_fleet.serving.plugins.action import plan_fleet

    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources="h1,")
    manager = VariableManager(loader=loader, inventory=inventory)
    hostvars = HostVars(inventory=inventory, variable_manager=manager, loader=loader)
    assert getattr(hostvars, "_inventory", None) is inventory, (
        "ansible-core's HostVars no longer keeps its inventory as _inventory: "
        "plan_fleet.host_variables must find the Host objects another way")
    parameters = inspect.signature(VariableManager.get_vars).parameters
    missing = [p for p in ("play", "host", "task", "_hosts", "_hosts_all") if p not in parameters]
    assert not missing, (f"ansible-core's VariableManager.get_vars lost {missing}: "
                         "plan_fleet.host_variables must pass the play's hosts another way")

    class Task(ansible.playbook.task.Task):  # type: ignore[misc]
        def get_variable_manager(self) -> VariableManager:
            return manager

        def get_play(self) -> None:
            return None

    variables_of = plan_fleet.host_variables(Task(), {
        "hostvars": hostvars, "ansible_play_batch": ["h1"], "ansible_play_hosts_all": ["h1"]})
    assert variables_of("nowhere") is None
    found = variables_of("h1")
    assert found is not None and found["inventory_hostname"] == "h1"
    # The one read: no other private attribute of Ansible's objects in the action.
    source = (ROOT / "plugins/action/plan_fleet.py").read_text()
    assert source.count('["hostvars"]._inventory') == 1 and source.count("_hosts_all=") == 1
