#!/usr/bin/python3
"""Per-GPU and per-process GPU memory for node exporter's textfile collector.

Runs nvidia-smi (NVML underneath), maps each compute process to its systemd unit, and
writes Prometheus text atomically (temp file + rename), so a leak can be trended per GPU
and per engine replica. Measures the engine from the outside: an in-process probe such as
torch.cuda.memory_allocated() in a new process only sees its own, empty, CUDA context.

Standard library only; installed by the gpu_metrics role.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
GPU_QUERY = "index,uuid,name,memory.total,memory.used"
APP_QUERY = "gpu_uuid,pid,process_name,used_memory"


@dataclass(frozen=True)
class Gpu:
    index: str
    uuid: str
    name: str
    total_bytes: int
    used_bytes: int


@dataclass(frozen=True)
class Process:
    gpu_uuid: str
    pid: int
    name: str
    used_bytes: int


def _rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in row] for row in csv.reader(text.splitlines()) if row]


def _mib(value: str) -> int:
    """nvidia-smi reports MiB with nounits; '[N/A]' or '[Not Supported]' count as 0."""
    try:
        return int(float(value) * MIB)
    except ValueError:
        return 0


def parse_gpus(text: str) -> list[Gpu]:
    gpus = []
    for row in _rows(text):
        if len(row) != 5:
            raise ValueError(f"unexpected nvidia-smi --query-gpu row: {row!r}")
        index, uuid, name, total, used = row
        gpus.append(Gpu(index, uuid, name, _mib(total), _mib(used)))
    return gpus


def parse_processes(text: str) -> list[Process]:
    processes = []
    for row in _rows(text):
        if len(row) != 4:
            raise ValueError(f"unexpected nvidia-smi --query-compute-apps row: {row!r}")
        uuid, pid, name, used = row
        processes.append(Process(uuid, int(pid), name, _mib(used)))
    return processes


def systemd_unit(pid: int, proc: Path = Path("/proc")) -> str:
    """The systemd service a process belongs to, from its cgroup ('' when unknown)."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return ""
    units = re.findall(r"/([^/\s]+\.service)", text)
    return units[-1] if units else ""


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(gpus: list[Gpu], processes: list[Process], units: dict[int, str], up: bool,
           now: float, error: str = "") -> str:
    """Prometheus text exposition of the collected values."""
    lines = [
        "# HELP nvidia_vram_collector_up 1 when nvidia-smi answered on the last run.",
        "# TYPE nvidia_vram_collector_up gauge",
        f'nvidia_vram_collector_up{{error="{_label(error)}"}} {int(up)}',
        "# HELP nvidia_vram_collector_last_run_timestamp_seconds Time of the last run.",
        "# TYPE nvidia_vram_collector_last_run_timestamp_seconds gauge",
        f"nvidia_vram_collector_last_run_timestamp_seconds {now:.3f}",
    ]
    by_uuid = {gpu.uuid: gpu for gpu in gpus}
    for metric, help_text, attr in (
            ("nvidia_gpu_memory_total_bytes", "Total memory of the GPU.", "total_bytes"),
            ("nvidia_gpu_memory_used_bytes", "Used memory of the GPU.", "used_bytes")):
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        for gpu in gpus:
            lines.append(f'{metric}{{gpu="{_label(gpu.index)}",uuid="{_label(gpu.uuid)}",'
                         f'name="{_label(gpu.name)}"}} {getattr(gpu, attr)}')
    metric = "nvidia_gpu_process_memory_used_bytes"
    lines += [f"# HELP {metric} GPU memory used by one process (NVML).",
              f"# TYPE {metric} gauge"]
    for p in processes:
        owner = by_uuid.get(p.gpu_uuid)
        index = owner.index if owner else ""
        lines.append(f'{metric}{{gpu="{_label(index)}",uuid="{_label(p.gpu_uuid)}",'
                     f'pid="{p.pid}",process="{_label(p.name)}",'
                     f'unit="{_label(units.get(p.pid, ""))}"}} {p.used_bytes}')
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """Node exporter must never read a half-written file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _smi(nvidia_smi: str, *args: str) -> str:
    return subprocess.run([nvidia_smi, *args, "--format=csv,noheader,nounits"], check=True,
                          capture_output=True, text=True, timeout=20).stdout


def collect(nvidia_smi: str) -> str:
    now = time.time()
    try:
        gpus = parse_gpus(_smi(nvidia_smi, f"--query-gpu={GPU_QUERY}"))
        processes = parse_processes(_smi(nvidia_smi, f"--query-compute-apps={APP_QUERY}"))
    except subprocess.CalledProcessError as exc:
        first = (exc.stderr or exc.stdout or "").strip().splitlines()
        return render([], [], {}, False, now, first[0][:120] if first else "nvidia-smi failed")
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return render([], [], {}, False, now, type(exc).__name__)
    units = {p.pid: systemd_unit(p.pid) for p in processes}
    return render(gpus, processes, units, True, now)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True,
                        help="the .prom file in node exporter's textfile directory")
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi to run")
    args = parser.parse_args(argv)
    write_atomically(args.output, collect(args.nvidia_smi))
    return 0


if __name__ == "__main__":
    sys.exit(main())
