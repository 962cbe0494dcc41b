"""The nvidia_driver role's NVIDIA-repository source, rendered for Ubuntu 22.04/24.04 and
Rocky 9 (the repository itself cannot be reached here): the plan filter, the role's own
repository templates, and apt parsing the rendered deb822 file."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest
from ansible.plugins.filter.urlsplit import split_url

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "nvidia_driver"

_spec = importlib.util.spec_from_file_location(
    "nvidia_driver_plan", ROLE / "filter_plugins" / "nvidia_driver_plan.py")
assert _spec and _spec.loader
plan_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan_mod)

UBUNTU_2204 = {"distribution": "Ubuntu", "distribution_version": "22.04",
               "distribution_major_version": "22", "distribution_release": "jammy",
               "os_family": "Debian", "architecture": "x86_64"}
UBUNTU_2404 = {"distribution": "Ubuntu", "distribution_version": "24.04",
               "distribution_major_version": "24", "distribution_release": "noble",
               "os_family": "Debian", "architecture": "x86_64"}
ROCKY_9 = {"distribution": "Rocky", "distribution_version": "9.4",
           "distribution_major_version": "9", "distribution_release": "Blue Onyx",
           "os_family": "RedHat", "architecture": "x86_64"}
DEBIAN_12 = {"distribution": "Debian", "distribution_version": "12.15",
             "distribution_major_version": "12", "distribution_release": "bookworm",
             "os_family": "Debian", "architecture": "x86_64"}
DEBIAN_13 = dict(DEBIAN_12, distribution_version="13.2", distribution_major_version="13",
                 distribution_release="trixie")
NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos"


def plan(facts: dict[str, str], **kwargs: Any) -> dict[str, Any]:
    result: dict[str, Any] = plan_mod.nvidia_driver_plan(facts, **kwargs)
    return result


def render(template: str, the_plan: dict[str, Any], ca_bundle: str = "") -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"), trim_blocks=True,
        keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["urlsplit"] = split_url
    return env.get_template(template).render(
        _nvidia_driver_plan=the_plan, nvidia_driver_ca_bundle=ca_bundle,
        ansible_managed="Ansible managed")


def test_ubuntu_2204_repository_and_packages() -> None:
    p = plan(UBUNTU_2204, source="nvidia_repo", version="550.163.01")
    assert p["error"] == ""
    assert (p["family"], p["branch"], p["kernel_modules"]) == ("apt", 550, "open")
    assert p["repo"] == {
        "kind": "apt", "url": f"{NVIDIA}/ubuntu2204/x86_64/",
        "key_url": f"{NVIDIA}/ubuntu2204/x86_64/3bf863cc.pub", "id": "cuda-ubuntu2204-x86_64",
        "path": "/etc/apt/sources.list.d/nvidia-cuda.sources",
        "key_path": "/etc/apt/keyrings/nvidia-cuda.asc"}
    assert p["packages"] == [
        "nvidia-dkms-550-open=550.163.01-*", "nvidia-headless-550-open=550.163.01-*",
        "nvidia-utils-550=550.163.01-*", "nvidia-compute-utils-550=550.163.01-*"]
    assert p["kernel_module_pins"] == ["nvidia-dkms-550-open=550.163.01-*"]
    assert p["fabricmanager_packages"] == []  # no NVSwitch, no fabric manager
    assert p["dcgm_packages"] == ["datacenter-gpu-manager"]
    assert p["module_name"] == "nvidia"
    assert render("nvidia-cuda.sources.j2", p) == (
        "# Ansible managed\n"
        '# NVIDIA CUDA repository (role nvidia_driver): a flat repository, hence "Suites: /".\n'
        "Types: deb\n"
        f"URIs: {NVIDIA}/ubuntu2204/x86_64/\n"
        "Suites: /\n"
        "Signed-By: /etc/apt/keyrings/nvidia-cuda.asc\n")


def test_fabric_manager_at_exactly_the_driver_version_with_nvswitches() -> None:
    p = plan(UBUNTU_2204, source="nvidia_repo", version="550.127.05", nvswitches=4)
    assert p["fabricmanager_packages"] == [
        "nvidia-fabricmanager-550=550.127.05-*", "libnvidia-nscq-550=550.127.05-*"]
    assert {"nvidia-fabricmanager-550", "libnvidia-nscq-550"} <= set(p["holds"])
    rocky = plan(ROCKY_9, source="nvidia_repo", version="550.127.05", nvswitches=4)
    assert rocky["fabricmanager_packages"] == [
        "nvidia-fabric-manager-550.127.05", "libnvidia-nscq-550.127.05"]


def test_ubuntu_2404_arm_mirror_and_ca_bundle() -> None:
    facts = dict(UBUNTU_2404, architecture="aarch64")
    p = plan(facts, source="auto", mirror_url="https://mirror.example.internal/cuda/repos/",
             dcgm=False, kernel_modules="proprietary")
    assert p["source"] == "nvidia_repo"
    assert p["version"] == "550.163.01"  # the default pin
    assert p["repo"]["url"] == "https://mirror.example.internal/cuda/repos/ubuntu2404/sbsa/"
    assert p["repo"]["key_url"].endswith("/ubuntu2404/sbsa/3bf863cc.pub")
    assert p["packages"][:2] == ["nvidia-dkms-550=550.163.01-*",
                                 "nvidia-headless-550=550.163.01-*"]
    assert p["dcgm_packages"] == []
    assert render("apt-ca.conf.j2", p, "/etc/ssl/proxy-ca.pem").splitlines()[-1] == (
        'Acquire::https::mirror.example.internal::CAInfo "/etc/ssl/proxy-ca.pem";')
    assert "URIs: https://mirror.example.internal/cuda/repos/ubuntu2404/sbsa/\n" in render(
        "nvidia-cuda.sources.j2", p)


def test_rocky_9_repository_module_stream_and_locks() -> None:
    p = plan(ROCKY_9, source="nvidia_repo", version="550.163.01")
    assert p["error"] == ""
    assert p["family"] == "dnf"
    assert p["dnf_module"] == "nvidia-driver:550-open"
    assert p["repo"]["url"] == f"{NVIDIA}/rhel9/x86_64/"
    assert p["repo"]["key_url"] == f"{NVIDIA}/rhel9/x86_64/D42D0685.pub"
    assert p["packages"] == ["kmod-nvidia-open-dkms-550.163.01", "nvidia-driver-550.163.01",
                             "nvidia-driver-cuda-550.163.01", "nvidia-persistenced-550.163.01"]
    assert p["kernel_module_pins"] == ["kmod-nvidia-open-dkms-550.163.01"]
    text = render("nvidia-cuda.repo.j2", p)
    assert text.splitlines()[2:] == [
        "[cuda-rhel9-x86_64]", "name=cuda-rhel9-x86_64", f"baseurl={NVIDIA}/rhel9/x86_64/",
        "enabled=1", "gpgcheck=1", "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-cuda"]
    with_ca = render("nvidia-cuda.repo.j2", p, "/etc/pki/tls/certs/proxy-ca.pem")
    assert with_ca.splitlines()[-1] == "sslcacert=/etc/pki/tls/certs/proxy-ca.pem"


def test_rocky_proprietary_stream() -> None:
    p = plan(ROCKY_9, source="nvidia_repo", kernel_modules="proprietary")
    assert p["dnf_module"] == "nvidia-driver:550-dkms"
    assert p["kernel_module_packages"] == ["kmod-nvidia-latest-dkms"]


def test_debian_sources_and_packages() -> None:
    p = plan(DEBIAN_13)
    assert (p["source"], p["version"], p["module_name"]) == (
        "debian", "550.163.01", "nvidia-current-open")
    assert p["holds"] == ["nvidia-open-kernel-dkms", "nvidia-driver", "firmware-nvidia-gsp",
                          "nvidia-smi", "nvidia-persistenced"]
    assert p["packages"][0] == "nvidia-open-kernel-dkms=550.163.01-*"
    text = render("debian-nonfree.sources.j2", p)
    assert "Suites: trixie trixie-updates\n" in text
    assert "Components: contrib non-free non-free-firmware\n" in text
    assert plan(DEBIAN_12)["version"] == "535.261.03"


@pytest.mark.parametrize(("facts", "kwargs", "needle"), [
    ({**UBUNTU_2204, "distribution_version": "20.04"}, {"source": "nvidia_repo"},
     "not Ubuntu 20.04 x86_64. Fix:"),
    (ROCKY_9, {"source": "nvidia_repo", "version": "latest"},
     "nvidia_driver_version: 'latest' is not a driver version. Fix:"),
    (UBUNTU_2204, {"source": "debian"}, "supported on Debian 12/13, not on Ubuntu 22.04. Fix:"),
    (DEBIAN_13, {"nvswitches": 4}, "4 NVSwitches, which need NVIDIA Fabric Manager"),
    (DEBIAN_13, {"source": "ppa"}, "nvidia_driver_source: 'ppa' is not a source"),
])
def test_refusals_name_the_variable_and_fix(
        facts: dict[str, str], kwargs: dict[str, Any], needle: str) -> None:
    assert needle in plan(facts, **kwargs)["error"]


H200_X4 = {"min_driver_branch": 550, "gpus": [{"model": "H200"}] * 4}


def test_branch_problem() -> None:
    refuse = plan_mod.nvidia_driver_branch_problem
    assert refuse(plan(DEBIAN_13), H200_X4) == ""
    message = refuse(plan(DEBIAN_12), H200_X4)
    assert "(4 x H200) need driver branch R550 or newer" in message
    assert "Fix: use Debian 13 (trixie), which packages 550.163.01" in message
    repo_old = refuse(plan(UBUNTU_2204, source="nvidia_repo", version="535.216.03"), H200_X4)
    assert "is R535" in repo_old and "Debian 13" not in repo_old
    assert refuse(plan(DEBIAN_12), {"min_driver_branch": None, "gpus": []}) == ""
    h100 = {"min_driver_branch": 525, "gpus": [{"model": "H100-SXM"}]}
    assert refuse(plan(DEBIAN_12), h100) == ""


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt (Debian/Ubuntu host)")
@pytest.mark.parametrize("facts", [UBUNTU_2204, UBUNTU_2404])
def test_apt_parses_the_rendered_sources(tmp_path: Path, facts: dict[str, str]) -> None:
    """Real apt reads the rendered deb822 file and derives the repository's index URL."""
    p = plan(facts, source="nvidia_repo")
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "nvidia-cuda.sources").write_text(render("nvidia-cuda.sources.j2", p))
    for sub in ("lists/partial", "cache/archives/partial"):
        (tmp_path / sub).mkdir(parents=True)
    proc = subprocess.run(
        ["apt-get", "update", "--print-uris", "-o", "Dir::Etc::SourceList=/dev/null",
         "-o", f"Dir::Etc::SourceParts={parts}", "-o", f"Dir::State::Lists={tmp_path / 'lists'}",
         "-o", f"Dir::Cache={tmp_path / 'cache'}", "-o", "Debug::NoLocking=1"],
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f"'{p['repo']['url']}InRelease'" in proc.stdout
