#!/usr/bin/python
"""Ansible module gpu_facts: NVIDIA GPUs and NVSwitches from sysfs, plus nvidia-smi when loaded.

Detection reads PCI vendor/device/class ids under ``<root>/sys/bus/pci/devices``, so it
works on a fresh host before any driver exists. When the ``nvidia`` kernel module is
loaded (``<root>/sys/module/nvidia`` exists) it also runs ``nvidia-smi``.

The logic is plain typed functions usable without Ansible (``scan_pci``,
``parse_query_gpu``, ``parse_smi_version``, ``smi_failure``, ``build_facts``); ``main`` is
the thin adapter.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_facts
short_description: Detect NVIDIA GPUs and NVSwitches (sysfs PCI ids) and read nvidia-smi
description:
  - Lists NVIDIA PCI functions under O(root)/sys/bus/pci/devices by vendor id 0x10de and
    PCI class (0x0300/0x0302 display controllers are GPUs, 0x0680 bridges are NVSwitches),
    so it works before any driver is installed.
  - Maps device ids to the model name used by the project's planner (H100-SXM, H100-PCIe,
    H100-NVL, H200, H200-NVL), nominal memory, architecture and the minimum driver branch
    that supports the GPU.
  - When the nvidia kernel module is loaded (O(root)/sys/module/nvidia exists) and
    O(query_nvidia_smi) is true, runs C(nvidia-smi --query-gpu) and C(nvidia-smi --version)
    and reports driver version, CUDA version, memory, persistence and MIG mode, or the
    reason nvidia-smi failed (e.g. a driver/library version mismatch).
author:
  - vllm-fleet maintainers (@vllm-fleet)
attributes:
  check_mode:
    support: full
    description: Reads only; never changes the host.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to diff.
  facts:
    support: full
    description: Sets the C(gpu_facts) fact.
options:
  root:
    description: Filesystem root to read sysfs from; tests point it at a fixture tree.
    type: path
    default: /
  query_nvidia_smi:
    description: Run nvidia-smi when the nvidia kernel module is loaded.
    type: bool
    default: true
  nvidia_smi:
    description: nvidia-smi command (name looked up in PATH, or a path).
    type: str
    default: nvidia-smi
"""

EXAMPLES = r"""
- name: Detect GPUs before installing a driver
  vllm_fleet.serving.gpu_facts:

- name: Refuse a host without GPUs
  ansible.builtin.assert:
    that: ansible_facts.gpu_facts.gpu_count > 0

- name: Read a fixture tree copied onto a test host
  vllm_fleet.serving.gpu_facts:
    root: /opt/gpu-fixture
    query_nvidia_smi: false
"""

RETURN = r"""
ansible_facts:
  description: The facts the module sets.
  returned: always
  type: dict
  contains:
    gpu_facts:
      description: C(gpus) (one mapping per GPU), C(gpu_count), C(gpu_models),
        C(nvswitches), C(nvswitch_count), C(min_driver_branch), C(open_kernel_modules),
        C(kernel_module_version), C(nvidia_smi) (the query's result or why it failed) and
        C(driver_mismatch).
      returned: always
      type: dict
      sample:
        gpu_count: 8
        gpu_models: [H100-SXM]
        nvswitch_count: 4
        min_driver_branch: 525
        open_kernel_modules: true
        driver_mismatch: false
"""

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

NVIDIA_VENDOR = 0x10DE
# PCI base class 0x03 subclasses 0x00 (VGA) and 0x02 (3D controller) are GPUs; an NVIDIA
# function of class 0x0680 (bridge, other) is an NVSwitch on HGX baseboards.
GPU_CLASSES = frozenset({0x0300, 0x0302})
NVSWITCH_CLASS = 0x0680

# The NVIDIA query the module runs; the parser reads the same columns in this order.
QUERY_FIELDS = (
    "index",
    "pci.bus_id",
    "name",
    "uuid",
    "driver_version",
    "memory.total",
    "persistence_mode",
    "mig.mode.current",
)


@dataclass(frozen=True)
class GpuModel:
    """What a device id means. min_branch: oldest driver branch that supports it."""

    model: str
    product: str
    memory_gb: int
    architecture: str
    min_branch: int
    kernel_modules: str  # "open": NVIDIA recommends the open kernel modules


# Device ids and names as in pci.ids (pciutils); min_branch from NVIDIA's data center
# driver release notes: Hopper H100 from R525, H100 NVL from R535, H200 from R550.
# Open kernel modules are the recommended flavour for Hopper.
GPU_MODELS: dict[int, GpuModel] = {
    0x2330: GpuModel("H100-SXM", "H100 SXM5 80GB", 80, "hopper", 525, "open"),
    0x2331: GpuModel("H100-PCIe", "H100 PCIe", 80, "hopper", 525, "open"),
    0x2339: GpuModel("H100-SXM", "H100 SXM5 94GB", 94, "hopper", 535, "open"),
    0x2321: GpuModel("H100-NVL", "H100 NVL (H100L 94GB)", 94, "hopper", 535, "open"),
    0x2335: GpuModel("H200", "H200 SXM 141GB", 141, "hopper", 550, "open"),
    0x233B: GpuModel("H200-NVL", "H200 NVL", 141, "hopper", 550, "open"),
}

NVSWITCH_MODELS: dict[int, str] = {
    0x1AF1: "A100 NVSwitch (GA100)",
    0x22A3: "H100 NVSwitch (GH100)",
}


class PciFunction(TypedDict):
    pci_address: str
    vendor_id: str
    device_id: str
    class_id: str
    bound_driver: str | None


class Gpu(TypedDict):
    pci_address: str
    device_id: str
    model: str
    product: str
    memory_gb: int | None
    architecture: str | None
    min_driver_branch: int | None
    kernel_modules: str | None
    bound_driver: str | None


class NvSwitch(TypedDict):
    pci_address: str
    device_id: str
    product: str
    bound_driver: str | None


class SmiGpu(TypedDict):
    index: int
    pci_bus_id: str
    name: str
    uuid: str
    driver_version: str
    memory_total_mib: int | None
    persistence_mode: bool | None
    mig_mode: bool | None


class SmiFacts(TypedDict):
    queried: bool
    ok: bool
    error: str | None
    driver_version: str | None
    cuda_version: str | None
    gpus: list[SmiGpu]


def _read_hex(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip(), 16)
    except (OSError, ValueError):
        return None


def scan_pci(root: str | Path) -> list[PciFunction]:
    """Every NVIDIA PCI function under root/sys/bus/pci/devices, sorted by address."""
    devices = Path(root) / "sys" / "bus" / "pci" / "devices"
    found: list[PciFunction] = []
    if not devices.is_dir():
        return found
    for entry in sorted(devices.iterdir()):
        vendor = _read_hex(entry / "vendor")
        device = _read_hex(entry / "device")
        klass = _read_hex(entry / "class")
        if vendor != NVIDIA_VENDOR or device is None or klass is None:
            continue
        driver_link = entry / "driver"
        bound = Path(driver_link.readlink()).name if driver_link.is_symlink() else None
        found.append({
            "pci_address": entry.name,
            "vendor_id": f"0x{vendor:04x}",
            "device_id": f"0x{device:04x}",
            "class_id": f"0x{klass:06x}",
            "bound_driver": bound,
        })
    return found


def classify(functions: list[PciFunction]) -> tuple[list[Gpu], list[NvSwitch]]:
    """Split NVIDIA PCI functions into GPUs and NVSwitches (audio/USB functions dropped)."""
    gpus: list[Gpu] = []
    switches: list[NvSwitch] = []
    for func in functions:
        device = int(func["device_id"], 16)
        base_sub = int(func["class_id"], 16) >> 8
        if base_sub in GPU_CLASSES:
            known = GPU_MODELS.get(device)
            gpus.append({
                "pci_address": func["pci_address"],
                "device_id": func["device_id"],
                "model": known.model if known else f"unknown-10de:{device:04x}",
                "product": known.product if known else "unknown NVIDIA GPU",
                "memory_gb": known.memory_gb if known else None,
                "architecture": known.architecture if known else None,
                "min_driver_branch": known.min_branch if known else None,
                "kernel_modules": known.kernel_modules if known else None,
                "bound_driver": func["bound_driver"],
            })
        elif base_sub == NVSWITCH_CLASS:
            switches.append({
                "pci_address": func["pci_address"],
                "device_id": func["device_id"],
                "product": NVSWITCH_MODELS.get(device, f"NVIDIA bridge 10de:{device:04x}"),
                "bound_driver": func["bound_driver"],
            })
    return gpus, switches


def read_module_version(root: str | Path) -> str | None:
    """Version of the loaded nvidia kernel module (root/sys/module/nvidia/version)."""
    try:
        text = (Path(root) / "sys" / "module" / "nvidia" / "version").read_text("ascii")
    except OSError:
        return None
    return text.strip() or None


def module_loaded(root: str | Path) -> bool:
    return (Path(root) / "sys" / "module" / "nvidia").is_dir()


def _flag(value: str) -> bool | None:
    low = value.strip().lower()
    if low == "enabled":
        return True
    if low == "disabled":
        return False
    return None  # "[N/A]", "[Not Supported]"


def _int_or_none(value: str) -> int | None:
    try:
        return int(value.strip())
    except ValueError:
        return None


def parse_query_gpu(text: str) -> list[SmiGpu]:
    """Parse `nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits`.

    Raises ValueError naming the line when a row does not have the queried columns.
    """
    rows: list[SmiGpu] = []
    for lineno, row in enumerate(csv.reader(io.StringIO(text), skipinitialspace=True), 1):
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) != len(QUERY_FIELDS):
            raise ValueError(
                f"nvidia-smi output line {lineno} has {len(row)} columns, expected "
                f"{len(QUERY_FIELDS)} ({','.join(QUERY_FIELDS)}): {','.join(row)!r}")
        cells = [cell.strip() for cell in row]
        index = _int_or_none(cells[0])
        if index is None:
            raise ValueError(f"nvidia-smi output line {lineno}: index {cells[0]!r} is not a number")
        rows.append({
            "index": index,
            "pci_bus_id": cells[1],
            "name": cells[2],
            "uuid": cells[3],
            "driver_version": cells[4],
            "memory_total_mib": _int_or_none(cells[5]),
            "persistence_mode": _flag(cells[6]),
            "mig_mode": _flag(cells[7]),
        })
    return rows


_VERSION_LINE = re.compile(r"^\s*(?P<key>[A-Za-z -]+?)\s*:\s*(?P<value>\S+)\s*$")


def parse_smi_version(text: str) -> dict[str, str]:
    """Parse `nvidia-smi --version` (NVIDIA-SMI/NVML/DRIVER/CUDA version lines)."""
    versions: dict[str, str] = {}
    for line in text.splitlines():
        match = _VERSION_LINE.match(line)
        if match:
            key = match.group("key").strip().lower().replace(" version", "")
            versions[key.replace("-", "_").replace(" ", "_")] = match.group("value")
    return versions


def smi_failure(rc: int, stdout: str, stderr: str) -> str | None:
    """The reason nvidia-smi failed, or None when it succeeded."""
    text = "\n".join(part.strip() for part in (stdout, stderr) if part.strip())
    if rc == 0 and "Failed to initialize NVML" not in text:
        return None
    first = text.splitlines()[0] if text else f"nvidia-smi exited with {rc}"
    return first.strip()


def is_version_mismatch(error: str | None) -> bool:
    return bool(error) and "version mismatch" in str(error).lower()


def branch_of(version: str | None) -> int | None:
    """Driver branch (major number) of a version string such as 550.163.01."""
    if not version:
        return None
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def smi_facts(
    query: tuple[int, str, str] | None, version: tuple[int, str, str] | None
) -> SmiFacts:
    """Combine the results (rc, stdout, stderr) of the query and `--version` runs."""
    facts: SmiFacts = {"queried": query is not None, "ok": False, "error": None,
                       "driver_version": None, "cuda_version": None, "gpus": []}
    if query is None:
        return facts
    error = smi_failure(*query)
    if error is not None:
        facts["error"] = error
        return facts
    try:
        facts["gpus"] = parse_query_gpu(query[1])
    except ValueError as exc:
        facts["error"] = str(exc)
        return facts
    facts["ok"] = True
    drivers = sorted({gpu["driver_version"] for gpu in facts["gpus"]})
    facts["driver_version"] = drivers[0] if len(drivers) == 1 else None
    if version is not None and smi_failure(*version) is None:
        versions = parse_smi_version(version[1])
        facts["cuda_version"] = versions.get("cuda")
        facts["driver_version"] = facts["driver_version"] or versions.get("driver")
    return facts


def build_facts(root: str | Path, smi: SmiFacts) -> dict[str, Any]:
    """The gpu_facts fact from a sysfs root and nvidia-smi results."""
    gpus, switches = classify(scan_pci(root))
    branches = [g["min_driver_branch"] for g in gpus if g["min_driver_branch"] is not None]
    module_version = read_module_version(root)
    smi_driver = smi["driver_version"]
    mismatch = is_version_mismatch(smi["error"]) or (
        module_version is not None and smi_driver is not None and module_version != smi_driver)
    return {
        "root": str(root),
        "gpus": gpus,
        "gpu_count": len(gpus),
        "gpu_models": sorted({g["model"] for g in gpus}),
        "unknown_gpus": [g["pci_address"] for g in gpus if g["min_driver_branch"] is None],
        "nvswitches": switches,
        "nvswitch_count": len(switches),
        "min_driver_branch": max(branches) if branches else None,
        "open_kernel_modules": any(g["kernel_modules"] == "open" for g in gpus),
        "kernel_module_loaded": module_loaded(root),
        "kernel_module_version": module_version,
        "nvidia_smi": smi,
        "driver_mismatch": mismatch,
    }


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "query_nvidia_smi": {"type": "bool", "default": True},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    root = module.params["root"]
    if not Path(root).is_dir():
        module.fail_json(msg=f"gpu_facts: root {root!r} is not a directory. Fix: point root at "
                             "the filesystem root (/) or a fixture tree that has sys/bus/pci.")
    query: tuple[int, str, str] | None = None
    version: tuple[int, str, str] | None = None
    if module.params["query_nvidia_smi"] and module_loaded(root):
        binary = module.get_bin_path(module.params["nvidia_smi"])
        if binary is None:
            query = (127, "", f"{module.params['nvidia_smi']} not found in PATH")
        else:
            rc, out, err = module.run_command(
                [binary, "--query-gpu=" + ",".join(QUERY_FIELDS),
                 "--format=csv,noheader,nounits"])
            query = (rc, out, err)
            rc, out, err = module.run_command([binary, "--version"])
            version = (rc, out, err)
    module.exit_json(changed=False, ansible_facts={"gpu_facts": build_facts(root, smi_facts(
        query, version))})


if __name__ == "__main__":
    main()
