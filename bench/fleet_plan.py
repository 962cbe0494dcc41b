#!/usr/bin/env python3
"""playbooks/plan.yml over a generated fleet of H200 hosts: how long does planning take?

The fleet (in a temporary directory): N hosts in four groups of H200 hosts. Most share one
set of planner inputs (group h200, the example inventory's Qwen2.5-72B on two GPUs), a
second group plans the same model at TP=1 on two GPUs, a third serves the hybrid Qwen3.5
on eight GPUs, and every 50th host sets a max_model_len of its own: a few distinct input
sets, as a real fleet has, and no host that any other host's plan depends on. The model
configs and locks are the example inventory's (inventories/example/models).

Target (issue 23): plan.yml over 1,000 hosts in at most 30 s.

    bench/fleet_plan.py [--hosts 10,100,1000] [--json bench/results/fleet_plan.json]

Needs only the .venv (`make setup`): the play connects to no host. The wall time includes
Ansible's start (about 2 s here) and the printing of every replica's table. The machine's
load average is recorded beside each result: other work on the cores slows every number.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "inventories/example"
PLAYBOOK = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) or \
    "ansible-playbook"
TARGET_S = 30.0
TARGET_HOSTS = 1000

QWEN35 = yaml.safe_load((EXAMPLE / "group_vars/h200_qwen35.yml").read_text())
H200 = yaml.safe_load((EXAMPLE / "group_vars/h200.yml").read_text())
H200_SHORT = {**H200, "vllm_plan_options": {**H200["vllm_plan_options"],
                                            "max_model_len": 16384}}


def write_fleet(directory: Path, hosts: int) -> Path:
    """An inventory of `hosts` H200 hosts under directory; returns its hosts.yml."""
    shutil.copytree(EXAMPLE / "models", directory / "models")
    (directory / "group_vars").mkdir()
    shutil.copy(EXAMPLE / "group_vars/vllm_servers.yml", directory / "group_vars")
    groups: dict[str, dict[str, Any]] = {"h200": {}, "h200_short": {}, "h200_qwen35": {}}
    for name, values in (("h200", H200), ("h200_short", H200_SHORT), ("h200_qwen35", QWEN35)):
        (directory / "group_vars" / f"{name}.yml").write_text(yaml.safe_dump(values))
    for index in range(hosts):
        host = f"h200-{index:04d}.gpu.example.internal"
        group = "h200_qwen35" if index % 10 == 9 else "h200_short" if index % 10 == 8 else "h200"
        own = None
        if index % 50 == 49 and group == "h200_qwen35":
            own = {"vllm_plan_options": {**QWEN35["vllm_plan_options"],
                                         "max_model_len": 131072}}
        groups[group][host] = own
    inventory = {"all": {"children": {"vllm_servers": {"children": {
        name: {"hosts": members} for name, members in groups.items() if members}}}}}
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def run(hosts: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fleet-plan-") as tmp:
        inventory = write_fleet(Path(tmp), hosts)
        load = os.getloadavg()[0]
        start = time.monotonic()
        out = subprocess.run([PLAYBOOK, "-i", str(inventory), str(ROOT / "playbooks/plan.yml")],
                             cwd=ROOT, text=True, capture_output=True, check=False)
        wall = time.monotonic() - start
    if out.returncode != 0:
        raise SystemExit(f"plan.yml over {hosts} hosts failed:\n{out.stdout[-3000:]}"
                         f"{out.stderr[-2000:]}")
    # The plan runs once for the play (roles/vllm_plan: one run_once task), so the recap
    # names only the host it ran on; the role's summary line says how many it planned.
    summary = re.search(r"vllm_plan: (\d+) hosts, (\d+) distinct sets of inputs", out.stdout)
    if summary is None or int(summary.group(1)) != hosts:
        raise SystemExit(f"plan.yml over {hosts} hosts: no summary naming {hosts} hosts"
                         f" ({summary.group(0) if summary else 'none'})")
    return {"hosts": hosts, "wall_s": round(wall, 1), "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2),
            "planner_calls": int(summary.group(2))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="10,100,1000",
                        help="comma-separated fleet sizes (default 10,100,1000)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/fleet_plan.json")
    args = parser.parse_args()
    sizes = [int(size) for size in args.hosts.split(",")]
    results = []
    print(f"{'hosts':>6}  {'wall s':>7}  {'load 1m before/after':>20}  {'plans':>5}")
    for size in sizes:
        result = run(size)
        results.append(result)
        print(f"{result['hosts']:>6}  {result['wall_s']:>7.1f}  "
              f"{result['load_before']:>9.2f} / {result['load_after']:<8.2f}  "
              f"{result['planner_calls']:>5}", flush=True)
    verdict = next((r["wall_s"] <= TARGET_S for r in results if r["hosts"] == TARGET_HOSTS), None)
    report = {"bench": "fleet_plan", "target": f"{TARGET_HOSTS} hosts <= {TARGET_S:.0f} s",
              "cpus": os.cpu_count(), "results": results, "met": verdict}
    if verdict is not None:
        print(f"target {report['target']}: {'met' if verdict else 'NOT met'}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if verdict in (True, None) else 1


if __name__ == "__main__":
    sys.exit(main())
