"""roles/vllm_install/files/vllm-cuda-check.py: the verdict on torch's CUDA against the
driver's (a pure function), and the script end to end with a stand-in torch package and a
stand-in libcuda.so.1 (compiled here, answering cuDriverGetVersion as a real driver does)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _scripts import ROOT, load_script

SCRIPT = ROOT / "roles/vllm_install/files/vllm-cuda-check.py"
check = load_script("roles/vllm_install/files/vllm-cuda-check.py", "vllm_cuda_check")


def test_torch_newer_than_the_driver_fails_naming_both_versions_and_the_fixes() -> None:
    verdict = check.decide("13.0", "12.4", gpu_on_pci=True, cuda_available=False)
    assert verdict["status"] == "fail"
    message = verdict["message"]
    assert "CUDA 13.0" in message and "CUDA 12.4" in message
    assert "R580" in message and "cuda-compat" in message and "older engine" in message


def test_driver_newer_than_torch_passes() -> None:
    verdict = check.decide("13.0", "13.1", gpu_on_pci=True, cuda_available=True, device_count=8)
    assert verdict["status"] == "ok" and "8 GPU(s)" in verdict["message"]


def test_equal_versions_pass_and_minor_versions_compare_as_numbers() -> None:
    assert check.decide("12.8", "12.8", True, True)["status"] == "ok"
    assert check.decide("12.10", "12.9", True, True)["status"] == "fail"  # not string order
    assert check.decide("12.9", "12.10", True, True)["status"] == "ok"


def test_cpu_build_of_torch_is_skipped_and_says_why() -> None:
    verdict = check.decide(None, "13.1", gpu_on_pci=True, cuda_available=None)
    assert verdict == {"status": "skipped",
                       "message": "skipped: CPU build of torch (torch.version.cuda is None)"}


def test_host_without_driver_or_gpu_is_skipped_and_says_why() -> None:
    verdict = check.decide("13.0", None, gpu_on_pci=False, cuda_available=None)
    assert verdict["status"] == "skipped" and "no NVIDIA GPU" in verdict["message"]


def test_gpu_without_a_driver_fails() -> None:
    verdict = check.decide("13.0", None, gpu_on_pci=True, cuda_available=None)
    assert verdict["status"] == "fail" and "libcuda.so.1" in verdict["message"]


def test_driver_but_no_gpu_visible_to_torch_fails() -> None:
    verdict = check.decide("13.0", "13.1", gpu_on_pci=True, cuda_available=False)
    assert verdict["status"] == "fail"
    assert "torch.cuda.is_available() is false" in verdict["message"]


def test_unparsable_versions_fail_instead_of_guessing() -> None:
    assert check.decide("13.0a", "13.1", True, True)["status"] == "fail"


def test_driver_version_integer_as_nvidia_smi_prints_it() -> None:
    assert check.driver_version_text(12040) == "12.4"
    assert check.driver_version_text(13010) == "13.1"
    assert check.driver_version_text(13000) == "13.0"


def test_pci_scan_finds_nvidia_gpus_only(tmp_path: Path) -> None:
    def device(name: str, vendor: str, device_class: str) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "vendor").write_text(vendor + "\n")
        (tmp_path / name / "class").write_text(device_class + "\n")

    device("0000:00:01.0", "0x8086", "0x030000")  # another vendor's GPU
    device("0000:00:02.0", "0x10de", "0x068000")  # an NVIDIA NVSwitch/bridge, not a GPU
    assert not check.nvidia_gpu_on_pci(tmp_path)
    device("0000:17:00.0", "0x10de", "0x030200")  # an H100 (3D controller)
    assert check.nvidia_gpu_on_pci(tmp_path)
    assert not check.nvidia_gpu_on_pci(tmp_path / "missing")


# End to end: the script as the role runs it, `<venv python> vllm-cuda-check`.

FAKE_LIBCUDA = r"""
#include <stdlib.h>
int cuDriverGetVersion(int *version) {
    *version = atoi(getenv("FAKE_CUDA_DRIVER_VERSION"));
    return 0;
}
"""

FAKE_TORCH = '''
import os
if os.environ.get("FAKE_TORCH_IMPORT_FORBIDDEN"):
    raise ImportError("the check imported torch on a path that must not")
class cuda:
    @staticmethod
    def is_available():
        return os.environ["FAKE_TORCH_CUDA_AVAILABLE"] == "1"
    @staticmethod
    def device_count():
        return 2
'''


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the stand-in libcuda.so.1")
    folder = tmp_path_factory.mktemp("libcuda")
    (folder / "fake.c").write_text(FAKE_LIBCUDA)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"),
                    str(folder / "fake.c")], check=True)
    return folder


def fake_torch(tmp: Path, cuda: str | None) -> Path:
    package = tmp / "site" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_TORCH)
    (package / "version.py").write_text(
        f"from typing import Optional\n__version__ = '2.13.0'\ncuda: Optional[str] = {cuda!r}\n")
    return tmp / "site"


def run_check(site: Path, libdir: Path | None = None,
              **env: str) -> tuple[int, dict[str, object]]:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    environment.update(PYTHONPATH=str(site), **env)
    if libdir is not None:
        environment["LD_LIBRARY_PATH"] = str(libdir)
    result = subprocess.run([sys.executable, str(SCRIPT)], env=environment,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.stderr == "", result.stderr
    return result.returncode, json.loads(result.stdout)


def test_script_fails_when_the_driver_is_older_than_torch(tmp_path: Path,
                                                          fake_libcuda: Path) -> None:
    rc, out = run_check(fake_torch(tmp_path, "13.0"), fake_libcuda,
                        FAKE_CUDA_DRIVER_VERSION="12040", FAKE_TORCH_CUDA_AVAILABLE="0")
    assert rc == 1 and out["status"] == "fail", out
    assert "CUDA 13.0" in str(out["message"]) and "CUDA 12.4" in str(out["message"])
    assert out["facts"] == {"torch_cuda": "13.0", "driver_cuda": "12.4",
                            "gpu_on_pci": check.nvidia_gpu_on_pci(),
                            "cuda_available": False, "device_count": 0}


def test_script_passes_when_the_driver_is_newer(tmp_path: Path, fake_libcuda: Path) -> None:
    rc, out = run_check(fake_torch(tmp_path, "13.0"), fake_libcuda,
                        FAKE_CUDA_DRIVER_VERSION="13010", FAKE_TORCH_CUDA_AVAILABLE="1")
    assert rc == 0 and out["status"] == "ok", out
    assert "driver supports CUDA 13.1" in str(out["message"])


def test_script_fails_when_torch_sees_no_gpu(tmp_path: Path, fake_libcuda: Path) -> None:
    rc, out = run_check(fake_torch(tmp_path, "13.0"), fake_libcuda,
                        FAKE_CUDA_DRIVER_VERSION="13010", FAKE_TORCH_CUDA_AVAILABLE="0")
    assert rc == 1 and "is_available() is false" in str(out["message"]), out


def test_script_skips_a_cpu_build_without_importing_torch(tmp_path: Path,
                                                          fake_libcuda: Path) -> None:
    rc, out = run_check(fake_torch(tmp_path, None), fake_libcuda,
                        FAKE_CUDA_DRIVER_VERSION="13010", FAKE_TORCH_IMPORT_FORBIDDEN="1")
    assert rc == 0 and out["status"] == "skipped", out
    assert out["message"] == "skipped: CPU build of torch (torch.version.cuda is None)"


def test_script_skips_a_host_without_driver_and_gpu(tmp_path: Path) -> None:
    if check.driver_cuda_version() is not None or check.nvidia_gpu_on_pci():
        pytest.skip("this machine has an NVIDIA driver or GPU")
    rc, out = run_check(fake_torch(tmp_path, "13.0"), FAKE_TORCH_IMPORT_FORBIDDEN="1")
    assert rc == 0 and out["status"] == "skipped", out
    assert "no NVIDIA GPU on this host" in str(out["message"])


def test_script_fails_without_torch(tmp_path: Path) -> None:
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed in the test environment")
    (tmp_path / "empty").mkdir()
    rc, out = run_check(tmp_path / "empty")
    assert rc == 1 and "torch is not installed" in str(out["message"]), out
