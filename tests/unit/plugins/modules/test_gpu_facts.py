"""plugins/modules/gpu_facts.py: sysfs fixture trees and nvidia-smi outputs.

The fixtures are described in tests/data/gpu/README.md.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.serving.plugins.modules import gpu_facts as gf

ROOT = Path(__file__).resolve().parents[4]
DATA = ROOT / "tests" / "data" / "gpu"
SYSFS = DATA / "sysfs"
SMI = DATA / "nvidia-smi"


def smi_text(name: str) -> str:
    return (SMI / name).read_text()


def facts(tree: str, query: tuple[int, str, str] | None = None,
          version: tuple[int, str, str] | None = None) -> dict[str, Any]:
    return gf.build_facts(SYSFS / tree, gf.smi_facts(query, version))


def test_no_nvidia_device() -> None:
    result = facts("none")
    assert result["gpu_count"] == 0
    assert result["gpus"] == []
    assert result["nvswitch_count"] == 0
    assert result["min_driver_branch"] is None
    assert result["open_kernel_modules"] is False
    assert result["kernel_module_loaded"] is False
    # the ASPEED BMC display controller (class 0x0300, vendor 0x1a03) is not an NVIDIA GPU
    assert all(f["vendor_id"] == "0x10de" for f in gf.scan_pci(SYSFS / "none"))


def test_missing_sysfs_is_empty(tmp_path: Path) -> None:
    assert gf.scan_pci(tmp_path) == []
    assert gf.build_facts(tmp_path, gf.smi_facts(None, None))["gpu_count"] == 0


def test_one_h100_pcie() -> None:
    result = facts("h100-pcie-x1")
    assert result["gpu_count"] == 1
    (gpu,) = result["gpus"]
    assert gpu == {
        "pci_address": "0000:17:00.0", "device_id": "0x2331", "model": "H100-PCIe",
        "product": "H100 PCIe", "memory_gb": 80, "architecture": "hopper",
        "min_driver_branch": 525, "kernel_modules": "open", "bound_driver": None,
    }
    assert result["nvswitch_count"] == 0
    assert result["open_kernel_modules"] is True


def test_pcie_and_sxm_are_told_apart() -> None:
    pcie = facts("h100-pcie-x1")["gpu_models"]
    sxm = facts("hgx-h100-x8")["gpu_models"]
    assert pcie == ["H100-PCIe"]
    assert sxm == ["H100-SXM"]


def test_hgx_h100_eight_gpus_four_nvswitches() -> None:
    result = facts("hgx-h100-x8")
    assert result["gpu_count"] == 8
    addresses = [g["pci_address"] for g in result["gpus"]]
    assert addresses == sorted(addresses)
    assert result["nvswitch_count"] == 4
    assert {s["product"] for s in result["nvswitches"]} == {
        "H100 NVSwitch (GH100)"}
    assert result["min_driver_branch"] == 525


def test_h200_needs_r550() -> None:
    for tree in ("hgx-h200-x8", "hgx-h200-x4"):
        result = facts(tree)
        assert result["gpu_models"] == ["H200"]
        assert result["min_driver_branch"] == 550
        assert {g["memory_gb"] for g in result["gpus"]} == {141}
    assert facts("hgx-h200-x8")["nvswitch_count"] == 4
    assert facts("hgx-h200-x4")["nvswitch_count"] == 0
    assert facts("hgx-h200-x4")["gpu_count"] == 4


def test_nvl_cards() -> None:
    nvl = facts("h100-nvl-x2")
    assert nvl["gpu_models"] == ["H100-NVL"]
    assert nvl["min_driver_branch"] == 535
    assert {g["memory_gb"] for g in nvl["gpus"]} == {94}
    assert facts("h200-nvl-x2")["gpu_models"] == ["H200-NVL"]


def test_unknown_nvidia_gpu_is_reported_not_guessed() -> None:
    result = facts("unknown-nvidia")
    assert result["gpu_count"] == 1  # the HD audio function (class 0x0403) is not a GPU
    assert result["gpu_models"] == ["unknown-10de:2901"]
    assert result["unknown_gpus"] == ["0000:17:00.0"]
    assert result["min_driver_branch"] is None


def test_model_names_match_the_planner_catalog() -> None:
    from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.gpus import (
        CATALOG,
    )

    assert {m.model for m in gf.GPU_MODELS.values()} <= set(CATALOG)


PCI_IDS = Path("/usr/share/misc/pci.ids")


@pytest.mark.skipif(not PCI_IDS.exists(), reason="pci.ids (package pci.ids) not installed")
def test_device_ids_agree_with_pci_ids() -> None:
    text = PCI_IDS.read_text(encoding="utf-8", errors="replace")
    nvidia = text.split("\n10de  NVIDIA Corporation\n", 1)[1]
    nvidia = nvidia[: re.search(r"^[0-9a-f]{4}  ", nvidia, re.M).start()]  # type: ignore[union-attr]
    names = dict(re.findall(r"^\t([0-9a-f]{4})  (.+)$", nvidia, re.M))
    checked = 0
    for device, model in gf.GPU_MODELS.items():
        listed = names.get(f"{device:04x}")
        if listed is None:  # older pci.ids releases (bookworm's) lack the newest ids
            continue
        checked += 1
        assert listed.startswith("GH100"), (device, listed)
        assert model.model.split("-")[0] in listed, (device, listed)
    assert checked >= 2
    for device in gf.NVSWITCH_MODELS:
        assert "NVSwitch" in names.get(f"{device:04x}", "NVSwitch (not listed yet)")


def test_loaded_driver_parsed_from_nvidia_smi() -> None:
    result = facts("h100-sxm-x1-driver-loaded",
                   (0, smi_text("h100-sxm-x1.query.csv"), ""),
                   (0, smi_text("version-550.163.01.txt"), ""))
    smi = result["nvidia_smi"]
    assert smi == {
        "queried": True, "ok": True, "error": None, "driver_version": "550.163.01",
        "cuda_version": "12.4",
        "gpus": [{"index": 0, "pci_bus_id": "00000000:18:00.0",
                  "name": "NVIDIA H100 80GB HBM3",
                  "uuid": "GPU-5b8c1a7e-2f0d-4c3e-9a61-0d7e2c4b9f10",
                  "driver_version": "550.163.01", "memory_total_mib": 81559,
                  "persistence_mode": True, "mig_mode": False}],
    }
    assert result["kernel_module_version"] == "550.163.01"
    assert result["gpus"][0]["bound_driver"] == "nvidia"
    assert result["driver_mismatch"] is False


def test_eight_h200_with_mig_and_persistence_mixed() -> None:
    gpus = gf.parse_query_gpu(smi_text("hgx-h200-x8.query.csv"))
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["memory_total_mib"] for g in gpus} == {143771}
    assert [g["persistence_mode"] for g in gpus] == [True] * 6 + [False] * 2
    assert [g["mig_mode"] for g in gpus] == [False] * 6 + [True] * 2
    assert gpus[1]["pci_bus_id"] == "00000000:2A:00.0"


def test_pcie_persistence_off() -> None:
    (gpu,) = gf.parse_query_gpu(smi_text("h100-pcie-x1.query.csv"))
    assert gpu["name"] == "NVIDIA H100 PCIe"
    assert gpu["persistence_mode"] is False


def test_not_applicable_values() -> None:
    (gpu,) = gf.parse_query_gpu(
        "0, 00000000:01:00.0, NVIDIA L4, GPU-x, 550.163.01, [N/A], Enabled, [N/A]\n")
    assert gpu["memory_total_mib"] is None
    assert gpu["mig_mode"] is None


def test_driver_mismatch() -> None:
    text = smi_text("mismatch.txt")
    result = facts("h100-sxm-x1-mismatch", (18, text, ""), None)
    assert result["driver_mismatch"] is True
    assert result["kernel_module_version"] == "535.183.01"
    smi = result["nvidia_smi"]
    assert smi["ok"] is False
    assert smi["error"] == "Failed to initialize NVML: Driver/library version mismatch"
    assert smi["gpus"] == []


def test_mismatch_message_with_exit_zero_is_still_a_failure() -> None:
    assert gf.smi_failure(0, smi_text("mismatch.txt"), "") is not None


def test_no_driver_recorded_output() -> None:
    smi = gf.smi_facts((9, smi_text("no-driver.txt"), ""), None)
    assert smi["ok"] is False
    assert "couldn't communicate with the NVIDIA driver" in str(smi["error"])
    assert gf.is_version_mismatch(smi["error"]) is False


def test_wrong_columns_name_the_line() -> None:
    with pytest.raises(ValueError, match=r"line 1 has 4 columns, expected 8"):
        gf.parse_query_gpu(smi_text("wrong-columns.csv"))
    smi = gf.smi_facts((0, smi_text("wrong-columns.csv"), ""), None)
    assert smi["ok"] is False and "expected 8" in str(smi["error"])


def test_smi_not_queried_without_module() -> None:
    result = facts("hgx-h200-x4")
    assert result["nvidia_smi"]["queried"] is False
    assert result["kernel_module_loaded"] is False


def test_version_parsing_and_branch() -> None:
    versions = gf.parse_smi_version(smi_text("version-550.163.01.txt"))
    assert versions == {"nvidia_smi": "550.163.01", "nvml": "550.163",
                        "driver": "550.163.01", "cuda": "12.4"}
    assert gf.branch_of("550.163.01") == 550
    assert gf.branch_of("535.261.03") == 535
    assert gf.branch_of("") is None
    assert gf.branch_of("latest") is None


def test_module_runs_through_ansible(tmp_path: Path) -> None:
    """The real module through ansible's module runner on a fixture tree (no nvidia-smi run)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    ansible = Path(sys.executable).parent / "ansible"
    proc = subprocess.run(
        [str(ansible), "localhost", "-c", "local", "-i", "localhost,",
         "-m", "vllm_fleet.serving.gpu_facts",
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-a", f"root={SYSFS / 'hgx-h200-x8'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    fact = result["ansible_facts"]["gpu_facts"]
    assert fact["gpu_count"] == 8 and fact["nvswitch_count"] == 4
    assert fact["min_driver_branch"] == 550
    assert result["changed"] is False


def test_module_refuses_a_missing_root(tmp_path: Path) -> None:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path))
    ansible = Path(sys.executable).parent / "ansible"
    proc = subprocess.run(
        [str(ansible), "localhost", "-c", "local", "-i", "localhost,",
         "-m", "vllm_fleet.serving.gpu_facts",
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-a", f"root={tmp_path / 'absent'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert "is not a directory. Fix:" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
