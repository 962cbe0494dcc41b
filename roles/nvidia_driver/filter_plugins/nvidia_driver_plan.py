"""Filters of the nvidia_driver role: what to install from which source, and whether it can
drive the detected GPUs. Plain typed functions; the role's tasks only apply the result.

    {{ ansible_facts | nvidia_driver_plan(source, version, kernel_modules, nvswitches, ...) }}
    {{ plan | nvidia_driver_branch_problem(gpu_facts) }}   -> '' or the refusal message
"""

from __future__ import annotations

from typing import Any, TypedDict

NVIDIA_REPO_URL = "https://developer.download.nvidia.com/compute/cuda/repos"

# The driver each Debian release packages (contrib/non-free), as of trixie 13 / bookworm 12.
DEBIAN_DRIVER_VERSIONS: dict[str, str] = {"bookworm": "535.261.03", "trixie": "550.163.01"}
DEBIAN_RELEASE_NAMES: dict[str, str] = {"bookworm": "Debian 12 (bookworm)",
                                        "trixie": "Debian 13 (trixie)"}
# Default pin for NVIDIA's CUDA repository: the same R550 build Debian 13 ships.
NVIDIA_REPO_DEFAULT_VERSION = "550.163.01"
# NVIDIA's repository directory names of the supported distributions, and its signing keys.
NVIDIA_REPO_DISTROS: dict[tuple[str, str], str] = {
    ("Ubuntu", "22.04"): "ubuntu2204",
    ("Ubuntu", "24.04"): "ubuntu2404",
    ("RedHat", "9"): "rhel9",
}
NVIDIA_REPO_KEYS = {"apt": "3bf863cc.pub", "dnf": "D42D0685.pub"}
NVIDIA_REPO_ARCHES = {"x86_64": "x86_64", "aarch64": "sbsa"}


class Plan(TypedDict):
    error: str
    source: str
    distro: str
    family: str  # "apt" or "dnf"
    version: str
    branch: int
    kernel_modules: str
    module_name: str
    repo: dict[str, str]
    dnf_module: str
    packages: list[str]
    kernel_module_packages: list[str]
    kernel_module_pins: list[str]
    fabricmanager_packages: list[str]
    dcgm_packages: list[str]
    holds: list[str]
    persistenced_service: str
    fabricmanager_service: str


def _distro(facts: dict[str, Any]) -> str:
    name = str(facts.get("distribution", "?"))
    return f"{name} {facts.get('distribution_version', '?')}".strip()


def _pin(family: str, name: str, version: str) -> str:
    """apt: name=550.163.01-* (any Debian revision); dnf: name-550.163.01 (any release)."""
    return f"{name}={version}-*" if family == "apt" else f"{name}-{version}"


def nvidia_driver_plan(
    facts: dict[str, Any],
    source: str = "auto",
    version: str = "",
    kernel_modules: str = "auto",
    nvswitches: int = 0,
    mirror_url: str = "",
    debian_mirror_url: str = "http://deb.debian.org/debian",
    dcgm: bool = True,
    open_recommended: bool = True,
) -> Plan:
    """The install plan for one host; plan['error'] says why it cannot be done ('' if it can)."""
    family_name = str(facts.get("os_family", ""))
    if source == "auto":
        source = "debian" if facts.get("distribution") == "Debian" else "nvidia_repo"
    flavour = kernel_modules if kernel_modules != "auto" else (
        "open" if open_recommended else "proprietary")
    plan: Plan = {
        "error": "", "source": source, "distro": _distro(facts), "family": "apt",
        "version": version, "branch": 0, "kernel_modules": flavour, "module_name": "nvidia",
        "repo": {}, "dnf_module": "", "packages": [], "kernel_module_packages": [],
        "kernel_module_pins": [],
        "fabricmanager_packages": [], "dcgm_packages": [], "holds": [],
        "persistenced_service": "nvidia-persistenced",
        "fabricmanager_service": "nvidia-fabricmanager",
    }
    if source == "debian":
        _debian(plan, facts, debian_mirror_url, nvswitches)
    elif source == "nvidia_repo":
        _nvidia_repo(plan, facts, family_name, mirror_url or NVIDIA_REPO_URL, nvswitches, dcgm)
    else:
        plan["error"] = (f"nvidia_driver_source: {source!r} is not a source. "
                         "Fix: set it to auto, debian or nvidia_repo.")
    if not plan["error"]:
        head = plan["version"].split(".", 1)[0]
        if not head.isdigit() or plan["version"].count(".") < 1:
            plan["error"] = (f"nvidia_driver_version: {plan['version']!r} is not a driver "
                             "version. Fix: set a full version such as 550.163.01.")
        else:
            plan["branch"] = int(head)
    return plan


def _debian(plan: Plan, facts: dict[str, Any], mirror: str, nvswitches: int) -> None:
    release = str(facts.get("distribution_release", ""))
    if facts.get("distribution") != "Debian" or release not in DEBIAN_DRIVER_VERSIONS:
        plan["error"] = (
            f"nvidia_driver_source: debian packages are supported on Debian 12/13, not on "
            f"{plan['distro']}. Fix: set nvidia_driver_source: nvidia_repo (Ubuntu 22.04/24.04,"
            " RHEL/Rocky 9).")
        return
    if nvswitches:
        plan["error"] = (
            f"nvidia_driver: this host has {nvswitches} NVSwitches, which need NVIDIA Fabric "
            "Manager at exactly the driver's version; Debian does not package it. Fix: set "
            "nvidia_driver_source: nvidia_repo on Ubuntu 22.04/24.04 or RHEL/Rocky 9.")
        return
    plan["version"] = plan["version"] or DEBIAN_DRIVER_VERSIONS[release]
    kmod = "nvidia-open-kernel-dkms" if plan["kernel_modules"] == "open" else "nvidia-kernel-dkms"
    names = [kmod, "nvidia-driver", "firmware-nvidia-gsp", "nvidia-smi", "nvidia-persistenced"]
    plan["module_name"] = ("nvidia-current-open" if plan["kernel_modules"] == "open"
                           else "nvidia-current")
    plan["repo"] = {"kind": "debian", "url": mirror.rstrip("/"), "suite": release,
                    "components": "contrib non-free non-free-firmware",
                    "path": "/etc/apt/sources.list.d/nvidia-driver-debian.sources"}
    plan["packages"] = [_pin("apt", n, plan["version"]) for n in names]
    plan["kernel_module_packages"] = [kmod]
    plan["kernel_module_pins"] = [_pin(plan["family"], kmod, plan["version"])]
    plan["holds"] = names


def _nvidia_repo(plan: Plan, facts: dict[str, Any], family_name: str, mirror: str,
                 nvswitches: int, dcgm: bool) -> None:
    if family_name == "RedHat":
        key = ("RedHat", str(facts.get("distribution_major_version", "")))
    else:
        key = (str(facts.get("distribution", "")), str(facts.get("distribution_version", "")))
    directory = NVIDIA_REPO_DISTROS.get(key)
    arch = NVIDIA_REPO_ARCHES.get(str(facts.get("architecture", "")))
    if directory is None or arch is None:
        plan["error"] = (
            f"nvidia_driver_source: NVIDIA's CUDA repository is used here for Ubuntu "
            f"22.04/24.04 and RHEL/Rocky 9 on x86_64/aarch64, not {plan['distro']} "
            f"{facts.get('architecture', '?')}. Fix: use one of those, or "
            "nvidia_driver_source: debian on Debian 12/13.")
        return
    plan["version"] = plan["version"] or NVIDIA_REPO_DEFAULT_VERSION
    branch = plan["version"].split(".", 1)[0]
    family = "dnf" if family_name == "RedHat" else "apt"
    plan["family"] = family
    base = f"{mirror.rstrip('/')}/{directory}/{arch}"
    plan["repo"] = {
        "kind": family, "url": base + "/", "key_url": f"{base}/{NVIDIA_REPO_KEYS[family]}",
        "id": f"cuda-{directory}-{arch}",
        "path": ("/etc/apt/sources.list.d/nvidia-cuda.sources" if family == "apt"
                 else "/etc/yum.repos.d/nvidia-cuda.repo"),
        "key_path": ("/etc/apt/keyrings/nvidia-cuda.asc" if family == "apt"
                     else "/etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-cuda"),
    }
    open_suffix = "-open" if plan["kernel_modules"] == "open" else ""
    if family == "apt":
        kmod = f"nvidia-dkms-{branch}{open_suffix}"
        names = [kmod, f"nvidia-headless-{branch}{open_suffix}", f"nvidia-utils-{branch}",
                 f"nvidia-compute-utils-{branch}"]
        fabric = [f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"]
    else:
        kmod = "kmod-nvidia-open-dkms" if open_suffix else "kmod-nvidia-latest-dkms"
        names = [kmod, "nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced"]
        fabric = ["nvidia-fabric-manager", "libnvidia-nscq"]
        plan["dnf_module"] = f"nvidia-driver:{branch}{open_suffix or '-dkms'}"
    plan["packages"] = [_pin(family, n, plan["version"]) for n in names]
    plan["kernel_module_packages"] = [kmod]
    plan["kernel_module_pins"] = [_pin(plan["family"], kmod, plan["version"])]
    plan["holds"] = list(names)
    if nvswitches:
        plan["fabricmanager_packages"] = [_pin(family, n, plan["version"]) for n in fabric]
        plan["holds"] += fabric
    if dcgm:
        plan["dcgm_packages"] = ["datacenter-gpu-manager"]


def nvidia_driver_branch_problem(plan: Plan, gpu_facts: dict[str, Any]) -> str:
    """'' when the plan's branch drives every detected GPU, else a message naming the fix."""
    needed = gpu_facts.get("min_driver_branch")
    if not needed or plan["branch"] >= int(needed):
        return ""
    counts: dict[str, int] = {}
    for gpu in gpu_facts.get("gpus", []):
        counts[gpu["model"]] = counts.get(gpu["model"], 0) + 1
    found = ", ".join(f"{n} x {model}" for model, n in sorted(counts.items()))
    fixes = [f"{DEBIAN_RELEASE_NAMES[rel]}, which packages {ver},"
             for rel, ver in DEBIAN_DRIVER_VERSIONS.items() if int(ver.split(".")[0]) >= needed]
    other = (f"use {' or '.join(fixes)} or "
             if fixes and plan["source"] == "debian" else "")
    return (
        f"nvidia_driver: the detected GPUs ({found}) need driver branch R{needed} or newer, "
        f"but nvidia_driver_version {plan['version']} ({plan['source']} source on "
        f"{plan['distro']}) is R{plan['branch']}. Fix: {other}set nvidia_driver_source: "
        f"nvidia_repo with nvidia_driver_version R{needed} or newer (e.g. "
        f"{NVIDIA_REPO_DEFAULT_VERSION}) on Ubuntu 22.04/24.04 or RHEL/Rocky 9.")


class FilterModule:
    """nvidia_driver_plan and nvidia_driver_branch_problem."""

    def filters(self) -> dict[str, Any]:
        return {
            "nvidia_driver_plan": nvidia_driver_plan,
            "nvidia_driver_branch_problem": nvidia_driver_branch_problem,
        }
