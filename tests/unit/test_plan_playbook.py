"""playbooks/plan.yml end to end with the real ansible-playbook, on the control node only."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _models import NOTES_CONFIG
from _scripts import ansible_env

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) or \
    "ansible-playbook"


def run_plan(inventory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = ansible_env()
    return subprocess.run(
        [PLAYBOOK, "-i", str(inventory), str(ROOT / "playbooks" / "plan.yml"), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def write_inventory(tmp: Path, options: dict[str, object], config: str | None = None) -> Path:
    config_file = tmp / "config.json"
    config_file.write_text(config or (ROOT / "inventories/example/models/"
                                      "Qwen2.5-72B-Instruct/config.json").read_text())
    inventory = {"all": {"children": {"vllm_servers": {
        "hosts": {"gpu-1.test": None},
        "vars": {"vllm_plan_model_config_file": str(config_file), "vllm_plan_gpu_count": 2,
                 "vllm_plan_options": options}}}}}
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


NOTES_TEMPLATE = {  # the notes' 2xH200 launch flags, on the pinned vLLM
    "gpu": "H200", "tensor_parallel_size": 2, "gpu_memory_utilization": 0.95,
    "max_num_seqs": 256, "max_model_len": 32768, "kv_cache_dtype": "fp8",
    "workload": {"prompt_tokens_p50": 4000, "prompt_tokens_p95": 16000,
                 "output_tokens_p50": 500, "output_tokens_p95": 2000, "concurrency": 256},
}


def test_example_inventory_plans_every_host_and_replica() -> None:
    result = run_plan(ROOT / "inventories" / "example")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # h200-a and h200-b share their inputs: one table, naming both (issue 23, item 5).
    assert "hosts                     h200-a.gpu.example.internal, h200-b.gpu.example.internal" \
        in out
    for title in ("2 hosts / vllm-0 (GPUs 0,1, port 8000)",
                  "h100-a.gpu.example.internal / vllm-0 (GPUs 0,1,2,3, port 8000)",
                  "h100-a.gpu.example.internal / vllm-1 (GPUs 4,5,6,7, port 8001)"):
        assert title in out
    assert "kv bytes/token/gpu        81,920 (fp8)" in out  # 72B, TP=2, fp8
    assert "kv bytes/token/gpu        40,960 (fp8)" in out  # 72B, TP=4, fp8
    assert "changed=0" in out and "failed=0" in out


def test_the_plan_warns_of_one_replica_hosts_and_receivers_without_destination() -> None:
    """Issue 39, item 7: the example's H200 hosts (one replica each) get no weekly restart
    and its Alertmanager receivers are the role's empty defaults: both warned of, naming the
    hosts and the fix; the plan still passes. Covered hosts and receivers: no warning."""
    result = run_plan(ROOT / "inventories" / "example")
    assert result.returncode == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split()).replace("''", "'")
    assert "TASK [vllm_plan : Warn of what the deployment will not do" in out
    assert ("h200-a.gpu.example.internal, h200-b.gpu.example.internal, "
            "h200-c.gpu.example.internal: one replica, so no weekly restart.") in out
    named = out[out.index("msg: - '"):out.index("one replica, so no weekly restart")]
    assert "h100" not in named  # two replicas each: their restarts go one at a time
    assert "vllm_server_restart_downtime_reason (the downtime of the restart accepted)" in out
    assert ("monitor.example.internal: the Alertmanager receivers page (severity critical); "
            "ticket (severity warning, the default route) have no webhook_urls") in out
    assert "failed=0" in out
    covered = {"vllm_server_restart_downtime_reason": "one replica by design (ticket SRE-1)",
               "prometheus_server_alertmanager_receivers": {
                   "page": {"webhook_urls": ["http://pager.example/hook"]},
                   "ticket": {"email_to": ["gpu-oncall@example.com"]}}}
    result = run_plan(ROOT / "inventories" / "example", "-e", json.dumps(covered))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no weekly restart" not in result.stdout and "go nowhere" not in result.stdout


def replica_table(out: str, title: str) -> str:
    """The plan table printed for one replica (from its title to the next blank field)."""
    start = out.index(title)
    end = out.find("\nok: ", start)
    return out[start:end if end != -1 else len(out)]


def test_example_inventory_plans_the_hybrid_groups_with_their_layer_mix() -> None:
    """The example's Qwen3.5-397B-A17B (FP8, MTP) and Qwen3-Next groups: each group names
    its own model; the table shows the layer mix and vLLM's enlarged attention block."""
    result = run_plan(ROOT / "inventories" / "example")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    qwen35 = replica_table(out, "h200-c.gpu.example.internal / vllm-0 (GPUs 0,1,2,3,4,5,6,7, "
                                "port 8000)")
    assert "/srv/vllm/models/Qwen3.5-397B-A17B-FP8/current" in qwen35
    assert "layers                    15 attention + 45 linear" in qwen35
    # vLLM 0.33 on an H200 (SM90): FlashInfer's GDN prefill checkpoints make the block a
    # multiple of 64 (1056 on 0.32) and add a state block per request.
    assert "kv blocks                 9,247 x 1088 tokens" in qwen35
    # 1 state block + 1 for prefix caching (align mode) + 1 checkpoint + 2 speculative tokens.
    assert "5 blocks/request" in qwen35
    assert '--speculative-config      {"method":"qwen3_5_mtp","num_speculative_tokens":2}' \
        in qwen35
    for replica in ("vllm-0 (GPUs 0,1,2,3, port 8000)", "vllm-1 (GPUs 4,5,6,7, port 8001)"):
        qnext = replica_table(out, f"h100-b.gpu.example.internal / {replica}")
        assert "/srv/vllm/models/Qwen3-Next-80B-A3B-Instruct/current" in qnext
        assert "layers                    12 attention + 36 linear" in qnext
        assert "kv blocks                 9,070 x 576 tokens" in qnext
        assert "hazards                   none" in qnext
    # The full-attention groups keep their model and print no layer mix.
    h200 = replica_table(out, "2 hosts / vllm-0")
    assert "Qwen2.5-72B-Instruct/current" in h200 and "layers  " not in h200


def test_the_notes_template_is_refused_before_any_host(tmp_path: Path) -> None:
    result = run_plan(write_inventory(tmp_path, NOTES_TEMPLATE))
    assert result.returncode != 0
    out = result.stdout
    assert "[REFUSED] runtime_oom" in out and "[REFUSED] preemption_storm" in out
    assert "the plan is refused" in out and "hazard_overrides" in out
    assert "Traceback" not in out + result.stderr


def test_overridden_hazards_pass_with_their_reasons(tmp_path: Path) -> None:
    reasons = {"runtime_oom": "load test 2026-11-20 held 0.95 for 72 h",
               "preemption_storm": "batch tier; preemptions accepted by SRE-123"}
    result = run_plan(write_inventory(tmp_path, {**NOTES_TEMPLATE, "hazard_overrides": reasons}))
    assert result.returncode == 0, result.stdout
    for reason in reasons.values():
        assert f"OVERRIDDEN: {reason}" in result.stdout


def test_the_notes_malformed_config_names_the_field(tmp_path: Path) -> None:
    result = run_plan(write_inventory(tmp_path, {"gpu": "H200", "tensor_parallel_size": 2},
                                      config=NOTES_CONFIG))
    assert result.returncode != 0
    assert "kv_plan: config: is not valid JSON" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("bad", [{"gpu": "H200", "tensor_parallel_size": 3}])
def test_gpus_that_do_not_split_into_replicas_are_refused(tmp_path: Path,
                                                          bad: dict[str, object]) -> None:
    result = run_plan(write_inventory(tmp_path, bad))
    assert result.returncode != 0
    assert "kv_plan: tensor_parallel_size: 3 does not divide the host's 2 GPUs" in result.stdout


def _planned_release(out: str) -> set[str]:
    return set(re.findall(r"^\s*vllm\s+([0-9][^ ]*) \(", out, re.MULTILINE))


def test_the_plan_is_for_the_one_pin_vllm_install_version(tmp_path: Path) -> None:
    """Issue 22, item 4: vllm_install_version (what the engine installs) feeds the planner;
    the planner's own vllm_version option in vllm_plan_options is refused, naming the fix."""
    inventory = write_inventory(tmp_path, {"gpu": "H200", "tensor_parallel_size": 2})
    result = run_plan(inventory, "-e", "vllm_install_version=0.19.1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert _planned_release(result.stdout) == {"0.19.1"}
    assert "deprecated" not in (result.stdout + result.stderr)
    (tmp_path / "old").mkdir()
    inventory = write_inventory(tmp_path / "old", {"gpu": "H200", "tensor_parallel_size": 2,
                                                   "vllm_version": "0.19.1"})
    result = run_plan(inventory)
    assert result.returncode != 0
    log = " ".join((result.stdout + result.stderr).split())
    assert "vllm_plan_options.vllm_version: is not a vllm_plan option" in log, log[-3000:]
    assert "Fix: remove it and set vllm_install_version: 0.19.1" in log


# One name for the model: an inventory sets model_artifacts_name and the plan derives its
# config (stored by lock_model.yml beside the lock), the engine's path and the served name.
LOCAL_MODELS = ROOT / "inventories" / "local" / "models"
SHOW_NAMES = """
- name: Plan, then show what the engine is told
  hosts: vllm_servers
  connection: local
  gather_facts: false
  roles:
    - role: vllm_plan
  tasks:
    - name: Show the argv and the name clients send
      ansible.builtin.debug:
        msg: "NAMES {{ {'argv': vllm_plan_replicas[0].plan.argv,
                        'served': vllm_plan_served_name} | to_json | b64encode }}"
"""


def named_inventory(tmp: Path, name: str = "Tiny-Qwen2", lock: bool = True,
                    **extra: object) -> Path:
    """An inventory naming its model only by model_artifacts_name, with the local model's
    config.json (and its lock) under models/."""
    models = tmp / "inv" / "models"
    (models / name).mkdir(parents=True)
    shutil.copy(LOCAL_MODELS / "tiny-qwen2" / "config.json", models / name / "config.json")
    if lock:
        shutil.copy(LOCAL_MODELS / "tiny-qwen2.lock.yml", models / f"{name}.lock.yml")
    options = {"gpu": "H100-SXM", "tensor_parallel_size": 1,
               "workload": {"prompt_tokens_p50": 64, "prompt_tokens_p95": 256,
                            "output_tokens_p50": 32, "output_tokens_p95": 128,
                            "concurrency": 8}}
    inventory = {"all": {"children": {"vllm_servers": {
        "hosts": {"gpu-1.test": None},
        "vars": {"model_artifacts_name": name, "vllm_plan_options": options, **extra}}}}}
    path = tmp / "inv" / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def run_names(inventory: Path, tmp: Path) -> tuple[subprocess.CompletedProcess[str],
                                                   dict[str, object]]:
    playbook = tmp / "names.yml"
    playbook.write_text(SHOW_NAMES)
    result = subprocess.run(
        [PLAYBOOK, "-i", str(inventory), str(playbook)], cwd=ROOT, env=ansible_env(),
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(x for x in result.stdout.splitlines() if "NAMES " in x)
    names: dict[str, object] = json.loads(base64.b64decode(line.split("NAMES ", 1)[1].strip()))
    return result, names


def test_one_name_gives_the_config_the_engine_path_and_the_served_name(tmp_path: Path) -> None:
    result, names = run_names(named_inventory(tmp_path), tmp_path)
    assert names["argv"][:5] == ["vllm", "serve",  # type: ignore[index]
                                 "/srv/vllm/models/Tiny-Qwen2/current",
                                 "--served-model-name", "tiny-qwen2"]
    assert names["served"] == "tiny-qwen2"
    assert ("config.json               models/Tiny-Qwen2/config.json, sha256 checked against"
            " models/Tiny-Qwen2.lock.yml (commit 3754c24872ca)") in result.stdout


def test_explicit_settings_still_win_over_the_derived_ones(tmp_path: Path) -> None:
    inventory = named_inventory(tmp_path, vllm_plan_model="/data/models/q/current",
                                vllm_plan_served_model_name="q-prod",
                                model_artifacts_root="/data/ignored")
    _result, names = run_names(inventory, tmp_path)
    assert names["argv"][2:5] == ["/data/models/q/current",  # type: ignore[index]
                                  "--served-model-name", "q-prod"]
    assert names["served"] == "q-prod"
    # model_artifacts_root moves the derived engine path with the model stage's root.
    _result, names = run_names(named_inventory(tmp_path / "r", model_artifacts_root="/data/q"),
                               tmp_path)
    assert names["argv"][2] == "/data/q/current"  # type: ignore[index]


def test_a_config_that_is_not_the_locks_is_refused_before_any_host(tmp_path: Path) -> None:
    inventory = named_inventory(tmp_path)
    config = inventory.parent / "models" / "Tiny-Qwen2" / "config.json"
    config.write_text(config.read_text().replace('"num_hidden_layers": 4',
                                                 '"num_hidden_layers": 8'))
    result = run_plan(inventory)
    assert result.returncode != 0
    out = result.stdout
    assert (f"vllm_plan_model_config_file {config} is not the config.json locked in"
            f" {inventory.parent / 'models' / 'Tiny-Qwen2.lock.yml'}") in out
    assert "playbooks/lock_model.yml -e lock_model_name=Tiny-Qwen2" in out
    assert "or restore the file" in out
    assert "Show the plan" not in out and "Traceback" not in out + result.stderr


def test_without_a_lock_the_plan_reads_the_config_unchecked_and_says_so(tmp_path: Path) -> None:
    result = run_plan(named_inventory(tmp_path, lock=False))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("config.json               models/Tiny-Qwen2/config.json, not checked: no lock"
            " models/Tiny-Qwen2.lock.yml") in result.stdout


def test_the_example_inventory_commits_no_lock_and_its_tables_say_so() -> None:
    result = run_plan(ROOT / "inventories" / "example")
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("Qwen2.5-72B-Instruct", "Qwen3.5-397B-A17B-FP8", "Qwen3-Next-80B-A3B-Instruct"):
        assert (f"config.json               models/{name}/config.json, not checked: no lock"
                f" models/{name}.lock.yml") in result.stdout


def test_the_local_inventory_plans_from_its_locked_config() -> None:
    result = run_plan(ROOT / "inventories" / "local")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("model                     /srv/vllm/models/tiny-qwen2/current" in result.stdout)
    assert ("config.json               models/tiny-qwen2/config.json, sha256 checked against"
            " models/tiny-qwen2.lock.yml") in result.stdout


def test_the_example_plans_on_0_34_only_from_a_source_that_carries_its_pins() -> None:
    """Issue 38: 0.34.0 pins flashinfer-python==0.7.3, which PyPI lacks. plan.yml refuses
    it, naming the pin and both ways out; with a site wheelhouse it plans every group."""
    refused = run_plan(ROOT / "inventories" / "example", "-e", "vllm_install_version=0.34.0")
    assert refused.returncode != 0
    text = " ".join(refused.stdout.split())
    assert "vLLM 0.34.0 does not install from PyPI: it pins flashinfer-python==0.7.3" in text
    assert "plan for 0.33.0 (vllm_install_version)" in text
    assert "vllm_install_uv_find_links" in text
    planned = run_plan(ROOT / "inventories" / "example", "-e", "vllm_install_version=0.34.0",
                       "-e", "vllm_install_uv_find_links=/srv/wheelhouse")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    out = planned.stdout
    assert out.count("0.34.0 (V1 engine)") >= 4  # the four groups' distinct plans
    assert "--kv-cache-memory-bytes" in out and "changed=0" in out and "failed=0" in out


GROUPS = ROOT / "inventories" / "example_groups"


def _group_inventory(tmp: Path, hosts: list[str], member_vars: dict[str, dict[str, object]]
                     | None = None) -> Path:
    """inventories/example_groups' Qwen3.8 group with other hosts (and per-host variables)."""
    group_vars = yaml.safe_load((GROUPS / "group_vars" / "h200_qwen38.yml").read_text())
    group_vars["vllm_plan_model_config_file"] = str(
        GROUPS / "models" / "Qwen3.8-2.4T-A95B-FP8" / "config.json")
    inventory = {"all": {"children": {"vllm_servers": {
        "hosts": {h: (member_vars or {}).get(h) for h in hosts}, "vars": group_vars}}}}
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def test_the_groups_inventory_plans_one_engine_per_group_with_every_ranks_argv() -> None:
    """Issue 36: Qwen3.8-2.4T-A95B FP8 on 4 x 8 x H200 and bf16 Qwen3.5-397B-A17B on
    2 x 8 x H100, one engine each, a pipeline stage per host; rank 0 serves, the rest are
    headless."""
    result = run_plan(GROUPS)
    assert result.returncode == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "engine group qwen38-h200: 4 hosts" in out
    assert "engine group qwen35-bf16-h100: 2 hosts" in out
    assert "tensor parallel 8 x pipeline 4" in out and "tensor parallel 8 x pipeline 2" in out
    assert ("h200-g4.gpu.example.internal: ... --nnodes 4 --node-rank 3 --master-addr "
            "h200-g1.gpu.example.internal --master-port 29500 --headless") in out
    assert ("h100-g1.gpu.example.internal: ... --nnodes 2 --node-rank 0 --master-addr "
            "h100-g1.gpu.example.internal --master-port 29500") in out
    assert "stage 3 layers 69-91" in out and "changed=0" in out and "failed=0" in out


def test_a_group_too_small_for_the_model_names_the_fewest_hosts(tmp_path: Path) -> None:
    result = run_plan(_group_inventory(tmp_path, ["g1.test", "g2.test"]))
    assert result.returncode != 0
    out = " ".join(result.stdout.split())
    assert "weights_exceed_memory" in out
    assert "pipeline_parallel_size 3 (3 hosts of 8 x H200)" in out


def test_members_that_disagree_are_refused_before_any_host(tmp_path: Path) -> None:
    inventory = _group_inventory(tmp_path, ["g1.test", "g2.test", "g3.test"],
                                 {"g3.test": {"vllm_plan_gpu_count": 4}})
    result = run_plan(inventory)
    assert result.returncode != 0
    out = " ".join(result.stdout.split())
    assert ("vllm_plan_engine_group: qwen38-h200: g3.test and g1.test disagree on "
            "vllm_plan_gpu_count") in out
    assert "give every member the same planner inputs" in out


def test_a_member_also_deployed_as_a_one_host_engine_is_refused(tmp_path: Path) -> None:
    """The same machine under two inventory names (a group member, and a one-host engine of
    the same play at its address): two engines on one machine's GPUs."""
    inventory = _group_inventory(tmp_path, ["g1.test", "g2.test", "g3.test"],
                                 {"g2.test": {"ansible_host": "10.0.0.2"}})
    data = yaml.safe_load(inventory.read_text())
    data["all"]["children"]["solo"] = {"hosts": {"solo.test": {
        "ansible_host": "10.0.0.2", "vllm_plan_engine_group": ""}}}
    data["all"]["children"]["vllm_servers"]["children"] = {"solo": {}}
    inventory.write_text(yaml.safe_dump(data))
    result = run_plan(inventory)
    assert result.returncode != 0
    out = " ".join(result.stdout.split())
    assert ("vllm_plan_engine_group: qwen38-h200: member g2.test is the machine at 10.0.0.2, "
            "which the play also deploys as solo.test (a one-host engine)") in out, out[-2000:]
    assert "remove solo.test from vllm_servers, or take g2.test out of the group" in out


def test_site_refuses_an_engine_group_before_any_host() -> None:
    result = subprocess.run(
        [PLAYBOOK, "-i", str(GROUPS), str(ROOT / "playbooks" / "site.yml"), "--check"],
        cwd=ROOT, env=ansible_env(), capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode != 0
    out = " ".join(result.stdout.split())
    assert ("h200-g1.gpu.example.internal is rank 0 of the multi-host engine group "
            "qwen38-h200") in out
    assert "TASK [Driver" not in result.stdout  # nothing past the plan play ran
