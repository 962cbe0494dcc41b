"""Every restart of an engine replica goes through vllm-restart (drained, one at a time):
vllm_server's deploy-time restarts, playbooks/rolling_restart.yml, playbooks/rebuild.yml's
stop and ready steps and engine_restarts' cron job. The one allowed exception: a replica
removed from the plan is stopped without a drain (nothing routes to it any more)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "/usr/local/sbin/vllm-restart"
SYSTEMD = {"ansible.builtin.systemd_service", "ansible.builtin.systemd", "ansible.builtin.service",
           "systemd_service", "systemd", "service"}


def tasks(path: Path) -> list[dict[str, Any]]:
    """Every task of a task file or playbook, blocks and plays unfolded."""
    found: list[dict[str, Any]] = []

    def walk(items: list[Any] | None) -> None:
        for item in items or []:
            if not isinstance(item, dict):
                continue
            for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue",
                        "always"):
                walk(item.get(key))
            if not any(k in item for k in ("hosts", "block", "import_playbook")):
                found.append(item)

    walk(yaml.safe_load(path.read_text()))
    return found


def argv(task: dict[str, Any]) -> str:
    command = task.get("ansible.builtin.command") or task.get("command") or {}
    return str(command.get("argv", command) if isinstance(command, dict) else command)


def engine_service_changes(path: Path) -> list[dict[str, Any]]:
    """Tasks that stop or restart an engine unit through systemd directly."""
    out = []
    for task in tasks(path):
        for module in SYSTEMD & set(task):
            state = str(task[module].get("state", ""))
            if state in {"restarted", "stopped", "reloaded"} or "restarted" in state:
                out.append(task)
        if "systemctl" in argv(task) and any(w in argv(task) for w in ("restart", "stop")):
            out.append(task)
    return out


def test_deploy_time_restarts_go_through_vllm_restart() -> None:
    service = ROOT / "roles/vllm_server/tasks/service.yml"
    direct = engine_service_changes(service)
    # Only the replicas no longer in the plan are stopped directly.
    assert [t["loop"] for t in direct] == ["{{ _vllm_server_retired }}"], direct
    restart = [t for t in tasks(service) if "_vllm_server_restart_argv" in argv(t)]
    assert all("loop" not in t for t in restart)  # one call each: stops at the first failure
    # A one-host engine's replicas: one call. An engine group's: rank 0 stopped, the headless
    # ranks restarted, rank 0 started (each vllm-restart, in the order the rendezvous needs).
    one_host = [t for t in restart if "_vllm_server_group_info | length == 0" in t["when"]]
    group = [t for t in restart if "_vllm_server_group_info.rank" in t["when"]]
    assert len(one_host) == 1 and len(group) == 3 and len(restart) == 4, restart
    assert ["'stop'" in argv(group[0]), "'ready'" in argv(group[2])] == [True, True]
    assert [("== 0" in t["when"]) for t in group] == [True, False, True]
    variables = yaml.safe_load((ROOT / "roles/vllm_server/vars/main.yml").read_text())
    assert variables["_vllm_server_restart_argv"][:2] == [SCRIPT, "restart"]
    assert any(a.startswith("--gateway-socket=") for a in variables["_vllm_server_restart_argv"])
    assert any(a.startswith("--config=") for a in variables["_vllm_server_restart_argv"])


def test_rolling_restart_goes_through_vllm_restart() -> None:
    playbook = ROOT / "playbooks/rolling_restart.yml"
    assert engine_service_changes(playbook) == []
    commands = [argv(t) for t in tasks(playbook) if argv(t) != "{}"]
    assert commands and all(SCRIPT in c and "'restart'" in c and "--config=" in c
                            for c in commands), commands


def test_rebuild_stops_and_returns_replicas_through_vllm_restart() -> None:
    playbook = ROOT / "playbooks/rebuild.yml"
    assert engine_service_changes(playbook) == []
    names = [t.get("name", "") for t in tasks(playbook)]
    commands = {t.get("name"): t["ansible.builtin.command"]["argv"] for t in tasks(playbook)
                if SCRIPT in argv(t)}
    stop = next(n for n, a in commands.items() if a[1] == "stop")
    ready = next(n for n, a in commands.items() if a[1] == "ready")
    wipe = next(n for n in names if n.startswith("Wipe"))
    converge = next(n for n in names if n.startswith("Converge again"))
    verify = next(n for n in names if "gateway routes" in n)
    assert names.index(stop) < names.index(wipe)
    assert names.index(converge) < names.index(ready) < names.index(verify)


def test_the_weekly_cron_job_runs_vllm_restart_with_every_path_it_needs() -> None:
    role = ROOT / "roles/engine_restarts"
    cron = next(t for t in tasks(role / "tasks/main.yml") if "ansible.builtin.cron" in t)
    assert "_engine_restarts_command" in cron["ansible.builtin.cron"]["job"]
    command = yaml.safe_load((role / "vars/main.yml").read_text())["_engine_restarts_command"]
    assert command[:2] == [SCRIPT, "restart"]
    for option, variable in (("--config=", "engine_restarts_config"),
                             ("--gateway-socket=", "engine_restarts_gateway_admin_socket"),
                             ("--log=", "engine_restarts_log")):
        assert f"{option}{{{{ {variable} }}}}" in command, option
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text())
    assert "vllm_server_config_dir" in defaults["engine_restarts_config"]
    assert "engine_gateway_admin_socket" in defaults["engine_restarts_gateway_admin_socket"]
    # The script and its replicas file belong to vllm_server now, not to the schedule.
    assert not (role / "files").exists()


def test_no_other_task_restarts_or_stops_an_engine_unit() -> None:
    allowed = {ROOT / "roles/vllm_server/tasks/service.yml"}
    for path in sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml"),
                        *ROOT.glob("playbooks/*.yml")]):
        if path in allowed:
            continue
        for task in engine_service_changes(path):
            text = str(task)
            assert "vllm-" not in text and "item.name" not in text, (path, task)


def test_the_gateway_queues_instead_of_failing_and_never_retries_a_generation() -> None:
    template = (ROOT / "roles/engine_gateway/templates/haproxy.cfg.j2").read_text()
    assert "option redispatch" in template
    assert "retry-on conn-failure empty-response\n" in template
    assert "response-timeout" not in template.split("retry-on", 1)[1].split("\n", 1)[0]
    assert "timeout queue {{ engine_gateway_queue_timeout }}s" in template
    assert "maxconn {{ replica.plan.flags.max_num_seqs }}" in template
