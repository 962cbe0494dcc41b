"""Debian 13 host converged with nvidia_driver + cuda_toolkit (fixture: 4 x H200, no NVSwitch)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

DRIVER = "550.163.01"
HELD = ["nvidia-open-kernel-dkms", "nvidia-driver", "firmware-nvidia-gsp", "nvidia-smi",
        "nvidia-persistenced"]


def version(host: Any, package: str) -> str:
    return str(host.check_output("dpkg-query -W -f='${Version}' %s", package))


@pytest.mark.parametrize("package", HELD)
def test_driver_packages_installed_at_the_pin(host: Any, package: str) -> None:
    assert version(host, package).startswith(DRIVER + "-")


def test_open_kernel_modules_not_proprietary(host: Any) -> None:
    assert not host.package("nvidia-kernel-dkms").is_installed


@pytest.mark.parametrize("package", HELD)
def test_driver_packages_held(host: Any, package: str) -> None:
    held = host.check_output("apt-mark showhold").split()
    assert package in held


def test_cuda_toolkit_installed(host: Any) -> None:
    assert version(host, "nvidia-cuda-toolkit").startswith("12.4.131")


def test_nvcc_reports_12_4(host: Any) -> None:
    out = host.check_output("nvcc --version")
    assert "Cuda compilation tools, release 12.4, V12.4.131" in out


def test_cuda_environment_for_login_shells(host: Any) -> None:
    out = host.check_output("bash -lc 'echo $CUDA_HOME; command -v nvcc'")
    assert out.split() == ["/usr/lib/cuda", "/usr/bin/nvcc"]


def test_nouveau_blacklisted(host: Any) -> None:
    conf = host.file("/etc/modprobe.d/nvidia-driver-blacklist-nouveau.conf")
    assert conf.is_file
    assert "blacklist nouveau" in conf.content_string.splitlines()
    assert "options nouveau modeset=0" in conf.content_string


def test_blacklist_and_options_are_in_the_initramfs(host: Any) -> None:
    images = host.check_output("ls /boot/initrd.img-*").split()
    assert images
    for image in images:
        listing = host.check_output("lsinitramfs %s", image).split()
        assert "etc/modprobe.d/nvidia-driver-blacklist-nouveau.conf" in listing
        assert "etc/modprobe.d/nvidia-driver-options.conf" in listing


def test_module_options_file_names_debians_open_module(host: Any) -> None:
    content = host.file("/etc/modprobe.d/nvidia-driver-options.conf").content_string
    assert "options nvidia-current-open NVreg_RestrictProfilingToAdminUsers=1" in content
    # kmod parses it (and normalizes the module name's dashes)
    parsed = host.check_output("modprobe -c")
    assert "options nvidia_current_open NVreg_RestrictProfilingToAdminUsers=1" in parsed


def test_persistenced_enabled(host: Any) -> None:
    assert host.service("nvidia-persistenced").is_enabled


def test_no_fabric_manager_without_nvswitches(host: Any) -> None:
    assert not host.package("nvidia-fabricmanager").is_installed
    assert host.run("systemctl cat nvidia-fabricmanager.service").rc != 0
    assert host.run("dpkg -l | grep -i fabric").rc == 1


def test_nvidia_smi_installed_but_no_gpu_in_a_container(host: Any) -> None:
    # nvidia-smi is real; there is no GPU or module here, so it fails as on any GPU-less host.
    result = host.run("nvidia-smi")
    assert result.rc == 9
    assert "couldn't communicate with the NVIDIA driver" in result.stdout


def test_check_mode_run_reports_no_changes() -> None:
    """ansible-playbook --check on the converged host: 0 changed, 0 failed."""
    playbook = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml"
    binary = shutil.which("ansible-playbook")
    assert binary
    # Only the JSON callback on stdout (a caller's extra callbacks would print there too).
    env = {k: v for k, v in os.environ.items() if k != "ANSIBLE_CALLBACKS_ENABLED"}
    env.update(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(
        [binary, "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(playbook), "--check",
         "--diff"],
        capture_output=True, text=True, timeout=900, check=False,
        env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    stats = result["stats"]["nvidia_driver-debian13"]
    changed = [
        f"{task['task']['name']}: {host_result.get('diff', '')}"
        for play in result["plays"] for task in play["tasks"]
        for host_result in task["hosts"].values() if host_result.get("changed")]
    assert (stats["changed"], stats["failures"]) == (0, 0), changed
    assert stats["ok"] > 20  # the roles really ran
    # The preflight report explains the driver/CUDA pairing.
    reports = [
        host_result.get("msg", "")
        for play in result["plays"] for task in play["tasks"]
        if task["task"]["name"].endswith("Report the plan and the driver/CUDA pairing")
        for host_result in task["hosts"].values()]
    assert len(reports) == 1, reports
    assert "driver 550.163.01 (branch R550, open modules) from debian on Debian 13" in reports[0]
    assert "R550 runs CUDA 12.4 and older natively; engine CUDA: 12.4" in reports[0]


def test_no_cuda_compat_linker_entry_without_the_option(host: Any) -> None:
    assert not host.file("/etc/ld.so.conf.d/nvidia-driver-cuda-compat.conf").exists
