"""Filters of the nvidia_driver role: what to install from which source, and whether it can
drive the detected GPUs. Plain typed functions; the role's tasks only apply the result.

    {{ ansible_facts | nvidia_driver_plan(source, version, kernel_modules, nvswitches, ...) }}
    {{ plan | nvidia_driver_branch_problem(gpu_facts) }}   -> '' or the refusal message

Package names (R580, open kernel modules) follow NVIDIA's Driver Installation Guide
(https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/): its compute-only
(headless) sets per distribution, its dnf module streams on RHEL 9, and its fabric manager
packages. The role README lists each name with its source and what could not be confirmed.
"""

from __future__ import annotations

import re
from typing import Any, TypedDict

NVIDIA_REPO_URL = "https://developer.download.nvidia.com/compute/cuda/repos"

# The driver each Debian release packages (contrib/non-free), as of trixie 13 / bookworm 12.
DEBIAN_DRIVER_VERSIONS: dict[str, str] = {"bookworm": "535.261.03", "trixie": "550.163.01"}
DEBIAN_RELEASE_NAMES: dict[str, str] = {"bookworm": "Debian 12 (bookworm)",
                                        "trixie": "Debian 13 (trixie)"}
# Default pin for NVIDIA's CUDA repository: an R580 build. R580 is NVIDIA's long-term
# support branch (LTSB, supported to August 2028) and the branch CUDA 13.0 needs (>= 580.65.06).
NVIDIA_REPO_DEFAULT_VERSION = "580.105.08"
# The newest CUDA major.minor each driver branch runs without forward compatibility: the
# CUDA toolkit release notes' table "CUDA Toolkit and Corresponding Driver Versions"
# (12.2 GA: 535.54.03, 12.4 GA: 550.54.14, 12.8 GA: 570.26, 13.0 GA: 580.65.06).
DRIVER_BRANCH_MAX_CUDA: dict[int, str] = {535: "12.2", 550: "12.4", 570: "12.8", 580: "13.0"}
# NVIDIA's repository directory names of the supported distributions (keyed by
# distribution and MAJOR version), and its signing keys (the same apt key for Debian and
# Ubuntu directories).
NVIDIA_REPO_DISTROS: dict[tuple[str, str], str] = {
    ("Debian", "12"): "debian12",
    ("Debian", "13"): "debian13",
    ("Ubuntu", "22"): "ubuntu2204",
    ("Ubuntu", "24"): "ubuntu2404",
    ("RedHat", "9"): "rhel9",
}
NVIDIA_REPO_SUPPORTED = "Debian 12/13, Ubuntu 22.04/24.04 and RHEL/Rocky 9"
NVIDIA_REPO_KEYS = {"apt": "3bf863cc.pub", "dnf": "D42D0685.pub"}
NVIDIA_REPO_ARCHES = {"x86_64": "x86_64", "aarch64": "sbsa"}
SOURCES = ("auto", "debian", "nvidia_repo")


class Plan(TypedDict):
    error: str
    source: str
    distro: str
    family: str  # "apt" or "dnf"
    version: str
    branch: int
    max_cuda: str
    kernel_modules: str
    module_name: str
    repo: dict[str, str]
    dnf_module: str
    packages: list[str]
    kernel_module_packages: list[str]
    kernel_module_pins: list[str]
    fabricmanager_packages: list[str]
    dcgm_packages: list[str]
    compat_packages: list[str]
    compat_dir: str
    holds: list[str]
    persistenced_service: str
    fabricmanager_service: str


def _distro(facts: dict[str, Any]) -> str:
    name = str(facts.get("distribution", "?"))
    return f"{name} {facts.get('distribution_version', '?')}".strip()


def _pin(family: str, name: str, version: str) -> str:
    """apt: name=580.105.08-* (any Debian revision); dnf: name-580.105.08 (any release)."""
    return f"{name}={version}-*" if family == "apt" else f"{name}-{version}"


def max_cuda_for_branch(branch: int) -> str:
    """The newest CUDA major.minor a driver branch runs natively ('' below R535)."""
    known = [b for b in DRIVER_BRANCH_MAX_CUDA if b <= branch]
    return DRIVER_BRANCH_MAX_CUDA[max(known)] if known else ""


def nvidia_driver_plan(
    facts: dict[str, Any],
    source: str = "nvidia_repo",
    version: str = "",
    kernel_modules: str = "auto",
    nvswitches: int = 0,
    mirror_url: str = "",
    debian_mirror_url: str = "http://deb.debian.org/debian",
    dcgm: bool = True,
    open_recommended: bool = True,
    cuda_compat: bool = False,
    engine_cuda: str = "",
) -> Plan:
    """The install plan for one host; plan['error'] says why it cannot be done ('' if it can)."""
    family_name = str(facts.get("os_family", ""))
    if source == "auto":  # kept as an alias: NVIDIA's repository is the default everywhere
        source = "nvidia_repo"
    flavour = kernel_modules if kernel_modules != "auto" else (
        "open" if open_recommended else "proprietary")
    plan: Plan = {
        "error": "", "source": source, "distro": _distro(facts), "family": "apt",
        "version": version, "branch": 0, "max_cuda": "", "kernel_modules": flavour,
        "module_name": "nvidia", "repo": {}, "dnf_module": "", "packages": [],
        "kernel_module_packages": [], "kernel_module_pins": [],
        "fabricmanager_packages": [], "dcgm_packages": [], "compat_packages": [],
        "compat_dir": "", "holds": [],
        "persistenced_service": "nvidia-persistenced",
        "fabricmanager_service": "nvidia-fabricmanager",
    }
    if source not in SOURCES:
        plan["error"] = (f"nvidia_driver_source: {source!r} is not a source. "
                         "Fix: set it to nvidia_repo (the default), debian or auto.")
        return plan
    head = version.split(".", 1)[0]
    if version and (not head.isdigit() or version.count(".") < 1):
        plan["error"] = (f"nvidia_driver_version: {version!r} is not a driver version. Fix: "
                         f"set a full version such as {NVIDIA_REPO_DEFAULT_VERSION}, or leave it "
                         "empty for the source's default.")
        return plan
    compat_error = _compat_problem(source, cuda_compat, engine_cuda)
    if compat_error:
        plan["error"] = compat_error
        return plan
    if source == "debian":
        _debian(plan, facts, debian_mirror_url, nvswitches)
    else:
        _nvidia_repo(plan, facts, family_name, mirror_url or NVIDIA_REPO_URL, nvswitches, dcgm)
    if plan["error"]:
        return plan
    plan["branch"] = int(plan["version"].split(".", 1)[0])
    plan["max_cuda"] = max_cuda_for_branch(plan["branch"])
    if cuda_compat:
        dashed = engine_cuda.replace(".", "-")
        plan["compat_packages"] = [f"cuda-compat-{dashed}"]
        plan["compat_dir"] = f"/usr/local/cuda-{engine_cuda}/compat"
    return plan


def _compat_problem(source: str, cuda_compat: bool, engine_cuda: str) -> str:
    if engine_cuda and not re.fullmatch(r"\d+\.\d+", engine_cuda):
        return (f"nvidia_driver_engine_cuda: {engine_cuda!r} is not a CUDA major.minor. Fix: "
                "set it like \"13.0\" (the plan sets it through vllm_plan_engine_stack), "
                "or leave it empty.")
    if not cuda_compat:
        return ""
    if source != "nvidia_repo":
        return ("nvidia_driver_cuda_compat: true needs NVIDIA's cuda-compat package, which only "
                f"NVIDIA's CUDA repository has; nvidia_driver_source is {source}. Fix: set "
                "nvidia_driver_source: nvidia_repo, or nvidia_driver_cuda_compat: false.")
    if not engine_cuda:
        return ("nvidia_driver_cuda_compat: true needs the engine's CUDA to pick the package "
                "(cuda-compat-X-Y), but nvidia_driver_engine_cuda is empty. Fix: run the plan "
                "(vllm_plan sets it through vllm_plan_engine_stack) or set "
                "nvidia_driver_engine_cuda, e.g. \"13.0\".")
    return ""


def _debian(plan: Plan, facts: dict[str, Any], mirror: str, nvswitches: int) -> None:
    release = str(facts.get("distribution_release", ""))
    if facts.get("distribution") != "Debian" or release not in DEBIAN_DRIVER_VERSIONS:
        plan["error"] = (
            f"nvidia_driver_source: debian packages are supported on Debian 12/13, not on "
            f"{plan['distro']}. Fix: set nvidia_driver_source: nvidia_repo "
            f"({NVIDIA_REPO_SUPPORTED}).")
        return
    if nvswitches:
        plan["error"] = (
            f"nvidia_driver: this host has {nvswitches} NVSwitches, which need NVIDIA Fabric "
            "Manager at exactly the driver's version; Debian does not package it. Fix: set "
            f"nvidia_driver_source: nvidia_repo ({NVIDIA_REPO_SUPPORTED}).")
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
    distribution = "RedHat" if family_name == "RedHat" else str(facts.get("distribution", ""))
    major = str(facts.get("distribution_major_version", ""))
    directory = NVIDIA_REPO_DISTROS.get((distribution, major))
    if distribution == "Ubuntu" and str(facts.get("distribution_version", "")) not in (
            "22.04", "24.04"):
        directory = None  # Ubuntu's interim releases (24.10, ...) have no directory
    arch = NVIDIA_REPO_ARCHES.get(str(facts.get("architecture", "")))
    if directory is None or arch is None:
        plan["error"] = (
            f"nvidia_driver_source: NVIDIA's CUDA repository is used here for "
            f"{NVIDIA_REPO_SUPPORTED} on x86_64/aarch64, not {plan['distro']} "
            f"{facts.get('architecture', '?')}. Fix: use one of those"
            + (", or nvidia_driver_source: debian (Debian 12/13's own driver)."
               if distribution == "Debian" else "."))
        return
    plan["version"] = plan["version"] or NVIDIA_REPO_DEFAULT_VERSION
    branch = plan["version"].split(".", 1)[0]
    family = "dnf" if family_name == "RedHat" else "apt"
    plan["family"] = family
    base = f"{mirror.rstrip('/')}/{directory}/{arch}"
    plan["repo"] = {
        "kind": family, "url": base + "/", "key_url": f"{base}/{NVIDIA_REPO_KEYS[family]}",
        "id": f"cuda-{directory}-{arch}", "directory": directory,
        "path": ("/etc/apt/sources.list.d/nvidia-cuda.sources" if family == "apt"
                 else "/etc/yum.repos.d/nvidia-cuda.repo"),
        "key_path": ("/etc/apt/keyrings/nvidia-cuda.asc" if family == "apt"
                     else "/etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-cuda"),
        "preferences_path": ("/etc/apt/preferences.d/nvidia-cuda.pref" if family == "apt"
                             else ""),
    }
    is_open = plan["kernel_modules"] == "open"
    if distribution == "Ubuntu":
        # Ubuntu packaging: the branch is part of every name up to R580.
        kmod = f"nvidia-dkms-{branch}" + ("-open" if is_open else "")
        names = [kmod, f"libnvidia-compute-{branch}", f"nvidia-utils-{branch}",
                 f"nvidia-compute-utils-{branch}"]
        fabric = [f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"]
    elif distribution == "Debian":
        # NVIDIA's Debian packaging (not Debian's own: the kernel module package is
        # nvidia-kernel-open-dkms there, nvidia-open-kernel-dkms in Debian's archive).
        kmod = "nvidia-kernel-open-dkms" if is_open else "nvidia-kernel-dkms"
        names = [kmod, "nvidia-driver-cuda", "nvidia-persistenced"]
        fabric = ["nvidia-fabricmanager", "libnvidia-nscq"]
    else:
        kmod = "kmod-nvidia-open-dkms" if is_open else "kmod-nvidia-latest-dkms"
        names = [kmod, "nvidia-driver-cuda", "nvidia-persistenced"]
        fabric = ["nvidia-fabricmanager", "libnvidia-nscq"]
        plan["dnf_module"] = f"nvidia-driver:{branch}" + ("-open" if is_open else "-dkms")
    plan["packages"] = [_pin(family, n, plan["version"]) for n in names]
    plan["kernel_module_packages"] = [kmod]
    plan["kernel_module_pins"] = [_pin(plan["family"], kmod, plan["version"])]
    plan["holds"] = list(names)
    if nvswitches:
        plan["fabricmanager_packages"] = [_pin(family, n, plan["version"]) for n in fabric]
        plan["holds"] += fabric
    if dcgm:
        # DCGM 4 is split by CUDA major; R580 drivers are CUDA 13 drivers.
        plan["dcgm_packages"] = ["datacenter-gpu-manager-4-cuda13" if int(branch) >= 580
                                 else "datacenter-gpu-manager-4-cuda12"]


def nvidia_driver_branch_problem(plan: Plan, gpu_facts: dict[str, Any]) -> str:
    """'' when the plan's branch drives every detected GPU, else a message naming the fix."""
    needed = gpu_facts.get("min_driver_branch")
    if not needed or plan["branch"] >= int(needed):
        return ""
    counts: dict[str, int] = {}
    for gpu in gpu_facts.get("gpus", []):
        counts[gpu["model"]] = counts.get(gpu["model"], 0) + 1
    found = ", ".join(f"{n} x {model}" for model, n in sorted(counts.items()))
    fixes = [f"{DEBIAN_RELEASE_NAMES[rel]}, which packages {ver}"
             for rel, ver in DEBIAN_DRIVER_VERSIONS.items()
             if int(ver.split(".", maxsplit=1)[0]) >= needed]
    other = (f" Or, for an engine whose CUDA that driver runs, use {' or '.join(fixes)}."
             if fixes and plan["source"] == "debian" else "")
    return (
        f"nvidia_driver: the detected GPUs ({found}) need driver branch R{needed} or newer, "
        f"but nvidia_driver_version {plan['version']} ({plan['source']} source on "
        f"{plan['distro']}) is R{plan['branch']}. Fix: set nvidia_driver_source: "
        f"nvidia_repo with nvidia_driver_version R{needed} or newer (empty = "
        f"{NVIDIA_REPO_DEFAULT_VERSION}, R580) on {NVIDIA_REPO_SUPPORTED}.{other}")


class FilterModule:
    """nvidia_driver_plan and nvidia_driver_branch_problem."""

    def filters(self) -> dict[str, Any]:
        return {
            "nvidia_driver_plan": nvidia_driver_plan,
            "nvidia_driver_branch_problem": nvidia_driver_branch_problem,
        }
