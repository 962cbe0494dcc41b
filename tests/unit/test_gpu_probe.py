"""scripts/gpu-probe.sh on recordings: a stand-in nvidia-smi on PATH replays the recordings
under tests/data/gpu/nvidia-smi/ (the probe's real run needs a GPU host)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _scripts import ROOT

PROBE = ROOT / "scripts" / "gpu-probe.sh"
DATA = ROOT / "tests" / "data" / "gpu"
SMI = DATA / "nvidia-smi"
GPU_FACTS_QUERY = ("--query-gpu=index,pci.bus_id,name,uuid,driver_version,memory.total,"
                   "persistence_mode,mig.mode.current")

# Answers what the probe's pieces ask from the recordings: the gpu_facts query and
# --version verbatim, -L and the VRAM collector's query reshaped from the query recording,
# no compute processes; FAKE_SMI_FAIL replays the no-driver recording (exit 9).
FAKE = '''#!{python}
import csv, os, sys
args = sys.argv[1:]
if os.environ.get("FAKE_SMI_FAIL"):
    sys.stdout.write(open(os.path.join("{smi}", "no-driver.txt")).read())
    sys.exit(9)
rows = list(csv.reader(open(os.environ["FAKE_SMI_QUERY"]), skipinitialspace=True))
if args == ["-L"]:
    for r in rows:
        print(f"GPU {{r[0]}}: {{r[2]}} (UUID: {{r[3]}})")
elif args == ["{gpu_facts_query}", "--format=csv,noheader,nounits"]:
    sys.stdout.write(open(os.environ["FAKE_SMI_QUERY"]).read())
elif args == ["--version"]:
    sys.stdout.write(open(os.path.join("{smi}", "version-550.163.01.txt")).read())
elif args == ["--query-gpu=index,uuid,name,memory.total,memory.used",
              "--format=csv,noheader,nounits"]:
    for r in rows:
        print(f"{{r[0]}}, {{r[3]}}, {{r[2]}}, {{r[5]}}, 0")
elif args[0].startswith("--query-compute-apps="):
    pass
else:
    sys.exit(f"fake nvidia-smi: no recording for {{args}}")
'''


def path_without_nvidia_smi() -> str:
    return os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and not (Path(d) / "nvidia-smi").exists())


def probe(tmp_path: Path, out: Path, *, fake: bool = True, python: str = sys.executable,
          **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    path = path_without_nvidia_smi()
    if fake:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(FAKE.format(python=sys.executable, smi=SMI,
                                   gpu_facts_query=GPU_FACTS_QUERY))
        smi.chmod(0o755)
        path = f"{bin_dir}{os.pathsep}{path}"
    return subprocess.run(
        ["bash", str(PROBE), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=240,
        check=False,
        env={**os.environ, "PATH": path, "PYTHON": python, "VLLM_PYTHON": sys.executable,
             **env})


def recorded(out: Path) -> dict[str, tuple[list[str], str]]:
    """The wrapper's recordings: first argument -> (arguments, stdout)."""
    runs = {}
    for args in sorted((out / "nvidia-smi").glob("*.args")):
        argv = args.read_text().splitlines()
        runs[argv[0]] = (argv, args.with_suffix(".stdout").read_text())
        assert args.with_suffix(".rc").read_text().strip() == "0"
    return runs


def summary(out: Path) -> dict[str, str]:
    return {line.split()[0]: line.split()[1]
            for line in (out / "summary.txt").read_text().splitlines()}


def test_runs_every_piece_and_keeps_what_each_parsed(tmp_path: Path) -> None:
    out = tmp_path / "probe-h100"
    result = probe(tmp_path, out, PROBE_ROOT=str(DATA / "sysfs" / "h100-sxm-x1-driver-loaded"),
                   FAKE_SMI_QUERY=str(SMI / "h100-sxm-x1.query.csv"))
    assert result.returncode == 0, result.stdout + result.stderr
    # torch is not in the test environment: the CUDA check ran and says so, the probe skips it.
    assert summary(out) == {"gpu_facts": "ok", "vram": "ok", "cuda_check": "skipped"}
    facts = json.loads((out / "gpu_facts.json").read_text())
    assert facts["probe_path"] == "ansible -m gpu_facts"
    assert facts["gpu_count"] == 1 and facts["nvidia_smi"]["ok"] is True
    assert facts["nvidia_smi"]["driver_version"] == "550.163.01"
    assert facts["nvidia_smi"]["cuda_version"] == "12.4"
    assert facts["driver_mismatch"] is False
    runs = recorded(out)
    assert runs[GPU_FACTS_QUERY][1] == (SMI / "h100-sxm-x1.query.csv").read_text()
    assert runs["--version"][1] == (SMI / "version-550.163.01.txt").read_text()
    vram = runs["--query-gpu=index,uuid,name,memory.total,memory.used"][1]
    assert vram.startswith("0, GPU-5b8c1a7e-2f0d-4c3e-9a61-0d7e2c4b9f10, NVIDIA H100 80GB HBM3")
    assert "--query-compute-apps=gpu_uuid,pid,process_name,used_memory" in runs
    assert (out / "nvidia-smi" / "list.txt").read_text().startswith("GPU 0: NVIDIA H100")
    prom = (out / "vram.prom").read_text()
    assert 'nvidia_vram_collector_up{error=""} 1' in prom
    assert 'nvidia_gpu_memory_total_bytes{gpu="0"' in prom and str(81559 << 20) in prom
    cuda = json.loads((out / "cuda-check.json").read_text())
    assert cuda["status"] == "fail" and "torch is not installed" in cuda["message"]


def test_without_ansible_the_module_functions_run(tmp_path: Path) -> None:
    python = shutil.which("python3", path="/usr/bin")
    if python is None or subprocess.run([python, "-c", "import ansible"],
                                        capture_output=True, check=False).returncode == 0:
        pytest.skip("needs a python3 without ansible")
    out = tmp_path / "probe"
    result = probe(tmp_path, out, python=python, ANSIBLE="none",
                   PROBE_ROOT=str(DATA / "sysfs" / "h100-sxm-x1-driver-loaded"),
                   FAKE_SMI_QUERY=str(SMI / "h100-sxm-x1.query.csv"))
    assert result.returncode == 0, result.stdout + result.stderr
    facts = json.loads((out / "gpu_facts.json").read_text())
    assert facts["probe_path"].startswith("module functions")
    assert facts["nvidia_smi"]["ok"] is True and facts["gpu_count"] == 1


def test_a_failing_piece_fails_the_probe(tmp_path: Path) -> None:
    """hgx-h200-x8's sysfs has no nvidia module loaded: gpu_facts cannot compare."""
    out = tmp_path / "probe"
    result = probe(tmp_path, out, PROBE_ROOT=str(DATA / "sysfs" / "hgx-h200-x8"),
                   FAKE_SMI_QUERY=str(SMI / "hgx-h200-x8.query.csv"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert summary(out)["gpu_facts"] == "fail"
    assert "kernel module is not loaded" in (out / "summary.txt").read_text()
    assert summary(out)["vram"] == "ok"
    assert "8 GPU(s) in vram.prom" in result.stdout


def test_refuses_clearly_without_nvidia_smi(tmp_path: Path) -> None:
    out = tmp_path / "probe"
    result = probe(tmp_path, out, fake=False)
    assert result.returncode == 2
    assert "no nvidia-smi on PATH" in result.stderr
    assert "NVIDIA GPU and its driver" in result.stderr
    assert not out.exists()


def test_refuses_clearly_where_nvidia_smi_finds_no_driver(tmp_path: Path) -> None:
    out = tmp_path / "probe"
    result = probe(tmp_path, out, FAKE_SMI_FAIL="1")
    assert result.returncode == 3
    assert "lists no GPU" in result.stderr
    assert "couldn't communicate with the NVIDIA driver" in result.stderr
    assert not out.exists()
