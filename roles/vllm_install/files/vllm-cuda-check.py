"""vllm-cuda-check: can the engine's torch use this host's NVIDIA driver?

Run by the engine's virtual environment's python after the install and before any unit
changes (roles/vllm_install, tasks/finish_install.yml). Prints one JSON object
{"status": "ok" | "skipped" | "fail", "message": ..., "facts": {...}} and exits 0 (ok,
skipped) or 1 (fail).

The facts: torch.version.cuda (read from torch/version.py without importing torch), the
CUDA version the driver supports (cuDriverGetVersion of libcuda.so.1, the number
nvidia-smi prints as "CUDA Version"), whether an NVIDIA display/3D controller is on the
PCI bus (sysfs), and torch.cuda.is_available() (torch imported only when a driver is
there). decide() turns them into the verdict; it is a pure function.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

NVIDIA_PCI_VENDOR = "0x10de"
PCI_DISPLAY_CLASS = "0x03"  # VGA (0x0300) and 3D (0x0302) controllers: GPUs, not switches
FIX = (
    "Fix: install a driver that supports CUDA {torch} (the R580 branch or newer for CUDA "
    "13.x, the R525 branch or newer for 12.x; roles/nvidia_driver), or NVIDIA's "
    "cuda-compat package for CUDA {torch} on a datacenter GPU, or pin an older engine "
    "(vllm_install_version) whose torch was built for CUDA {driver} or older."
)


def parse_version(text: str) -> tuple[int, ...]:
    """'13.0' -> (13, 0). Raises ValueError on anything else."""
    return tuple(int(part) for part in text.strip().split("."))


def driver_version_text(number: int) -> str:
    """cuDriverGetVersion's integer (1000 * major + 10 * minor) as 'major.minor'."""
    return f"{number // 1000}.{number % 1000 // 10}"


def decide(torch_cuda: str | None, driver_cuda: str | None, gpu_on_pci: bool,
           cuda_available: bool | None, device_count: int = 0) -> dict[str, str]:
    """The verdict on one host.

    torch_cuda: torch.version.cuda of the engine's venv (None: a CPU build of torch).
    driver_cuda: the CUDA version the driver supports ('13.1'), None without a driver.
    gpu_on_pci: an NVIDIA GPU is on the PCI bus.
    cuda_available: torch.cuda.is_available() (None: not asked).
    """
    if torch_cuda is None:
        return {"status": "skipped",
                "message": "skipped: CPU build of torch (torch.version.cuda is None)"}
    if driver_cuda is None:
        if gpu_on_pci:
            return {"status": "fail", "message": (
                f"the engine's torch is built for CUDA {torch_cuda} and an NVIDIA GPU is on "
                "the PCI bus, but no NVIDIA driver answers (libcuda.so.1 cannot be loaded). "
                "Fix: install the driver (roles/nvidia_driver) and reboot if its kernel "
                "module is not loaded, then run the play again.")}
        return {"status": "skipped", "message": (
            f"skipped: no NVIDIA GPU on this host (no NVIDIA driver, no NVIDIA device on "
            f"the PCI bus); the engine's torch is built for CUDA {torch_cuda}")}
    try:
        torch_version, driver_version = parse_version(torch_cuda), parse_version(driver_cuda)
    except ValueError:
        return {"status": "fail", "message": (
            f"cannot compare CUDA versions: torch.version.cuda={torch_cuda!r}, "
            f"driver={driver_cuda!r}")}
    if torch_version > driver_version:
        return {"status": "fail", "message": (
            f"the engine's torch is built for CUDA {torch_cuda} but the NVIDIA driver "
            f"supports CUDA {driver_cuda} at most (nvidia-smi's \"CUDA Version\"): torch "
            "cannot use the GPUs. " + FIX.format(torch=torch_cuda, driver=driver_cuda))}
    if not cuda_available:
        return {"status": "fail", "message": (
            f"torch.cuda.is_available() is false although the driver supports CUDA "
            f"{driver_cuda} and torch is built for CUDA {torch_cuda}: no GPU is visible to "
            "the engine. Fix: check `nvidia-smi` (device nodes /dev/nvidia*, a GPU in a "
            "failed state, CUDA_VISIBLE_DEVICES in the environment), load the kernel module "
            "or reboot after a driver install.")}
    return {"status": "ok", "message": (
        f"ok: torch built for CUDA {torch_cuda}, driver supports CUDA {driver_cuda}, "
        f"{device_count} GPU(s) visible to torch")}


def torch_cuda_version() -> tuple[bool, str | None]:
    """(torch installed, torch.version.cuda), read from torch/version.py without importing
    torch (its import takes seconds and, on a GPU host, initialises nothing we need yet)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False, None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    version_spec = importlib.util.spec_from_file_location("_torch_version", version_file)
    if version_spec is None or version_spec.loader is None:
        return True, None
    module = importlib.util.module_from_spec(version_spec)
    version_spec.loader.exec_module(module)
    cuda = getattr(module, "cuda", None)
    return True, str(cuda) if cuda else None


def driver_cuda_version() -> str | None:
    """The CUDA version the driver supports, from libcuda.so.1; None without a driver."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    number = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(number)) != 0 or number.value <= 0:
        return None
    return driver_version_text(number.value)


def nvidia_gpu_on_pci(sysfs: Path = Path("/sys/bus/pci/devices")) -> bool:
    try:
        devices = list(sysfs.iterdir())
    except OSError:
        return False
    for device in devices:
        try:
            vendor = (device / "vendor").read_text().strip()
            device_class = (device / "class").read_text().strip()
        except OSError:
            continue
        if vendor == NVIDIA_PCI_VENDOR and device_class.startswith(PCI_DISPLAY_CLASS):
            return True
    return False


def probe() -> dict[str, Any]:
    installed, torch_cuda = torch_cuda_version()
    if not installed:
        return {"status": "fail", "facts": {},
                "message": "torch is not installed in the engine's virtual environment. "
                           "Fix: run the install again (the engine's install failed)."}
    driver_cuda = driver_cuda_version() if torch_cuda is not None else None
    gpu_on_pci = nvidia_gpu_on_pci() if torch_cuda is not None else False
    cuda_available: bool | None = None
    device_count = 0
    if torch_cuda is not None and driver_cuda is not None:
        torch = importlib.import_module("torch")  # only where a driver can answer
        cuda_available = bool(torch.cuda.is_available())
        device_count = torch.cuda.device_count() if cuda_available else 0
    facts = {"torch_cuda": torch_cuda, "driver_cuda": driver_cuda, "gpu_on_pci": gpu_on_pci,
             "cuda_available": cuda_available, "device_count": device_count}
    return {**decide(torch_cuda, driver_cuda, gpu_on_pci, cuda_available, device_count),
            "facts": facts}


def main() -> int:
    result = probe()
    print(json.dumps(result))
    return 1 if result["status"] == "fail" else 0


if __name__ == "__main__":
    sys.exit(main())
