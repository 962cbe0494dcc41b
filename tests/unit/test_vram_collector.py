"""The VRAM collector's parsing and exposition, on recorded nvidia-smi output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "roles" / "gpu_metrics" / "files" / "nvidia_vram_collector.py"


collector = load_script("roles/gpu_metrics/files/nvidia_vram_collector.py",
                        "nvidia_vram_collector")

# nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used --format=csv,noheader,nounits
GPUS = """0, GPU-5f0d8d4e-aaaa-bbbb-cccc-000000000000, NVIDIA H200, 143771, 126410
1, GPU-5f0d8d4e-aaaa-bbbb-cccc-000000000001, NVIDIA H200, 143771, 126398
"""
# nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=...
APPS = """GPU-5f0d8d4e-aaaa-bbbb-cccc-000000000000, 4121, /srv/vllm/venv/bin/python3, 125824
GPU-5f0d8d4e-aaaa-bbbb-cccc-000000000001, 4188, /srv/vllm/venv/bin/python3, 125812
"""


def test_parses_gpus_and_processes_in_bytes() -> None:
    gpus = collector.parse_gpus(GPUS)
    assert [g.index for g in gpus] == ["0", "1"]
    assert gpus[0].total_bytes == 143771 << 20 and gpus[0].used_bytes == 126410 << 20
    apps = collector.parse_processes(APPS)
    assert apps[1].pid == 4188 and apps[1].used_bytes == 125812 << 20


def test_not_supported_values_count_as_zero() -> None:
    gpus = collector.parse_gpus("0, GPU-x, NVIDIA H100 80GB HBM3, [N/A], [Not Supported]\n")
    assert gpus[0].total_bytes == 0 and gpus[0].used_bytes == 0


def test_malformed_rows_are_rejected() -> None:
    with pytest.raises(ValueError, match="unexpected nvidia-smi"):
        collector.parse_gpus("0, GPU-x, H200\n")


def test_exposition_has_gpu_and_process_series_with_units() -> None:
    text = collector.render(collector.parse_gpus(GPUS), collector.parse_processes(APPS),
                            {4121: "vllm-0.service"}, True, 1700000000.0)
    assert 'nvidia_vram_collector_up{error=""} 1' in text
    assert ('nvidia_gpu_memory_used_bytes{gpu="0",uuid="GPU-5f0d8d4e-aaaa-bbbb-cccc-'
            '000000000000",name="NVIDIA H200"} ' + str(126410 << 20)) in text
    assert 'pid="4121",process="/srv/vllm/venv/bin/python3",unit="vllm-0.service"} ' in text
    assert 'gpu="1",uuid="GPU-5f0d8d4e-aaaa-bbbb-cccc-000000000001",pid="4188"' in text


def test_unit_is_read_from_the_process_cgroup(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cgroup").write_text(
        "12:pids:/system.slice/vllm-1.service\n0::/system.slice/vllm-1.service\n")
    assert collector.systemd_unit(77, tmp_path) == "vllm-1.service"
    assert collector.systemd_unit(78, tmp_path) == ""


def test_no_driver_writes_up_zero_with_the_reason(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate "
                   "with the NVIDIA driver.' >&2\nexit 9\n")
    smi.chmod(0o755)
    out = tmp_path / "nvidia_vram.prom"
    assert collector.main(["--output", str(out), "--nvidia-smi", str(smi)]) == 0
    text = out.read_text()
    assert 'nvidia_vram_collector_up{error="NVIDIA-SMI has failed' in text and "} 0\n" in text
    assert "nvidia_gpu_memory_used_bytes{" not in text


def test_script_runs_as_a_program(tmp_path: Path) -> None:
    out = tmp_path / "v.prom"
    result = subprocess.run([sys.executable, str(SOURCE), "--output", str(out),
                             "--nvidia-smi", str(tmp_path / "missing")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert 'nvidia_vram_collector_up{error="FileNotFoundError"} 0' in out.read_text()
